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
