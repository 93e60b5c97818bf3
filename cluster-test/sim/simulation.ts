/**
 * The deterministic simulation of a whole Cairn cluster: 3 to 5 nodes, each the shipped
 * `Replica` (src/replica, the driver the agent runs) over the real Raft core, FSM, store and
 * event publisher, with simulated timers, transport and disk behind its ports (node.ts),
 * talking over the simulated network, driven by simulated clients and a seeded nemesis, on
 * one discrete-event clock. One seed (logged first) reproduces the whole run exactly: all
 * randomness comes from one SeededRandom, forked per component, nothing reads real time, and
 * the replica's promises are settled in a fixed order (every step's microtasks run to the end
 * before the next step, `drain`).
 *
 * A run has a fault phase (`durationMs` of simulated time) and a quiet phase: every fault is
 * undone, crashed nodes restart, and within a budget of 50 election timeouts a leader must
 * commit a write (liveness) and linearizable reads of every key through the leader must
 * succeed; then every up member must catch up with the leader's commit index. Safety
 * invariants are checked on every step; at the end every node's whole FSM state must be
 * byte-identical to every other node's at the same applied index, and the client history must
 * be linearizable.
 */
import { checkHistory, formatAnomaly } from '../checker/linearizability.js';
import { Clients, type ClientOptions } from './clients.js';
import { describeMessage } from './describe.js';
import { SimNode, type NodeHost, type NodeOptions } from './node.js';
import { EventLog } from './event-log.js';
import { DEFAULT_FAULTS, Nemesis, resolveProfile, type FaultProfile } from './faults.js';
import { Invariants } from './invariants.js';
import { SimNetwork, type NetworkOptions } from './network.js';
import {
  decodeConfigEntry,
  EntryType,
  nodeId,
  SeededRandom,
  voters,
  type Config,
  type Entry,
  type Message,
  type NodeId,
  type PlantedBugs,
  type ReplicaPlantedBugs,
  type FsmPlantedBugs,
} from './raft.js';
import { Scheduler } from './scheduler.js';
import { SimViolation, type ViolationKind } from './violation.js';

export interface SimulationOptions {
  readonly seed: number;
  /** Simulated length of the fault phase, ms. Default 6000. */
  readonly durationMs?: number;
  /** Optional cap on the number of steps of the fault phase (it ends at whichever comes first). */
  readonly steps?: number;
  /** Initial cluster size, 3 or 5. Default: drawn from the seed. */
  readonly nodes?: number;
  /** Snapshot chunk size in bytes. Default: drawn from the seed. */
  readonly snapshotChunkBytes?: number;
  /**
   * A data quota the clients stamp into every write (docs/security.md "Quotas"), so the
   * state machine's NO_SPACE refusals and alarm run under faults. Default: none. Not drawn from
   * the seed (a seed's run without it is unchanged).
   */
  readonly quotaBytes?: number;
  readonly plantedBugs?: PlantedBugs;
  /** Test-only: planted bugs in the shipped driver (`Replica`), not the core. */
  readonly driverBugs?: ReplicaPlantedBugs;
  /** Test-only: planted bugs in the state machine (`Fsm`). */
  readonly fsmBugs?: FsmPlantedBugs;
  /** Fault profile name (see FAULT_PROFILES), or 'mixed' (one drawn from the seed). Default 'mixed'. */
  readonly faults?: string;
  /** Keep the full event log text in the result. */
  readonly log?: boolean;
  /** Called with every event-log line as it is written (for replay --verbose). */
  readonly onLine?: (line: string) => void;
  /**
   * Time allowed after faults stop for a leader to commit a write and serve the final reads,
   * ms. Default 50 election timeouts. Tests set it absurdly low to prove the check fires.
   */
  readonly livenessBudgetMs?: number;
}

export interface SimulationStats {
  steps: number;
  messages: number;
  dropped: number;
  duplicated: number;
  /** The most messages in flight at once. */
  maxInFlight: number;
  crashes: number;
  partitions: number;
  faults: number;
  elections: number;
  leaders: number;
  commits: number;
  ops: number;
  okOps: number;
  infoOps: number;
  failOps: number;
  /** CAS outcomes: took effect; refused at the read (value mismatch); refused by the store's version CAS. */
  casOk: number;
  casMismatch: number;
  casConflict: number;
  /** Writes refused with NO_SPACE (only with --quota-bytes). */
  noSpace: number;
  snapshotsSent: number;
  snapshotChunks: number;
  snapshotsTaken: number;
  /** Two-register transactions whose branch applied, and whose comparison did not hold. */
  txnApplied: number;
  txnNotApplied: number;
  /** Snapshot chunks leaders read back from their disk to send (the core released the bytes). */
  snapshotChunksRead: number;
  /** Events the nodes' watchers received, and how often they (re)subscribed. */
  watchEvents: number;
  watchRestarts: number;
  membershipChanges: number;
  transfers: number;
  spikes: number;
  /** Disk stalls (`disk-stall`: no fsync of one node completes for a while). */
  diskStalls: number;
  simTimeMs: number;
  /** 'unknown' when the linearizability search ran out of budget on some key. */
  linearizable: boolean | 'unknown' | 'not-checked';
}

export interface Violation {
  readonly kind: ViolationKind;
  readonly message: string;
  readonly step: number;
  readonly time: number;
  /** The last event-log lines before the violation. */
  readonly recent: readonly string[];
}

export interface SimulationResult {
  readonly seed: number;
  readonly ok: boolean;
  readonly violation?: Violation;
  readonly stats: SimulationStats;
  /** sha256 of the event log: equal for two runs of one seed with the same options. */
  readonly eventLogDigest: string;
  readonly eventLog?: string;
  /** The parameters drawn from the seed, as logged on the first line. */
  readonly params: string;
  /** The fault profile the run used (resolved, when 'mixed'). */
  readonly profile: string;
}

/** Parameters of one run, drawn from the seed (and overridden by options). */
interface SimParams {
  readonly nodes: number;
  readonly tickMs: number;
  readonly electionTimeoutTicks: number;
  readonly heartbeatTimeoutTicks: number;
  readonly network: NetworkOptions;
  readonly fsyncMinMs: number;
  readonly fsyncMaxMs: number;
  readonly snapshotEvery: number;
  readonly snapshotRetain: number;
  readonly snapshotChunkBytes: number;
  readonly dedupeWindow: number;
  readonly maxAppendBytes: number;
  readonly maxInflightMsgs: number;
  readonly crashKeepProbability: number;
  readonly clients: ClientOptions;
  readonly maxNodes: number;
}

/** The override when set, else the drawn value (drawn either way, to keep the stream aligned). */
function pickOverride(override: number | undefined, drawn: number): number {
  return override ?? drawn;
}

function drawParams(r: SeededRandom, options: SimulationOptions, profile: FaultProfile): SimParams {
  // Every parameter is drawn, even when overridden, so the draws stay aligned across options.
  const o = profile.overrides ?? {};
  const drawnNodes = r.pick([3, 5]);
  const nodes = options.nodes ?? o.nodes ?? drawnNodes;
  const tickMs = 10;
  const keys = pickOverride(o.keys, r.range(3, 8));
  const heartbeatTimeoutTicks = r.range(1, 3);
  const network: NetworkOptions = {
    minDelayMs: r.range(1, 3),
    maxDelayMs: pickOverride(o.maxDelayMs, r.range(5, 25)),
    lossProbability: r.pick([0, 0, 0.01, 0.03]),
    duplicateProbability: r.pick([0, 0, 0.01, 0.03]),
  };
  const fsyncMaxMs = pickOverride(o.fsyncMaxMs, r.range(2, 8));
  const snapshotEvery = r.range(10, 60);
  // A register write is a ResourceWrite envelope of about 200 bytes, and an FSM snapshot holds
  // every resource (about 250 bytes each) and the de-duplication window's results (a resource
  // each): 2 to 20 KB. Chunks of 1 to 8 KB make most transfers take a few chunks, as in Stage 1.
  const snapshotChunkBytes = pickOverride(options.snapshotChunkBytes, r.pick([1024, 2048, 4096, 8192]));
  const maxAppendBytes = r.pick([1, 256, 1024, 16384]);
  const maxInflightMsgs = r.pick([1, 4, 64]);
  const clients = r.range(4, 8);
  const thinkMaxMs = r.range(10, 60);
  const timeoutMs = r.range(800, 1500);
  // The FSM's de-duplication window is part of its snapshots; small windows keep them a few KB
  // (the default 10,000 would make them hundreds of KB) and make request ids fall out of it.
  const dedupeWindow = r.pick([4, 16, 64]);
  // Entries the replica keeps behind its snapshots: mostly none, so lagging followers get
  // snapshots; sometimes a few, so they catch up from the log.
  const snapshotRetain = r.pick([0, 0, 5, 50]);
  return {
    nodes,
    tickMs,
    electionTimeoutTicks: 10,
    heartbeatTimeoutTicks,
    network,
    fsyncMinMs: 1,
    fsyncMaxMs,
    snapshotEvery,
    snapshotRetain,
    snapshotChunkBytes,
    dedupeWindow,
    maxAppendBytes: o.maxAppendBytes ?? maxAppendBytes,
    maxInflightMsgs: o.maxInflightMsgs ?? maxInflightMsgs,
    crashKeepProbability: 0.5,
    clients: {
      clients: o.clients ?? clients,
      keys: Array.from({ length: keys }, (_, i) => `k${i}`),
      thinkMinMs: 0,
      thinkMaxMs: o.thinkMaxMs ?? thinkMaxMs,
      timeoutMs,
      readRatio: o.readRatio ?? 0.4,
      casRatio: 0.3,
      txnRatio: o.txnRatio ?? 0.3,
      followLeaderProbability: 0.8,
      ...(options.quotaBytes !== undefined ? { quotaBytes: options.quotaBytes } : {}),
    },
    maxNodes: 7,
  };
}

function describeParams(seed: number, p: SimParams, profile: FaultProfile, options: SimulationOptions): string {
  const bugs = Object.entries({ ...options.plantedBugs, ...options.driverBugs, ...options.fsmBugs }).filter(([, v]) => v === true).map(([k]) => k);
  return (
    `seed ${seed} nodes ${p.nodes} faults ${profile.name}${(options.faults ?? DEFAULT_FAULTS) === DEFAULT_FAULTS ? ' (mixed)' : ''} duration ${options.durationMs ?? DEFAULT_DURATION_MS}ms tick ${p.tickMs}ms ` +
    `election ${p.electionTimeoutTicks} heartbeat ${p.heartbeatTimeoutTicks} delay ${p.network.minDelayMs}..${p.network.maxDelayMs}ms ` +
    `loss ${p.network.lossProbability} dup ${p.network.duplicateProbability} fsync ${p.fsyncMinMs}..${p.fsyncMaxMs}ms ` +
    `snapshotEvery ${p.snapshotEvery} retain ${p.snapshotRetain} chunk ${p.snapshotChunkBytes}B dedupe ${p.dedupeWindow} appendBytes ${p.maxAppendBytes} inflight ${p.maxInflightMsgs} ` +
    `clients ${p.clients.clients} keys ${p.clients.keys.length} timeout ${p.clients.timeoutMs}ms` +
    (bugs.length > 0 ? ` plantedBugs ${bugs.join(',')}` : '')
  );
}

export const DEFAULT_DURATION_MS = 6000;
/** Liveness budget after faults stop, in election timeouts. */
const LIVENESS_ELECTION_TIMEOUTS = 50;
const PROBE_EVERY_MS = 20;
/**
 * Messages in flight at once beyond which a run is a message storm. A healthy run peaks at a
 * few hundred (up to 7 nodes, pipelines of up to 64 appends, duplication spikes).
 */
const MAX_IN_FLIGHT = 5000;
/**
 * After the final reads, every up member of the leader's configuration must apply the leader's
 * commit index within this many election timeouts (then the final states are compared).
 */
const SETTLE_ELECTION_TIMEOUTS = 20;

/**
 * Runs every microtask the last step queued, and the ones they queue, to the end: a
 * `process.nextTick` callback runs only once V8's microtask queue is empty (Node drains it
 * before the tick queue), and nothing in the simulation queues ticks of its own. So each
 * step's promise continuations (the replica's Ready loop, the ports' completions, the clients'
 * answers) finish before the next step, in the same order on every run.
 */
function drain(): Promise<void> {
  return new Promise((resolve) => process.nextTick(resolve));
}

class Simulation implements NodeHost {
  readonly scheduler = new Scheduler();
  readonly log: EventLog;
  readonly invariants = new Invariants();
  readonly network: SimNetwork<Message>;
  private readonly replicas = new Map<string, SimNode>();
  private readonly order: SimNode[] = [];
  private readonly clients: Clients;
  private readonly nemesis: Nemesis;
  private readonly params: SimParams;
  private readonly paramsLine: string;
  private readonly profileName: string;
  private readonly nodeRandom: SeededRandom;
  private readonly replicaOptions: Omit<NodeOptions, 'id'>;
  /** The first violation found inside a promise continuation or a port (the loop stops at it). */
  private found: unknown;
  /** Every voter set appended to any log (the configurations a commit may have been counted in). */
  private readonly voterSets = new Map<string, readonly NodeId[]>();
  /** Register changes per index, as first applied. */
  private readonly changes = new Map<number, number>();
  private snapshotsSent = 0;
  private snapshotChunks = 0;
  private steps = 0;
  private quiet = false;
  private finished = false;
  private livenessDeadline = Infinity;
  private quietStart = 0;
  private probeOutstanding = false;
  private probeDone = false;
  private readonly finalReadsDone = new Set<string>();
  /** When the final reads were all done and the members started catching up; -1 before. */
  private settleStart = -1;

  constructor(private readonly options: SimulationOptions) {
    const root = new SeededRandom(options.seed);
    const paramRandom = root.fork();
    const netRandom = root.fork();
    const clientRandom = root.fork();
    const nemesisRandom = root.fork();
    this.nodeRandom = root.fork();
    const profile = resolveProfile(options.faults ?? DEFAULT_FAULTS, root.fork());
    this.profileName = profile.name;
    this.params = drawParams(paramRandom, options, profile);
    this.log = new EventLog(() => this.scheduler.now(), {
      keep: options.log === true,
      ...(options.onLine !== undefined ? { onLine: options.onLine } : {}),
    });
    this.paramsLine = describeParams(options.seed, this.params, profile, options);
    this.log.add('sim', this.paramsLine);
    this.network = new SimNetwork<Message>(
      this.params.network,
      netRandom,
      this.scheduler,
      (m) => this.deliver(m),
      (m, reason) => this.log.add('net', `drop ${m.from}->${m.to} ${m.type} (${reason})`),
    );
    const p = this.params;
    this.replicaOptions = {
      raft: {
        electionTimeoutTicks: p.electionTimeoutTicks,
        heartbeatTimeoutTicks: p.heartbeatTimeoutTicks,
        preVote: true,
        checkQuorum: true,
        maxAppendBytes: p.maxAppendBytes,
        maxInflightMsgs: p.maxInflightMsgs,
        snapshotChunkBytes: p.snapshotChunkBytes,
        ...(options.plantedBugs !== undefined ? { plantedBugs: options.plantedBugs } : {}),
      },
      tickMs: p.tickMs,
      fsyncMinMs: p.fsyncMinMs,
      fsyncMaxMs: p.fsyncMaxMs,
      snapshotEvery: p.snapshotEvery,
      snapshotRetain: p.snapshotRetain,
      dedupeWindow: p.dedupeWindow,
      crashKeepProbability: p.crashKeepProbability,
      requestTimeoutMs: p.clients.timeoutMs,
      ...(profile.overrides?.writeStallMs !== undefined ? { writeStallMs: profile.overrides.writeStallMs } : {}),
      ...(options.driverBugs !== undefined ? { plantedBugs: options.driverBugs } : {}),
      ...(options.fsmBugs !== undefined ? { fsmBugs: options.fsmBugs } : {}),
    };
    this.clients = new Clients(p.clients, clientRandom, this);
    this.nemesis = new Nemesis(profile, nemesisRandom, {
      scheduler: this.scheduler,
      log: this.log,
      network: this.network,
      nodes: () => this.order,
      leader: () => this.leader(),
      crash: (n) => this.crash(n),
      restart: (n) => n.start(),
      createNode: () => this.createNode(),
      stallDisk: (n, untilMs) => n.stallDisk(untilMs),
      violation: (e) => this.violation(e),
    });
  }

  nodes(): readonly SimNode[] {
    return this.order;
  }

  /**
   * A crash is a process dying: its kernel resets its connections, so every peer that is up
   * and still reachable from it hears of the break one minimal network delay later (and may
   * campaign early, RawNode.reportConnectionLost). A peer that restarted meanwhile had no
   * connection to lose. (A dead host would break no connection: partitions cover silence.)
   */
  private crash(n: SimNode): void {
    n.crash();
    for (const peer of this.order) {
      if (peer === n || !peer.isUp || !this.network.links.canSend(n.id, peer.id)) continue;
      const incarnation = peer.incarnationNumber;
      this.scheduler.after(this.params.network.minDelayMs, () => {
        if (peer.incarnationNumber === incarnation) peer.connectionLost(n.id);
      });
    }
  }

  /** The up node that believes it is leader with the highest term. */
  leader(): SimNode | undefined {
    let best: SimNode | undefined;
    for (const r of this.order) {
      if (r.isUp && r.role === 'leader' && (best === undefined || r.term > best.term)) best = r;
    }
    return best;
  }

  private addReplica(id: NodeId, bootstrap: Config | undefined): SimNode {
    const r = new SimNode({ ...this.replicaOptions, id }, bootstrap, this.nodeRandom.fork(), this);
    this.replicas.set(id, r);
    this.order.push(r);
    return r;
  }

  private createNode(): SimNode | undefined {
    if (this.order.length >= this.params.maxNodes) return undefined;
    const r = this.addReplica(nodeId(`n${this.order.length + 1}`), undefined);
    r.start();
    return r;
  }

  // ---- NodeHost -------------------------------------------------------------------------------

  violation(e: unknown): void {
    this.found ??= e;
  }

  /**
   * Committed: the bootstrap entry, or durable on a majority of the voters of some configuration that was ever in a log.
   * (Which configuration counted a commit depends on the leader's log at the time; accepting any
   * known one can miss a violation but never reports a false one: single-server changes keep
   * every two consecutive configurations' majorities overlapping.)
   */
  isCommitted(index: number, term: number): boolean {
    // The bootstrap entry is committed by construction: every founding member writes the same
    // one before it starts (RawNode.bootstrapState).
    if (index === 1 && term === 1) return true;
    for (const vs of this.voterSets.values()) {
      let n = 0;
      for (const id of vs) if (this.replicas.get(id)?.disk.holdsDurably(index, term) === true) n++;
      if (n * 2 > vs.length) return true;
    }
    return false;
  }

  onAppended(entries: readonly Entry[]): void {
    for (const e of entries) {
      if (e.data[0] !== EntryType.Config) continue;
      const vs = [...voters(decodeConfigEntry(e.data).config)].sort();
      this.voterSets.set(vs.join(','), vs);
    }
  }

  onConfigProposed(config: Config): void {
    const vs = [...voters(config)].sort();
    this.voterSets.set(vs.join(','), vs);
  }

  changesAt(index: number): number | undefined {
    return this.changes.get(index);
  }

  recordChanges(node: SimNode, index: number, changes: number): void {
    const known = this.changes.get(index);
    if (known === undefined) this.changes.set(index, changes);
    else if (known !== changes) throw new SimViolation('state-machine-safety', `${node.id} made ${changes} changes applying ${index}, another node ${known}`);
  }

  /** No client is answered before its entry is committed (durable on a quorum). */
  checkAnswered(opId: string, node: SimNode): void {
    const at = this.invariants.commandAt(opId);
    if (at === undefined) {
      throw new SimViolation('answer-before-commit', `${node.id} answered ${opId} as applied, but no node has applied its command`);
    }
    if (!this.isCommitted(at.index, at.term)) {
      throw new SimViolation('answer-before-commit', `${node.id} answered ${opId}, whose entry ${at.index}/${at.term} is not durable on a quorum`);
    }
  }

  send(m: Message): void {
    if (m.type === 'snap') {
      this.snapshotChunks++;
      if (m.offset === 0) this.snapshotsSent++;
    }
    this.network.send(m);
    if (this.network.inFlight > MAX_IN_FLIGHT) {
      throw new SimViolation(
        'message-storm',
        `${this.network.inFlight} messages in flight (a healthy run stays far below ${MAX_IN_FLIGHT}); the last sent was ${m.from}->${m.to} ${describeMessage(m)}`,
      );
    }
  }

  private deliver(m: Message): void {
    const r = this.replicas.get(m.to);
    if (r === undefined || !r.isUp) {
      this.log.add('net', `drop ${m.from}->${m.to} ${m.type} (down)`);
      return;
    }
    this.log.add(r.id, `deliver ${m.from}->${m.to} ${describeMessage(m)}`);
    r.receive(m);
  }

  onLeaderApplied(replica: SimNode, oldTerm: boolean): void {
    this.nemesis.onLeaderApplied(replica, oldTerm);
  }

  onSyncedWriteIssued(replica: SimNode): void {
    this.nemesis.onSyncedWriteIssued(replica);
  }

  onNewLeader(replica: SimNode, term: number): void {
    this.log.add(replica.id, `leader of term ${term}`);
    this.nemesis.onNewLeader(replica);
  }

  // ---- The run --------------------------------------------------------------------------------

  async run(): Promise<SimulationResult> {
    const p = this.params;
    const members = Array.from({ length: p.nodes }, (_, i) => ({
      id: nodeId(`n${i + 1}`),
      suffrage: 'voter' as const,
      address: `sim://n${i + 1}`,
    }));
    const config = { members };
    for (const m of members) this.addReplica(m.id, config);
    let violation: Violation | undefined;
    const fail = (e: unknown): void => {
      const kind: ViolationKind = e instanceof SimViolation ? e.kind : 'exception';
      const message = e instanceof SimViolation ? e.message : e instanceof Error ? `${e.name}: ${e.message}\n${(e.stack ?? '').split('\n').slice(1, 8).join('\n')}` : String(e);
      this.log.add('sim', `VIOLATION ${kind}: ${message.split('\n')[0] ?? ''}`);
      violation = { kind, message, step: this.steps, time: this.scheduler.now(), recent: this.log.recent() };
    };
    let linearizable: SimulationStats['linearizable'] = 'not-checked';
    try {
      for (const r of this.order) r.start();
      this.clients.start();
      this.nemesis.start();
      const duration = this.options.durationMs ?? DEFAULT_DURATION_MS;
      this.scheduler.at(duration, () => this.beginQuiet());
      const stepCap = this.options.steps;
      await drain();
      while (!this.finished && this.found === undefined && this.scheduler.step()) {
        this.steps++;
        await drain();
        for (const r of this.order) if (r.touched) r.observe();
        if (!this.quiet && stepCap !== undefined && this.steps >= stepCap) this.beginQuiet();
      }
      if (this.found !== undefined) throw this.found;
      if (!this.finished) throw new SimViolation('liveness', 'the simulation ran out of events before the quiet phase finished');
      this.compareFinalStates();
      const result = checkHistory(this.clients.history.events, { maxStepsPerKey: 2_000_000 });
      linearizable = result.valid;
      this.log.add('sim', `linearizability: ${String(result.valid)} (${result.ops} ops, ${result.keys} keys, ${result.steps} search steps)`);
      if (result.valid === false) {
        throw new SimViolation('linearizability', result.anomalies.map((a) => formatAnomaly(a)).join('\n'));
      }
    } catch (e) {
      fail(e);
    }
    const stats = this.collectStats(linearizable);
    this.log.add('sim', `end ok=${violation === undefined} steps ${stats.steps} time ${stats.simTimeMs}ms`);
    const text = this.log.text();
    return {
      seed: this.options.seed,
      ok: violation === undefined,
      ...(violation !== undefined ? { violation } : {}),
      stats,
      eventLogDigest: this.log.digest(),
      ...(text !== undefined ? { eventLog: text } : {}),
      params: this.paramsLine,
      profile: this.profileName,
    };
  }

  private collectStats(linearizable: SimulationStats['linearizable']): SimulationStats {
    let crashes = 0;
    let snapshotsTaken = 0;
    let snapshotChunksRead = 0;
    let elections = 0;
    let watchEvents = 0;
    let watchRestarts = 0;
    for (const r of this.order) {
      crashes += r.stats.crashes;
      elections += r.stats.elections;
      snapshotsTaken += r.stats.snapshotsSaved;
      snapshotChunksRead += r.stats.snapshotChunksRead;
      watchEvents += r.stats.watchEvents;
      watchRestarts += r.stats.watchRestarts;
    }
    const ns = this.network.stats;
    const cs = this.clients.stats;
    const fs = this.nemesis.stats;
    return {
      steps: this.steps,
      messages: ns.sent,
      dropped: ns.dropped,
      duplicated: ns.duplicated,
      maxInFlight: ns.maxInFlight,
      crashes,
      partitions: fs.partitions,
      faults: fs.actions,
      elections,
      leaders: this.invariants.leaderCount,
      commits: this.invariants.commitIndex,
      ops: cs.ops,
      okOps: cs.ok,
      infoOps: cs.info,
      failOps: cs.fail,
      casOk: cs.casOk,
      casMismatch: cs.casMismatch,
      casConflict: cs.casConflict,
      txnApplied: cs.txnApplied,
      txnNotApplied: cs.txnNotApplied,
      noSpace: cs.noSpace,
      snapshotsSent: this.snapshotsSent,
      snapshotChunks: this.snapshotChunks,
      snapshotsTaken,
      snapshotChunksRead,
      watchEvents,
      watchRestarts,
      membershipChanges: fs.membershipChanges,
      transfers: fs.transfers,
      spikes: fs.spikes,
      diskStalls: fs.diskStalls,
      simTimeMs: this.scheduler.now(),
      linearizable,
    };
  }

  /**
   * Members of the leader's configuration that are up but have not applied its commit index
   * (with what they applied), or ['no leader'].
   */
  private laggingMembers(): string[] {
    const leader = this.leader();
    const s = leader?.status();
    if (leader === undefined || s === undefined) return ['no leader'];
    const lagging: string[] = [];
    if (leader.applied < s.commit) lagging.push(`${leader.id}@${leader.applied}<${s.commit}`);
    for (const m of s.config.members) {
      const r = this.replicas.get(m.id);
      if (r !== undefined && r !== leader && r.isUp && r.applied < s.commit) lagging.push(`${r.id}@${r.applied}<${s.commit}`);
    }
    return lagging;
  }

  /**
   * State machine safety over the whole state: every node that is up serializes its FSM
   * (store and de-duplication window); nodes at the same applied index must be byte-identical,
   * and equal to any snapshot taken or restored at that index during the run.
   */
  private compareFinalStates(): void {
    const seen = new Map<number, { ids: string[]; digest: string }>();
    for (const r of this.order) {
      const state = r.isUp ? r.stateDigest() : undefined;
      if (state === undefined) continue;
      // Every write carried the same quota from the start: no replica may hold more data.
      const data = r.dataBytes();
      if (this.options.quotaBytes !== undefined && data !== undefined && data > this.options.quotaBytes) {
        throw new SimViolation('state-machine-safety', `${r.id} holds ${data} bytes of data, over the quota of ${this.options.quotaBytes} every write carried`);
      }
      const { index, digest } = state;
      this.invariants.observeState(r.id, index, digest, 'final');
      const group = seen.get(index) ?? { ids: [], digest };
      group.ids.push(r.id);
      seen.set(index, group);
    }
    const groups = [...seen].sort((a, b) => b[0] - a[0]).map(([index, g]) => `${g.ids.join(',')}@${index} state ${g.digest}`);
    this.log.add('sim', `final FSM states: ${groups.join('; ')}`);
  }

  private livenessBudgetMs(): number {
    return this.options.livenessBudgetMs ?? LIVENESS_ELECTION_TIMEOUTS * this.params.electionTimeoutTicks * this.params.tickMs;
  }

  /** Faults stop; clients stop issuing; the liveness probe starts. */
  private beginQuiet(): void {
    if (this.quiet) return;
    this.quiet = true;
    this.nemesis.stop();
    this.clients.stop();
    const budget = this.livenessBudgetMs();
    this.quietStart = this.scheduler.now();
    this.livenessDeadline = this.quietStart + budget;
    this.log.add('sim', `quiet phase: a leader must commit a write and serve reads of every key within ${budget}ms`);
    this.scheduler.after(0, () => this.probe());
  }

  /**
   * The quiet phase's control loop: first a write through the leader (liveness), then, once
   * every client operation has completed, a linearizable read of every key through the leader
   * (no acknowledged write lost: the checker sees these reads last).
   */
  private probe(): void {
    if (this.finished) return;
    const keys = this.params.clients.keys;
    const readsDone = this.probeDone && this.finalReadsDone.size === keys.length;
    if (readsDone && this.clients.outstanding === 0) {
      if (this.settleStart < 0) {
        this.settleStart = this.scheduler.now();
        this.log.add('sim', 'final reads done; waiting for every member to apply the leader\'s commit index');
      }
      const lagging = this.laggingMembers();
      const waited = this.scheduler.now() - this.settleStart;
      if (lagging.length === 0) {
        this.finished = true;
        this.log.add('sim', `every member applied the commit index ${waited}ms after the final reads`);
        return;
      }
      const budget = SETTLE_ELECTION_TIMEOUTS * this.params.electionTimeoutTicks * this.params.tickMs;
      if (waited > budget) {
        throw new SimViolation('liveness', `members still behind the leader's commit index ${budget}ms after the final reads: ${lagging.join(' ')}`);
      }
      this.scheduler.after(PROBE_EVERY_MS, () => this.probe());
      return;
    }
    if (!readsDone && this.scheduler.now() > this.livenessDeadline) {
      const states = this.order.map((r) => `${r.id}:${r.isUp ? `${r.role}/t${r.term}/applied ${r.applied}` : 'down'}`).join(' ');
      throw new SimViolation(
        'liveness',
        this.probeDone
          ? `final reads did not all succeed within ${this.livenessBudgetMs()}ms after faults stopped (${this.finalReadsDone.size}/${keys.length} keys; ${states})`
          : `no write committed within ${this.livenessBudgetMs()}ms after faults stopped (${states})`,
      );
    }
    const probeWorker = this.params.clients.clients;
    const leader = this.leader();
    if (!this.probeDone) {
      if (!this.probeOutstanding && leader !== undefined) {
        this.probeOutstanding = true;
        this.clients.write(probeWorker, leader, keys[0] as string, (outcome, _value, why) => {
          this.probeOutstanding = false;
          // With a quota, a write refused with NO_SPACE was committed and applied (the verdict is the state machine's): as live as one that took effect.
          if (outcome === 'ok' || why.startsWith('NO_SPACE')) {
            this.probeDone = true;
            this.log.add('sim', `liveness: write committed ${this.scheduler.now() - this.quietStart}ms after faults stopped${outcome === 'ok' ? '' : ' (refused with NO_SPACE at apply)'}`);
          }
        });
      }
    } else if (!readsDone && leader !== undefined && this.clients.outstanding === 0) {
      // Once every client operation has completed (so these reads come last in the history),
      // read each key not yet read through the leader; a failed read is retried next round.
      keys.forEach((key, i) => {
        if (this.finalReadsDone.has(key)) return;
        this.clients.read(probeWorker + 1 + i, leader, key, (outcome) => {
          if (outcome === 'ok') this.finalReadsDone.add(key);
        });
      });
    }
    this.scheduler.after(PROBE_EVERY_MS, () => this.probe());
  }
}

/** Runs one seed. Never throws for a violation: it is reported in the result. */
export function runSimulation(options: SimulationOptions): Promise<SimulationResult> {
  return new Simulation(options).run();
}

/** The command that replays a run with these options. */
export function replayCommand(options: SimulationOptions): string {
  const parts = ['node dist/cluster-test/sim/cli.js replay', `--seed ${options.seed}`];
  if (options.durationMs !== undefined && options.durationMs !== DEFAULT_DURATION_MS) parts.push(`--duration-ms ${options.durationMs}`);
  if (options.steps !== undefined) parts.push(`--steps ${options.steps}`);
  if (options.livenessBudgetMs !== undefined) parts.push(`--liveness-budget-ms ${options.livenessBudgetMs}`);
  if (options.nodes !== undefined) parts.push(`--nodes ${options.nodes}`);
  if (options.snapshotChunkBytes !== undefined) parts.push(`--snapshot-chunk-bytes ${options.snapshotChunkBytes}`);
  if (options.quotaBytes !== undefined) parts.push(`--quota-bytes ${options.quotaBytes}`);
  if (options.faults !== undefined && options.faults !== DEFAULT_FAULTS) parts.push(`--faults ${options.faults}`);
  for (const [bug, on] of Object.entries(options.plantedBugs ?? {})) if (on === true) parts.push(`--planted-bug ${bug}`);
  for (const [bug, on] of Object.entries(options.driverBugs ?? {})) if (on === true) parts.push(`--driver-bug ${bug}`);
  for (const [bug, on] of Object.entries(options.fsmBugs ?? {})) if (on === true) parts.push(`--fsm-bug ${bug}`);
  return parts.join(' ');
}

/** Sums the numeric statistics of many runs. */
export function totals(stats: readonly SimulationStats[]): Record<string, number> {
  const t: Record<string, number> = {};
  for (const s of stats) {
    for (const [k, v] of Object.entries(s)) if (typeof v === 'number') t[k] = (t[k] ?? 0) + v;
  }
  return t;
}
