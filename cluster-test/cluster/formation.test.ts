/**
 * Clusters form from nothing (3 and 5 nodes started with --bootstrap-expect N --join <others>,
 * as a user starts them), and a write sent to any node, followers included, is committed and
 * read back linearizably from every node with the same version and data. The clusters run TLS
 * and therefore access control (default deny): the harness's management token works on every
 * node, a caller without a token is refused (401) except on the health routes, and a scoped
 * token (read and list on demo Artists) may read but not write (403).
 */
import t, { type Test } from 'tap';
import { ARTIST, Cluster, describeConfiguration, describeResult, get, field, list, now, request, writeUntilAcked, type Ack } from './harness.js';

async function formAndWrite(t: Test, size: number): Promise<void> {
  const started = now();
  const cluster = await Cluster.start(t, { size });
  const formedMs = now() - started;
  const { leader, followers } = await cluster.roles();
  t.comment(`${size} nodes formed a cluster in ${Math.round(formedMs)} ms (processes started to every node ready); leader ${leader.id}`);

  const conf = await cluster.configuration();
  t.same(
    conf.servers.map((s) => `${s.id}:${s.suffrage}`).sort(),
    cluster.nodes.map((n) => `${n.id}:voter`).sort(),
    `the configuration has the ${size} nodes as voters (${describeConfiguration(conf)})`,
  );
  t.ok(
    conf.servers.every((s) => s.address === cluster.node(s.id).grpcAddr),
    'each member is recorded with the gRPC address it was started with',
  );

  // Writes to every node in turn; followers forward to the leader.
  const acks: Ack[] = [];
  const perNode = 8;
  for (let i = 0; i < perNode; i++) {
    for (const n of cluster.nodes) {
      const name = `w-${n.id}-${i}`;
      acks.push(await writeUntilAcked(() => n, { name, key: `${name}.key`, data: { name: `written via ${n.id}`, genre: 'jazz' } }, { deadlineMs: 20_000 }));
    }
  }
  const byFollowers = acks.filter((a) => followers.some((f) => f.id === a.via));
  t.equal(acks.length, perNode * size, `${acks.length} writes acknowledged, ${byFollowers.length} of them sent to followers`);
  t.ok(
    acks.every((a) => a.attempts === 1),
    `every write was acknowledged at its first attempt (a healthy cluster needs no retries): ${acks.filter((a) => a.attempts > 1).map((a) => a.name).join(', ') || 'none retried'}`,
  );
  const versions = acks.map((a) => Number(a.version));
  t.ok(
    versions.every((v, i) => i === 0 || v > (versions[i - 1] as number)),
    'versions (commit indexes) increase with each sequential write, whichever node it was sent to',
  );

  // Every write read back from every node, one by one, linearizably.
  for (const n of cluster.nodes) {
    const wrong: string[] = [];
    for (const a of acks) {
      const r = await get(n, ARTIST, a.name);
      if (r.status !== 200 || field(r.body, 'version') !== a.version || JSON.stringify(field(r.body, 'data')) !== JSON.stringify(a.data)) {
        wrong.push(`${a.name}: ${r.status} ${JSON.stringify(r.body)}`);
      }
    }
    t.same(wrong, [], `node ${n.id} (${n === leader ? 'leader' : 'follower'}) returns all ${acks.length} writes with their acknowledged version and data`);
  }

  // A write acknowledged by one node is visible at once through another (linearizable read on a follower).
  const [f1] = followers;
  const last = followers[followers.length - 1];
  if (f1 !== undefined && last !== undefined) {
    const stale: string[] = [];
    for (let i = 0; i < 20; i++) {
      const a = await writeUntilAcked(() => f1, { name: `rw-${i}`, key: `rw-${i}.key`, data: { name: `round ${i}` } });
      const r = await get(last, ARTIST, a.name);
      if (field(r.body, 'version') !== a.version) stale.push(`round ${i}: acknowledged version ${a.version}, read ${r.status} ${JSON.stringify(r.body)}`);
    }
    t.same(stale, [], `20 rounds: each write acknowledged via ${f1.id} is read at once, linearizably, via ${last.id} with its version`);
  }

  // The same view everywhere.
  const views = await Promise.all(cluster.nodes.map(async (n) => ({ n, m: await list(n, ARTIST) })));
  const reference = JSON.stringify([...(views[0]?.m ?? new Map())].sort());
  for (const { n, m } of views) t.equal(JSON.stringify([...m].sort()), reference, `node ${n.id} lists the same ${m.size} resources`);

  // Access control is on (TLS): anonymous callers get only the health routes, a scoped token
  // gets what its role grants, on every node.
  t.ok(cluster.token !== undefined, 'the TLS cluster has a management token');
  const reader = await cluster.makeToken([{ verbs: ['read', 'list'], types: [ARTIST], namespaces: ['default'] }], { description: 'formation test reader' });
  const probe = acks[0];
  for (const n of cluster.nodes) {
    const anonWrite = await request(`${n.url}/v1/resource/${ARTIST}/anonymous-${n.id}`, { method: 'PUT', body: { data: { name: 'anonymous' } }, token: null });
    t.equal(describeResult(anonWrite), '401 UNAUTHENTICATED', `${n.id}: a write without a token is refused (${describeResult(anonWrite)})`);
    const anonRead = await request(`${n.url}/v1/resources/${ARTIST}`, { token: null });
    t.equal(anonRead.status, 401, `${n.id}: a list without a token is refused (${describeResult(anonRead)})`);
    const forged = await request(`${n.url}/v1/agent/self`, { token: `cairn_harness_${'0'.repeat(64)}` });
    t.equal(forged.status, 401, `${n.id}: a well-formed but unknown token is refused (${describeResult(forged)})`);
    for (const route of ['/healthz', '/readyz', '/v1/status/leader']) {
      const r = await request(`${n.url}${route}`, { token: null });
      t.equal(r.status, 200, `${n.id}: ${route} answers without a token (${describeResult(r)})`);
    }
    if (probe !== undefined) {
      const r = await get(n, ARTIST, probe.name, { token: reader.secret });
      t.equal(field(r.body, 'version'), probe.version, `${n.id}: the scoped token reads ${probe.name} (${describeResult(r)})`);
    }
    const w = await request(`${n.url}/v1/resource/${ARTIST}/scoped-${n.id}`, { method: 'PUT', body: { data: { name: 'scoped' } }, token: reader.secret });
    t.equal(describeResult(w), '403 PERMISSION_DENIED', `${n.id}: the scoped token may not write (${describeResult(w)})`);
  }
  const after = await list(cluster.nodes[0] ?? leader, ARTIST);
  t.notOk([...after.keys()].some((k) => k.startsWith('anonymous-') || k.startsWith('scoped-')), 'no refused write left anything behind');

  const stopStarted = now();
  await cluster.stopAll();
  for (const n of cluster.nodes) t.same(n.lastExit(), { code: 0, signal: null }, `node ${n.id} stopped cleanly on SIGTERM (exit 0)`);
  t.comment(`SIGTERM to all ${size} nodes: every process gone after ${Math.round(now() - stopStarted)} ms`);
}

t.test('three nodes form a cluster from nothing and serve linearizable writes and reads', (t) => formAndWrite(t, 3));
t.test('five nodes form a cluster from nothing and serve linearizable writes and reads', (t) => formAndWrite(t, 5));
