// The fault schedule: a pure function of the seed (same seed, same schedule; another seed,
// another one), alternating fault and heal intervals inside the run, every nemesis drawn.
import t from 'tap';
import { describeFault, makeSchedule, parseNemeses, Rng, NEMESES, type ScheduleOptions } from './schedule.js';

const base: ScheduleOptions = { seed: 42, nodes: 5, nemeses: [...NEMESES], timeMs: 120_000 };

t.test('the same seed gives the same schedule; another seed another one', async (t) => {
  t.same(makeSchedule(base), makeSchedule({ ...base }));
  t.notSame(makeSchedule(base), makeSchedule({ ...base, seed: 43 }));
  t.same(new Rng(9).shuffle([1, 2, 3, 4, 5]), new Rng(9).shuffle([1, 2, 3, 4, 5]));
});

t.test('faults alternate with heal gaps and end inside the run', async (t) => {
  for (let seed = 0; seed < 50; seed++) {
    const s = makeSchedule({ ...base, seed, timeMs: 60_000 });
    t.ok(s.length >= 5, `seed ${seed}: ${s.length} faults in 60 s`);
    let prevEnd = 0;
    for (const f of s) {
      if (f.startMs < prevEnd + 2000 || f.endMs - f.startMs < 3000 || f.endMs - f.startMs > 6000 || f.endMs > 60_000) {
        t.fail(`seed ${seed}: bad interval ${f.startMs}-${f.endMs} after ${prevEnd}`);
      }
      prevEnd = f.endMs;
    }
  }
});

t.test('every nemesis is drawn, targets are nodes of the cluster, partitions leave a majority', async (t) => {
  const seen = new Set<string>();
  for (let seed = 0; seed < 30; seed++) {
    for (const { fault } of makeSchedule({ ...base, seed })) {
      seen.add(fault.nemesis);
      if (fault.nemesis === 'partition' && fault.mode === 'halves') {
        t.ok(fault.side.length >= 1 && fault.side.length <= 2, `minority side of 5: ${fault.side.join(',')}`);
        t.ok(fault.side.every((n) => n >= 0 && n < 5));
      }
      if ((fault.nemesis === 'kill' || fault.nemesis === 'pause' || fault.nemesis === 'netem') && fault.target.kind === 'node') {
        t.ok(fault.target.node >= 0 && fault.target.node < 5);
      }
    }
  }
  t.same([...seen].sort(), [...NEMESES].sort());
  t.same(makeSchedule({ ...base, nemeses: ['kill'] }).map((f) => f.fault.nemesis), makeSchedule({ ...base, nemeses: ['kill'] }).map(() => 'kill'));
  t.same(makeSchedule({ ...base, nemeses: [] }), []);
});

t.test('some kills kill every node at once (what loses an unsynced acknowledged write)', async (t) => {
  const kills = Array.from({ length: 40 }, (_, seed) => makeSchedule({ ...base, seed, nemeses: ['kill'] })).flat();
  const all = kills.filter((f) => f.fault.nemesis === 'kill' && f.fault.target.kind === 'all').length;
  t.ok(all > 0 && all < kills.length / 2, `${all} of ${kills.length} kills hit every node`);
  t.equal(describeFault({ nemesis: 'kill', target: { kind: 'all' } }), 'kill -9 every node, restart at heal');
});

t.test('parseNemeses and describeFault', async (t) => {
  t.same(parseNemeses('all'), [...NEMESES]);
  t.same(parseNemeses('kill, pause'), ['kill', 'pause']);
  t.same(parseNemeses('none'), []);
  t.throws(() => parseNemeses('kill,flood'), /unknown nemesis 'flood'/);
  t.equal(describeFault({ nemesis: 'partition', mode: 'halves', side: [0, 2] }), 'partition: {n1,n3} from the rest');
  t.equal(describeFault({ nemesis: 'kill', target: { kind: 'leader' } }), 'kill -9 the leader, restart at heal');
});
