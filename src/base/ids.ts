/**
 * Branded identifiers. A brand makes `Term`, `LogIndex`, `Revision` and `NodeId` distinct
 * types at compile time while they stay plain numbers and strings at run time, so a term can
 * never be passed where a log index is expected.
 */
declare const brand: unique symbol;
export type Brand<T, B extends string> = T & { readonly [brand]: B };

/** A node's stable identity in the cluster (a short DNS-label-like string, e.g. "n1"). */
export type NodeId = Brand<string, 'NodeId'>;
/** A Raft term (thesis §3.3). 0 means "no term yet". */
export type Term = Brand<number, 'Term'>;
/** A position in the Raft log. 0 means "before the first entry". */
export type LogIndex = Brand<number, 'LogIndex'>;
/** A store revision: the log index of the entry that made a change. */
export type Revision = Brand<number, 'Revision'>;

export const NO_NODE = '' as NodeId;

const NODE_ID_RE = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;

export function nodeId(s: string): NodeId {
  if (!NODE_ID_RE.test(s)) {
    throw new TypeError(`node id ${JSON.stringify(s)} is not a lowercase DNS label of at most 63 characters`);
  }
  return s as NodeId;
}

function checkCount(kind: string, n: number): void {
  if (!Number.isSafeInteger(n) || n < 0) {
    throw new TypeError(`${kind} must be a non-negative safe integer, got ${String(n)}`);
  }
}

export function term(n: number): Term {
  checkCount('term', n);
  return n as Term;
}

export function logIndex(n: number): LogIndex {
  checkCount('log index', n);
  return n as LogIndex;
}

export function revision(n: number): Revision {
  checkCount('revision', n);
  return n as Revision;
}
