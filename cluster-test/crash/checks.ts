/**
 * What a verify report must satisfy, given the writes acknowledged so far. Problems are
 * collected as sentences (one assertion per check, not one per resource).
 */
import type { VerifyReport } from './durable-node.js';
import type { Ack } from './node-process.js';

const NAME_RE = /^w(\d+)-(\d+)$/;

export interface StoreCheck {
  /** Broken invariants: each one a sentence naming the resource and what is wrong. */
  readonly problems: string[];
  /** Acknowledged writes that are not in the store (in acknowledgement order). */
  readonly missing: Ack[];
  /** Stored writes that were never acknowledged (allowed: the ack was lost with the process). */
  readonly unacked: number;
}

function parseName(name: string): { round: number; seq: number } | undefined {
  const m = NAME_RE.exec(name);
  return m === null ? undefined : { round: Number(m[1]), seq: Number(m[2]) };
}

/**
 * - every resource is one the writer made: name w<round>-<seq>, data exactly {name, n: seq};
 * - versions are distinct and at most the store revision;
 * - in version (= commit) order, (round, seq) strictly increases: each writer proposes in seq
 *   order and propose() appends synchronously, and rounds run one after another;
 * - every acknowledged write is stored with the version it was acknowledged with (any that
 *   is not stored is returned in `missing`, for the caller to judge).
 */
export function checkStore(report: VerifyReport, acked: readonly Ack[]): StoreCheck {
  const problems: string[] = [];
  const byName = new Map<string, { version: number; data: unknown }>();
  const versions = new Set<number>();
  const ordered: { version: number; round: number; seq: number; name: string }[] = [];
  for (const r of report.resources) {
    if (byName.has(r.name)) problems.push(`${r.name} is stored twice`);
    byName.set(r.name, { version: r.version, data: r.data });
    const id = parseName(r.name);
    if (id === undefined) {
      problems.push(`${r.name} is not a name the writer uses`);
      continue;
    }
    const d = r.data as Record<string, unknown> | null;
    if (d === null || typeof d !== 'object' || Object.keys(d).length !== 2 || d['name'] !== r.name || d['n'] !== id.seq) {
      problems.push(`${r.name} holds ${JSON.stringify(r.data)}, not {"name":"${r.name}","n":${id.seq}}`);
    }
    if (versions.has(r.version)) problems.push(`version ${r.version} is used twice (${r.name})`);
    versions.add(r.version);
    if (r.version > report.revision) problems.push(`${r.name} has version ${r.version}, above the store revision ${report.revision}`);
    ordered.push({ version: r.version, ...id, name: r.name });
  }
  ordered.sort((a, b) => a.version - b.version);
  for (let i = 1; i < ordered.length; i++) {
    const a = ordered[i - 1];
    const b = ordered[i];
    if (a === undefined || b === undefined) continue;
    if (b.round < a.round || (b.round === a.round && b.seq <= a.seq)) {
      problems.push(`commit order is broken: ${a.name} (version ${a.version}) comes before ${b.name} (version ${b.version})`);
    }
  }
  const missing: Ack[] = [];
  let stillAcked = 0;
  for (const ack of acked) {
    const stored = byName.get(ack.name);
    if (stored === undefined) {
      missing.push(ack);
      continue;
    }
    stillAcked++;
    if (stored.version !== ack.version) problems.push(`${ack.name} was acknowledged at version ${ack.version} but is stored at version ${stored.version}`);
  }
  return { problems, missing, unacked: report.resources.length - stillAcked };
}

/** Acks of one writer must carry strictly increasing versions, all above `after`. */
export function checkAckOrder(acks: readonly Ack[], after: number): string[] {
  const problems: string[] = [];
  let prev = after;
  for (const a of acks) {
    if (a.version <= prev) problems.push(`${a.name} was acknowledged at version ${a.version}, not above the previous ack's ${prev}`);
    prev = a.version;
  }
  return problems;
}
