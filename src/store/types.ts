import type { CairnError, Result, Revision } from '../base/index.js';

/**
 * The data model of the resource store (API.md "Resources"). Every object the store hands out
 * is deeply frozen and never changes afterwards: snapshots share them with the live store, so
 * the types say `readonly` all the way down.
 */

/** `demo.v1.Artist` is `{ group: 'demo', groupVersion: 'v1', kind: 'Artist' }`. */
export interface TypeRef {
  readonly group: string;
  readonly groupVersion: string;
  readonly kind: string;
}

/**
 * Where a resource lives. Normalized by the API layer before it reaches the store: a field the
 * type's scope lacks is '' (cluster scope: both ''; partition scope: namespace '').
 */
export interface Tenancy {
  readonly partition: string;
  readonly namespace: string;
}

/** A stored resource's full id. Identity is (group, kind, partition, namespace, name). */
export interface ResourceId {
  readonly type: TypeRef;
  readonly tenancy: Tenancy;
  readonly name: string;
  readonly uid: string;
}

export type ConditionState = 'TRUE' | 'FALSE' | 'UNKNOWN';

export interface Condition {
  readonly type: string;
  readonly state: ConditionState;
  readonly reason: string;
  readonly message: string;
}

/** One controller's report, under its key in `Resource.status`. */
export interface StatusEntry {
  readonly observedGeneration: string;
  readonly conditions: readonly Condition[];
  /** ISO timestamp, set by the store from the command context (never by the client). */
  readonly updatedAt: string;
}

export type JsonValue = null | boolean | number | string | readonly JsonValue[] | { readonly [k: string]: JsonValue };

export interface Resource {
  readonly id: ResourceId;
  /** Set at creation only; never changes afterwards. */
  readonly owner: ResourceId | null;
  /** The revision of the resource's last change. */
  readonly version: Revision;
  readonly generation: string;
  readonly metadata: Readonly<Record<string, string>>;
  readonly finalizers: readonly string[];
  /** Set (from the command's time) when a delete found finalizers; cleared never. */
  readonly deletionTimestamp: string | null;
  readonly data: JsonValue;
  /** Keyed by controller; written only through `writeStatus`. */
  readonly status: Readonly<Record<string, StatusEntry>>;
  /**
   * The lease this resource is attached to (docs/api.md "Leases"); absent when none. When the
   * lease expires or is revoked the resource is deleted. The state machine checks the lease
   * exists before a write attaches to it; the store only keeps the id.
   */
  readonly lease?: string;
}

/**
 * What the leader chose before proposing the command: everything non-deterministic. Every
 * replica applies the same command with the same context, so reaches the same state.
 */
export interface ApplyContext {
  /** The log index of the entry that carries the command. */
  readonly revision: Revision;
  /** ISO timestamp stamped by the leader; the only time the store ever sees. */
  readonly time: string;
  /** The uid of the resource if this command creates one. */
  readonly newUid: string;
  /** The generation of a resource whose generation this command changes. */
  readonly newGeneration: string;
  /** The data quota the proposer stamped into the command (docs/security.md "Quotas"); absent: none. */
  readonly quota?: QuotaContext;
}

/**
 * The quota a write or status write is applied under. A change that grows the stored data
 * (`dataBytes`) is refused with NO_SPACE when the result would be above `bytes`, or at all
 * while `alarm` is set (the FSM's NO_SPACE alarm: growth waits until deletes bring the data
 * down). Changes that shrink or keep the size, and deletes, are never refused for space.
 */
export interface QuotaContext {
  readonly bytes: number;
  readonly alarm: boolean;
}

/**
 * One change made by a command, for the watch stream. `delete` carries the resource's last
 * state. Every record of one command carries that command's revision. The one definition: the
 * fsm returns these from apply, the replica driver hands them on (generic over `R`, its state
 * machine's resource, which is this store's `Resource` in every node), the stream publishes them.
 */
export interface ChangeRecord<R = Resource> {
  readonly kind: 'upsert' | 'delete';
  readonly revision: Revision;
  readonly resource: R;
}

/** Names a resource by identity (no group version, no uid). */
export interface ResourceKeyRef {
  readonly group: string;
  readonly kind: string;
  readonly tenancy: Tenancy;
  readonly name: string;
}

/** Names a resource as a client does: a full type, and optionally the uid it expects. */
export interface ResourceRef {
  readonly type: TypeRef;
  readonly tenancy: Tenancy;
  readonly name: string;
  /** When set (and not ''), must be the stored uid. '' means "not set" (proto3 default). */
  readonly uid?: string;
}

export interface WriteInput {
  /** A uid here is ignored on create and must match the stored uid on update. */
  readonly id: ResourceRef;
  /** Absent on update: keep the stored owner. Only settable at creation. */
  readonly owner?: ResourceId | null;
  /** Absent on update: keep the stored metadata. Absent on create: {}. */
  readonly metadata?: Readonly<Record<string, string>>;
  /** Absent on update: keep the stored finalizers. Absent on create: []. */
  readonly finalizers?: readonly string[];
  readonly data: JsonValue;
  /** Absent, or equal to the stored status; anything else is refused. */
  readonly status?: Readonly<Record<string, StatusEntry>>;
  /** Absent: unconditional. 0: create only. N: applied only if the stored version is N. */
  readonly expectedVersion?: Revision;
  /**
   * Absent: keep the stored attachment (none on create). A lease id: attach to it (the caller,
   * the state machine, checked it exists). '': detach. A change of attachment is a new version
   * but not a new generation (it is not desired state), as a group-version-only change.
   */
  readonly lease?: string;
  /**
   * When set: the uids the caller was authorized to delete. If this write removes the last
   * finalizer of a resource being deleted, and the cascade would remove or mark anything not
   * listed, the write is refused (CAS_FAILED, `cascade_changed`): the API checked a cascade
   * that has changed since (docs/security.md "Cascades").
   */
  readonly cascadeAllowed?: readonly string[];
}

export interface WriteResult {
  /** The resource as stored after the write (for a write that deleted it: its last state). */
  readonly resource: Resource;
  /** False when the write changed nothing (no new version, no change record). */
  readonly changed: boolean;
  readonly changes: readonly ChangeRecord[];
}

export interface DeleteInput {
  readonly id: ResourceRef;
  readonly expectedVersion?: Revision;
  /** As `WriteInput.cascadeAllowed`: the owned resources this delete may remove or mark. */
  readonly cascadeAllowed?: readonly string[];
}

export interface DeleteResult {
  /** True when the resource was removed by this command. */
  readonly deleted: boolean;
  /**
   * The removed resource's last state when deleted; the stored resource when it was kept
   * (marked for deletion because of finalizers, or already marked); null when nothing matched.
   */
  readonly resource: Resource | null;
  readonly changes: readonly ChangeRecord[];
}

export interface WriteStatusInput {
  readonly id: ResourceRef & { readonly uid: string };
  /** The controller's status key. */
  readonly key: string;
  readonly observedGeneration: string;
  readonly conditions: readonly Condition[];
  readonly expectedVersion?: Revision;
}

export interface WriteStatusResult {
  readonly resource: Resource;
  readonly changes: readonly ChangeRecord[];
}

/** Read by full type: a stored resource of another group version is GROUP_VERSION_MISMATCH. */
export interface ReadInput {
  readonly type: TypeRef;
  readonly tenancy: Tenancy;
  readonly name: string;
  /** When set (and not ''), a resource with another uid is NOT_FOUND. */
  readonly uid?: string;
}

export interface ListQuery {
  readonly group: string;
  readonly kind: string;
  /** Absent: every group version. */
  readonly groupVersion?: string;
  /** '*' matches every partition. */
  readonly partition: string;
  /** '*' matches every namespace. */
  readonly namespace: string;
  readonly namePrefix?: string;
  readonly ownerUid?: string;
}

/** How to read one page of a list (`StoreReader.listPage`). */
export interface PageOptions {
  /**
   * Start after this primary key (exclusive): the `nextAfter` of the previous page of the same
   * query. Absent: from the first match. Any string is safe: the scan never leaves the query's
   * range, so a key from elsewhere only moves the start.
   */
  readonly after?: string | undefined;
  /** At most this many items (a positive integer). */
  readonly limit: number;
  /**
   * Only items for which this returns true count and are returned (per-item access filtering):
   * a page holds `limit` visible items whenever that many remain.
   */
  readonly visible?: ((r: Resource) => boolean) | undefined;
  /**
   * With `sizeOf`: the page ends before the item that would take the sum of `sizeOf` over the
   * page past `maxBytes` (a page always holds at least one item, so paging makes progress).
   */
  readonly maxBytes?: number | undefined;
  readonly sizeOf?: ((r: Resource) => number) | undefined;
}

/** One page of a list. */
export interface Page {
  readonly items: Resource[];
  /** Present when more visible matches remain: the key of the last item, the next page's `after`. */
  readonly nextAfter?: string;
}

/** The wildcard of `ListQuery.partition` and `ListQuery.namespace`. */
export const WILDCARD = '*';

/** The read side, shared by the live store and its snapshots. */
export interface StoreReader {
  /** The last applied revision (the log index of the last entry applied). */
  readonly revision: Revision;
  /** How many resources are stored. */
  readonly size: number;
  /**
   * The deterministic size of the stored data in bytes: `resourceBytes` summed over every
   * stored resource (size.ts), the same on every replica. The quota is decided on it.
   */
  readonly dataBytes: number;
  get(ref: ResourceKeyRef): Resource | undefined;
  read(ref: ReadInput): Result<Resource, CairnError>;
  getByUid(uid: string): Resource | undefined;
  /** Sorted by (partition, namespace, name). */
  list(query: ListQuery): Resource[];
  /** One page of `list(query)`, without building the whole list (see PageOptions). */
  listPage(query: ListQuery, opts: PageOptions): Page;
  /** Everything whose owner has this uid, in key order (group, kind, partition, namespace, name). */
  listByOwner(ownerUid: string): Resource[];
  /** One page of `listByOwner(ownerUid)`. */
  listByOwnerPage(ownerUid: string, opts: PageOptions): Page;
  /**
   * An O(1) point-in-time view at this reader's revision: later changes never show in it (a
   * snapshot answers itself). What a paged list holds to serve its later pages.
   */
  snapshot(): StoreReader;
  /** Every resource in key order (group, kind, partition, namespace, name). */
  all(): IterableIterator<Resource>;
  /**
   * What deleting `root` now would remove or mark besides `root` itself: its children,
   * recursively, except below a child with finalizers (that child is marked, its own children
   * stay). In the order the delete's change records would list them.
   */
  cascadeOf(root: Resource): Resource[];
}
