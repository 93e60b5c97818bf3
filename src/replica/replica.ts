import { CairnError, ErrorCode, NO_NODE, silentLogger, type Clock, type LogIndex, type Logger, type NodeId, type Random, type Revision, type Term, type Timers } from '../base/index.js';
import { RawNode, resolveRaftOptions, type Config, type ConfigChange, type Entry, type HardState, type Message, type MsgSnap, type PersistedState, type RaftOptions, type Ready, type SnapshotMeta, type Status } from '../raft/index.js';
import type { ChangeRecord } from '../store/index.js';
import { CorruptLogError, type ChangePublisher, type LoadedLog, type LogStore, type SnapshotStore, type StateMachine, type Transport } from './ports.js';

export interface ReplicaOptions<Result, R = unknown> {
  readonly id: NodeId;
  /** Raft tuning (ticks, limits); id and random are filled in here. */
  readonly raft?: Omit<RaftOptions, 'id' | 'random'>;
  readonly random: Random;
  readonly clock: Clock;
  readonly timers: Timers;
  readonly logStore: LogStore;
  readonly snapshotStore: SnapshotStore;
  readonly transport: Transport;
  readonly stateMachine: StateMachine<Result>;
  /**
   * This node's event stream: every applied entry's changes, in commit order, and a reset when
   * a snapshot replaces the state (src/replica/README.md, "Apply").
   */
  readonly publisher?: ChangePublisher<R>;
  readonly logger?: Logger;
  /** Milliseconds per Raft tick. Default 100 (election timeout 10 ticks = 1-2 s). */
  readonly tickMs?: number;
  /**
   * Take a snapshot once at least this many entries were applied since the last one (and the
   * byte trigger below agrees). Default 10,000.
   */
  readonly snapshotEveryEntries?: number;
  /**
   * Also wait, before a snapshot, until the log applied since the last one holds at least this
   * fraction of the last snapshot's size in bytes (entry data), capped at
   * `snapshotMaxLogBytes`; each node stretches the figure by its own 0-50% (a hash of its id
   * and the last snapshot index), so the nodes of a cluster do not all snapshot at once. A
   * snapshot serializes the whole store: snapshotting every fixed number of entries costs each
   * write a share that grows with the store, this keeps it at most 1/ratio bytes of snapshot
   * per byte of log (src/replica/README.md, "Snapshots"). Default 0.25; 0 turns the byte
   * trigger off (every `snapshotEveryEntries` entries, as before).
   */
  readonly snapshotLogRatio?: number;
  /** The byte trigger's cap: the log since the last snapshot never needs to pass this (times the 1-1.5 stretch). Default 64 MiB. */
  readonly snapshotMaxLogBytes?: number;
  /**
   * Log entries kept behind a snapshot for followers slightly behind (hashicorp/raft's
   * TrailingLogs is 10,240; etcd keeps 5,000). Default 10,000.
   */
  readonly snapshotRetainEntries?: number;
  /** ... and at most this many bytes of them (entry data). Default 32 MiB. */
  readonly snapshotRetainBytes?: number;
  /** A proposal not applied within this is answered TIMEOUT (outcome unknown). Default 10,000. */
  readonly proposalTimeoutMs?: number;
  /** A read index not confirmed within this fails with TIMEOUT. Default 5,000. */
  readonly readTimeoutMs?: number;
  /**
   * A leader whose log write has been running this long hands leadership to its most
   * up-to-date follower (a hung disk): it could not apply or answer anything meanwhile, while a
   * quorum of followers could. Checked every tick, again each election timeout while the write
   * hangs. Default 5,000; 0 turns it off.
   */
  readonly writeStallMs?: number;
  /** Form a new cluster with this configuration if the node has no state yet. */
  readonly bootstrap?: Config;
  /** Told when this node's role or the leader it knows changes (after the Ready is durable). */
  readonly onRoleChange?: (s: { readonly role: Status['role']; readonly leader: NodeId; readonly term: number }) => void;
  /**
   * Test use only: break the driver's order on purpose, so the simulator's swarm can show that
   * it notices (cluster-test/sim/planted-bugs.test.ts). Never set in a real node.
   */
  readonly plantedBugs?: ReplicaPlantedBugs;
}

/** Driver bugs that can be planted for tests (each breaks one rule of src/replica/README.md). */
export interface ReplicaPlantedBugs {
  /**
   * A waiting proposal is answered when its log position commits, without checking that the
   * entry committed there is its own (its term): a client is told its write applied when
   * another leader's entry took its place and its own never commits.
   */
  readonly answerBeforeCommit?: boolean;
  /** Entries are applied to the state machine as soon as they are appended, before they commit. */
  readonly applyBeforeCommit?: boolean;
  /** Vote responses go out before the Ready's write (the vote) is durable. */
  readonly voteBeforeDurable?: boolean;
  /** Append acknowledgements go out before the Ready's write (the entries) is durable. */
  readonly ackBeforeDurable?: boolean;
  /**
   * The pipelined write path tells the core a Ready's write is durable as soon as it is
   * handed off, not when it completes: a leader counts its own entries toward commit (and
   * every node applies them) before they are on its disk.
   */
  readonly countOwnWriteEarly?: boolean;
  /** A hard state that changed its term or vote is written without fsync (only entries are synced). */
  readonly syncOnlyEntries?: boolean;
  /**
   * A Ready that writes nothing durable sends all its messages at once, even while an earlier
   * Ready's write is still running: an append acknowledgement it carries may cover entries
   * that write has not made durable yet.
   */
  readonly answerAheadOfWrites?: boolean;
}

/** What subscribers see after each apply, in commit order. */
export type ReplicaEvent<R = unknown> =
  | { readonly kind: 'changes'; readonly index: LogIndex; readonly changes: readonly ChangeRecord<R>[] }
  | { readonly kind: 'reset'; readonly index: LogIndex };

export interface ReplicaStatus extends Status {
  /** Milliseconds since this node last heard from the leader (0 when it is the leader). */
  readonly lastLeaderContactMs: number | undefined;
  readonly failed: string | undefined;
  /** Raft messages dropped by the member filter since start, by reason (`Replica.receive`). */
  readonly droppedMessages: Readonly<Record<DropReason, number>>;
}

/**
 * Why the driver dropped a Raft message before the core saw it (`Replica.receive`):
 * - `non-member`: the sender is not in this node's configuration (voters and learners), and is
 *   not the leader this node already follows in the message's term;
 * - `no-config`: this node has no configuration yet (it waits to be added) and the message is
 *   not one a leader sends to a joining node (append, heartbeat, snapshot chunk).
 */
export type DropReason = 'non-member' | 'no-config';

/** Messages a leader sends to its followers. */
function fromALeader(m: Message): boolean {
  return m.type === 'app' || m.type === 'heartbeat' || m.type === 'snap';
}

/**
 * What a node with no configuration takes: a leader's messages, and (pre-)vote requests. A
 * cluster formed with --bootstrap-expect may have one node write the first configuration while
 * the others, finding its cluster id, start empty to join it: that node's first election needs
 * their votes (the core grants them: it does not consult its configuration for votes).
 */
function forAnEmptyNode(m: Message): boolean {
  return fromALeader(m) || m.type === 'vote' || m.type === 'pre-vote';
}

interface ProposalWaiter<Result> {
  readonly term: Term;
  readonly resolve: (r: Result) => void;
  readonly reject: (e: Error) => void;
  /** Monotonic ms after which the tick's sweep answers TIMEOUT. */
  readonly deadline: number;
  readonly timeoutMs: number;
}

interface ReadWaiter {
  readonly resolve: (index: LogIndex) => void;
  readonly reject: (e: Error) => void;
  readonly deadline: number;
  readonly timeoutMs: number;
  index: LogIndex | undefined;
}

/**
 * One log write of the pipelined path: the Readies taken while the previous write ran, merged
 * (group commit). Started when the write before it completes; their late messages go once it
 * is durable.
 */
interface PendingWrite {
  readonly readies: Ready[];
  entries: Entry[];
  hardState: HardState | undefined;
  sync: boolean;
  readonly late: Message[];
  /** Role changes the batch's Readies carried: announced once the batch is durable, in order. */
  readonly roles: RoleNote[];
}

/** A role change as listeners hear it, with the term it was taken in. */
interface RoleNote {
  readonly role: Status['role'];
  readonly leader: NodeId;
  readonly term: number;
}

/**
 * Messages that vouch for nothing on this node's disk but their term, so they wait for no
 * write once their term is durable (src/replica/README.md, "Pipelined writes"): a leader's
 * appends, heartbeats and snapshot chunks (thesis §10.2.1), read-index requests and answers
 * (they vouch only for a commit index already durable on a quorum), heartbeat answers, and a
 * leader's `timeout-now` (thesis §3.10: it tells a follower whose log matches the leader's to
 * campaign at once; the follower holds that log on its own disk, and who campaigns when is
 * liveness only). A hung disk must not hold it: it is how a stalled leader hands over.
 */
function vouchesForNothing(m: Message): boolean {
  return m.type === 'app' || m.type === 'heartbeat' || m.type === 'snap' || m.type === 'read-index-resp' || m.type === 'read-index' || m.type === 'heartbeat-resp' || m.type === 'timeout-now';
}

function plantedEarly(m: Message, bugs: ReplicaPlantedBugs | undefined): boolean {
  return bugs !== undefined && ((bugs.voteBeforeDurable === true && m.type === 'vote-resp') || (bugs.ackBeforeDurable === true && m.type === 'app-resp'));
}

function positive(name: string, v: number): number {
  if (!Number.isFinite(v) || v <= 0) throw new CairnError(ErrorCode.INVALID_ARGUMENT, `replica option ${name} must be positive, got ${String(v)}`);
  return v;
}

function nonNegative(name: string, v: number): number {
  if (Number.isNaN(v) || v < 0) throw new CairnError(ErrorCode.INVALID_ARGUMENT, `replica option ${name} must be zero or more, got ${String(v)}`);
  return v;
}

/** The snapshot trigger and retention, resolved (ReplicaOptions documents each). */
export interface SnapshotPolicy {
  readonly everyEntries: number;
  readonly logRatio: number;
  readonly maxLogBytes: number;
  readonly retainEntries: number;
  readonly retainBytes: number;
}

/** A snapshot's chunks are joined in pieces of this many bytes, with a yield between them. */
const SNAPSHOT_COPY_BYTES = 4 * 2 ** 20;

export const SNAPSHOT_DEFAULTS = {
  everyEntries: 10_000,
  logRatio: 0.25,
  maxLogBytes: 64 * 2 ** 20,
  retainEntries: 10_000,
  retainBytes: 32 * 2 ** 20,
} as const satisfies SnapshotPolicy;

type SnapshotOptions = Pick<ReplicaOptions<unknown>, 'snapshotEveryEntries' | 'snapshotLogRatio' | 'snapshotMaxLogBytes' | 'snapshotRetainEntries' | 'snapshotRetainBytes'>;

function snapshotPolicy(o: SnapshotOptions): SnapshotPolicy {
  return {
    everyEntries: positive('snapshotEveryEntries', o.snapshotEveryEntries ?? SNAPSHOT_DEFAULTS.everyEntries),
    logRatio: nonNegative('snapshotLogRatio', o.snapshotLogRatio ?? SNAPSHOT_DEFAULTS.logRatio),
    maxLogBytes: positive('snapshotMaxLogBytes', o.snapshotMaxLogBytes ?? SNAPSHOT_DEFAULTS.maxLogBytes),
    retainEntries: nonNegative('snapshotRetainEntries', o.snapshotRetainEntries ?? SNAPSHOT_DEFAULTS.retainEntries),
    retainBytes: nonNegative('snapshotRetainBytes', o.snapshotRetainBytes ?? SNAPSHOT_DEFAULTS.retainBytes),
  };
}

/**
 * The bytes of log a node lets pass before its next snapshot (with at least the policy's
 * entries): `logRatio` of the last snapshot's size, capped at `maxLogBytes`, stretched by a
 * per-node factor in [1, 1.5) that is a hash (FNV-1a) of the node id and the last snapshot
 * index, so the members of a cluster, which reach the same index with the same snapshot size,
 * spread their snapshots out (and the same node's next one moves too). Deterministic: no clock
 * or random draw, so the simulator replays it.
 */
export function snapshotLogBytesDue(policy: SnapshotPolicy, id: string, lastSnapshotIndex: number, lastSnapshotBytes: number): number {
  const base = Math.min(policy.logRatio * lastSnapshotBytes, policy.maxLogBytes);
  if (base <= 0) return 0;
  let h = 0x811c9dc5;
  const key = `${id}:${String(lastSnapshotIndex)}`;
  for (let i = 0; i < key.length; i++) {
    h ^= key.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return Math.floor(base * (1 + 0.5 * (h / 2 ** 32)));
}

/**
 * The driver (etcd node.go's run loop, STYLE.md): owns the order of I/O around the pure Raft
 * core, one Ready at a time. The order (what goes before the Ready's disk write, what while it
 * runs, what only after) and why each step is safe is written once, in src/replica/README.md
 * ("The order of one Ready"). It makes no protocol decisions.
 */
export class Replica<Result = unknown, R = unknown> {
  private readonly raw: RawNode;
  private readonly log: Logger;
  private readonly opts: ReplicaOptions<Result, R>;
  private readonly proposals = new Map<number, ProposalWaiter<Result>>();
  private readonly reads = new Map<string, ReadWaiter>();
  private readonly listeners = new Set<(e: ReplicaEvent<R>) => void>();
  /** Woken at the next change of role or known leader (`waitForRoleChange`). */
  private readonly roleWaiters = new Set<() => void>();
  private readonly ticker: unknown;
  private processing = false;
  private closed = false;
  private failure: Error | undefined;
  private snapshotting = false;
  /** A snapshot was asked for (snapshotNow) while a Ready was in progress: taken after its advance. */
  private snapshotWanted = false;
  private lastSnapshotIndex: LogIndex;
  private readonly snapshotPolicy: SnapshotPolicy;
  /** The size of the newest snapshot this node took, installed or opened (its data bytes). */
  private lastSnapshotBytes = 0;
  /** Bytes of entry data applied since this node opened (the byte trigger's clock). */
  private appliedBytes = 0;
  /** `appliedBytes` at the newest snapshot's index. */
  private snapshotAppliedBytes = 0;
  private lastLeaderContact = 0;
  private readSeq = 0;
  /**
   * Names this process's read-index requests apart from an earlier incarnation's: the leader
   * may answer a request the node sent before it crashed after it restarted, and with the
   * sequence starting over that answer (an older read index) would release a new read early.
   */
  private readonly incarnation: string;
  /** `open` waits for the replay of the committed log: checked after each run of the Ready loop. */
  private replayWaiter: (() => void) | undefined;
  private readonly dropped: Record<DropReason, number> = { 'non-member': 0, 'no-config': 0 };
  /** The member ids of `membersOf`, recomputed only when the core's configuration object changes. */
  private membersOf: Config | undefined;
  private members: ReadonlySet<NodeId> = new Set();
  /** Election timeout in ms: without a leader's message for this long, a non-member leader is heard. */
  private readonly leaderSilenceMs: number;
  private readonly sm: StateMachine<Result>;
  private readonly bugs: ReplicaPlantedBugs | undefined;
  /** The log write in flight (pipelined path); settles after its completion was handled. */
  private writing: Promise<void> | undefined;
  /** When the write in flight started (monotonic ms), and when a stalled leader last handed off. */
  private writeStartedMs = 0;
  private stallHandoffMs: number | undefined;
  /** Readies taken while `writing` runs, merged into the next write. */
  private queued: PendingWrite | undefined;
  /** The term of the newest hard state known durable: a heartbeat answer in it vouches for nothing unwritten. */
  private durableTerm: Term;

  private constructor(opts: ReplicaOptions<Result, R>, raw: RawNode, snapshotIndex: LogIndex, snapshotBytes: number) {
    this.opts = opts;
    this.snapshotPolicy = snapshotPolicy(opts);
    this.raw = raw;
    this.sm = opts.stateMachine;
    this.bugs = opts.plantedBugs;
    this.log = opts.logger ?? silentLogger;
    this.lastSnapshotIndex = snapshotIndex;
    this.lastSnapshotBytes = snapshotBytes;
    this.durableTerm = raw.basicStatus().term;
    this.incarnation = Math.floor(opts.clock.nowMs()).toString(36);
    this.lastLeaderContact = opts.clock.monotonicMs();
    this.leaderSilenceMs = resolveRaftOptions({ ...(opts.raft ?? {}), id: opts.id, random: opts.random }).electionTimeoutTicks * (opts.tickMs ?? 100);
    opts.transport.onMessage((m) => this.receive(m));
    opts.transport.onConnectionLost?.((peer) => this.connectionLost(peer));
    this.ticker = opts.timers.setInterval(() => this.tick(), positive('tickMs', opts.tickMs ?? 100));
    this.schedule();
  }

  /** Opens a node: newest valid snapshot, then the log after it; bootstraps a new cluster if asked. */
  static async open<Result, R = unknown>(opts: ReplicaOptions<Result, R>): Promise<Replica<Result, R>> {
    const log = opts.logger ?? silentLogger;
    const started = opts.clock.monotonicMs();
    const { snapshot, skippedCorrupt } = await opts.snapshotStore.loadNewest();
    for (const f of skippedCorrupt) log.warn({ file: f }, 'skipped a corrupt snapshot file');
    if (snapshot) {
      opts.stateMachine.restore(snapshot.meta, snapshot.data);
      // The stream starts at the snapshot: nothing before it can be replayed.
      opts.publisher?.reset(snapshot.meta.index as number as Revision);
      log.info({ index: snapshot.meta.index, bytes: snapshot.data.length }, 'restored snapshot');
    }
    const afterIndex = snapshot ? snapshot.meta.index : (0 as LogIndex);
    let loaded: LoadedLog = await opts.logStore.load(afterIndex);
    if (loaded.truncatedTail > 0) {
      log.warn({ entries: loaded.truncatedTail }, 'cut a torn or corrupt log tail above the commit index');
    }
    if (snapshot) loaded = await Replica.maybeCompleteInstall(opts.logStore, log, snapshot.meta, loaded);
    let state: PersistedState = { hardState: loaded.hardState, snapshot, entries: loaded.entries };
    const fresh = !snapshot && loaded.entries.length === 0 && loaded.hardState.term === 0;
    if (fresh && opts.bootstrap) {
      state = RawNode.bootstrapState(opts.bootstrap);
      await opts.logStore.append({ entries: state.entries, hardState: state.hardState, sync: true });
      log.info({ members: opts.bootstrap.members.map((m) => m.id) }, 'bootstrapped a new cluster');
    }
    const raw = new RawNode({ ...(opts.raft ?? {}), id: opts.id, random: opts.random }, state);
    // The snapshot came from the store: the core reads chunks back from it rather than hold it.
    if (snapshot && opts.snapshotStore.readBody !== undefined) raw.releaseSnapshotData(snapshot.meta.index);
    const st = raw.status();
    log.info(
      { term: st.term, commit: st.commit, lastIndex: st.lastIndex, snapshotIndex: afterIndex, ms: Math.round(opts.clock.monotonicMs() - started) },
      'replica opened',
    );
    const replica = new Replica<Result, R>(opts, raw, afterIndex, snapshot ? snapshot.data.length : 0);
    try {
      await replica.replay(st.commit);
    } catch (e) {
      await replica.close().catch(() => undefined);
      throw e;
    }
    log.info({ applied: st.commit, ms: Math.round(opts.clock.monotonicMs() - started) }, 'replayed the committed log');
    return replica;
  }

  /**
   * Resolves once the state machine holds every entry this disk holds as committed, so a node
   * never serves (reads, checks a token, answers a CAS) from a state older than one it served
   * or acknowledged before it stopped. The Ready loop runs at the next event-loop turn, after
   * the caller may have started listening: `open` waits for this before it returns.
   */
  private replay(target: LogIndex): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const check = (): void => {
        this.replayWaiter = undefined;
        if (this.sm.appliedIndex >= target) resolve();
        else if (this.failure) reject(this.failure);
        else if (this.closed) reject(new CairnError(ErrorCode.UNAVAILABLE, `node ${this.opts.id} closed while replaying its log`));
        else this.replayWaiter = check;
      };
      check();
    });
  }

  /**
   * Finishes a snapshot install that a crash cut in half, before the core sees the log.
   *
   * An installed snapshot is two writes (`persist`): the snapshot file, then the log batch that
   * drops the log it replaces (LogStore.append, `installedSnapshot`). A crash between them leaves
   * the new snapshot S (term T) and the old log. The core installs a leader's snapshot only when
   * its log does not hold entry S in term T (Raft §7, thesis §5: with a matching entry it keeps
   * its log and only moves the commit index; step-follower.ts `restore`), so the old log either
   * ended before S or holds S in another term, with entries after it of that other history.
   * Loaded behind S as if they followed it, those would make a log no node ever had (Raft's log
   * matching assumes it cannot happen), and a log that ends before S joins up with nothing.
   *
   * What the log holds at S (`afterIndexTerm`) tells the cases apart:
   * - entry S in term T: the node's own snapshot (taken at its applied index; the driver never
   *   compacts the newest snapshot's entry away). The entries after it are its own, possibly
   *   acknowledged: kept.
   * - nothing at S, entries from S + 1: a completed install (its batch dropped entry S) followed
   *   by new entries, or an older snapshot restored after the newest one was found corrupt (the
   *   log is compacted through it). Kept.
   * - entry S in another term: the install's batch was lost; the entries after S are a stale
   *   suffix. None of them can be committed: a committed entry after S would be in every later
   *   leader's log, and so would everything before it, entry S of term T included (log
   *   matching, leader completeness §5.4). Dropped, by writing the install's batch again.
   * - nothing at S and nothing after it, with a durable commit index below S: the install's
   *   batch was lost (the core installs a snapshot only above its commit index, and that batch
   *   carries commit S). Written again. With a commit index at or above S the batch (or a later
   *   one, which a crash cannot keep without it) is durable: the install completed and nothing
   *   followed it. Left alone (writing it again would be harmless, but would warn for nothing).
   */
  private static async maybeCompleteInstall(logStore: LogStore, log: Logger, meta: SnapshotMeta, loaded: LoadedLog): Promise<LoadedLog> {
    const at = loaded.afterIndexTerm;
    const stale = at !== undefined && at !== meta.term;
    const hs = loaded.hardState;
    const empty = at === undefined && loaded.entries.length === 0 && hs.commit < meta.index;
    if (!stale && !empty) return loaded;
    if (stale && hs.commit >= meta.index) {
      // A commit index at or past S vouches for entry S as it is in the log: committed, it would
      // have term T. The log and the snapshot contradict each other; neither can be trusted.
      throw new CorruptLogError(
        `the raft log holds entry ${meta.index} of term ${at} with commit index ${hs.commit}, but the newest snapshot at ${meta.index} is of term ${meta.term}: committed history disagrees; refusing to start rather than serve wrong data; restore this node from a snapshot or wipe its data dir to rejoin the cluster`,
      );
    }
    const hardState: HardState = { ...hs, commit: Math.max(hs.commit, meta.index) as LogIndex };
    if (stale) {
      log.warn(
        { snapshotIndex: meta.index, snapshotTerm: meta.term, logTermAtSnapshot: at, staleEntries: loaded.entries.length, firstStale: loaded.entries[0]?.index, lastStale: loaded.entries[loaded.entries.length - 1]?.index },
        'the newest snapshot was installed but the log batch that drops the log it replaces was lost in a crash: the log holds the snapshot index in another term; dropping the stale entries after it (Raft §7)',
      );
    } else {
      log.warn(
        { snapshotIndex: meta.index, snapshotTerm: meta.term, commit: hs.commit },
        'the newest snapshot was installed but the log batch that drops the log it replaces was lost in a crash: the log holds nothing at or after the snapshot index and its commit index is below it; writing the batch again (Raft §7)',
      );
    }
    await logStore.append({ entries: [], hardState, sync: true, installedSnapshot: meta.index });
    return { hardState, entries: [], afterIndexTerm: undefined, truncatedTail: loaded.truncatedTail };
  }

  get id(): NodeId {
    return this.opts.id;
  }

  /** Proposes a command; resolves with the state machine's result once it is committed and applied here. */
  propose(data: Uint8Array, timeoutMs?: number): Promise<Result> {
    return this.waitFor(() => this.raw.propose(data), timeoutMs);
  }

  proposeConfigChange(change: ConfigChange, timeoutMs?: number): Promise<Result> {
    return this.waitFor(() => this.raw.proposeConfigChange(change), timeoutMs);
  }

  private waitFor(append: () => { index: LogIndex; term: Term }, timeoutMs = this.proposalTimeoutMs()): Promise<Result> {
    let index: LogIndex;
    let term: Term;
    try {
      this.checkUsable();
      ({ index, term } = append());
    } catch (e) {
      return Promise.reject(e instanceof Error ? e : new Error(String(e)));
    }
    this.schedule();
    const deadline = this.opts.clock.monotonicMs() + timeoutMs;
    return new Promise<Result>((resolve, reject) => {
      // A waiter of an older term at this index: its entry left this node's log (this leader
      // never had it), but another node may still hold it and a later leader commit it, so
      // its outcome is unknown, not dropped.
      const old = this.proposals.get(index);
      if (old) old.reject(new CairnError(ErrorCode.TIMEOUT, `entry ${index} of term ${old.term} was replaced in this node's log by a newer leader's entry; it may or may not commit`, { index }));
      this.proposals.set(index, { term, resolve, reject, deadline, timeoutMs });
    });
  }

  /**
   * Linearizable read barrier (thesis §6.4): resolves with the read index once this node has
   * applied it, so local state read afterwards reflects every write acknowledged before the call.
   */
  readIndex(): Promise<LogIndex> {
    try {
      this.checkUsable();
    } catch (e) {
      return Promise.reject(e instanceof Error ? e : new Error(String(e)));
    }
    const id = `${this.opts.id}:${this.incarnation}:${++this.readSeq}`;
    return new Promise<LogIndex>((resolve, reject) => {
      const ms = this.opts.readTimeoutMs ?? 5000;
      this.reads.set(id, { resolve, reject, deadline: this.opts.clock.monotonicMs() + ms, timeoutMs: ms, index: undefined });
      this.raw.readIndex(id);
      this.schedule();
    });
  }

  transferLeadership(target: NodeId): void {
    this.checkUsable();
    this.raw.transferLeadership(target);
    this.schedule();
  }

  campaign(): void {
    this.raw.campaign();
    this.schedule();
  }

  /**
   * Resolves at the next change of this node's role or of the leader it knows (once the Ready
   * that carried it is durable, as `onRoleChange`), or after `ms`, or when the node stops,
   * whichever comes first. For callers waiting for a leader: they go on as soon as one is known.
   */
  waitForRoleChange(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      if (this.stopped) {
        resolve();
        return;
      }
      const wake = (): void => {
        this.opts.timers.clearTimeout(timer);
        this.roleWaiters.delete(wake);
        resolve();
      };
      const timer = this.opts.timers.setTimeout(wake, ms);
      this.roleWaiters.add(wake);
    });
  }

  private wakeRoleWaiters(): void {
    for (const wake of [...this.roleWaiters]) wake();
  }

  subscribe(listener: (e: ReplicaEvent<R>) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  status(): ReplicaStatus {
    return this.withContact(this.raw.status());
  }

  /** As `status()` without the leader's per-follower progress: cheap enough for every request. */
  basicStatus(): ReplicaStatus {
    return this.withContact(this.raw.basicStatus());
  }

  /** Adds the contact and failure fields to a status the core just built for this call (no copy). */
  private withContact(st: Status): ReplicaStatus {
    const contact = st.role === 'leader' ? 0 : st.leader === NO_NODE ? undefined : this.opts.clock.monotonicMs() - this.lastLeaderContact;
    const out = st as Status & { lastLeaderContactMs: number | undefined; failed: string | undefined; droppedMessages: ReplicaStatus['droppedMessages'] };
    out.lastLeaderContactMs = contact;
    out.failed = this.failure?.message;
    out.droppedMessages = { ...this.dropped };
    return out;
  }

  /** True once the node failed or began shutting down: it will not accept work again. */
  get stopped(): boolean {
    return this.closed || this.failure !== undefined;
  }

  get clock(): Clock {
    return this.opts.clock;
  }

  get timers(): Timers {
    return this.opts.timers;
  }

  get stateMachine(): StateMachine<Result> {
    return this.sm;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.opts.timers.clearInterval(this.ticker);
    this.failAll(new CairnError(ErrorCode.UNAVAILABLE, `node ${this.opts.id} is shutting down`));
    this.wakeRoleWaiters();
    while (this.processing || this.snapshotting || this.writing !== undefined) await this.opts.timers.yield();
    await this.opts.transport.close();
    await this.opts.logStore.close();
    await this.opts.snapshotStore.close();
  }

  private proposalTimeoutMs(): number {
    return this.opts.proposalTimeoutMs ?? 10_000;
  }

  private checkUsable(): void {
    if (this.failure) throw new CairnError(ErrorCode.UNAVAILABLE, `node ${this.opts.id} stopped: ${this.failure.message}`);
    if (this.closed) throw new CairnError(ErrorCode.UNAVAILABLE, `node ${this.opts.id} is shutting down`);
  }

  private tick(): void {
    if (this.closed || this.failure) return;
    this.raw.tick();
    this.sweepDeadlines();
    this.checkWriteStall();
    this.schedule();
  }

  /**
   * A leader whose write hangs (`writeStallMs`) hands leadership to the follower with the
   * longest log: it keeps sending heartbeats (they wait for no write) so nobody else would
   * campaign, yet it can apply nothing above its own durable index, so every write would time
   * out. The transfer goes through the core (thesis §3.10): the target campaigns once it has
   * the whole log, and wins with the other followers' votes; this node votes only once its
   * disk answers. Liveness only: a transfer changes no term, vote or log rule.
   */
  private checkWriteStall(): void {
    const limit = this.opts.writeStallMs ?? 5_000;
    if (limit <= 0 || this.writing === undefined) return;
    const now = this.opts.clock.monotonicMs();
    const stalled = now - this.writeStartedMs;
    if (stalled < limit) return;
    // Once per election timeout at most (the core aborts a transfer that takes longer).
    if (this.stallHandoffMs !== undefined && now - this.stallHandoffMs < this.leaderSilenceMs) return;
    const target = this.raw.mostUpToDateVoter();
    if (target === NO_NODE) return;
    this.stallHandoffMs = now;
    this.log.warn({ stalledMs: Math.round(stalled), target, term: this.raw.basicStatus().term }, 'the log write has hung; handing leadership to a follower');
    try {
      this.raw.transferLeadership(target);
    } catch (e) {
      // A transfer to another node is already under way (an operator's): it hands over too.
      this.log.warn({ err: e, target }, 'could not hand leadership over');
    }
  }

  /**
   * Answers TIMEOUT to proposals and reads past their deadline: one sweep per tick instead of
   * a timer per request (a deadline is met to within a tick).
   */
  private sweepDeadlines(): void {
    if (this.proposals.size === 0 && this.reads.size === 0) return;
    const now = this.opts.clock.monotonicMs();
    for (const [index, w] of this.proposals) {
      if (w.deadline > now) continue;
      this.proposals.delete(index);
      w.reject(new CairnError(ErrorCode.TIMEOUT, `entry ${index} was not applied within ${w.timeoutMs} ms; it may or may not commit`, { index }));
    }
    for (const [id, w] of this.reads) {
      if (w.deadline > now) continue;
      this.reads.delete(id);
      w.reject(new CairnError(ErrorCode.TIMEOUT, `read index not confirmed within ${w.timeoutMs} ms`));
    }
  }

  /**
   * Hands messages to the transport. A snapshot chunk the core sent unfilled (it released the
   * snapshot's bytes once they were saved: `releaseSnapshotData`) is read from the snapshot
   * store first and goes out when the read completes; if the snapshot is gone (a newer one
   * replaced it) or unreadable, the core is told, and the follower gets the newest one.
   */
  private send(messages: readonly Message[]): void {
    let plain: readonly Message[] = messages;
    if (messages.some((m) => m.type === 'snap' && m.fill !== undefined)) {
      const rest: Message[] = [];
      for (const m of messages) {
        if (m.type === 'snap' && m.fill !== undefined) this.sendFilled(m);
        else rest.push(m);
      }
      plain = rest;
    }
    if (plain.length > 0) this.opts.transport.send(plain);
  }

  private sendFilled(m: MsgSnap): void {
    const store = this.opts.snapshotStore;
    const fill = m.fill ?? 0;
    if (store.readBody === undefined) {
      // Unreachable: the core releases bytes only when the store can read them back.
      this.stop(new Error('the raft core sent an unfilled snapshot chunk but the snapshot store cannot read one'));
      return;
    }
    store.readBody(m.meta, m.offset, fill).then(
      (chunk) => {
        if (this.closed || this.failure) return;
        this.opts.transport.send([{ type: 'snap', from: m.from, to: m.to, term: m.term, meta: m.meta, offset: m.offset, totalBytes: m.totalBytes, chunk }]);
      },
      (e: unknown) => {
        if (this.closed || this.failure) return;
        this.log.info({ peer: m.to, index: m.meta.index, err: e instanceof Error ? e.message : String(e) }, 'a snapshot chunk could not be read: the transfer starts over with the newest snapshot');
        this.raw.reportSnapshotUnavailable(m.to, m.meta.index);
        this.schedule();
      },
    );
  }

  private receive(m: Message): void {
    if (this.closed || this.failure) return;
    const drop = this.memberFilter(m);
    if (drop !== undefined) {
      this.dropped[drop]++;
      // Debug: a removed node keeps talking until it learns it was removed; not worth a warning each.
      this.log.debug({ from: m.from, type: m.type, term: m.term, reason: drop }, 'dropped a raft message');
      return;
    }
    // Only a leader sends appends, heartbeats and snapshot chunks.
    if (m.type === 'app' || m.type === 'heartbeat' || m.type === 'snap') {
      this.lastLeaderContact = this.opts.clock.monotonicMs();
    }
    this.raw.step(m);
    this.schedule();
  }

  /**
   * Only members speak Raft (issue 15, item 3). A message is handed to the core only if its
   * sender is in this node's current configuration: the newest configuration entry in its log,
   * committed or not (thesis §4.1: a configuration is in force from its append), voters and
   * learners alike. A learner being added is therefore a member for the leader as soon as the
   * leader appended the change, before it sends the learner anything. Dropping a message is
   * always safe in Raft (the network may lose any message); what it can cost is liveness, so
   * the exceptions are what a node needs to join or to catch up, and only for what a leader
   * sends a follower (appends, heartbeats, snapshot chunks):
   *
   * - A node with no configuration (started empty with --join, waiting to be added) takes
   *   those from whoever sends them, and (pre-)vote requests too: it cannot know the cluster
   *   yet, and a cluster formed with --bootstrap-expect may need its vote for its first
   *   election (one node wrote the first configuration; the others, finding its cluster id,
   *   started empty to join it). It learns the configuration from the first snapshot or config
   *   entry it receives and filters from then on. Timeout-now and responses are dropped until
   *   then (`no-config`).
   * - The leader this node already follows in a term stays heard for that term. A node that
   *   replays the log from index 1 sees the bootstrap configuration first, which may not name
   *   the current leader (added later): without this it would drop its leader's next append.
   * - A node that has heard no leader for an election timeout (just restarted, partitioned,
   *   removed and waiting to be added back) hears a non-member's leader messages. Its
   *   configuration may be older than the entry that added the current leader (thesis §4.2.3
   *   is why Raft servers do not consult their configuration at all): without this it would
   *   never catch up. A node in contact with its leader never does, so an outsider cannot
   *   depose a working leader's followers or replace their state.
   *
   * Votes, pre-votes, timeout-now and every response from a non-member are always dropped:
   * no node needs a non-member's vote or answer to make progress. Limits: nothing here proves
   * who sent a message (`from` is what the sender claims); mutual TLS whose node identity
   * must match `from` (issue 15, item 2) is what makes this a trust boundary. Until then it
   * keeps removed or never-added nodes, and honest mistakes, from disrupting the cluster; and
   * a node that is new, or has been without a leader for an election timeout, trusts the first
   * leader that speaks to it. `timeout-now` from anyone but the leader of the current term is
   * refused in the core (src/raft/step.ts).
   */
  private memberFilter(m: Message): DropReason | undefined {
    const st = this.raw.basicStatus();
    if (st.config.members.length === 0) return forAnEmptyNode(m) ? undefined : 'no-config';
    if (this.membersOf !== st.config) {
      this.membersOf = st.config;
      this.members = new Set(st.config.members.map((x) => x.id));
    }
    if (this.members.has(m.from)) return undefined;
    if (!fromALeader(m)) return 'non-member';
    if (m.from === st.leader && m.term === st.term) return undefined;
    const leaderless = st.role !== 'leader' && this.opts.clock.monotonicMs() - this.lastLeaderContact >= this.leaderSilenceMs;
    return leaderless ? undefined : 'non-member';
  }

  /** The transport saw the connection with `peer` break at its end (its process died). */
  private connectionLost(peer: NodeId): void {
    if (this.closed || this.failure) return;
    if (this.raw.reportConnectionLost(peer)) {
      this.log.info({ peer, term: this.raw.basicStatus().term }, 'the connection to the leader broke; campaigning early unless it is heard from again');
    }
    this.schedule();
  }

  /**
   * Runs the Ready loop at the next turn of the event loop (`Timers.yield`), not in a microtask:
   * everything that arrives in one turn (proposals, messages, ticks) goes into one Ready, so a
   * busy leader sends one append per follower per turn rather than one per request, and the
   * transport writes each peer's messages once (docs/performance.md, "The pipelined write path").
   */
  private schedule(): void {
    if (this.processing || this.closed || this.failure) return;
    this.processing = true;
    void this.opts.timers.yield().then(() => this.run());
  }

  /**
   * The Ready loop (src/replica/README.md, "The order of one Ready" and "Pipelined writes"). A
   * Ready without a snapshot is pipelined: sent, applied and accepted at once, its write queued
   * behind the one in flight (a role change it carries is announced once that write is
   * durable); the loop goes on to the next Ready without waiting for the disk. A Ready with a
   * snapshot waits for every earlier write and its own before it applies.
   */
  private async run(): Promise<void> {
    try {
      while (!this.closed && !this.failure && this.raw.hasReady()) {
        const rd = this.raw.ready();
        if (rd.snapshot === undefined) this.pipeline(rd);
        else await this.inOrder(rd);
      }
    } catch (e) {
      this.stop(e);
    } finally {
      this.processing = false;
    }
    this.replayWaiter?.();
    if (!this.closed && !this.failure && this.raw.hasReady()) this.schedule();
  }

  /**
   * Whether `m` may go now, before this Ready's write and every write still running is
   * durable. No message names a term the disk does not hold yet (pre-votes aside: they carry a
   * prospective term and promise nothing). Within that, a leader's appends, heartbeats and
   * snapshot chunks, read-index traffic and heartbeat answers vouch for nothing on this disk;
   * anything else goes now only when nothing this node wrote or is writing needs an fsync first.
   */
  private sendsNow(m: Message, rd: Ready, writesPending: boolean): boolean {
    if (plantedEarly(m, this.bugs)) return true;
    // Pre-votes carry a prospective term and promise nothing (thesis §9.6): never held behind a
    // write, so a slow disk does not also slow the check that keeps a stalled node from
    // disrupting the cluster.
    if (m.type === 'pre-vote' || m.type === 'pre-vote-resp') return true;
    if (m.term > this.durableTerm) return false;
    if (vouchesForNothing(m)) return true;
    return !rd.mustSync && (!writesPending || this.bugs?.answerAheadOfWrites === true);
  }

  /**
   * Steps 1-6 for a Ready without a snapshot, without waiting for its write. A role change it
   * carries is announced once its write (and every earlier one) is durable, while the loop goes
   * on: a new leader's heartbeats and a follower's heartbeat answers do not wait for the disk.
   */
  private pipeline(rd: Ready): void {
    const role = this.roleNote(rd);
    const pending = this.writing !== undefined || this.queued !== undefined;
    const early: Message[] = [];
    const late: Message[] = [];
    for (const m of rd.messages) (this.sendsNow(m, rd, pending) ? early : late).push(m);
    if (early.length > 0) this.send(early);
    if (this.bugs?.applyBeforeCommit === true) {
      for (const e of rd.entries) if (e.index === this.sm.appliedIndex + 1) this.applyEntry(e);
    }
    // Committed entries handed out are durable here and on a quorum: applied now, whatever
    // write is running (step 3).
    this.apply(rd);
    this.raw.accept(rd);
    const writes = rd.entries.length > 0 || rd.hardState !== undefined;
    if (!writes && late.length === 0 && !pending) {
      this.raw.persisted(rd);
      if (role !== undefined) this.announceRole(role);
    } else {
      this.enqueue(rd, late, role);
      if (this.bugs?.countOwnWriteEarly === true) this.raw.persisted(rd);
    }
    this.maybeSnapshot();
  }

  /** Adds a Ready's write to the next batch (merging: a later entry replaces the suffix from its index). */
  private enqueue(rd: Ready, late: readonly Message[], role: RoleNote | undefined): void {
    const q = (this.queued ??= { readies: [], entries: [], hardState: undefined, sync: false, late: [], roles: [] });
    q.readies.push(rd);
    if (role !== undefined) q.roles.push(role);
    const first = rd.entries[0];
    if (first !== undefined) {
      const head = q.entries[0];
      if (head !== undefined && first.index <= head.index + q.entries.length - 1) q.entries.length = Math.max(0, first.index - head.index);
      for (const e of rd.entries) q.entries.push(e);
    }
    if (rd.hardState !== undefined) q.hardState = rd.hardState;
    if (rd.mustSync && !(this.bugs?.syncOnlyEntries === true && rd.entries.length === 0)) q.sync = true;
    for (const m of late) q.late.push(m);
    this.startWrite();
  }

  /** Starts the queued batch unless a write is running (writes complete in the order they were taken). */
  private startWrite(): void {
    if (this.writing !== undefined || this.queued === undefined || this.closed || this.failure) return;
    const w = this.queued;
    this.queued = undefined;
    this.writeStartedMs = this.opts.clock.monotonicMs();
    this.writing = this.write(w).then(
      () => {
        try {
          this.written(w);
        } catch (e) {
          this.stop(e);
        }
      },
      (e: unknown) => {
        this.writing = undefined;
        this.stop(e);
      },
    );
  }

  private async write(w: PendingWrite): Promise<void> {
    if (w.entries.length === 0 && w.hardState === undefined) return;
    await this.opts.logStore.append({ entries: w.entries, hardState: w.hardState, sync: w.sync });
  }

  /** A pipelined write is durable: tell the core, send what waited for it, start the next. */
  private written(w: PendingWrite): void {
    this.writing = undefined;
    if (this.closed || this.failure) return;
    if (w.sync && w.hardState !== undefined && w.hardState.term > this.durableTerm) this.durableTerm = w.hardState.term;
    if (this.bugs?.countOwnWriteEarly !== true) for (const rd of w.readies) this.raw.persisted(rd);
    if (w.late.length > 0) this.send(w.late);
    for (const r of w.roles) this.announceRole(r);
    this.startWrite();
    this.schedule();
  }

  /** Resolves once every write taken so far is durable. */
  private async drain(): Promise<void> {
    while ((this.writing !== undefined || this.queued !== undefined) && !this.closed && !this.failure) {
      this.startWrite();
      await this.writing;
    }
  }

  /**
   * A Ready with a snapshot keeps the plain order: every earlier write, then its own (snapshot
   * file first), then what waited for it, then announce a role change it carries, restore and
   * apply.
   */
  private async inOrder(rd: Ready): Promise<void> {
    const role = this.roleNote(rd);
    const early: Message[] = [];
    const late: Message[] = [];
    for (const m of rd.messages) (this.sendsNow(m, rd, true) ? early : late).push(m);
    if (early.length > 0) this.send(early);
    await this.drain();
    if (this.closed || this.failure) return;
    await this.persist(rd);
    const hs = rd.hardState;
    if (rd.mustSync && hs !== undefined && hs.term > this.durableTerm) this.durableTerm = hs.term;
    if (late.length > 0) this.send(late);
    if (role !== undefined) this.announceRole(role);
    this.apply(rd);
    this.raw.advance(rd);
    // An installed snapshot is saved (persist): the core need not hold its bytes.
    if (rd.snapshot !== undefined && this.opts.snapshotStore.readBody !== undefined) this.raw.releaseSnapshotData(rd.snapshot.meta.index);
    this.maybeSnapshot();
  }

  private async persist(rd: Ready): Promise<void> {
    if (rd.snapshot) {
      // An incoming snapshot is durable before we acknowledge it; the log it replaces goes in
      // the same batch as the entries that follow it.
      await this.opts.snapshotStore.save(rd.snapshot);
      await this.opts.logStore.append({ entries: rd.entries, hardState: rd.hardState, sync: true, installedSnapshot: rd.snapshot.meta.index });
      return;
    }
    if (rd.entries.length > 0 || rd.hardState) {
      await this.opts.logStore.append({ entries: rd.entries, hardState: rd.hardState, sync: rd.mustSync });
    }
  }

  /** The role change a Ready carries, with the term it was taken in (taken when the Ready is). */
  private roleNote(rd: Ready): RoleNote | undefined {
    if (rd.softState === undefined) return undefined;
    return { role: rd.softState.role, leader: rd.softState.leader, term: this.raw.basicStatus().term };
  }

  /** Tells the log, `onRoleChange` and the role waiters; called once the Ready that carried it is durable. */
  private announceRole(r: RoleNote): void {
    this.log.info({ term: r.term, role: r.role, leader: r.leader }, 'raft role changed');
    this.opts.onRoleChange?.({ role: r.role, leader: r.leader, term: r.term });
    this.wakeRoleWaiters();
  }

  private apply(rd: Ready): void {
    if (rd.snapshot) {
      this.sm.restore(rd.snapshot.meta, rd.snapshot.data);
      this.lastSnapshotIndex = rd.snapshot.meta.index;
      this.lastSnapshotBytes = rd.snapshot.data.length;
      this.snapshotAppliedBytes = this.appliedBytes;
      this.log.info({ index: rd.snapshot.meta.index, bytes: rd.snapshot.data.length }, 'installed snapshot from leader');
      this.publishReset(rd.snapshot.meta.index);
    }
    for (const e of rd.committedEntries) {
      // Planted bug applyBeforeCommit: the entry was applied when it was appended.
      if (this.bugs?.applyBeforeCommit === true && e.index <= this.sm.appliedIndex) continue;
      this.applyEntry(e);
    }
    for (const rs of rd.readStates) {
      const w = this.reads.get(rs.requestId);
      if (w) w.index = rs.index;
    }
    for (const rf of rd.readFailures) {
      const w = this.reads.get(rf.requestId);
      if (!w) continue;
      this.reads.delete(rf.requestId);
      const leader = this.raw.basicStatus().leader;
      w.reject(new CairnError(ErrorCode.NOT_LEADER, `read index failed (${rf.reason}) on ${this.opts.id}`, { leader }));
    }
    this.releaseReads();
  }

  /**
   * Applies one committed entry: the state machine, then this node's event stream (the
   * publisher port, then any `subscribe` listeners), then the proposal waiting on its index.
   */
  private applyEntry(e: Entry): void {
    this.appliedBytes += e.data.length;
    const { result, changes, reset } = this.sm.apply(e);
    if (reset === true) this.publishReset(e.index);
    if (changes.length > 0) {
      const records = changes as readonly ChangeRecord<R>[];
      this.opts.publisher?.publish(e.index as number as Revision, records);
      this.notify({ kind: 'changes', index: e.index, changes: records });
    }
    const w = this.proposals.get(e.index);
    if (w) {
      this.proposals.delete(e.index);
      if (w.term === e.term || this.bugs?.answerBeforeCommit === true) w.resolve(result);
      // Another leader's entry took this index: ours was never committed anywhere.
      else w.reject(new CairnError(ErrorCode.PROPOSAL_DROPPED, `entry ${e.index} of term ${w.term} was replaced by a new leader's entry; it was not applied`));
    }
  }

  private publishReset(index: LogIndex): void {
    this.opts.publisher?.reset(index as number as Revision);
    this.notify({ kind: 'reset', index });
  }

  private releaseReads(): void {
    if (this.reads.size === 0) return;
    const applied = this.sm.appliedIndex;
    for (const [id, w] of this.reads) {
      if (w.index !== undefined && w.index <= applied) {
        this.reads.delete(id);
        w.resolve(w.index);
      }
    }
  }

  private notify(e: ReplicaEvent<R>): void {
    for (const l of this.listeners) {
      try {
        l(e);
      } catch (err) {
        this.log.error({ err }, 'a change subscriber threw; it keeps its subscription');
      }
    }
  }

  /**
   * Takes a snapshot of the applied state now (and compacts the log behind it), unless one is
   * being taken or nothing was applied since the last. Returns whether one was started.
   */
  snapshotNow(): boolean {
    if (this.stopped || this.snapshotting || this.sm.appliedIndex <= this.lastSnapshotIndex) return false;
    // Not in the middle of a Ready: its entries may be applied while the core has not yet
    // been told (advance), and the core cannot compact beyond what it knows is applied.
    if (this.processing) this.snapshotWanted = true;
    else this.startSnapshot();
    return true;
  }

  /**
   * Snapshot when enough was applied (or one was asked for): at least `snapshotEveryEntries`
   * entries and the byte trigger's share of the last snapshot's size (`snapshotLogBytesDue`).
   * Serialization yields between chunks.
   */
  private maybeSnapshot(): void {
    if (this.snapshotting || this.sm.appliedIndex <= this.lastSnapshotIndex) return;
    if (!this.snapshotWanted && !this.snapshotDue()) return;
    this.startSnapshot();
  }

  private snapshotDue(): boolean {
    const p = this.snapshotPolicy;
    if (this.sm.appliedIndex - this.lastSnapshotIndex < p.everyEntries) return false;
    return this.appliedBytes - this.snapshotAppliedBytes >= snapshotLogBytesDue(p, this.opts.id, this.lastSnapshotIndex, this.lastSnapshotBytes);
  }

  private startSnapshot(): void {
    this.snapshotWanted = false;
    this.snapshotting = true;
    void this.takeSnapshot()
      .catch((e: unknown) => this.stop(e))
      .finally(() => {
        this.snapshotting = false;
      });
  }

  private async takeSnapshot(): Promise<void> {
    const started = this.opts.clock.monotonicMs();
    const view = this.sm.snapshot();
    // Every entry up to view.index is applied (the view is taken between applies).
    const appliedBytesAtView = this.appliedBytes;
    const parts: Uint8Array[] = [];
    let size = 0;
    for (const c of view.chunks()) {
      parts.push(c);
      size += c.length;
      await this.opts.timers.yield();
    }
    // The core keeps the snapshot as one array (it sends followers slices of it). Joining the
    // chunks in one go blocked the event loop for 0.4-1 s at 100-200k resources (40-80 MB:
    // copying into freshly mapped pages, each first touch a page fault), longer than an election
    // timeout: a leader taking a snapshot lost its leadership, and writes stalled (docs/
    // performance.md, "Scale of the data"). So the copy yields every SNAPSHOT_COPY_BYTES.
    const data = new Uint8Array(size);
    let pos = 0;
    let sinceYield = 0;
    for (let i = 0; i < parts.length; i++) {
      const part = parts[i] as Uint8Array;
      data.set(part, pos);
      pos += part.length;
      sinceYield += part.length;
      if (sinceYield >= SNAPSHOT_COPY_BYTES) {
        sinceYield = 0;
        await this.opts.timers.yield();
      }
    }
    parts.length = 0;
    if (this.closed || this.failure) return;
    if (this.raw.basicStatus().snapshotIndex >= view.index) return; // a newer snapshot arrived meanwhile
    const p = this.snapshotPolicy;
    const snap = this.raw.compact(view.index, data, p.retainEntries, p.retainBytes);
    // Where the core's log now begins: the retained entries (by count and bytes) follow it.
    const kept = (this.raw.basicStatus().firstIndex - 1) as LogIndex;
    await this.opts.snapshotStore.save(snap);
    // Saved: the core need not hold the bytes any more; chunks are read back as they are sent.
    if (this.opts.snapshotStore.readBody !== undefined) this.raw.releaseSnapshotData(view.index);
    // The disk keeps the log back to the previous snapshot as well, so that if the newest
    // snapshot file is found corrupt at start-up the older one still joins up with the log.
    await this.opts.logStore.compact(Math.max(0, Math.min(this.lastSnapshotIndex, kept)) as LogIndex);
    this.lastSnapshotIndex = view.index;
    this.lastSnapshotBytes = size;
    this.snapshotAppliedBytes = appliedBytesAtView;
    this.log.info({ index: view.index, bytes: size, ms: Math.round(this.opts.clock.monotonicMs() - started) }, 'took snapshot');
  }

  /** A persistence or apply failure: stop this node rather than risk acknowledging what is not durable. */
  private stop(e: unknown): void {
    if (this.failure) return;
    this.failure = e instanceof Error ? e : new Error(String(e));
    this.opts.timers.clearInterval(this.ticker);
    this.log.error({ err: this.failure.message }, 'replica stopped: nothing further is acknowledged');
    this.failAll(new CairnError(ErrorCode.UNAVAILABLE, `node ${this.opts.id} stopped: ${this.failure.message}`));
    this.wakeRoleWaiters();
  }

  private failAll(err: CairnError): void {
    this.replayWaiter?.();
    for (const [, w] of this.proposals) {
      // The entry may still commit on other nodes: the outcome is unknown, not failed.
      w.reject(new CairnError(ErrorCode.TIMEOUT, `${err.message}; the write may or may not have been applied`));
    }
    this.proposals.clear();
    for (const [, w] of this.reads) {
      w.reject(err);
    }
    this.reads.clear();
  }
}
