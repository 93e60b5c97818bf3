import t from 'tap';
import { checkAckOrder, checkStore } from './checks.js';
import type { VerifyReport } from './durable-node.js';

function report(resources: [name: string, version: number, data?: unknown][], revision = 100): VerifyReport {
  return {
    resources: resources.map(([name, version, data]) => ({ name, version, data: data ?? { name, n: Number(name.split('-')[1]) } })),
    revision,
    status: { term: 2, commit: revision, applied: revision, firstIndex: 1, lastIndex: revision, snapshotIndex: 0 },
    startup: { loadedSnapshotIndex: 0, diskCommit: revision, openAndReplayMs: 1, leadMs: 1 },
    logStore: 'level',
    recovery: { droppedBytes: 0, messages: [] },
    warnings: [],
  };
}

t.test('a consistent store with every ack passes; an unacknowledged extra write is allowed', async (t) => {
  const c = checkStore(report([['w1-0', 3], ['w1-1', 4], ['w2-0', 7]]), [
    { name: 'w1-0', version: 3 },
    { name: 'w1-1', version: 4 },
  ]);
  t.same(c.problems, []);
  t.same(c.missing, []);
  t.equal(c.unacked, 1);
});

t.test('each kind of damage is reported', async (t) => {
  const acked = [
    { name: 'w1-0', version: 3 },
    { name: 'w1-1', version: 4 },
    { name: 'w1-2', version: 5 },
  ];
  t.same(checkStore(report([['w1-0', 3], ['w1-1', 4]]), acked).missing, [{ name: 'w1-2', version: 5 }], 'a lost acknowledged write');
  t.match(checkStore(report([['w1-0', 3], ['w1-1', 4], ['w1-2', 6]]), acked).problems, [/w1-2 was acknowledged at version 5 but is stored at version 6/]);
  t.match(checkStore(report([['w1-0', 3], ['w1-1', 2]]), []).problems, [/commit order is broken: w1-1 \(version 2\) comes before w1-0/]);
  t.match(checkStore(report([['w2-0', 3], ['w1-5', 4]]), []).problems, [/commit order is broken/], 'an older round after a newer one');
  t.match(checkStore(report([['w1-0', 3], ['w1-1', 3]]), []).problems, [/version 3 is used twice/]);
  t.match(checkStore(report([['w1-0', 3, { name: 'w1-0', n: 9 }]]), []).problems, [/w1-0 holds .* not/]);
  t.match(checkStore(report([['x', 3]]), []).problems, [/x is not a name the writer uses/]);
  t.match(checkStore(report([['w1-0', 300]], 100), []).problems, [/above the store revision 100/]);
});

t.test('ack versions must strictly increase above the floor', async (t) => {
  t.same(checkAckOrder([{ name: 'a', version: 5 }, { name: 'b', version: 6 }], 4), []);
  t.match(checkAckOrder([{ name: 'a', version: 5 }, { name: 'b', version: 5 }], 4), [/b was acknowledged at version 5, not above the previous ack's 5/]);
  t.match(checkAckOrder([{ name: 'a', version: 4 }], 4), [/not above the previous ack's 4/]);
});
