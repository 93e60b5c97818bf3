/**
 * The shipped driver's pipelined write path (src/replica/README.md, "Pipelined writes"): a slow
 * log write on one node holds back only what depends on it. Each test fails on the driver
 * before issue 17, which took the next Ready only once the previous write was durable.
 */
import t, { type Test } from 'tap';
import { CommandType, type ApplyResult } from '../fsm/index.js';
import type { Entry, HardState } from '../raft/index.js';
import type { LogIndex } from '../base/index.js';
import { LocalCluster, MemoryLogStore, MemorySnapshotStore, waitUntil, type LocalClusterOptions, type LocalNode } from './testing/index.js';

const artist = { group: 'demo', groupVersion: 'v1', kind: 'Artist' };
const tenancy = { partition: 'default', namespace: 'default' };
let seq = 0;

function writeBody(name: string): Record<string, unknown> {
  seq++;
  return { time: '2026-11-27T10:00:00.000Z', uid: `uid-${seq}`, generation: `gen-${seq}`, id: { type: artist, tenancy, name }, data: { name } };
}

/** A log store whose synced writes wait while `held` (a slow fsync the test controls). */
class GatedLogStore extends MemoryLogStore {
  held = false;
  syncedStarted = 0;
  private release: (() => void) | undefined;
  private gate: Promise<void> | undefined;

  hold(): void {
    this.held = true;
    this.gate = new Promise<void>((r) => (this.release = r));
  }

  open(): void {
    this.held = false;
    this.release?.();
  }

  override async append(batch: { readonly entries: readonly Entry[]; readonly hardState: HardState | undefined; readonly sync: boolean; readonly installedSnapshot?: LogIndex }): Promise<void> {
    if (batch.sync) this.syncedStarted++;
    if (batch.sync && this.held) await this.gate;
    return super.append(batch);
  }
}

/**
 * Three nodes on gated log stores, with a first write committed. `options` go to the
 * LocalCluster over the defaults (seed 11, 20 ms ticks). Teardown opens every gate, then closes.
 */
async function cluster(t: Test, options: LocalClusterOptions = {}): Promise<{ c: LocalCluster; stores: Map<string, GatedLogStore>; leader: LocalNode }> {
  const c = new LocalCluster({ seed: 11, tickMs: 20, ...options });
  t.teardown(async () => {
    for (const s of stores.values()) s.open();
    await c.close();
  });
  const stores = new Map<string, GatedLogStore>();
  const config = LocalCluster.config(['n1', 'n2', 'n3']);
  for (const id of ['n1', 'n2', 'n3']) {
    const logStore = new GatedLogStore();
    stores.set(id, logStore);
    await c.start(id, config, { logStore, snapshotStore: new MemorySnapshotStore() });
  }
  const leader = await c.waitForLeader();
  // A first write, so the leader has committed in its term (reads need it).
  await leader.coordinator.propose(CommandType.ResourceWrite, writeBody('warm-up'));
  return { c, stores, leader };
}

t.test("a leader replicates the next proposal while its own previous write is still running", async (t) => {
  const { c, stores, leader } = await cluster(t);
  const gate = stores.get(leader.id) as GatedLogStore;
  const followers = [...c.nodes.values()].filter((n) => n.id !== leader.id);
  gate.hold();
  const first = leader.coordinator.propose(CommandType.ResourceWrite, writeBody('first'));
  await waitUntil(() => gate.syncedStarted > 0 && followers.every((f) => f.replica.status().lastIndex >= leader.replica.status().lastIndex), 5000, 'the first entry on the followers');
  const firstIndex = leader.replica.status().lastIndex;
  const second = leader.coordinator.propose(CommandType.ResourceWrite, writeBody('second'));
  // The old driver sent nothing of the second proposal until the first write completed.
  await waitUntil(() => followers.every((f) => f.replica.status().lastIndex > firstIndex), 5000, 'the second entry to reach the followers while the leader write is held');
  t.ok(gate.held, 'the leader write was still held');
  gate.open();
  const results = (await Promise.all([first, second])) as ApplyResult[];
  t.ok(results.every((r) => r.ok), 'both writes are acknowledged once the leader write completes');
});

t.test('followers answer heartbeats while their log write is held: a linearizable read does not wait for their fsync', async (t) => {
  const { c, stores, leader } = await cluster(t);
  const followers = [...c.nodes.values()].filter((n) => n.id !== leader.id);
  const pending = followers.map((f) => stores.get(f.id) as GatedLogStore);
  for (const g of pending) g.hold();
  const write = leader.coordinator.propose(CommandType.ResourceWrite, writeBody('held'));
  await waitUntil(() => pending.every((g) => g.syncedStarted > 2), 5000, 'the followers to start writing the entry');
  // A read barrier needs a heartbeat round answered by a quorum; the followers' writes are held.
  const read = await leader.replica.readIndex();
  t.ok(read > 0, 'the read index was confirmed while both followers were still writing');
  t.ok(pending.every((g) => g.held), 'the follower writes were still held');
  for (const g of pending) g.open();
  t.ok(((await write) as ApplyResult).ok);
});

t.test('a proposal not applied in time is answered TIMEOUT by the tick sweep', async (t) => {
  const { stores, leader } = await cluster(t, { seed: 12, proposalTimeoutMs: 300 });
  for (const s of stores.values()) s.hold();
  const started = Date.now();
  await t.rejects(leader.replica.propose(new Uint8Array([0xff])), { code: 'TIMEOUT' });
  const took = Date.now() - started;
  t.ok(took >= 300 && took < 3000, `answered after ${took} ms (deadline 300 ms, swept each 20 ms tick)`);
});
