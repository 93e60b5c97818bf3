// `stale-follower-read` (src/server/planted-bugs.ts) through the whole harness (issue 8, Stage 7:
// "planted bugs ... each of which must make the matching checker fail, and a test asserts it
// does"): 3 agents in network namespaces, all started with the bug, the register workload,
// nftables partitions; the linearizability checker must say NOT linearizable. The same run
// without the bug must be linearizable, so what is caught is the bug, not the scenario.
//
// Why it fails every time with the bug:
// - the nemesis is `partition` only and the seed is the first whose schedule cuts n1 off from
//   the other two, twice (seedWhere);
// - the clients are pinned (worker w talks to node w mod 3 only, Jepsen's client per node) with
//   a 1 s call deadline, so two of the 4 workers (w0, w3) sit on n1 and stay there. Their
//   writes time out after 1 s; between them their reads are answered at once from n1's frozen
//   state while the majority goes on writing the same 8 keys (tens to hundreds of writes a
//   second), so they read values that writes acknowledged before the read began had replaced:
//   not linearizable. Measured: 11 to 21 such reads per run (4 runs, load average 10 to 15);
//   even with unpinned clients and no partition, followers' reads lag the leader enough to be
//   caught.
// - without the bug the cut node's reads cannot confirm a read index and fail.
//
// Root only (setup.sh); run by `make cluster-test-selftest` and `make test-jepsen`. About 40 s.
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t, { type Test } from 'tap';
import { netnsSkip, seedWhere } from './netns-testing.js';
import { runJepsen, type RunResult } from './run.js';

const TIME_S = 12;
// Two partitions, each cutting n1 off: n1 is the node with two pinned workers (w0 and w3 of 4).
const seed = seedWhere(
  { nemeses: ['partition'], timeS: TIME_S },
  'two partitions, each of n1 from the rest',
  (s) => s.length >= 2 && s.every(({ fault: f }) => f.nemesis === 'partition' && f.mode === 'halves' && f.side.length === 1 && f.side[0] === 0),
);
const results = mkdtempSync(path.join(os.tmpdir(), 'cairn-jepsen-planted-'));
// Kept when a test failed: the reports and node logs say why.
t.teardown(() => (t.passing() ? rmSync(results, { recursive: true, force: true }) : t.comment(`results kept in ${results}`)));

function run(t: Test, plantedBugs: string[]): Promise<RunResult> {
  return runJepsen({ nodes: 3, timeS: TIME_S, nemesis: 'partition', workload: 'register', seed, resultsDir: results, plantedBugs, pinClients: true, clientTimeoutMs: 1000, log: (l) => t.comment(l) });
}

interface Report {
  register: { valid: unknown; ok: number; anomalies: string[] };
  faults: { nemesis: string; label: string }[];
}

t.test(`stale-follower-read through the harness (seed ${seed}): partitions, pinned clients, the register is not linearizable`, { skip: netnsSkip }, async (t) => {
  await t.test('with the bug', async (t) => {
    const r = await run(t, ['stale-follower-read']);
    const report = r.report as unknown as Report;
    t.equal(report.faults.filter((f) => f.nemesis === 'partition').length, 2, 'two partitions were injected');
    t.ok(report.faults.every((f) => f.label.includes('({n1} | {n2,n3})')), 'each cut n1 off');
    t.equal(r.valid, false, 'the run is invalid');
    t.equal(report.register.valid, false, 'the linearizability checker says not linearizable');
    t.ok(
      report.register.anomalies.some((a) => /stuck at the completion of p\d+ read "jr-k\d+" -> "v\d+"/.test(a)),
      'an anomaly is a read that returned a value already overwritten',
    );
  });
  await t.test('without the bug', async (t) => {
    const r = await run(t, []);
    const report = r.report as unknown as Report;
    t.equal(report.faults.filter((f) => f.nemesis === 'partition').length, 2, 'the same two partitions');
    t.equal(r.valid, true, `the run is valid: ${report.register.anomalies.join('\n')}`);
    t.ok(report.register.ok > 0, `${report.register.ok} ok operations`);
  });
});
