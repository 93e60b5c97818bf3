/**
 * Leases over gRPC through the client library (docs/api.md "Leases"): client.leases.grant,
 * timeToLive, list, revoke, a write attaching a resource, the keep-alive helper (renews in the
 * background, tells the caller when the lease is gone, survives the loss of the node its stream
 * is on), and hostile input on the LeaseKeepAlive stream.
 */
import * as grpc from '@grpc/grpc-js';
import t from 'tap';
import { mkdtemp, rm } from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { CairnClient, Op, isCairnClientError } from '../client/index.js';
import { cairn } from '../gen/resource.js';
import { createLogger } from '../platform/index.js';
import { startAgent } from './agent.js';
import { devConfig, grpcUnary, startTestCluster, waitForAgreedLeader, waitUntil } from './testing/index.js';

import pb = cairn.resource.v1;
const ARTIST = 'demo.v1.Artist';

async function codeOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return 'none';
  } catch (e) {
    return isCairnClientError(e) ? e.code : String(e);
  }
}

t.test('a dev node: the client library over gRPC', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'cairn-lease-client-'));
  const agent = await startAgent(devConfig(dir, { demoTypes: true }), { logger: createLogger({ level: 'silent', nodeId: 'dev' }) });
  const client = new CairnClient({ endpoints: [agent.grpcAddress], timeoutMs: 10_000 });
  t.teardown(async () => {
    client.close();
    await agent.close();
    await rm(dir, { recursive: true, force: true });
  });
  await agent.ready;
  await waitUntil(() => agent.coordinator()?.status().role === 'leader', 10_000, 'the dev node to lead');

  const lease = await client.leases.grant(60, { id: 'web-1' });
  t.same(lease, { id: 'web-1', ttlSeconds: 60 });
  const chosen = await client.leases.grant(1);
  t.match(chosen.id, /^[0-9a-z]{26}$/);
  t.equal(chosen.ttlSeconds, 2, 'raised to the minimum');
  const written = await client.write({ type: ARTIST, name: 'web' }, { data: { name: 'web' }, lease: 'web-1' });
  t.equal(written.lease, 'web-1', 'the resource shows its lease');
  t.equal((await client.read({ type: ARTIST, name: 'web' })).resource.lease, 'web-1');
  const plain = await client.write({ type: ARTIST, name: 'plain' }, { data: { name: 'plain' } });
  t.equal(plain.lease, undefined);
  // Over gRPC, lease is proto3 optional: unset keeps the attachment, "" detaches.
  t.equal((await client.write({ type: ARTIST, name: 'web' }, { data: { name: 'web2' } })).lease, 'web-1', 'unset: kept');
  t.equal((await client.write({ type: ARTIST, name: 'plain' }, { data: { name: 'plain' }, lease: 'web-1' })).lease, 'web-1');
  t.equal((await client.write({ type: ARTIST, name: 'plain' }, { data: { name: 'plain' }, lease: '' })).lease, undefined, '"": detached');
  t.equal(await codeOf(client.write({ type: ARTIST, name: 'orphan' }, { data: { name: 'o' }, lease: 'nope' })), 'NOT_FOUND', 'a missing lease fails the write');
  // A transaction write op attaches too.
  await client.txn().then(Op.write({ type: ARTIST, name: 'tx' }, { data: { name: 'tx' }, lease: 'web-1' })).commit();
  const ttl = await client.leases.timeToLive('web-1', { attached: true });
  t.equal(ttl.ttlSeconds, 60);
  t.ok(ttl.remainingMs > 50_000);
  t.same(ttl.attached.map((i) => i.name), ['tx', 'web']);
  t.same((await client.leases.list()).map((l) => l.id).sort(), [chosen.id, 'web-1'].sort());

  // The keep-alive helper: renewals every TTL/3 keep the 2 s lease for longer than its TTL.
  const renewals: number[] = [];
  const ka = client.leases.keepAlive(chosen.id, { ttlSeconds: chosen.ttlSeconds, onRenewed: (s) => renewals.push(s) });
  const started = performance.now();
  await waitUntil(() => performance.now() - started > 3000 && renewals.length >= 4, 10_000, 'keep-alives past the TTL');
  t.ok(renewals.every((s) => s === 2), 'each renewal reports the TTL');
  t.equal((await client.leases.timeToLive(chosen.id)).ttlSeconds, 2, 'still there after more than its TTL');
  t.equal(ka.signal.aborted, false);
  // Revoked under it: the helper says the lease is gone.
  await client.leases.revoke(chosen.id);
  const lost = await ka.lost;
  t.equal(lost.reason, 'gone');
  t.equal(ka.signal.aborted, true);

  const rv = await client.leases.revoke('web-1');
  t.equal(rv.deleted, 2);
  t.equal(await codeOf(client.read({ type: ARTIST, name: 'web' })), 'NOT_FOUND', 'attached resources deleted');
  t.equal((await client.read({ type: ARTIST, name: 'plain' })).resource.id.name, 'plain');
  t.equal(await codeOf(client.leases.revoke('web-1')), 'NOT_FOUND');
  t.equal(await codeOf(client.leases.timeToLive('web-1')), 'NOT_FOUND');
  const gone = client.leases.keepAlive('web-1');
  t.equal((await gone.lost).reason, 'gone', 'keeping a revoked lease alive: lost at once');
  const stopped = client.leases.keepAlive('never-granted');
  stopped.stop();
  t.equal((await stopped.lost).reason, 'stopped');

  // Hostile input over gRPC: clear errors, nothing granted.
  const raw = new grpc.Client(agent.grpcAddress, grpc.credentials.createInsecure());
  t.teardown(() => raw.close());
  for (const [what, req] of [['TTL 0', { ttlSeconds: 0 }], ['negative TTL', { ttlSeconds: -1 }], ['huge TTL', { ttlSeconds: '9000000001' }], ['a bad id', { ttlSeconds: 10, id: 'Bad Id' }]] as const) {
    const a = await grpcUnary(raw, 'LeaseGrant', req);
    t.equal(a.code, grpc.status.INVALID_ARGUMENT, `${what}: INVALID_ARGUMENT (${a.details})`);
  }
  t.equal((await grpcUnary(raw, 'LeaseGrant', Buffer.from([0x08, 0x0a, 0xf8, 0x07, 0x01]))).code, grpc.status.INVALID_ARGUMENT, 'an unknown field');
  t.same(await client.leases.list(), [], 'nothing was granted');
  t.equal(await codeOf(client.leases.grant(0)), 'INVALID_ARGUMENT');

  // A keep-alive flood: 2,000 requests written at once. The server answers each in order, or
  // ends a stream with more than 256 waiting (RESOURCE_EXHAUSTED); either way it stays up.
  const flood = await new Promise<{ code: number; answers: number; notFound: number }>((resolve) => {
    const call = raw.makeBidiStreamRequest('/cairn.resource.v1.ResourceService/LeaseKeepAlive', (b: Buffer) => b, (b: Buffer) => b, new grpc.Metadata(), {});
    let answers = 0;
    let notFound = 0;
    call.on('data', (b: Buffer) => {
      answers++;
      if (pb.LeaseKeepAliveResponse.decode(b).errorCode === 'NOT_FOUND') notFound++;
    });
    call.on('error', (e: grpc.ServiceError) => resolve({ code: e.code, answers, notFound }));
    call.on('end', () => resolve({ code: 0, answers, notFound }));
    const msg = Buffer.from(pb.LeaseKeepAliveRequest.encode({ id: 'x' }).finish());
    for (let i = 0; i < 2000; i++) call.write(msg);
    call.end();
  });
  t.ok(flood.code === grpc.status.RESOURCE_EXHAUSTED || (flood.code === 0 && flood.answers === 2000 && flood.notFound === 2000), `the flood: ended (${flood.code}) or every request answered NOT_FOUND (${flood.answers}, ${flood.notFound})`);
  t.equal((await client.leases.list()).length, 0, 'the node still answers');
});

t.test('three nodes: the keep-alive helper survives the loss of the node its stream is on', async (t) => {
  const { agents, leader } = await startTestCluster(t, 3, 'cairn-lease-client-');
  // The stream goes to the leader first (listed first), so losing it is a failover too.
  const ordered = [leader, ...agents.filter((a) => a !== leader)];
  const client = new CairnClient({ endpoints: ordered.map((a) => a.grpcAddress), endpointOrder: 'listed', timeoutMs: 10_000 });
  t.teardown(() => client.close());
  const lease = await client.leases.grant(3, { id: 'ha' });
  await client.write({ type: ARTIST, name: 'ha' }, { data: { name: 'ha' }, lease: 'ha' });
  let renewals = 0;
  const ka = client.leases.keepAlive('ha', { ttlSeconds: lease.ttlSeconds, onRenewed: () => renewals++ });
  await waitUntil(() => renewals >= 2, 10_000, 'two renewals');
  await leader.close();
  agents.splice(agents.indexOf(leader), 1);
  await waitForAgreedLeader(agents, 15_000);
  const after = renewals;
  const since = performance.now();
  // Kept alive through the new leader for more than a whole TTL.
  await waitUntil(() => renewals >= after + 3 && performance.now() - since > lease.ttlSeconds * 1000 + 500, 15_000, 'renewals through the new leader past a TTL');
  t.equal(ka.signal.aborted, false, 'not lost');
  t.equal((await client.read({ type: ARTIST, name: 'ha' })).resource.lease, 'ha', 'the resource is still there');
  ka.stop();
  t.equal((await ka.lost).reason, 'stopped');
});
