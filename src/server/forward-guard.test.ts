/**
 * Issue 15, item 4: the leader checks what it proposes. The cluster port's `Forward` is a door
 * into the leader's log from anyone who can reach the port; an envelope must be a command type
 * this version knows and decode and validate as a local request would, and a membership change
 * must be well-formed. The poison pill (an unknown, non-ignorable type) would stop every
 * replica on apply, and again on every restart: it must never be appended.
 */
import t from 'tap';
import { mkdtemp, rm } from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { unpack } from 'msgpackr';
import { encodeEnvelope } from '../fsm/index.js';
import { ClientPool, packValue, type ForwardRequestMsg, type ForwardResponseMsg, type HelloResponseMsg } from '../forwarding/index.js';
import { createLogger } from '../platform/index.js';
import { startAgent, type Agent } from './agent.js';
import { clusterConfigs, waitForAgreedLeader } from './testing/index.js';

const artist = { group: 'demo', groupVersion: 'v1', kind: 'Artist' };
const tenancy = { partition: 'default', namespace: 'default' };
let seq = 0;
function write(name: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  seq++;
  return { requestId: `guard-${seq}`, time: new Date(0).toISOString(), uid: `uid-${seq}`, generation: `gen-${seq}`, id: { type: artist, tenancy, name }, data: { name }, expectedVersion: 0, ...extra };
}

function call<Req, Res>(fn: (req: Req, o: object, cb: (err: Error | null, res?: Res) => void) => unknown, req: Req): Promise<Res> {
  return new Promise((resolve, reject) => {
    fn(req, { deadline: Date.now() + 10_000 }, (err, res) => (err ? reject(err) : res ? resolve(res) : reject(new Error('no response'))));
  });
}

t.test('the leader refuses forwarded envelopes and membership changes a local request could not produce; the cluster survives a full restart', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'cairn-guard-'));
  const agents: Agent[] = [];
  const pool = new ClientPool();
  t.teardown(async () => {
    pool.close();
    for (const a of agents) await a.close();
    await rm(dir, { recursive: true, force: true });
  });
  // A 2-4 s election timeout (100 ticks of 20 ms): some thirty calls below expect the same
  // leader's answer (INVALID_ARGUMENT, not NOT_LEADER) and an unchanged last index, which a new
  // term's no-op would move; with 200-400 ms, a stall on a loaded machine was an election.
  const configs = await clusterConfigs(dir, 3, { electionTicks: 100 });
  const startAll = async (): Promise<Agent> => {
    agents.length = 0;
    for (const cfg of configs) agents.push(await startAgent(cfg, { logger: createLogger({ level: 'silent', nodeId: cfg.nodeId }) }));
    await Promise.all(agents.map((a) => a.ready));
    // A leader all three agree on in one term: a deposed leader that still calls itself leader
    // would answer the forwarded envelopes below with NOT_LEADER.
    return waitForAgreedLeader(agents, 30_000);
  };
  const leader = await startAll();
  const lc = (): NonNullable<ReturnType<Agent['coordinator']>> => leader.coordinator() as NonNullable<ReturnType<Agent['coordinator']>>;
  const client = pool.get(leader.grpcAddress);
  const hello = await call<object, HelloResponseMsg>(client.hello.bind(client) as never, { clusterId: '', from: 'outsider', address: '', bootstrapExpect: 0 });
  t.ok(hello.clusterId !== '', 'an outsider learns the cluster id from Hello (what the attack needs)');
  const forward = (req: Partial<ForwardRequestMsg>): Promise<ForwardResponseMsg> =>
    call<ForwardRequestMsg, ForwardResponseMsg>(client.forward.bind(client) as never, { clusterId: hello.clusterId, from: 'n9', timeoutMs: 5000, ...req });

  const refused = async (what: string, req: Partial<ForwardRequestMsg>, message: RegExp): Promise<void> => {
    const before = lc().status().lastIndex;
    const res = await forward(req);
    t.equal(res.error?.code, 'INVALID_ARGUMENT', `${what}: refused with INVALID_ARGUMENT`);
    t.match(res.error?.message ?? '', message, `${what}: the error says why`);
    // Give a wrongly accepted proposal the time to be appended.
    await new Promise((r) => setTimeout(r, 50));
    t.equal(lc().status().lastIndex, before, `${what}: nothing was appended`);
  };
  const env = (bytes: number[]): Partial<ForwardRequestMsg> => ({ op: 'envelope', envelope: Uint8Array.from(bytes) });

  await refused('the poison pill (unknown non-ignorable type 0x7f)', env([0x7f, 0xc0]), /type 0x7f is not a command type this version knows/);
  await refused('an unknown type 0x18 with a write body', { op: 'envelope', envelope: encodeEnvelope(0x18, write('x')) }, /0x18 is not a command type/);
  // 0x15 is the transaction (Txn): a write body is not one.
  await refused('a transaction (0x15) with a write body', { op: 'envelope', envelope: encodeEnvelope(0x15, write('x')) }, /malformed txn command/);
  // 0x16 and 0x17 are leases: a write body is neither; only the leader's own clock expires leases.
  await refused('a lease grant (0x16) with a write body', { op: 'envelope', envelope: encodeEnvelope(0x16, write('x')) }, /malformed lease grant command/);
  const head = { time: new Date(0).toISOString(), uid: 'u-lease', generation: 'g-lease' };
  await refused('a forwarded lease expiry', { op: 'envelope', envelope: encodeEnvelope(0x17, { ...head, id: 'l1', reason: 'expired', grantRevision: 1 }) }, /only the leader expires leases/);
  await refused('a lease grant with TTL 0', { op: 'envelope', envelope: encodeEnvelope(0x16, { ...head, id: 'l1', ttlSeconds: 0 }) }, /ttlSeconds must be an integer/);
  await refused('a lease request that is not one', { op: 'lease', lease: packValue({ op: 'drop-all' }) }, /op must be keepalive, ttl or list/);
  await refused('a lease request that is not msgpack', { op: 'lease', lease: Uint8Array.from([0xc1]) }, /./);
  const put = (name: string, extra: Record<string, unknown> = {}): Record<string, unknown> => {
    const { expectedVersion: _, ...body } = write(name, extra);
    return body;
  };
  await refused('an unconditional write (0x14) carrying a version', { op: 'envelope', envelope: encodeEnvelope(0x14, write('x')) }, /malformed put command: .*carries no expectedVersion/);
  await refused('an unconditional write (0x14) of an unregistered type', { op: 'envelope', envelope: encodeEnvelope(0x14, put('x', { id: { type: { group: 'evil', groupVersion: 'v1', kind: 'X' }, tenancy, name: 'x' } })) }, /unknown resource type evil\.v1\.X/);
  await refused('an unconditional write (0x14) with a name that is not a DNS label', { op: 'envelope', envelope: encodeEnvelope(0x14, put('Not_A_Label')) }, /must be a lowercase DNS label/);
  await refused('an unknown ignorable type 0x90', env([0x90, 0xc0]), /0x90 is not a command type/);
  await refused('a Raft configuration entry', { op: 'envelope', envelope: encodeEnvelope(0x02, { change: { type: 'bootstrap' }, config: { members: [] } }) }, /belongs to Raft/);
  await refused('a Raft no-op', env([0x01, 0xc0]), /belongs to Raft/);
  await refused('an empty envelope', env([]), /empty/);
  await refused('a write whose body is not msgpack', env([0x10, 0x92, 0x01]), /not msgpack/);
  await refused('a write whose body is not a command', { op: 'envelope', envelope: encodeEnvelope(0x10, { hello: 1 }) }, /malformed write command/);
  await refused('a delete without an id', { op: 'envelope', envelope: encodeEnvelope(0x11, { time: 'x', uid: 'u', generation: 'g' }) }, /malformed delete command/);
  await refused('a restore without a snapshot', { op: 'envelope', envelope: encodeEnvelope(0x13, { time: 'x', uid: 'u', generation: 'g', snapshot: 'no' }) }, /carries no snapshot/);
  await refused('a restore with garbage frames', { op: 'envelope', envelope: encodeEnvelope(0x13, { time: 'x', uid: 'u', generation: 'g', snapshot: Buffer.from([0, 0, 0, 9, 1]) }) }, /snapshot is malformed/);
  await refused('a write of an unregistered type', { op: 'envelope', envelope: encodeEnvelope(0x10, write('x', { id: { type: { group: 'evil', groupVersion: 'v1', kind: 'X' }, tenancy, name: 'x' } })) }, /unknown resource type evil\.v1\.X/);
  await refused('a write with a name that is not a DNS label', { op: 'envelope', envelope: encodeEnvelope(0x10, write('Not_A_Label')) }, /must be a lowercase DNS label/);
  for (const bad of [-1, 0, 1.5, 'lots', Number.MAX_SAFE_INTEGER + 2]) {
    await refused(`a write claiming the quota ${JSON.stringify(bad)}`, { op: 'envelope', envelope: encodeEnvelope(0x10, write('q', { quotaBytes: bad })) }, /quotaBytes must be a positive integer/);
  }
  await refused('a write whose data fails the schema', { op: 'envelope', envelope: encodeEnvelope(0x10, write('x', { data: { genre: 'rock' } })) }, /does not match the schema/);
  await refused('a write with a tenancy not in normal form', { op: 'envelope', envelope: encodeEnvelope(0x10, write('x', { id: { type: artist, tenancy: { partition: '', namespace: '' }, name: 'x' } })) }, /not in normal form/);
  await refused('a status write with bad conditions', { op: 'envelope', envelope: encodeEnvelope(0x12, { time: new Date(0).toISOString(), uid: 'u', generation: 'g', id: { type: artist, tenancy, name: 'x', uid: 'u1' }, key: 'k', observedGeneration: 'g', conditions: [{ type: '', state: 'TRUE', reason: '', message: '' }] }) }, /conditions\[0\]\.type/);
  await refused('a membership change of an unknown type', { op: 'configChange', configChange: packValue({ type: 'make-leader', id: 'evil' }) }, /unknown type "make-leader"/);
  await refused('a membership change with an empty id', { op: 'configChange', configChange: packValue({ type: 'add-learner', id: '', address: '127.0.0.1:1' }) }, /id "" is not a node id/);
  await refused('a membership change with a bad id', { op: 'configChange', configChange: packValue({ type: 'add-voter', id: 'EVIL/../x', address: '127.0.0.1:1' }) }, /is not a node id/);
  await refused('a membership change with a bad address', { op: 'configChange', configChange: packValue({ type: 'add-learner', id: 'evil', address: 'http://x' }) }, /is not host:port/);
  await refused('a membership change with port 0', { op: 'configChange', configChange: packValue({ type: 'add-learner', id: 'evil', address: 'h:0' }) }, /is not host:port/);
  await refused('a membership change with extra fields', { op: 'configChange', configChange: packValue({ type: 'remove', id: 'n1', address: 'h:1' }) }, /unexpected field "address"/);
  await refused('a membership change that is not msgpack', { op: 'configChange', configChange: Uint8Array.from([0x92, 0x01]) }, /not msgpack/);

  // The same door, on a follower: it never proposes (nor forwards further).
  const follower = agents.find((a) => a !== leader) as Agent;
  const fclient = pool.get(follower.grpcAddress);
  const fres = await call<ForwardRequestMsg, ForwardResponseMsg>(fclient.forward.bind(fclient) as never, { clusterId: hello.clusterId, from: 'n9', timeoutMs: 5000, op: 'envelope', envelope: Uint8Array.from([0x7f, 0xc0]) });
  t.equal(fres.error?.code, 'NOT_LEADER', 'a follower answers NOT_LEADER and appends nothing');

  // A well-formed forwarded write still commits, as a follower's forwarding does.
  const ok = await forward({ op: 'envelope', envelope: encodeEnvelope(0x10, write('korn')) });
  t.notOk(ok.error?.code, `a valid forwarded write is accepted (${ok.error?.message ?? ''})`);
  // A forwarded unconditional write: its hooks run at apply, on every replica (docs/api.md
  // "Unconditional writes"). Valid: applied, with the mutate hook's default. Failing the schema:
  // the same INVALID_ARGUMENT a local write gets, and the cluster keeps running (checked by the
  // restart below).
  const okPut = await forward({ op: 'envelope', envelope: encodeEnvelope(0x14, put('korn-put')) });
  t.notOk(okPut.error?.code, `a valid forwarded unconditional write is accepted (${okPut.error?.message ?? ''})`);
  t.same(lc().storeNow().get({ group: 'demo', kind: 'Artist', tenancy, name: 'korn-put' })?.data, { name: 'korn-put', genre: 'unknown' }, 'the leader applied it with the mutate hook');
  const badPut = await forward({ op: 'envelope', envelope: encodeEnvelope(0x14, put('bad-put', { data: { genre: 'rock' } })) });
  t.notOk(badPut.error?.code, 'the leader appended it (its hooks run at apply)');
  t.match(unpack(badPut.result) as unknown, { ok: false, error: { code: 'INVALID_ARGUMENT', message: /data does not match the schema of demo\.v1\.Artist/ } }, 'and apply refused it with the schema error');
  t.equal(lc().storeNow().get({ group: 'demo', kind: 'Artist', tenancy, name: 'bad-put' }), undefined, 'nothing was stored');
  // And the HTTP door to membership refuses what is malformed.
  const post = await fetch(`http://${leader.httpAddress}/v1/operator/raft/peers`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ id: 'evil', address: 'nope' }) });
  t.equal(post.status, 400, 'POST /v1/operator/raft/peers with a bad address is 400');
  t.equal(lc().status().config.members.length, 3, 'membership unchanged');

  // A full restart of every node: nothing poisonous is in any log, so all start and serve.
  for (const a of agents) await a.close();
  const c = (await startAll()).coordinator();
  const r = await c?.read('linearizable', (s) => s.get({ group: 'demo', kind: 'Artist', tenancy, name: 'korn' }));
  t.same(r?.value?.data, { name: 'korn' }, 'after a full restart the cluster serves what it held');
  for (const a of agents) t.notOk(a.coordinator()?.status().failed, `${a.nodeId} runs`);
});
