/**
 * A node that comes back with an empty data dir rejoins through a snapshot. The cluster takes
 * snapshots every 50 entries (--snapshot-entries 50, --snapshot-log-percent 0: no byte trigger).
 * A snapshot keeps the 1,000 entries before it in the log (--snapshot-retain-entries 1000; the
 * default is 10,000), so the leader
 * can only no longer replicate from index 1 once its snapshot index is past ~1,050: the test
 * writes until the leader's snapshot index is past 1,100. Then a follower is stopped, removed
 * from the configuration
 * (DELETE /v1/operator/raft/peers/{id}), its data dir wiped, and it is started again with
 * --join as a fresh node with the same id. It must be added as a learner, receive a snapshot
 * (its log says 'installed snapshot from leader'; GET /v1/agent/self reports a snapshot index),
 * catch up, be promoted, and serve every write, old and new, from its own store.
 */
import t from 'tap';
import { ARTIST, Cluster, WriteLoad, describeConfiguration, describeResult, field, get, request, until, type ClusterNode } from './harness.js';

const SNAPSHOT_ENTRIES = 50;
/** 1,000 retained entries + one snapshot interval + margin. */
const COMPACTED_PAST = 1100;

t.test('a wiped node rejoins through a snapshot and catches up', async (t) => {
  const cluster = await Cluster.start(t, { size: 3, snapshotEntries: SNAPSHOT_ENTRIES, flags: ['--snapshot-log-percent', '0', '--snapshot-retain-entries', '1000'] });
  const load = new WriteLoad({ prefix: 'snap', workers: 4, targets: () => cluster.running() }).start();
  const { leader, followers } = await cluster.roles();
  const victim = followers[0] as ClusterNode;
  const ls = await until(
    `the leader's snapshot index to pass ${COMPACTED_PAST}`,
    90_000,
    async () => {
      const s = await leader.self();
      return s !== undefined && s.snapshotIndex > COMPACTED_PAST ? s : undefined;
    },
    () => load.summary(),
    250,
  );
  await load.stop();
  t.same(load.unknown, [], `${load.count} writes acknowledged before the wipe`);
  t.ok(ls.snapshotIndex > COMPACTED_PAST, `the leader ${leader.id} has taken a snapshot at index ${ls.snapshotIndex} (last index ${ls.lastIndex}): its log no longer starts at index 1`);
  t.ok(leader.logEvents('took snapshot').length >= 2, `the leader logged 'took snapshot' ${leader.logEvents('took snapshot').length} times`);

  // Stop, remove, wipe.
  const stop = await victim.term();
  t.equal(stop.code, 0, `follower ${victim.id} stopped cleanly`);
  const del = await request(`${leader.url}/v1/operator/raft/peers/${victim.id}`, { method: 'DELETE', timeoutMs: 15_000 });
  t.equal(del.status, 200, `DELETE /v1/operator/raft/peers/${victim.id}: ${describeResult(del)} ${JSON.stringify(del.body)}`);
  await cluster.waitConfiguration(`${victim.id} to be removed`, (c) => !c.servers.some((s) => s.id === victim.id));
  await victim.wipe();

  // More writes while it is away: the snapshot it gets must be newer than anything it had.
  const more = new WriteLoad({ prefix: 'snap2', workers: 2, targets: () => cluster.running() }).start();
  await more.waitForMore(100);

  // Back as a fresh node with the same id, joining through the others.
  victim.startWith(['--join', cluster.running().map((n) => n.grpcAddr).join(',')]);
  const joined = await cluster.waitConfiguration(`${victim.id} to be a voter again`, (c) => c.servers.some((s) => s.id === victim.id && s.suffrage === 'voter'), { among: cluster.running().filter((n) => n !== victim) });
  t.pass(`${victim.id} is a member again: ${describeConfiguration(joined)}`);
  await victim.waitReady();
  await more.stop();
  const caught = await cluster.waitCaughtUp(victim);
  t.comment(`${victim.id} caught up to index ${caught.target}`);

  const installs = victim.logEvents('installed snapshot from leader');
  t.ok(installs.length > 0, `${victim.id} logged 'installed snapshot from leader' (${installs.map((e) => `index ${String(e['index'])}, ${String(e['bytes'])} bytes`).join('; ')})`);
  const self = await until(`${victim.id} status`, 5000, () => victim.self());
  t.ok(self.snapshotIndex > 0, `${victim.id} reports snapshot index ${self.snapshotIndex} > 0 (applied ${self.appliedIndex})`);
  t.ok(victim.logEvents('asked the leader to add this node as a learner').length > 0, `${victim.id} asked to be added as a learner`);
  const promoted = cluster.nodes.flatMap((n) => n.logEvents('promoting caught-up learner to voter').filter((e) => e['learner'] === victim.id));
  t.ok(promoted.length > 0, `the leader promoted ${victim.id} once it had caught up`);

  // Everything, old and new, from the rejoined node's own store.
  for (const l of [load, more]) {
    const { set, versionMismatches } = await l.check(victim);
    t.ok(set.valid, `${victim.id} lists all ${set.ok} acknowledged '${l === load ? 'snap' : 'snap2'}' writes (lost: ${JSON.stringify(set.lost.slice(0, 10))}, unexpected: ${set.unexpected.length})`);
    t.same(versionMismatches.slice(0, 10), [], 'each with the version it was acknowledged with');
  }
  // And a few one by one, linearizably, stale too (its own store, no leader round trip).
  const sample = [...load.acks.slice(0, 5), ...more.acks.slice(-5)];
  for (const a of sample) {
    const r = await get(victim, ARTIST, a.name, { consistency: 'stale' });
    t.equal(field(r.body, 'version'), a.version, `${victim.id} serves ${a.name} at version ${a.version} from its own store`);
  }
});
