import * as grpc from '@grpc/grpc-js';
import { readFile } from 'node:fs/promises';
import * as http from 'node:http';
import * as net from 'node:net';
import * as path from 'node:path';
import t from 'tap';
import { silentLogger } from '../base/index.js';
import { cairn } from '../gen/resource.js';
import type { Agent } from './agent.js';
import { guardGrpcServer } from './grpc-guard.js';
import { Agents, HttpWatch, until } from './testing/watch-harness.js';

/**
 * The limits that protect a node (docs/security.md "Limits"), each shown to bite on a real
 * agent: rate limits (HTTP 429 + Retry-After, gRPC RESOURCE_EXHAUSTED + retry-after, probes
 * exempt), watch-stream caps per connection and per node, the HTTP connection cap, slow
 * clients cut by the header timeout while a long watch is not, the public gRPC message limit,
 * the gRPC connection cap that never counts peers; and the audit log's records of denied
 * requests and admin actions, without the token's secret.
 */

const pb = cairn.resource.v1;
const SERVICE = '/cairn.resource.v1.ResourceService';
const ARTIST = 'demo.v1.Artist';
const SECRET = 'c0ffee'.repeat(10) + 'beef';
const TOKEN = `cairn_tok1_${SECRET}`;

interface Codec {
  encode(m: object): { finish(): Uint8Array };
  decode(b: Uint8Array): object;
}
const codec = (c: unknown): Codec => c as Codec;

interface Answer {
  readonly err: grpc.ServiceError | undefined;
  readonly res: object | undefined;
}

/** A gRPC client of its own (its own connection: no subchannel shared with other clients). */
function client(address: string, options: grpc.ChannelOptions = {}): grpc.Client {
  return new grpc.Client(address, grpc.credentials.createInsecure(), { 'grpc.use_local_subchannel_pool': 1, ...options });
}

function unary(c: grpc.Client, method: 'Read' | 'Write', req: object, metadata = new grpc.Metadata(), deadlineMs = 10_000): Promise<Answer> {
  const codecs = method === 'Read' ? { req: codec(pb.ReadRequest), res: codec(pb.ReadResponse) } : { req: codec(pb.WriteRequest), res: codec(pb.WriteResponse) };
  return new Promise((resolve) => {
    c.makeUnaryRequest(
      `${SERVICE}/${method}`,
      (m: object) => Buffer.from(codecs.req.encode(m).finish()),
      (b: Buffer) => codecs.res.decode(b),
      req,
      metadata,
      { deadline: Date.now() + deadlineMs },
      (err, res) => resolve({ err: err ?? undefined, res }),
    );
  });
}

const readReq = (name: string): object => ({ id: { type: ARTIST, tenancy: { partition: 'default', namespace: 'default' }, name } });
const writeReq = (name: string, dataJson: string): object => ({ id: { type: ARTIST, tenancy: { partition: 'default', namespace: 'default' }, name }, dataJson });

/** A WatchList stream: its messages counted, its end or error kept. */
function watchList(c: grpc.Client): { readonly call: grpc.ClientReadableStream<Buffer>; messages: number; error: grpc.ServiceError | undefined; ended: boolean } {
  const body = Buffer.from(codec(pb.WatchListRequest).encode({ watches: [{ type: ARTIST, tenancy: { partition: 'default', namespace: 'default' } }] }).finish());
  const call = c.makeServerStreamRequest(
    `${SERVICE}/WatchList`,
    (b: Buffer) => b,
    (b: Buffer) => b,
    body,
  );
  const w = { call, messages: 0, error: undefined as grpc.ServiceError | undefined, ended: false };
  call.on('data', () => w.messages++);
  call.on('error', (e: grpc.ServiceError) => {
    w.error = e;
    w.ended = true;
  });
  call.on('end', () => (w.ended = true));
  return w;
}

async function auditLines(agent: Agent): Promise<Record<string, unknown>[]> {
  const text = await readFile(path.join(agent.node.config.dataDir, 'audit.log'), 'utf8').catch(() => '');
  return text
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

/** cairn_limit_refusals_total{limit} of an agent. */
async function refusals(agent: Agent, limit: string): Promise<number> {
  return (await agent.metrics.limitRefusals.get()).values.find((v) => v.labels['limit'] === limit)?.value ?? 0;
}

const get = (agent: Agent, p: string, headers: Record<string, string> = {}): Promise<Response> => fetch(`http://${agent.httpAddress}${p}`, { headers });

t.test('per-address rate limit: HTTP 429 with Retry-After, then served after waiting; gRPC RESOURCE_EXHAUSTED with retry-after; probes exempt; denials audited', async (t) => {
  const agents = new Agents(t);
  const agent = await agents.dev({ rateLimitPerAddress: 2, rateLimitPerAddressBurst: 5 });
  // The bucket refills at 2/s while we send: send until refused (a loaded machine is slower than the rate, rarely).
  let served = 0;
  let over: Response | undefined;
  for (let i = 0; i < 200 && over === undefined; i++) {
    const r = await get(agent, `/v1/resources/${ARTIST}`);
    if (r.status === 200) served++;
    else over = r;
  }
  t.ok(served >= 5, `the burst (5) is served: ${served}`);
  if (over === undefined) throw new Error('never refused');
  t.equal(over.status, 429, 'over the rate');
  t.equal(over.headers.get('retry-after'), '1', 'Retry-After in seconds');
  const body = (await over.json()) as { error: Record<string, unknown> };
  t.match(body.error, { code: 'RATE_LIMITED', limit: 'address', retry_after_seconds: 1, message: /too many requests from address 127\.0\.0\.1/ });
  let probes = 0;
  for (let i = 0; i < 20; i++) if ((await get(agent, '/healthz')).status === 200) probes++;
  t.equal(probes, 20, 'the probe is never limited');
  t.equal((await get(agent, '/readyz')).status, 200);

  // gRPC shares the address's bucket (it refills at 2/s: a few calls empty it).
  const c = client(agent.grpcAddress);
  t.teardown(() => c.close());
  let g: Answer | undefined;
  // Up to 200 calls, as for HTTP above: the bucket refills at 2/s, and after the 20 probes a
  // loaded machine may have refilled several tokens, or take longer per call than 10 allow.
  for (let i = 0; i < 200 && g?.err?.code !== grpc.status.RESOURCE_EXHAUSTED; i++) g = await unary(c, 'Read', readReq('nobody'));
  t.equal(g?.err?.code, grpc.status.RESOURCE_EXHAUSTED);
  t.same(g?.err?.metadata.get('cairn-error-code'), ['RATE_LIMITED']);
  t.same(g?.err?.metadata.get('retry-after'), ['1']);

  // Waiting as told lets the caller in again (polled: a refused request takes nothing).
  const start = Date.now();
  let status = 0;
  const deadline = Date.now() + 5_000;
  while (Date.now() < deadline && status !== 200) {
    status = (await get(agent, `/v1/resources/${ARTIST}`)).status;
    if (status !== 200) await new Promise((r) => setTimeout(r, 100));
  }
  t.equal(status, 200, `served again after ${Date.now() - start} ms`);

  const denied = (await auditLines(agent)).filter((l) => l['kind'] === 'denied');
  t.ok(denied.some((l) => l['transport'] === 'http' && l['code'] === 'RATE_LIMITED' && l['method'] === `GET /v1/resources/${ARTIST}` && l['address'] === '127.0.0.1'), 'the HTTP denial is audited');
  t.ok(denied.some((l) => l['transport'] === 'grpc' && l['code'] === 'RATE_LIMITED' && l['method'] === `${SERVICE}/Read`), 'the gRPC denial is audited');
  t.ok((await refusals(agent, 'rate-address')) >= 2, 'counted in cairn_limit_refusals_total{limit="rate-address"}');
});

t.test('per-token rate limit: keyed by a hash of the token; other callers from the address are not limited by it; the audit record has no secret', async (t) => {
  const agents = new Agents(t);
  const agent = await agents.dev({ rateLimitPerToken: 1, rateLimitPerTokenBurst: 2 });
  const auth = { authorization: `Bearer ${TOKEN}` };
  let served = 0;
  let over: Response | undefined;
  for (let i = 0; i < 50 && over === undefined; i++) {
    const r = await get(agent, `/v1/resources/${ARTIST}`, auth);
    if (r.status === 200) served++;
    else over = r;
  }
  t.ok(served >= 2, `the burst (2) is served: ${served}`);
  if (over === undefined) throw new Error('never refused');
  t.equal(over.status, 429);
  t.ok(Number(over.headers.get('retry-after')) >= 1);
  const text = await over.text();
  t.match(text, /token tok1/);
  t.notMatch(text, SECRET);
  t.equal((await get(agent, `/v1/resources/${ARTIST}`)).status, 200, 'no token: only the (generous) address limit');
  t.equal((await get(agent, `/v1/resources/${ARTIST}`, { authorization: 'Bearer some-other-token' })).status, 200, 'another token has its own bucket');
  const forged = `cairn_tok1_${'0'.repeat(64)}`;
  t.equal((await get(agent, `/v1/resources/${ARTIST}`, { authorization: `Bearer ${forged}` })).status, 200, 'a forged token naming the same accessor does not share its bucket');
  const file = await readFile(path.join(agent.node.config.dataDir, 'audit.log'), 'utf8');
  t.notMatch(file, SECRET, 'the audit log never holds the secret');
  t.ok((await auditLines(agent)).some((l) => l['kind'] === 'denied' && l['accessor'] === 'tok1' && l['code'] === 'RATE_LIMITED'));
});

t.test('watch caps: per connection (gRPC) and per node (HTTP and gRPC together); a closed stream gives its place back', async (t) => {
  const agents = new Agents(t);
  const agent = await agents.dev({ watchMaxStreams: 3, watchMaxStreamsPerConnection: 2 });
  const c = client(agent.grpcAddress);
  t.teardown(() => c.close());
  const w1 = watchList(c);
  const w2 = watchList(c);
  await until(() => w1.messages > 0 && w2.messages > 0, 5_000, 'two watches on one connection to start');
  const w3 = watchList(c);
  await until(() => w3.ended, 5_000, 'the third watch on the connection to be refused');
  t.equal(w3.error?.code, grpc.status.RESOURCE_EXHAUSTED);
  t.same(w3.error?.metadata.get('cairn-error-code'), ['RATE_LIMITED']);
  t.match(w3.error?.details, /this connection already has 2 watch streams/);
  t.equal(agent.watches.streams.open, 2);
  t.equal(await refusals(agent, 'watch-connection'), 1);

  // Another connection (HTTP) may open one more: the node's cap is 3.
  const base = `http://${agent.httpAddress}`;
  const h1 = await HttpWatch.open(base, [{ type: ARTIST }]);
  t.teardown(() => h1.destroy());
  await t.rejects(HttpWatch.open(base, [{ type: ARTIST }]), /HTTP 429: .*RATE_LIMITED.*this node already serves 3 watch streams/, 'the 4th on the node is refused');

  // Closing one frees its place.
  w1.call.cancel();
  await until(() => agent.watches.streams.open === 2, 5_000, 'the cancelled watch to be released');
  const h2 = await HttpWatch.open(base, [{ type: ARTIST }]);
  t.teardown(() => h2.destroy());
  await h2.until((w) => w.lines.some((l) => l.type === 'tail'), 5_000, 'the new watch to run');
  w2.call.cancel();
  h1.destroy();
  h2.destroy();
  await until(() => agent.watches.streams.open === 0, 5_000, 'every stream to be released');
});

t.test('slow clients: headers sent byte by byte are cut by the header timeout; a watch outlives the request timeout', async (t) => {
  const agents = new Agents(t);
  const agent = await agents.dev({ httpHeadersTimeoutMs: 1_000, httpRequestTimeoutMs: 1_500, watchBookmarkMs: 200 });
  const [host, port] = [agent.httpAddress.slice(0, agent.httpAddress.lastIndexOf(':')), Number(agent.httpAddress.slice(agent.httpAddress.lastIndexOf(':') + 1))];
  const socket = net.connect(port, host);
  t.teardown(() => socket.destroy());
  let closedAt = 0;
  let answer = '';
  socket.on('data', (b: Buffer) => (answer += b.toString()));
  socket.on('close', () => (closedAt = Date.now()));
  socket.on('error', () => {});
  await new Promise<void>((r) => socket.once('connect', () => r()));
  const start = Date.now();
  socket.write('GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n');
  // One header line every 100 ms, never the blank line that ends them.
  let i = 0;
  const drip = setInterval(() => {
    if (!socket.destroyed) socket.write(`x-slow-${i++}: a\r\n`);
  }, 100);
  t.teardown(() => clearInterval(drip));
  await until(() => closedAt > 0, 6_000, 'the slow client to be cut');
  clearInterval(drip);
  const tookMs = closedAt - start;
  t.ok(tookMs >= 900 && tookMs < 3_500, `cut after ${tookMs} ms (header timeout 1,000 ms, checked every second)`);
  t.match(answer, /^HTTP\/1\.1 408 Request Timeout\r\n/, 'answered 408');
  t.match(answer, /"code":"TIMEOUT"/);

  // A watch is a long response to a short request: requestTimeout does not end it.
  const w = await HttpWatch.open(`http://${agent.httpAddress}`, [{ type: ARTIST }]);
  t.teardown(() => w.destroy());
  const opened = Date.now();
  await w.until(() => Date.now() - opened > 3_500 && w.lines.filter((l) => l.type === 'bookmark').length >= 5, 8_000, 'the watch to run past the request timeout');
  t.notOk(w.ended, `the watch still runs after ${Date.now() - opened} ms (request timeout 1,500 ms)`);
});

t.test('HTTP connection cap: over it, a new connection is answered 503 and closed; a closed one frees its place', async (t) => {
  const agents = new Agents(t);
  const agent = await agents.dev({ httpMaxConnections: 2 });
  const port = Number(agent.httpAddress.slice(agent.httpAddress.lastIndexOf(':') + 1));
  const open = async (): Promise<{ socket: net.Socket; data: () => string; closed: () => boolean }> => {
    const socket = net.connect(port, '127.0.0.1');
    let data = '';
    let closed = false;
    socket.on('data', (b: Buffer) => (data += b.toString()));
    socket.on('close', () => (closed = true));
    socket.on('error', () => {});
    await new Promise<void>((r) => socket.once('connect', () => r()));
    t.teardown(() => socket.destroy());
    return { socket, data: () => data, closed: () => closed };
  };
  const a = await open();
  const b = await open();
  const c = await open();
  await until(() => c.closed(), 5_000, 'the third connection to be closed');
  t.match(c.data(), /^HTTP\/1\.1 503 Service Unavailable\r\n/);
  t.match(c.data(), /retry-after: 1/);
  t.match(c.data(), /"code":"UNAVAILABLE".*open HTTP connections, its limit/);
  t.notOk(a.closed() || b.closed(), 'the first two stay open');
  t.ok((await refusals(agent, 'http-connections')) >= 1);
  a.socket.write('GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n');
  await until(() => a.data().includes('"status":"ok"'), 5_000, 'a connection under the cap to be served');
  b.socket.destroy();
  // The server learns of the close a moment later: try until a new connection is served.
  let served = '';
  const deadline = Date.now() + 5_000;
  while (Date.now() < deadline && !served.startsWith('HTTP/1.1 200')) {
    const d = await open();
    d.socket.write('GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n');
    await until(() => d.data().includes('"status":"ok"') || d.closed(), 5_000, 'an answer');
    served = d.data();
    d.socket.destroy();
  }
  t.match(served, /^HTTP\/1\.1 200/, 'served once a place is free');
});

t.test('public gRPC messages: 5 MiB is TOO_LARGE (RESOURCE_EXHAUSTED), 9 MiB is cut early, and the node is fine', async (t) => {
  const agents = new Agents(t);
  const agent = await agents.dev();
  const c = client(agent.grpcAddress);
  t.teardown(() => c.close());
  const five = await unary(c, 'Write', writeReq('big', JSON.stringify('x'.repeat(5 * 1024 * 1024))));
  t.equal(five.err?.code, grpc.status.RESOURCE_EXHAUSTED);
  t.same(five.err?.metadata.get('cairn-error-code'), ['TOO_LARGE']);
  t.match(five.err?.details, /WriteRequest message is \d+ bytes; at most 4194304/);
  const nine = await unary(client(agent.grpcAddress), 'Write', writeReq('bigger', JSON.stringify('x'.repeat(9 * 1024 * 1024))));
  t.equal(nine.err?.code, grpc.status.RESOURCE_EXHAUSTED, `cut: ${nine.err?.details ?? 'no error'}`);
  t.equal(await refusals(agent, 'grpc-message-cut'), 1);
  const ok = await unary(c, 'Write', writeReq('small', '{"name":"Small"}'));
  t.equal(ok.err, undefined, 'a normal write on the same connection works');
  const read = await unary(c, 'Read', readReq('small'));
  t.equal(read.err, undefined);
  const missing = await unary(c, 'Read', readReq('big'));
  t.equal(missing.err?.code, grpc.status.NOT_FOUND, 'nothing of the refused write was stored');
});

t.test('gRPC connection cap: a client over it is refused; peers are never counted', async (t) => {
  const agents = new Agents(t);
  const agent = await agents.dev({ grpcMaxConnections: 1 });
  const a = client(agent.grpcAddress);
  // A refused channel reconnects on its own, even once closed: keep b from retrying during the test.
  const b = client(agent.grpcAddress, { 'grpc.initial_reconnect_backoff_ms': 60_000, 'grpc.min_reconnect_backoff_ms': 60_000 });
  t.teardown(() => {
    a.close();
    b.close();
  });
  t.equal((await unary(a, 'Read', readReq('x'))).err?.code, grpc.status.NOT_FOUND, 'the first connection is served');
  const refused = await unary(b, 'Read', readReq('x'));
  t.equal(refused.err?.code, grpc.status.UNAVAILABLE, `the second is refused: ${refused.err?.details ?? ''}`);
  t.equal(await refusals(agent, 'grpc-connections'), 1);
  b.close();
  a.close();
  const c = client(agent.grpcAddress);
  t.teardown(() => c.close());
  let code: number | undefined;
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline && code !== grpc.status.NOT_FOUND) {
    code = (await unary(c, 'Read', readReq('x'))).err?.code;
    if (code !== grpc.status.NOT_FOUND) await new Promise((r) => setTimeout(r, 100));
  }
  t.equal(code, grpc.status.NOT_FOUND, 'served once the first closed');

  // The same guard on a bare server, with loopback as a peer: nothing is counted or refused.
  const server = new grpc.Server();
  const addr = await new Promise<string>((resolve, reject) => server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (e, p) => (e ? reject(e) : resolve(`127.0.0.1:${p}`))));
  t.teardown(() => server.forceShutdown());
  const guard = guardGrpcServer(server, { maxConnections: 1, maxPublicMessageBytes: 4 << 20, publicPathPrefix: `${SERVICE}/`, peerHosts: () => ['127.0.0.1'], logger: silentLogger });
  t.teardown(() => guard.close());
  await guard.refresh();
  const peers = [client(addr), client(addr), client(addr)];
  t.teardown(() => peers.forEach((p) => p.close()));
  for (const p of peers) t.equal((await unary(p, 'Read', readReq('x'))).err?.code, grpc.status.UNIMPLEMENTED, 'a peer connection is served');
  t.equal(guard.connections, 0, 'and not counted');
});

t.test('audit log: a denied request (PERMISSION_DENIED) with the accessor and no secret; admin actions with their outcome', async (t) => {
  const agents = new Agents(t);
  const agent = await agents.dev();
  // A request for another host name (DNS rebinding) is refused PERMISSION_DENIED; fetch cannot set Host.
  const denied = await new Promise<number>((resolve, reject) => {
    const req = http.request(`http://${agent.httpAddress}/v1/resources/${ARTIST}`, { headers: { host: 'evil.example', authorization: `Bearer ${TOKEN}` } }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('error', reject);
    req.end();
  });
  t.equal(denied, 403);
  t.equal((await get(agent, '/v1/snapshot')).status, 200);
  const transfer = await fetch(`http://${agent.httpAddress}/v1/operator/raft/transfer-leader`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${TOKEN}` }, body: '{"id":"nobody"}' });
  t.not(transfer.status, 200, 'no such node to lead');
  let lines: Record<string, unknown>[] = [];
  const deadline = Date.now() + 5_000;
  while (Date.now() < deadline && lines.filter((l) => l['kind'] === 'admin').length < 2) lines = await auditLines(agent);
  t.match(
    lines.find((l) => l['kind'] === 'denied'),
    { transport: 'http', method: `GET /v1/resources/${ARTIST}`, address: '127.0.0.1', accessor: 'tok1', token: 'given', code: 'PERMISSION_DENIED', message: /evil\.example/ },
  );
  t.match(
    lines.find((l) => l['action'] === 'snapshot.save'),
    { kind: 'admin', transport: 'http', method: 'GET /v1/snapshot', outcome: 'ok', accessor: null },
  );
  t.match(
    lines.find((l) => l['action'] === 'raft.transfer-leader'),
    { kind: 'admin', accessor: 'tok1', outcome: /^(?!ok$)/, target: { body: '{"id":"nobody"}' } },
  );
  const file = await readFile(path.join(agent.node.config.dataDir, 'audit.log'), 'utf8');
  t.notMatch(file, SECRET, 'no secret in the audit log');
});

t.test('concurrent gRPC streams per connection: the 101st call on one connection does not start while 100 run', async (t) => {
  const agents = new Agents(t);
  const agent = await agents.dev({ grpcMaxConcurrentStreams: 100, watchMaxStreamsPerConnection: 0 });
  const c = client(agent.grpcAddress);
  t.teardown(() => c.close());
  const watches = Array.from({ length: 100 }, () => watchList(c));
  await until(() => watches.every((w) => w.messages > 0), 10_000, '100 watches to run');
  t.equal(agent.watches.streams.open, 100);
  const extra = watchList(c);
  // grpc-js queues a call over the server's SETTINGS_MAX_CONCURRENT_STREAMS until a stream ends.
  const over = await unary(c, 'Read', readReq('x'), new grpc.Metadata(), 2_000);
  t.equal(over.err?.code, grpc.status.DEADLINE_EXCEEDED, `the call waits, unserved, until its deadline: ${over.err?.details ?? ''}`);
  t.equal(agent.watches.streams.open, 100, 'no 101st watch on the node');
  t.equal(extra.messages, 0);
  // Another connection is not affected.
  const d = client(agent.grpcAddress);
  t.teardown(() => d.close());
  t.equal((await unary(d, 'Read', readReq('x'))).err?.code, grpc.status.NOT_FOUND, 'another connection is served');
  for (const w of watches) w.call.cancel();
  extra.call.cancel();
});

t.test('a three-node cluster with a gRPC connection cap of 1 still forms and replicates: peers are never counted', async (t) => {
  const agents = new Agents(t);
  const nodes = await agents.three({ grpcMaxConnections: 1 });
  const leader = nodes.find((a) => a.coordinator()?.status().role === 'leader') as Agent;
  const follower = nodes.find((a) => a !== leader) as Agent;
  const put = await fetch(`http://${follower.httpAddress}/v1/resource/${ARTIST}/peers?partition=default&namespace=default`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ data: { name: 'Peers' } }) });
  t.equal(put.status, 200, 'a write through a follower (forwarded to the leader) commits');
  for (const n of nodes) {
    const r = await fetch(`http://${n.httpAddress}/v1/resource/${ARTIST}/peers?partition=default&namespace=default`);
    t.equal(r.status, 200, `readable on ${n.nodeId}`);
  }
});
