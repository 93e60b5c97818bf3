/**
 * A checker that has never failed proves nothing (STYLE.md). Each planted bug in the core must
 * be caught by the simulator within a bounded number of seeds, as the violation it causes.
 */
import t from 'tap';
import { replayCommand, runSimulation, type SimulationOptions } from './simulation.js';
import type { ViolationKind } from './violation.js';

interface Case {
  readonly name: string;
  readonly options: Omit<SimulationOptions, 'seed'>;
  readonly expect: readonly ViolationKind[];
  readonly maxSeeds: number;
}

const CASES: readonly Case[] = [
  {
    name: 'doubleVote (core): two leaders in one term',
    options: { faults: 'default', plantedBugs: { doubleVote: true } },
    expect: ['election-safety'],
    maxSeeds: 300,
  },
  {
    name: 'commitOldTermByCount (core): Figure 8, a committed entry is overwritten',
    options: { faults: 'figure8', plantedBugs: { commitOldTermByCount: true } },
    expect: ['leader-completeness', 'state-machine-safety', 'log-matching', 'linearizability'],
    maxSeeds: 300,
  },
  {
    name: 'readIndexWithoutHeartbeat (core): a deposed leader serves stale reads',
    options: { faults: 'stale-leader', plantedBugs: { readIndexWithoutHeartbeat: true } },
    expect: ['linearizability'],
    maxSeeds: 300,
  },
  {
    name: 'sendBeforeSync (driver): acknowledging before the disk has it',
    options: { faults: 'crashes', driverBugs: { sendBeforeSync: true } },
    // A follower that acknowledged entries it then lost in a crash is behind its match index
    // forever (the leader ignores its rejections below match): a liveness violation.
    expect: ['election-safety', 'leader-completeness', 'state-machine-safety', 'log-matching', 'linearizability', 'liveness'],
    maxSeeds: 400,
  },
  {
    name: 'ignoreSnapshot (driver): a snapshot installed in the log but not in the FSM',
    options: { faults: 'default', driverBugs: { ignoreSnapshot: true } },
    expect: ['state-machine-safety', 'linearizability'],
    maxSeeds: 50,
  },
];

for (const c of CASES) {
  t.test(c.name, async (t) => {
    for (let seed = 1; seed <= c.maxSeeds; seed++) {
      const r = runSimulation({ ...c.options, seed });
      if (r.ok || r.violation === undefined) continue;
      t.ok(c.expect.includes(r.violation.kind), `seed ${seed}: ${r.violation.kind} is one of ${c.expect.join(', ')}`);
      t.comment(`caught at seed ${seed} (step ${r.violation.step}, t=${r.violation.time}ms): ${r.violation.message.split('\n')[0] ?? ''}`);
      t.comment(`replay: ${replayCommand({ ...c.options, seed })}`);
      return;
    }
    t.fail(`no violation in ${c.maxSeeds} seeds: the simulator does not catch this bug`);
  });
}

t.test('liveness: a cluster that cannot commit in the budget after faults stop is reported', async (t) => {
  const r = runSimulation({ seed: 1, faults: 'none', livenessBudgetMs: 1 });
  t.equal(r.violation?.kind, 'liveness', r.violation?.message ?? 'no violation');
});

t.test('without planted bugs the same profiles pass', async (t) => {
  for (const c of CASES) {
    const { plantedBugs: _p, driverBugs: _d, ...clean } = c.options;
    for (let seed = 1; seed <= 5; seed++) {
      const r = runSimulation({ ...clean, seed });
      t.ok(r.ok, `${clean.faults ?? 'mixed'} seed ${seed}: ${r.violation?.message.split('\n')[0] ?? 'ok'}`);
    }
  }
});
