import type { LogIndex, Revision, Term } from '../base/index.js';
import type { NodeId } from '../base/index.js';
import type { ConfigChange, Entry, HardState, Message, Snapshot, SnapshotMeta } from '../raft/index.js';
import type { ChangeRecord } from '../store/index.js';

/**
 * The replica's ports (hashicorp/raft style: narrow, named for their role). `platform`
 * implements them for Node; in-memory reference implementations live in `testing/`, for tests
 * and the simulator.
 */

/** What a node finds on its disk at start-up. */
export interface LoadedLog {
  readonly hardState: HardState;
  /** Entries after the newest snapshot's index (or from 1), contiguous. */
  readonly entries: readonly Entry[];
  /**
   * The term of the stored entry at `afterIndex` (the snapshot's own index), or undefined when
   * the log holds none there that reads back intact (never written, compacted, dropped by an
   * installed snapshot; always undefined for `afterIndex` 0). It tells the driver whether the
   * entries after the snapshot continue the snapshot's history (Replica.open). Reading it is
   * not part of what `load` checks: an entry at `afterIndex` that is unreadable is reported as
   * none, never as damage, as before.
   */
  readonly afterIndexTerm: Term | undefined;
  /** Torn or corrupt entries above the commit index that were cut off while loading. */
  readonly truncatedTail: number;
}

/** The durable Raft log and hard state. */
export interface LogStore {
  /**
   * Reads the log. `afterIndex` is the newest snapshot's index: entries at or below it are
   * skipped, except that the term of the entry at `afterIndex` is reported (`afterIndexTerm`).
   * A torn or corrupt tail above the commit index is cut back and reported; damage at or below
   * the commit index throws `CorruptLogError` (the node must not start).
   */
  load(afterIndex: LogIndex): Promise<LoadedLog>;
  /**
   * One atomic batch per Ready: entries (the first one replaces any entry at or after its
   * index) and the hard state. `sync` = fsync before resolving (group commit: one per batch).
   * With `installedSnapshot` set (the Ready carried a snapshot, already saved), every stored
   * entry is dropped first, before and after that index: the snapshot replaces the whole log,
   * and stale entries after it must not come back on restart behind a newer term. At the least
   * the entries at and after that index go in this same atomic batch (those below it may go
   * later: `load` skips them), so that once the batch is durable the log holds nothing at the
   * snapshot's index.
   *
   * The snapshot file and this batch are two writes: a crash between them leaves the new
   * snapshot and the old log. `Replica.open` finds that state (the log holds the snapshot's
   * index in another term, or nothing at or after it with a commit index below it:
   * `afterIndexTerm`) and writes the batch again, `installedSnapshot` with no entries, before
   * anything else.
   */
  append(batch: {
    readonly entries: readonly Entry[];
    readonly hardState: HardState | undefined;
    readonly sync: boolean;
    readonly installedSnapshot?: LogIndex;
  }): Promise<void>;
  /** Deletes entries at or below `index` (after a snapshot covers them). */
  compact(index: LogIndex): Promise<void>;
  close(): Promise<void>;
}

export interface SnapshotStore {
  /** Writes atomically (temp file, fsync, rename, fsync dir) with a checksum; keeps the newest few. */
  save(snapshot: Snapshot): Promise<void>;
  /** The newest snapshot whose checksum verifies; corrupt ones are skipped (and reported). */
  loadNewest(): Promise<{ snapshot: Snapshot | undefined; skippedCorrupt: readonly string[] }>;
  /**
   * `length` bytes of the saved snapshot `meta` names, from `offset` into its data: how a
   * leader sends a snapshot it no longer holds in memory (`MsgSnap.fill`). Rejects if that
   * snapshot is no longer stored (a newer one replaced it) or cannot be read. Optional: a store
   * without it leaves the core holding its newest snapshot's bytes.
   */
  readBody?(meta: SnapshotMeta, offset: number, length: number): Promise<Uint8Array>;
  close(): Promise<void>;
}

/** Carries Raft messages between nodes. Delivery is best-effort; Raft tolerates loss. */
export interface Transport {
  send(messages: readonly Message[]): void;
  /** Registers the handler for messages addressed to this node. */
  onMessage(handler: (m: Message) => void): void;
  /**
   * Registers the handler told when a working connection with a peer breaks at the peer's end:
   * reset, or closed before the peer said goodbye, as when its process is killed. Never because
   * this node timed something out: a peer that merely goes quiet (paused, partitioned, slow) is
   * the election timeout's to judge. A report may be wrong (Raft's safety does not depend on
   * it). Optional: without it the driver waits out the timeout.
   */
  onConnectionLost?(handler: (peer: NodeId) => void): void;
  close(): Promise<void>;
}

/**
 * Where the changes of each applied entry go, in commit order: this node's event stream
 * (`src/stream`'s `EventPublisher` implements it). `revision` is the entry's log index.
 */
export interface ChangePublisher<R = unknown> {
  /** The changes made by the entry at `revision`, right after it was applied. */
  publish(revision: Revision, changes: readonly ChangeRecord<R>[]): void;
  /**
   * The state was replaced wholesale at `revision` (a snapshot installed or restored): history
   * before it cannot be replayed, and every follower of the stream must start over.
   */
  reset(revision: Revision): void;
}

/** The replicated state machine the replica applies committed entries to. */
export interface StateMachine<Result = unknown, R = unknown> {
  /** Applies one committed entry deterministically; returns the proposer's result and the changes. */
  /** `reset`: the state was replaced wholesale (a restore); subscribers must start over. */
  apply(entry: Entry): { readonly result: Result; readonly changes: readonly ChangeRecord<R>[]; readonly reset?: boolean };
  /**
   * A point-in-time view as of the last applied entry, cheap to take (copy-on-write), whose
   * serialization is produced in chunks so the driver can yield between them and applies
   * never stall behind a large snapshot.
   */
  snapshot(): { readonly index: LogIndex; chunks(): Iterable<Uint8Array> };
  /** Replaces the state with a snapshot's. */
  restore(meta: SnapshotMeta, data: Uint8Array): void;
  readonly appliedIndex: LogIndex;
}

export class CorruptLogError extends Error {
  override readonly name = 'CorruptLogError';
}

/** An operation a follower hands to the leader. */
export type ForwardOp =
  | { readonly kind: 'envelope'; readonly envelope: Uint8Array }
  | { readonly kind: 'config-change'; readonly change: ConfigChange }
  | { readonly kind: 'transfer'; readonly to: NodeId | '' }
  /** A lease request the leader answers from its lease clock (`CoordinatorOptions.leaseRequests`); opaque here. */
  | { readonly kind: 'lease'; readonly request: unknown };

/**
 * Carries an operation from a follower to the leader and brings back the leader's result (the
 * state machine's result for an envelope). Rejects with a CairnError: NOT_LEADER (with the
 * leader it knows) when the target is not leading, UNAVAILABLE when it cannot be reached,
 * TIMEOUT when the outcome is unknown.
 */
export interface Forwarder {
  forward(leader: NodeId, op: ForwardOp, timeoutMs: number): Promise<unknown>;
}
