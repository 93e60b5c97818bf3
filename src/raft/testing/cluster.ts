import { NO_NODE, SeededRandom, nodeId, type LogIndex, type NodeId, type Term } from '../../base/index.js';
import { decodeConfigEntry, makeConfig } from '../config.js';
import type { RaftOptions } from '../options.js';
import { RawNode } from '../raw-node.js';
import { EntryType, type Config, type Entry, type HardState, type Message, type PersistedState, type ReadFailure, type ReadState, type Ready, type Snapshot } from '../types.js';

/**
 * A deterministic in-memory cluster of real RawNodes for tests and transcripts: each node has
 * a "disk" (what its driver persisted), an applied list, and an outbox; messages move only
 * when the test says so. Used by the transcript, paper and property tests.
 */
export interface TestNode {
  readonly id: NodeId;
  raw: RawNode;
  options: RaftOptions;
  disk: { hardState: HardState; snapshot: Snapshot | undefined; entries: Entry[] };
  applied: Entry[];
  readStates: ReadState[];
  readFailures: ReadFailure[];
  /** Messages produced by this node and not yet delivered. */
  outbox: Message[];
  /** Installed snapshots' data (the "state machine" restore). */
  restoredFrom: Snapshot[];
}

export interface ClusterOptions {
  readonly seed?: number;
  readonly electionTimeoutTicks?: number;
  readonly heartbeatTimeoutTicks?: number;
  readonly leaderLostTicks?: number;
  readonly preVote?: boolean;
  readonly checkQuorum?: boolean;
  readonly maxAppendBytes?: number;
  readonly maxInflightMsgs?: number;
  readonly snapshotChunkBytes?: number;
  readonly plantedBugs?: RaftOptions['plantedBugs'];
}

export class TestCluster {
  readonly nodes = new Map<NodeId, TestNode>();
  /** Pairs (from>to) whose messages are dropped. */
  private readonly cut = new Set<string>();
  private readonly rng: SeededRandom;
  /** When set (startRecording), every delivered message, including those lost to a cut. */
  private recording: Message[] | undefined = undefined;

  constructor(private readonly opts: ClusterOptions = {}) {
    this.rng = new SeededRandom(opts.seed ?? 1);
  }

  private nodeOptions(id: NodeId): RaftOptions {
    const o = this.opts;
    return {
      id,
      random: this.rng.fork(),
      ...(o.electionTimeoutTicks !== undefined ? { electionTimeoutTicks: o.electionTimeoutTicks } : {}),
      ...(o.heartbeatTimeoutTicks !== undefined ? { heartbeatTimeoutTicks: o.heartbeatTimeoutTicks } : {}),
      ...(o.leaderLostTicks !== undefined ? { leaderLostTicks: o.leaderLostTicks } : {}),
      ...(o.preVote !== undefined ? { preVote: o.preVote } : {}),
      ...(o.checkQuorum !== undefined ? { checkQuorum: o.checkQuorum } : {}),
      ...(o.maxAppendBytes !== undefined ? { maxAppendBytes: o.maxAppendBytes } : {}),
      ...(o.maxInflightMsgs !== undefined ? { maxInflightMsgs: o.maxInflightMsgs } : {}),
      ...(o.snapshotChunkBytes !== undefined ? { snapshotChunkBytes: o.snapshotChunkBytes } : {}),
      ...(o.plantedBugs !== undefined ? { plantedBugs: o.plantedBugs } : {}),
    };
  }

  /** Bootstraps voters (and learners) as one initial cluster. */
  bootstrap(voterIds: readonly string[], learnerIds: readonly string[] = []): void {
    const config = makeConfig([
      ...voterIds.map((v) => ({ id: nodeId(v), suffrage: 'voter' as const, address: `${v}:7500` })),
      ...learnerIds.map((v) => ({ id: nodeId(v), suffrage: 'learner' as const, address: `${v}:7500` })),
    ]);
    for (const v of [...voterIds, ...learnerIds]) this.start(nodeId(v), RawNode.bootstrapState(config));
  }

  /** Adds a node that joins later with an empty log. */
  addEmpty(id: string): TestNode {
    return this.start(nodeId(id), RawNode.emptyState());
  }

  start(id: NodeId, state: PersistedState): TestNode {
    const options = this.nodeOptions(id);
    const node: TestNode = {
      id,
      raw: new RawNode(options, state),
      options,
      disk: { hardState: state.hardState, snapshot: state.snapshot, entries: [...state.entries] },
      applied: [],
      readStates: [],
      readFailures: [],
      outbox: [],
      restoredFrom: [],
    };
    this.nodes.set(id, node);
    return node;
  }

  /** Crash and restart from disk: undelivered outbox and volatile state are lost. */
  restart(id: string): TestNode {
    const old = this.node(id);
    const state: PersistedState = { hardState: old.disk.hardState, snapshot: old.disk.snapshot, entries: old.disk.entries };
    const fresh = this.start(old.id, state);
    fresh.applied = old.applied.filter((e) => e.index <= (state.snapshot?.meta.index ?? 0));
    return fresh;
  }

  node(id: string): TestNode {
    const n = this.nodes.get(id as NodeId);
    if (!n) throw new Error(`no node ${id}`);
    return n;
  }

  ids(): NodeId[] {
    return [...this.nodes.keys()];
  }

  /** Processes one Ready of a node (persist, queue messages, apply, advance). Returns whether there was one. */
  processReady(id: string): boolean {
    return this.handleReady(id) !== undefined;
  }

  /** Like processReady, but hands back the Ready it processed (for transcripts), or undefined. */
  handleReady(id: string): Ready | undefined {
    const n = this.node(id);
    if (!n.raw.hasReady()) return undefined;
    const rd = n.raw.ready();
    if (rd.snapshot) {
      n.disk.snapshot = rd.snapshot;
      // A snapshot replaces the whole log: entries after it on disk are stale (the core
      // dropped them) and would otherwise come back on restart behind a newer term.
      n.disk.entries = [];
      n.restoredFrom.push(rd.snapshot);
      n.applied = n.applied.filter((e) => e.index <= (rd.snapshot as Snapshot).meta.index);
    }
    const first = rd.entries[0];
    if (first) {
      n.disk.entries = n.disk.entries.filter((e) => e.index < first.index).concat(rd.entries);
    }
    if (rd.hardState) n.disk.hardState = rd.hardState;
    for (const m of rd.messages) {
      if (m.type !== 'snap' || m.fill === undefined) {
        n.outbox.push(m);
        continue;
      }
      // A chunk of a released snapshot: read it from "disk", as the driver does, or report
      // the snapshot gone when the disk holds another one.
      const s = n.disk.snapshot;
      if (s !== undefined && s.meta.index === m.meta.index && s.meta.term === m.meta.term) {
        const { fill, ...rest } = m;
        n.outbox.push({ ...rest, chunk: s.data.subarray(m.offset, m.offset + fill) });
      } else {
        n.raw.reportSnapshotUnavailable(m.to, m.meta.index);
      }
    }
    n.applied.push(...rd.committedEntries);
    n.readStates.push(...rd.readStates);
    n.readFailures.push(...rd.readFailures);
    n.raw.advance(rd);
    return rd;
  }

  /** Delivers every queued message from `from` (or all nodes); returns the number delivered. */
  deliver(filter: (m: Message) => boolean = () => true): number {
    let count = 0;
    for (const n of this.nodes.values()) {
      const keep: Message[] = [];
      const send: Message[] = [];
      for (const m of n.outbox) (filter(m) ? send : keep).push(m);
      n.outbox = keep;
      for (const m of send) {
        count++;
        if (this.recording) this.recording.push(m);
        if (this.cut.has(`${m.from}>${m.to}`)) continue;
        const to = this.nodes.get(m.to);
        if (to) to.raw.step(structuredClone(m));
      }
    }
    return count;
  }

  /** Drops queued messages matching the filter. */
  drop(filter: (m: Message) => boolean): Message[] {
    const dropped: Message[] = [];
    for (const n of this.nodes.values()) {
      n.outbox = n.outbox.filter((m) => (filter(m) ? (dropped.push(m), false) : true));
    }
    return dropped;
  }

  /** Processes Readys and delivers messages until nothing moves. */
  stabilize(maxRounds = 10_000): void {
    for (let round = 0; round < maxRounds; round++) {
      let moved = false;
      for (const id of this.ids()) while (this.processReady(id)) moved = true;
      if (this.deliver() > 0) moved = true;
      if (!moved) return;
    }
    throw new Error(`cluster did not stabilize within ${maxRounds} rounds`);
  }

  /** Cuts both directions between the groups (a symmetric partition). */
  partition(...groups: string[][]): void {
    this.heal();
    for (const a of groups) for (const b of groups) {
      if (a === b) continue;
      for (const x of a) for (const y of b) this.cut.add(`${x}>${y}`);
    }
  }

  isolate(id: string): void {
    this.partition([id], this.ids().filter((x) => x !== id));
  }

  cutOneWay(from: string, to: string): void {
    this.cut.add(`${from}>${to}`);
  }

  heal(): void {
    this.cut.clear();
  }

  /** Whether messages from `from` to `to` are currently dropped by a partition or cut. */
  isCut(from: string, to: string): boolean {
    return this.cut.has(`${from}>${to}`);
  }

  /**
   * The application of node `id` snapshotted its state at `index` (applied and durable): the
   * core compacts its log, and the "driver" persists the snapshot and drops the entries it
   * covers from disk, so a later restart starts from it.
   */
  compact(id: string, index: LogIndex, data: Uint8Array): Snapshot {
    const n = this.node(id);
    const at = n.disk.entries.find((e) => e.index === index);
    if (!at) throw new Error(`node ${id} has no entry ${index} on disk to snapshot at`);
    let config = n.disk.snapshot?.meta.config;
    for (const e of n.disk.entries) {
      if (e.index <= index && e.data[0] === EntryType.Config) config = decodeConfigEntry(e.data).config;
    }
    if (!config) throw new Error(`node ${id} knows no configuration at index ${index}`);
    n.raw.compact(index, data);
    const snapshot: Snapshot = { meta: { index, term: at.term, config }, data };
    n.disk.snapshot = snapshot;
    n.disk.entries = n.disk.entries.filter((e) => e.index > index);
    return snapshot;
  }

  tick(id: string, n = 1): void {
    for (let i = 0; i < n; i++) this.node(id).raw.tick();
  }

  tickAll(n = 1): void {
    for (let i = 0; i < n; i++) for (const node of this.nodes.values()) node.raw.tick();
  }

  /** Campaign on `id` and stabilize; returns the leader afterwards. */
  elect(id: string): NodeId {
    this.node(id).raw.campaign();
    this.stabilize();
    return this.leader();
  }

  leader(): NodeId {
    const leaders = [...this.nodes.values()].filter((n) => n.raw.status().role === 'leader');
    let best: TestNode | undefined;
    for (const l of leaders) if (!best || l.raw.status().term > best.raw.status().term) best = l;
    return best ? best.id : NO_NODE;
  }

  /**
   * Starts a voter with a hand-made log (paper Figure 7 and friends): index 1 is the bootstrap
   * entry of `config` (term 1), then one command per element of `terms` (index 2, 3, ...),
   * whose text is `t<term>i<index>` so that logs can be compared by content.
   */
  startWithLog(id: string, spec: { config: Config; terms: readonly number[]; term: number; vote?: string; commit?: number }): TestNode {
    const boot = RawNode.bootstrapState(spec.config).entries;
    const entries: Entry[] = [...boot];
    spec.terms.forEach((t, k) => {
      const index = k + 2;
      entries.push({ index: index as LogIndex, term: t as Term, data: encodeCommand(`t${t}i${index}`) });
    });
    const hardState: HardState = {
      term: spec.term as Term,
      vote: (spec.vote ?? NO_NODE) as NodeId,
      commit: (spec.commit ?? 1) as LogIndex,
    };
    return this.start(nodeId(id), { hardState, snapshot: undefined, entries });
  }

  /** Processes every pending Ready of `id` and takes (removes) the messages it queued. */
  takeMessages(id: string): Message[] {
    while (this.processReady(id)) {
      // drain
    }
    const n = this.node(id);
    const out = n.outbox;
    n.outbox = [];
    return out;
  }

  /** Queued, undelivered messages (all nodes' outboxes) matching the filter. */
  pending(filter: (m: Message) => boolean = () => true): Message[] {
    const out: Message[] = [];
    for (const n of this.nodes.values()) for (const m of n.outbox) if (filter(m)) out.push(m);
    return out;
  }

  /** Hands a message straight to its addressee (no outbox, no partition). */
  inject(m: Message): void {
    this.node(m.to).raw.step(structuredClone(m));
  }

  /** Records every message delivered from now on (also those lost to a cut); returns the live list. */
  startRecording(): Message[] {
    this.recording = [];
    return this.recording;
  }

  /** Processes Readys of every node once each, until none has one, without delivering anything. */
  processAll(): void {
    let moved = true;
    while (moved) {
      moved = false;
      for (const id of this.ids()) while (this.processReady(id)) moved = true;
    }
  }

  /** `rounds` times: tick every node once, then stabilize (time passes with a working network). */
  tickAndStabilize(rounds: number): void {
    for (let i = 0; i < rounds; i++) {
      this.tickAll();
      this.stabilize();
    }
  }

  /**
   * Like stabilize, but delivers only the messages `allow` lets through; the rest stay queued
   * (held back, not lost). Stops when no allowed message is left.
   */
  pump(allow: (m: Message) => boolean = () => true, maxRounds = 10_000): void {
    for (let round = 0; round < maxRounds; round++) {
      this.processAll();
      if (this.deliver(allow) === 0) return;
    }
    throw new Error(`cluster did not quiesce within ${maxRounds} rounds`);
  }

  /** The terms of the entries on this node's disk, in index order. */
  logTerms(id: string): number[] {
    return this.node(id).disk.entries.map((e) => e.term);
  }

  /** This node's durable log as comparable [index, term, text] triples. */
  logSummary(id: string): Array<[number, number, string]> {
    return this.node(id).disk.entries.map((e) => [e.index, e.term, describeEntry(e)]);
  }

  propose(id: string, text: string): { index: LogIndex; term: Term } {
    return this.node(id).raw.propose(encodeCommand(text));
  }

  /** The application commands this node applied, as text, in order. */
  appliedCommands(id: string): string[] {
    return this.node(id).applied.filter((e) => e.data[0] === TEST_COMMAND).map((e) => decodeCommand(e.data));
  }
}

export const TEST_COMMAND = 0x10;

/** The configuration `TestCluster.bootstrap` gives these members. */
export function testConfig(voterIds: readonly string[], learnerIds: readonly string[] = []): Config {
  return makeConfig([
    ...voterIds.map((v) => ({ id: nodeId(v), suffrage: 'voter' as const, address: `${v}:7500` })),
    ...learnerIds.map((v) => ({ id: nodeId(v), suffrage: 'learner' as const, address: `${v}:7500` })),
  ]);
}

/** A short label for an entry: the command text, `noop`, or `config`. */
export function describeEntry(e: Entry): string {
  if (e.data[0] === TEST_COMMAND) return decodeCommand(e.data);
  if (e.data[0] === EntryType.Noop) return 'noop';
  if (e.data[0] === EntryType.Config) return 'config';
  return `type${String(e.data[0])}`;
}

export function encodeCommand(text: string): Uint8Array {
  const body = new TextEncoder().encode(text);
  const out = new Uint8Array(body.length + 1);
  out[0] = TEST_COMMAND;
  out.set(body, 1);
  return out;
}

export function decodeCommand(data: Uint8Array): string {
  return new TextDecoder().decode(data.subarray(1));
}
