/**
 * Leases through running agents (docs/api.md "Leases"): the HTTP routes on a dev node (grant,
 * attach, keep-alive, time-to-live, list, revoke deleting the attached resources at one
 * revision, expiry by the leader's clock, hostile input), and a three-node cluster where a
 * follower forwards lease requests and a lease survives the leader's loss with its full TTL.
 */
import t from 'tap';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { createLogger } from '../platform/index.js';
import { startAgent, type Agent } from './agent.js';
import { devConfig, startTestCluster, waitForAgreedLeader, waitUntil } from './testing/index.js';

const ARTIST = 'demo.v1.Artist';

async function http(agent: Agent, method: string, p: string, body?: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await fetch(`http://${agent.httpAddress}${p}`, {
    method,
    ...(body !== undefined ? { body: typeof body === 'string' ? body : JSON.stringify(body), headers: { 'content-type': 'application/json' } } : {}),
  });
  const text = await res.text();
  return { status: res.status, json: (text === '' ? {} : JSON.parse(text)) as Record<string, unknown> };
}
/** Polls an async condition until it holds or the deadline passes (no fixed sleeps). */
async function waitFor(cond: () => Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!(await cond())) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setImmediate(r));
  }
}
const errorOf = (r: { json: Record<string, unknown> }) => (r.json['error'] ?? {}) as Record<string, unknown>;

t.test('a dev node: grant, attach, keep alive, time to live, list, revoke', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'cairn-lease-'));
  const agent = await startAgent(devConfig(dir, { demoTypes: true, maxLeases: 4 }), { logger: createLogger({ level: 'silent', nodeId: 'dev' }) });
  t.teardown(async () => {
    await agent.close();
    await rm(dir, { recursive: true, force: true });
  });
  await agent.ready;
  await waitUntil(() => agent.coordinator()?.status().role === 'leader', 10_000, 'the dev node to lead');

  const g = await http(agent, 'POST', '/v1/leases', { ttl_seconds: 60, id: 'svc-a' });
  t.same(g, { status: 200, json: { id: 'svc-a', ttl_seconds: 60 } });
  const minimum = await http(agent, 'POST', '/v1/leases', { ttl_seconds: 1 });
  t.equal(minimum.status, 200);
  t.match(minimum.json['id'], /^[0-9a-z]{26}$/, 'an id chosen by the server: a lowercase ULID');
  t.equal(minimum.json['ttl_seconds'], 2, 'raised to the minimum TTL (3 election timeouts, at least 2 s)');

  // Attach two resources; a third stays unattached.
  t.equal((await http(agent, 'PUT', `/v1/resource/${ARTIST}/a`, { data: { name: 'a' }, lease: 'svc-a' })).status, 200);
  const b = await http(agent, 'PUT', `/v1/resource/${ARTIST}/b`, { data: { name: 'b' }, lease: 'svc-a', version: '0' });
  t.equal(b.json['lease'], 'svc-a', 'the resource shows its lease (CAS path)');
  t.equal((await http(agent, 'PUT', `/v1/resource/${ARTIST}/c`, { data: { name: 'c' } })).status, 200);
  t.equal((await http(agent, 'GET', `/v1/resource/${ARTIST}/a`)).json['lease'], 'svc-a');
  t.equal((await http(agent, 'GET', `/v1/resource/${ARTIST}/c`)).json['lease'], undefined, 'no lease: no field');
  const missing = await http(agent, 'PUT', `/v1/resource/${ARTIST}/d`, { data: { name: 'd' }, lease: 'nope' });
  t.equal(missing.status, 404);
  t.match(errorOf(missing)['message'], /lease nope does not exist/);
  t.equal((await http(agent, 'GET', `/v1/resource/${ARTIST}/d`)).status, 404, 'nothing written');
  const txnMissing = await http(agent, 'POST', '/v1/txn', { then: [{ op: 'write', type: ARTIST, name: 'e', data: { name: 'e' } }, { op: 'write', type: ARTIST, name: 'f', data: { name: 'f' }, lease: 'nope' }] });
  t.equal(txnMissing.status, 404, 'a transaction attaching to a missing lease fails as a whole');
  t.equal((await http(agent, 'GET', `/v1/resource/${ARTIST}/e`)).status, 404);

  // A later write that leaves lease out keeps the attachment (CAS and unconditional alike).
  const a2 = await http(agent, 'PUT', `/v1/resource/${ARTIST}/a`, { data: { name: 'a2' } });
  t.equal(a2.json['lease'], 'svc-a', 'omitted: the attachment stays');
  t.equal((await http(agent, 'PUT', `/v1/resource/${ARTIST}/a`, { data: { name: 'a3' }, version: a2.json['version'] })).json['lease'], 'svc-a');
  // "" detaches; attaching again brings it back.
  t.equal((await http(agent, 'PUT', `/v1/resource/${ARTIST}/c`, { data: { name: 'c' }, lease: '' })).json['lease'], undefined);
  const ka = await http(agent, 'POST', '/v1/leases/svc-a/keepalive', {});
  t.same({ ...ka.json, remaining_ms: 0 }, { id: 'svc-a', ttl_seconds: 60, remaining_seconds: 60, remaining_ms: 0 });
  const kaMs = ka.json['remaining_ms'] as number;
  t.ok(Number.isInteger(kaMs) && kaMs > 55_000 && kaMs <= 60_000, `arrival + TTL less the barrier, whole ms (${kaMs})`);
  const ttl = await http(agent, 'GET', '/v1/leases/svc-a?attached=true');
  t.equal(ttl.status, 200);
  t.equal(ttl.json['ttl_seconds'], 60);
  t.ok(Number.isInteger(ttl.json['remaining_ms']) && (ttl.json['remaining_ms'] as number) > 50_000 && (ttl.json['remaining_ms'] as number) <= 60_000, 'whole ms');
  t.same((ttl.json['attached'] as Array<{ name: string }>).map((x) => x.name), ['a', 'b']);
  t.equal((await http(agent, 'GET', '/v1/leases/svc-a')).json['attached'], undefined, 'attached only when asked');
  const list = await http(agent, 'GET', '/v1/leases');
  t.same((list.json['leases'] as Array<{ id: string }>).map((l) => l.id).sort(), [minimum.json['id'], 'svc-a'].sort());

  // Revoke: a watcher sees ordinary delete events for a and b at one revision.
  const events: Array<{ type: string; name: string; revision: string }> = [];
  const ac = new AbortController();
  const before = (await http(agent, 'GET', `/v1/resources/${ARTIST}`)).json['revision'] as string;
  void fetch(`http://${agent.httpAddress}/v1/watch`, { method: 'POST', body: JSON.stringify([{ type: ARTIST, gt_revision: before }]), headers: { 'content-type': 'application/json' }, signal: ac.signal })
    .then(async (res) => {
      const reader = (res.body as ReadableStream<Uint8Array>).getReader();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        buf += Buffer.from(value).toString();
        let nl: number;
        while ((nl = buf.indexOf('\n')) >= 0) {
          const e = JSON.parse(buf.slice(0, nl)) as { type: string; revision: string; value?: { id: { name: string } } };
          buf = buf.slice(nl + 1);
          if (e.type === 'change' || e.type === 'delete') events.push({ type: e.type, name: e.value?.id.name ?? '', revision: e.revision });
        }
      }
    })
    .catch(() => {});
  t.teardown(() => ac.abort());
  const rv = await http(agent, 'DELETE', '/v1/leases/svc-a');
  t.equal(rv.status, 200);
  t.equal(rv.json['deleted'], 2);
  await waitUntil(() => events.length >= 2, 10_000, 'the watcher to see the deletes');
  t.same(events, [
    { type: 'delete', name: 'a', revision: rv.json['revision'] },
    { type: 'delete', name: 'b', revision: rv.json['revision'] },
  ]);
  t.equal((await http(agent, 'GET', `/v1/resource/${ARTIST}/c`)).status, 200, 'the unattached resource stays');
  t.equal((await http(agent, 'POST', '/v1/leases/svc-a/keepalive', {})).status, 404, 'a revoked lease cannot be kept alive');
  t.equal((await http(agent, 'GET', '/v1/leases/svc-a')).status, 404);
  t.equal((await http(agent, 'DELETE', '/v1/leases/svc-a')).status, 404);

  // Expiry: the 2 s lease, never kept alive, is expired by the leader and its resource deleted.
  const mid = minimum.json['id'] as string;
  t.equal((await http(agent, 'PUT', `/v1/resource/${ARTIST}/g`, { data: { name: 'g' }, lease: mid })).status, 200);
  await waitFor(async () => (await http(agent, 'GET', `/v1/resource/${ARTIST}/g`)).status === 404, 10_000, 'the expired lease to take g with it');
  t.equal((await http(agent, 'GET', `/v1/leases/${mid}`)).status, 404);

  // Hostile input: a clear 400 and nothing changed.
  const bad: Array<[string, unknown]> = [
    ['TTL 0', { ttl_seconds: 0 }],
    ['negative TTL', { ttl_seconds: -5 }],
    ['non-integer TTL', { ttl_seconds: 1.5 }],
    ['TTL as a string', { ttl_seconds: '10' }],
    ['huge TTL', { ttl_seconds: 9_000_000_001 }],
    ['no TTL', {}],
    ['a bad id', { ttl_seconds: 10, id: 'Not A Label' }],
    ['an id too long', { ttl_seconds: 10, id: 'x'.repeat(64) }],
    ['an id of the wrong type', { ttl_seconds: 10, id: 7 }],
    ['an unknown field', { ttl_seconds: 10, ttl: 10 }],
    ['not an object', [10]],
  ];
  for (const [what, body] of bad) {
    const r = await http(agent, 'POST', '/v1/leases', body);
    t.equal(r.status, 400, `${what}: 400 (${String(errorOf(r)['message'])})`);
    if (what.includes('TTL')) t.match(String(errorOf(r)['message']), /^ttl_seconds (must|is required)/, 'the error names the HTTP field');
  }
  t.equal((await http(agent, 'POST', '/v1/leases', '{not json')).status, 400);
  t.equal((await http(agent, 'GET', '/v1/leases/BAD_ID')).status, 400);
  t.equal((await http(agent, 'POST', '/v1/leases/x/keepalive', { extra: 1 })).status, 400);
  t.equal((await http(agent, 'GET', '/v1/leases/x?attached=maybe')).status, 400);
  t.equal((await http(agent, 'PUT', `/v1/resource/${ARTIST}/h`, { data: { name: 'h' }, lease: 5 })).status, 400);
  t.equal((await http(agent, 'PUT', `/v1/resource/${ARTIST}/h`, { data: { name: 'h' }, lease: 'UPPER' })).status, 400);
  t.same((await http(agent, 'GET', '/v1/leases')).json['leases'], [], 'no lease was made by any of them');
  t.equal((await http(agent, 'POST', '/v1/leases', { ttl_seconds: 10, id: 'dup' })).status, 200);
  t.equal((await http(agent, 'POST', '/v1/leases', { ttl_seconds: 10, id: 'dup' })).status, 409, 'an id in use');
  // --max-leases 4.
  for (const id of ['m1', 'm2', 'm3']) t.equal((await http(agent, 'POST', '/v1/leases', { ttl_seconds: 10, id })).status, 200);
  const over = await http(agent, 'POST', '/v1/leases', { ttl_seconds: 10, id: 'm4' });
  t.equal(errorOf(over)['code'], 'NO_SPACE', `too many leases: ${String(errorOf(over)['message'])}`);
  // A keep-alive flood is answered (each sets a deadline; none is a log entry).
  const applied = agent.coordinator()?.status().applied ?? 0;
  const flood = await Promise.all(Array.from({ length: 200 }, () => http(agent, 'POST', '/v1/leases/m1/keepalive', {})));
  t.ok(flood.every((r) => r.status === 200 || r.status === 429), 'every keep-alive answered');
  t.equal(agent.coordinator()?.status().applied, applied, 'keep-alives write nothing to the log');
});

t.test('three nodes: a follower forwards lease requests; a lease survives the leader\'s loss with its full TTL', async (t) => {
  const { agents, leader } = await startTestCluster(t, 3, 'cairn-lease-');
  const followers = agents.filter((a) => a !== leader);
  const f = followers[0] as Agent;
  const TTL = 4;
  t.equal((await http(f, 'POST', '/v1/leases', { ttl_seconds: TTL, id: 'fo' })).status, 200, 'granted through a follower');
  t.equal((await http(f, 'PUT', `/v1/resource/${ARTIST}/kept`, { data: { name: 'kept' }, lease: 'fo' })).status, 200);
  const ka = await http(f, 'POST', '/v1/leases/fo/keepalive', {});
  t.equal(ka.status, 200, 'a keep-alive forwarded to the leader');
  t.equal((await http(f, 'GET', '/v1/leases/fo')).json['ttl_seconds'], TTL);
  t.same((await http(f, 'GET', '/v1/leases')).json['leases'], [{ id: 'fo', ttl_seconds: TTL }]);

  // Let the old leader's clock run down to about a second, then take the leader away. The
  // new leader is elected after `killedAt`, so with its full TTL the lease has at least
  // TTL - (now - killedAt) left; inheriting the old deadline it would have about a second less.
  await http(f, 'POST', '/v1/leases/fo/keepalive', {});
  await waitFor(async () => ((await http(f, 'GET', '/v1/leases/fo')).json['remaining_ms'] as number) < 1200, 10_000, 'the old leader clock to run down');
  const killedAt = performance.now();
  await leader.close();
  agents.splice(agents.indexOf(leader), 1);
  const next = await waitForAgreedLeader(agents, 15_000);
  const ttl = await http(next, 'GET', '/v1/leases/fo');
  const since = performance.now() - killedAt;
  t.equal(ttl.status, 200, 'the lease survived the failover');
  t.ok((ttl.json['remaining_ms'] as number) >= TTL * 1000 - since, `a full TTL from the new leader (${String(ttl.json['remaining_ms'])} ms left, ${Math.round(since)} ms after the old leader went)`);
  t.equal((await http(next, 'GET', `/v1/resource/${ARTIST}/kept`)).status, 200, 'its resource too');
  // Never kept alive again: the new leader expires it, and every node deletes the resource.
  await waitFor(async () => (await http(next, 'GET', `/v1/resource/${ARTIST}/kept`)).status === 404, 15_000, 'the new leader to expire the lease');
  t.ok(performance.now() - killedAt >= TTL * 1000, 'not before its full TTL on the new leader');
  for (const a of agents) {
    await waitUntil(() => a.coordinator()?.storeNow().get({ group: 'demo', kind: 'Artist', tenancy: { partition: 'default', namespace: 'default' }, name: 'kept' }) === undefined, 10_000, `${a.nodeId} to apply the expiry`);
    t.equal(a.coordinator()?.leaseTable().leases.size, 0, `${a.nodeId}: no leases left`);
  }
});

t.test('leases survive a restart (and a snapshot): the table, the attachments, a full TTL after it', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'cairn-lease-'));
  // A snapshot every few entries, so the restart loads the lease table from one.
  const config = devConfig(dir, { demoTypes: true, snapshotEntries: 4, snapshotLogPercent: 0 });
  let agent = await startAgent(config, { logger: createLogger({ level: 'silent', nodeId: 'dev' }) });
  t.teardown(async () => {
    await agent.close();
    await rm(dir, { recursive: true, force: true });
  });
  await agent.ready;
  await waitUntil(() => agent.coordinator()?.status().role === 'leader', 10_000, 'the dev node to lead');
  t.equal((await http(agent, 'POST', '/v1/leases', { ttl_seconds: 600, id: 'durable' })).status, 200);
  for (const name of ['r1', 'r2', 'r3', 'r4', 'r5']) t.equal((await http(agent, 'PUT', `/v1/resource/${ARTIST}/${name}`, { data: { name }, ...(name !== 'r5' ? { lease: 'durable' } : {}) })).status, 200);
  await agent.close();
  const snapshots = await readdir(path.join(config.dataDir, 'snapshots'));
  t.ok(snapshots.length > 0, `a snapshot was taken (${snapshots.join(', ')})`);
  agent = await startAgent(config, { logger: createLogger({ level: 'silent', nodeId: 'dev' }) });
  await agent.ready;
  await waitUntil(() => agent.coordinator()?.status().role === 'leader', 10_000, 'the restarted node to lead');
  const ttl = await http(agent, 'GET', '/v1/leases/durable?attached=true');
  t.equal(ttl.status, 200, 'the lease is back');
  t.same((ttl.json['attached'] as Array<{ name: string }>).map((x) => x.name), ['r1', 'r2', 'r3', 'r4'], 'with its attachments');
  t.ok((ttl.json['remaining_ms'] as number) > 590_000, 'a full TTL from the restarted leader');
  const rv = await http(agent, 'DELETE', '/v1/leases/durable');
  t.equal(rv.json['deleted'], 4);
  t.equal((await http(agent, 'GET', `/v1/resource/${ARTIST}/r5`)).status, 200);
});
