/**
 * Built-in controllers run on the Raft leader only, and resume on the new leader after kill -9
 * of the old one. Three real `cairn agent --demo-types --demo-controllers` processes; the demo
 * controller gives every demo.v1.Artist an `Accepted` status for its current generation.
 *
 * 1. Artists written before the kill converge; only the leader's log says its controllers run.
 * 2. SIGKILL the leader. Artists written after the kill, and a new generation of old ones,
 *    converge too: the controllers started on the new leader (its log says so; the other
 *    survivor's does not).
 */
import t from 'tap';
import { CairnClient, type Resource } from '../../src/client/index.js';
import { DEMO_ARTIST_CONTROLLER } from '../../src/controller/index.js';
import { ARTIST, Cluster, now, until, type ClusterNode } from './harness.js';

const NAMESPACE = 'ctl';
const RUNNING = 'caches synced; controllers running';

/** Whether the node's log says its controllers run now: its last leadership line is a start. */
function runsControllers(n: ClusterNode): boolean {
  const lines = n.log().split('\n').filter((l) => l.includes('"msg":"leading: starting"') || l.includes('"msg":"not leading: stopping"'));
  return lines.at(-1)?.includes('"msg":"leading: starting"') === true && n.logEvents(RUNNING).length > 0;
}

/** Waits until the leader among `among`, and only it, runs the controllers (as its log says). */
async function onlyLeaderRuns(cluster: Cluster, among: readonly ClusterNode[]): Promise<{ leader: ClusterNode; followers: ClusterNode[] }> {
  let seen = '';
  return until(
    'the leader, and only the leader, to run the controllers',
    30_000,
    async () => {
      const roles = await cluster.roles({ among });
      seen = among.map((n) => `${n.id}${n === roles.leader ? '*' : ''}:${runsControllers(n) ? 'runs' : 'idle'}`).join(' ');
      return runsControllers(roles.leader) && roles.followers.every((f) => !runsControllers(f)) ? roles : undefined;
    },
    () => seen,
  );
}

function current(r: Resource<unknown>): boolean {
  const s = r.status[DEMO_ARTIST_CONTROLLER];
  return s !== undefined && s.observed_generation === r.generation && s.conditions.some((c) => c.type === 'Accepted' && c.state === 'TRUE');
}

t.test('leader-only controllers: converge, kill -9 the leader, resume on the new leader and converge again', async (t) => {
  const cluster = await Cluster.start(t, { size: 3, flags: ['--demo-controllers'] });
  const client = new CairnClient({ endpoints: cluster.nodes.map((n) => n.grpcAddr), timeoutMs: 20_000, ...(await cluster.clientOptions()) });
  t.teardown(() => client.close());

  let last = '';
  const converged = async (names: readonly string[]): Promise<true | undefined> => {
    const { resources } = await client.list(ARTIST, { namespace: NAMESPACE });
    const byName = new Map(resources.map((r) => [r.id.name, r]));
    const waiting = names.filter((n) => {
      const r = byName.get(n);
      return r === undefined || !current(r);
    });
    last = `${waiting.length} of ${names.length} without a current status: ${waiting.slice(0, 5).join(', ')}`;
    return waiting.length === 0 ? true : undefined;
  };

  const before = Array.from({ length: 10 }, (_, i) => `before-${i}`);
  for (const n of before) await client.write({ type: ARTIST, name: n, tenancy: { namespace: NAMESPACE } }, { data: { name: n } });
  await until('the artists written before the kill to converge', 30_000, () => converged(before), () => last);
  const { leader: now1, followers: others1 } = await onlyLeaderRuns(cluster, cluster.nodes);
  t.pass(`${before.length} artists converged; the leader ${now1.id} runs the controllers, ${others1.map((f) => f.id).join(' and ')} do not`);

  await now1.kill9();
  const killedAt = now();
  const { leader: next } = await cluster.roles({ among: others1 });
  t.comment(`killed ${now1.id}; new leader ${next.id} after ${Math.round(now() - killedAt)} ms`);

  // New artists, and a new generation of two old ones, all written after the kill.
  const after = Array.from({ length: 10 }, (_, i) => `after-${i}`);
  for (const n of after) await client.write({ type: ARTIST, name: n, tenancy: { namespace: NAMESPACE } }, { data: { name: n } });
  for (const n of before.slice(0, 2)) await client.write({ type: ARTIST, name: n, tenancy: { namespace: NAMESPACE } }, { data: { name: n, genre: 'rock' } });
  await until('every artist to converge after the kill', 40_000, () => converged([...before, ...after]), () => last);
  t.comment(`FAILOVER: the controllers converged on writes made after the kill ${Math.round(now() - killedAt)} ms after it`);
  const { leader: now2, followers: others2 } = await onlyLeaderRuns(cluster, others1);
  t.pass(`the new leader ${now2.id} runs the controllers, ${others2.map((f) => f.id).join(' and ')} does not`);
  t.ok(next.logEvents(RUNNING).length >= 1, `${next.id}, leader since the kill, started them`);
  const { resources } = await client.list(ARTIST, { namespace: NAMESPACE });
  t.equal(resources.filter((r) => r.data !== null && (r.data as { genre?: string }).genre === 'rock' && current(r)).length, 2, 'the new generations got their status');
});
