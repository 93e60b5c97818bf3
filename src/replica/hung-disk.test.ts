/**
 * A leader whose disk hangs hands leadership over (`ReplicaOptions.writeStallMs`). Its
 * heartbeats wait for no write, so without the hand-off nobody would campaign, while it could
 * apply nothing above its own durable index: every write would time out until the disk came
 * back. With it, a follower with the whole log takes over and writes commit there.
 *
 * Simulated time (`ManualTime` as the replicas' clock and timers, 1 ms steps): a 20 ms tick,
 * election timeout 200-400 ms, the hand-off after 2,000 ms of a hung write.
 */
import t, { type Test } from 'tap';
import { CommandType } from '../fsm/index.js';
import { ManualTime } from '../base/testing/index.js';
import { LocalCluster, advanceUntil, artistWrite, closeInSimulatedTime, gatedLogStore, type LocalNode, type MemoryLogStore } from './testing/index.js';
import { MemorySnapshotStore } from './testing/memory-snapshot-store.js';

/** A disk that can hang: appends wait while `hung` is set, and go on when it is released. */
class Disk {
  hung = false;
  private waiting: (() => void)[] = [];

  store(): MemoryLogStore {
    return gatedLogStore(() => (this.hung ? new Promise<void>((r) => this.waiting.push(r)) : undefined));
  }

  release(): void {
    this.hung = false;
    for (const r of this.waiting.splice(0)) r();
  }
}

let seq = 0;
const body = (): Record<string, unknown> => artistWrite(++seq);

async function hungLeader(t: Test, writeStallMs: number): Promise<{ c: LocalCluster; first: LocalNode; term: number; time: ManualTime; hungAt: number; runUntil: (what: string, limitMs: number, done: () => boolean) => Promise<boolean> }> {
  const time = new ManualTime();
  const disks = new Map<string, Disk>();
  const c = new LocalCluster({ tickMs: 20, proposalTimeoutMs: 30_000, writeStallMs, clock: time, timers: time });
  const runUntil = (_what: string, limitMs: number, done: () => boolean): Promise<boolean> => advanceUntil(time, limitMs, done);
  t.teardown(async () => {
    for (const d of disks.values()) d.release();
    await closeInSimulatedTime(c, time);
  });
  const config = LocalCluster.config(['n1', 'n2', 'n3']);
  for (const id of ['n1', 'n2', 'n3']) {
    const d = new Disk();
    disks.set(id, d);
    await c.start(id, config, { logStore: d.store(), snapshotStore: new MemorySnapshotStore() });
  }
  t.ok(await runUntil('a leader', 10_000, () => c.leader() !== undefined), 'a leader');
  const first = c.leader()!;
  let done = false;
  void first.coordinator.propose(CommandType.ResourceWrite, body()).finally(() => (done = true));
  t.ok(await runUntil('a first write', 5_000, () => done), 'a first write commits');
  const term = first.replica.status().term;
  disks.get(first.id)!.hung = true;
  const hungAt = time.monotonicMs();
  // A write that reaches the hung leader: it cannot be applied there.
  void first.coordinator.propose(CommandType.ResourceWrite, body()).catch(() => {});
  return { c, first, term, time, hungAt, runUntil };
}

t.test("the leader's disk hangs: after writeStallMs it hands leadership to a follower, where writes commit", async (t) => {
  const { c, first, term, time, hungAt, runUntil } = await hungLeader(t, 2_000);
  const moved = await runUntil('another leader', 10_000, () => {
    const l = c.leader();
    return l !== undefined && l.id !== first.id;
  });
  t.ok(moved, `another node leads within 10 s of simulated time (${[...c.nodes.values()].map((n) => `${n.id}: ${n.replica.status().role} of term ${n.replica.status().term}`).join(', ')})`);
  if (!moved) return;
  const after = time.monotonicMs() - hungAt;
  t.ok(after >= 2_000 && after <= 2_000 + 1_000, `the hand-off, not an election timeout: a new leader ${after} ms after the disk hung (writeStallMs 2,000, a tick 20 ms)`);
  const second = c.leader()!;
  t.ok(second.replica.status().term > term, 'in a later term');
  let result: unknown;
  void second.coordinator.propose(CommandType.ResourceWrite, body()).then(
    () => (result = 'committed'),
    (e: unknown) => (result = e instanceof Error ? e.message : String(e)),
  );
  await runUntil('a write on the new leader', 5_000, () => result !== undefined);
  t.equal(result, 'committed', 'a write commits on the new leader while the old one is hung');
});

t.test('with the hand-off off (writeStallMs 0), the hung leader keeps its term and no write commits', async (t) => {
  const { c, first, term, runUntil } = await hungLeader(t, 0);
  let result: unknown;
  void first.coordinator.propose(CommandType.ResourceWrite, body()).then(
    () => (result = 'committed'),
    (e: unknown) => (result = e instanceof Error ? e.message : String(e)),
  );
  const moved = await runUntil('another leader', 10_000, () => c.leader()?.id !== first.id || result !== undefined);
  t.notOk(moved, 'nobody else campaigns and nothing is answered for 10 s: the gap the hand-off closes');
  t.equal(first.replica.status().term, term, 'the same term');
});
