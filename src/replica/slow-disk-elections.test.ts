/**
 * A slow disk does not start elections (issue 17): with every node's log writes taking several
 * election timeouts while writes flow, the leader keeps its term. The leader's heartbeats must
 * not wait for its own log write, and a follower must answer heartbeats without waiting for
 * its fsync (src/replica/README.md); otherwise the followers hear nothing for longer than the
 * election timeout and elect another leader, or check-quorum deposes the leader.
 *
 * Real time, as the replica's other tests: a 20 ms tick, an election timeout of 200-400 ms, log
 * writes of 800 ms (the fault, injected in the in-memory disk). No sleep waits for a condition.
 * (A 10 ms tick made the test depend on the machine's load: a busy machine's event-loop stalls
 * alone outlast a 100 ms timeout, and once an election starts it cannot finish while each vote
 * costs a write longer than the timeout.)
 */
import t from 'tap';
import { CommandType } from '../fsm/index.js';
import { LocalCluster } from './testing/index.js';
import { MemoryLogStore } from './testing/memory-log-store.js';
import { MemorySnapshotStore } from './testing/memory-snapshot-store.js';

const SLOW_MS = 800;

/** A MemoryLogStore whose appends take `slow.ms` once `slow.on` is set (a slow fsync). */
function slowStore(slow: { on: boolean }): MemoryLogStore {
  const inner = new MemoryLogStore();
  return new Proxy(inner, {
    get(target, prop, receiver) {
      if (prop === 'append') {
        return async (batch: Parameters<MemoryLogStore['append']>[0]) => {
          if (slow.on) await new Promise((r) => setTimeout(r, SLOW_MS));
          return target.append(batch);
        };
      }
      const v: unknown = Reflect.get(target, prop, receiver);
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
}

t.test('log writes of 2-4 election timeouts on every node, under a write load: no election, the leader keeps its term', async (t) => {
  const slow = { on: false };
  const c = new LocalCluster({ tickMs: 20, proposalTimeoutMs: 30_000 });
  t.teardown(() => c.close());
  const config = LocalCluster.config(['n1', 'n2', 'n3']);
  for (const id of ['n1', 'n2', 'n3']) await c.start(id, config, { logStore: slowStore(slow), snapshotStore: new MemorySnapshotStore() });
  const leader = await c.waitForLeader();
  const term = leader.replica.status().term;
  slow.on = true;
  let seq = 0;
  const body = (): Record<string, unknown> => {
    seq++;
    return { time: '2026-11-27T10:00:00.000Z', uid: `uid-${seq}`, generation: `gen-${seq}`, id: { type: { group: 'demo', groupVersion: 'v1', kind: 'Artist' }, tenancy: { partition: 'default', namespace: 'default' }, name: `a${seq % 5}` }, data: { name: `v${seq}` } };
  };
  // Ten writes in flight at a time until 6 have committed (each round costs a slow write on the
  // leader and on a follower), or a write fails.
  let committed = 0;
  const failures: string[] = [];
  const writers = Array.from({ length: 10 }, async () => {
    while (committed < 6 && failures.length === 0) {
      try {
        await leader.coordinator.propose(CommandType.ResourceWrite, body());
        committed++;
      } catch (e) {
        failures.push(e instanceof Error ? e.message : String(e));
      }
    }
  });
  await Promise.all(writers);
  const terms = [...c.nodes.values()].map((n) => `${n.id}: ${n.replica.status().role} of term ${n.replica.status().term}`);
  slow.on = false;
  t.same(failures, [], 'every write committed');
  const now = leader.replica.status();
  t.equal(now.role, 'leader', 'the leader still leads');
  t.equal(now.term, term, `in the same term (${term}): no election (${terms.join(', ')})`);
});
