/**
 * The resource shapes of API.md ("Resources"), as the JSON API shows them: snake_case fields,
 * versions and revisions as decimal strings. Declared here rather than imported from api: the
 * client depends on nothing but base and the generated protocol code.
 */

export interface Tenancy {
  readonly partition: string;
  readonly namespace: string;
}

export interface ResourceId {
  /** group.groupVersion.Kind, e.g. `demo.v1.Artist`. */
  readonly type: string;
  readonly tenancy: Tenancy;
  readonly name: string;
  /** Assigned by the server on create (a ULID). */
  readonly uid: string;
}

/**
 * Names a resource in a request. A ResourceId from an earlier answer fits. Missing tenancy
 * fields mean `default` (or nothing, for a scope without them). With `uid`, only that
 * incarnation matches (a deleted and re-created resource has a new uid).
 */
export interface ResourceRef {
  readonly type: string;
  readonly name: string;
  readonly tenancy?: Partial<Tenancy>;
  readonly uid?: string;
}

export type ConditionState = 'TRUE' | 'FALSE' | 'UNKNOWN';

export interface Condition {
  readonly type: string;
  readonly state: ConditionState;
  readonly reason: string;
  readonly message: string;
}

export interface Status {
  readonly observed_generation: string;
  readonly conditions: readonly Condition[];
  /** RFC 3339, set by the server. */
  readonly updated_at: string;
}

/**
 * A stored resource. `D` is the caller's view of `data`; it is not checked at run time (the
 * type's JSON Schema, enforced by the server on every write, is what holds).
 */
export interface Resource<D = unknown> {
  readonly id: ResourceId;
  readonly owner: ResourceId | null;
  /** The revision of the resource's last change (decimal). Pass it back as `version` for a compare-and-swap. */
  readonly version: string;
  /** Changes when data, metadata, owner or finalizers change (not on status writes). */
  readonly generation: string;
  readonly metadata: Readonly<Record<string, string>>;
  readonly finalizers: readonly string[];
  /** Set while a delete waits for finalizers. */
  readonly deletion_timestamp: string | null;
  readonly data: D;
  /** Keyed by controller. */
  readonly status: Readonly<Record<string, Status>>;
  /** The lease it is attached to (docs/api.md "Leases"); absent when none. */
  readonly lease?: string;
}

export type Consistency = 'linearizable' | 'stale';

/** Per-call options. */
export interface CallOptions {
  /** Cancels the call. A write cancelled after it was sent may still be applied (see isOutcomeUnknown). */
  readonly signal?: AbortSignal;
  /** The call's deadline in milliseconds, retries and failovers included. Default: the client's timeoutMs. */
  readonly timeoutMs?: number;
}

export interface MutationOptions extends CallOptions {
  /**
   * Idempotency key. Default: a fresh ULID per call, reused by every retry of that call. Pass
   * your own to make retries of your own (after a restart, say) apply at most once too.
   */
  readonly requestId?: string;
}

export interface ReadOptions extends CallOptions {
  /** Default linearizable: sees every write acknowledged before the call. */
  readonly consistency?: Consistency;
}

export interface ListOptions extends ReadOptions {
  /** `*` matches any partition; empty or absent means `default`. */
  readonly partition?: string;
  /** `*` matches any namespace; empty or absent means `default`. */
  readonly namespace?: string;
  readonly namePrefix?: string;
  /** Only resources owned by this uid. */
  readonly ownerUid?: string;
  /**
   * Page size: resources per request. Absent: the server's page maximum (1,000 by default);
   * larger values are clamped by the server. `list` and `listByOwner` still return everything,
   * a page at a time; `listPage` and `listPages` return one page per call or step.
   */
  readonly limit?: number;
}

export interface ListPageOptions extends ListOptions {
  /** The `continue` of the previous page (with the same filter): the next page, at the first page's revision. */
  readonly continue?: string;
}

export interface ListByOwnerOptions extends ReadOptions {
  /** As ListOptions.limit. */
  readonly limit?: number;
}

export interface DeleteOptions extends MutationOptions {
  /** Delete only at this version (CAS_FAILED otherwise). */
  readonly version?: string;
}

/** What a write sends. */
export interface WriteBody<D = unknown> {
  /** JSON-serializable; at most 1 MiB as JSON. */
  readonly data: D;
  /** Absent: keep the stored metadata. Present, even `{}`: replace it. */
  readonly metadata?: Readonly<Record<string, string>>;
  /** Only on create; the owner must exist. */
  readonly owner?: ResourceId;
  /** Absent: keep the stored finalizers. Present, even `[]`: replace them. */
  readonly finalizers?: readonly string[];
  /**
   * Absent: unconditional upsert (never CAS_FAILED for contention: the server's state machine
   * orders concurrent writers and runs the type's hooks at apply). `"0"`: create only.
   * Otherwise compare-and-swap against the stored version.
   */
  readonly version?: string;
  /** The stored status passed back unchanged (as read), or absent. It cannot be changed by a write. */
  readonly status?: Readonly<Record<string, Status>>;
  /**
   * Absent: keep the resource's lease attachment (none on create). A lease id (from
   * `client.leases.grant`): attach it, so it is deleted when the lease expires or is revoked;
   * the lease must exist (NOT_FOUND otherwise). `''`: detach.
   */
  readonly lease?: string;
}

/** What `update` asks its function for: a write without `version` (update supplies it). */
export type UpdateBody<D = unknown> = Omit<WriteBody<D>, 'version' | 'status'>;

export interface StatusBody {
  readonly observed_generation: string;
  readonly conditions: readonly Condition[];
  /** Apply only at this version of the resource (CAS_FAILED otherwise). */
  readonly version?: string;
}

export interface ReadResult<D = unknown> {
  readonly resource: Resource<D>;
  /** The store revision the answer reflects (decimal). */
  readonly revision: string;
  /** Milliseconds since the answering node heard from the leader (0 on the leader); undefined when it knows none. */
  readonly lastLeaderContactMs: number | undefined;
}

export interface ListResult<D = unknown> {
  readonly resources: Array<Resource<D>>;
  /** The store revision the list reflects: a watch from here misses nothing. */
  readonly revision: string;
  readonly lastLeaderContactMs: number | undefined;
}

/** One page of a list. Every page of one list carries the first page's revision. */
export interface ListPage<D = unknown> extends ListResult<D> {
  /** Present when more remain: pass it as `continue` for the next page. Opaque. */
  readonly continue?: string;
}

/**
 * What a delete did. `deleted: false` has two cases, told apart by `resource`:
 *
 * - `resource === null`: there was nothing to delete (no such resource, or `ref.uid` names
 *   another incarnation than the stored one); nothing changed.
 * - `resource !== null`: finalizers hold the delete back; `resource` is the marked state
 *   (`deletion_timestamp` set, a new version and generation). It is removed when its last
 *   finalizer is removed. Deleting it again answers the same.
 */
export interface DeleteResult<D = unknown> {
  /** True: removed, with everything it owned. False: nothing was there, or finalizers hold it back (see the type's doc). */
  readonly deleted: boolean;
  /** Removed: the last stored state. Held back by finalizers: the marked state. Nothing there: null. */
  readonly resource: Resource<D> | null;
}

export interface UpdateOptions extends CallOptions {
  /** Read-modify-write rounds before CAS_FAILED is given up on and thrown. Default 20. */
  readonly maxAttempts?: number;
  /** Backoff before the second round, in ms; it doubles each round (full jitter). Default 10. */
  readonly baseBackoffMs?: number;
  /** Upper bound of one backoff, in ms. Default 1,000. */
  readonly maxBackoffMs?: number;
}

/** Given the current resource (null when absent), the write to make, or undefined to leave it as it is. */
export type UpdateFn<D> = (current: Resource<D> | null) => UpdateBody<D> | undefined | Promise<UpdateBody<D> | undefined>;
