/**
 * Garbage on the cluster (gRPC) port. Against a follower and then the leader of a live
 * three-node cluster, with writes going on:
 *   - random bytes on a raw TCP connection;
 *   - an HTTP/1.1 request;
 *   - a truncated HTTP/2 connection preface, one closed at once and one held open;
 *   - a Raft call whose RaftBatch is not protobuf at all;
 *   - RaftBatches with this cluster's id carrying messages that are not msgpack, have the
 *     wrong shape, name another sender than the batch, or are addressed to another node;
 *   - a RaftBatch and a Forward request from another cluster id;
 *   - well-formed Raft messages with a stale term, claiming to come from a real member
 *     (AppendEntries with a bogus entry, votes, heartbeats, a snapshot chunk);
 *   - a vote request with a much higher term from a node that is not a member.
 * The node never crashes, refuses each kind of bad input with a clear warning in its log (and
 * the cairn_cluster_rejected_total metric), nothing bogus reaches any store, and the cluster
 * keeps acknowledging writes, every one of which is kept.
 *
 * The cluster runs TLS (the harness's default; docs/security.md). The bad messages above are
 * sent with a member's own node certificate, as a compromised or buggy member would, so they
 * get past the TLS layer and reach the decoders. Outsiders are refused before that, and the
 * test proves it: a TLS caller without a certificate, one with a certificate of another CA
 * claiming a member's id, and a member's certificate claiming another node (the intruder) get
 * UNAUTHENTICATED for Hello, Raft and Forward; a plaintext gRPC client gets no call through.
 *
 * The gRPC client uses the service definitions of src/forwarding (what the nodes use).
 */
import * as grpc from '@grpc/grpc-js';
import { randomBytes } from 'node:crypto';
import { connect } from 'node:net';
import t, { type Test } from 'tap';
import { logIndex, nodeId, term } from '../../src/base/index.js';
import { ClientPool, encodeMessage, type ClusterClient } from '../../src/forwarding/index.js';
import type { Message } from '../../src/raft/index.js';
import { makeTestPki } from '../../src/auth/testing/index.js';
import { ARTIST, Cluster, WriteLoad, describeResult, list, nodeTlsFiles, now, put, request, sleep, testPki, until, type ClusterNode } from './harness.js';

/** Channel credentials: TLS trusting `ca`, presenting `cert`/`key` if given. */
function tlsCreds(ca: string, pair?: { certPem: string; keyPem: string }): grpc.ChannelCredentials {
  return grpc.credentials.createSsl(Buffer.from(ca), pair ? Buffer.from(pair.keyPem) : null, pair ? Buffer.from(pair.certPem) : null);
}

/** Opens a TCP connection, writes `bytes`, collects what comes back for up to `ms`, then closes. */
function rawExchange(port: number, bytes: Uint8Array, ms = 1000): Promise<{ reply: Buffer; closedByPeer: boolean; error: string | undefined }> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let closedByPeer = false;
    let error: string | undefined;
    const s = connect(port, '127.0.0.1', () => s.write(bytes));
    s.on('data', (c: Buffer) => chunks.push(c));
    s.on('error', (e) => {
      error = e.message;
    });
    s.on('end', () => {
      closedByPeer = true;
    });
    const timer = setTimeout(() => s.destroy(), ms);
    s.on('close', () => {
      clearTimeout(timer);
      resolve({ reply: Buffer.concat(chunks), closedByPeer, error });
    });
  });
}

/** A client-streaming Raft call whose request bytes are sent as they are (not protobuf). */
function rawRaftCall(address: string, payloads: readonly Buffer[], credentials: grpc.ChannelCredentials): Promise<{ code: number; details: string }> {
  const client = new grpc.Client(address, credentials);
  return new Promise((resolve) => {
    const call = client.makeClientStreamRequest<Buffer, Buffer>(
      '/cairn.cluster.v1.Cluster/Raft',
      (b: Buffer) => b,
      (b: Buffer) => b,
      { deadline: Date.now() + 5000 },
      (err) => {
        client.close();
        resolve({ code: err?.code ?? 0, details: err?.details ?? 'OK' });
      },
    );
    call.on('error', () => undefined);
    for (const p of payloads) call.write(p);
    call.end();
  });
}

interface Batch {
  clusterId: string;
  from: string;
  to: string;
  messages: Uint8Array[];
}

/** One Raft stream carrying `batches`; resolves with the call's status. */
function raftCall(client: ClusterClient, batches: readonly Batch[]): Promise<{ code: number; details: string; received: number | undefined }> {
  return new Promise((resolve) => {
    const call = client.raft((err, ack) => resolve({ code: err?.code ?? 0, details: err?.details ?? 'OK', received: ack?.received }));
    call.on('error', () => undefined);
    for (const b of batches) call.write(b);
    call.end();
  });
}

function hello(client: ClusterClient, from: string): Promise<{ clusterId: string; term: number; leader: string }> {
  return new Promise((resolve, reject) => {
    client.hello({ clusterId: '', from, address: '127.0.0.1:1', bootstrapExpect: 0 }, { deadline: Date.now() + 5000 }, (err, res) => {
      if (err || !res) reject(err ?? new Error('no hello response'));
      else resolve({ clusterId: res.clusterId, term: res.term, leader: res.leader });
    });
  });
}

/** Hello's status code only (0: answered). */
function helloCode(client: ClusterClient, from: string): Promise<{ code: number; details: string }> {
  return new Promise((resolve) => {
    client.hello({ clusterId: '', from, address: '127.0.0.1:1', bootstrapExpect: 0 }, { deadline: Date.now() + 5000 }, (err) => resolve({ code: err?.code ?? 0, details: err?.details ?? 'OK' }));
  });
}

function forward(client: ClusterClient, clusterId: string, from: string): Promise<{ code: number; errorCode: string }> {
  return new Promise((resolve) => {
    client.forward({ clusterId, from, envelope: new Uint8Array([1, 2, 3]), timeoutMs: 1000 }, { deadline: Date.now() + 5000 }, (err, res) => {
      resolve({ code: err?.code ?? 0, errorCode: res?.error?.code ?? '' });
    });
  });
}

/** An arbitrary object packed as a Raft message would be (msgpack): for shapes that are wrong. */
const packed = (o: Record<string, unknown>): Uint8Array => encodeMessage(o as unknown as Message);

async function rejectedMetric(node: ClusterNode): Promise<Map<string, number>> {
  const r = await request(`${node.url}/metrics`);
  const out = new Map<string, number>();
  if (typeof r.body !== 'string') return out;
  for (const m of r.body.matchAll(/^cairn_cluster_rejected_total\{reason="([^"]*)"\} (\d+)/gm)) out.set(m[1] ?? '', Number(m[2]));
  return out;
}

const EXPECTED_WARNINGS = [
  'malformed raft message',
  'raft message does not match its batch',
  'raft batch addressed to another node',
  'raft batch from another cluster',
  'forward request from another cluster',
  'unauthenticated raft stream',
  'unauthenticated forward',
  'unauthenticated hello',
];

async function attack(t: Test, cluster: Cluster, target: ClusterNode, role: string): Promise<void> {
  const member = cluster.nodes.find((n) => n !== target) as ClusterNode;
  const ca = (await testPki()).ca.certPem;
  // A member's own certificate: the garbage below reaches the decoders.
  const memberCreds = tlsCreds(ca, await nodeTlsFiles(member.id));
  const pool = new ClientPool(() => memberCreds);
  const outsiders = await makeTestPki({ name: 'Another CA' });
  const foreignCert = await outsiders.node(member.id);
  const noCertPool = new ClientPool(() => tlsCreds(ca));
  const foreignPool = new ClientPool(() => tlsCreds(ca, foreignCert));
  const plainPool = new ClientPool(() => grpc.credentials.createInsecure());
  try {
    const client = pool.get(target.grpcAddr);
    const h = await hello(client, member.id);
    const before = await until(`${target.id} status`, 5000, () => target.self());
    t.comment(`target ${target.id} (${role}): cluster ${h.clusterId}, term ${h.term}, leader ${h.leader}, last index ${before.lastIndex}`);

    // Transport-level garbage.
    const random = await rawExchange(target.grpcPort, randomBytes(64 * 1024));
    t.pass(`64 KiB of random bytes: connection ${random.closedByPeer ? 'closed by the node' : 'cut by us'} after ${random.reply.length} bytes of reply${random.error ? ` (${random.error})` : ''}`);
    const http1 = await rawExchange(target.grpcPort, Buffer.from(`GET /v1/status/leader HTTP/1.1\r\nHost: ${target.grpcAddr}\r\n\r\n`));
    t.pass(`an HTTP/1.1 request: ${JSON.stringify(http1.reply.toString('latin1').slice(0, 60))}${http1.closedByPeer ? ', closed by the node' : ''}`);
    const preface = await rawExchange(target.grpcPort, Buffer.from('PRI * HTTP/2.0\r\n\r\nS'), 300);
    t.pass(`a truncated HTTP/2 preface: ${preface.reply.length} bytes of reply, ${preface.closedByPeer ? 'closed by the node' : 'cut by us'}`);
    const held = connect(target.grpcPort, '127.0.0.1', () => held.write('PRI * HTTP/2.0\r\n'));
    held.on('error', () => undefined);

    // Not protobuf.
    const notProto = await rawRaftCall(target.grpcAddr, [Buffer.from([0xff, 0xff, 0xff, 0xff, 0x0f, 0x01]), randomBytes(512)], memberCreds);
    t.not(notProto.code, 0, `a Raft call whose batch is not protobuf fails: code ${notProto.code} (${notProto.details})`);

    // Protobuf batches with bad messages, with this cluster's id.
    const from = member.id;
    const bad = await raftCall(client, [
      { clusterId: h.clusterId, from, to: target.id, messages: [randomBytes(200), new Uint8Array([0xc1]), packed({ type: 'app', from, to: target.id, term: 'seven' }), packed({ type: 'nonsense', from, to: target.id, term: 1 }), packed({ type: 'app', from, to: target.id, term: 1, index: 0, logTerm: 0, commit: 0, entries: [{ index: 1, term: 1, data: new Uint8Array(0) }] })] },
      { clusterId: h.clusterId, from, to: target.id, messages: [encodeMessage({ type: 'heartbeat', from: nodeId('someone-else'), to: nodeId(target.id), term: term(1), commit: logIndex(0), readSeq: 0 })] },
      { clusterId: h.clusterId, from, to: 'not-me', messages: [encodeMessage({ type: 'heartbeat', from: nodeId(from), to: nodeId('not-me'), term: term(1), commit: logIndex(0), readSeq: 0 })] },
    ]);
    t.equal(bad.code, 0, `malformed messages in well-formed batches are dropped one by one; the stream ends OK (${bad.received ?? 0} of 7 messages passed on)`);
    t.equal(bad.received, 0, 'none of them reached the Raft core');

    // Another cluster.
    const foreign = await raftCall(client, [{ clusterId: 'some-other-cluster', from, to: target.id, messages: [encodeMessage({ type: 'heartbeat', from: nodeId(from), to: nodeId(target.id), term: term(h.term + 5), commit: logIndex(1_000_000), readSeq: 0 })] }]);
    t.equal(foreign.code, grpc.status.PERMISSION_DENIED, `a RaftBatch from another cluster id is refused: code ${foreign.code} (${foreign.details})`);
    const fwd = await forward(client, 'some-other-cluster', member.id);
    t.equal(fwd.errorCode, 'UNAVAILABLE', `a Forward from another cluster id is refused (${fwd.errorCode})`);

    // Stale terms, claiming to be a real member: AppendEntries with a bogus entry at the next
    // index, votes, a heartbeat announcing a huge commit index, a snapshot chunk.
    const stale = term(1);
    const next = logIndex(before.lastIndex + 1);
    const staleBatch = await raftCall(client, [
      {
        clusterId: h.clusterId,
        from,
        to: target.id,
        messages: [
          encodeMessage({ type: 'app', from: nodeId(from), to: nodeId(target.id), term: stale, index: logIndex(before.lastIndex), logTerm: term(1), commit: next, entries: [{ index: next, term: stale, data: new Uint8Array([0x01, 0x90]) }] }),
          encodeMessage({ type: 'vote', from: nodeId(from), to: nodeId(target.id), term: stale, lastIndex: logIndex(1_000_000), lastTerm: stale, transfer: false }),
          encodeMessage({ type: 'pre-vote', from: nodeId(from), to: nodeId(target.id), term: stale, lastIndex: logIndex(1_000_000), lastTerm: stale, transfer: true }),
          encodeMessage({ type: 'heartbeat', from: nodeId(from), to: nodeId(target.id), term: stale, commit: logIndex(1_000_000), readSeq: 1 }),
          encodeMessage({ type: 'timeout-now', from: nodeId(from), to: nodeId(target.id), term: stale }),
          encodeMessage({ type: 'snap', from: nodeId(from), to: nodeId(target.id), term: stale, meta: { index: logIndex(1_000_000), term: stale, config: { members: [] } }, offset: 0, totalBytes: 4, chunk: new Uint8Array([1, 2, 3, 4]) }),
        ],
      },
    ]);
    t.equal(staleBatch.code, 0, `stale-term messages are accepted off the wire (${staleBatch.received ?? 0} passed on) and ignored by Raft`);

    // A much higher term from a node that is not a member (pre-vote and the leader lease
    // should keep it from disrupting anything).
    const intruder = await raftCall(client, [
      { clusterId: h.clusterId, from: 'intruder', to: target.id, messages: [encodeMessage({ type: 'vote', from: nodeId('intruder'), to: nodeId(target.id), term: term(h.term + 100), lastIndex: logIndex(1_000_000), lastTerm: term(h.term + 100), transfer: false })] },
    ]);
    t.equal(intruder.code, grpc.status.UNAUTHENTICATED, `a vote request from a non-member, sent with a member's certificate, is refused: code ${intruder.code} (${intruder.details})`);

    // Outsiders: no certificate, another CA's certificate claiming the member, plaintext. A
    // heartbeat with a high term and a huge commit index, a Forward and a Hello each.
    const heartbeat: Batch = { clusterId: h.clusterId, from, to: target.id, messages: [encodeMessage({ type: 'heartbeat', from: nodeId(from), to: nodeId(target.id), term: term(h.term + 50), commit: logIndex(1_000_000), readSeq: 0 })] };
    for (const [who, p] of [
      ['a TLS caller without a certificate', noCertPool],
      [`a certificate of another CA naming ${from}`, foreignPool],
    ] as const) {
      const c = p.get(target.grpcAddr);
      const r = await raftCall(c, [heartbeat]);
      t.equal(r.code, grpc.status.UNAUTHENTICATED, `${who}: its Raft stream is refused (code ${r.code}: ${r.details})`);
      const f = await forward(c, h.clusterId, from);
      t.equal(f.code, grpc.status.UNAUTHENTICATED, `${who}: its Forward is refused (code ${f.code})`);
      const hl = await helloCode(c, from);
      t.equal(hl.code, grpc.status.UNAUTHENTICATED, `${who}: its Hello is refused (code ${hl.code})`);
    }
    const plain = await raftCall(plainPool.get(target.grpcAddr), [heartbeat]);
    t.equal(plain.code, grpc.status.UNAVAILABLE, `a plaintext gRPC client gets no call through the TLS port (code ${plain.code}: ${plain.details})`);
    held.destroy();

    // Still alive, healthy, nothing bogus applied.
    await sleep(500);
    target.assertAlive();
    t.ok(target.running(), `${target.id} is still running`);
    const health = await request(`${target.url}/healthz`);
    t.equal(health.status, 200, `${target.id} /healthz: ${describeResult(health)}`);
    const after = await until(`${target.id} status`, 5000, () => target.self());
    t.comment(`${target.id} after: ${after.role}, term ${after.term} (was ${before.term}), commit ${after.commitIndex}, last index ${after.lastIndex}`);
    t.ok(after.term < h.term + 50, `neither the non-member's term ${h.term + 100} nor the outsiders' ${h.term + 50} was adopted (term now ${after.term})`);
    const w = await put(target, { name: `after-garbage-${target.id}`, key: `after-garbage-${target.id}`, data: { name: 'after garbage' } });
    t.equal(w.status, 200, `a write through ${target.id} right after is acknowledged (${describeResult(w)})`);
    const metric = await rejectedMetric(target);
    t.comment(`${target.id} cairn_cluster_rejected_total: ${[...metric].map(([k, v]) => `${k}=${v}`).join(', ')}`);
    t.ok(metric.size >= 4, 'the refusals are counted by reason in /metrics');
    const log = target.log();
    for (const warning of EXPECTED_WARNINGS) {
      const lines = log.split('\n').filter((l) => l.includes(`"msg":"${warning}"`) && l.includes('"level":"warn"'));
      t.ok(lines.length > 0, `${target.id}'s log warns '${warning}'${lines[0] !== undefined ? `: ${lines[0].slice(0, 240)}` : ''}`);
    }
  } finally {
    pool.close();
    noCertPool.close();
    foreignPool.close();
    plainPool.close();
    await outsiders.cleanup();
  }
}

t.test('garbage on the cluster port: no crash, clear warnings, writes go on', async (t) => {
  const cluster = await Cluster.start(t, { size: 3 });
  const load = new WriteLoad({ prefix: 'gb', workers: 2, targets: () => cluster.running(), pauseMs: 10 }).start();
  await load.waitForMore(20);
  const started = now();
  const { leader, followers } = await cluster.roles();
  await t.test(`against a follower (${(followers[0] as ClusterNode).id})`, (t) => attack(t, cluster, followers[0] as ClusterNode, 'follower'));
  await load.waitForMore(20);
  const current = await cluster.waitForLeader();
  await t.test(`against the leader (${current.id})`, (t) => attack(t, cluster, current, 'leader'));
  await load.waitForMore(20);
  await load.stop();
  t.comment(`load during the garbage (${Math.round((now() - started) / 1000)} s): ${load.summary()}; first leader ${leader.id}`);
  for (const n of cluster.nodes) t.ok(n.running(), `${n.id} is still running`);
  t.same(load.unknown, [], 'every write during the garbage was acknowledged');
  t.ok(load.longestGapMs() < 5000, `writes never stalled long (longest gap ${Math.round(load.longestGapMs())} ms)`);
  const views = await Promise.all(cluster.nodes.map((n) => list(n, ARTIST)));
  for (const [i, n] of cluster.nodes.entries()) {
    const { set, versionMismatches } = await load.check(n);
    t.ok(set.valid && versionMismatches.length === 0, `${n.id}: all ${set.ok} acknowledged writes kept with their versions`);
    t.equal(JSON.stringify([...(views[i] ?? new Map())].sort()), JSON.stringify([...(views[0] ?? new Map())].sort()), `${n.id} holds exactly what ${cluster.nodes[0]?.id} holds (nothing bogus applied anywhere)`);
  }
});
