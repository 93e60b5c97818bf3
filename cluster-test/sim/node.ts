/**
 * One simulated node: the shipped `Replica` (src/replica, the driver the agent runs) over the
 * real `Fsm`, store and `EventPublisher`, wired through its ports to simulated parts:
 *
 * - `Timers` and `Clock` on the discrete-event scheduler (ticks start at a per-node phase);
 * - a `Transport` onto the simulated network;
 * - a `LogStore` and a `SnapshotStore` on `SimDisk` (writes visible at once, durable after an
 *   fsync of a drawn delay; a crash keeps what was synced and maybe a prefix of the rest).
 *
 * The ports are where the simulator watches the driver: every log write is checked (log
 * matching, the hard state never goes back, nothing committed is rewritten), every message
 * sent is checked against what is durable, every entry applied must be committed (durable on
 * a quorum) and give every node the same result, every snapshot saved or installed must be the
 * state every node had at its index, and after a crash every entry the node applied must still
 * be on its disk. A watcher follows the node's event stream across restarts and snapshot
 * installs and checks it is gap-free and in commit order. Nothing in src/replica knows it is
 * simulated.
 *
 * A crash is the process dying: the incarnation's timers never fire again, its pending disk
 * writes never complete, its promises never settle; the `Replica` object is dropped. A start
 * opens a new `Replica` from exactly what is durable (`Replica.open`), as the agent does.
 */
import {
  EventPublisher,
  RawNode,
  Fsm,
  Replica,
  type ApplyResult,
  type ChangePublisher,
  type Config,
  type ConfigChange,
  type Entry,
  type HardState,
  type LoadedLog,
  type Logger,
  type LogIndex,
  type LogStore,
  type Message,
  type NodeId,
  type RaftOptions,
  type ReplicaPlantedBugs,
  type FsmPlantedBugs,
  type Resource,
  type Revision,
  type Role,
  type SeededRandom,
  type Snapshot,
  type SnapshotMeta,
  type SnapshotStore,
  type StateMachine,
  type Status,
  type StreamEvent,
  type Subscription,
  type Timers,
  type Transport,
  CairnError,
} from './raft.js';
import { SimDisk, type LogBatch } from './disk.js';
import type { EventLog } from './event-log.js';
import { hashBytes } from './hash.js';
import type { Invariants } from './invariants.js';
import { commandRequestId, fsmSnapshotBytes, readRegister, REGISTER_TYPE, registerWriteHooks, resultDigest, type RegisterState } from './resources.js';
import type { Scheduler } from './scheduler.js';
import { SimViolation } from './violation.js';

/** Simulated time 0 as a wall-clock instant. */
export const SIM_EPOCH_MS = Date.UTC(2026, 0, 1);

/** What the simulation provides to each node. */
export interface NodeHost {
  readonly scheduler: Scheduler;
  readonly log: EventLog;
  readonly invariants: Invariants;
  /** Hands a message to the network. */
  send(m: Message): void;
  /**
   * A violation found inside a port. Reported here, not only thrown: a throw inside the
   * replica's Ready loop is caught by the replica (it stops the node), not by the simulation.
   */
  violation(v: SimViolation): void;
  /** Whether the entry (index, term) is committed: durable on a quorum of some configuration in force. */
  isCommitted(index: number, term: number): boolean;
  /** Every log entry any node appends goes through here (the configuration history). */
  onAppended(entries: readonly Entry[]): void;
  /**
   * A leader appended a configuration change to its log in memory: it is in force for that
   * leader's commit decisions from now (thesis §4.1), before the pipelined driver writes it.
   */
  onConfigProposed(config: Config): void;
  /** The number of register changes the entry at `index` made, as first applied (undefined: unknown). */
  changesAt(index: number): number | undefined;
  recordChanges(node: SimNode, index: number, changes: number): void;
  /** This node was seen as leader of `term` for the first time. */
  onNewLeader(node: SimNode, term: number): void;
  /** This node, as leader, applied an entry; `oldTerm`: of an earlier term than its own. */
  onLeaderApplied(node: SimNode, oldTerm: boolean): void;
  /** This node issued a log write that needs an fsync (a hook for the nemesis). */
  onSyncedWriteIssued(node: SimNode): void;
}

export interface NodeOptions {
  readonly id: NodeId;
  /** Core options shared by every node (the id and random are filled in by the replica). */
  readonly raft: Omit<RaftOptions, 'id' | 'random'>;
  readonly tickMs: number;
  readonly fsyncMinMs: number;
  readonly fsyncMaxMs: number;
  /** The replica takes a snapshot after this many applied entries. */
  readonly snapshotEvery: number;
  /** Log entries the replica keeps behind a snapshot. */
  readonly snapshotRetain: number;
  /** The FSM's de-duplication window (request ids remembered, and carried in snapshots). */
  readonly dedupeWindow: number;
  /** Probability that a crash keeps (some of) the unsynced writes. */
  readonly crashKeepProbability: number;
  /** The replica's own proposal and read timeouts. */
  readonly requestTimeoutMs: number;
  /** ReplicaOptions.writeStallMs (the replica's default when absent). */
  readonly writeStallMs?: number;
  /** Test only: driver bugs planted in the shipped replica. */
  readonly plantedBugs?: ReplicaPlantedBugs;
  /** Test only: bugs planted in the state machine. */
  readonly fsmBugs?: FsmPlantedBugs;
}

export interface NodeStats {
  crashes: number;
  snapshotsSaved: number;
  /** Snapshot chunks a leader read back from its disk to send (the core no longer held them). */
  snapshotChunksRead: number;
  elections: number;
  writes: number;
  fsyncs: number;
  watchEvents: number;
  watchRestarts: number;
}

/** Every register, in every tenancy: what each node's watcher follows. */
const WATCH_FILTER = { group: REGISTER_TYPE.group, kind: REGISTER_TYPE.kind, partition: '*', namespace: '*' } as const;

/** One incarnation (process lifetime) of a node: what a crash throws away. */
interface Incarnation {
  readonly number: number;
  readonly fsm: Fsm;
  readonly publisher: EventPublisher;
  replica: Replica<ApplyResult, Resource> | undefined;
  /** The transport's handlers, registered by the replica. */
  onMessage: ((m: Message) => void) | undefined;
  onConnectionLost: ((peer: NodeId) => void) | undefined;
  /** Restoring the node's own snapshot at start-up (vs installing the leader's). */
  recovering: boolean;
}

export class SimNode {
  readonly id: NodeId;
  readonly disk: SimDisk;
  readonly stats: NodeStats = { crashes: 0, snapshotsSaved: 0, snapshotChunksRead: 0, elections: 0, writes: 0, fsyncs: 0, watchEvents: 0, watchRestarts: 0 };
  private inc: Incarnation | undefined;
  private incarnationCount = 0;
  /** The last entry this node applied (or restored), whatever the incarnation. */
  private lastApplied = { index: 0, term: 0 };
  private lastRole: Role | 'down' = 'down';
  private lastTerm = 0;
  private lastLeader = '';
  /** The watcher: the last revision it has seen everything up to (survives restarts), and its subscription. */
  private watchRevision: number | undefined;
  private watchLive = false;
  private watchSub: Subscription | undefined;
  /** A disk stall (the nemesis's `disk-stall`): no fsync completes before this simulated time. */
  private stalledUntil = 0;
  /** Something reached the replica since the last `observe` (a timer, a message, a disk completion, a call). */
  touched = false;

  /**
   * `bootstrap`: the initial configuration, for a founding member (the replica writes it on its
   * first start, as `cairn agent --bootstrap` does); a node added later starts empty.
   */
  constructor(
    private readonly options: NodeOptions,
    private readonly bootstrap: Config | undefined,
    private readonly random: SeededRandom,
    private readonly host: NodeHost,
  ) {
    this.id = options.id;
    this.disk = new SimDisk(options.id, RawNode.emptyState());
  }

  /** Changes at every start and crash: a process's identity, for events addressed to it. */
  get incarnationNumber(): number {
    return this.incarnationCount;
  }

  /** Running: its replica is open (a node still opening receives nothing). */
  get isUp(): boolean {
    return this.inc?.replica !== undefined;
  }

  /** Started and not crashed (possibly still opening). */
  get isStarted(): boolean {
    return this.inc !== undefined;
  }

  get applied(): number {
    return this.inc?.fsm.appliedIndex ?? 0;
  }

  /** The last role observed, or 'down'. */
  get role(): Role | 'down' {
    return this.lastRole;
  }

  get term(): number {
    return this.lastTerm;
  }

  get leader(): string {
    return this.lastLeader;
  }

  status(): Status | undefined {
    return this.inc?.replica?.status();
  }

  private say(what: string): void {
    this.host.log.add(this.id, what);
  }

  /**
   * Runs a check called from inside the replica (a port, a callback): a violation it throws is
   * reported to the run first, since the replica catches what its ports throw (and stops).
   */
  private report<T>(fn: () => T): T {
    try {
      return fn();
    } catch (e) {
      if (e instanceof SimViolation) this.host.violation(e);
      throw e;
    }
  }

  private violate(kind: SimViolation['kind'], message: string): never {
    const v = new SimViolation(kind, message);
    this.host.violation(v);
    throw v;
  }

  // ---- Lifecycle ------------------------------------------------------------------------------

  /** Starts (or restarts) the process: opens a replica from exactly what is durable on disk. */
  start(): void {
    if (this.inc !== undefined) return;
    const number = ++this.incarnationCount;
    const fsm = new Fsm({
      dedupeWindow: this.options.dedupeWindow,
      // Unconditional register writes run the register type's hooks at apply (resources.ts).
      writeHooks: registerWriteHooks(),
      ...(this.options.fsmBugs !== undefined ? { plantedBugs: this.options.fsmBugs } : {}),
      // The simulator proposes only well-formed commands: a malformed one in a committed entry
      // means it was corrupted on its way.
      onMalformedEntry: (type, index, message) => {
        this.violate('exception', `${this.id}: committed entry ${index} (type 0x${type.toString(16)}) is malformed: ${message}`);
      },
    });
    const publisher = new EventPublisher({ current: () => fsm.store }, { clock: this.clock(), bookmarkIntervalMs: 500, futureRevisionTimeoutMs: 2_000 });
    const inc: Incarnation = { number, fsm, publisher, replica: undefined, onMessage: undefined, onConnectionLost: undefined, recovering: true };
    this.inc = inc;
    const d = this.disk.durable;
    this.say(
      `start inc ${number} t${d.hardState.term} v${d.hardState.vote || '-'} c${d.hardState.commit} snap ${this.disk.newestSnapshot?.meta.index ?? 0} ` +
        `log ${d.first}..${d.lastIndex}`,
    );
    const timers = this.timers(inc);
    const opened = Replica.open<ApplyResult, Resource>({
      id: this.id,
      raft: this.options.raft,
      random: this.random.fork(),
      clock: this.clock(),
      timers,
      logStore: this.logStore(inc),
      snapshotStore: this.snapshotStore(inc),
      transport: this.transport(inc),
      stateMachine: this.stateMachine(inc),
      publisher: this.observedPublisher(inc),
      logger: this.logger(inc),
      tickMs: this.options.tickMs,
      snapshotEveryEntries: this.options.snapshotEvery,
      snapshotRetainEntries: this.options.snapshotRetain,
      proposalTimeoutMs: this.options.requestTimeoutMs,
      readTimeoutMs: this.options.requestTimeoutMs,
      ...(this.options.writeStallMs !== undefined ? { writeStallMs: this.options.writeStallMs } : {}),
      onRoleChange: (s) => this.onRoleChange(inc, s),
      ...(this.bootstrap !== undefined ? { bootstrap: this.bootstrap } : {}),
      ...(this.options.plantedBugs !== undefined ? { plantedBugs: this.options.plantedBugs } : {}),
    });
    opened.then(
      (replica) => {
        if (this.inc !== inc) return;
        inc.replica = replica;
        inc.recovering = false;
        this.touched = true;
        this.say(`opened inc ${number}: applied ${fsm.appliedIndex}`);
        this.observe();
        this.watch(inc);
        timers.setInterval(() => publisher.tick(), 100);
      },
      (e: unknown) => {
        if (this.inc !== inc) return;
        this.host.violation(e instanceof SimViolation ? e : new SimViolation('exception', `${this.id}: the replica could not open: ${e instanceof Error ? e.message : String(e)}`));
      },
    );
  }

  /** Power loss: the process dies, unsynced writes may be lost, memory is gone. */
  crash(): void {
    if (this.inc === undefined) return;
    this.inc.publisher.close();
    this.inc = undefined;
    this.incarnationCount++;
    this.watchSub = undefined;
    this.lastRole = 'down';
    this.stats.crashes++;
    this.stalledUntil = 0;
    const { kept, lost } = this.disk.crash(this.random, this.options.crashKeepProbability);
    this.say(`crash (unsynced writes kept ${kept}, lost ${lost}; durable log ${this.disk.durable.first}..${this.disk.durable.lastIndex})`);
    // An applied entry is never un-applied: what the node applied must survive its crash.
    const a = this.lastApplied;
    if (a.index > 0 && !this.disk.holdsDurably(a.index, a.term)) {
      this.violate('lost-applied-entry', `${this.id} applied entry ${a.index}/${a.term}, but after its crash neither its log nor a snapshot holds it`);
    }
  }

  // ---- Observation ----------------------------------------------------------------------------

  /** Reads the replica's status; logs role changes and feeds election safety. */
  observe(): void {
    this.touched = false;
    const r = this.inc?.replica;
    if (r === undefined) return;
    const s = r.basicStatus();
    if (s.role !== this.lastRole || s.term !== this.lastTerm || s.leader !== this.lastLeader) {
      this.say(`role ${s.role} t${s.term} leader ${s.leader || '-'}`);
      if (s.role === 'candidate' && (this.lastRole !== 'candidate' || s.term !== this.lastTerm)) this.stats.elections++;
      this.lastRole = s.role;
      this.lastTerm = s.term;
      this.lastLeader = s.leader;
    }
    if (this.host.invariants.observeRole(this.id, s.role, s.term)) this.host.onNewLeader(this, s.term);
  }

  private onRoleChange(inc: Incarnation, s: { readonly role: Role; readonly leader: NodeId; readonly term: number }): void {
    if (this.inc !== inc) return;
    this.report(() => this.checkNewRole(s));
  }

  private checkNewRole(s: { readonly role: Role; readonly term: number }): void {
    if (this.host.invariants.observeRole(this.id, s.role, s.term)) this.host.onNewLeader(this, s.term);
    // The Ready that made it leader is durable, and every earlier Ready was written before it:
    // the disk now holds the leader's whole log.
    if (s.role === 'leader') {
      const log = this.disk.latest;
      this.host.invariants.checkLeaderCompleteness(this.id, s.term, { first: log.first, lastIndex: log.lastIndex, termAt: (i) => log.entryAt(i)?.term });
    }
  }

  // ---- Client-facing calls (what the API layer would call) -------------------------------------

  /** A promise that never settles once the incarnation that made it is gone (its process died). */
  private guard<T>(inc: Incarnation, p: Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      p.then(
        (v) => {
          if (this.inc === inc) resolve(v);
        },
        (e: unknown) => {
          if (this.inc === inc) reject(e instanceof Error ? e : new Error(String(e)));
        },
      );
    });
  }

  private up(action: string): { inc: Incarnation; replica: Replica<ApplyResult, Resource> } {
    this.touched = true;
    const inc = this.inc;
    if (inc?.replica === undefined) throw new CairnError('UNAVAILABLE', `cannot ${action} on ${this.id}: the node is down`);
    return { inc, replica: inc.replica };
  }

  /**
   * Runs `call` on the running replica, its promise guarded by the incarnation; a node that is
   * down answers UNAVAILABLE (a rejected promise, as the replica's own refusals are).
   */
  private onReplica<T>(action: string, call: (inc: Incarnation, replica: Replica<ApplyResult, Resource>) => Promise<T>): Promise<T> {
    try {
      const { inc, replica } = this.up(action);
      return this.guard(inc, call(inc, replica));
    } catch (e) {
      return Promise.reject(e instanceof Error ? e : new Error(String(e)));
    }
  }

  propose(data: Uint8Array): Promise<ApplyResult> {
    return this.onReplica('propose', (_inc, replica) => replica.propose(data));
  }

  /** A linearizable read: the read index, then the register from the local store. */
  read(key: string): Promise<RegisterState> {
    return this.onReplica('read', (inc, replica) => replica.readIndex().then(() => readRegister(inc.fsm.store, key)));
  }

  proposeConfigChange(change: ConfigChange): Promise<unknown> {
    return this.onReplica('proposeConfigChange', (_inc, replica) => {
      const p = replica.proposeConfigChange(change);
      this.host.onConfigProposed(replica.basicStatus().config);
      return p;
    });
  }

  /** A spurious election timeout: campaign now (pre-vote first). */
  campaign(): void {
    this.touched = true;
    this.inc?.replica?.campaign();
  }

  /** Throws the core's CairnError when it refuses. */
  transferLeadership(target: NodeId): void {
    this.up('transferLeadership').replica.transferLeadership(target);
  }

  /** Starts a snapshot (and log compaction) now; false when one is running or nothing is new. */
  snapshotNow(): boolean {
    this.touched = true;
    return this.inc?.replica?.snapshotNow() ?? false;
  }

  /** Delivers a message from the network (false when the node is not running). */
  receive(m: Message): boolean {
    const h = this.inc?.replica !== undefined ? this.inc.onMessage : undefined;
    if (h === undefined) return false;
    this.touched = true;
    h(m);
    return true;
  }

  /** The connection with `peer` broke at the peer's end (its process died). */
  connectionLost(peer: NodeId): void {
    const h = this.inc?.replica !== undefined ? this.inc.onConnectionLost : undefined;
    if (h === undefined) return;
    this.say(`connection to ${peer} lost`);
    this.touched = true;
    h(peer);
  }

  /** The applied state's deterministic data size (the quota's figure), or undefined when down. */
  dataBytes(): number | undefined {
    return this.inc?.fsm.store.dataBytes;
  }

  /** The applied index and a digest of the whole FSM state there (for the end-of-run comparison). */
  stateDigest(): { readonly index: number; readonly digest: string } | undefined {
    const fsm = this.inc?.fsm;
    if (fsm === undefined) return undefined;
    return { index: fsm.appliedIndex, digest: hashBytes(fsmSnapshotBytes(fsm)) };
  }

  // ---- Ports ------------------------------------------------------------------------------------

  private clock(): { nowMs(): number; monotonicMs(): number } {
    const s = this.host.scheduler;
    return { nowMs: () => SIM_EPOCH_MS + s.now(), monotonicMs: () => s.now() };
  }

  private timers(inc: Incarnation): Timers {
    const s = this.host.scheduler;
    const alive = (): boolean => this.inc === inc;
    const ms = (v: number): number => Math.max(0, Math.ceil(v));
    return {
      setTimeout: (fn, delay) => {
        const h = { cancelled: false };
        s.after(ms(delay), () => {
          if (h.cancelled || !alive()) return;
          this.touched = true;
          fn();
        });
        return h;
      },
      clearTimeout: (h) => {
        if (h !== undefined && h !== null) (h as { cancelled: boolean }).cancelled = true;
      },
      setInterval: (fn, every) => {
        const h = { cancelled: false };
        const period = Math.max(1, ms(every));
        const fire = (): void => {
          if (h.cancelled || !alive()) return;
          if (period === this.options.tickMs) this.say('tick');
          this.touched = true;
          fn();
          s.after(period, fire);
        };
        // Intervals start at a drawn phase, so nodes do not tick in lockstep.
        s.after(this.random.range(1, period), fire);
        return h;
      },
      clearInterval: (h) => {
        if (h !== undefined && h !== null) (h as { cancelled: boolean }).cancelled = true;
      },
      yield: () =>
        new Promise<void>((resolve) => {
          s.after(0, () => {
            if (!alive()) return;
            this.touched = true;
            resolve();
          });
        }),
    };
  }

  /**
   * A disk stall until `untilMs`: every fsync of this disk that would complete before then
   * (including those already running) completes at that moment instead, in the order they
   * would have. Ends at a crash (the stalled fsyncs never complete).
   */
  stallDisk(untilMs: number): void {
    if (this.inc === undefined) return;
    this.stalledUntil = Math.max(this.stalledUntil, untilMs);
    this.say(`disk stalled until t=${this.stalledUntil}ms`);
  }

  /** An fsync of a drawn duration (longer during a disk stall); its completion is dropped if the process died meanwhile. */
  private fsync(inc: Incarnation, done: () => void): Promise<void> {
    const delay = this.random.range(this.options.fsyncMinMs, this.options.fsyncMaxMs);
    return new Promise<void>((resolve) => {
      const complete = (): void => {
        if (this.inc !== inc) return;
        const now = this.host.scheduler.now();
        if (now < this.stalledUntil) {
          this.host.scheduler.at(this.stalledUntil, complete);
          return;
        }
        this.touched = true;
        done();
        resolve();
      };
      this.host.scheduler.after(delay, complete);
    });
  }

  private logStore(inc: Incarnation): LogStore {
    const alive = (): boolean => this.inc === inc;
    return {
      load: (afterIndex: LogIndex): Promise<LoadedLog> => {
        const { hardState, entries, afterIndexTerm } = this.disk.load(afterIndex);
        return Promise.resolve({ hardState, entries, afterIndexTerm, truncatedTail: 0 });
      },
      append: (batch) => {
        if (!alive()) return new Promise<void>(() => {});
        this.report(() => this.checkWrite(batch));
        const seq = this.report(() => this.disk.write(batch));
        this.stats.writes++;
        const first = batch.entries[0];
        const hs = batch.hardState;
        this.say(
          `write ${seq}:${batch.installedSnapshot !== undefined ? ` after snapshot ${batch.installedSnapshot}` : ''}` +
            `${first !== undefined ? ` entries ${first.index}..${first.index + batch.entries.length - 1}` : ''}` +
            `${hs !== undefined ? ` hs t${hs.term} v${hs.vote || '-'} c${hs.commit}` : ''}${batch.sync ? ' (sync)' : ''}`,
        );
        if (!batch.sync) return Promise.resolve();
        this.host.onSyncedWriteIssued(this);
        return this.fsync(inc, () => {
          this.disk.sync(seq);
          this.stats.fsyncs++;
          this.say(`fsync ${seq}`);
        });
      },
      compact: (index: LogIndex) => {
        if (alive()) {
          this.report(() => this.disk.compact(index));
          this.say(`compact log to ${index}`);
        }
        return Promise.resolve();
      },
      close: () => Promise.resolve(),
    };
  }

  /**
   * A log write, checked against what the node already wrote (synced or not; after a crash,
   * what survived): log matching for the new entries, the term never goes back, a vote once
   * cast in a term never changes (§5.2), the commit index never goes back, and no entry at or
   * below the commit index is rewritten.
   */
  private checkWrite(batch: LogBatch & { readonly installedSnapshot?: LogIndex }): void {
    const log = this.disk.latest;
    const first = batch.entries[0];
    if (first !== undefined) {
      const prevIndex = first.index - 1;
      let prevTerm: number | undefined;
      if (batch.installedSnapshot !== undefined) {
        const snap = this.disk.newestSnapshot;
        prevTerm = prevIndex === batch.installedSnapshot && snap?.meta.index === prevIndex ? snap.meta.term : undefined;
      } else prevTerm = prevIndex === 0 ? 0 : log.entryAt(prevIndex)?.term;
      this.host.invariants.observeAppend(this.id, batch.entries, prevTerm);
      this.host.onAppended(batch.entries);
      if (first.index <= log.hardState.commit && log.entryAt(first.index) !== undefined && log.entryAt(first.index)?.term !== first.term) {
        this.violate('state-machine-safety', `${this.id}: a log write rewrites entry ${first.index} at or below its commit index ${log.hardState.commit}`);
      }
    }
    const before = log.hardState;
    const hs: HardState | undefined = batch.hardState;
    if (hs !== undefined) {
      if (hs.term < before.term) this.violate('ready-contract', `${this.id}: hard state term went back from ${before.term} to ${hs.term}`);
      if (hs.term === before.term && before.vote !== '' && hs.vote !== before.vote) {
        this.violate('election-safety', `${this.id}: voted for ${before.vote} and then ${hs.vote || 'nobody'} in term ${hs.term}`);
      }
      if (hs.commit < before.commit) this.violate('ready-contract', `${this.id}: commit index went back from ${before.commit} to ${hs.commit}`);
    }
  }

  private snapshotStore(inc: Incarnation): SnapshotStore {
    return {
      save: (snap: Snapshot) => {
        if (this.inc !== inc) return new Promise<void>(() => {});
        // The whole state at the snapshot's index, whoever made it: it must be every node's.
        this.report(() => this.host.invariants.observeState(this.id, snap.meta.index, hashBytes(snap.data), 'snapshot'));
        return this.fsync(inc, () => {
          this.disk.saveSnapshot(snap);
          this.stats.snapshotsSaved++;
          this.say(`snapshot saved ${snap.meta.index}/${snap.meta.term} (${snap.data.length} bytes, state ${hashBytes(snap.data)})`);
        });
      },
      loadNewest: () => {
        const snap = this.disk.newestSnapshot;
        return Promise.resolve({ snapshot: snap === undefined ? undefined : structuredClone(snap), skippedCorrupt: [] });
      },
      // The disk keeps the newest snapshot: a transfer of an older one finds it gone (the
      // leader then starts over with the newest, as with a pruned file).
      readBody: (meta, offset, length) => {
        if (this.inc !== inc) return new Promise<Uint8Array>(() => {});
        const snap = this.disk.newestSnapshot;
        if (snap === undefined || snap.meta.index !== meta.index || snap.meta.term !== meta.term) {
          return Promise.reject(new Error(`snapshot ${meta.index}/${meta.term} is no longer on disk`));
        }
        if (offset < 0 || offset + length > snap.data.length) return Promise.reject(new Error(`bytes ${offset}..${offset + length} outside snapshot ${meta.index}`));
        this.stats.snapshotChunksRead++;
        return Promise.resolve(snap.data.slice(offset, offset + length));
      },
      close: () => Promise.resolve(),
    };
  }

  private transport(inc: Incarnation): Transport {
    return {
      send: (messages) =>
        this.report(() => {
          for (const m of messages) {
            if (this.inc !== inc) return;
            this.checkDurableBeforeSend(m);
            this.host.send(m);
          }
        }),
      onMessage: (handler) => {
        inc.onMessage = handler;
      },
      onConnectionLost: (handler) => {
        inc.onConnectionLost = handler;
      },
      close: () => Promise.resolve(),
    };
  }

  /**
   * A message may only promise what is durable. Its term is persisted; a granted vote is
   * persisted (or the node has durably moved to a later term, where it can never vote in that
   * term again); an append acknowledgement covers durable entries. A message made in an earlier
   * term and sent after the node moved on is like one the network delayed: it promised what was
   * durable when it was made, so it is checked only while the node is still in the message's
   * term. Pre-vote messages carry a prospective term and promise nothing.
   */
  private checkDurableBeforeSend(m: Message): void {
    const d = this.disk.durable;
    const durableTerm = d.hardState.term as number;
    if (m.type === 'pre-vote' || m.type === 'pre-vote-resp') return;
    if (m.term > durableTerm) this.violate('ready-contract', `${this.id}: sends ${m.type} of term ${m.term} while its durable term is ${durableTerm}`);
    if (m.term < durableTerm) return;
    if (m.type === 'vote-resp' && !m.reject && d.hardState.vote !== m.to) {
      this.violate('ready-contract', `${this.id}: grants its term-${m.term} vote to ${m.to} but its durable vote is ${d.hardState.vote || 'nobody'}`);
    }
    if (m.type === 'app-resp' && !m.reject && m.index > d.lastIndex && !this.disk.holdsDurably(m.index, m.term)) {
      this.violate('ready-contract', `${this.id}: acknowledges entries up to ${m.index} in term ${m.term} but only ${d.lastIndex} are durable`);
    }
  }

  /** The real FSM, watched: every apply and restore is checked against every other node's. */
  private stateMachine(inc: Incarnation): StateMachine<ApplyResult, Resource> {
    const fsm = inc.fsm;
    return {
      apply: (e: Entry) => this.report(() => this.applyChecked(inc, e)),
      restore: (meta: SnapshotMeta, data: Uint8Array) => this.report(() => this.restoreChecked(inc, meta, data)),
      snapshot: () => fsm.snapshot(),
      get appliedIndex() {
        return fsm.appliedIndex;
      },
    };
  }

  private applyChecked(inc: Incarnation, e: Entry): ReturnType<Fsm['apply']> {
    const fsm = inc.fsm;
    if (!this.host.isCommitted(e.index, e.term)) {
      this.violate('apply-before-commit', `${this.id} applies entry ${e.index}/${e.term}, which is not durable on a quorum`);
    }
    const out = fsm.apply(e);
    const replica = inc.replica;
    const st = replica?.basicStatus();
    const nodeTerm = st?.term ?? this.disk.latest.hardState.term;
    this.host.invariants.observeApply(this.id, e, resultDigest(out.result), nodeTerm);
    const requestId = commandRequestId(e.data);
    if (requestId !== undefined) this.host.invariants.observeCommand(this.id, requestId, e.index);
    this.host.recordChanges(this, e.index, out.changes.length);
    this.lastApplied = { index: e.index, term: e.term };
    if (st?.role === 'leader') {
      const oldTerm = e.term < nodeTerm;
      // After this step, not from inside the replica's apply.
      this.host.scheduler.after(0, () => {
        if (this.inc === inc) this.host.onLeaderApplied(this, oldTerm);
      });
    }
    return out;
  }

  private restoreChecked(inc: Incarnation, meta: SnapshotMeta, data: Uint8Array): void {
    const fsm = inc.fsm;
    fsm.restore(meta, data);
    const how = inc.recovering ? 'recover' : 'restore';
    const digest = hashBytes(data);
    const again = hashBytes(fsmSnapshotBytes(fsm));
    this.say(`${how} snapshot ${meta.index}/${meta.term} (${data.length} bytes, state ${digest})`);
    if (again !== digest) {
      this.violate(
        'state-machine-safety',
        `${this.id}: the FSM restored from snapshot ${meta.index}/${meta.term} (${digest}) serializes to ${again}, not to the snapshot's bytes`,
      );
    }
    this.host.invariants.observeRestore(this.id, meta);
    this.host.invariants.observeState(this.id, meta.index, digest, how);
    if (meta.index > this.lastApplied.index || how === 'restore') this.lastApplied = { index: meta.index, term: meta.term };
  }

  /** The real publisher, behind the replica's port. */
  private observedPublisher(inc: Incarnation): ChangePublisher<Resource> {
    return {
      publish: (revision, changes) => inc.publisher.publish(revision, changes),
      reset: (revision) => {
        this.say(`stream reset at ${revision}`);
        inc.publisher.reset(revision);
      },
    };
  }

  /** The replica's log lines go to the event log; an error is a violation (the node stopped). */
  private logger(inc: Incarnation): Logger {
    const line = (level: string, obj: object, msg: string): void => {
      if (this.inc !== inc) return;
      const fields = Object.entries(obj)
        .map(([k, v]) => `${k}=${typeof v === 'object' ? JSON.stringify(v) : String(v)}`)
        .join(' ');
      this.say(`${level} ${msg}${fields ? ` (${fields})` : ''}`);
    };
    return {
      debug: () => {},
      info: (obj, msg) => line('info', obj, msg),
      warn: (obj, msg) => line('warn', obj, msg),
      error: (obj, msg) => {
        line('error', obj, msg);
        if (this.inc === inc) this.host.violation(new SimViolation('exception', `${this.id}: ${msg} ${JSON.stringify(obj)}`));
      },
    };
  }

  // ---- The watcher ------------------------------------------------------------------------------

  /**
   * Follows this node's event stream as a client would: from the initial state, then resuming
   * after the last revision seen (also across restarts); a RESET or COMPACTED end starts over
   * from a fresh initial state. Every live event is checked against the changes the entries made.
   */
  private watch(inc: Incarnation): void {
    if (this.inc !== inc) return;
    const from = this.watchRevision;
    const sub = inc.publisher.subscribe(WATCH_FILTER, from !== undefined ? { gtRevision: from as Revision } : {});
    this.watchSub = sub;
    this.watchLive = false;
    this.stats.watchRestarts++;
    const drain = (): void => {
      if (this.watchSub !== sub || this.inc !== inc) return;
      for (let ev = sub.next(); ev !== undefined; ev = sub.next()) {
        if (this.watchSub !== sub) return;
        this.onWatchEvent(inc, ev);
      }
    };
    sub.onReadable = drain;
    drain();
  }

  private onWatchEvent(inc: Incarnation, ev: StreamEvent): void {
    this.stats.watchEvents++;
    switch (ev.type) {
      case 'change':
      case 'delete': {
        if (!this.watchLive) return; // the initial state
        const v = ev.revision as number;
        const last = this.watchRevision ?? 0;
        if (v < last) this.violate('watch-stream', `${this.id}'s stream went back from revision ${last} to ${v}`);
        if (v > last) {
          for (let i = last + 1; i < v; i++) {
            const n = this.host.changesAt(i);
            if (n !== undefined && n > 0) this.violate('watch-stream', `${this.id}'s stream skipped the change at revision ${i} (went from ${last} to ${v})`);
          }
        }
        const n = this.host.changesAt(v);
        if (n === 0) this.violate('watch-stream', `${this.id}'s stream has an event at revision ${v}, where the entry changed nothing`);
        if (ev.type === 'change' && (ev.resource.version as number) !== v) this.violate('watch-stream', `${this.id}'s stream has ${ev.resource.id.name} at version ${ev.resource.version} in an event at revision ${v}`);
        this.watchRevision = v;
        return;
      }
      case 'tail':
        this.watchLive = true;
        this.watchRevision = ev.revision as number;
        return;
      case 'bookmark':
        if (this.watchLive && (ev.revision as number) < (this.watchRevision ?? 0)) {
          this.violate('watch-stream', `${this.id}'s stream has a bookmark at ${ev.revision} after revision ${this.watchRevision ?? 0}`);
        }
        if (this.watchLive) this.watchRevision = ev.revision as number;
        return;
      case 'end': {
        this.say(`watch ended ${ev.code} at ${ev.revision}: ${ev.message}`);
        if (ev.code === 'RESET' || ev.code === 'COMPACTED') this.watchRevision = undefined;
        this.watchSub = undefined;
        // Again as the client's next step, not from inside the publisher.
        this.host.scheduler.after(0, () => this.watch(inc));
        return;
      }
    }
  }
}
