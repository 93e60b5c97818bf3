/**
 * A rolling restart under a continuous write load loses no acknowledged write: each node in
 * turn (followers first, the leader last, as an operator would) is stopped with SIGTERM, must
 * exit cleanly, is started again on its data dir, and must catch up (its applied index, from
 * GET /v1/agent/self, reaches the leader's commit index) before the next one goes. Two full
 * rounds, so the second round restarts nodes that were themselves restarted. At the end every
 * acknowledged write is read back from every node with the version it was acknowledged with.
 */
import t from 'tap';
import { Cluster, WriteLoad, now } from './harness.js';

t.test('a rolling restart under write load loses no acknowledged write', async (t) => {
  const cluster = await Cluster.start(t, { size: 3 });
  const load = new WriteLoad({ prefix: 'roll', workers: 3, targets: () => cluster.running().filter((n) => n.running()) }).start();
  await load.waitForMore(30);

  for (let round = 1; round <= 2; round++) {
    const { leader, followers } = await cluster.roles();
    for (const node of [...followers, leader]) {
      const before = load.count;
      const wasLeader = node === (await cluster.waitForLeader());
      const stop = await node.term();
      t.same({ code: stop.code, signal: stop.signal, forced: stop.forced }, { code: 0, signal: null, forced: false }, `round ${round}: ${node.id}${wasLeader ? ' (leader)' : ''} exited 0 on SIGTERM after ${Math.round(stop.ms)} ms`);
      if (wasLeader) {
        t.ok(node.logEvents('handed over leadership before stopping').length > 0, `round ${round}: the leader ${node.id} handed over leadership before stopping`);
      }
      const restartedAt = now();
      node.restart();
      await node.waitReady();
      const caught = await cluster.waitCaughtUp(node);
      t.comment(`round ${round}: ${node.id} back and caught up to index ${caught.target} ${Math.round(now() - restartedAt)} ms after its restart; ${load.count - before} writes acknowledged meanwhile`);
      // Writes go on while the node is away and after it is back.
      await load.waitForMore(20);
    }
  }

  await load.stop();
  t.comment(`load: ${load.summary()}`);
  t.same(load.refused, [], 'no write was refused');
  t.same(load.unknown, [], 'every write was eventually acknowledged');
  t.ok(load.count > 150, `${load.count} writes acknowledged during the restarts`);
  for (const n of cluster.running()) {
    const { set, versionMismatches } = await load.check(n);
    t.ok(set.valid, `node ${n.id}: all ${set.ok} acknowledged writes are there (lost: ${JSON.stringify(set.lost.slice(0, 10))}, unexpected: ${JSON.stringify(set.unexpected.slice(0, 10))}, duplicated: ${set.duplicated.length})`);
    t.same(versionMismatches.slice(0, 10), [], `node ${n.id}: each with the version it was acknowledged with`);
  }
});
