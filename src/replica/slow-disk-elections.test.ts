/**
 * A slow disk does not start elections (issue 17): with every node's log writes taking several
 * election timeouts while writes flow, the leader keeps its term, and a leader elected while the
 * disks are slow keeps the term it won. The leader's heartbeats must
 * not wait for its own log write, and a follower must answer heartbeats without waiting for
 * its fsync, and a role change must not stop the loop while its write runs (src/replica/README.md);
 * otherwise the followers hear nothing for longer than the
 * election timeout and elect another leader, or check-quorum deposes the leader.
 *
 * Simulated time (a `ManualTime` as the replicas' clock and timers): a 20 ms tick, an election
 * timeout of 200-400 ms, log writes of 800 ms (the fault, injected in the in-memory disk). Time
 * moves only when the test advances it, in 1 ms steps with the event loop settled between them,
 * so the verdict does not depend on the machine's load. (In real time it did: on a busy machine
 * an event-loop stall alone outlasts the election timeout, and once an election starts it cannot
 * finish while each vote costs a write longer than the timeout; CI saw it fail that way.)
 */
import t, { type Test } from 'tap';
import { CommandType } from '../fsm/index.js';
import { ManualTime } from '../base/testing/index.js';
import { LocalCluster, advanceUntil, artistWrite, closeInSimulatedTime, gatedLogStore, type LocalNode } from './testing/index.js';
import { MemorySnapshotStore } from './testing/memory-snapshot-store.js';

const SLOW_MS = 800;

type Slow = { on: boolean };

/** Three replicas on slow disks in simulated time, with the helpers both tests use. */
async function slowCluster(t: Test): Promise<{ c: LocalCluster; slow: Slow; time: ManualTime; runUntil: (what: string, limitMs: number, done: () => boolean) => Promise<void>; write: (leader: LocalNode, n: number) => Promise<{ committed: number; failures: string[]; ms: number }> }> {
  const slow: Slow = { on: false };
  const time = new ManualTime();
  const c = new LocalCluster({ tickMs: 20, proposalTimeoutMs: 30_000, clock: time, timers: time });
  /** Advances simulated time until `done` holds; fails past `limitMs` of it. */
  const runUntil = async (what: string, limitMs: number, done: () => boolean): Promise<void> => {
    if (!(await advanceUntil(time, limitMs, done))) throw new Error(`${what}: not within ${limitMs} simulated ms`);
  };
  t.teardown(async () => {
    slow.on = false;
    await closeInSimulatedTime(c, time);
  });
  const config = LocalCluster.config(['n1', 'n2', 'n3']);
  for (const id of ['n1', 'n2', 'n3']) await c.start(id, config, { logStore: gatedLogStore(() => (slow.on ? new Promise<void>((r) => time.setTimeout(r, SLOW_MS)) : undefined)), snapshotStore: new MemorySnapshotStore() });
  let seq = 0;
  // Ten writes in flight at a time until n have committed (each round costs a slow write on the
  // leader and on a follower), or a write fails.
  const write = async (leader: LocalNode, n: number): Promise<{ committed: number; failures: string[]; ms: number }> => {
    const started = time.monotonicMs();
    let committed = 0;
    let finished = 0;
    const failures: string[] = [];
    const writers = Array.from({ length: 10 }, async () => {
      while (committed < n && failures.length === 0) {
        try {
          await leader.coordinator.propose(CommandType.ResourceWrite, artistWrite(++seq));
          committed++;
        } catch (e) {
          failures.push(e instanceof Error ? e.message : String(e));
        }
      }
      finished++;
    });
    await runUntil('the writers', 60_000, () => finished === writers.length);
    await Promise.all(writers);
    return { committed, failures, ms: time.monotonicMs() - started };
  };
  return { c, slow, time, runUntil, write };
}

const roles = (c: LocalCluster): string => [...c.nodes.values()].map((n) => `${n.id}: ${n.replica.status().role} of term ${n.replica.status().term}`).join(', ');

t.test('log writes of 2-4 election timeouts on every node, under a write load: no election, the leader keeps its term', async (t) => {
  const { c, slow, runUntil, write } = await slowCluster(t);
  await runUntil('a leader', 10_000, () => c.leader() !== undefined);
  const leader = c.leader()!;
  const term = leader.replica.status().term;
  // The disks turn slow at once: the new leader's first Ready (its role change) is written slowly too.
  slow.on = true;
  const r = await write(leader, 6);
  const terms = roles(c);
  t.same(r.failures, [], `every write committed (${r.committed} in ${r.ms} simulated ms)`);
  const now = leader.replica.status();
  t.equal(now.role, 'leader', 'the leader still leads');
  t.equal(now.term, term, `in the same term (${term}): no election (${terms})`);
});

// The election itself runs on fast disks: with every vote costing a write longer than the
// election timeout, Raft's timing requirement (broadcast time well below the election timeout)
// fails and a candidate's timer fires again before its own vote is durable. What is tested is
// the new leader's first Ready, written slowly: it must not stop the heartbeats.
t.test('a failover, and the disks turn slow as the new leader takes over: the new leader keeps its term under writes', async (t) => {
  const { c, slow, runUntil, write } = await slowCluster(t);
  await runUntil('a leader', 10_000, () => c.leader() !== undefined);
  const first = c.leader()!;
  t.same((await write(first, 3)).failures, [], 'writes commit on the first leader');
  const oldTerm = first.replica.status().term;
  await c.crash(first.id);
  await runUntil('a new leader', 20_000, () => c.leader() !== undefined);
  slow.on = true;
  const second = c.leader()!;
  const term = second.replica.status().term;
  t.ok(term > oldTerm, `a new term (${term})`);
  const r = await write(second, 6);
  const terms = roles(c);
  t.same(r.failures, [], `every write committed on the new leader (${r.committed} in ${r.ms} simulated ms)`);
  t.equal(second.replica.status().role, 'leader', 'the new leader still leads');
  t.equal(second.replica.status().term, term, `in the term it won (${term}): no second election (${terms})`);
});
