// The fault schedule: a pure function of the seed (same seed, same schedule; another seed,
// another one), alternating fault and heal intervals inside the run, every nemesis drawn.
import t from 'tap';
import { describeFault, makeSchedule, MEMBERSHIP_MODES, nthOther, parseNemeses, Rng, NEMESES, type Fault, type ScheduleOptions } from './schedule.js';

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
      if ((fault.nemesis === 'kill' || fault.nemesis === 'pause' || fault.nemesis === 'netem' || fault.nemesis === 'oneway' || fault.nemesis === 'membership') && fault.target.kind === 'node') {
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
  t.same(parseNemeses('ring,bridge,oneway,membership,transfer'), ['ring', 'bridge', 'oneway', 'membership', 'transfer']);
  for (const n of ['partition', 'ring', 'bridge', 'oneway', 'kill', 'pause', 'netem', 'membership', 'transfer']) t.ok(parseNemeses('all').includes(n as never), `all includes ${n}`);
  t.same(parseNemeses('kill, pause'), ['kill', 'pause']);
  t.same(parseNemeses('none'), []);
  t.throws(() => parseNemeses('kill,flood'), /unknown nemesis 'flood'/);
  t.equal(describeFault({ nemesis: 'partition', mode: 'halves', side: [0, 2] }), 'partition: {n1,n3} from the rest');
  t.equal(describeFault({ nemesis: 'kill', target: { kind: 'leader' } }), 'kill -9 the leader, restart at heal');
});

t.test('the new faults: same seed same draws, shapes over every node, storms 200-600 ms apart inside the fault', async (t) => {
  for (const nemesis of ['ring', 'bridge', 'oneway', 'membership', 'transfer'] as const) {
    for (const nodes of [3, 5]) {
      const o: ScheduleOptions = { seed: 7, nodes, nemeses: [nemesis], timeMs: 60_000 };
      t.same(makeSchedule(o), makeSchedule({ ...o }), `${nemesis}, ${nodes} nodes: same seed, same schedule`);
      t.notSame(makeSchedule(o), makeSchedule({ ...o, seed: 8 }), `${nemesis}: another seed, another schedule`);
    }
  }
  const modes = new Set<string>();
  const oneway = new Set<string>();
  for (let seed = 0; seed < 40; seed++) {
    for (const { fault, startMs, endMs } of makeSchedule({ seed, nodes: 5, nemeses: ['ring', 'bridge', 'oneway', 'membership', 'transfer'], timeMs: 60_000 })) {
      if (fault.nemesis === 'ring' || fault.nemesis === 'bridge') t.same([...fault.order].sort(), [0, 1, 2, 3, 4], `${fault.nemesis} order is a permutation`);
      if (fault.nemesis === 'oneway') {
        oneway.add(`${fault.direction}/${fault.peer === 'all' ? 'all' : 'one'}/${fault.target.kind}`);
        if (fault.peer !== 'all') t.ok(fault.peer >= 0 && fault.peer < 4, `peer pick ${fault.peer} among the 4 others`);
      }
      if (fault.nemesis === 'membership') modes.add(fault.mode);
      if (fault.nemesis === 'transfer') {
        t.ok(fault.steps.length >= 4, `${fault.steps.length} transfers in ${endMs - startMs} ms`);
        t.ok(fault.steps.every((s) => s.afterMs >= 200 && s.afterMs <= 600 && s.pick >= 0 && s.pick < 4), 'gaps 200-600 ms, picks among the 4 others');
        t.ok(fault.steps.reduce((a, s) => a + s.afterMs, 0) < endMs - startMs, 'every transfer inside the fault');
      }
    }
  }
  t.same([...modes].sort(), [...MEMBERSHIP_MODES].sort(), 'every membership mode drawn');
  t.equal(oneway.size, 8, `every one-way variant drawn: ${[...oneway].join(' ')}`);
  t.same([0, 1, 2, 3].map((p) => nthOther(2, p)), [0, 1, 3, 4]);
});

t.test('describeFault says what a new fault cuts or does', async (t) => {
  const d = (f: Fault): string => describeFault(f);
  t.equal(d({ nemesis: 'ring', order: [0, 1, 2, 3, 4] }), 'ring n1-n2-n3-n4-n5: cut n1<->n3 n1<->n4 n2<->n4 n2<->n5 n3<->n5');
  t.equal(d({ nemesis: 'ring', order: [0, 1, 2] }), 'ring n1-n2-n3: dropped n1->n2 n2->n3 n3->n1');
  t.equal(d({ nemesis: 'bridge', order: [4, 1, 0, 3, 2] }), 'bridge {n5,n2} - n1 - {n4,n3}: cut n2<->n3 n2<->n4 n3<->n5 n4<->n5');
  t.equal(d({ nemesis: 'oneway', target: { kind: 'node', node: 1 }, direction: 'in', peer: 1 }), 'one-way: n2 drops packets from n3; the other direction still flows');
  t.equal(d({ nemesis: 'oneway', target: { kind: 'leader' }, direction: 'out', peer: 'all' }), 'one-way: every other node drop packets from the leader; the other direction still flows');
  t.equal(d({ nemesis: 'membership', target: { kind: 'leader' }, mode: 'wiped' }), 'membership: remove the leader from the Raft configuration, then kill -9 and its data dir deleted; restarted empty at heal, it joins as a new node');
  t.equal(d({ nemesis: 'transfer', steps: [{ afterMs: 300, pick: 0 }, { afterMs: 200, pick: 1 }] }), 'leader-transfer storm: 2 transfers 200-600 ms apart, each to a random node other than the leader');
});
