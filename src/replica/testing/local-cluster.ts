import { SeededRandom, nodeId, type Clock, type NodeId, type Timers } from '../../base/index.js';
import { realClock, realTimers } from '../../base/testing/index.js';
import { Fsm, type ApplyResult, type WriteHooks } from '../../fsm/index.js';
import { makeConfig, type Config } from '../../raft/index.js';
import type { Resource } from '../../store/index.js';
import { Coordinator } from '../coordinator.js';
import { Replica } from '../replica.js';
import { MemoryLogStore } from './memory-log-store.js';
import { MemorySnapshotStore } from './memory-snapshot-store.js';
import { MemoryNetwork } from './memory-transport.js';

/** Real time for in-process tests (the replica's own tests run in real time). */
export const testClock: Clock = realClock;

export interface LocalNode {
  readonly id: NodeId;
  replica: Replica<ApplyResult, Resource>;
  fsm: Fsm;
  coordinator: Coordinator;
  logStore: MemoryLogStore;
  snapshotStore: MemorySnapshotStore;
}

export interface LocalClusterOptions {
  readonly seed?: number;
  readonly tickMs?: number;
  readonly snapshotEveryEntries?: number;
  readonly snapshotRetainEntries?: number;
  readonly snapshotLogRatio?: number;
  readonly snapshotMaxLogBytes?: number;
  readonly snapshotRetainBytes?: number;
  readonly proposalTimeoutMs?: number;
  /** Upper bound on the bytes of entries in one append (RaftOptions.maxAppendBytes). */
  readonly maxAppendBytes?: number;
  /**
   * Election timeout in ticks (RaftOptions.electionTimeoutTicks; default 10, i.e. 100-200 ms at
   * the default 10 ms tick). Tests in real time that rely on one leader throughout raise it: a
   * stall of the event loop that long on a loaded machine is an election.
   */
  readonly electionTimeoutTicks?: number;
  /** The types' hooks, for unconditional writes (FsmOptions.writeHooks; the api's `registryWriteHooks`). */
  readonly writeHooks?: WriteHooks;
  /** The replicas' clock and timers (default: real time); a `ManualTime` makes time the test's. */
  readonly clock?: Clock;
  readonly timers?: Timers;
  /** ReplicaOptions.writeStallMs (default there: 5,000). */
  readonly writeStallMs?: number;
}

/**
 * Real replicas (driver, Raft core, FSM, store) in one process over an in-memory network and
 * in-memory disks: for tests of the replica and the layers above it.
 */
export class LocalCluster {
  readonly net = new MemoryNetwork();
  readonly nodes = new Map<NodeId, LocalNode>();
  private readonly rng: SeededRandom;

  constructor(private readonly opts: LocalClusterOptions = {}) {
    this.rng = new SeededRandom(opts.seed ?? 1);
  }

  static config(ids: readonly string[]): Config {
    return makeConfig(ids.map((id) => ({ id: nodeId(id), suffrage: 'voter' as const, address: `${id}:7500` })));
  }

  async start(id: string, bootstrap: Config | undefined, stores?: { logStore: MemoryLogStore; snapshotStore: MemorySnapshotStore }): Promise<LocalNode> {
    const nid = nodeId(id);
    const fsm = new Fsm(this.opts.writeHooks !== undefined ? { writeHooks: this.opts.writeHooks } : {});
    const logStore = stores?.logStore ?? new MemoryLogStore();
    const snapshotStore = stores?.snapshotStore ?? new MemorySnapshotStore();
    const o = this.opts;
    const replica = await Replica.open<ApplyResult, Resource>({
      id: nid,
      random: this.rng.fork(),
      clock: o.clock ?? testClock,
      timers: o.timers ?? realTimers,
      logStore,
      snapshotStore,
      transport: this.net.transport(nid),
      stateMachine: fsm,
      tickMs: o.tickMs ?? 10,
      ...(o.snapshotEveryEntries !== undefined ? { snapshotEveryEntries: o.snapshotEveryEntries } : {}),
      ...(o.snapshotRetainEntries !== undefined ? { snapshotRetainEntries: o.snapshotRetainEntries } : {}),
      ...(o.snapshotLogRatio !== undefined ? { snapshotLogRatio: o.snapshotLogRatio } : {}),
      ...(o.snapshotMaxLogBytes !== undefined ? { snapshotMaxLogBytes: o.snapshotMaxLogBytes } : {}),
      ...(o.snapshotRetainBytes !== undefined ? { snapshotRetainBytes: o.snapshotRetainBytes } : {}),
      ...(o.proposalTimeoutMs !== undefined ? { proposalTimeoutMs: o.proposalTimeoutMs } : {}),
      ...(o.writeStallMs !== undefined ? { writeStallMs: o.writeStallMs } : {}),
      ...(bootstrap ? { bootstrap } : {}),
      ...(o.maxAppendBytes !== undefined || o.electionTimeoutTicks !== undefined
        ? { raft: { ...(o.maxAppendBytes !== undefined ? { maxAppendBytes: o.maxAppendBytes } : {}), ...(o.electionTimeoutTicks !== undefined ? { electionTimeoutTicks: o.electionTimeoutTicks } : {}) } }
        : {}),
    });
    const node: LocalNode = { id: nid, replica, fsm, coordinator: new Coordinator(replica, fsm), logStore, snapshotStore };
    this.nodes.set(nid, node);
    return node;
  }

  async bootstrap(ids: readonly string[]): Promise<void> {
    const config = LocalCluster.config(ids);
    for (const id of ids) await this.start(id, config);
  }

  node(id: string): LocalNode {
    const n = this.nodes.get(id as NodeId);
    if (!n) throw new Error(`no node ${id}`);
    return n;
  }

  leader(): LocalNode | undefined {
    let best: LocalNode | undefined;
    for (const n of this.nodes.values()) {
      const st = n.replica.status();
      if (st.role === 'leader' && (!best || st.term > best.replica.status().term)) best = n;
    }
    return best;
  }

  async waitForLeader(timeoutMs = 10_000): Promise<LocalNode> {
    let found: LocalNode | undefined;
    await waitUntil(() => (found = this.leader()) !== undefined, timeoutMs, 'a leader to be elected');
    return found as LocalNode;
  }

  /** Stops a node the way a crash would (no graceful shutdown); its stores keep what was synced. */
  async crash(id: string): Promise<{ logStore: MemoryLogStore; snapshotStore: MemorySnapshotStore }> {
    const n = this.node(id);
    this.net.takeDown(n.id);
    await n.replica.close().catch(() => {});
    this.nodes.delete(n.id);
    return { logStore: n.logStore.crash(), snapshotStore: n.snapshotStore.reopen() };
  }

  async close(): Promise<void> {
    for (const n of this.nodes.values()) await n.replica.close();
    this.nodes.clear();
  }
}

/** Polls a condition until it holds or the deadline passes (no fixed sleeps). */
export async function waitUntil(cond: () => boolean, timeoutMs: number, what: string): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!cond()) {
    if (performance.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise<void>((resolve) => setTimeout(resolve, 5));
  }
}
