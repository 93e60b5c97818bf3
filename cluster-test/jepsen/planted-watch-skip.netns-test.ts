// `watch-skip-event` (src/server/planted-bugs.ts) through the whole harness (issue 8, Stage 7):
// 3 agents in network namespaces, all started with the bug, the watch workload, the pause
// nemesis; the watch checker must report the change every watch stream dropped as `missing`. The
// same run without the bug must be valid.
//
// Why it fails every time with the bug: every node drops the same change (the 10th it applies)
// from all of its watch streams, also after a restart (the log replays and drops it again). The
// watch workload's two early watchers get their initial state before the first write and watch
// the whole type, and its writers write far more than 10 changes in the first seconds, so both
// cover that revision; its writer's acknowledgement (or another observer: an initial state, a
// delete's last state, the final List) puts it in the derived history, and the gap between the
// two revisions a watcher received around it is reported. The fault (a pause) does not matter.
//
// Root only (setup.sh); run by `make cluster-test-selftest` and `make test-jepsen`. About 40 s.
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t, { type Test } from 'tap';
import { netnsSkip } from './netns-testing.js';
import { runJepsen, type RunResult } from './run.js';

const TIME_S = 10;
const SEED = 7;
const results = mkdtempSync(path.join(os.tmpdir(), 'cairn-jepsen-planted-'));
// Kept when a test failed: the reports and node logs say why.
t.teardown(() => (t.passing() ? rmSync(results, { recursive: true, force: true }) : t.comment(`results kept in ${results}`)));

function run(t: Test, plantedBugs: string[]): Promise<RunResult> {
  return runJepsen({ nodes: 3, timeS: TIME_S, nemesis: 'pause', workload: 'watch', seed: SEED, resultsDir: results, plantedBugs, log: (l) => t.comment(l) });
}

interface Report {
  watch: { valid: boolean; ok: number; eventsChecked: number; anomalies: { kind: string }[] };
}

t.test(`watch-skip-event through the harness (seed ${SEED}): a change missing from every stream is reported`, { skip: netnsSkip }, async (t) => {
  await t.test('with the bug', async (t) => {
    const r = await run(t, ['watch-skip-event']);
    const report = r.report as unknown as Report;
    t.equal(r.valid, false, 'the run is invalid');
    t.equal(report.watch.valid, false, 'the watch checker says invalid');
    t.ok(report.watch.anomalies.some((a) => a.kind === 'missing'), `a missing event is reported (${report.watch.anomalies.map((a) => a.kind).join(', ')})`);
  });
  await t.test('without the bug', async (t) => {
    const r = await run(t, []);
    const report = r.report as unknown as Report;
    t.equal(r.valid, true, 'the run is valid');
    t.ok(report.watch.eventsChecked > 0, `${report.watch.eventsChecked} events checked`);
  });
});
