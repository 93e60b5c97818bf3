import type { Revision } from '../base/index.js';
import type { JsonValue, ResourceId, StatusEntry, Tenancy, TypeRef, Condition } from '../store/index.js';

/**
 * Command bodies carried in envelopes. Everything non-deterministic is chosen by the proposer
 * (the API layer on the leader's side) and travels in the header, so every replica applies
 * the same command to the same state with the same outcome.
 */
export interface CommandHeader {
  /** Client-chosen proposal id; a repeat within the window returns the first result. */
  readonly requestId?: string;
  /** ISO timestamp stamped by the proposer: the only time apply ever sees. */
  readonly time: string;
  /** Uid for a resource this command creates. */
  readonly uid: string;
  /** Generation for a resource whose generation this command changes. */
  readonly generation: string;
  /**
   * The data quota, in bytes, of the node that built the command (docs/security.md "Quotas"):
   * a write or status write that would grow the data above it is refused with NO_SPACE at
   * apply, on every replica alike, and each stamped command (deletes too) re-evaluates the
   * NO_SPACE alarm. Absent (entries written before quotas existed): no quota, alarm unchanged.
   */
  readonly quotaBytes?: number;
  /**
   * The most resources one lease may have attached, of the node that built the command
   * (`--lease-max-attached`; docs/api.md "Leases"), stamped into a write, put or transaction
   * that attaches a resource to a lease, so every replica reaches the same verdict: a write
   * that would attach one more is refused (TOO_LARGE). Absent (entries written before the
   * limit existed): no limit.
   */
  readonly leaseMaxAttached?: number;
}

export interface NameRef {
  readonly type: TypeRef;
  readonly tenancy: Tenancy;
  readonly name: string;
  readonly uid?: string;
}

export interface WriteCommand extends CommandHeader {
  readonly id: NameRef;
  readonly owner?: ResourceId | null;
  readonly metadata?: Readonly<Record<string, string>>;
  readonly finalizers?: readonly string[];
  readonly data: JsonValue;
  readonly status?: Readonly<Record<string, StatusEntry>>;
  readonly expectedVersion?: Revision;
  /** The owned resources (uids) the caller may delete, when access control limits it (store `WriteInput.cascadeAllowed`). */
  readonly cascadeAllowed?: readonly string[];
  /**
   * Absent: keep the resource's lease attachment (none on create). A lease id: attach the
   * resource to that lease, which must exist at this log position (else the write fails with
   * NOT_FOUND). '': detach it (docs/api.md "Leases").
   */
  readonly lease?: string;
}

/**
 * An unconditional write (envelope `ResourcePut`, 0x14; docs/api.md "Unconditional writes"):
 * a write command without `expectedVersion`, whose `data` and `metadata` are as the client sent
 * them, before the type's hooks. The state machine runs the type's mutate and validate hooks
 * against the state at the entry's log position (`WriteHooks`), so concurrent writers of one
 * key are ordered by the log and none is refused for contention. `metadata` absent: keep the
 * stored metadata (`{}` on create), as for a WriteCommand.
 */
export type PutCommand = Omit<WriteCommand, 'expectedVersion'>;

export interface DeleteCommand extends CommandHeader {
  readonly id: NameRef;
  readonly expectedVersion?: Revision;
  /** As on WriteCommand. */
  readonly cascadeAllowed?: readonly string[];
}

export interface WriteStatusCommand extends CommandHeader {
  readonly id: NameRef & { readonly uid: string };
  readonly key: string;
  readonly observedGeneration: string;
  readonly conditions: readonly Condition[];
  readonly expectedVersion?: Revision;
}

/**
 * What a transaction's comparison looks at (envelope `Txn`, 0x15; docs/api.md "Transactions"),
 * evaluated against the state at the entry's log position:
 * - `version`: the stored version equals `version` (an absent resource has version 0);
 * - `exists` / `absent`: a resource of that name is stored / is not;
 * - `uid`: a resource of that name is stored and its uid is `uid`.
 * Resources are named by identity (the group version of `type` is not compared).
 */
export type TxnCompareTarget = 'version' | 'exists' | 'absent' | 'uid';

export interface TxnCompare {
  readonly target: TxnCompareTarget;
  readonly id: { readonly type: TypeRef; readonly tenancy: Tenancy; readonly name: string };
  /** For `version`. */
  readonly version?: Revision;
  /** For `uid`. */
  readonly uid?: string;
}

/**
 * One operation of a transaction's branch. A write runs the type's hooks at apply, as an
 * unconditional write (0x14) does, against the state at that position, then applies with its
 * `expectedVersion` when it has one (a compare-and-swap, as 0x10): one path for both. A
 * write that creates a resource gives it its op's ULID from `thenUids` / `elseUids`. Every op of a branch shares the command's time
 * and generation.
 */
export type TxnOp =
  | ({ readonly op: 'write' } & Pick<WriteCommand, 'id' | 'owner' | 'metadata' | 'finalizers' | 'data' | 'status' | 'expectedVersion' | 'cascadeAllowed' | 'lease'>)
  | ({ readonly op: 'delete' } & Pick<DeleteCommand, 'id' | 'expectedVersion' | 'cascadeAllowed'>)
  | ({ readonly op: 'status' } & Pick<WriteStatusCommand, 'id' | 'key' | 'observedGeneration' | 'conditions' | 'expectedVersion'>);

/**
 * A transaction (envelope `Txn`, 0x15): every comparison is evaluated against the state at the
 * entry's position; if all hold, the `then` ops apply, else the `else` ops; all of the branch
 * or none of it, at one revision (the entry's index).
 */
export interface TxnCommand extends CommandHeader {
  readonly compare: readonly TxnCompare[];
  readonly then: readonly TxnOp[];
  readonly else: readonly TxnOp[];
  /**
   * One fresh ULID per op of `then` / `else` (the leader's, made where a single write's uid is
   * made, monotonic): the uid of a resource that op creates, so every uid is a ULID as the
   * contract says. The counts equal the branches' (checked by the decoder). Absent only in
   * entries written before they were added: those ops use `txnOpUid`.
   */
  readonly thenUids?: readonly string[];
  readonly elseUids?: readonly string[];
}

/**
 * Whether comparison `c` holds for `stored` (the resource of that name, or undefined when none
 * is stored). One rule for the state machine (at the entry's log position) and for a
 * transaction with no ops, which the service answers with a linearizable read instead of a
 * log entry (docs/api.md "Transactions").
 */
export function txnCompareHolds(c: TxnCompare, stored: { readonly version: Revision; readonly id: { readonly uid: string } } | undefined): boolean {
  switch (c.target) {
    case 'exists':
      return stored !== undefined;
    case 'absent':
      return stored === undefined;
    case 'version':
      return (stored?.version ?? 0) === c.version;
    case 'uid':
      return stored !== undefined && stored.id.uid === c.uid;
  }
}

/** The uid a transaction's write op `index` gives a resource it creates, for an entry without `thenUids` / `elseUids` (written before them). */
export function txnOpUid(commandUid: string, index: number): string {
  return `${commandUid}-${index}`;
}

/** The longest TTL a lease may be granted, in seconds (etcd's MaxLeaseTTL). */
export const MAX_LEASE_TTL_SECONDS = 9_000_000_000;

/** A lease id: a DNS label (lowercase letters, digits and '-', 1-63 characters); a leader-chosen id is a lowercase ULID. */
export const LEASE_ID_PATTERN = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;

/** Why `id` is not a lease id, or undefined when it is one. */
export function leaseIdProblem(id: unknown): string | undefined {
  if (typeof id !== 'string') return 'a lease id must be a string';
  if (!LEASE_ID_PATTERN.test(id)) return `lease id ${JSON.stringify(id.length > 80 ? `${id.slice(0, 80)}...` : id)} is not a lowercase DNS label (letters, digits and '-', 1-63 characters, starting and ending with a letter or digit)`;
  return undefined;
}

/**
 * Grants a lease (envelope `LeaseGrant`, 0x16; docs/api.md "Leases"): adds `id` with its TTL
 * to the lease table. The id is the client's or, when it gave none, one the leader chose (so
 * apply stays deterministic). Refused when the id is in use, when the table already holds
 * `maxLeases` leases (the proposer's `--max-leases`, stamped in like `quotaBytes`), or for
 * space (a lease counts `LEASE_BYTES` plus its id against the quota). The state machine keeps
 * no deadline: when the lease expires is the leader's lease clock's business.
 */
export interface LeaseGrantCommand extends CommandHeader {
  readonly id: string;
  /** Whole seconds, 1 to MAX_LEASE_TTL_SECONDS (already raised to the proposer's minimum). */
  readonly ttlSeconds: number;
  readonly maxLeases?: number;
}

/** Why a lease ends: revoked by a client, or expired by the leader's lease clock. */
export type LeaseRevokeReason = 'revoked' | 'expired';

/**
 * Revokes a lease (envelope `LeaseRevoke`, 0x17): removes it from the table and deletes every
 * resource attached to it at this log position, through the ordinary delete (finalizers and
 * owner cascade as a single delete), all at this entry's revision. Carries only the id: what
 * is deleted is the replicated attachment set, never a list the proposer saw. An expiry also
 * names the grant it was decided for (`grantRevision`).
 */
export interface LeaseRevokeCommand extends CommandHeader {
  readonly id: string;
  readonly reason: LeaseRevokeReason;
  /**
   * Required with reason `expired`, absent otherwise: the grant (`LeaseEntry.grantRevision`)
   * whose deadline passed. The entry expires the lease only if the table still holds that
   * grant; a lease revoked and granted again under the same id before the entry applies keeps
   * its new grant (the entry is a no-op). A client's revoke ends whatever grant holds the id.
   */
  readonly grantRevision?: number;
}
