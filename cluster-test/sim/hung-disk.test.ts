/**
 * The `hung-disk` fault profile in CI (it is not part of 'mixed'): leaders' fsyncs held for
 * several election timeouts, and the replica's hand-off after `writeStallMs` (src/replica/README.md,
 * "A hung disk"), with every invariant checked as in the swarm. Seeds are few: the swarm halves
 * carry the rest of the CI budget (`node dist/cluster-test/sim/cli.js swarm --faults hung-disk` for more).
 */
import t from 'tap';
import { replayCommand, runSimulation } from './simulation.js';

const SEEDS = 16;

t.test(`${SEEDS} seeds of the hung-disk profile: no violations, and hung leaders hand over`, async (t) => {
  const failed: number[] = [];
  let stalls = 0;
  let handOffs = 0;
  for (let seed = 1; seed <= SEEDS; seed++) {
    const r = await runSimulation({ seed, faults: 'hung-disk', log: true });
    stalls += r.stats.diskStalls;
    handOffs += (r.eventLog ?? '').split('handing leadership to a follower').length - 1;
    if (!r.ok && r.violation !== undefined) {
      failed.push(seed);
      t.fail(`seed ${seed}: ${r.violation.kind} at step ${r.violation.step}`, { message: r.violation.message, replay: replayCommand({ seed, faults: 'hung-disk' }) });
    }
  }
  t.same(failed, [], 'no seed found a violation');
  t.ok(stalls > SEEDS, `disks stalled (${stalls} stalls)`);
  t.ok(handOffs > 0, `stalled leaders handed leadership over (${handOffs} times)`);
});
