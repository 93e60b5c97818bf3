import { cairn } from '../gen/resource.js';
import { ClientErrorCode, CairnClientError } from './errors.js';
import type { MutationOptions, ResourceId, ResourceRef, StatusBody, WriteBody } from './types.js';
import { conditionToMsg, refToMsg, statusToMsg } from './wire.js';

import pb = cairn.resource.v1;

/**
 * Transactions (docs/api.md "Transactions"): compare any number of resources, then apply one
 * of two branches of writes, status writes and deletes, all or nothing, at one revision.
 *
 * ```ts
 * const r = await client
 *   .txn()
 *   .if(Compare.version(korn, '12'), Compare.absent(lock))
 *   .then(Op.write(korn, { data: { name: 'Korn', genre: 'metal' } }), Op.write(lock, { data: { holder: 'me' } }))
 *   .else(Op.delete(stale))
 *   .commit();
 * if (!r.succeeded) console.log('comparison', r.failedComparison, 'did not hold');
 * ```
 */

/** One comparison, evaluated at the transaction's place in the log. Build with `Compare`. */
export type TxnCompare =
  | { readonly target: 'version'; readonly ref: ResourceRef; readonly version: string }
  | { readonly target: 'exists' | 'absent'; readonly ref: ResourceRef }
  | { readonly target: 'uid'; readonly ref: ResourceRef; readonly uid: string };

export const Compare = {
  /** The stored version is `version` (a decimal string; `"0"`: no such resource). */
  version: (ref: ResourceRef, version: string): TxnCompare => ({ target: 'version', ref, version }),
  /** A resource of that name is stored. */
  exists: (ref: ResourceRef): TxnCompare => ({ target: 'exists', ref }),
  /** No resource of that name is stored. */
  absent: (ref: ResourceRef): TxnCompare => ({ target: 'absent', ref }),
  /** A resource of that name is stored, with this uid (that incarnation). */
  uid: (ref: ResourceRef, uid: string): TxnCompare => ({ target: 'uid', ref, uid }),
} as const;

/** One op of a branch. Build with `Op`. */
export type TxnOp =
  | { readonly op: 'write'; readonly ref: ResourceRef; readonly body: WriteBody }
  | { readonly op: 'delete'; readonly ref: ResourceRef; readonly version?: string }
  | { readonly op: 'status'; readonly ref: ResourceRef; readonly key: string; readonly body: StatusBody };

export const Op = {
  /** A write: the type's hooks run at apply; with `body.version`, only at that version (CAS). */
  write: <D>(ref: ResourceRef, body: WriteBody<D>): TxnOp => ({ op: 'write', ref, body }),
  /** A delete (with what it owns); with `version`, only at that version. */
  delete: (ref: ResourceRef, opts: { readonly version?: string } = {}): TxnOp => ({ op: 'delete', ref, ...(opts.version !== undefined ? { version: opts.version } : {}) }),
  /** A status write (`ref.uid` required). */
  writeStatus: (ref: ResourceRef, key: string, body: StatusBody): TxnOp => ({ op: 'status', ref, key, body }),
} as const;

/**
 * A resource as a transaction's result names it: id (with uid), version and generation, no
 * body (docs/api.md "Transactions"). Read the bodies at the result's revision if needed.
 */
export interface TxnResourceRef {
  readonly id: ResourceId;
  /** The revision (decimal) of its last change. */
  readonly version: string;
  readonly generation: string;
}

/** What one op of the applied branch did (slim: `TxnResourceRef`). */
export type TxnOpResult =
  | { readonly op: 'write'; readonly resource: TxnResourceRef; readonly changed: boolean }
  /** `deleted`: removed; `deleting`: finalizers hold it back (resource is the marked state); neither: nothing to delete (resource null). */
  | { readonly op: 'delete'; readonly deleted: boolean; readonly deleting: boolean; readonly resource: TxnResourceRef | null }
  | { readonly op: 'status'; readonly resource: TxnResourceRef };

export interface TxnResult {
  /** Every comparison held: the then branch applied; false: the else branch did (possibly nothing). */
  readonly succeeded: boolean;
  /** The revision (decimal) of the transaction's entry: every change it made has it. */
  readonly revision: string;
  /** When not succeeded: the index of the first comparison that did not hold. */
  readonly failedComparison?: number;
  /** One per op of the branch that applied, in order. */
  readonly results: readonly TxnOpResult[];
}

/** What a builder hands the client to send. */
export interface TxnSpec {
  readonly compare: readonly TxnCompare[];
  readonly then: readonly TxnOp[];
  readonly else: readonly TxnOp[];
}

/**
 * Collects a transaction: `.if(...)`, `.then(...)`, `.else(...)` (each may be called more than
 * once; parts are appended), then `.commit()` sends it as one call (one request id, reused by
 * every retry, so it applies at most once). Not a promise: `await`ing the builder itself is an
 * error that says to call `commit()`.
 */
/**
 * The most comparisons, and ops per branch, a builder (and `cairn txn`) takes before sending:
 * far above any server's `--txn-max-ops` (default 128) yet well below what spreading an array
 * into a call can take (about 100,000 arguments throw RangeError), so a runaway list gets a
 * clear error here rather than a stack error or a huge request.
 */
export const TXN_CLIENT_MAX_PARTS = 10_000;

/** Appends `items` to `into` without spreading them into a call, refusing more than TXN_CLIENT_MAX_PARTS in all. */
function appendParts<T>(into: T[], items: readonly T[], what: string): void {
  if (into.length + items.length > TXN_CLIENT_MAX_PARTS) {
    throw new CairnClientError(
      ClientErrorCode.INVALID_ARGUMENT,
      `${what}: the transaction would have ${into.length + items.length} ${what === 'if' ? 'comparisons' : `${what} ops`}; the client takes at most ${TXN_CLIENT_MAX_PARTS} (servers allow far fewer: --txn-max-ops, default 128)`,
    );
  }
  for (const x of items) into.push(x);
}

export class TxnBuilder {
  private readonly compares: TxnCompare[] = [];
  private readonly thens: TxnOp[] = [];
  private readonly elses: TxnOp[] = [];
  private committed = false;

  constructor(private readonly send: (spec: TxnSpec, opts: MutationOptions) => Promise<TxnResult>) {}

  if(...compares: TxnCompare[]): this {
    this.open('if');
    appendParts(this.compares, compares, 'if');
    return this;
  }

  then(...ops: TxnOp[]): this {
    // `await builder` calls then(resolve, reject): say what was meant instead of queueing functions.
    if (ops.some((o) => typeof o === 'function')) throw new CairnClientError(ClientErrorCode.INVALID_ARGUMENT, 'a transaction builder is not a promise: call .commit() to send it');
    this.open('then');
    appendParts(this.thens, ops, 'then');
    return this;
  }

  else(...ops: TxnOp[]): this {
    this.open('else');
    appendParts(this.elses, ops, 'else');
    return this;
  }

  /** Sends the transaction. Throws the failing op's error (with `details.failed_op`, `details.branch`) when an op fails at apply. */
  commit(opts: MutationOptions = {}): Promise<TxnResult> {
    this.open('commit');
    this.committed = true;
    return this.send({ compare: this.compares.slice(), then: this.thens.slice(), else: this.elses.slice() }, opts);
  }

  private open(what: string): void {
    if (this.committed) throw new CairnClientError(ClientErrorCode.INVALID_ARGUMENT, `${what}: this transaction was already committed; build a new one with client.txn()`);
  }
}

function invalid(msg: string): CairnClientError {
  return new CairnClientError(ClientErrorCode.INVALID_ARGUMENT, msg);
}

const TARGET = {
  version: pb.TxnCompare.Target.TARGET_VERSION,
  exists: pb.TxnCompare.Target.TARGET_EXISTS,
  absent: pb.TxnCompare.Target.TARGET_ABSENT,
  uid: pb.TxnCompare.Target.TARGET_UID,
} as const;

/** The data of a write as JSON text (the wire's `data_json`). */
export function dataJsonOf(data: unknown): string {
  let dataJson: string | undefined;
  try {
    dataJson = JSON.stringify(data);
  } catch (e) {
    throw invalid(`data is not JSON-serializable: ${e instanceof Error ? e.message : String(e)}`);
  }
  if (dataJson === undefined) throw invalid('data is required and must be JSON-serializable');
  return dataJson;
}

/** A WriteRequest message (without its request id) for `ref` and `body`: what `write` sends, and a transaction's write op. */
export function writeMsg(ref: ResourceRef, body: WriteBody): pb.WriteRequest.$Properties {
  const status: Record<string, ReturnType<typeof statusToMsg>> = {};
  for (const [k, s] of Object.entries(body.status ?? {})) status[k] = statusToMsg(s);
  return {
    id: refToMsg(ref),
    dataJson: dataJsonOf(body.data),
    metadata: body.metadata === undefined ? null : { entries: { ...body.metadata } },
    owner: body.owner === undefined ? null : refToMsg(body.owner),
    finalizers: body.finalizers === undefined ? null : { items: [...body.finalizers] },
    version: body.version ?? '',
    status,
    ...(body.lease !== undefined ? { lease: body.lease } : {}),
  };
}

export function txnRequestMsg(spec: TxnSpec, requestId: string): pb.TxnRequest.$Properties {
  const op = (o: TxnOp): pb.TxnOp.$Properties => {
    switch (o.op) {
      case 'write':
        return { write: writeMsg(o.ref, o.body) };
      case 'delete':
        return { delete: { id: refToMsg(o.ref), version: o.version ?? '' } };
      case 'status':
        return { writeStatus: { id: refToMsg(o.ref), key: o.key, observedGeneration: o.body.observed_generation, conditions: o.body.conditions.map(conditionToMsg), version: o.body.version ?? '' } };
    }
  };
  return {
    compare: spec.compare.map((c) => {
      const target = TARGET[c.target];
      if (target === undefined) throw invalid(`a comparison's target must be version, exists, absent or uid, got ${JSON.stringify((c as { target: unknown }).target)}`);
      // The uid of a comparison is its own field; the id names the resource only.
      const id = refToMsg({ ...c.ref, uid: '' });
      return { id, target, version: c.target === 'version' ? c.version : '', uid: c.target === 'uid' ? c.uid : '' };
    }),
    thenOps: spec.then.map(op),
    elseOps: spec.else.map(op),
    requestId,
  };
}

export function txnResultFromMsg(m: pb.TxnResponse): TxnResult {
  const results = m.results.map((r): TxnOpResult => {
    if (r.write) return { op: 'write', resource: txnRefFromMsg(r.write.resource), changed: r.write.changed === true };
    if (r.delete) {
      const res = r.delete.resource;
      return { op: 'delete', deleted: r.delete.deleted === true, deleting: r.delete.deleting === true, resource: res === null || res === undefined ? null : txnRefFromMsg(res) };
    }
    if (r.writeStatus) return { op: 'status', resource: txnRefFromMsg(r.writeStatus.resource) };
    throw new CairnClientError(ClientErrorCode.INTERNAL, 'the server\'s answer is malformed: a transaction result with no write, delete or write_status');
  });
  const failed = m.failedComparison;
  return {
    succeeded: m.succeeded,
    revision: m.revision,
    ...(failed !== null && failed !== undefined && !m.succeeded ? { failedComparison: Number(failed) } : {}),
    results,
  };
}

function txnRefFromMsg(m: pb.ITxnResourceRef | null | undefined): TxnResourceRef {
  if (m === null || m === undefined || m.id === null || m.id === undefined) {
    throw new CairnClientError(ClientErrorCode.INTERNAL, 'the server\'s answer is malformed: a transaction result names no resource');
  }
  const id = m.id;
  return { id: { type: id.type ?? '', tenancy: { partition: id.tenancy?.partition ?? '', namespace: id.tenancy?.namespace ?? '' }, name: id.name ?? '', uid: id.uid ?? '' }, version: m.version ?? '', generation: m.generation ?? '' };
}
