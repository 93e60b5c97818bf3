import { ulid } from './ids.js';
import { leaseAclTarget } from './lease-acl.js';
import { CairnError, ErrorCode, isCairnError, parseErrorCode, type Clock, type Revision } from '../base/index.js';
import { CommandType, leaseIdProblem, txnCompareHolds, type ApplyResult, type TxnResourceRef, type DecodedCommand, type DeleteCommand, type PutCommand, type TxnCommand, type TxnCompare, type TxnOp, type WriteCommand, type WriteStatusCommand } from '../fsm/index.js';
import type { Coordinator, Consistency } from '../replica/index.js';
import { START_WAIT_DEFAULT_MS, type ServedNode } from './served-node.js';
import { WILDCARD, type Page, type StoreReader, type Condition, type JsonValue, type ListQuery, type Resource, type ResourceId, type StatusEntry, type Tenancy, type TypeRef } from '../store/index.js';
import type { AccessVerb, ProposedResource, RegisteredType, TypeRegistry } from './registry.js';
import { formatTypeRef, parseTypeString } from './registry.js';
import { MAX_RESTORE_BYTES } from './snapshot-routes.js';
import { resourceToJson, type ResourceIdJson, type ResourceJson } from './resource-json.js';
import { AccessControl, isAclType, targetOf } from './acl.js';
import { authorize, type AclTarget, type AclVerb, type Identity, type PeerIdentity } from '../auth/index.js';
import { PAGING_DEFAULTS, SnapshotCache, decodeContinue, encodeContinue, filterHash, pageLimit, pagingLimits, type PagingOptions } from './paging.js';

/** Limits on what a resource may carry (API.md "limits"). */
export const LIMITS = {
  nameLength: 63,
  metadataEntries: 64,
  metadataKeyLength: 253,
  metadataValueLength: 1024,
  metadataBytes: 16 * 1024,
  finalizers: 32,
  finalizerLength: 253,
  dataBytes: 1024 * 1024,
  statusKeyLength: 253,
  conditions: 32,
  conditionTextLength: 1024,
  /** Most items in one List answer by default: the page maximum (paging.ts; `--list-max-page` changes it); lists page beyond it. */
  listLimit: PAGING_DEFAULTS.maxPageItems,
  casRetries: 8,
} as const;

const DNS_LABEL = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;
const QUALIFIED = /^[A-Za-z0-9]([A-Za-z0-9._/-]{0,251}[A-Za-z0-9])?$/;

function invalid(msg: string): CairnError {
  return new CairnError(ErrorCode.INVALID_ARGUMENT, msg);
}

export function checkDnsLabel(v: unknown, what: string): string {
  if (typeof v !== 'string' || !DNS_LABEL.test(v)) {
    throw invalid(`${what} ${JSON.stringify(v)} must be a lowercase DNS label (a-z, 0-9, '-'; at most ${LIMITS.nameLength} characters)`);
  }
  return v;
}

/** Normalizes a tenancy for a type's scope: empty fields default to `default`; fields the scope lacks must be empty. */
export function normalizeTenancy(t: RegisteredType, partition: string | undefined, namespace: string | undefined, allowWildcard = false): Tenancy {
  const field = (v: string | undefined, what: string, used: boolean): string => {
    if (!used) {
      if (v !== undefined && v !== '') throw invalid(`type ${t.group}.${t.groupVersion}.${t.kind} is ${t.scope}-scoped: ${what} must be empty, got ${JSON.stringify(v)}`);
      return '';
    }
    if (v === undefined || v === '') return 'default';
    if (allowWildcard && v === WILDCARD) return WILDCARD;
    return checkDnsLabel(v, what);
  };
  return {
    partition: field(partition, 'partition', t.scope !== 'cluster'),
    namespace: field(namespace, 'namespace', t.scope === 'namespace'),
  };
}

export function parseVersion(v: unknown, what = 'version'): Revision | undefined {
  if (v === undefined || v === null || v === '') return undefined;
  if (typeof v !== 'string' || !/^(0|[1-9][0-9]{0,15})$/.test(v)) throw invalid(`${what} must be a decimal string such as "0" or "42", got ${JSON.stringify(v)}`);
  const n = Number(v);
  if (!Number.isSafeInteger(n)) throw invalid(`${what} is out of range`);
  return n as Revision;
}

// The bearer token parser lives in limits.ts (the HTTP server needs it too, without a cycle).
export { bearerToken } from './limits.js';

/** An idempotency key (HTTP Idempotency-Key, gRPC request_id): empty means none. */
export function checkRequestId(v: string | undefined): string | undefined {
  if (v === undefined || v === '') return undefined;
  if (v.length > 128 || !/^[\x21-\x7e]+$/.test(v)) throw invalid('a request id (Idempotency-Key, request_id) must be at most 128 printable ASCII characters');
  return v;
}

function checkMetadata(v: unknown): Record<string, string> {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw invalid('metadata must be an object of string values');
  const out: Record<string, string> = {};
  let bytes = 0;
  const entries = Object.entries(v as Record<string, unknown>);
  if (entries.length > LIMITS.metadataEntries) throw invalid(`metadata has ${entries.length} entries; at most ${LIMITS.metadataEntries}`);
  for (const [k, val] of entries) {
    if (!QUALIFIED.test(k)) throw invalid(`metadata key ${JSON.stringify(k)} is not a valid key (letters, digits, '.', '_', '-', '/'; at most ${LIMITS.metadataKeyLength})`);
    if (typeof val !== 'string') throw invalid(`metadata value for ${JSON.stringify(k)} must be a string`);
    if (val.length > LIMITS.metadataValueLength) throw invalid(`metadata value for ${JSON.stringify(k)} is over ${LIMITS.metadataValueLength} characters`);
    bytes += k.length + val.length;
    out[k] = val;
  }
  if (bytes > LIMITS.metadataBytes) throw invalid(`metadata is over ${LIMITS.metadataBytes} bytes`);
  return out;
}

function checkFinalizers(v: unknown): string[] {
  if (!Array.isArray(v)) throw invalid('finalizers must be an array of strings');
  if (v.length > LIMITS.finalizers) throw invalid(`at most ${LIMITS.finalizers} finalizers`);
  return v.map((f, i) => {
    if (typeof f !== 'string' || !QUALIFIED.test(f)) throw invalid(`finalizers[${i}] must be a qualified name`);
    return f;
  });
}

function checkConditions(v: unknown): Condition[] {
  if (!Array.isArray(v)) throw invalid('conditions must be an array');
  if (v.length > LIMITS.conditions) throw invalid(`at most ${LIMITS.conditions} conditions`);
  return v.map((c, i) => {
    if (typeof c !== 'object' || c === null || Array.isArray(c)) throw invalid(`conditions[${i}] must be an object`);
    const o = c as Record<string, unknown>;
    for (const k of Object.keys(o)) if (!['type', 'state', 'reason', 'message'].includes(k)) throw invalid(`conditions[${i}] has unknown field ${JSON.stringify(k)}`);
    const text = (x: unknown, what: string, required: boolean): string => {
      if (x === undefined && !required) return '';
      if (typeof x !== 'string' || x.length > LIMITS.conditionTextLength || (required && x === '')) throw invalid(`conditions[${i}].${what} must be a ${required ? 'non-empty ' : ''}string`);
      return x;
    };
    const state = o['state'];
    if (state !== 'TRUE' && state !== 'FALSE' && state !== 'UNKNOWN') throw invalid(`conditions[${i}].state must be TRUE, FALSE or UNKNOWN`);
    return { type: text(o['type'], 'type', true), state, reason: text(o['reason'], 'reason', false), message: text(o['message'], 'message', false) };
  });
}

/**
 * Walks user JSON without recursion (so hostile nesting cannot overflow the stack) and refuses
 * what cannot be stored faithfully: nesting deeper than the store allows, strings or keys that
 * are not well-formed UTF-16 (lone surrogates would be silently replaced on the way to the
 * log; I-JSON forbids them), and `__proto__` keys. Returns the JSON size in bytes.
 */
/** With the `u` flag a surrogate pair is one code point, so this matches only lone surrogates. */
const LONE_SURROGATE = /\p{Surrogate}/u;

export function checkJson(v: unknown, what: string, maxDepth = 100): number {
  const stack: Array<{ v: unknown; depth: number }> = [{ v, depth: 0 }];
  let bytes = 0;
  while (stack.length > 0) {
    const { v: x, depth } = stack.pop() as { v: unknown; depth: number };
    if (depth > maxDepth) throw invalid(`${what} is nested deeper than ${maxDepth} levels`);
    if (typeof x === 'string') {
      if (LONE_SURROGATE.test(x)) throw invalid(`${what} contains a string that is not well-formed Unicode (a lone surrogate)`);
      bytes += x.length + 2;
    } else if (typeof x === 'number') {
      if (!Number.isFinite(x)) throw invalid(`${what} contains a non-finite number`);
      bytes += 8;
    } else if (x === null || typeof x === 'boolean') {
      bytes += 4;
    } else if (Array.isArray(x)) {
      bytes += 2;
      for (const e of x) stack.push({ v: e, depth: depth + 1 });
    } else if (typeof x === 'object') {
      bytes += 2;
      for (const [k, e] of Object.entries(x as Record<string, unknown>)) {
        if (k === '__proto__') throw invalid(`${what} has the key "__proto__", which cannot be stored`);
        if (LONE_SURROGATE.test(k)) throw invalid(`${what} has a key that is not well-formed Unicode`);
        bytes += k.length + 3;
        stack.push({ v: e, depth: depth + 1 });
      }
    } else {
      throw invalid(`${what} contains a value that is not JSON`);
    }
  }
  return bytes;
}

/**
 * A deep copy of JSON data for a type's mutate hook, which edits `data` in place: the caller's
 * object (a controller's, or the request's for a retry) must not change. Plain objects, arrays
 * and primitives (what `checkJson` let through, and all that JSON text parses to) are copied
 * directly, several times faster than the `JSON.parse(JSON.stringify(v))` this replaces; any
 * other object (a Date from an in-process caller, say) sends the whole value through that JSON
 * round trip instead, so the result is the same as before in every case.
 */
export function copyJson(v: unknown): JsonValue {
  const out = copyPlain(v, 0);
  return out === NOT_PLAIN ? (JSON.parse(JSON.stringify(v)) as JsonValue) : out;
}

/** Whether `v` is made of plain objects, arrays and JSON primitives only (then it needs no JSON round trip). */
export function isPlainJson(v: unknown): boolean {
  const stack: unknown[] = [v];
  while (stack.length > 0) {
    const x = stack.pop();
    if (typeof x !== 'object' || x === null) {
      if (x === undefined || typeof x === 'function' || typeof x === 'symbol' || typeof x === 'bigint' || (typeof x === 'number' && !Number.isFinite(x))) return false;
      continue;
    }
    if (Array.isArray(x)) {
      for (let i = 0; i < x.length; i++) stack.push(x[i]);
      continue;
    }
    const proto: unknown = Object.getPrototypeOf(x);
    if (proto !== Object.prototype && proto !== null) return false;
    for (const k of Object.keys(x)) stack.push((x as Record<string, unknown>)[k]);
  }
  return true;
}

const NOT_PLAIN = Symbol('not plain JSON');

function copyPlain(v: unknown, depth: number): JsonValue | typeof NOT_PLAIN {
  if (typeof v !== 'object' || v === null) return typeof v === 'number' && !Number.isFinite(v) ? NOT_PLAIN : (v as JsonValue);
  // checkJson bounds the depth first (100); this bound only keeps a direct caller's stack safe.
  if (depth > 200) return NOT_PLAIN;
  if (Array.isArray(v)) {
    const a: JsonValue[] = new Array<JsonValue>(v.length);
    for (let i = 0; i < v.length; i++) {
      const e = copyPlain(v[i], depth + 1);
      if (e === NOT_PLAIN || e === undefined) return NOT_PLAIN;
      a[i] = e;
    }
    return a;
  }
  const proto: unknown = Object.getPrototypeOf(v);
  if (proto !== Object.prototype && proto !== null) return NOT_PLAIN;
  const o: Record<string, JsonValue> = {};
  for (const k of Object.keys(v)) {
    const e = copyPlain((v as Record<string, unknown>)[k], depth + 1);
    if (e === NOT_PLAIN || e === undefined || k === '__proto__') return NOT_PLAIN;
    o[k] = e;
  }
  return o;
}

export interface WriteRequest {
  readonly type: string;
  readonly partition?: string | undefined;
  readonly namespace?: string | undefined;
  readonly name: string;
  readonly data: unknown;
  readonly metadata?: unknown;
  readonly owner?: ResourceIdJson | null | undefined;
  readonly finalizers?: unknown;
  readonly version?: string | undefined;
  readonly status?: unknown;
  readonly uid?: string | undefined;
  /**
   * The lease to attach the resource to (docs/api.md "Leases"): absent keeps the current
   * attachment (none on create), '' detaches. The lease must exist when the write applies.
   */
  readonly lease?: string | undefined;
}

export interface DeleteRequest {
  readonly type: string;
  readonly partition?: string | undefined;
  readonly namespace?: string | undefined;
  readonly name: string;
  readonly version?: string | undefined;
  readonly uid?: string | undefined;
}

export interface WriteStatusRequest {
  readonly type: string;
  readonly partition?: string | undefined;
  readonly namespace?: string | undefined;
  readonly name: string;
  readonly key: string;
  readonly uid: string;
  readonly observedGeneration: string;
  readonly conditions: unknown;
  readonly version?: string | undefined;
}

export interface ReadRequest {
  readonly type: string;
  readonly partition?: string | undefined;
  readonly namespace?: string | undefined;
  readonly name: string;
  readonly uid?: string | undefined;
  readonly consistency?: Consistency;
}

export interface ListRequest {
  readonly type: string;
  readonly partition?: string | undefined;
  readonly namespace?: string | undefined;
  readonly namePrefix?: string | undefined;
  readonly ownerUid?: string | undefined;
  readonly consistency?: Consistency;
  /** Page size: absent or 0 means the page maximum; larger is clamped to it (paging.ts). */
  readonly limit?: number | undefined;
  /** The `continue` of the previous page: the next page, at that page's revision. */
  readonly continue?: string | undefined;
}

/** A page of ListByOwner. */
export interface ListByOwnerRequest {
  readonly ownerUid: string;
  readonly consistency?: Consistency;
  readonly limit?: number | undefined;
  readonly continue?: string | undefined;
}

/**
 * The limits on one transaction (docs/api.md "Transactions"): comparisons, ops per branch,
 * and the data of all its writes together. The whole request is also within the transport's
 * bound (the HTTP body limit, the gRPC message limit).
 */
export interface TxnLimits {
  /** Most comparisons. Default 128 (etcd's --max-txn-ops). */
  readonly maxCompares: number;
  /** Most ops in each branch (then, else). Default 128. */
  readonly maxOps: number;
  /** Most bytes of data (as `checkJson` measures it) over every write of the request. Default 4 MiB. */
  readonly maxDataBytes: number;
}

export const TXN_LIMITS_DEFAULT: TxnLimits = { maxCompares: 128, maxOps: 128, maxDataBytes: 4 * 1024 * 1024 };

/** One comparison of a transaction: `target` is version, exists, absent or uid. */
export interface TxnCompareRequest {
  readonly target: string;
  readonly type: string;
  readonly partition?: string | undefined;
  readonly namespace?: string | undefined;
  readonly name: string;
  /** For `version`: a decimal string ("0" = absent). */
  readonly version?: string | undefined;
  /** For `uid`. */
  readonly uid?: string | undefined;
}

/** One op of a transaction's branch: the request of the single operation, with its kind. */
export type TxnOpRequest = ({ readonly op: 'write' } & WriteRequest) | ({ readonly op: 'delete' } & DeleteRequest) | ({ readonly op: 'status' } & WriteStatusRequest);

export interface TxnRequest {
  readonly compare?: readonly TxnCompareRequest[] | undefined;
  readonly then?: readonly TxnOpRequest[] | undefined;
  readonly else?: readonly TxnOpRequest[] | undefined;
}

/**
 * What one op of the applied branch did, slim (`TxnResourceRef`: id, version, generation; no
 * body): clients read the bodies at the answer's revision if they need them.
 */
export type TxnOpAnswer =
  | { readonly op: 'write'; readonly resource: TxnResourceRef; readonly changed: boolean }
  | { readonly op: 'delete'; readonly deleted: boolean; readonly deleting: boolean; readonly resource: TxnResourceRef | null }
  | { readonly op: 'status'; readonly resource: TxnResourceRef };

export interface TxnAnswer {
  /** Every comparison held: the then branch applied (else the else branch). */
  readonly succeeded: boolean;
  /** The revision of the transaction's entry (whether or not it changed anything). */
  readonly revision: Revision;
  /** When not succeeded: the index of the first comparison that did not hold. */
  readonly failedComparison?: number;
  readonly results: readonly TxnOpAnswer[];
}

/** The limits of a transaction, checked before anything else (INVALID_ARGUMENT, naming the limit). */
export function checkTxnSize(limits: TxnLimits, compares: number, thenOps: number, elseOps: number): void {
  if (compares > limits.maxCompares) throw new CairnError(ErrorCode.INVALID_ARGUMENT, `the transaction has ${compares} comparisons; at most ${limits.maxCompares}`, { limit: limits.maxCompares });
  for (const [branch, n] of [['then', thenOps], ['else', elseOps]] as const) {
    if (n > limits.maxOps) throw new CairnError(ErrorCode.INVALID_ARGUMENT, `the transaction's ${branch} branch has ${n} ops; at most ${limits.maxOps}`, { limit: limits.maxOps });
  }
}

/** A ULID: 26 characters of Crockford's base32. */
const ULID = /^[0-9A-HJKMNP-TV-Z]{26}$/;

/** What `checkTxnOps` needs of one op: its type, and the bytes of its data (0 for a delete or a status write). */
export interface TxnOpShape {
  readonly group: string;
  readonly kind: string;
  readonly dataBytes: number;
}

/**
 * The checks of a transaction's ops as a whole, one function for a local request and a
 * forwarded command alike: no op on the ACL types (their changes are admin actions the audit
 * log records one by one), and the data of all the writes of both branches within
 * `limits.maxDataBytes` (TOO_LARGE).
 */
export function checkTxnOps(limits: TxnLimits, then: readonly TxnOpShape[], otherwise: readonly TxnOpShape[]): void {
  let dataBytes = 0;
  for (const [branch, ops] of [['then', then], ['else', otherwise]] as const) {
    ops.forEach((o, i) => {
      if (isAclType(o.group, o.kind)) {
        throw atPart(`${branch}[${i}]`, invalid(`${o.group}.${o.kind} cannot be changed in a transaction (ACL changes are audited one by one: use /v1/acl or a single write)`));
      }
      dataBytes += o.dataBytes;
    });
  }
  if (dataBytes > limits.maxDataBytes) {
    throw new CairnError(ErrorCode.TOO_LARGE, `the transaction's writes carry ${dataBytes} bytes of data; at most ${limits.maxDataBytes}`, { limit: limits.maxDataBytes });
  }
}

/** An error about one part of a transaction (`compare[1]`, `then[0]`): the same code, its place said. */
export function atPart(part: string, e: unknown): unknown {
  if (!(e instanceof CairnError)) return e;
  return new CairnError(e.code, `${part}: ${e.message}`, { ...e.details, part });
}

/** What a List or a Watch selects: the store's list query without the owner. */
export type ListFilter = Omit<ListQuery, 'ownerUid'>;

export interface CallContext {
  /** Idempotency key: a retried call with the same id is applied once. */
  readonly requestId?: string | undefined;
  /** The bearer token the caller presented (its secret). */
  readonly token?: string | undefined;
  readonly timeoutMs?: number | undefined;
  /** The verified client certificate of a gRPC caller (a node certificate is a node of the cluster). */
  readonly peer?: PeerIdentity | undefined;
  /**
   * Server code acting on its own authority (bootstrap, the initial management token): never
   * set from anything a client sends.
   */
  readonly asIdentity?: Identity | undefined;
}

/** What a list or watch may show its caller: the identity, and a per-item check. */
export interface ListAccess {
  readonly identity: Identity;
  /** Whether the caller may see this item (`list` or `watch` on it). */
  visible(r: Resource): boolean;
}

export interface ReadResult {
  readonly resource: ResourceJson;
  readonly revision: Revision;
  readonly lastLeaderContactMs: number | undefined;
}

/** `ReadResult` with the stored resource rather than its JSON. */
export interface StoredReadResult {
  readonly resource: Resource;
  readonly revision: Revision;
  readonly lastLeaderContactMs: number | undefined;
}

export interface ListResult {
  readonly resources: ResourceJson[];
  /** The revision every page of this list reflects (the first page's). */
  readonly revision: Revision;
  readonly lastLeaderContactMs: number | undefined;
  /** Present when more remain: pass it back (with the same filter) for the next page. */
  readonly continue?: string;
}

/**
 * The resource operations of API.md, once, for both the HTTP and the gRPC front ends:
 * validation, mutate/validate hooks, access hooks, command building (uid, generation, time and
 * request id chosen here, so apply is deterministic), proposing through the coordinator, and
 * translating the FSM's verdict.
 */
export interface ResourceServiceOptions {
  /**
   * This node's data quota in bytes (docs/security.md "Quotas"), stamped into every write,
   * delete and status write it builds; the FSM decides on it at apply. Absent: no quota
   * (tests). The server always sets it (`--quota-bytes`).
   */
  readonly quotaBytes?: number;
  /** Access control (docs/security.md "Tokens and roles"). Absent: off, every caller may do everything. */
  readonly access?: AccessControl;
  /** Limits on one transaction (`--txn-max-ops` sets both counts). Default TXN_LIMITS_DEFAULT. */
  readonly txnLimits?: TxnLimits;
  /**
   * The most resources one lease may have attached (`--lease-max-attached`; docs/api.md
   * "Leases"), stamped into every write and transaction that attaches; the FSM decides on it
   * at apply. Default LEASE_MAX_ATTACHED_DEFAULT.
   */
  readonly leaseMaxAttached?: number;
}

/**
 * The default of `--lease-max-attached`: the default subscriber buffer (`--watch-buffer-events`),
 * so the deletes of one revoke (one entry, one revision) fit one watcher's buffer.
 */
export const LEASE_MAX_ATTACHED_DEFAULT = 10_000;

export class ResourceService {
  /** Access control (docs/security.md); off unless the node was given one. */
  readonly access: AccessControl;
  private readonly quotaBytes: number | undefined;
  private readonly leaseMaxAttached: number;
  readonly txnLimits: TxnLimits;
  private readonly paging: Required<PagingOptions>;
  /** Snapshots serving the later pages of unfinished paged lists (paging.ts). */
  private readonly snapshots: SnapshotCache;

  constructor(
    private readonly node: Pick<ServedNode, 'coordinator' | 'coordinatorNow'>,
    private readonly registry: TypeRegistry,
    private readonly clock: Clock,
    opts: ResourceServiceOptions & PagingOptions = {},
  ) {
    this.access = opts.access ?? new AccessControl({ enabled: false, clock });
    this.quotaBytes = opts.quotaBytes;
    this.leaseMaxAttached = opts.leaseMaxAttached ?? LEASE_MAX_ATTACHED_DEFAULT;
    this.txnLimits = opts.txnLimits ?? TXN_LIMITS_DEFAULT;
    this.paging = pagingLimits({ maxPageItems: opts.maxPageItems, maxPageBytes: opts.maxPageBytes, maxSnapshots: opts.maxSnapshots, snapshotTtlMs: opts.snapshotTtlMs });
    this.snapshots = new SnapshotCache(clock, this.paging.maxSnapshots, this.paging.snapshotTtlMs);
  }

  /** How many snapshots paged lists hold now (for tests and metrics); expired ones are dropped first. */
  get heldSnapshots(): number {
    this.snapshots.sweep();
    return this.snapshots.size;
  }

  /** Drops the snapshots of paged lists whose time is up (the node calls it periodically, so a quiet node frees them too). */
  sweepPagedLists(): void {
    this.snapshots.sweep();
  }

  /** Who is calling, from this node's replicated tokens and roles (UNAUTHENTICATED for a bad token). */
  async identify(c: Coordinator, ctx: CallContext): Promise<Identity> {
    if (ctx.asIdentity !== undefined) return ctx.asIdentity;
    if (!this.access.enabled) return { kind: 'open' };
    return (await c.read('stale', (s) => this.access.identify(s, ctx.token, ctx.peer))).value;
  }

  /**
   * The identity now, without waiting (a watch's periodic re-check): undefined while the node
   * does not run. Throws UNAUTHENTICATED for a token no longer valid.
   */
  identifyNow(ctx: CallContext): Identity | undefined {
    if (ctx.asIdentity !== undefined) return ctx.asIdentity;
    if (!this.access.enabled) return { kind: 'open' };
    const c = this.node.coordinatorNow();
    return c === undefined ? undefined : this.access.identify(c.storeNow(), ctx.token, ctx.peer);
  }

  /** The caller's identity, waiting for a starting node within the call's deadline. */
  async identifyCall(ctx: CallContext): Promise<Identity> {
    if (ctx.asIdentity !== undefined) return ctx.asIdentity;
    if (!this.access.enabled) return { kind: 'open' };
    const [c] = await this.coord(ctx);
    return this.identify(c, ctx);
  }

  /** For routes outside the resource API (operator, snapshot, ACL, metrics): the caller must hold `verb` on `target`. */
  async authorizeCall(ctx: CallContext, verb: AclVerb, target: AclTarget): Promise<Identity> {
    const identity = await this.identifyCall(ctx);
    this.access.check(identity, verb, target);
    return identity;
  }

  /**
   * The coordinator, waiting for a starting node within the call's deadline (starting is not
   * failing), and the call context with what is left of that deadline.
   */
  private async coord(ctx: CallContext): Promise<[Coordinator, CallContext]> {
    const startedMs = this.clock.monotonicMs();
    const c = await this.node.coordinator(ctx.timeoutMs ?? START_WAIT_DEFAULT_MS);
    if (ctx.timeoutMs === undefined) return [c, ctx];
    const waitedMs = this.clock.monotonicMs() - startedMs;
    return [c, waitedMs < 1 ? ctx : { ...ctx, timeoutMs: Math.max(1, Math.floor(ctx.timeoutMs - waitedMs)) }];
  }

  /**
   * Every door's check (issue 16 item 2): the caller's grants (ACL verbs; the ACL types need
   * `admin`), then the type's own access hook, if it has one.
   */
  private authorize(identity: Identity, t: RegisteredType, verb: AccessVerb, target: { partition: string; namespace: string; name: string }, ctx: CallContext): void {
    this.access.check(identity, aclVerb(t.group, t.kind, verb), { group: t.group, groupVersion: t.groupVersion, kind: t.kind, ...target });
    if (t.access && !t.access(verb, target, ctx.token)) {
      throw new CairnError(ErrorCode.PERMISSION_DENIED, `not allowed to ${verb} ${t.group}.${t.groupVersion}.${t.kind} ${target.name}`);
    }
  }

  /** Whether a caller may be held to the cascade guard (a grant that is not everything). */
  private restricted(identity: Identity): boolean {
    return identity.kind === 'anonymous' || (identity.kind === 'token' && !identity.management);
  }

  /**
   * The cascade a delete of `root` would make now, checked against the caller's grants: every
   * owned resource it would remove or mark needs `delete` on it. Returns the uids, which the
   * command carries so the state machine refuses it if the cascade has grown since
   * (docs/security.md "Cascades"). Undefined when the caller may delete anything.
   */
  private checkCascade(identity: Identity, store: StoreReader, root: Resource): string[] | undefined {
    if (!this.restricted(identity)) return undefined;
    const uids: string[] = [];
    for (const r of store.cascadeOf(root)) {
      const target = targetOf(r);
      if (!authorize(identity, aclVerb(target.group, target.kind, 'delete'), target)) {
        // Says that something owned is out of reach, not what: the caller may not even see it.
        throw new CairnError(ErrorCode.PERMISSION_DENIED, `deleting ${root.id.name} would also delete owned resources this token may not delete`, { missing_grant: 'delete on owned resources' });
      }
      uids.push(r.id.uid);
    }
    return uids;
  }

  /**
   * Attaching a resource to a lease schedules its delete (docs/security.md "Every door checks"): besides
   * `write` on the resource (checked by the caller), `write` on the lease and `delete` on the
   * resource. Detaching ('') and keeping the attachment (absent) need nothing more. The
   * cascade is `attachCascade`'s, against the stored state.
   */
  private authorizeAttach(identity: Identity, t: RegisteredType, target: { partition: string; namespace: string; name: string }, lease: string | undefined, ctx: CallContext): void {
    if (lease === undefined || lease === '') return;
    this.access.check(identity, 'write', leaseAclTarget(lease));
    this.authorize(identity, t, 'delete', target, ctx);
  }

  /**
   * The cascade of attaching: a restricted caller must be allowed to delete everything a delete
   * of the resource would remove or mark now (`checkCascade`, as a delete checks it). What is
   * added to the cascade after the attach is deleted by the revoke regardless (the owner's
   * writer chose the owner, as in Kubernetes' garbage collection).
   */
  private attachCascade(identity: Identity, s: StoreReader, key: { group: string; kind: string; tenancy: Tenancy; name: string }, lease: string | undefined): void {
    if (lease === undefined || lease === '' || !this.restricted(identity)) return;
    const current = s.get(key);
    if (current === undefined) return;
    try {
      this.checkCascade(identity, s, current);
    } catch (e) {
      if (!isCairnError(e, ErrorCode.PERMISSION_DENIED)) throw e;
      throw new CairnError(ErrorCode.PERMISSION_DENIED, `attaching ${current.id.name} to lease ${lease} schedules its delete, which would also delete owned resources this token may not delete`, e.details);
    }
  }

  /** `--lease-max-attached`, stamped into a command that attaches a resource to a lease (docs/api.md "Leases"). */
  private attachLimit(attaches: boolean): { leaseMaxAttached?: number } {
    return attaches ? { leaseMaxAttached: this.leaseMaxAttached } : {};
  }

  private typeRef(t: RegisteredType): TypeRef {
    return { group: t.group, groupVersion: t.groupVersion, kind: t.kind };
  }

  /**
   * A command's header. The state machine answers a repeated request id with the first result,
   * so a client's idempotency key is scoped to the caller: one token may not reuse another's key
   * and get that caller's result (a resource it may not see) instead of applying its own write.
   * The node's data quota is stamped in (docs/security.md "Quotas"): the FSM decides on it.
   */
  header(ctx: CallContext, identity: Identity): { requestId: string; time: string; uid: string; generation: string; quotaBytes?: number } {
    const scope = identity.kind === 'token' ? `token:${identity.accessorId}/` : identity.kind === 'anonymous' ? 'anonymous/' : '';
    return {
      requestId: ctx.requestId === undefined ? ulid() : scope + ctx.requestId,
      time: new Date(this.clock.nowMs()).toISOString(),
      uid: ulid(),
      generation: ulid(),
      ...(this.quotaBytes !== undefined ? { quotaBytes: this.quotaBytes } : {}),
    };
  }

  private resolveOwner(owner: ResourceIdJson | null | undefined): ResourceId | null | undefined {
    if (owner === undefined || owner === null) return owner;
    if (typeof owner !== 'object') throw invalid('owner must be a resource id object');
    const o = owner as unknown as Record<string, unknown>;
    for (const k of Object.keys(o)) if (!['type', 'tenancy', 'name', 'uid'].includes(k)) throw invalid(`owner has unknown field ${JSON.stringify(k)}`);
    if (typeof o['type'] !== 'string') throw invalid('owner.type must be a string');
    const t = this.registry.resolve(o['type']);
    const ten = o['tenancy'];
    if (ten !== undefined && (typeof ten !== 'object' || ten === null)) throw invalid('owner.tenancy must be an object');
    const tt = (ten ?? {}) as Record<string, unknown>;
    for (const k of Object.keys(tt)) if (k !== 'partition' && k !== 'namespace') throw invalid(`owner.tenancy has unknown field ${JSON.stringify(k)}`);
    const str = (x: unknown, what: string): string | undefined => {
      if (x === undefined) return undefined;
      if (typeof x !== 'string') throw invalid(`${what} must be a string`);
      return x;
    };
    const tenancy = normalizeTenancy(t, str(tt['partition'], 'owner.tenancy.partition'), str(tt['namespace'], 'owner.tenancy.namespace'));
    const uid = str(o['uid'], 'owner.uid');
    if (uid === undefined || uid === '') throw invalid('owner.uid is required');
    return { type: this.typeRef(t), tenancy, name: checkDnsLabel(o['name'], 'owner.name'), uid };
  }

  private parseStatusPassBack(v: unknown): Record<string, StatusEntry> | undefined {
    if (v === undefined || v === null) return undefined;
    if (typeof v !== 'object' || Array.isArray(v)) throw invalid('status must be an object');
    const out: Record<string, StatusEntry> = {};
    for (const [k, s] of Object.entries(v as Record<string, unknown>)) {
      if (k === '__proto__') throw invalid('status has the key "__proto__", which cannot be stored');
      if (typeof s !== 'object' || s === null || Array.isArray(s)) throw invalid(`status.${k} must be an object`);
      const o = s as Record<string, unknown>;
      if (typeof o['observed_generation'] !== 'string' || typeof o['updated_at'] !== 'string') throw invalid(`status.${k} needs observed_generation and updated_at`);
      out[k] = { observedGeneration: o['observed_generation'], conditions: checkConditions(o['conditions'] ?? []), updatedAt: o['updated_at'] };
    }
    return out;
  }

  async write(req: WriteRequest, ctx: CallContext = {}): Promise<ResourceJson> {
    return resourceToJson(await this.writeStored(req, ctx));
  }

  /**
   * `write`, answering the stored resource itself (frozen, one object per version): the gRPC
   * front end encodes it once per version and answers from those bytes (`encodedResource`).
   */
  /** A write request's checks before anything is read or proposed (`writeStored`, a transaction's write ops). */
  private checkWriteRequest(req: WriteRequest) {
    const t = this.registry.resolve(req.type);
    const tenancy = normalizeTenancy(t, req.partition, req.namespace);
    const name = checkDnsLabel(req.name, 'name');
    if (req.data === undefined) throw invalid('data is required');
    const dataBytes = checkJson(req.data, 'data');
    if (dataBytes > LIMITS.dataBytes) throw new CairnError(ErrorCode.TOO_LARGE, `data is over ${LIMITS.dataBytes} bytes`);
    const metadata = req.metadata === undefined ? undefined : checkMetadata(req.metadata);
    const finalizers = req.finalizers === undefined ? undefined : checkFinalizers(req.finalizers);
    const owner = this.resolveOwner(req.owner);
    const status = this.parseStatusPassBack(req.status);
    const expected = parseVersion(req.version);
    if (req.uid !== undefined && typeof req.uid !== 'string') throw invalid('uid must be a string');
    const uid = req.uid === undefined || req.uid === '' ? undefined : req.uid;
    const lease = checkLeaseField(req.lease);
    return { t, tenancy, name, dataBytes, metadata, finalizers, owner, status, expected, uid, lease };
  }

  async writeStored(req: WriteRequest, ctx: CallContext = {}): Promise<Resource> {
    const { t, tenancy, name, metadata, finalizers, owner, status, expected, uid, lease } = this.checkWriteRequest(req);
    let c: Coordinator;
    [c, ctx] = await this.coord(ctx);
    const identity = await this.identify(c, ctx);
    this.authorize(identity, t, 'write', { ...tenancy, name }, ctx);
    this.authorizeAttach(identity, t, { ...tenancy, name }, lease, ctx);
    const header = { ...this.header(ctx, identity), ...this.attachLimit(lease !== undefined && lease !== '') };
    const key = { group: t.group, kind: t.kind, tenancy, name };
    if (lease !== undefined && lease !== '' && this.restricted(identity)) await c.read('stale', (s) => this.attachCascade(identity, s, key, lease));
    if (expected === undefined) {
      // An unconditional write: one entry, its hooks run at apply (docs/api.md "Unconditional writes").
      const id = { type: this.typeRef(t), tenancy, name, ...(uid !== undefined ? { uid } : {}) };
      // Non-plain values (a Date, a class instance) become their JSON form here, as on the CAS path.
      const data = isPlainJson(req.data) ? (req.data as JsonValue) : copyJson(req.data);
      return this.put(c, ctx, identity, header, { id, data, metadata, owner, finalizers, status, lease });
    }
    // A compare-and-swap (or a create-only write, version "0") runs the hooks against the
    // version it names and proposes a CAS on it.
    for (let attempt = 0; ; attempt++) {
      if (attempt > 0) await c.read('linearizable', () => undefined);
      let current = (await c.read('stale', (s) => s.get(key))).value;
      if (attempt === 0 && expected !== undefined && (current?.version ?? 0) !== expected) {
        // This node may not have applied the version the client names yet (a lagging
        // follower): catch up first, so hooks and omitted fields see that version's state.
        current = (await c.read('linearizable', (s) => s.get(key))).value;
      }
      // Copied only for a mutate hook (it edits data in place): nothing else writes to it, and
      // the command is encoded from it before anything else could.
      const data = t.mutate !== undefined || !isPlainJson(req.data) ? copyJson(req.data) : (req.data as JsonValue);
      const proposed: ProposedResource = { type: this.typeRef(t), partition: tenancy.partition, namespace: tenancy.namespace, name, data, metadata: { ...(metadata ?? current?.metadata ?? {}) } };
      t.mutate?.(proposed, current);
      checkProposed(t, req.type, proposed, current);
      const expectedVersion = expected ?? ((current?.version ?? 0) as Revision);
      // Removing the last finalizer of a resource being deleted deletes it, with its cascade.
      const cascadeAllowed =
        current !== undefined && current.deletionTimestamp !== null && finalizers !== undefined && finalizers.length === 0
          ? (await c.read('stale', (s) => this.checkCascade(identity, s, current as Resource))).value
          : undefined;
      const cmd: WriteCommand = {
        ...header,
        id: { type: this.typeRef(t), tenancy, name, ...(uid !== undefined ? { uid } : {}) },
        data: proposed.data,
        ...(metadata !== undefined || Object.keys(proposed.metadata).length > 0 ? { metadata: proposed.metadata } : {}),
        ...(owner !== undefined ? { owner } : {}),
        ...(finalizers !== undefined ? { finalizers } : {}),
        ...(status !== undefined ? { status } : {}),
        expectedVersion,
        ...(cascadeAllowed !== undefined ? { cascadeAllowed } : {}),
        ...(lease !== undefined ? { lease } : {}),
      };
      const result = await c.propose(CommandType.ResourceWrite, cmd, ctx.timeoutMs);
      try {
        return expectWrite(result);
      } catch (e) {
        const retry = isCairnError(e, ErrorCode.CAS_FAILED) && e.details['cascade_changed'] === true;
        if (retry && attempt + 1 < LIMITS.casRetries) {
          // Someone else wrote between our read and our proposal; the request id must change
          // so the retry is not mistaken for a repeat of the refused attempt.
          header.requestId = `${header.requestId}.${attempt + 1}`;
          continue;
        }
        throw e;
      }
    }
  }

  /**
   * An unconditional write (docs/api.md "Unconditional writes"): proposed once as a ResourcePut
   * entry, whose type hooks the state machine runs at apply against the resource as it is at
   * that log position (fsm `WriteHooks`, `registryWriteHooks`). It is never refused for
   * contention, so it is never retried for it, and the common case reads nothing before
   * proposing. The caller was authorized for `write` on the name before this (create and
   * update alike); the state machine decides only which of the two it is.
   *
   * One check depends on the state and on the caller: a restricted caller (docs/security.md
   * "Cascades") clearing the finalizers (`finalizers: []`) of a resource being deleted deletes
   * it with its cascade. The command carries the uids the caller may delete (all of the
   * current cascade, or, when the resource is not being deleted here, those it may delete);
   * the store refuses the entry (`cascade_changed`) if the resource is being deleted at apply
   * with anything else in its cascade, and this re-checks against the newer state (bounded,
   * as for deletes): the caller gets PERMISSION_DENIED if it may not delete what it would.
   */
  private async put(
    c: Coordinator,
    ctx: CallContext,
    identity: Identity,
    header: ReturnType<ResourceService['header']>,
    w: Pick<PutCommand, 'id' | 'data'> & { metadata: Record<string, string> | undefined; owner: ResourceId | null | undefined; finalizers: string[] | undefined; status: Record<string, StatusEntry> | undefined; lease: string | undefined },
  ): Promise<Resource> {
    const key = { group: w.id.type.group, kind: w.id.type.kind, tenancy: w.id.tenancy, name: w.id.name };
    const guarded = w.finalizers !== undefined && w.finalizers.length === 0 && this.restricted(identity);
    for (let attempt = 0; ; attempt++) {
      const cascadeAllowed = guarded
        ? (
            await c.read(attempt === 0 ? 'stale' : 'linearizable', (s) => {
              const current = s.get(key);
              if (current === undefined) return [];
              if (current.deletionTimestamp !== null) return this.checkCascade(identity, s, current) ?? [];
              return s
                .cascadeOf(current)
                .filter((r) => {
                  const target = targetOf(r);
                  return authorize(identity, aclVerb(target.group, target.kind, 'delete'), target);
                })
                .map((r) => r.id.uid);
            })
          ).value
        : undefined;
      const cmd: PutCommand = {
        ...header,
        id: w.id,
        data: w.data,
        ...(w.metadata !== undefined ? { metadata: w.metadata } : {}),
        ...(w.owner !== undefined ? { owner: w.owner } : {}),
        ...(w.finalizers !== undefined ? { finalizers: w.finalizers } : {}),
        ...(w.status !== undefined ? { status: w.status } : {}),
        ...(cascadeAllowed !== undefined ? { cascadeAllowed } : {}),
        ...(w.lease !== undefined ? { lease: w.lease } : {}),
      };
      const result = await c.propose(CommandType.ResourcePut, cmd, ctx.timeoutMs);
      if (!result.ok && result.error.details['cascade_changed'] === true && attempt + 1 < LIMITS.casRetries) {
        // Not contention: the cascade this caller was checked for grew. A new request id, so the
        // retry is not answered with the refused attempt's result.
        header.requestId = `${header.requestId}.${attempt + 1}`;
        continue;
      }
      return expectWrite(result);
    }
  }

  /**
   * A transaction (docs/api.md "Transactions"): one `Txn` entry (0x15) whose comparisons are
   * evaluated, and whose then or else branch is applied all or nothing, by the state machine at
   * that log position, at one revision. Before proposing, each part gets the checks of its
   * single operation (names, tenancy, limits, data, owner, finalizers, conditions, versions),
   * the request its limits, and the caller its grants: `read` on every compared resource and
   * the op's verb (write, delete, write-status) on every op's, in both branches (either may
   * apply); any denied part denies the whole request, naming the part. Writes run their type's
   * hooks at apply, as unconditional writes do (with their version checked when they carry
   * one). A restricted caller's deletes and finalizer-clearing writes carry the cascade it may
   * delete (docs/security.md "Cascades"), re-checked (bounded) when the cascade grew.
   *
   * The ACL types are refused as ops (their writes are admin actions the audit log records one
   * by one, through /v1/acl or single writes).
   */
  async txn(req: TxnRequest, ctx: CallContext = {}): Promise<TxnAnswer> {
    const compareReqs = req.compare ?? [];
    const thenReqs = req.then ?? [];
    const elseReqs = req.else ?? [];
    for (const [what, v] of [['compare', compareReqs], ['then', thenReqs], ['else', elseReqs]] as const) {
      if (!Array.isArray(v)) throw invalid(`${what} must be an array`);
    }
    checkTxnSize(this.txnLimits, compareReqs.length, thenReqs.length, elseReqs.length);
    const compares: Array<{ t: RegisteredType; cmp: TxnCompare }> = compareReqs.map((r, i) => {
      try {
        return this.checkCompareRequest(r);
      } catch (e) {
        throw atPart(`compare[${i}]`, e);
      }
    });
    type Checked =
      | { op: 'write'; t: RegisteredType; w: ReturnType<ResourceService['checkWriteRequest']>; data: unknown }
      | { op: 'delete'; t: RegisteredType; d: ReturnType<ResourceService['checkDeleteRequest']> }
      | { op: 'status'; t: RegisteredType; s: ReturnType<ResourceService['checkStatusRequest']>; req: WriteStatusRequest };
    const checkBranch = (branch: 'then' | 'else', reqs: readonly TxnOpRequest[]): Checked[] => {
      const seen = new Set<string>();
      return reqs.map((r, i) => {
        try {
          if (typeof r !== 'object' || r === null) throw invalid('an op must be an object');
          let c: Checked;
          switch (r.op) {
            case 'write': {
              const w = this.checkWriteRequest(r);
              c = { op: 'write', t: w.t, w, data: r.data };
              break;
            }
            case 'delete': {
              const d = this.checkDeleteRequest(r);
              c = { op: 'delete', t: d.t, d };
              break;
            }
            case 'status': {
              const st = this.checkStatusRequest(r);
              c = { op: 'status', t: st.t, s: st, req: r };
              break;
            }
            default:
              throw invalid(`op must be write, delete or status, got ${JSON.stringify((r as { op?: unknown }).op)}`);
          }
          const ten = c.op === 'write' ? c.w.tenancy : c.op === 'delete' ? c.d.tenancy : c.s.tenancy;
          const name = c.op === 'write' ? c.w.name : c.op === 'delete' ? c.d.name : c.s.name;
          const key = JSON.stringify([c.t.group, c.t.kind, ten.partition, ten.namespace, name]);
          if (seen.has(key)) throw invalid(`${c.t.group}.${c.t.kind} ${name} is named by an earlier op of the ${branch} branch (a resource may appear once per branch)`);
          seen.add(key);
          return c;
        } catch (e) {
          throw atPart(`${branch}[${i}]`, e);
        }
      });
    };
    const thenOps = checkBranch('then', thenReqs);
    const elseOps = checkBranch('else', elseReqs);
    const shape = (o: Checked): TxnOpShape => ({ group: o.t.group, kind: o.t.kind, dataBytes: o.op === 'write' ? o.w.dataBytes : 0 });
    checkTxnOps(this.txnLimits, thenOps.map(shape), elseOps.map(shape));
    let c: Coordinator;
    [c, ctx] = await this.coord(ctx);
    const identity = await this.identify(c, ctx);
    compares.forEach(({ t, cmp }, i) => {
      try {
        this.authorize(identity, t, 'read', { ...cmp.id.tenancy, name: cmp.id.name }, ctx);
      } catch (e) {
        throw atPart(`compare[${i}]`, e);
      }
    });
    for (const [branch, ops] of [['then', thenOps], ['else', elseOps]] as const) {
      ops.forEach((o, i) => {
        try {
          if (o.op === 'write') {
            this.authorize(identity, o.t, 'write', { ...o.w.tenancy, name: o.w.name }, ctx);
            this.authorizeAttach(identity, o.t, { ...o.w.tenancy, name: o.w.name }, o.w.lease, ctx);
          } else if (o.op === 'delete') this.authorize(identity, o.t, 'delete', { ...o.d.tenancy, name: o.d.name }, ctx);
          else this.authorize(identity, o.t, 'status', { ...o.s.tenancy, name: o.s.name }, ctx);
        } catch (e) {
          throw atPart(`${branch}[${i}]`, e);
        }
      });
    }
    if (thenOps.length === 0 && elseOps.length === 0) {
      // No op can apply, whichever branch is chosen: the comparisons are answered by a
      // linearizable read (as a single read is, through the read index) and nothing is
      // proposed. A log entry would change nothing, yet cost every replica an entry and a
      // place in the de-duplication table, which callers with no write grant could flood.
      const out = await c.read('linearizable', (s) => compares.findIndex(({ cmp }) => !txnCompareHolds(cmp, s.get({ group: cmp.id.type.group, kind: cmp.id.type.kind, tenancy: cmp.id.tenancy, name: cmp.id.name }))));
      return { succeeded: out.value < 0, revision: out.revision, ...(out.value >= 0 ? { failedComparison: out.value } : {}), results: [] };
    }
    const attaches = [...thenOps, ...elseOps].some((o) => o.op === 'write' && o.w.lease !== undefined && o.w.lease !== '');
    const header = { ...this.header(ctx, identity), ...this.attachLimit(attaches) };
    // One ULID per op, made where the header's uid is (monotonic): a resource an op creates gets its op's.
    const uids = { thenUids: thenOps.map(() => ulid()), elseUids: elseOps.map(() => ulid()) };
    const restricted = this.restricted(identity);
    /** The branches of the attempt the state machine last refused for a grown cascade, and its error. */
    let refused: { built: string; error: Extract<ApplyResult, { ok: false }>['error'] } | undefined;
    for (let attempt = 0; ; attempt++) {
      // The cascades a restricted caller may make, read in one step (docs/security.md "Cascades").
      const build = (branch: 'then' | 'else', ops: readonly Checked[], s: StoreReader): TxnOp[] =>
        ops.map((o, i): TxnOp => {
          try {
            return this.txnOp(o, identity, restricted, s);
          } catch (e) {
            throw atPart(`${branch}[${i}]`, e);
          }
        });
      const branches = (await c.read(attempt === 0 ? 'stale' : 'linearizable', (s) => ({ then: build('then', thenOps, s), else: build('else', elseOps, s) }))).value;
      const built = JSON.stringify(branches);
      if (refused !== undefined && built === refused.built) {
        // Re-read after the refusal, the cascades are what was refused: they did not grow in
        // the meantime; the branch's own earlier ops grew them (a write giving the deleted
        // resource a new owned resource). Retrying cannot help, so say so instead.
        const d = refused.error.details;
        const branch = String(d['branch']);
        const failedOp = Number(d['failedOp']);
        throw new CairnError(
          ErrorCode.INVALID_ARGUMENT,
          `transaction ${branch}[${failedOp}] cannot be checked for this token: the cascade of its delete (docs/security.md "Cascades") would include resources an earlier op of the ${branch} branch creates or changes, ` +
            'and a restricted token\'s cascade is checked against the stored state before the transaction; do those ops in a request of their own first',
          { branch, failedOp, part: `${branch}[${failedOp}]` },
        );
      }
      const cmd: TxnCommand = { ...header, compare: compares.map((x) => x.cmp), then: branches.then, else: branches.else, ...uids };
      const r = await c.propose(CommandType.Txn, cmd, ctx.timeoutMs);
      if (!r.ok && r.error.details['cascade_changed'] === true && attempt + 1 < LIMITS.casRetries) {
        refused = { built, error: r.error };
        header.requestId = `${header.requestId}.${attempt + 1}`;
        continue;
      }
      if (!r.ok) throw fromApplyError(r);
      if (r.kind !== 'txn') throw reusedRequestId(r.kind, 'transaction');
      return {
        succeeded: r.succeeded,
        revision: r.revision,
        ...(r.failedComparison !== undefined ? { failedComparison: r.failedComparison } : {}),
        results: r.results.map((x): TxnOpAnswer => (x.kind === 'write' ? { op: 'write', resource: x.resource, changed: x.changed } : x.kind === 'delete' ? { op: 'delete', deleted: x.deleted, deleting: x.deleting, resource: x.resource } : { op: 'status', resource: x.resource })),
      };
    }
  }

  private checkCompareRequest(r: TxnCompareRequest): { t: RegisteredType; cmp: TxnCompare } {
    if (typeof r !== 'object' || r === null) throw invalid('a comparison must be an object');
    if (typeof r.type !== 'string') throw invalid('type must be a string');
    const t = this.registry.resolve(r.type);
    const id = { type: this.typeRef(t), tenancy: normalizeTenancy(t, r.partition, r.namespace), name: checkDnsLabel(r.name, 'name') };
    const unused = (field: 'version' | 'uid'): void => {
      if (r[field] !== undefined && r[field] !== '') throw invalid(`${field} is only for a ${field} comparison (target ${JSON.stringify(r.target)})`);
    };
    switch (r.target) {
      case 'version': {
        unused('uid');
        const version = parseVersion(r.version);
        if (version === undefined) throw invalid('a version comparison needs version (a decimal string; "0" means absent)');
        return { t, cmp: { target: 'version', id, version } };
      }
      case 'uid':
        unused('version');
        if (typeof r.uid !== 'string' || r.uid === '') throw invalid('a uid comparison needs uid');
        checkToken(r.uid, 'uid', 128);
        return { t, cmp: { target: 'uid', id, uid: r.uid } };
      case 'exists':
      case 'absent':
        unused('version');
        unused('uid');
        return { t, cmp: { target: r.target, id } };
      default:
        throw invalid(`target must be version, exists, absent or uid, got ${JSON.stringify(r.target)}`);
    }
  }

  /** One checked op as the command carries it; `s` is the state a restricted caller's cascade is checked against. */
  private txnOp(
    o:
      | { op: 'write'; t: RegisteredType; w: ReturnType<ResourceService['checkWriteRequest']>; data: unknown }
      | { op: 'delete'; t: RegisteredType; d: ReturnType<ResourceService['checkDeleteRequest']> }
      | { op: 'status'; t: RegisteredType; s: ReturnType<ResourceService['checkStatusRequest']>; req: WriteStatusRequest },
    identity: Identity,
    restricted: boolean,
    s: StoreReader,
  ): TxnOp {
    switch (o.op) {
      case 'write': {
        const w = o.w;
        const key = { group: o.t.group, kind: o.t.kind, tenancy: w.tenancy, name: w.name };
        if (restricted) this.attachCascade(identity, s, key, w.lease);
        let cascadeAllowed: string[] | undefined;
        if (restricted && w.finalizers !== undefined && w.finalizers.length === 0) {
          // As `put`: all of the current cascade when being deleted, else what the caller may delete.
          const current = s.get(key);
          cascadeAllowed =
            current === undefined
              ? []
              : current.deletionTimestamp !== null
                ? (this.checkCascade(identity, s, current) ?? [])
                : s
                    .cascadeOf(current)
                    .filter((r) => {
                      const target = targetOf(r);
                      return authorize(identity, aclVerb(target.group, target.kind, 'delete'), target);
                    })
                    .map((r) => r.id.uid);
        }
        return {
          op: 'write',
          id: { type: this.typeRef(o.t), tenancy: w.tenancy, name: w.name, ...(w.uid !== undefined ? { uid: w.uid } : {}) },
          // Non-plain values (a Date, a class instance) become their JSON form, as for single writes.
          data: isPlainJson(o.data) ? (o.data as JsonValue) : copyJson(o.data),
          ...(w.metadata !== undefined ? { metadata: w.metadata } : {}),
          ...(w.owner !== undefined ? { owner: w.owner } : {}),
          ...(w.finalizers !== undefined ? { finalizers: w.finalizers } : {}),
          ...(w.status !== undefined ? { status: w.status } : {}),
          ...(w.expected !== undefined ? { expectedVersion: w.expected } : {}),
          ...(cascadeAllowed !== undefined ? { cascadeAllowed } : {}),
          ...(w.lease !== undefined ? { lease: w.lease } : {}),
        };
      }
      case 'delete': {
        const d = o.d;
        let cascadeAllowed: string[] | undefined;
        if (restricted) {
          const stored = s.get({ group: o.t.group, kind: o.t.kind, tenancy: d.tenancy, name: d.name });
          cascadeAllowed = stored === undefined || stored.finalizers.length > 0 ? [] : this.checkCascade(identity, s, stored);
        }
        return {
          op: 'delete',
          id: { type: this.typeRef(o.t), tenancy: d.tenancy, name: d.name, ...(d.uid !== undefined ? { uid: d.uid } : {}) },
          ...(d.expectedVersion !== undefined ? { expectedVersion: d.expectedVersion } : {}),
          ...(cascadeAllowed !== undefined ? { cascadeAllowed } : {}),
        };
      }
      case 'status':
        return {
          op: 'status',
          id: { type: this.typeRef(o.t), tenancy: o.s.tenancy, name: o.s.name, uid: o.req.uid },
          key: o.req.key,
          observedGeneration: o.req.observedGeneration,
          conditions: o.s.conditions,
          ...(o.s.expectedVersion !== undefined ? { expectedVersion: o.s.expectedVersion } : {}),
        };
    }
  }

  async read(req: ReadRequest, ctx: CallContext = {}): Promise<ReadResult> {
    const r = await this.readStored(req, ctx);
    return { resource: resourceToJson(r.resource), revision: r.revision, lastLeaderContactMs: r.lastLeaderContactMs };
  }

  /** `read`, answering the stored resource itself (as `writeStored`). */
  async readStored(req: ReadRequest, ctx: CallContext = {}): Promise<StoredReadResult> {
    const t = this.registry.resolve(req.type);
    const tenancy = normalizeTenancy(t, req.partition, req.namespace);
    const name = checkDnsLabel(req.name, 'name');
    const uid = req.uid === undefined || req.uid === '' ? undefined : req.uid;
    const [c] = await this.coord(ctx);
    this.authorize(await this.identify(c, ctx), t, 'read', { ...tenancy, name }, ctx);
    const out = await c.read(req.consistency ?? 'linearizable', (s) => s.read({ type: this.typeRef(t), tenancy, name, ...(uid !== undefined ? { uid } : {}) }));
    if (!out.value.ok) throw out.value.error;
    return { resource: out.value.value, revision: out.revision, lastLeaderContactMs: out.lastLeaderContactMs };
  }

  private checkDeleteRequest(req: DeleteRequest) {
    const t = this.registry.resolve(req.type);
    const tenancy = normalizeTenancy(t, req.partition, req.namespace);
    const name = checkDnsLabel(req.name, 'name');
    const expectedVersion = parseVersion(req.version);
    if (req.uid !== undefined && typeof req.uid !== 'string') throw invalid('uid must be a string');
    const uid = req.uid === undefined || req.uid === '' ? undefined : req.uid;
    return { t, tenancy, name, expectedVersion, uid };
  }

  async delete(req: DeleteRequest, ctx: CallContext = {}): Promise<{ deleted: boolean; resource: ResourceJson | null }> {
    const { t, tenancy, name, expectedVersion, uid } = this.checkDeleteRequest(req);
    let c: Coordinator;
    [c, ctx] = await this.coord(ctx);
    const identity = await this.identify(c, ctx);
    this.authorize(identity, t, 'delete', { ...tenancy, name }, ctx);
    const header = this.header(ctx, identity);
    let r: ApplyResult;
    for (let attempt = 0; ; attempt++) {
      // A restricted caller's delete carries the cascade it was allowed (docs/security.md "Cascades").
      const cascadeAllowed = this.restricted(identity)
        ? (
            await c.read(attempt === 0 ? 'stale' : 'linearizable', (s) => {
              const stored = s.get({ group: t.group, kind: t.kind, tenancy, name });
              return stored === undefined || stored.finalizers.length > 0 ? [] : this.checkCascade(identity, s, stored);
            })
          ).value
        : undefined;
      const cmd: DeleteCommand = {
        ...header,
        id: { type: this.typeRef(t), tenancy, name, ...(uid !== undefined ? { uid } : {}) },
        ...(expectedVersion !== undefined ? { expectedVersion } : {}),
        ...(cascadeAllowed !== undefined ? { cascadeAllowed } : {}),
      };
      r = await c.propose(CommandType.ResourceDelete, cmd, ctx.timeoutMs);
      if (!r.ok && r.error.details['cascade_changed'] === true && attempt + 1 < LIMITS.casRetries) {
        header.requestId = `${header.requestId}.${attempt + 1}`;
        continue;
      }
      break;
    }
    if (!r.ok) throw fromApplyError(r);
    if (r.kind !== 'delete') throw reusedRequestId(r.kind, 'delete');
    return { deleted: r.deleted, resource: r.resource ? resourceToJson(r.resource) : null };
  }

  async writeStatus(req: WriteStatusRequest, ctx: CallContext = {}): Promise<ResourceJson> {
    return resourceToJson(await this.writeStatusStored(req, ctx));
  }

  /** `writeStatus`, answering the stored resource itself (as `writeStored`). */
  private checkStatusRequest(req: WriteStatusRequest) {
    const t = this.registry.resolve(req.type);
    const tenancy = normalizeTenancy(t, req.partition, req.namespace);
    const name = checkDnsLabel(req.name, 'name');
    if (typeof req.key !== 'string' || !QUALIFIED.test(req.key)) throw invalid(`status key ${JSON.stringify(req.key)} must be a qualified name (e.g. demo.v1.artist-controller)`);
    if (typeof req.uid !== 'string' || req.uid === '') throw invalid('uid is required for a status write');
    if (typeof req.observedGeneration !== 'string') throw invalid('observed_generation must be a string');
    const conditions = checkConditions(req.conditions);
    const expectedVersion = req.version !== undefined && req.version !== '' ? (parseVersion(req.version) as Revision) : undefined;
    return { t, tenancy, name, conditions, expectedVersion };
  }

  async writeStatusStored(req: WriteStatusRequest, ctx: CallContext = {}): Promise<Resource> {
    const { t, tenancy, name, conditions, expectedVersion } = this.checkStatusRequest(req);
    let c: Coordinator;
    [c, ctx] = await this.coord(ctx);
    const identity = await this.identify(c, ctx);
    this.authorize(identity, t, 'status', { ...tenancy, name }, ctx);
    const cmd: WriteStatusCommand = {
      ...this.header(ctx, identity),
      id: { type: this.typeRef(t), tenancy, name, uid: req.uid },
      key: req.key,
      observedGeneration: req.observedGeneration,
      conditions,
      ...(expectedVersion !== undefined ? { expectedVersion } : {}),
    };
    const r = await c.propose(CommandType.ResourceStatus, cmd, ctx.timeoutMs);
    if (!r.ok) throw fromApplyError(r);
    if (r.kind !== 'status') throw reusedRequestId(r.kind, 'status write');
    return r.resource;
  }

  /**
   * The leader's content check of a command a follower built and forwarded (issue 15, item
   * 4), with the same rules `write`, `delete` and `writeStatus` apply to a local request before
   * they propose: a registered type, a normalized tenancy, DNS-label names, the limits on
   * data, metadata, finalizers and conditions, the owner's shape, the type's schema and
   * validate hook. The FSM's decoding ran first (`decodeCommand`). Not re-run: mutate hooks
   * (the follower ran them; validate sees their result) and access hooks (the follower checked
   * the caller's token; the peer is authenticated at the cluster port, issue 15 item 2).
   * The validate hook runs against the leader's current state only when that is the version
   * the command expects (otherwise the CAS refuses it at apply, as for a local write). An
   * unconditional write (ResourcePut) gets the structural checks only: its mutate hook, schema
   * and validate hook run at apply, on every replica, for forwarded and local writes alike.
   *
   * The quota (docs/security.md "Quotas"): a forwarded command stamped with a quota above this
   * leader's own, or with none (a follower of an older version), is clamped to the leader's
   * quota: the returned body replaces it. Clamping rather than refusing keeps writes through
   * a follower with a larger (mis-set) quota or an older version working, while the leader's
   * quota still bounds what the log can make every replica hold.
   */
  checkCommand(command: DecodedCommand, store: StoreReader): { readonly body: unknown } | undefined {
    if (command.kind === 'restore') {
      if (command.snapshotBytes > MAX_RESTORE_BYTES) throw new CairnError(ErrorCode.TOO_LARGE, `a restore is at most ${MAX_RESTORE_BYTES} bytes`);
      return undefined;
    }
    const own = this.quotaBytes;
    const clamp = own !== undefined && (command.cmd.quotaBytes === undefined || command.cmd.quotaBytes > own);
    // The attachment limit likewise: a forwarded write that attaches gets at most this leader's
    // --lease-max-attached (one stamped with none, from an older follower, gets it too).
    const attaches =
      command.kind === 'txn'
        ? [...command.cmd.then, ...command.cmd.else].some((op) => op.op === 'write' && op.lease !== undefined && op.lease !== '')
        : (command.kind === 'write' || command.kind === 'put') && command.cmd.lease !== undefined && command.cmd.lease !== '';
    const limit = attaches && (command.cmd.leaseMaxAttached === undefined || command.cmd.leaseMaxAttached > this.leaseMaxAttached);
    // The hooks see the decoded data itself unless the body is re-encoded from it below.
    this.checkForwardedContent(command, store, clamp || limit);
    if (!clamp && !limit) return undefined;
    return { body: { ...command.cmd, ...(clamp ? { quotaBytes: own } : {}), ...(limit ? { leaseMaxAttached: this.leaseMaxAttached } : {}) } };
  }

  private checkForwardedContent(command: Exclude<DecodedCommand, { kind: 'restore' }>, store: StoreReader, protectData: boolean): void {
    const cmd = command.cmd;
    if (cmd.requestId !== undefined) checkToken(cmd.requestId, 'the request id', 160);
    checkToken(cmd.uid, 'the command uid', 128);
    checkToken(cmd.generation, 'the command generation', 128);
    if (!/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?Z$/.test(cmd.time) || Number.isNaN(Date.parse(cmd.time))) throw invalid(`the command time ${JSON.stringify(cmd.time)} is not an ISO 8601 UTC timestamp`);
    if (command.kind === 'txn') {
      this.checkForwardedTxn(command.cmd);
      return;
    }
    if (command.kind === 'lease-grant' || command.kind === 'lease-revoke') {
      // Only this leader's lease clock expires leases: a follower forwards client revokes only.
      if (command.kind === 'lease-revoke' && command.cmd.reason !== 'revoked') throw invalid('a forwarded lease revoke must have reason "revoked": only the leader expires leases');
      return;
    }
    this.checkForwardedOp(command, store, protectData);
  }

  /**
   * A forwarded transaction: this leader's limits (`TxnLimits`), every compared resource's
   * type, tenancy and name, and each op as the single command of its kind (a write as an
   * unconditional write: its hooks run at apply), and no resource named twice in a branch.
   */
  private checkForwardedTxn(cmd: TxnCommand): void {
    checkTxnSize(this.txnLimits, cmd.compare.length, cmd.then.length, cmd.else.length);
    // The same whole-request checks as a local transaction's (the ACL types, the data limit):
    // the data is as the follower measured it, before the hooks that run at apply.
    const shape = (branch: 'then' | 'else') => (op: TxnOp, i: number): TxnOpShape => {
      try {
        return { group: op.id.type.group, kind: op.id.type.kind, dataBytes: op.op === 'write' ? checkJson(op.data, 'data') : 0 };
      } catch (e) {
        throw atPart(`${branch}[${i}]`, e);
      }
    };
    checkTxnOps(this.txnLimits, cmd.then.map(shape('then')), cmd.else.map(shape('else')));
    cmd.compare.forEach((c, i) => {
      try {
        const typeName = formatTypeRef(c.id.type);
        this.checkNormalId(this.registry.resolve(typeName), typeName, c.id);
        if (c.uid !== undefined) checkToken(c.uid, 'uid', 128);
      } catch (e) {
        throw atPart(`compare[${i}]`, e);
      }
    });
    for (const [branch, ops] of [['then', cmd.then], ['else', cmd.else]] as const) {
      const seen = new Set<string>();
      ops.forEach((op, i) => {
        try {
          const key = JSON.stringify([op.id.type.group, op.id.type.kind, op.id.tenancy.partition, op.id.tenancy.namespace, op.id.name]);
          if (seen.has(key)) throw invalid(`it names ${op.id.name}, which an earlier op of the branch names (a resource may appear once per branch)`);
          seen.add(key);
          const body = { ...op, time: cmd.time, uid: cmd.uid, generation: cmd.generation };
          if (op.op === 'write') this.checkForwardedOp({ type: CommandType.ResourcePut, kind: 'put', cmd: body as PutCommand }, undefined, false);
          else if (op.op === 'delete') this.checkForwardedOp({ type: CommandType.ResourceDelete, kind: 'delete', cmd: body as DeleteCommand }, undefined, false);
          else this.checkForwardedOp({ type: CommandType.ResourceStatus, kind: 'status', cmd: body as WriteStatusCommand }, undefined, false);
        } catch (e) {
          throw atPart(`${branch}[${i}]`, e);
        }
      });
    }
    // A resource an op creates gets its op's uid, which must be a ULID (the decoder checked the counts).
    for (const [branch, key] of [['then', 'thenUids'], ['else', 'elseUids']] as const) {
      const uids = cmd[key];
      if (uids === undefined) throw invalid(`a forwarded transaction must carry ${key} (one ULID per op of the ${branch} branch)`);
      uids.forEach((u, i) => {
        if (!ULID.test(u)) throw invalid(`${key}[${i}] ${JSON.stringify(u.slice(0, 40))} is not a ULID`);
      });
    }
  }

  /** A command's id names a registered type, a tenancy in normal form and a DNS-label name. */
  private checkNormalId(t: RegisteredType, typeName: string, id: { readonly tenancy: Tenancy; readonly name: string }): { tenancy: Tenancy; name: string } {
    const tenancy = normalizeTenancy(t, id.tenancy.partition, id.tenancy.namespace);
    if (tenancy.partition !== id.tenancy.partition || tenancy.namespace !== id.tenancy.namespace) {
      throw invalid(`tenancy ${JSON.stringify(id.tenancy)} of ${typeName} is not in normal form (${JSON.stringify(tenancy)})`);
    }
    return { tenancy, name: checkDnsLabel(id.name, 'name') };
  }

  private checkForwardedOp(command: Exclude<DecodedCommand, { kind: 'restore' | 'txn' | 'lease-grant' | 'lease-revoke' }>, store: StoreReader | undefined, protectData: boolean): void {
    const cmd = command.cmd;
    const typeName = formatTypeRef(cmd.id.type);
    const t = this.registry.resolve(typeName);
    const { tenancy, name } = this.checkNormalId(t, typeName, cmd.id);
    if (cmd.id.uid !== undefined) checkToken(cmd.id.uid, 'uid', 128);
    switch (command.kind) {
      case 'delete':
        return;
      case 'status': {
        const c = command.cmd;
        if (!QUALIFIED.test(c.key)) throw invalid(`status key ${JSON.stringify(c.key)} must be a qualified name (e.g. demo.v1.artist-controller)`);
        checkConditions(c.conditions);
        return;
      }
      case 'write':
      case 'put': {
        const c = command.cmd;
        // A local write's data is measured before its type's mutate hook, which may add
        // defaults; the leader sees it after. The hooks get room (twice the limit) rather than
        // refusing here a write its follower accepted; an outsider still cannot go far past it.
        const dataLimit = 2 * LIMITS.dataBytes;
        if (checkJson(c.data, 'data') > dataLimit) throw new CairnError(ErrorCode.TOO_LARGE, `forwarded data is over ${dataLimit} bytes`);
        const metadata = c.metadata === undefined ? {} : checkMetadata(c.metadata);
        if (c.finalizers !== undefined) checkFinalizers(c.finalizers);
        if (c.owner !== undefined && c.owner !== null) {
          const o = c.owner;
          const ot = this.registry.resolve(formatTypeRef(o.type));
          const oten = normalizeTenancy(ot, o.tenancy.partition, o.tenancy.namespace);
          if (oten.partition !== o.tenancy.partition || oten.namespace !== o.tenancy.namespace) throw invalid('owner.tenancy is not in normal form');
          checkDnsLabel(o.name, 'owner.name');
          checkToken(o.uid, 'owner.uid', 128);
        }
        if (c.status !== undefined) {
          for (const [k, st] of Object.entries(c.status)) {
            if (k === '__proto__') throw invalid('status has the key "__proto__", which cannot be stored');
            checkConditions(st.conditions);
          }
        }
        // An unconditional write's hooks run at apply, against the state at its log position.
        if (command.kind === 'put' || store === undefined) return;
        const current = store.get({ group: t.group, kind: t.kind, tenancy, name });
        const proposed: ProposedResource = { type: this.typeRef(t), partition: tenancy.partition, namespace: tenancy.namespace, name, data: protectData ? copyJson(c.data) : c.data, metadata };
        // The hook judges the state the write is meant for; against another, the CAS refuses it at apply.
        if (command.cmd.expectedVersion === undefined || command.cmd.expectedVersion === (current?.version ?? 0)) checkProposed(t, typeName, proposed, current);
        else checkSchema(t, typeName, proposed);
        return;
      }
    }
  }

  /**
   * The filter of a List or a Watch: the type with or without its group version, the tenancy
   * with `*` wildcards, and a name prefix; checks the caller may list it.
   */
  listFilter(req: { type: string; partition?: string | undefined; namespace?: string | undefined; namePrefix?: string | undefined }): ListFilter {
    if (typeof req.type !== 'string') throw invalid('type must be a string');
    const p = parseTypeString(req.type, true);
    const t = p.groupVersion === undefined ? this.registry.resolveGroupKind(p.group, p.kind) : this.registry.resolve(req.type);
    const tenancy = normalizeTenancy(t, req.partition, req.namespace, true);
    const namePrefix = req.namePrefix === undefined || req.namePrefix === '' ? undefined : req.namePrefix;
    if (namePrefix !== undefined && (typeof namePrefix !== 'string' || !/^[a-z0-9-]{1,63}$/.test(namePrefix))) throw invalid('name_prefix must be a prefix of a DNS label');
    return {
      group: t.group,
      kind: t.kind,
      ...(p.groupVersion !== undefined ? { groupVersion: p.groupVersion } : {}),
      partition: tenancy.partition,
      namespace: tenancy.namespace,
      ...(namePrefix !== undefined ? { namePrefix } : {}),
    };
  }

  /**
   * What a list or watch with `filter` may show this caller: refused (UNAUTHENTICATED or
   * PERMISSION_DENIED) when no grant covers any of it; otherwise each item is checked on its
   * own, so a namespace-scoped token may list `*` and see its namespace only.
   */
  listAccess(identity: Identity, filter: ListFilter, verb: 'list' | 'watch'): ListAccess {
    const v = aclVerb(filter.group, filter.kind, verb);
    this.access.checkList(identity, v, {
      group: filter.group,
      groupVersion: filter.groupVersion,
      kind: filter.kind,
      partition: filter.partition,
      namespace: filter.namespace,
      name: '',
      ...(filter.namePrefix !== undefined ? { namePrefix: filter.namePrefix } : {}),
    });
    const everything = identity.kind === 'open' || identity.kind === 'node' || (identity.kind === 'token' && identity.management);
    return {
      identity,
      visible: everything ? () => true : (r) => authorize(identity, aclVerb(r.id.type.group, r.id.type.kind, verb), targetOf(r)),
    };
  }

  /**
   * One page of a list (docs/api.md "Paging"). The first page reads at the requested
   * consistency; when more remain, a snapshot of the store at that revision is held
   * (SnapshotCache) and the answer's `continue` token names the revision, the last key sent and
   * the filter. A later page reads that snapshot, so every page reflects the first page's
   * revision: a watch from it misses nothing. A token for a revision this node no longer holds
   * is COMPACTED (the client starts over); a token of another list, or a garbled one, is
   * INVALID_ARGUMENT.
   */
  async list(req: ListRequest, ctx: CallContext = {}): Promise<ListResult> {
    const filter = this.listFilter(req);
    const ownerUid = req.ownerUid === undefined || req.ownerUid === '' ? undefined : req.ownerUid;
    const [c] = await this.coord(ctx);
    const access = this.listAccess(await this.identify(c, ctx), filter, 'list');
    const t = this.registry.resolveGroupKind(filter.group, filter.kind);
    if (t.access && !t.access('list', { partition: filter.partition, namespace: filter.namespace, name: '' }, ctx.token)) {
      throw new CairnError(ErrorCode.PERMISSION_DENIED, `not allowed to list ${t.group}.${t.kind}`);
    }
    const query: ListQuery = { ...filter, ...(ownerUid !== undefined ? { ownerUid } : {}) };
    const limit = pageLimit(req.limit, this.paging.maxPageItems);
    // Pages count only what the caller may see (access control filters item by item), so they stay full.
    return this.readPage(ctx, req.consistency, filterHash({ list: query }), req.continue, (view, after, sizeOf) =>
      view.listPage(query, { limit, after, maxBytes: this.paging.maxPageBytes, sizeOf, visible: (r) => access.visible(r) }),
    );
  }

  /** Every resource owned by `ownerUid`, of any type (gRPC ListByOwner), a page at a time as `list`. */
  async listByOwner(req: ListByOwnerRequest, ctx: CallContext = {}): Promise<ListResult> {
    const ownerUid = req.ownerUid;
    if (typeof ownerUid !== 'string' || ownerUid === '') throw invalid('owner uid is required');
    const limit = pageLimit(req.limit, this.paging.maxPageItems);
    const identity = await this.identifyCall(ctx);
    // The children may be of any type: the caller's grants (`list` on each item) and each type's
    // access hook decide what this caller sees, and a page counts only what the caller sees.
    const visible = (r: Resource): boolean => {
      if (!authorize(identity, aclVerb(r.id.type.group, r.id.type.kind, 'list'), targetOf(r))) return false;
      let t: RegisteredType;
      try {
        t = this.registry.resolve(`${r.id.type.group}.${r.id.type.groupVersion}.${r.id.type.kind}`);
      } catch {
        return true; // a type no longer registered has no hook to consult
      }
      return !t.access || t.access('list', { partition: r.id.tenancy.partition, namespace: r.id.tenancy.namespace, name: r.id.name }, ctx.token);
    };
    // The caller is not part of the filter hash (it would put a hash of a secret in the token):
    // every page runs the access hooks with the token of its own request, so a continue token
    // passed to another caller shows that caller only what it may see.
    return this.readPage(ctx, req.consistency, filterHash({ owner: ownerUid }), req.continue, (view, after, sizeOf) =>
      view.listByOwnerPage(ownerUid, { limit, after, visible, maxBytes: this.paging.maxPageBytes, sizeOf }),
    );
  }

  private async readPage(
    ctx: CallContext,
    consistency: Consistency | undefined,
    hash: string,
    token: string | undefined,
    page: (view: StoreReader, after: string | undefined, sizeOf: (r: Resource) => number) => Page,
  ): Promise<ListResult> {
    // Each item's JSON is built once: to weigh it against the page's byte bound, then to answer.
    const json = new Map<Resource, ResourceJson>();
    const sizeOf = (r: Resource): number => {
      const j = resourceToJson(r);
      json.set(r, j);
      return JSON.stringify(j).length;
    };
    const answer = (p: Page, revision: Revision, lastLeaderContactMs: number | undefined): ListResult => ({
      resources: p.items.map((r) => json.get(r) ?? resourceToJson(r)),
      revision,
      lastLeaderContactMs,
      ...(p.nextAfter !== undefined ? { continue: encodeContinue({ revision, after: p.nextAfter, filter: hash }) } : {}),
    });
    const [c] = await this.coord(ctx);
    if (token === undefined || token === '') {
      const out = await c.read(consistency ?? 'linearizable', (s) => {
        const p = page(s, undefined, sizeOf);
        // Taken in the same synchronous step as the page, so both are at one revision.
        return { p, snapshot: p.nextAfter !== undefined ? s.snapshot() : undefined };
      });
      if (out.value.snapshot !== undefined) this.snapshots.hold(out.value.snapshot);
      return answer(out.value.p, out.revision, out.lastLeaderContactMs);
    }
    const t = decodeContinue(token);
    if (t.filter !== hash) throw invalid('the continue token belongs to another list (another type, tenancy, name prefix, or owner); pass it only with the filter of the list that returned it');
    // Not held (expired, dropped, or never taken on this node): the live store still serves it
    // if it is at exactly that revision (every node's store is the same at one revision).
    const out = await c.read('stale', (s) => this.snapshots.get(t.revision) ?? (s.revision === t.revision ? s.snapshot() : undefined));
    const view = out.value;
    if (view === undefined) {
      throw new CairnError(
        ErrorCode.COMPACTED,
        `the list's revision ${t.revision} is no longer held by this node (held ${Math.round(this.paging.snapshotTtlMs / 1000)} s at most, by the node that served the first page, until it restarts); start the list over without a continue token`,
        { revision: String(t.revision) },
      );
    }
    const p = page(view, t.after, sizeOf);
    if (p.nextAfter !== undefined) this.snapshots.hold(view);
    return answer(p, t.revision, out.lastLeaderContactMs);
  }
}

/** The type's schema, then its validate hook: for a local write, and for a forwarded one (`checkCommand`). */
/** A write's `lease` field (docs/api.md "Leases"): absent keeps, '' detaches, else a lease id. */
export function checkLeaseField(v: unknown): string | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'string') throw invalid('lease must be a string (a lease id, or "" to detach)');
  if (v === '') return '';
  const problem = leaseIdProblem(v);
  if (problem !== undefined) throw invalid(problem);
  return v;
}

export function checkProposed(t: RegisteredType, typeName: string, proposed: ProposedResource, current: Resource | undefined): void {
  checkSchema(t, typeName, proposed);
  const reason = t.validate?.(proposed, current);
  if (reason !== undefined) throw invalid(`data refused by ${typeName}: ${reason}`);
}

function checkSchema(t: RegisteredType, typeName: string, proposed: ProposedResource): void {
  if (!t.validateData(proposed.data)) {
    const errs = (t.validateData.errors ?? []).map((e) => `${e.instancePath || '/'} ${e.message ?? ''}`.trim()).join('; ');
    throw new CairnError(ErrorCode.INVALID_ARGUMENT, `data does not match the schema of ${typeName}: ${errs}`, { schema_errors: t.validateData.errors ?? [] });
  }
}

/** A token this server chose (uid, generation, request id): printable ASCII, bounded. */
function checkToken(v: string, what: string, max: number): void {
  if (v === '' || v.length > max || !/^[\x21-\x7e]+$/.test(v)) throw invalid(`${what} must be 1-${max} printable ASCII characters`);
}

export function fromApplyError(r: Extract<ApplyResult, { ok: false }>): CairnError {
  const code = parseErrorCode(r.error.code);
  // errors.ts's publicDetails makes the details public (snake_case, versions as decimal strings).
  return new CairnError(code, r.error.message, r.error.details);
}

function expectWrite(r: ApplyResult): Resource {
  if (!r.ok) throw fromApplyError(r);
  if (r.kind !== 'write') throw reusedRequestId(r.kind, 'write');
  return r.resource;
}

/** The ACL verb of an operation: the ACL types themselves need `admin` for anything. */
export function aclVerb(group: string, kind: string, verb: AccessVerb | 'watch'): AclVerb {
  if (isAclType(group, kind)) return 'admin';
  return verb === 'status' ? 'write-status' : verb;
}

/**
 * The state machine answered a repeated request id with the first result it had for that id,
 * which was another kind of operation: the caller reused an idempotency key for a different
 * request. Nothing was applied for this one.
 */
function reusedRequestId(first: string, asked: string): CairnError {
  return new CairnError(
    ErrorCode.INVALID_ARGUMENT,
    `the request id (Idempotency-Key / request_id) was first used for a ${first === 'status' ? 'status write' : first}, and a repeated id is answered with its first result; use a new id for this ${asked} (nothing was applied)`,
  );
}
