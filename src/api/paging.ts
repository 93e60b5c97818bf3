import { createHash } from 'node:crypto';
import { CairnError, ErrorCode, type Clock, type Revision } from '../base/index.js';
import type { StoreReader } from '../store/index.js';

/**
 * Paged lists (issue 16, item 5): the bounds of a page, the opaque continue token, and the
 * bounded cache of store snapshots that serves the later pages of a list at the revision of
 * its first page.
 */

/** The paging limits of a node (docs/api.md "Paging"; docs/security.md "Paging"). */
export interface PagingOptions {
  /** Most items in one page; a larger `limit` is clamped to it, an absent one means it. Default 1,000. */
  readonly maxPageItems?: number;
  /**
   * Most bytes (the resources' JSON) in one page: a page ends before the item that would pass
   * it (a page holds at least one item). Default 2 MiB, under gRPC's default 4 MiB receive limit.
   */
  readonly maxPageBytes?: number;
  /** Most snapshots held for unfinished paged lists (one per revision); the oldest is dropped first. Default 64. */
  readonly maxSnapshots?: number;
  /** How long a held snapshot serves continue tokens, from the first page, in ms. Default 300,000 (5 minutes). */
  readonly snapshotTtlMs?: number;
}

export const PAGING_DEFAULTS = {
  maxPageItems: 1_000,
  maxPageBytes: 2 * 1024 * 1024,
  maxSnapshots: 64,
  snapshotTtlMs: 5 * 60_000,
} as const satisfies Required<PagingOptions>;

/** Validated paging limits; throws INVALID_ARGUMENT naming the option. */
export function pagingLimits(opts: { readonly [K in keyof PagingOptions]?: PagingOptions[K] | undefined } = {}): Required<PagingOptions> {
  const out = { ...PAGING_DEFAULTS, ...(stripUndefined(opts) as PagingOptions) };
  for (const [k, v] of Object.entries(out)) {
    if (!Number.isSafeInteger(v) || v < 1) throw new CairnError(ErrorCode.INVALID_ARGUMENT, `paging option ${k} must be a positive integer, got ${String(v)}`);
  }
  return out;
}

function stripUndefined<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}

/** What a continue token carries: the revision of the first page, the last key sent, and which list it belongs to. */
export interface ContinueToken {
  readonly revision: Revision;
  readonly after: string;
  /** `filterHash` of the list's filter: a token is good only for the list that issued it. */
  readonly filter: string;
}

const TOKEN_VERSION = 1;
/** Longer than any token this server issues (a key is at most ~600 characters). */
const MAX_TOKEN_CHARS = 4096;

function invalidToken(why: string): CairnError {
  return new CairnError(ErrorCode.INVALID_ARGUMENT, `the continue token is not valid: ${why}; start the list over without it`);
}

/**
 * A short hash of a list's filter (and of anything else that decides what the list returns,
 * such as the caller's identity once lists are filtered per caller). Stable across nodes and
 * restarts: the same filter always hashes the same.
 */
export function filterHash(filter: unknown): string {
  return createHash('sha256').update(canonicalJson(filter)).digest('base64url').slice(0, 22);
}

/** JSON with object keys sorted, so equal filters built in another key order hash the same. */
function canonicalJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(',')}]`;
  if (v !== null && typeof v === 'object') {
    const o = v as Record<string, unknown>;
    return `{${Object.keys(o)
      .filter((k) => o[k] !== undefined)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonicalJson(o[k])}`)
      .join(',')}}`;
  }
  return JSON.stringify(v) ?? 'null';
}

/** The opaque token: base64url of a small JSON object. Opaque to clients; its form may change. */
export function encodeContinue(t: ContinueToken): string {
  return Buffer.from(JSON.stringify({ v: TOKEN_VERSION, r: String(t.revision), k: t.after, f: t.filter }), 'utf8').toString('base64url');
}

/** Parses a token from a client; anything malformed is INVALID_ARGUMENT (never a crash). */
export function decodeContinue(token: unknown): ContinueToken {
  if (typeof token !== 'string' || token === '') throw invalidToken('it must be a non-empty string');
  if (token.length > MAX_TOKEN_CHARS) throw invalidToken(`it is longer than ${MAX_TOKEN_CHARS} characters`);
  if (!/^[A-Za-z0-9_-]+$/.test(token)) throw invalidToken('it is not base64url');
  let o: unknown;
  try {
    o = JSON.parse(Buffer.from(token, 'base64url').toString('utf8'));
  } catch {
    throw invalidToken('it does not decode');
  }
  if (typeof o !== 'object' || o === null || Array.isArray(o)) throw invalidToken('it does not decode to an object');
  const r = o as Record<string, unknown>;
  if (r['v'] !== TOKEN_VERSION) throw invalidToken('unknown token version');
  const rev = r['r'];
  if (typeof rev !== 'string' || !/^[1-9][0-9]{0,15}$/.test(rev) || !Number.isSafeInteger(Number(rev))) throw invalidToken('bad revision');
  const after = r['k'];
  if (typeof after !== 'string' || after === '') throw invalidToken('bad position');
  const filter = r['f'];
  if (typeof filter !== 'string' || !/^[A-Za-z0-9_-]{22}$/.test(filter)) throw invalidToken('bad filter hash');
  for (const k of Object.keys(r)) if (!['v', 'r', 'k', 'f'].includes(k)) throw invalidToken(`unknown field ${JSON.stringify(k)}`);
  return { revision: Number(rev) as Revision, after, filter };
}

/** The page size a request gets: absent or 0 means the maximum; above the maximum is clamped to it. */
export function pageLimit(limit: number | undefined, max: number): number {
  if (limit === undefined || limit === 0) return max;
  if (!Number.isSafeInteger(limit) || limit < 0) throw new CairnError(ErrorCode.INVALID_ARGUMENT, `limit must be a non-negative integer, got ${String(limit)}`);
  return Math.min(limit, max);
}

interface Held {
  readonly view: StoreReader;
  readonly expiresMs: number;
}

/**
 * The snapshots that serve the later pages of unfinished paged lists, one per revision (lists
 * at the same revision share one). Bounded by count (the oldest is dropped to make room) and by
 * age (a snapshot serves tokens for `ttlMs` after it was taken; expired ones are dropped on the
 * next use of the cache). A snapshot is O(1) to take and shares every unchanged node and
 * resource with the live store, so what one holds is the resources changed or deleted since
 * its revision. `sweep()` is also called periodically by the node. Nothing here survives a restart, and other nodes have their own: a token for a
 * revision not held here is COMPACTED, and the client starts the list over.
 */
export class SnapshotCache {
  private readonly held = new Map<Revision, Held>();

  constructor(
    private readonly clock: Pick<Clock, 'monotonicMs'>,
    private readonly maxSnapshots: number,
    private readonly ttlMs: number,
  ) {}

  get size(): number {
    return this.held.size;
  }

  /** Holds `view` (a snapshot) for its revision, unless one is held already; returns the one held. */
  hold(view: StoreReader): StoreReader {
    this.sweep();
    const have = this.held.get(view.revision);
    if (have !== undefined) return have.view;
    while (this.held.size >= this.maxSnapshots) {
      const oldest = this.held.keys().next();
      if (oldest.done === true) break;
      this.held.delete(oldest.value);
    }
    // Map order is insertion order, and expiry is insertion time + ttl: the first is the oldest.
    this.held.set(view.revision, { view, expiresMs: this.clock.monotonicMs() + this.ttlMs });
    return view;
  }

  /** The snapshot held at `revision`, or undefined (never held here, dropped or expired). */
  get(revision: Revision): StoreReader | undefined {
    this.sweep();
    return this.held.get(revision)?.view;
  }

  /** Drops the expired snapshots. */
  sweep(): void {
    const now = this.clock.monotonicMs();
    for (const [rev, h] of this.held) {
      if (h.expiresMs > now) break;
      this.held.delete(rev);
    }
  }
}
