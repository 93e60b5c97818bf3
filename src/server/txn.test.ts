/**
 * Transactions through running agents (docs/api.md "Transactions"): POST /v1/txn on a dev
 * node (then and else branches, all or nothing, one revision seen by a watcher, idempotency,
 * hostile input), and a transaction sent to a follower of a three-node cluster, forwarded to
 * the leader and applied on every node.
 */
import * as grpc from '@grpc/grpc-js';
import t from 'tap';
import { mkdtemp, rm } from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { cairn } from '../gen/resource.js';
import { CairnClient, Compare, Op, isCairnClientError } from '../client/index.js';
import { CommandType } from '../fsm/index.js';
import { createLogger } from '../platform/index.js';
import { startAgent, type Agent } from './agent.js';
import { clusterConfigs, devConfig, grpcUnary, waitForAgreedLeader, waitUntil } from './testing/index.js';

import pb = cairn.resource.v1;
const ARTIST = 'demo.v1.Artist';

function grpcTxnBytes(o: object): Uint8Array {
  return pb.TxnRequest.encode(pb.TxnRequest.fromObject(o)).finish();
}

async function http(agent: Agent, method: string, p: string, body?: unknown, headers: Record<string, string> = {}): Promise<{ status: number; json: Record<string, unknown>; headers: Headers }> {
  const res = await fetch(`http://${agent.httpAddress}${p}`, {
    method,
    ...(body !== undefined ? { body: typeof body === 'string' ? body : JSON.stringify(body), headers: { 'content-type': 'application/json', ...headers } } : {}),
  });
  const text = await res.text();
  return { status: res.status, json: (text === '' ? {} : JSON.parse(text)) as Record<string, unknown>, headers: res.headers };
}

const txn = (a: Agent, body: unknown, headers: Record<string, string> = {}) => http(a, 'POST', '/v1/txn', body, headers);
const w = (name: string, data: unknown = { name }, extra: Record<string, unknown> = {}) => ({ op: 'write', type: ARTIST, name, data, ...extra });
const version = async (a: Agent, name: string): Promise<string | undefined> => {
  const r = await http(a, 'GET', `/v1/resource/${ARTIST}/${name}`);
  return r.status === 200 ? (r.json['version'] as string) : undefined;
};
const errorOf = (r: { json: Record<string, unknown> }) => r.json['error'] as Record<string, unknown>;

t.test('a dev node: POST /v1/txn', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'cairn-txn-'));
  const agent = await startAgent(devConfig(dir, { demoTypes: true }), { logger: createLogger({ level: 'silent', nodeId: 'dev' }) });
  t.teardown(async () => {
    await agent.close();
    await rm(dir, { recursive: true, force: true });
  });
  await agent.ready;
  await waitUntil(() => agent.coordinator()?.status().role === 'leader', 10_000, 'the dev node to lead');
  t.equal((await http(agent, 'PUT', `/v1/resource/${ARTIST}/a`, { data: { name: 'a' } })).status, 200);
  const va = (await version(agent, 'a')) as string;

  // A watcher of the type sees the whole branch at one revision.
  const events: Array<{ revision: string; name: string; kind: string }> = [];
  const ac = new AbortController();
  void fetch(`http://${agent.httpAddress}/v1/watch`, { method: 'POST', body: JSON.stringify([{ type: ARTIST, gt_revision: va }]), headers: { 'content-type': 'application/json' }, signal: ac.signal }).then(async (res) => {
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += Buffer.from(value).toString();
      let nl: number;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (line.trim() === '') continue;
        const ev = JSON.parse(line) as Record<string, unknown>;
        const r = (ev['value'] ?? {}) as { id?: { name?: string } };
        if (ev['type'] === 'change' || ev['type'] === 'delete') events.push({ revision: String(ev['revision']), name: r.id?.name ?? '', kind: String(ev['type']) });
      }
    }
  }).catch(() => undefined);
  t.teardown(() => ac.abort());

  const ok = await txn(agent, {
    compare: [{ target: 'version', type: ARTIST, name: 'a', version: va }, { target: 'absent', type: ARTIST, name: 'b' }],
    then: [w('a', { name: 'a2' }), w('b'), w('c')],
    else: [w('lost')],
  });
  t.equal(ok.status, 200, JSON.stringify(ok.json));
  t.equal(ok.json['succeeded'], true);
  const rev = ok.json['revision'] as string;
  t.equal(ok.headers.get('cairn-revision'), rev, 'the cairn-revision header');
  const results = ok.json['results'] as Array<{ op: string; resource: { version: string; id: { name: string } } }>;
  t.same(
    results.map((r) => [r.op, r.resource.id.name, r.resource.version]),
    [
      ['write', 'a', rev],
      ['write', 'b', rev],
      ['write', 'c', rev],
    ],
    'every op at the one revision',
  );
  await waitUntil(() => events.filter((e) => e.revision === rev).length === 3, 10_000, 'the watcher to see the three changes');
  t.same(
    events.filter((e) => e.revision === rev).map((e) => e.name),
    ['a', 'b', 'c'],
    'the watcher sees the three changes at one revision, in op order',
  );

  // A comparison that fails: the else branch, and which comparison.
  const other = await txn(agent, { compare: [{ target: 'exists', type: ARTIST, name: 'a' }, { target: 'version', type: ARTIST, name: 'a', version: va }], then: [w('never')], else: [{ op: 'delete', type: ARTIST, name: 'c' }] });
  t.equal(other.status, 200);
  t.same([other.json['succeeded'], other.json['failed_comparison']], [false, 1]);
  t.same((other.json['results'] as Array<Record<string, unknown>>).map((r) => [r.op, r.deleted]), [['delete', true]]);
  t.equal(await version(agent, 'c'), undefined, 'c deleted by the else branch');
  t.equal(await version(agent, 'never'), undefined);

  // All or nothing: the third op's CAS fails; the answer is 409 naming it, nothing changed.
  const before = [await version(agent, 'a'), await version(agent, 'b')];
  const refused = await txn(agent, { then: [w('a', { name: 'a3' }), { op: 'delete', type: ARTIST, name: 'b' }, w('d', { name: 'd' }, { version: '77' })] });
  t.equal(refused.status, 409, JSON.stringify(refused.json));
  t.equal(errorOf(refused)['code'], 'CAS_FAILED');
  t.equal(errorOf(refused)['failed_op'], 2, 'the failing op is named');
  t.equal(errorOf(refused)['branch'], 'then');
  t.match(errorOf(refused)['message'], /then\[2\]/);
  t.same([await version(agent, 'a'), await version(agent, 'b'), await version(agent, 'd')], [...before, undefined], 'nothing applied');

  // A status write in a transaction.
  const b = (await http(agent, 'GET', `/v1/resource/${ARTIST}/b`)).json as { id: { uid: string }; generation: string };
  const st = await txn(agent, { compare: [{ target: 'uid', type: ARTIST, name: 'b', uid: b.id.uid }], then: [{ op: 'status', type: ARTIST, name: 'b', uid: b.id.uid, key: 'demo.v1.c', observed_generation: b.generation, conditions: [{ type: 'Ready', state: 'TRUE' }] }] });
  t.equal(st.status, 200, JSON.stringify(st.json));
  // Results are slim (issue 19 review, item 5): the resource's id, version and generation, no body.
  const stResult = (st.json['results'] as Array<Record<string, unknown>>)[0] as { op: string; resource: Record<string, unknown> };
  t.same(Object.keys(stResult).sort(), ['op', 'resource']);
  t.same(Object.keys(stResult.resource).sort(), ['generation', 'id', 'version'], 'a result names the resource, without its body');
  t.equal(stResult.resource['version'], st.json['revision']);
  t.equal((stResult.resource['id'] as { uid: string }).uid, b.id.uid);
  const bAfter = (await http(agent, 'GET', `/v1/resource/${ARTIST}/b`)).json as { status: object; version: string };
  t.same([Object.keys(bAfter.status), bAfter.version], [['demo.v1.c'], st.json['revision']], 'the body is read afterwards, at the answer revision');

  // Idempotency: the same key answers the first result, applying nothing again.
  const once = await txn(agent, { then: [w('idem', { name: 'one' })] }, { 'idempotency-key': 'txn-key-1' });
  const twice = await txn(agent, { then: [w('idem', { name: 'two' })] }, { 'idempotency-key': 'txn-key-1' });
  t.same(twice.json, once.json, 'a retry answers with the first result');
  t.equal(((await http(agent, 'GET', `/v1/resource/${ARTIST}/idem`)).json['data'] as { name: string }).name, 'one');

  // Hostile input: each refused with a clear 400 (or 413), changing nothing.
  const snapshot = async (): Promise<string> => JSON.stringify((await http(agent, 'GET', `/v1/resources/${ARTIST}`)).json['resources']);
  const state = await snapshot();
  const many = Array.from({ length: 129 }, (_, i) => w(`m${i}`));
  const hostile: Array<[string, unknown, number, RegExp]> = [
    ['129 ops', { then: many }, 400, /then branch has 129 ops; at most 128/],
    ['129 comparisons', { compare: Array.from({ length: 129 }, () => ({ target: 'exists', type: ARTIST, name: 'a' })), then: [] }, 400, /129 comparisons; at most 128/],
    // The service's own check (refused before proposing), not the state machine's at apply.
    ['a name twice in a branch', { then: [w('x1'), { op: 'delete', type: ARTIST, name: 'x1' }] }, 400, /^then\[1\]: demo\.Artist x1 is named by an earlier op of the then branch/],
    // Type errors inside a part name the part (message and `part` detail, checked below).
    ['a version that is not a string', { compare: [{ target: 'version', type: ARTIST, name: 'a', version: 5 }] }, 400, /^compare\[0\]: version must be a string$/],
    ['a namespace that is not a string', { then: [{ ...w('x4'), namespace: 7 }] }, 400, /^then\[0\]: namespace must be a string$/],
    ['a type that is not a string', { else: [{ op: 'delete', type: 1, name: 'x5' }] }, 400, /^else\[0\]: type must be a string$/],
    ['an observed_generation that is not a string', { then: [{ op: 'status', type: ARTIST, name: 'a', uid: 'u', key: 'demo.v1.c', observed_generation: 3 }] }, 400, /^then\[0\]: observed_generation must be a string$/],
    ['an unknown top-level field', { then: [], when: [] }, 400, /unknown field "when"/],
    ['an unknown field in an op', { then: [{ ...w('x2'), ttl: 5 }] }, 400, /unknown field "ttl" in then\[0\]/],
    ['an unknown field in a comparison', { compare: [{ target: 'exists', type: ARTIST, name: 'a', mod: 1 }] }, 400, /unknown field "mod" in compare\[0\]/],
    ['an unknown op', { then: [{ op: 'rename', type: ARTIST, name: 'a' }] }, 400, /then\[0\]\.op must be/],
    ['an unknown target', { compare: [{ target: 'greater', type: ARTIST, name: 'a' }] }, 400, /compare\[0\]: target must be/],
    ['a bad name', { then: [w('Not_A_Label')] }, 400, /then\[0\]: name "Not_A_Label"/],
    ['an unknown type', { then: [{ op: 'delete', type: 'demo.v1.Nope', name: 'a' }] }, 400, /then\[0\]/],
    ['data against the schema', { then: [w('x3', { nope: 1 })] }, 400, /then\[0\]/],
    ['an ACL type', { then: [{ op: 'delete', type: 'cairn.v1.ACLRole', name: 'r' }] }, 400, /cannot be changed in a transaction/],
    ['a version that is not a number', { compare: [{ target: 'version', type: ARTIST, name: 'a', version: 'x' }] }, 400, /version must be a decimal string/],
    ['not an array', { then: { op: 'write' } }, 400, /then must be an array/],
    ['not JSON', '{"then": [', 400, /./],
    ['a huge body', { then: [w('huge', { name: 'x'.repeat(2 * 1024 * 1024) })] }, 413, /./],
  ];
  const applied = (): number => agent.coordinator()?.status().applied ?? -1;
  for (const [what, body, status, msg] of hostile) {
    const before = applied();
    const r = await txn(agent, body);
    t.equal(r.status, status, `${what}: ${status} (${JSON.stringify(r.json).slice(0, 200)})`);
    t.match(String(errorOf(r)?.['message'] ?? ''), msg, `${what}: the error says why`);
    const m = /^((compare|then|else)\[\d+\]): /.exec(String(errorOf(r)?.['message'] ?? ''));
    if (m !== null) t.equal(errorOf(r)?.['part'], m[1], `${what}: the part detail`);
    // The schema is checked at apply (a write's hooks run there, as for an unconditional write).
    if (what !== 'data against the schema') t.equal(applied(), before, `${what}: refused before proposing (the applied index did not move)`);
  }
  t.equal(await snapshot(), state, 'hostile requests changed nothing');
  t.equal((await http(agent, 'POST', '/v1/txn?x=1', { then: [] })).status, 400, 'query parameters are refused');

  // The same over gRPC: Txn on the public resource service.
  const client = new grpc.Client(agent.grpcAddress, grpc.credentials.createInsecure());
  t.teardown(() => client.close());
  const id = (name: string) => ({ type: ARTIST, name });
  const gw = (name: string, data: unknown = { name }, version = '') => ({ write: { id: id(name), dataJson: JSON.stringify(data), version } });
  const vg = (await version(agent, 'g0')) ?? '0';
  const g1 = await grpcUnary(client, 'Txn', { compare: [{ id: id('g0'), target: 'TARGET_VERSION', version: vg }, { id: id('g1'), target: 'TARGET_ABSENT' }], thenOps: [gw('g0'), gw('g1')], elseOps: [] });
  t.equal(g1.code, 0, g1.details);
  t.equal(g1.value?.['succeeded'], true);
  const gres = g1.value?.['results'] as Array<{ write?: { resource: { version: string; id: { name: string } } } }>;
  t.same(gres.map((r) => [r.write?.resource.id.name, r.write?.resource.version]), [['g0', g1.value?.['revision']], ['g1', g1.value?.['revision']]], 'both writes at the answer revision');
  const g2 = await grpcUnary(client, 'Txn', { compare: [{ id: id('g1'), target: 'TARGET_ABSENT' }], thenOps: [gw('never')], elseOps: [{ delete: { id: id('g1') } }] });
  t.same([g2.code, g2.value?.['succeeded'], g2.value?.['failedComparison']], [0, false, '0'], 'the else branch, and which comparison failed');
  t.same((g2.value?.['results'] as Array<{ delete?: { deleted: boolean } }>).map((r) => r.delete?.deleted), [true]);
  const g3 = await grpcUnary(client, 'Txn', { thenOps: [gw('g2'), gw('g3', { name: 'x' }, '5')] });
  t.same([g3.code, g3.cairnCode], [10, 'CAS_FAILED'], 'an op that fails: ABORTED / CAS_FAILED');
  t.match(g3.details, /then\[1\]/, 'naming the op');
  t.equal(await version(agent, 'g2'), undefined, 'nothing of the branch applied');
  const ghostile: Array<[string, object, RegExp]> = [
    ['129 ops', { thenOps: Array.from({ length: 129 }, (_, i) => gw(`h${i}`)) }, /129 ops; at most 128/],
    ['a name twice', { thenOps: [gw('h1'), { delete: { id: id('h1') } }] }, /then\[1\]/],
    ['an op with its own request id', { thenOps: [{ write: { id: id('h2'), dataJson: '{"name":"h"}', requestId: 'x' } }] }, /request_id must be empty/],
    ['an empty op', { thenOps: [{}] }, /one of write, delete, write_status/],
    ['no target', { compare: [{ id: id('h3') }] }, /compare\[0\]: target/],
    ['a bad name', { thenOps: [{ delete: { id: id('Bad Name') } }] }, /then\[0\]: name/],
  ];
  const gstate = await snapshot();
  for (const [what, req, msg] of ghostile) {
    const r = await grpcUnary(client, 'Txn', req);
    t.equal(r.code, 3, `${what}: INVALID_ARGUMENT (${r.details})`);
    t.match(r.details, msg, `${what}: says why`);
  }
  const unknown = await grpcUnary(client, 'Txn', Buffer.concat([Buffer.from(grpcTxnBytes({ thenOps: [] })), Buffer.from([0xf8, 0x07, 0x01])]));
  t.equal(unknown.code, 3, 'an unknown field is INVALID_ARGUMENT');
  const huge = await grpcUnary(client, 'Txn', { thenOps: [gw('huge', { name: 'x'.repeat(5 * 1024 * 1024) })] });
  t.equal(huge.cairnCode, 'TOO_LARGE', 'a message over the limit is TOO_LARGE');
  t.equal(await snapshot(), gstate, 'hostile gRPC requests changed nothing');
});

t.test('a transaction sent to a follower is forwarded to the leader and applied on every node', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'cairn-txn-'));
  const agents: Agent[] = [];
  t.teardown(async () => {
    for (const a of agents) await a.close();
    await rm(dir, { recursive: true, force: true });
  });
  for (const cfg of await clusterConfigs(dir, 3, { demoTypes: true, txnMaxOps: 4 })) agents.push(await startAgent(cfg, { logger: createLogger({ level: 'silent', nodeId: cfg.nodeId }) }));
  await Promise.all(agents.map((a) => a.ready));
  const leader = await waitForAgreedLeader(agents, 15_000);
  const follower = agents.find((a) => a !== leader) as Agent;
  const r = await txn(follower, { compare: [{ target: 'absent', type: ARTIST, name: 'f1' }], then: [w('f1'), w('f2')] });
  t.equal(r.status, 200, JSON.stringify(r.json));
  t.equal(r.json['succeeded'], true);
  const rev = Number(r.json['revision']);
  for (const a of agents) {
    await waitUntil(() => (a.coordinator()?.status().applied ?? 0) >= rev, 10_000, `${a.nodeId} to apply the transaction`);
    const names = await a.coordinator()?.read('stale', (s) => [...s.all()].filter((x) => x.version === rev).map((x) => x.id.name));
    t.same(names?.value, ['f1', 'f2'], `${a.nodeId} holds both at revision ${rev}`);
  }
  // Each created resource's uid is a ULID of its own (API.md: a uid is a ULID).
  const uids = (await leader.coordinator()?.read('stale', (s) => [...s.all()].filter((x) => x.version === rev).map((x) => x.id.uid)))?.value ?? [];
  t.equal(uids.length, 2);
  for (const u of uids) t.match(u, /^[0-9A-HJKMNP-TV-Z]{26}$/, `uid ${u} is a ULID`);
  t.not(uids[0], uids[1], 'one ULID per op');
  // The follower's own checks apply first: --txn-max-ops 4, a name twice.
  const five = await txn(follower, { then: ['f3', 'f4', 'f5', 'f6', 'f7'].map((n) => w(n)) });
  t.equal(five.status, 400);
  t.match(String(errorOf(five)['message']), /5 ops; at most 4/, '--txn-max-ops sets the limit');
  t.equal((await txn(follower, { then: [w('f3'), w('f3')] })).status, 400);
  // The leader checks a forwarded transaction itself (a follower built it, or something posing as one).
  const fc = follower.coordinator() as NonNullable<ReturnType<Agent['coordinator']>>;
  const head = { time: new Date(0).toISOString(), uid: 'uid-fwd', generation: 'gen-fwd' };
  const op = (name: string) => ({ op: 'delete', id: { type: { group: 'demo', groupVersion: 'v1', kind: 'Artist' }, tenancy: { partition: 'default', namespace: 'default' }, name } });
  const forwarded: Array<[string, unknown, RegExp]> = [
    ['over the leader\'s limit', { ...head, compare: [], then: ['x1', 'x2', 'x3', 'x4', 'x5'].map(op), else: [] }, /5 ops; at most 4/],
    ['a name twice', { ...head, compare: [], then: [op('x1'), op('x1')], else: [] }, /then\[1\]/],
    ['a bad name', { ...head, compare: [], then: [op('Bad_Name')], else: [] }, /then\[0\]: name/],
    ['an unknown type', { ...head, compare: [{ target: 'exists', id: { type: { group: 'no', groupVersion: 'v1', kind: 'Such' }, tenancy: { partition: '', namespace: '' }, name: 'x' } }], then: [], else: [] }, /compare\[0\]/],
  ];
  // The leader's check is the local one (issue 19 review, item 2): the ACL types are refused
  // as ops, and the writes' data is at most 4 MiB together (each write here within the
  // single-write limit the leader allows a forwarded write, 2 MiB).
  const aclOp = { op: 'delete', id: { type: { group: 'cairn', groupVersion: 'v1', kind: 'ACLToken' }, tenancy: { partition: '', namespace: '' }, name: 'evil' } };
  const big = (name: string) => ({ ...op(name), op: 'write', data: { name: 'z'.repeat(1100 * 1024) } });
  // Item 4: the leader's uids for created resources are carried, one ULID per op.
  forwarded.push(['no thenUids', { ...head, compare: [], then: [op('x1')], else: [] }, /must carry thenUids/]);
  forwarded.push(['a uid that is not a ULID', { ...head, compare: [], then: [op('x1')], else: [], thenUids: ['uid-fwd-0'], elseUids: [] }, /thenUids\[0\] "uid-fwd-0" is not a ULID/]);
  forwarded.push(['an ACL-type op', { ...head, compare: [], then: [op('x1')], else: [aclOp] }, /^else\[0\]: cairn\.ACLToken cannot be changed in a transaction/]);
  const overData: [string, unknown, RegExp] = ['over the data limit', { ...head, compare: [], then: ['d1', 'd2', 'd3', 'd4'].map(big), else: [] }, /writes carry \d+ bytes of data; at most 4194304/];
  for (const [what, body, msg] of [...forwarded, overData]) {
    const e = await fc.propose(CommandType.Txn, body).then(
      () => undefined,
      (x: unknown) => x as Error,
    );
    const want = body === overData[1] ? 'TOO_LARGE' : 'INVALID_ARGUMENT';
    t.ok(e !== undefined && (e as { code?: string }).code === want, `${what}: the leader refuses it, ${want} (${String(e?.message).slice(0, 200)})`);
    t.match(String(e?.message), msg, `${what}: says why`);
  }
  t.equal(await version(leader, 'd1'), undefined, 'the transaction over the data limit applied nothing');
});

t.test('the client library: client.txn().if().then().else().commit()', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'cairn-txn-'));
  const agent = await startAgent(devConfig(dir, { demoTypes: true }), { logger: createLogger({ level: 'silent', nodeId: 'dev' }) });
  const client = new CairnClient({ endpoints: [agent.grpcAddress], timeoutMs: 10_000 });
  t.teardown(async () => {
    client.close();
    await agent.close();
    await rm(dir, { recursive: true, force: true });
  });
  await agent.ready;
  await waitUntil(() => agent.coordinator()?.status().role === 'leader', 10_000, 'the dev node to lead');
  const korn = { type: ARTIST, name: 'korn' };
  const tool = { type: ARTIST, name: 'tool' };
  const created = await client.write(korn, { data: { name: 'Korn' } });

  const r = await client
    .txn()
    .if(Compare.version(korn, created.version), Compare.absent(tool))
    .then(Op.write(korn, { data: { name: 'Korn', genre: 'metal' } }), Op.write(tool, { data: { name: 'Tool' }, version: '0' }))
    .else(Op.delete(korn))
    .commit();
  t.equal(r.succeeded, true);
  t.equal(r.failedComparison, undefined);
  t.same(
    r.results.map((x) => [x.op, x.op === 'delete' ? x.deleted : x.resource.version]),
    [
      ['write', r.revision],
      ['write', r.revision],
    ],
  );

  // The comparison fails now (korn moved on): the else branch, status write included.
  const k = (await client.read(korn)).resource;
  const e = await client
    .txn()
    .if(Compare.exists(korn), Compare.version(korn, created.version))
    .then(Op.delete(tool))
    .else(Op.writeStatus({ ...korn, uid: k.id.uid }, 'demo.v1.c', { observed_generation: k.generation, conditions: [{ type: 'Ready', state: 'TRUE', reason: '', message: '' }] }), Op.delete(tool, { version: r.revision }))
    .commit();
  t.same([e.succeeded, e.failedComparison], [false, 1]);
  t.same(
    e.results.map((x) => x.op),
    ['status', 'delete'],
  );
  t.ok((e.results[1] as { deleted: boolean }).deleted);

  // A uid comparison, and an op that fails: the error names it, nothing applied.
  const failure = await client
    .txn()
    .if(Compare.uid(korn, k.id.uid))
    .then(Op.write({ type: ARTIST, name: 'new-one' }, { data: { name: 'n' } }), Op.write(korn, { data: { name: 'K' }, version: '1' }))
    .commit()
    .then(
      () => undefined,
      (x: unknown) => x,
    );
  t.ok(isCairnClientError(failure) && failure.code === 'CAS_FAILED', `CAS_FAILED (${String(failure)})`);
  t.equal(isCairnClientError(failure) ? failure.details['failed_op'] : undefined, 1, 'details.failed_op');
  t.equal(isCairnClientError(failure) ? failure.details['branch'] : undefined, 'then', 'details.branch');
  const gone = await client.read({ type: ARTIST, name: 'new-one' }).then(
    () => 'found',
    (x: unknown) => (isCairnClientError(x) ? x.code : String(x)),
  );
  t.equal(gone, 'NOT_FOUND', 'the first op was not applied');

  // One request id for the call: committing again with the same id answers the first result.
  const first = await client.txn().then(Op.write({ type: ARTIST, name: 'idem' }, { data: { name: 'one' } })).commit({ requestId: 'client-txn-1' });
  const again = await client.txn().then(Op.write({ type: ARTIST, name: 'idem' }, { data: { name: 'two' } })).commit({ requestId: 'client-txn-1' });
  t.same(again, first);

  // The builder is not a promise, and is used once.
  const b = client.txn().then(Op.delete(korn));
  await t.rejects(
    (async () => {
      await (b as unknown as Promise<unknown>);
    })(),
    /not a promise: call \.commit\(\)/,
  );
  const one = client.txn().if(Compare.exists(korn));
  await one.commit();
  t.throws(() => one.then(Op.delete(korn)), /already committed/);
});

t.test('the writes\' data is at most 4 MiB together, though each write and the message are within their limits', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'cairn-txn-'));
  const agent = await startAgent(devConfig(dir, { demoTypes: true, grpcMaxMessageBytes: 8 * 1024 * 1024 }), { logger: createLogger({ level: 'silent', nodeId: 'dev' }) });
  const client = new grpc.Client(agent.grpcAddress, grpc.credentials.createInsecure());
  t.teardown(async () => {
    client.close();
    await agent.close();
    await rm(dir, { recursive: true, force: true });
  });
  await agent.ready;
  await waitUntil(() => agent.coordinator()?.status().role === 'leader', 10_000, 'the dev node to lead');
  const gw = (name: string, kb: number) => ({ write: { id: { type: ARTIST, name }, dataJson: JSON.stringify({ name: 'x'.repeat(kb * 1024) }) } });
  const stored = async (): Promise<string[]> => (await agent.coordinator()?.read('linearizable', (s) => [...s.all()].map((r) => r.id.name)))?.value ?? [];
  // Five writes of 900 KB: each under the 1 MiB data limit, the message (~4.4 MiB) under the
  // 8 MiB message limit set here, the data together over 4 MiB.
  const over = await grpcUnary(client, 'Txn', { thenOps: ['d1', 'd2', 'd3', 'd4', 'd5'].map((n) => gw(n, 900)) });
  t.equal(over.cairnCode, 'TOO_LARGE', `refused TOO_LARGE (${over.details.slice(0, 200)})`);
  t.match(over.details, /the transaction's writes carry \d+ bytes of data; at most 4194304/);
  t.same(await stored(), [], 'nothing applied');
  // Four of them (3.5 MiB) pass.
  const fits = await grpcUnary(client, 'Txn', { thenOps: ['d1', 'd2', 'd3', 'd4'].map((n) => gw(n, 900)) });
  t.equal(fits.code, 0, fits.details);
});

t.test('the client builder refuses a runaway list with a clear error (src/cli/txn.test.ts: cairn txn)', async (t) => {
  const builder = new CairnClient({ endpoints: ['127.0.0.1:1'], timeoutMs: 1_000 });
  t.teardown(() => builder.close());
  const ops = Array.from({ length: 6_000 }, (_, i) => Op.delete({ type: ARTIST, name: `n${i}` }));
  const b = builder.txn().then(...ops);
  t.throws(() => b.then(...ops), { message: /then: the transaction would have 12000 then ops; the client takes at most 10000/ }, 'the builder counts before appending');
});

t.test('the quota: a transaction that would grow the data past it is refused whole (507 NO_SPACE), its delete undone', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'cairn-txn-'));
  const agent = await startAgent(devConfig(dir, { demoTypes: true, quotaBytes: 1024 * 1024 }), { logger: createLogger({ level: 'silent', nodeId: 'dev' }) });
  t.teardown(async () => {
    await agent.close();
    await rm(dir, { recursive: true, force: true });
  });
  await agent.ready;
  await waitUntil(() => agent.coordinator()?.status().role === 'leader', 10_000, 'the dev node to lead');
  for (let i = 0; i < 12; i++) t.equal((await http(agent, 'PUT', `/v1/resource/${ARTIST}/r${i}`, { data: { name: 'x'.repeat(64 * 1024) } })).status, 200, `r${i} fits`);
  const v0 = await version(agent, 'r0');
  const r = await txn(agent, { then: [{ op: 'delete', type: ARTIST, name: 'r0' }, w('big', { name: 'y'.repeat(400 * 1024) })] });
  t.equal(r.status, 507, JSON.stringify(r.json).slice(0, 300));
  t.equal(errorOf(r)['code'], 'NO_SPACE');
  t.equal(errorOf(r)['branch'], 'then', 'the branch is named (the quota judges it as a whole)');
  t.equal(await version(agent, 'r0'), v0, 'the delete before it was undone');
  t.equal(await version(agent, 'big'), undefined);
});
