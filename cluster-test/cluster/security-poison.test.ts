/**
 * Issue 15 (Security, part 1), the poison pill: an unknown, non-ignorable envelope type, once
 * committed, stops every replica when it applies, and again on every restart. Against a
 * three-node TLS cluster with data in it, through every route a real client can reach:
 *
 * - the cluster port's Forward, as an authenticated member (node n2's certificate, claiming
 *   n2), to every node: the poison pill (type 0x7f), an unknown type carrying a write body,
 *   an unknown ignorable type, Raft's own entry types, and malformed bodies of every known
 *   command type (not msgpack, not a command, missing fields, a restore with garbage frames,
 *   an unregistered resource type), plus malformed membership changes. The leader answers each
 *   INVALID_ARGUMENT and appends nothing (its last index is unchanged); the followers answer
 *   NOT_LEADER and never forward further.
 * - the public HTTP API: no route takes a raw envelope (routes build commands from JSON and
 *   check them, src/api); the one that takes raw bytes into a log entry is PUT /v1/snapshot.
 *   A body with a bad magic, one with a bad checksum, and one with a valid checksum over
 *   garbage frames are refused 400; a write of an unregistered type and a write that is not
 *   JSON are refused too. These are sent with the management token (access control is on with
 *   TLS), so the body is what is refused: even an admin cannot poison the log; without a token
 *   the snapshot route answers 401 before reading the body.
 *
 * Then all three nodes are stopped (SIGTERM) and started again on the same data: they elect a
 * leader, serve every write made before, and acknowledge new ones.
 */
import { crc32 } from 'node:zlib';
import t from 'tap';
import { encodeEnvelope } from '../../src/fsm/index.js';
import { packValue, type ForwardRequestMsg } from '../../src/forwarding/index.js';
import { ARTIST, Cluster, get, put, request, writeUntilAcked, type ClusterNode } from './harness.js';
import { attackerClient, credentials, forward, hello, makePkis } from './security-attacker.js';

const artist = { group: 'demo', groupVersion: 'v1', kind: 'Artist' };
const tenancy = { partition: 'default', namespace: 'default' };
let seq = 0;
function write(name: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  seq++;
  return { requestId: `poison-${seq}`, time: new Date(0).toISOString(), uid: `uid-${seq}`, generation: `gen-${seq}`, id: { type: artist, tenancy, name }, data: { name }, expectedVersion: 0, ...extra };
}
/** The body of an unconditional write (0x14): a write command without `expectedVersion`. */
function unconditional(name: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  const { expectedVersion: _, ...body } = write(name, extra);
  return body;
}
const env = (bytes: number[]): Partial<ForwardRequestMsg> => ({ op: 'envelope', envelope: Uint8Array.from(bytes) });

/** Each would stop or corrupt a replica if proposed, or is not what a local request could make. */
const BAD: readonly { readonly what: string; readonly req: Partial<ForwardRequestMsg> }[] = [
  { what: 'the poison pill (unknown non-ignorable type 0x7f)', req: env([0x7f, 0xc0]) },
  { what: 'unknown type 0x18 with a write body', req: { op: 'envelope', envelope: encodeEnvelope(0x18, write('p18')) } },
  { what: 'a transaction (0x15) with a write body', req: { op: 'envelope', envelope: encodeEnvelope(0x15, write('p15')) } },
  { what: 'an unconditional write (0x14) carrying a version', req: { op: 'envelope', envelope: encodeEnvelope(0x14, write('p14')) } },
  { what: 'an unconditional write (0x14) of an unregistered type', req: { op: 'envelope', envelope: encodeEnvelope(0x14, unconditional('x', { id: { type: { group: 'evil', groupVersion: 'v1', kind: 'X' }, tenancy, name: 'x' } })) } },
  { what: 'unknown type 0x3f with a write body', req: { op: 'envelope', envelope: encodeEnvelope(0x3f, write('p3f')) } },
  { what: 'unknown ignorable type 0x90', req: env([0x90, 0xc0]) },
  { what: 'a Raft configuration entry', req: { op: 'envelope', envelope: encodeEnvelope(0x02, { change: { type: 'bootstrap' }, config: { members: [] } }) } },
  { what: 'a Raft no-op', req: env([0x01, 0xc0]) },
  { what: 'an empty envelope', req: env([]) },
  { what: 'a write whose body is not msgpack', req: env([0x10, 0x92, 0x01]) },
  { what: 'a write whose body is not a command', req: { op: 'envelope', envelope: encodeEnvelope(0x10, { hello: 1 }) } },
  { what: 'a write whose fields have the wrong types', req: { op: 'envelope', envelope: encodeEnvelope(0x10, write('wt', { expectedVersion: 'seven', data: 'not an object' })) } },
  { what: 'a write of an unregistered type', req: { op: 'envelope', envelope: encodeEnvelope(0x10, write('x', { id: { type: { group: 'evil', groupVersion: 'v1', kind: 'X' }, tenancy, name: 'x' } })) } },
  { what: 'a delete without an id', req: { op: 'envelope', envelope: encodeEnvelope(0x11, { time: 'x', uid: 'u', generation: 'g' }) } },
  { what: 'a status write that is not msgpack', req: env([0x12, 0xc1]) },
  { what: 'a restore without a snapshot', req: { op: 'envelope', envelope: encodeEnvelope(0x13, { time: 'x', uid: 'u', generation: 'g', snapshot: 'no' }) } },
  { what: 'a restore with garbage frames', req: { op: 'envelope', envelope: encodeEnvelope(0x13, { time: 'x', uid: 'u', generation: 'g', snapshot: Buffer.from([0, 0, 0, 9, 1]) }) } },
  { what: 'a membership change of an unknown type', req: { op: 'configChange', configChange: packValue({ type: 'make-leader', id: 'n2' }) } },
  { what: 'a membership change that is not msgpack', req: { op: 'configChange', configChange: Uint8Array.from([0x92, 0x01]) } },
  { what: 'a membership change with a bad address', req: { op: 'configChange', configChange: packValue({ type: 'add-learner', id: 'evil', address: 'http://x' }) } },
];

/** A raw PUT (global fetch: the harness trusts the cluster's CA there) with `token` if given. */
async function putBytes(node: ClusterNode, path: string, body: Buffer, contentType: string, token: string | undefined): Promise<number> {
  try {
    const headers: Record<string, string> = { 'content-type': contentType, ...(token !== undefined ? { authorization: `Bearer ${token}` } : {}) };
    const r = await fetch(`${node.url}${path}`, { method: 'PUT', headers, body, signal: AbortSignal.timeout(10_000) });
    await r.text();
    return r.status;
  } catch {
    return 0;
  }
}

t.test('the poison pill by every route is refused; the cluster survives a full restart', async (t) => {
  const pkis = await makePkis(t);
  const cluster = await Cluster.start(t, { size: 3, tls: pkis.tls });
  const written: string[] = [];
  for (let i = 0; i < 12; i++) {
    const name = `before-${i}`;
    await writeUntilAcked(() => cluster.nodes[i % 3] as ClusterNode, { name, key: name, data: { name } });
    written.push(name);
  }
  const { leader } = await cluster.roles();
  const n2 = await pkis.cluster.node('n2');
  const creds = credentials(pkis.cluster.ca.certPem, n2);

  for (const target of cluster.nodes) {
    const isLeader = target === leader;
    const client = attackerClient(t, target.grpcAddr, creds);
    const h = await hello(client, 'n2');
    t.equal(h.code, 0, `n2's certificate is accepted by ${target.id} (Hello: ${h.details})`);
    const clusterId = h.res?.clusterId ?? '';
    const before = await leader.self();
    const answers: string[] = [];
    for (const b of BAD) {
      const r = await forward(client, { clusterId, from: 'n2', ...b.req });
      const code = r.code !== 0 ? `grpc ${r.code}` : (r.res?.error?.code ?? 'OK');
      answers.push(code);
      t.equal(code, isLeader ? 'INVALID_ARGUMENT' : 'NOT_LEADER', `Forward to ${isLeader ? 'the leader' : 'follower'} ${target.id}: ${b.what} -> ${code}${r.res?.error?.message ? ` (${r.res.error.message})` : ''}`);
    }
    const after = await leader.self();
    t.equal(after?.lastIndex, before?.lastIndex, `after ${BAD.length} bad Forwards to ${target.id} the leader's log did not grow (last index ${after?.lastIndex ?? '?'})`);
  }

  // The public HTTP API.
  const good = Buffer.from([0x01, 0x02, 0x03, 0x04, 0x05]);
  const magic = Buffer.from('CAIRNSV1', 'ascii');
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(good) >>> 0);
  const badCrc = Buffer.alloc(4);
  badCrc.writeUInt32BE((crc32(good) + 1) >>> 0);
  const token = cluster.token;
  t.ok(token !== undefined, 'the TLS cluster runs with access control and a management token');
  for (const target of cluster.nodes) {
    const anon = await putBytes(target, '/v1/snapshot', Buffer.concat([magic, good, crc]), 'application/octet-stream', undefined);
    t.equal(anon, 401, `${target.id}: PUT /v1/snapshot without a token -> ${anon}`);
    const a = await putBytes(target, '/v1/snapshot', Buffer.concat([Buffer.from('NOTCAIRN'), good, crc]), 'application/octet-stream', token);
    t.equal(a, 400, `${target.id}: PUT /v1/snapshot with a bad magic -> ${a}`);
    const b = await putBytes(target, '/v1/snapshot', Buffer.concat([magic, good, badCrc]), 'application/octet-stream', token);
    t.equal(b, 400, `${target.id}: PUT /v1/snapshot with a bad checksum -> ${b}`);
    const c = await putBytes(target, '/v1/snapshot', Buffer.concat([magic, good, crc]), 'application/octet-stream', token);
    t.equal(c, 400, `${target.id}: PUT /v1/snapshot with a valid checksum over garbage frames -> ${c}`);
    const d = await request(`${target.url}/v1/resource/evil.v1.X/x`, { method: 'PUT', body: { data: { name: 'x' } }, headers: { 'idempotency-key': `evil-${target.id}` } });
    t.ok(d.status >= 400 && d.status < 500, `${target.id}: PUT of an unregistered type -> ${d.status} ${d.error ?? ''}`);
    const e = await putBytes(target, `/v1/resource/${ARTIST}/not-json`, Buffer.from([0x7f, 0xc0]), 'application/octet-stream', token);
    t.ok(e >= 400 && e < 500, `${target.id}: PUT of raw envelope bytes to a resource -> ${e}`);
  }
  for (const n of cluster.nodes) t.ok(n.running(), `${n.id} still runs`);

  // A full restart on the same data: nothing poisonous is in any log.
  for (const n of cluster.nodes) {
    const x = await n.term();
    t.equal(x.code, 0, `${n.id} stopped cleanly (SIGTERM, ${Math.round(x.ms)} ms${x.forced ? ', forced' : ''})`);
  }
  for (const n of cluster.nodes) n.restart();
  const leader2 = await cluster.waitForLeader();
  await Promise.all(cluster.nodes.map((n) => n.waitReady()));
  t.comment(`after the restart: leader ${leader2.id}`);
  for (const n of cluster.nodes) {
    for (const name of written) {
      const r = await get(n, ARTIST, name, { consistency: 'linearizable' });
      t.equal(r.status, 200, `${n.id} serves ${name} after the restart`, { diagnostic: r.status !== 200 });
    }
  }
  const w = await put(leader2, { name: 'after-restart', key: 'after-restart', data: { name: 'after restart' } });
  t.equal(w.status, 200, `a new write is acknowledged after the restart (${w.status})`);
  for (const n of cluster.nodes) t.ok(n.running(), `${n.id} runs`);
});
