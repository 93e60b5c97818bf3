/**
 * A killed leader is noticed by its broken connections, not by the election timeout: when the
 * leader's process is SIGKILLed, the kernel resets its connections at once, each follower's
 * cluster port sees the leader's Raft stream break, and the followers campaign within a few
 * ticks (--leader-lost-ticks, default 3). A paused leader (SIGSTOP) keeps its connections,
 * so the followers wait out the election timeout as before.
 *
 * To tell the two paths apart by behaviour rather than by timing, the survivors run with an
 * election timeout of 10-20 s (--election-ticks 100 at --tick-ms 100, set here: the default tick is 40 ms): after the
 * kill a new leader and an acknowledged write must come long before the first follower could
 * time out (the margin is seconds, not milliseconds); after the pause, nothing may happen for
 * as long.
 *
 * The cluster forms with the default timing (a first election with a 10-20 s timeout would
 * make the test slow), then each follower restarts with the long timeout: only the survivors'
 * timeouts matter.
 */
import t from 'tap';
import { Cluster, now, put, sleep, until, type ClusterNode } from './harness.js';

/** The election timeout is 100-199 ticks of 100 ms: no follower times out before 10 s. */
const LONG_TIMEOUT = ['--tick-ms', '100', '--election-ticks', '100'];
const TIMEOUT_MS = 10_000;
/** What the replica logs when its core arms the early campaign. */
const EARLY = 'the connection to the leader broke; campaigning early unless it is heard from again';

/** Writes to the nodes in turn, each write retried under its own key, until one is acknowledged or `deadline` (performance.now()) passes. */
async function writeUntil(nodes: readonly ClusterNode[], name: string, deadline: number): Promise<{ ackedAt: number; via: string } | undefined> {
  for (let i = 0; now() < deadline; i++) {
    const node = nodes[i % nodes.length] as ClusterNode;
    const r = await put(node, { name, key: `${name}.key`, data: { name } }, Math.max(1, Math.min(3000, deadline - now())));
    if (r.status === 200) return { ackedAt: now(), via: node.id };
    await sleep(20);
  }
  return undefined;
}

t.test('kill -9 of the leader: the survivors elect a new leader long before their election timeout; SIGSTOP: they wait it out', async (t) => {
  const cluster = await Cluster.start(t, { size: 3 });
  const { leader, followers } = await cluster.roles();
  for (const f of followers) {
    await f.term();
    f.restartWith(LONG_TIMEOUT);
    await f.waitReady();
    await cluster.waitCaughtUp(f);
  }
  t.equal((await cluster.roles()).leader, leader, `${leader.id} still leads; its followers now run with a 10-20 s election timeout`);
  const before = await writeUntil(followers, 'before-kill', now() + 15_000);
  t.ok(before, 'a write through a follower is acknowledged before the kill');

  // ---- kill -9 -----------------------------------------------------------------------------
  const killedAt = now();
  await leader.kill9();
  const acked = await writeUntil(followers, 'after-kill', killedAt + TIMEOUT_MS - 2000);
  t.ok(acked, `a write was acknowledged ${acked ? Math.round(acked.ackedAt - killedAt) : '-'} ms after the kill (via ${acked?.via ?? '-'}), before any survivor's election timeout (>= ${TIMEOUT_MS} ms)`);
  const newLeader = await cluster.waitForLeader({ among: followers, timeoutMs: 20_000 });
  t.not(newLeader, leader, `${newLeader.id} leads`);
  const early = followers.filter((f) => f.logEvents(EARLY).some((e) => e['pid'] === f.pid)).map((f) => f.id);
  t.ok(early.length > 0, `the broken connection armed an early campaign on ${early.join(', ') || 'no survivor'} (their log says so)`);

  // ---- SIGSTOP -----------------------------------------------------------------------------
  // The killed node comes back with the long timeout too; then the leader is paused.
  leader.restartWith(LONG_TIMEOUT);
  await leader.waitReady();
  await cluster.waitCaughtUp(leader);
  const { leader: paused, followers: others } = await cluster.roles();
  const earlyBefore = new Map(others.map((n) => [n.id, n.logEvents(EARLY).length]));
  const termBefore = (await until(`${paused.id}'s status`, 5000, () => paused.self())).term;
  paused.pause();
  const pausedAt = now();
  try {
    // For 3 s (a false trigger would elect within a few hundred ms), every other node keeps
    // following the paused leader in the same term.
    let seen = '';
    while (now() - pausedAt < 3000) {
      const selves = await Promise.all(others.map(async (n) => ({ n, s: await n.self() })));
      seen = selves.map(({ n, s }) => `${n.id}: ${s ? `${s.role} t${s.term} leader=${s.leader ?? '-'}` : 'no answer'}`).join(', ');
      const moved = selves.filter(({ s }) => s === undefined || s.role !== 'follower' || s.leader !== paused.id || s.term !== termBefore);
      if (moved.length > 0) break;
      await sleep(200);
    }
    t.ok(now() - pausedAt >= 3000, `for 3 s after SIGSTOP of ${paused.id} the others still follow it in term ${termBefore} (${seen})`);
    t.same(
      others.map((n) => n.logEvents(EARLY).length),
      others.map((n) => earlyBefore.get(n.id)),
      'no early campaign was armed: a paused process breaks no connection',
    );
  } finally {
    paused.resume();
  }
  const resumed = await writeUntil(cluster.running(), 'after-resume', now() + 15_000);
  t.ok(resumed, `after SIGCONT a write is acknowledged (via ${resumed?.via ?? '-'})`);
  t.equal((await cluster.roles()).leader, paused, `${paused.id} led throughout the pause`);
});
