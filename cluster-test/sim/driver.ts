/**
 * The simulated replica: one RawNode core, its disk and the real state machine (`Fsm` from
 * src/fsm over its `ResourceStore`), driven by the Ready contract (etcd node.go run loop,
 * STYLE.md "One thin driver does the I/O"):
 *
 *   1. persist rd.snapshot, rd.entries, rd.hardState atomically (durable after an fsync);
 *   2. only once durable, send rd.messages;
 *   3. restore rd.snapshot into the FSM, apply rd.committedEntries in order;
 *   4. serve rd.readStates once applied >= their index, fail rd.readFailures;
 *   5. advance(rd).
 *
 * One Ready at a time: while its fsync is outstanding, messages and ticks are still stepped
 * into the core (that is allowed), but the next ready() is taken only after advance(). The
 * driver makes no protocol decisions.
 */
import {
  CairnError,
  EntryType,
  Fsm,
  RawNode,
  decodeConfigEntry,
  type ApplyResult,
  type Config,
  type ConfigChange,
  type Entry,
  type LogIndex,
  type Message,
  type NodeId,
  type PersistedState,
  type RaftOptions,
  type Ready,
  type Role,
  type SeededRandom,
  type Snapshot,
  type Status,
  type Term,
} from './raft.js';
import { describeReady } from './describe.js';
import { SimDisk } from './disk.js';
import type { EventLog } from './event-log.js';
import type { Invariants } from './invariants.js';
import { hashBytes } from './hash.js';
import { commandRequestId, fsmSnapshotBytes, readRegister, resultDigest, type RegisterState } from './resources.js';
import type { Scheduler } from './scheduler.js';
import { SimViolation } from './violation.js';

/** What the simulation provides to each replica. */
export interface ReplicaHost {
  readonly scheduler: Scheduler;
  readonly log: EventLog;
  readonly invariants: Invariants;
  /** Hands a message to the network. */
  send(m: Message): void;
  /** A client command was applied on this replica (every replica calls this for every command). */
  onApplied(replica: Replica, applied: AppliedCommand): void;
  /** A read-index request made on this replica may now read local state. */
  onReadServed(replica: Replica, requestId: string): void;
  onReadFailed(replica: Replica, requestId: string, reason: string): void;
  /** This replica was seen as leader of `term` for the first time. */
  onNewLeader(replica: Replica, term: number): void;
  /**
   * This replica, as leader, just applied newly committed entries (a hook for the nemesis);
   * `oldTerm` says whether some of them are from an earlier term than the leader's.
   */
  onLeaderApplied(replica: Replica, oldTerm: boolean): void;
  /** This replica issued a write that needs an fsync (a hook for the nemesis). */
  onSyncedWriteIssued(replica: Replica): void;
}

export interface ReplicaOptions {
  readonly id: NodeId;
  /** Core options shared by every node (the id and random are filled in per replica). */
  readonly raft: Omit<RaftOptions, 'id' | 'random'>;
  readonly tickMs: number;
  readonly fsyncMinMs: number;
  readonly fsyncMaxMs: number;
  /** Take a snapshot and compact after this many entries applied since the last one. */
  readonly snapshotEvery: number;
  /** The FSM's de-duplication window (request ids remembered, and carried in snapshots). */
  readonly dedupeWindow: number;
  /** Probability that a crash keeps (some of) the unsynced writes. */
  readonly crashKeepProbability: number;
  /** Test-only: break the driver contract on purpose, to prove the simulator notices. */
  readonly driverBugs?: DriverBugs;
}

export interface DriverBugs {
  /** Send a Ready's messages before its writes are durable (breaks step 2 of the contract). */
  readonly sendBeforeSync?: boolean;
  /**
   * Install a snapshot received from the leader in the log only: the applied index jumps to
   * the snapshot's, but the FSM keeps its old state and later entries apply on top of it
   * (breaks step 3 of the contract).
   */
  readonly ignoreSnapshot?: boolean;
}

/** A committed command as the FSM applied it: the client's request id and the FSM's result. */
export interface AppliedCommand {
  readonly requestId: string;
  readonly result: ApplyResult;
}

interface PendingRead {
  readonly requestId: string;
  readonly index: number;
}

export class Replica {
  readonly id: NodeId;
  readonly disk: SimDisk;
  private core: RawNode | undefined;
  private fsm: Fsm;
  private appliedIndex = 0;
  private appliedTerm = 0;
  /** The configuration in force at the applied index (for snapshot metadata). */
  private appliedConfig: Config | undefined;
  private snapshotIndex = 0;
  private incarnation = 0;
  private readyInFlight = false;
  private pendingReads: PendingRead[] = [];
  /** Operations proposed on this incarnation, by opId. */
  private readonly proposals = new Set<string>();
  private lastRole: Role | 'down' = 'down';
  private lastTerm = 0;
  private lastLeader = '';
  /** Counters for the run's statistics. */
  readonly stats = { snapshotsTaken: 0, readies: 0, crashes: 0, elections: 0 };

  constructor(
    private readonly options: ReplicaOptions,
    initial: PersistedState,
    private readonly random: SeededRandom,
    private readonly host: ReplicaHost,
  ) {
    this.id = options.id;
    this.disk = new SimDisk(options.id, initial);
    this.fsm = this.newFsm();
  }

  /**
   * A fresh FSM. The simulator proposes only well-formed commands, so a malformed one in a
   * committed entry means the entry was corrupted on its way: reported, not applied as an error.
   */
  private newFsm(): Fsm {
    return new Fsm({
      dedupeWindow: this.options.dedupeWindow,
      onMalformedEntry: (type, index, message) => {
        throw new SimViolation('exception', `${this.id}: committed entry ${index} (type 0x${type.toString(16)}) is malformed: ${message}`);
      },
    });
  }

  /** Changes at every start and crash: a process's identity, for events addressed to it. */
  get incarnationNumber(): number {
    return this.incarnation;
  }

  get isUp(): boolean {
    return this.core !== undefined;
  }

  get applied(): number {
    return this.appliedIndex;
  }

  /** The last role observed (after the last step), or 'down'. */
  get role(): Role | 'down' {
    return this.lastRole;
  }

  get term(): number {
    return this.lastTerm;
  }

  get leader(): string {
    return this.lastLeader;
  }

  private log(what: string): void {
    this.host.log.add(this.id, what);
  }

  /** Starts (or restarts) from exactly what is durable on disk. */
  start(): void {
    if (this.core !== undefined) return;
    const persisted = this.disk.recover();
    this.core = new RawNode({ ...this.options.raft, id: this.id, random: this.random.fork() }, persisted);
    this.fsm = this.newFsm();
    this.appliedIndex = 0;
    this.appliedTerm = 0;
    this.appliedConfig = undefined;
    this.snapshotIndex = 0;
    if (persisted.snapshot !== undefined) this.installSnapshot(persisted.snapshot, 'recover');
    this.readyInFlight = false;
    this.pendingReads = [];
    this.proposals.clear();
    const inc = ++this.incarnation;
    this.log(
      `start inc ${inc} t${persisted.hardState.term} v${persisted.hardState.vote || '-'} c${persisted.hardState.commit} ` +
        `snap ${persisted.snapshot?.meta.index ?? 0} last ${this.disk.durable.lastIndex} applied ${this.appliedIndex}`,
    );
    // Ticks start at a per-node phase offset so nodes do not tick in lockstep.
    this.scheduleTick(inc, this.random.range(1, this.options.tickMs));
    this.observe();
    this.pump();
  }

  /** Power loss: the process dies, unsynced writes may be lost, memory is gone. */
  crash(): void {
    if (this.core === undefined) return;
    this.core = undefined;
    this.incarnation++;
    this.readyInFlight = false;
    this.pendingReads = [];
    this.proposals.clear();
    this.lastRole = 'down';
    this.stats.crashes++;
    const { kept, lost } = this.disk.crash(this.random, this.options.crashKeepProbability);
    this.log(`crash (unsynced writes kept ${kept}, lost ${lost}; durable last ${this.disk.durable.lastIndex})`);
  }

  private scheduleTick(inc: number, delayMs: number): void {
    this.host.scheduler.after(delayMs, () => {
      if (inc !== this.incarnation || this.core === undefined) return;
      this.log('tick');
      this.core.tick();
      this.afterStep();
      this.scheduleTick(inc, this.options.tickMs);
    });
  }

  /**
   * The connection with `peer` broke at the peer's end (its process died): the driver's
   * report to the core (RawNode.reportConnectionLost). Ignored while this node is down.
   */
  connectionLost(peer: NodeId): void {
    if (this.core === undefined) return;
    const armed = this.core.reportConnectionLost(peer);
    this.log(`connection to ${peer} lost${armed ? ': campaigning at its turn' : ''}`);
    this.afterStep();
  }

  /** Delivers a message from the network (dropped when the node is down). */
  receive(m: Message): boolean {
    if (this.core === undefined) return false;
    this.core.step(m);
    this.afterStep();
    return true;
  }

  private afterStep(): void {
    this.observe();
    this.pump();
  }

  /** Reads the core's status; logs role changes and feeds election safety. */
  private observe(): void {
    if (this.core === undefined) return;
    const s = this.core.status();
    if (s.role !== this.lastRole || s.term !== this.lastTerm || s.leader !== this.lastLeader) {
      this.log(`role ${s.role} t${s.term} leader ${s.leader || '-'}`);
      if (s.role === 'candidate' && (this.lastRole !== 'candidate' || s.term !== this.lastTerm)) this.stats.elections++;
      this.lastRole = s.role;
      this.lastTerm = s.term;
      this.lastLeader = s.leader;
    }
    if (this.host.invariants.observeRole(this.id, s.role, s.term)) this.host.onNewLeader(this, s.term);
  }

  status(): Status | undefined {
    return this.core?.status();
  }

  /** Takes Readies while none is in flight (one at a time, as the contract says). */
  private pump(): void {
    while (this.core !== undefined && !this.readyInFlight && this.core.hasReady()) {
      const core = this.core;
      let rd = core.ready();
      const taken = rd;
      this.stats.readies++;
      this.log(describeReady(rd));
      const needsWrite = rd.snapshot !== undefined || rd.entries.length > 0 || rd.hardState !== undefined;
      if (needsWrite) {
        const view = this.disk.latest;
        if (rd.entries.length > 0) {
          const first = rd.entries[0] as Entry;
          // The predecessor of the first entry, after this Ready's snapshot (if any) is in place.
          const prevIndex = first.index - 1;
          let prevTerm: number | undefined = view.termAt(prevIndex);
          if (rd.snapshot !== undefined && prevIndex === rd.snapshot.meta.index) prevTerm = rd.snapshot.meta.term;
          else if (rd.snapshot !== undefined && prevIndex > rd.snapshot.meta.index && view.termAt(rd.snapshot.meta.index) !== rd.snapshot.meta.term) {
            prevTerm = undefined;
          }
          this.host.invariants.observeAppend(this.id, rd.entries, prevTerm);
        }
        this.checkHardState(rd);
        const seq = this.disk.write({ snapshot: rd.snapshot, entries: rd.entries, hardState: rd.hardState });
        this.checkLeaderCompleteness();
        if (rd.mustSync) {
          if (this.options.driverBugs?.sendBeforeSync === true) {
            for (const m of rd.messages) this.host.send(m);
            rd = { ...rd, messages: [] };
          }
          this.readyInFlight = true;
          this.host.onSyncedWriteIssued(this);
          const inc = this.incarnation;
          const delay = this.random.range(this.options.fsyncMinMs, this.options.fsyncMaxMs);
          this.host.scheduler.after(delay, () => {
            if (inc !== this.incarnation || this.core === undefined) return;
            this.disk.sync(seq);
            this.log(`fsync ${seq}`);
            this.readyInFlight = false;
            this.finishReady(rd, taken);
            this.afterStep();
          });
          return;
        }
      } else {
        this.checkLeaderCompleteness();
      }
      this.finishReady(rd, taken);
      this.observe();
    }
  }

  /**
   * What the node already wrote (synced or not; after a crash, what survived) against what this
   * Ready writes: the term never goes back, a vote once cast in a term never changes (§5.2:
   * one vote per term), the commit index never goes back, and no committed entry is rewritten.
   */
  private checkHardState(rd: Ready): void {
    const before = this.disk.latest.hardState;
    const hs = rd.hardState;
    if (hs !== undefined) {
      if (hs.term < before.term) throw new SimViolation('ready-contract', `${this.id}: hard state term went back from ${before.term} to ${hs.term}`);
      if (hs.term === before.term && before.vote !== '' && hs.vote !== before.vote) {
        throw new SimViolation('election-safety', `${this.id}: voted for ${before.vote} and then ${hs.vote || 'nobody'} in term ${hs.term}`);
      }
      if (hs.commit < before.commit) throw new SimViolation('ready-contract', `${this.id}: commit index went back from ${before.commit} to ${hs.commit}`);
    }
    const first = rd.entries[0];
    if (first !== undefined && first.index <= before.commit && this.disk.latest.termAt(first.index) !== first.term) {
      throw new SimViolation('state-machine-safety', `${this.id}: Ready rewrites entry ${first.index} at or below its commit index ${before.commit}`);
    }
  }

  /**
   * Step 2 of the contract, checked: a message may only promise what is durable. Its term is
   * persisted; a granted vote is persisted (or the node has durably moved to a later term, where
   * it can never vote in that term again); an append acknowledgement covers durable entries.
   * A message queued in an earlier term and sent after the node moved on is like a message
   * delayed by the network: it promised what was durable when it was made, and a later
   * truncation by a newer leader does not undo that (Raft §5.4.3), so it is checked only while
   * the node is still in the message's term. Pre-vote messages carry a prospective term and
   * promise nothing.
   */
  private checkDurableBeforeSend(m: Message): void {
    const d = this.disk.durable;
    const durableTerm = d.hardState.term as number;
    if (m.type === 'pre-vote' || m.type === 'pre-vote-resp') return;
    if (m.term > durableTerm) {
      throw new SimViolation('ready-contract', `${this.id}: sends ${m.type} of term ${m.term} while its durable term is ${durableTerm}`);
    }
    if (m.term < durableTerm) return;
    if (m.type === 'vote-resp' && !m.reject && d.hardState.vote !== m.to) {
      throw new SimViolation('ready-contract', `${this.id}: grants its term-${m.term} vote to ${m.to} but its durable vote is ${d.hardState.vote || 'nobody'}`);
    }
    if (m.type === 'app-resp' && !m.reject && m.index > d.lastIndex) {
      throw new SimViolation('ready-contract', `${this.id}: acknowledges entries up to ${m.index} in term ${m.term} but only ${d.lastIndex} are durable`);
    }
  }

  /** Leader completeness, at the first Ready taken as leader (the disk view is then the whole log). */
  private checkLeaderCompleteness(): void {
    if (this.core === undefined) return;
    const s = this.core.status();
    if (s.role === 'leader') this.host.invariants.checkLeaderCompleteness(this.id, s.term, this.disk.latest);
  }

  /** Steps 2-5 of the contract, once the Ready's writes are durable; `taken` is what ready() returned. */
  private finishReady(rd: Ready, taken: Ready): void {
    const core = this.core;
    if (core === undefined) return;
    for (const m of rd.messages) {
      this.checkDurableBeforeSend(m);
      this.host.send(m);
    }
    if (rd.snapshot !== undefined && rd.snapshot.meta.index > this.appliedIndex) this.restore(rd.snapshot);
    for (const e of rd.committedEntries) this.apply(e);
    const leaderApplied = rd.committedEntries.length > 0 && this.lastRole === 'leader';
    for (const r of rd.readStates) this.pendingReads.push({ requestId: r.requestId, index: r.index });
    this.serveReads();
    for (const f of rd.readFailures) this.host.onReadFailed(this, f.requestId, f.reason);
    core.advance(taken);
    this.maybeCompact();
    if (leaderApplied) this.host.onLeaderApplied(this, rd.committedEntries.some((e) => e.term < this.lastTerm));
  }

  private restore(snap: Snapshot): void {
    if (this.options.driverBugs?.ignoreSnapshot === true) {
      this.appliedIndex = snap.meta.index;
      this.appliedTerm = snap.meta.term;
      this.appliedConfig = snap.meta.config;
      this.snapshotIndex = Math.max(this.snapshotIndex, snap.meta.index);
      this.log(`restore snap ${snap.meta.index}/${snap.meta.term} (${snap.data.length} bytes, ignored: planted driver bug)`);
      return;
    }
    this.installSnapshot(snap, 'restore');
  }

  /**
   * Replaces the FSM with a snapshot's state (`Fsm.restore`): one received from the leader, or
   * the node's own durable one at restart. The restored FSM must serialize back to exactly the
   * snapshot's bytes, and those must equal the state every other node had at that index.
   */
  private installSnapshot(snap: Snapshot, how: 'restore' | 'recover'): void {
    this.fsm = this.newFsm();
    this.fsm.restore(snap.meta, snap.data);
    this.appliedIndex = snap.meta.index;
    this.appliedTerm = snap.meta.term;
    this.appliedConfig = snap.meta.config;
    this.snapshotIndex = Math.max(this.snapshotIndex, snap.meta.index);
    const digest = hashBytes(snap.data);
    const again = hashBytes(fsmSnapshotBytes(this.fsm));
    this.log(`${how} snap ${snap.meta.index}/${snap.meta.term} (${snap.data.length} bytes, state ${digest})`);
    if (again !== digest) {
      throw new SimViolation(
        'state-machine-safety',
        `${this.id}: the FSM restored from snapshot ${snap.meta.index}/${snap.meta.term} (${digest}) serializes to ${again}, not to the snapshot's bytes`,
      );
    }
    this.host.invariants.observeRestore(this.id, snap.meta);
    this.host.invariants.observeState(this.id, snap.meta.index, digest, how);
  }

  private apply(e: Entry): void {
    if (e.index <= this.appliedIndex) {
      // Already covered by a snapshot restored from this same Ready.
      return;
    }
    if (e.index !== this.appliedIndex + 1) {
      throw new SimViolation('ready-contract', `${this.id}: committed entry ${e.index} is not the next after applied ${this.appliedIndex}`);
    }
    const type = e.data[0];
    const { result } = this.fsm.apply(e);
    if (type === EntryType.Config) this.appliedConfig = decodeConfigEntry(e.data).config;
    this.appliedIndex = e.index;
    this.appliedTerm = e.term;
    this.host.invariants.observeApply(this.id, e, resultDigest(result), this.disk.latest.hardState.term);
    const requestId = commandRequestId(e.data);
    if (requestId !== undefined) {
      this.host.invariants.observeCommand(this.id, requestId, e.index);
      this.host.onApplied(this, { requestId, result });
      this.proposals.delete(requestId);
    }
    this.serveReads();
  }

  private serveReads(): void {
    if (this.pendingReads.length === 0) return;
    const waiting: PendingRead[] = [];
    for (const r of this.pendingReads) {
      if (r.index <= this.appliedIndex) this.host.onReadServed(this, r.requestId);
      else waiting.push(r);
    }
    this.pendingReads = waiting;
  }

  private maybeCompact(): void {
    if (this.appliedIndex - this.snapshotIndex >= this.options.snapshotEvery) this.compactNow();
  }

  /** Snapshots the state machine at the applied index and compacts the log behind it. */
  compactNow(): boolean {
    const core = this.core;
    if (core === undefined || this.appliedIndex <= this.snapshotIndex || this.appliedConfig === undefined) return false;
    // Not while a Ready is in flight: it may carry a snapshot the core has already installed
    // in memory (its log then starts after our applied index), and RaftLog.compact asserts.
    if (this.readyInFlight || core.status().snapshotIndex >= this.appliedIndex) return false;
    const index = this.appliedIndex as LogIndex;
    if (this.fsm.appliedIndex !== index) {
      throw new SimViolation('ready-contract', `${this.id}: the driver applied up to ${index} but the FSM up to ${this.fsm.appliedIndex}`);
    }
    const data = fsmSnapshotBytes(this.fsm);
    const snap: Snapshot = { meta: { index, term: this.appliedTerm as Term, config: this.appliedConfig }, data };
    const digest = hashBytes(data);
    this.host.invariants.observeState(this.id, index, digest, 'compact');
    this.disk.compact(snap);
    core.compact(index, data);
    this.snapshotIndex = index;
    this.stats.snapshotsTaken++;
    this.log(`compact ${index}/${this.appliedTerm} (${data.length} bytes, state ${digest})`);
    return true;
  }

  /** Whether `opId` was proposed on this incarnation and has not been applied yet. */
  isProposalPending(opId: string): boolean {
    return this.proposals.has(opId);
  }

  /** Proposes a command; throws the core's CairnError (NOT_LEADER, PROPOSAL_DROPPED). */
  propose(opId: string, data: Uint8Array): { index: LogIndex; term: Term } {
    const core = this.requireUp('propose');
    const at = core.propose(data);
    this.proposals.add(opId);
    this.afterStep();
    return at;
  }

  readIndex(requestId: string): void {
    const core = this.requireUp('readIndex');
    core.readIndex(requestId);
    this.afterStep();
  }

  proposeConfigChange(change: ConfigChange): { index: LogIndex; term: Term } {
    const core = this.requireUp('proposeConfigChange');
    const at = core.proposeConfigChange(change);
    this.afterStep();
    return at;
  }

  campaign(): void {
    const core = this.requireUp('campaign');
    core.campaign();
    this.afterStep();
  }

  transferLeadership(target: NodeId): void {
    const core = this.requireUp('transferLeadership');
    core.transferLeadership(target);
    this.afterStep();
  }

  /** Reads a register from the local store (the caller has established the read is linearizable). */
  read(key: string): RegisterState {
    return readRegister(this.fsm.store, key);
  }

  /** The applied index and a digest of the whole FSM state there (for the end-of-run comparison). */
  stateDigest(): { readonly index: number; readonly digest: string } {
    return { index: this.appliedIndex, digest: hashBytes(fsmSnapshotBytes(this.fsm)) };
  }

  private requireUp(action: string): RawNode {
    if (this.core === undefined) throw new CairnError('UNAVAILABLE', `cannot ${action} on ${this.id}: the node is down`);
    return this.core;
  }
}
