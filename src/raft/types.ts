import type { LogIndex, NodeId, Term } from '../base/index.js';

/**
 * Log entry kinds the core itself understands. An entry's `data` is an envelope: byte 0 is the
 * message type, the rest is the msgpack body (ARCHITECTURE.md). Raft owns types 0x01 and 0x02;
 * the FSM owns the rest of the table (numbered append-only, never reused).
 */
export const EntryType = {
  /** Appended by every new leader (thesis §6.4: commits an entry of its own term). */
  Noop: 0x01,
  /** A membership change; the body is a `ConfigEntryBody`. Takes effect when appended (thesis §4.1). */
  Config: 0x02,
} as const;

export interface Entry {
  readonly index: LogIndex;
  readonly term: Term;
  /** The envelope. Never empty: byte 0 is the type. */
  readonly data: Uint8Array;
}

export type Suffrage = 'voter' | 'learner';

export interface Member {
  readonly id: NodeId;
  readonly suffrage: Suffrage;
  /** Where peers reach this node (the cluster gRPC address); opaque to the core. */
  readonly address: string;
  /** A learner the leader should promote once it has caught up (opaque to the core). */
  readonly autoPromote?: boolean;
}

/** A cluster configuration, members sorted by id. */
export interface Config {
  readonly members: readonly Member[];
}

/** One membership change. Single-server changes only (thesis §4.1). */
export type ConfigChange =
  | { readonly type: 'add-learner'; readonly id: NodeId; readonly address: string; readonly autoPromote?: boolean }
  | { readonly type: 'add-voter'; readonly id: NodeId; readonly address: string }
  | { readonly type: 'promote'; readonly id: NodeId }
  | { readonly type: 'remove'; readonly id: NodeId };

/** The body of an `EntryType.Config` entry: the change and the full configuration it yields. */
export interface ConfigEntryBody {
  readonly change: ConfigChange | { readonly type: 'bootstrap' };
  readonly config: Config;
}

export interface SnapshotMeta {
  readonly index: LogIndex;
  readonly term: Term;
  /** The configuration in force at `index`. */
  readonly config: Config;
}

export interface Snapshot {
  readonly meta: SnapshotMeta;
  /** The application's state at `meta.index`, opaque to the core. */
  readonly data: Uint8Array;
}

/**
 * The snapshot the log keeps to send to followers too far behind: its bytes, or, once the
 * driver has them in its snapshot store and said so (`RawNode.releaseSnapshotData`), only
 * their count. Then the core sends chunks unfilled (`MsgSnap.fill`) and the driver reads each
 * from its store as it goes out, so no node holds its snapshot in memory after it is saved.
 */
export interface HeldSnapshot {
  readonly meta: SnapshotMeta;
  readonly size: number;
  readonly data: Uint8Array | undefined;
}

export function heldSnapshot(s: Snapshot): HeldSnapshot {
  return { meta: s.meta, size: s.data.length, data: s.data };
}

/** What must be on stable storage before messages that depend on it are sent (Raft Figure 2). */
export interface HardState {
  readonly term: Term;
  readonly vote: NodeId;
  readonly commit: LogIndex;
}

export type Role = 'follower' | 'pre-candidate' | 'candidate' | 'leader';

export interface SoftState {
  readonly role: Role;
  /** The leader this node follows (itself when leader), or NO_NODE. */
  readonly leader: NodeId;
}

/** A confirmed read (thesis §6.4): once `index` is applied, `requestId` may read local state. */
export interface ReadState {
  readonly requestId: string;
  readonly index: LogIndex;
}

/** A read-index request this node could not serve (no leader known, or leader lost). */
export interface ReadFailure {
  readonly requestId: string;
  readonly reason: 'no-leader' | 'not-leader' | 'leadership-lost';
}

interface MsgBase {
  readonly from: NodeId;
  readonly to: NodeId;
  readonly term: Term;
}

/** AppendEntries (Raft §5.3). `index`/`logTerm` name the entry preceding `entries`. */
export interface MsgApp extends MsgBase {
  readonly type: 'app';
  readonly index: LogIndex;
  readonly logTerm: Term;
  readonly entries: readonly Entry[];
  readonly commit: LogIndex;
}

/**
 * AppendEntries response. On success `index` is the last index now matching the leader.
 * On rejection `index` is the rejected `MsgApp.index`, and `hintIndex`/`hintTerm` let the
 * leader skip back a whole term at a time (fast backtracking, thesis §5.3 "optimization").
 */
export interface MsgAppResp extends MsgBase {
  readonly type: 'app-resp';
  readonly index: LogIndex;
  readonly reject: boolean;
  readonly hintIndex: LogIndex;
  readonly hintTerm: Term;
}

/** RequestVote (§5.2) and PreVote (thesis §9.6). For pre-vote, `term` is the term the sender would use. */
export interface MsgVote extends MsgBase {
  readonly type: 'vote' | 'pre-vote';
  readonly lastIndex: LogIndex;
  readonly lastTerm: Term;
  /** Set when campaigning because of a leadership transfer: bypasses the leader lease (thesis §3.10). */
  readonly transfer: boolean;
}

export interface MsgVoteResp extends MsgBase {
  readonly type: 'vote-resp' | 'pre-vote-resp';
  readonly reject: boolean;
}

/** Heartbeat; `readSeq` ties responses to ReadIndex confirmation rounds (§6.4). */
export interface MsgHeartbeat extends MsgBase {
  readonly type: 'heartbeat';
  readonly commit: LogIndex;
  readonly readSeq: number;
}

export interface MsgHeartbeatResp extends MsgBase {
  readonly type: 'heartbeat-resp';
  readonly readSeq: number;
}

/** One chunk of an InstallSnapshot (§7). Chunks are sent one at a time, each acknowledged. */
export interface MsgSnap extends MsgBase {
  readonly type: 'snap';
  readonly meta: SnapshotMeta;
  readonly offset: number;
  readonly totalBytes: number;
  readonly chunk: Uint8Array;
  /**
   * Set by the leader's core when it no longer holds the snapshot's bytes: `chunk` is empty and
   * the driver must read this many bytes at `offset` from its snapshot store into `chunk` (and
   * drop `fill`) before sending. Never on the wire.
   */
  readonly fill?: number;
}

/**
 * Acknowledges snapshot chunks: the receiver has every byte before `nextOffset`. `chunkOffset`
 * names the chunk this answers, so the leader can tell a stale or duplicated ack (ignored) from
 * a receiver that lost its partial copy (answering the current chunk with a lower offset).
 */
export interface MsgSnapResp extends MsgBase {
  readonly type: 'snap-resp';
  readonly snapIndex: LogIndex;
  readonly nextOffset: number;
  readonly chunkOffset: number;
}

/** Tells the transfer target to campaign now (thesis §3.10). */
export interface MsgTimeoutNow extends MsgBase {
  readonly type: 'timeout-now';
}

/** A follower asks the leader for a read index on behalf of a local request. */
export interface MsgReadIndex extends MsgBase {
  readonly type: 'read-index';
  readonly requestIds: readonly string[];
}

export interface MsgReadIndexResp extends MsgBase {
  readonly type: 'read-index-resp';
  readonly requestIds: readonly string[];
  /** 0 with `reject` when the leader could not serve it. */
  readonly index: LogIndex;
  readonly reject: boolean;
}

export type Message =
  | MsgApp
  | MsgAppResp
  | MsgVote
  | MsgVoteResp
  | MsgHeartbeat
  | MsgHeartbeatResp
  | MsgSnap
  | MsgSnapResp
  | MsgTimeoutNow
  | MsgReadIndex
  | MsgReadIndexResp;

export type MessageType = Message['type'];

/**
 * What the driver must do, in this order (STYLE.md, etcd `Ready`):
 *   1. persist `snapshot` (if any; it replaces the WHOLE log: drop every stored entry, before
 *      and after its index), then `entries` (an entry at index i replaces every stored entry
 *      >= i) and `hardState`, atomically; fsync when `mustSync`;
 *   2. send `messages` (only after step 1 is durable: a vote or an append ack promises it);
 *   3. install `snapshot` into the state machine, then apply `committedEntries` in order;
 *   4. hand `readStates` to waiting readers once their index is applied;
 *   5. call `advance(ready)`.
 * A pipelined driver instead calls `accept(ready)` once it has sent what vouches for nothing,
 * applied, and queued the write, and `persisted(ready)` once the write is durable (in order);
 * src/replica/README.md, "Pipelined writes".
 */
export interface Ready {
  readonly softState: SoftState | undefined;
  readonly hardState: HardState | undefined;
  readonly snapshot: Snapshot | undefined;
  /** Entries to append to stable storage; may overwrite (truncate) a conflicting suffix. */
  readonly entries: readonly Entry[];
  readonly committedEntries: readonly Entry[];
  readonly messages: readonly Message[];
  readonly readStates: readonly ReadState[];
  readonly readFailures: readonly ReadFailure[];
  readonly mustSync: boolean;
}

/** What a node restarts from: exactly what the driver persisted. */
export interface PersistedState {
  readonly hardState: HardState;
  readonly snapshot: Snapshot | undefined;
  /** Entries after the snapshot (or from index 1), contiguous. */
  readonly entries: readonly Entry[];
}

export interface ProgressStatus {
  readonly match: LogIndex;
  readonly next: LogIndex;
  readonly state: 'probe' | 'replicate' | 'snapshot';
  readonly recentActive: boolean;
}

export interface Status {
  readonly id: NodeId;
  readonly role: Role;
  readonly leader: NodeId;
  readonly term: Term;
  readonly vote: NodeId;
  readonly commit: LogIndex;
  readonly applied: LogIndex;
  readonly firstIndex: LogIndex;
  readonly lastIndex: LogIndex;
  readonly snapshotIndex: LogIndex;
  readonly config: Config;
  /** Index of the entry that set `config` (thesis §4.1: in force from its append). */
  readonly configIndex: LogIndex;
  readonly leadTransferee: NodeId;
  /** Leader only: replication progress per member. */
  readonly progress: ReadonlyMap<NodeId, ProgressStatus> | undefined;
}
