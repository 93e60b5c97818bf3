import t from 'tap';
import { runSimulation } from './simulation.js';

t.test('one seed replays to a byte-identical event log', async (t) => {
  const a = await runSimulation({ seed: 4242, log: true });
  const b = await runSimulation({ seed: 4242, log: true });
  t.ok(a.ok, `seed 4242 passes (${a.violation?.message ?? 'ok'})`);
  t.equal(a.eventLogDigest, b.eventLogDigest, 'same sha256');
  t.equal(a.eventLog, b.eventLog, 'same text');
  t.same(a.stats, b.stats, 'same statistics');
  t.ok((a.eventLog ?? '').startsWith('      0 sim seed 4242 '), 'the seed is logged first');
  t.ok(a.stats.steps > 1000, `a real run (${a.stats.steps} steps)`);
});

t.test('keeping the log text does not change the run', async (t) => {
  const a = await runSimulation({ seed: 99, log: true });
  const b = await runSimulation({ seed: 99 });
  t.equal(a.eventLogDigest, b.eventLogDigest);
  t.equal(b.eventLog, undefined);
});

t.test('another seed gives another run', async (t) => {
  const a = await runSimulation({ seed: 1 });
  const b = await runSimulation({ seed: 2 });
  t.not(a.eventLogDigest, b.eventLogDigest);
});

t.test('a failing run replays to the same violation at the same step', async (t) => {
  const options = { seed: 1, faults: 'default', plantedBugs: { doubleVote: true } } as const;
  let seed = 1;
  let first = await runSimulation(options);
  while (first.ok && seed < 50) first = await runSimulation({ ...options, seed: ++seed });
  t.notOk(first.ok, `a doubleVote run fails (seed ${seed})`);
  const again = await runSimulation({ ...options, seed });
  t.same(again.violation, first.violation);
  t.equal(again.eventLogDigest, first.eventLogDigest);
});

t.test('a run does not depend on what ran before it in the process', async (t) => {
  const first = (await runSimulation({ seed: 77 })).eventLogDigest;
  for (let seed = 1; seed <= 3; seed++) await runSimulation({ seed, faults: 'chaos' });
  t.equal((await runSimulation({ seed: 77 })).eventLogDigest, first);
});
