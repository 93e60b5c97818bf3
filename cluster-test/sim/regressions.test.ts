/**
 * Seeds that once found a violation, kept so the bug stays fixed. To add one: copy the failing
 * run's options from its replay command (seed and any non-default flag) into REGRESSIONS with
 * one line on what broke and where it was fixed. A seed replays the same run only while the
 * simulator draws its randomness the same way; when a change to the simulator reshuffles the
 * draws, re-find a seed for the bug (replay still names the violation) or keep the entry as a
 * smoke test. (The crashes profile's disk stalls, added 2026-11-27, changed the runs of the
 * seeds that draw that profile: 167 and 217 below no longer replay the runs that found their
 * bugs, both fixed; they stay as smoke tests. On 2026-11-28 two changes reshuffled every seed's
 * run: snapshot chunks read back from disk as they are sent (one more step per chunk) and the
 * two-register transactions in the client workload; every entry below still passes, and those
 * found before that date are smoke tests until a seed is re-found for them.)
 */
import t from 'tap';
import { replayCommand, runSimulation, type SimulationOptions } from './simulation.js';

interface Regression {
  readonly options: SimulationOptions;
  /** What broke, and where it was fixed. */
  readonly why: string;
}

const REGRESSIONS: readonly Regression[] = [
  // Found by the 10,000-seed swarm on 28 Nov, once leaders read snapshot chunks back from disk:
  {
    options: { seed: 570 },
    why:
      'a leader whose snapshot file was pruned started a follower over on its newest snapshot while the follower was still installing the previous one; ' +
      'the follower took the new one, replacing the snapshot its driver was installing, and the driver stopped the node (src/raft/step-follower.ts: no chunks while an install is pending)',
  },
  { options: { seed: 444 }, why: 'same bug (a second snapshot taken while the first was being installed)' },
  {
    options: { seed: 287, durationMs: 20_000 },
    why:
      'simulator false positive: an append ack queued in term 10 was sent after a term-11 leader truncated the entry; ' +
      'the durable-before-send check now applies only while the node is still in the message term (now node.ts)',
  },
  { options: { seed: 231 }, why: 'snapshot chunk storm: stale acks and every heartbeat started new chunk/ack loops (fixed in src/raft/step-leader.ts)' },
  { options: { seed: 293, durationMs: 40_000 }, why: 'snapshot chunk storm (same bug, 40 s fault phase)' },
  { options: { seed: 25, snapshotChunkBytes: 256 }, why: 'snapshot chunk storm with 256-byte chunks (same bug)' },
  // Found once the simulator ran the shipped Replica (2026-11-27):
  {
    options: { seed: 48 },
    why: 'the shipped driver stopped a node: a snapshot asked for mid-Ready (snapshotNow) compacted the core beyond the index the core knew applied (src/replica/replica.ts: deferred to the next advance)',
  },
  { options: { seed: 85 }, why: 'same bug (compact beyond the applied index), early in a run' },
  { options: { seed: 187 }, why: 'same bug, at the third entry' },
  {
    options: { seed: 217 },
    why:
      'a crash between saving a leader-sent snapshot and writing its log batch left a log that ends before the snapshot; ' +
      'the next append left a gap the simulated disk refused (the real stores accept it: the disk model now does too)',
  },
  // Found by the pipelined driver (issue 17, 2026-11-27):
  {
    options: { seed: 42 },
    why:
      'simulator false positive: a leader removing a voter commits with the new configuration as soon as it is appended (thesis §4.1), ' +
      'before the pipelined driver writes it; the checker learned configurations only from log writes (now also from proposals, node.ts onConfigProposed)',
  },
  { options: { seed: 156 }, why: 'same false positive (commit under a configuration appended but not yet written)' },
  {
    options: { seed: 167, durationMs: 40_000 },
    why:
      'a stale read: a node restarted after a crash and its first read-index request reused the id of one it sent before the crash (the sequence started over); ' +
      'the leader answered the old request late with an older index, which released the new read early (src/replica/replica.ts: request ids carry the incarnation)',
  },
  {
    options: { seed: 798 },
    why: 'the pipelined driver sent a follower\'s read-index request in a term its disk did not hold yet (src/replica/replica.ts sendsNow: no message names a term that is not durable)',
  },
];

t.test('regression seeds pass', async (t) => {
  if (REGRESSIONS.length === 0) t.comment('no regression seeds recorded yet');
  for (const { options, why } of REGRESSIONS) {
    const r = await runSimulation(options);
    t.ok(r.ok, `${replayCommand(options)} (${why}): ${r.violation?.message ?? 'ok'}`);
  }
  t.pass('all recorded seeds replayed');
});
