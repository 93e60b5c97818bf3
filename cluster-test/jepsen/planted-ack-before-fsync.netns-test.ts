// `ack-before-fsync` (src/server/planted-bugs.ts) through the whole harness (issue 8, Stage 7):
// 3 agents in network namespaces, all started with the bug, the set workload, the kill nemesis;
// the set checker must find acknowledged adds lost. The same run without the bug must be valid.
//
// Why it fails every time with the bug: the bug holds each acknowledged log batch in process
// memory for 2 s before writing it. Killing one node loses nothing (the others hold the entries
// and repair it), so the seed is the first whose schedule starts with `kill -9 every node`
// (seedWhere; the kill nemesis draws it for a share of kills, KILL_ALL_SHARE). It strikes 2 s
// into the workload, when every add acknowledged so far (about 2 s of them, hundreds) sits in
// memory on every node: after the restart they are gone from the final read, which the set
// checker reports as `lost`. Without the bug each batch is fsynced before it is acknowledged.
//
// Root only (setup.sh); run by `make cluster-test-selftest` and `make test-jepsen`. About 30 s.
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t, { type Test } from 'tap';
import { netnsSkip, seedWhere } from './netns-testing.js';
import { runJepsen, type RunResult } from './run.js';

const TIME_S = 8;
const seed = seedWhere({ nemeses: ['kill'], timeS: TIME_S }, 'kill -9 of every node first', (s) => s[0]?.fault.nemesis === 'kill' && s[0].fault.target.kind === 'all');
const results = mkdtempSync(path.join(os.tmpdir(), 'cairn-jepsen-planted-'));
// Kept when a test failed: the reports and node logs say why.
t.teardown(() => (t.passing() ? rmSync(results, { recursive: true, force: true }) : t.comment(`results kept in ${results}`)));

function run(t: Test, plantedBugs: string[]): Promise<RunResult> {
  return runJepsen({ nodes: 3, timeS: TIME_S, nemesis: 'kill', workload: 'set', seed, resultsDir: results, plantedBugs, log: (l) => t.comment(l) });
}

interface Report {
  set: { valid: boolean; ok: number; lost: string[]; unexpected: string[]; anomalies: string[] };
  faults: { nemesis: string; label: string }[];
}

t.test(`ack-before-fsync through the harness (seed ${seed}): kill -9 of every node, acknowledged adds are lost`, { skip: netnsSkip }, async (t) => {
  await t.test('with the bug', async (t) => {
    const r = await run(t, ['ack-before-fsync']);
    const report = r.report as unknown as Report;
    t.match(report.faults[0]?.label ?? '', /^kill -9 every node/, 'every node was killed at once');
    t.equal(r.valid, false, 'the run is invalid');
    t.equal(report.set.valid, false, 'the set checker says invalid');
    t.ok(report.set.lost.length > 0, `${report.set.lost.length} acknowledged adds lost`);
    t.same(report.set.unexpected, [], 'nothing appeared that was not added');
    t.match(report.set.anomalies.join('\n'), /acknowledged adds lost: js-\d+-\d+ \(add ok /, 'the anomaly names the lost adds and their acknowledged intervals');
  });
  await t.test('without the bug', async (t) => {
    const r = await run(t, []);
    const report = r.report as unknown as Report;
    t.match(report.faults[0]?.label ?? '', /^kill -9 every node/, 'the same kill of every node');
    t.equal(r.valid, true, `the run is valid: ${report.set.anomalies.join('\n')}`);
    t.ok(report.set.ok > 0, `${report.set.ok} acknowledged adds, all present`);
  });
});
