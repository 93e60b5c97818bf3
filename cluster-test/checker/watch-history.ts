/**
 * The committed history of a fault run, derived from what its observers saw, and the check of
 * every watcher against it (README.md, "Watchers under faults").
 *
 * Under faults there is no trustworthy reference watcher: every watcher is under test. The
 * history is the union of every observation of a committed change, each cross-checked:
 *
 * - the writers' acknowledgements (an upsert at its returned version with the stored value; a
 *   delete's returned last state, an upsert at that version),
 * - every change and delete event every watcher received, every resource of every initial state
 *   (the upsert at its version), every delete's last state (the upsert at its version),
 * - a final linearizable List after healing (each resource: the upsert at its version).
 *
 * Observations of one (revision, resource) must agree (`disagreement`); one entry changes one
 * resource (`two-keys-one-revision`); every value of the workload's own keys is one a write
 * wrote, that did not fail, at one revision only; per resource, the sequence of changes must be
 * possible (uids, deletes between incarnations), and so must each acknowledged delete and
 * compare-and-swap. Every change in the result was observed by someone and agrees with every
 * other observation, so a watcher that covered its revision and did not receive it really
 * missed a committed change. What no one observed is not in it: `coverage` says which ranges
 * are known complete (those some watcher vouched for), and a doubt it leaves (a resource a
 * watcher's initial state lacks, which an unobserved delete could explain) is not reported.
 */
import { CairnError, ErrorCode } from '../../src/base/index.js';
import {
  HistoryIndex,
  canonicalJson,
  checkHistoryAgainstList,
  checkWatchers,
  describeKey,
  filterMatches,
  formatWatchAnomaly,
  identity,
  type CommittedChange,
  type CommittedHistory,
  type CoverageRange,
  type JsonValue,
  type ListSnapshot,
  type StateEntry,
  type WatcherRecord,
  type WatchersCheckResult,
  type WatchFilterSpec,
  type WatchKey,
} from './watch-checker.js';

/**
 * One write of the workload, as its writer saw it. Values (here, in watch events and in Lists)
 * are the projection `{uid, version, data}` of a resource.
 */
export interface WatchWrite {
  /** Which writer, for reports. */
  readonly process?: number;
  /** `create` (create-only), `update` (compare-and-swap on a version read), `upsert` (blind) or `delete`. */
  readonly f: 'create' | 'update' | 'upsert' | 'delete';
  readonly key: WatchKey;
  /** Upserts: the data written. Each write's data is unique (it carries the write's tag), so it names the write. */
  readonly data?: JsonValue;
  /** A conditional write's expected version: 0 (absent), or the revision of the key's last change. */
  readonly expectedVersion?: number;
  /** `ok` acknowledged, `fail` definitely not applied, `info` unknown. */
  readonly status: 'ok' | 'fail' | 'info';
  /** An ok upsert: its revision (the returned version) and the stored value. */
  readonly revision?: number;
  readonly value?: JsonValue;
  /** An ok delete: whether it deleted something; if so, the last stored state and its revision. */
  readonly deleted?: boolean;
  readonly lastRevision?: number;
  readonly lastValue?: JsonValue;
  /** Milliseconds since the run started. */
  readonly start?: number;
  readonly end?: number;
}

export interface WatchRunInput {
  readonly watchers: readonly WatcherRecord[];
  readonly writes: readonly WatchWrite[];
  /** A linearizable List taken after every write ended and every fault was healed. */
  readonly finalList: ListSnapshot;
  /** What the final List selected; it must include every watcher's filter. */
  readonly listFilter: WatchFilterSpec;
  /** The workload's own keys: every write of them is in `writes`, so every value must come from one. */
  readonly owned: WatchFilterSpec;
  /** The state before anything was observed. Default: empty at revision 0 (a fresh cluster). */
  readonly start?: { readonly revision: number; readonly resources: readonly StateEntry[] };
  /** One log entry changes at most one resource (true when no write cascades). Default true. */
  readonly singleChangePerRevision?: boolean;
  /** Per watcher, at most. Default 50. */
  readonly maxAnomalies?: number;
}

export const HistoryProblemKind = {
  /** Two observations of one (revision, resource) differ in kind or value. */
  disagreement: 'disagreement',
  /** Two resources changed at one revision, where an entry changes one. */
  twoKeysOneRevision: 'two-keys-one-revision',
  /** A value of the workload's keys that no write wrote (to that key). */
  unknownValue: 'unknown-value',
  /** The value of a write that definitely failed. */
  failedWriteVisible: 'failed-write-visible',
  /** One write's value at two revisions. */
  appliedTwice: 'applied-twice',
  /** A value whose version is not the revision of its change. */
  wrongVersion: 'wrong-version',
  /** More deletes of a key than delete requests that may have deleted it. */
  unexplainedDelete: 'unexplained-delete',
  /** A sequence of changes of one resource that cannot happen in a range observers covered. */
  inconsistent: 'inconsistent',
  /** An acknowledged delete that the history does not have where watchers covered it. */
  acknowledgedDeleteMissing: 'acknowledged-delete-missing',
  /** An acknowledged compare-and-swap whose expected version was not the key's last change. */
  casViolated: 'cas-violated',
  /** The history's state at the final List's revision differs from the List. */
  finalList: 'final-list',
} as const;
export type HistoryProblemKind = (typeof HistoryProblemKind)[keyof typeof HistoryProblemKind];

export interface HistoryProblem {
  readonly kind: HistoryProblemKind;
  readonly revision?: number;
  /** `type/partition/namespace/name`. */
  readonly key?: string;
  readonly message: string;
}

export interface DerivedHistory {
  readonly history: CommittedHistory;
  readonly problems: readonly HistoryProblem[];
  /** Changes in the history, and how many of them an acknowledgement, a watcher or the List saw. */
  readonly changes: number;
  readonly acknowledged: number;
  readonly watched: number;
  readonly listed: number;
  /** Writes whose outcome was unknown, and how many of them the history shows applied (upserts only: a delete has no tag). */
  readonly unknownWrites: number;
  readonly unknownApplied: number;
}

interface Variant {
  readonly kind: 'upsert' | 'delete';
  readonly key: WatchKey;
  value: JsonValue | undefined;
  readonly sources: string[];
  acked: boolean;
}

function fieldOf(v: JsonValue | undefined, k: string): JsonValue | undefined {
  return v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as { readonly [x: string]: JsonValue })[k] : undefined;
}

function short(v: JsonValue | undefined, max = 120): string {
  const s = canonicalJson(v);
  return s.length <= max ? s : `${s.slice(0, max - 3)}...`;
}

/** Builds the history from every observation (see the top of this file) and cross-checks it. */
export function deriveWatchHistory(input: WatchRunInput): DerivedHistory {
  const problems: HistoryProblem[] = [];
  const start = input.start ?? { revision: 0, resources: [] };
  /** revision|identity -> the variants observed there. */
  const observed = new Map<string, Variant[]>();
  const sourceKinds = new Map<string, Set<'ack' | 'watch' | 'list'>>();

  const observe = (revision: number, kind: 'upsert' | 'delete', key: WatchKey, value: JsonValue | undefined, source: string, from: 'ack' | 'watch' | 'list'): void => {
    if (revision <= start.revision) return; // before the history: the start state speaks for it
    const rk = `${revision}|${identity(key)}`;
    let vs = observed.get(rk);
    if (!vs) observed.set(rk, (vs = []));
    let kinds = sourceKinds.get(rk);
    if (!kinds) sourceKinds.set(rk, (kinds = new Set()));
    kinds.add(from);
    const text = canonicalJson(value);
    // A delete whose last state is unknown agrees with any delete.
    const same = vs.find((v) => v.kind === kind && (value === undefined || v.value === undefined || canonicalJson(v.value) === text));
    if (same) {
      same.sources.push(source);
      if (same.value === undefined) same.value = value;
      same.acked ||= from === 'ack';
    } else vs.push({ kind, key, value, sources: [source], acked: from === 'ack' });
  };

  // ---- Observations ------------------------------------------------------------------------
  const writes = input.writes;
  writes.forEach((w, i) => {
    const label = `write #${i}${w.process !== undefined ? ` (p${w.process})` : ''}`;
    if (w.status !== 'ok') return;
    if (w.f === 'delete') {
      if (w.deleted === true && w.lastRevision !== undefined) observe(w.lastRevision, 'upsert', w.key, w.lastValue, `the last state ${label} deleted`, 'ack');
    } else if (w.revision !== undefined) observe(w.revision, 'upsert', w.key, w.value, `${label}'s acknowledgement`, 'ack');
  });
  const coverage: CoverageRange[] = [];
  for (const r of input.finalList.resources) {
    observe(r.revision, 'upsert', r.key, r.value, `the final List`, 'list');
    // Listed at its version: no change of it since.
    coverage.push({ filter: input.listFilter, key: r.key, afterRevision: r.revision, throughRevision: input.finalList.revision });
  }
  let maxSeen = Math.max(start.revision, input.finalList.revision);
  for (const w of input.watchers) {
    w.connections.forEach((c, ci) => {
      let tail: number | undefined = c.from.kind === 'resume' ? c.from.gtRevision : c.from.kind === 'at-tail' ? c.from.notAfter : undefined;
      let inInitial = c.from.kind === 'initial';
      let hi: number | undefined;
      /** The initial state as built so far: each resource in it had no change between its version and the tail. */
      const snapshot = new Map<string, { key: WatchKey; revision: number }>();
      for (let ei = 0; ei < c.events.length; ei++) {
        const e = c.events[ei];
        if (e === undefined || e.type === 'error') break;
        maxSeen = Math.max(maxSeen, e.revision);
        const where = `watcher ${w.id} connection ${ci} event #${ei}`;
        if (e.type === 'change' || e.type === 'delete') {
          if (inInitial) {
            if (e.type === 'delete') snapshot.delete(identity(e.key));
            else snapshot.set(identity(e.key), { key: e.key, revision: e.revision });
          }
          observe(e.revision, e.type === 'delete' ? 'delete' : 'upsert', e.key, e.value, inInitial ? `${where} (initial state)` : where, 'watch');
          if (e.type === 'delete') {
            const v = Number(fieldOf(e.value, 'version'));
            if (Number.isSafeInteger(v) && v > 0) observe(v, 'upsert', e.key, e.value, `the last state in ${where}`, 'watch');
          }
        } else if (e.type === 'tail' && inInitial) {
          inInitial = false;
          tail = e.revision;
          for (const r of snapshot.values()) coverage.push({ filter: w.filter, key: r.key, afterRevision: r.revision, throughRevision: e.revision });
        }
        if (!inInitial) hi = Math.max(hi ?? e.revision, e.revision);
      }
      // What the connection vouched for: every matching change after its start point, up to the last revision it had.
      if (tail !== undefined && hi !== undefined && hi > tail) coverage.push({ filter: w.filter, afterRevision: tail, throughRevision: hi });
    });
  }

  // ---- One history: agreement -------------------------------------------------------------
  const changes: CommittedChange[] = [];
  let acknowledged = 0;
  let watched = 0;
  let listed = 0;
  for (const [rk, vs] of observed) {
    // The writer's acknowledgement wins; otherwise the variant most observers saw.
    const chosen = [...vs].sort((a, b) => Number(b.acked) - Number(a.acked) || b.sources.length - a.sources.length)[0] as Variant;
    const revision = Number(rk.slice(0, rk.indexOf('|')));
    if (vs.length > 1) {
      problems.push({
        kind: 'disagreement',
        revision,
        key: describeKey(chosen.key),
        message: `observers disagree on ${describeKey(chosen.key)} at ${revision}: ${vs.map((v) => `${v.kind} ${short(v.value)} (${v.sources.slice(0, 2).join('; ')}${v.sources.length > 2 ? `; +${v.sources.length - 2}` : ''})`).join(' vs ')}`,
      });
    }
    changes.push({ revision, kind: chosen.kind, key: chosen.key, ...(chosen.value !== undefined ? { value: chosen.value } : {}) });
    const kinds = sourceKinds.get(rk) as Set<string>;
    if (kinds.has('ack')) acknowledged++;
    if (kinds.has('watch')) watched++;
    if (kinds.has('list')) listed++;
  }
  changes.sort((a, b) => a.revision - b.revision || identity(a.key).localeCompare(identity(b.key)));
  if (input.singleChangePerRevision ?? true) {
    for (let i = 1; i < changes.length; i++) {
      const a = changes[i - 1] as CommittedChange;
      const b = changes[i] as CommittedChange;
      if (a.revision === b.revision) {
        const srcs = (c: CommittedChange): string => (observed.get(`${c.revision}|${identity(c.key)}`)?.[0]?.sources ?? []).slice(0, 2).join('; ');
        problems.push({ kind: 'two-keys-one-revision', revision: a.revision, key: describeKey(b.key), message: `two resources changed at ${a.revision}, where one entry changes one: ${describeKey(a.key)} (${srcs(a)}) and ${describeKey(b.key)} (${srcs(b)})` });
      }
    }
  }
  const completeThrough = Math.max(maxSeen, ...changes.map((c) => c.revision));
  const history: CommittedHistory = { start: { revision: start.revision, resources: [...start.resources] }, changes, completeThrough, coverage };
  const h = new HistoryIndex(history);

  // ---- Provenance: the workload's values come from its writes ------------------------------
  const byData = new Map<string, { write: WatchWrite; index: number }>();
  const deletesMayHave = new Map<string, number>();
  let unknownWrites = 0;
  writes.forEach((w, index) => {
    if (w.status === 'info') unknownWrites++;
    const id = identity(w.key);
    if (w.f === 'delete') {
      if (w.status === 'info' || (w.status === 'ok' && w.deleted === true)) deletesMayHave.set(id, (deletesMayHave.get(id) ?? 0) + 1);
      return;
    }
    const k = `${id}|${canonicalJson(w.data)}`;
    if (byData.has(k)) throw new CairnError(ErrorCode.INVALID_ARGUMENT, `writes #${byData.get(k)?.index ?? -1} and #${index} write the same data ${short(w.data)} to ${describeKey(w.key)}; each write's data must be unique`);
    byData.set(k, { write: w, index });
  });
  const revisionOfWrite = new Map<number, number>();
  const deletesSeen = new Map<string, { n: number; key: WatchKey; last: number }>();
  const unknownAppliedSet = new Set<number>();
  for (const c of changes) {
    const name = describeKey(c.key);
    const version = fieldOf(c.value, 'version');
    if (c.kind === 'upsert' && version !== undefined && version !== String(c.revision)) {
      problems.push({ kind: 'wrong-version', revision: c.revision, key: name, message: `${name} at ${c.revision} has version ${JSON.stringify(version)}` });
    }
    if (!filterMatches(input.owned, c.key)) continue;
    const id = identity(c.key);
    if (c.kind === 'delete') {
      const d = deletesSeen.get(id) ?? { n: 0, key: c.key, last: c.revision };
      d.n++;
      d.last = c.revision;
      deletesSeen.set(id, d);
      continue;
    }
    const found = byData.get(`${id}|${canonicalJson(fieldOf(c.value, 'data'))}`);
    if (!found) {
      problems.push({ kind: 'unknown-value', revision: c.revision, key: name, message: `${name} at ${c.revision} holds ${short(fieldOf(c.value, 'data'))}, which no write wrote to it; ${h.near(id, c.revision)}` });
      continue;
    }
    const wr = `write #${found.index}${found.write.process !== undefined ? ` (p${found.write.process}, ${found.write.f})` : ''}`;
    if (found.write.status === 'fail') problems.push({ kind: 'failed-write-visible', revision: c.revision, key: name, message: `${name} at ${c.revision} holds the data of ${wr}, which failed (definitely not applied)` });
    if (found.write.status === 'info') unknownAppliedSet.add(found.index);
    const other = revisionOfWrite.get(found.index);
    if (other !== undefined) problems.push({ kind: 'applied-twice', revision: c.revision, key: name, message: `${name} holds the data of ${wr} at ${other} and again at ${c.revision}` });
    else revisionOfWrite.set(found.index, c.revision);
  }
  for (const [id, d] of deletesSeen) {
    const may = deletesMayHave.get(id) ?? 0;
    if (d.n > may) problems.push({ kind: 'unexplained-delete', revision: d.last, key: describeKey(d.key), message: `${describeKey(d.key)} is deleted ${d.n} times in the history, but only ${may} delete request(s) may have deleted it` });
  }

  // ---- Per resource: a possible sequence ---------------------------------------------------
  const perKey = new Map<string, CommittedChange[]>();
  for (const c of changes) {
    const id = identity(c.key);
    let l = perKey.get(id);
    if (!l) perKey.set(id, (l = []));
    l.push(c);
  }
  const startById = new Map(start.resources.map((r) => [identity(r.key), r] as const));
  for (const [id, list] of perKey) {
    const s = startById.get(id);
    let prev: { revision: number; kind: 'upsert' | 'delete' | 'absent'; value: JsonValue | undefined } = s ? { revision: s.revision, kind: 'upsert', value: s.value } : { revision: start.revision, kind: 'absent', value: undefined };
    for (const c of list) {
      const name = describeKey(c.key);
      const covered = h.covers(c.key, prev.revision, c.revision - 1);
      const between = `between ${prev.revision} and ${c.revision}, which watchers covered`;
      const uid = fieldOf(c.value, 'uid');
      const prevUid = fieldOf(prev.value, 'uid');
      if (c.kind === 'delete') {
        if (prev.kind !== 'upsert') {
          if (covered) problems.push({ kind: 'inconsistent', revision: c.revision, key: name, message: `${name} is deleted at ${c.revision}, but it ${prev.kind === 'delete' ? `was already deleted at ${prev.revision}` : 'never existed'} and no create of it is known ${between}` });
        } else {
          const lastVersion = Number(fieldOf(c.value, 'version'));
          if (c.value !== undefined && prev.value !== undefined && Number.isSafeInteger(lastVersion) && lastVersion !== prev.revision) {
            problems.push({ kind: 'inconsistent', revision: c.revision, key: name, message: `the delete of ${name} at ${c.revision} returned its state at ${lastVersion}, but its last change before was at ${prev.revision}` });
          }
        }
      } else if (prev.kind === 'upsert') {
        if (uid !== undefined && prevUid !== undefined && uid !== prevUid && covered) {
          problems.push({ kind: 'inconsistent', revision: c.revision, key: name, message: `${name} has uid ${JSON.stringify(prevUid)} at ${prev.revision} and ${JSON.stringify(uid)} at ${c.revision} with no delete ${between}` });
        }
      } else if (prev.kind === 'delete' && uid !== undefined && uid === prevUid) {
        problems.push({ kind: 'inconsistent', revision: c.revision, key: name, message: `${name} is created again at ${c.revision} with the uid ${JSON.stringify(uid)} it had before its delete at ${prev.revision}` });
      }
      prev = { revision: c.revision, kind: c.kind, value: c.value };
    }
  }

  // ---- Acknowledged deletes and compare-and-swaps ------------------------------------------
  const lastBefore = (id: string, revision: number): CommittedChange | undefined => {
    let found: CommittedChange | undefined;
    for (const c of perKey.get(id) ?? []) {
      if (c.revision >= revision) break;
      found = c;
    }
    return found;
  };
  writes.forEach((w, i) => {
    if (w.status !== 'ok') return;
    const id = identity(w.key);
    const name = describeKey(w.key);
    const label = `write #${i}${w.process !== undefined ? ` (p${w.process})` : ''}`;
    if (w.f === 'delete') {
      if (w.deleted !== true || w.lastRevision === undefined) return;
      const next = (perKey.get(id) ?? []).find((c) => c.revision > (w.lastRevision as number));
      if (next && next.kind === 'upsert' && h.covers(w.key, w.lastRevision, next.revision - 1)) {
        problems.push({ kind: 'acknowledged-delete-missing', revision: next.revision, key: name, message: `${label} deleted ${name} after its state at ${w.lastRevision}, but the history's next change of it is the upsert at ${next.revision}, with no delete between though watchers covered that range` });
      }
      return;
    }
    if (w.expectedVersion === undefined || w.revision === undefined) return;
    const prev = lastBefore(id, w.revision);
    const e = w.expectedVersion;
    const what = `${label} (${w.f} of ${name} expecting version ${e}, acknowledged at ${w.revision})`;
    if (e === 0) {
      if (prev && prev.kind === 'upsert' && h.covers(w.key, prev.revision, w.revision - 1)) {
        problems.push({ kind: 'cas-violated', revision: w.revision, key: name, message: `${what}: ${name} existed (upsert at ${prev.revision}) and no delete is known before the write, though watchers covered that range` });
      }
    } else if (prev && prev.revision > e) {
      problems.push({ kind: 'cas-violated', revision: w.revision, key: name, message: `${what}: the history changes ${name} at ${prev.revision} (${prev.kind}), after the expected version` });
    } else if (prev && prev.revision === e && prev.kind === 'delete') {
      problems.push({ kind: 'cas-violated', revision: w.revision, key: name, message: `${what}: ${name} was deleted at ${e}` });
    } else if ((!prev || prev.revision < e) && h.covers(w.key, prev?.revision ?? start.revision, w.revision - 1)) {
      problems.push({ kind: 'cas-violated', revision: w.revision, key: name, message: `${what}: no change of ${name} at ${e} is known, though watchers covered that range` });
    }
  });

  // ---- The final List ----------------------------------------------------------------------
  for (const d of checkHistoryAgainstList(history, input.finalList, input.listFilter)) {
    problems.push({ kind: 'final-list', revision: input.finalList.revision, message: `the history's state at the final List's revision ${input.finalList.revision} differs from the List: ${d}` });
  }

  return { history, problems, changes: changes.length, acknowledged, watched, listed, unknownWrites, unknownApplied: unknownAppliedSet.size };
}

export interface WatchRunResult {
  readonly valid: boolean;
  readonly derived: DerivedHistory;
  readonly watchers: WatchersCheckResult;
  /** Initial states after the first, summed over the watchers: how often a watcher started over (a reset). */
  readonly resets: number;
}

/**
 * Derives the history, then checks every watcher against it with the final List: order,
 * duplicates, gaps within what each covered, values, and its final state. Valid when the
 * history has no problem and no watcher an anomaly.
 */
export function checkWatchRun(input: WatchRunInput): WatchRunResult {
  const derived = deriveWatchHistory(input);
  const watchers = checkWatchers(derived.history, input.watchers, () => input.finalList, input.maxAnomalies);
  const resets = input.watchers.reduce((n, w) => n + Math.max(0, w.connections.length - 1), 0);
  return { valid: derived.problems.length === 0 && watchers.valid, derived, watchers, resets };
}

/** The problems and anomalies, at most `limit` lines (the first of each kind first). */
export function formatWatchRun(r: WatchRunResult, limit = 12): string[] {
  const all = [...r.derived.problems.map((p) => `history, ${p.kind}: ${p.message}`), ...r.watchers.anomalies.map(formatWatchAnomaly)];
  const kinds = new Set<string>();
  const firsts: string[] = [];
  const rest: string[] = [];
  for (const line of all) {
    const kind = line.slice(0, line.indexOf(':'));
    const k = kind.slice(kind.lastIndexOf(' ') + 1);
    if (kinds.has(k)) rest.push(line);
    else {
      kinds.add(k);
      firsts.push(line);
    }
  }
  const out = [...firsts, ...rest];
  return out.length > limit ? [...out.slice(0, limit), `... and ${out.length - limit} more`] : out;
}

export type { ListSnapshot, StateEntry, WatcherRecord, WatchFilterSpec, WatchKey, JsonValue };
