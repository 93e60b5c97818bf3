// Suite mode without root: the plan (runs, lengths, seeds), the summaries, and runSuite over a
// fake run (verdicts, exit codes, files, a harness error that does not stop the suite).
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { parsePlantedBugs, parseWorkloads, replayCommand, runSuite, WORKLOADS, type RunOptions, type RunResult } from './run.js';
import { NEMESES } from './schedule.js';
import { MIN_RUN_S, planSuite, renderSuiteHtml, renderSuiteText, runSeed, suiteExitCode, suiteVerdict, type SuiteRunSummary } from './suite.js';

t.test('a suite is one run per nemesis, then all together; TIME is split evenly', async (t) => {
  const p = planSuite({ seed: 7, nemeses: ['partition', 'kill', 'pause', 'netem'], timeS: 600 });
  t.same(p.runs.map((r) => r.label), ['partition', 'kill', 'pause', 'netem', 'mixed']);
  t.same(p.runs.map((r) => r.nemeses), [['partition'], ['kill'], ['pause'], ['netem'], ['partition', 'kill', 'pause', 'netem']]);
  t.ok(p.runs.every((r) => r.timeS === 120), '600 s over 5 runs');
  t.equal(p.note, undefined);
  t.same(planSuite({ seed: 7, nemeses: ['kill'], timeS: 30 }).runs.map((r) => [r.label, r.timeS]), [['kill', 30]], 'one nemesis: no mixed run');
  t.same(planSuite({ seed: 7, nemeses: ['kill', 'pause'], timeS: 30, mixed: false }).runs.map((r) => r.label), ['kill', 'pause']);
  t.ok(planSuite({ seed: 7, nemeses: ['kill', 'pause'], timeS: 999, runTimeS: 12 }).runs.every((r) => r.timeS === 12), '--run-time wins over --time');
});

t.test('runs are never shorter than the minimum; the plan says so', async (t) => {
  const p = planSuite({ seed: 7, nemeses: ['partition', 'kill', 'pause', 'netem'], timeS: 30 });
  t.ok(p.runs.every((r) => r.timeS === MIN_RUN_S));
  t.match(p.note, /30 s split over 5 runs is under 10 s each: each run takes 10 s \(50 s in all\)/);
  t.throws(() => planSuite({ seed: 7, nemeses: ['kill'], timeS: 30, runTimeS: 5 }), /--run-time must be at least 10 s/);
  t.throws(() => planSuite({ seed: 7, nemeses: [], timeS: 30 }), /at least one nemesis/);
});

t.test("a run's seed depends on the suite's seed and its label only", async (t) => {
  const a = planSuite({ seed: 7, nemeses: ['partition', 'kill'], timeS: 60 });
  const b = planSuite({ seed: 7, nemeses: ['kill', 'pause', 'partition'], timeS: 60 });
  t.equal(a.runs.find((r) => r.label === 'kill')?.seed, b.runs.find((r) => r.label === 'kill')?.seed, 'adding a nemesis keeps the others');
  t.equal(a.runs[0]?.seed, runSeed(7, 'partition'));
  t.not(runSeed(7, 'kill'), runSeed(8, 'kill'), 'another suite seed, another run seed');
  t.not(runSeed(7, 'kill'), runSeed(7, 'pause'), 'another nemesis, another seed');
  const seeds = new Set(NEMESES.map((n) => runSeed(7, n)));
  t.equal(seeds.size, NEMESES.length);
  for (const s of seeds) t.ok(Number.isSafeInteger(s) && s >= 0 && s < 2 ** 31, `seed ${s} is a valid --seed`);
});

const run = (over: Partial<SuiteRunSummary>): SuiteRunSummary => ({
  label: 'kill',
  nemeses: ['kill'],
  seed: 1,
  timeS: 10,
  verdict: 'valid',
  ops: 10,
  ok: 8,
  fail: 1,
  info: 1,
  faults: 1,
  nemesisErrors: 0,
  anomalies: [],
  dir: '01-kill-seed1',
  replay: 'node run.js --seed 1',
  durationS: 15,
  ...over,
});

t.test('verdicts, exit codes and the text and HTML summaries', async (t) => {
  t.equal(suiteVerdict([run({}), run({})]), 'valid');
  t.equal(suiteVerdict([run({}), run({ verdict: 'unknown' })]), 'unknown');
  t.equal(suiteVerdict([run({ verdict: 'unknown' }), run({ verdict: 'invalid' })]), 'invalid');
  t.equal(suiteVerdict([run({ verdict: 'invalid' }), run({ verdict: 'error' })]), 'error');
  t.same(['valid', 'invalid', 'unknown', 'error'].map((v) => suiteExitCode(v as 'valid')), [0, 1, 1, 2]);
  const s = {
    seed: 5,
    nodes: 3,
    workloads: ['register', 'set'],
    plantedBugs: [],
    verdict: 'invalid' as const,
    durationS: 40,
    replay: 'node run.js --suite --seed 5',
    runs: [run({}), run({ label: 'pause', verdict: 'invalid', anomalies: ['key "a" is not linearizable\n  p1 read <x>'], replay: 'node run.js --seed 2' })],
  };
  const text = renderSuiteText(s);
  t.match(text, /^suite seed 5: 3 nodes, workloads register,set, 2 runs, 40 s\nverdict: INVALID\nreplay the suite: node run.js --suite --seed 5\n/);
  t.match(text, /kill +1 +10s VALID +10 +8 +1 +1 +1 +0 {2}01-kill-seed1/);
  t.match(text, /pause \(seed 1\): INVALID\n {2}replay alone: node run.js --seed 2\n {2}key "a" is not linearizable\n {4}p1 read <x>/);
  const html = renderSuiteHtml(s);
  t.match(html, /<img src="01-kill-seed1\/timeline.svg"/, 'each run timeline is shown');
  t.match(html, /p1 read &lt;x&gt;/, 'anomalies are escaped');
});

t.test('parseWorkloads, parsePlantedBugs and the replay command', async (t) => {
  t.same(parseWorkloads('all'), [...WORKLOADS]);
  t.same(parseWorkloads('set, register'), ['set', 'register']);
  t.throws(() => parseWorkloads('queue'), /unknown workload 'queue'/);
  t.same(parsePlantedBugs('stale-follower-read, ack-before-fsync'), ['stale-follower-read', 'ack-before-fsync']);
  t.same(parsePlantedBugs(''), []);
  t.throws(() => parsePlantedBugs('fast-reads'), /unknown planted bug 'fast-reads' \(known: .*stale-follower-read/);
  t.equal(
    replayCommand({ nodes: 3, timeS: 12, nemesis: 'kill', workload: 'all', seed: 9, plantedBugs: ['ack-before-fsync'], pinClients: true, clientTimeoutMs: 1000 }),
    `node dist/cluster-test/jepsen/run.js --nodes 3 --time 12 --nemesis kill --workload ${WORKLOADS.join(',')} --seed 9 --planted-bugs ack-before-fsync --pin-clients --client-timeout-ms 1000`,
  );
});

t.test('runSuite: every run on its own, an invalid run or a harness error sets the verdict, the suite goes on', async (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'cairn-suite-test-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const seen: RunOptions[] = [];
  const fake = async (o: RunOptions): Promise<RunResult> => {
    seen.push(o);
    if (o.nemesis === 'pause') throw new Error('timed out after 60000 ms waiting for every node ready');
    const valid = o.nemesis !== 'kill';
    return { valid, dir: path.join(o.resultsDir ?? '', o.name ?? ''), report: {}, totals: { ops: 100, ok: 90, fail: 5, info: 5, faults: 2, nemesisErrors: 0, anomalies: valid ? [] : ['set: 3 acknowledged adds lost: ...'] } };
  };
  const lines: string[] = [];
  const r = await runSuite({ nodes: 3, timeS: 60, nemesis: 'partition,kill,pause', workload: 'all', seed: 21, resultsDir: dir, plantedBugs: ['ack-before-fsync'], log: (l) => lines.push(l) }, { run: fake, cleanup: () => ['netns cairn-j0001-n1'] });
  t.same(seen.map((o) => o.nemesis), ['partition', 'kill', 'pause', 'partition,kill,pause'], 'each nemesis alone, then all together');
  t.ok(seen.every((o) => o.timeS === 15 && o.workload === WORKLOADS.join(',') && o.plantedBugs?.[0] === 'ack-before-fsync'), '60 s over 4 runs, every workload, the planted bugs passed on');
  t.same(seen.map((o) => o.seed), ['partition', 'kill', 'pause', 'mixed'].map((l) => runSeed(21, l)));
  t.equal(new Set(seen.map((o) => o.name)).size, 4, 'a directory per run');
  t.equal(r.summary.verdict, 'error');
  t.same(r.summary.runs.map((x) => x.verdict), ['valid', 'invalid', 'error', 'valid']);
  t.match(r.summary.runs[2]?.error, /waiting for every node ready/);
  t.equal(suiteExitCode(r.summary.verdict), 2);
  const json = JSON.parse(readFileSync(path.join(r.dir, 'suite.json'), 'utf8')) as { runs: { label: string; seed: number; anomalies: string[] }[] };
  t.same(json.runs.map((x) => x.label), ['partition', 'kill', 'pause', 'mixed']);
  t.same(json.runs[1]?.anomalies, ['set: 3 acknowledged adds lost: ...']);
  t.match(readFileSync(path.join(r.dir, 'suite.txt'), 'utf8'), /replay alone: node dist\/cluster-test\/jepsen\/run.js --nodes 3 --time 15 --nemesis kill .*--planted-bugs ack-before-fsync/);
  t.match(readFileSync(path.join(r.dir, 'suite.html'), 'utf8'), /<h1>Suite seed 21: /);
  t.match(lines.join('\n'), /suite: removed leftovers of an earlier run: netns cairn-j0001-n1/);
  t.match(lines.join('\n'), /suite \[2\/4\] kill: INVALID in \d+ s; 100 ops \(90 ok, 5 fail, 5 unknown\), 2 faults, 1 anomalies; 2 runs \(30 s of workload\) to go/);
});
