/**
 * Pauses do not start elections (issue 17: a short election timeout must not let a garbage
 * collection, a slow disk or a stalled event loop depose a healthy leader).
 *
 * A Node process that was paused (a GC, a synchronous stall, SIGSTOP, a CPU it waited for)
 * wakes in its event loop's timers phase: its Raft tick may run before it reads the messages
 * that queued up in its sockets meanwhile. Two rules keep that from costing an election:
 *
 * 1. A paused FOLLOWER that ticks past its election timeout before reading the leader's queued
 *    heartbeats campaigns, but only with a pre-vote (thesis §9.6), which changes no term, and
 *    the others refuse it while they hear from the leader (the lease, thesis §4.2.3): the leader
 *    keeps its term. Without pre-vote the same pause deposes it (shown below).
 * 2. A paused LEADER wakes with ONE tick, not one per tick-length it slept: the driver's ticker
 *    is a Node interval, which fires once after a stall instead of catching up
 *    (src/platform/timers.test.ts proves that on the real event loop). So the leader's
 *    check-quorum clock (thesis §6.2) counts only ticks it was awake for, and the answers
 *    queued during the pause are read before it next checks. A ticker that caught up (a tick per
 *    elapsed tickMs of wall time) would make it step down on waking (shown below).
 *
 * Time is ticks; nothing sleeps. Messages "queued in the socket" are held in the senders'
 * outboxes (TestCluster.pump) and delivered when the paused node reads again.
 */
import t from 'tap';
import { TestCluster, type ClusterOptions } from './testing/cluster.js';
import type { Message } from './types.js';

const T = 10; // electionTimeoutTicks (randomized in [T, 2T))

function term(c: TestCluster, id: string): number {
  return c.node(id).raw.status().term;
}

function leaderWithSteadyTraffic(opts: ClusterOptions): TestCluster {
  const c = new TestCluster({ electionTimeoutTicks: T, ...opts });
  c.bootstrap(['n1', 'n2', 'n3']);
  c.elect('n1');
  c.tickAndStabilize(3 * T);
  return c;
}

/**
 * n3 is paused for `pauseTicks` of the others' ticks: n1 and n2 go on (their messages to n3
 * queue up); then n3 wakes, ticks `wakeTicks` times before reading anything (the timers phase
 * first), and only then reads its queue. Returns the leader's term before and after.
 */
function pauseFollower(c: TestCluster, pauseTicks: number, wakeTicks: number): { before: number; after: number; campaigned: boolean } {
  const before = term(c, 'n1');
  const notN3 = (m: Message): boolean => m.to !== 'n3' && m.from !== 'n3';
  for (let i = 0; i < pauseTicks; i++) {
    c.tick('n1');
    c.tick('n2');
    c.pump(notN3);
  }
  c.tick('n3', wakeTicks);
  const out = c.takeMessages('n3');
  const campaigned = out.some((m) => m.type === 'pre-vote' || m.type === 'vote');
  for (const m of out) c.inject(m);
  c.stabilize();
  // The cluster goes on: the old leader still leads after more time.
  c.tickAndStabilize(3 * T);
  return { before, after: term(c, 'n1'), campaigned };
}

t.test('a follower that wakes from a pause and ticks past its election timeout before reading its queue does not depose the leader (pre-vote, lease)', async (t) => {
  const c = leaderWithSteadyTraffic({});
  const r = pauseFollower(c, 5 * T, 2 * T);
  t.ok(r.campaigned, 'the woken follower did campaign (its timeout passed before it read the heartbeats)');
  t.equal(c.leader(), 'n1', 'n1 still leads');
  t.equal(r.after, r.before, 'in the same term: no election happened');
  t.equal(c.node('n3').raw.status().leader, 'n1', 'n3 follows n1 again');
});

t.test('planted: without pre-vote the same follower pause deposes the leader (the test above can fail)', async (t) => {
  const c = leaderWithSteadyTraffic({ preVote: false });
  const r = pauseFollower(c, 5 * T, 2 * T);
  t.ok(r.campaigned, 'the woken follower campaigned');
  t.ok(r.after > r.before, `the term moved on (${r.before} -> ${r.after}): a needless election`);
});

/**
 * The leader is paused after sending heartbeats at every phase of its check-quorum period: the
 * followers' answers queue up; it wakes, ticks `wakeTicks` times, then reads them. Returns the
 * phases (0..T-1, ticks after a warm-up) at which it stepped down.
 */
function pauseLeaderAtEveryPhase(wakeTicks: number): number[] {
  const stepped: number[] = [];
  for (let phase = 0; phase < T; phase++) {
    const c = new TestCluster({ electionTimeoutTicks: T });
    c.bootstrap(['n1', 'n2', 'n3']);
    c.elect('n1');
    c.tickAndStabilize(2 * T + phase);
    // Its last tick before the pause: heartbeats out, answered, the answers not yet read.
    c.tickAll();
    c.pump((m) => m.to !== 'n1');
    // Awake: the timers phase first, then the queued answers.
    c.tick('n1', wakeTicks);
    c.stabilize();
    if (c.node('n1').raw.status().role !== 'leader') stepped.push(phase);
  }
  return stepped;
}

t.test('a leader that wakes from a pause with one tick does not step down before reading the answers queued meanwhile (check-quorum)', async (t) => {
  t.same(pauseLeaderAtEveryPhase(1), [], 'at no phase of its check-quorum period');
});

t.test('planted: a ticker that caught up on the ticks a pause missed makes the leader step down on waking (the test above can fail)', async (t) => {
  // A pause of two election timeouts, caught up on: the leader steps down whatever its phase.
  const stepped = pauseLeaderAtEveryPhase(2 * T);
  t.equal(stepped.length, T, `stepped down at phases ${stepped.join(', ')} of 0..${T - 1}`);
});
