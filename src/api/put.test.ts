import t, { type Test } from 'tap';
import { CairnError } from '../base/index.js';
import type { Identity, AclRule } from '../auth/index.js';
import type { JsonValue } from '../store/index.js';
import { LocalCluster, testClock, type LocalNode } from '../replica/testing/index.js';
import { AccessControl } from './acl.js';
import { registerDemoTypes } from './demo-types.js';
import { TypeRegistry } from './registry.js';
import { ResourceService, type CallContext } from './resource-service.js';
import { runningNode } from './served-node.js';
import { registryWriteHooks } from './write-hooks.js';

/**
 * Unconditional writes through the resource service (docs/api.md "Unconditional writes"): one
 * ResourcePut entry each, the type's hooks run by the state machine at apply. Over a real
 * three-node replica group (Raft core, FSM, store; in-memory disk and network).
 */

const clock = testClock;

function registry(): TypeRegistry {
  const r = new TypeRegistry();
  registerDemoTypes(r);
  // A validate hook that depends on the current resource (an immutable-field rule).
  r.register({
    group: 'test',
    groupVersion: 'v1',
    kind: 'Counter',
    scope: 'namespace',
    schema: { type: 'object', properties: { n: { type: 'integer', minimum: 0 } }, required: ['n'], additionalProperties: false },
    validate: (res, current) => {
      const before = (current?.data as { n?: number } | undefined)?.n;
      const n = (res.data as { n: number }).n;
      return before !== undefined && n < before ? `n cannot decrease (from ${before} to ${n})` : undefined;
    },
  });
  r.register({ group: 'test', groupVersion: 'v1', kind: 'Secret', scope: 'namespace', schema: { type: 'object' }, access: (_v, _r, token) => token === 'open-sesame' });
  return r;
}

async function harness(t: Test, access = false): Promise<{ svc: ResourceService; leader: LocalNode; cluster: LocalCluster }> {
  const reg = registry();
  const cluster = new LocalCluster({ seed: 3, writeHooks: registryWriteHooks(reg) });
  t.teardown(() => cluster.close());
  await cluster.bootstrap(['n1', 'n2', 'n3']);
  const leader = await cluster.waitForLeader();
  const svc = new ResourceService(runningNode({ coordinator: leader.coordinator }), reg, clock, access ? { access: new AccessControl({ enabled: true, clock }) } : {});
  return { svc, leader, cluster };
}

async function rejection(p: Promise<unknown>): Promise<CairnError> {
  try {
    await p;
  } catch (e) {
    if (e instanceof CairnError) return e;
    throw e;
  }
  throw new Error('expected a refusal, the call succeeded');
}

/** Polls (with a deadline) until every node has applied what the leader has. */
async function converged(cluster: LocalCluster, leader: LocalNode): Promise<void> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const target = leader.fsm.appliedIndex;
    if ([...cluster.nodes.values()].every((n) => n.fsm.appliedIndex >= target)) return;
    if (Date.now() > deadline) throw new Error('the followers did not catch up within 10 s');
    await new Promise((r) => setImmediate(r));
  }
}

const ns = { partition: 'default', namespace: 'default' };
const artist = (name: string, data: JsonValue, extra: Record<string, unknown> = {}): Parameters<ResourceService['write']>[0] => ({ type: 'demo.v1.Artist', ...ns, name, data, ...extra });

t.test('64 concurrent unconditional writes of one key all succeed, with distinct increasing versions; the replicas agree', async (t) => {
  const { svc, leader, cluster } = await harness(t);
  await svc.write(artist('hot', { name: 'first' }));
  const results = await Promise.allSettled(Array.from({ length: 64 }, (_, i) => svc.write(artist('hot', { name: `w${i}` }))));
  const failed = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected').map((r) => (r.reason instanceof CairnError ? r.reason.code : String(r.reason)));
  t.same(failed, [], 'no write failed (none CAS_FAILED)');
  const written = results.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
  const versions = written.map((r) => Number(r.version));
  t.equal(new Set(versions).size, 64, 'each write has its own version');
  t.ok(written.every((r) => (r.data as { genre?: string }).genre === 'unknown'), 'the mutate hook ran for every write');
  t.ok(written.every((r) => r.id.uid === written[0]?.id.uid), 'all updated the same resource (one uid)');
  const last = written.reduce((a, b) => (Number(a.version) > Number(b.version) ? a : b));
  const stored = (await svc.read({ type: 'demo.v1.Artist', ...ns, name: 'hot' })).resource;
  t.equal(stored.version, last.version, 'the stored version is the highest answered');
  t.same(stored.data, last.data, 'and the stored data is that write’s: the last in log order wins');
  await converged(cluster, leader);
  const dumps = [...cluster.nodes.values()].map((n) => JSON.stringify([...n.fsm.store.all()]));
  t.ok(dumps.every((d) => d === dumps[0]), 'every replica applied the same log to the same state');
});

t.test('hooks and the schema refuse bad objects with the same error as before (the CAS path still runs them before proposing)', async (t) => {
  const { svc, leader } = await harness(t);
  const put = await rejection(svc.write(artist('bad', { genre: 'rock' })));
  const cas = await rejection(svc.write(artist('bad', { genre: 'rock' }, { version: '0' })));
  t.equal(put.code, 'INVALID_ARGUMENT');
  t.equal(put.message, cas.message, `the same message (${put.message})`);
  t.same(put.details, cas.details, 'the same details (schema_errors)');
  await svc.write({ type: 'test.v1.Counter', ...ns, name: 'c', data: { n: 5 } });
  const down = await rejection(svc.write({ type: 'test.v1.Counter', ...ns, name: 'c', data: { n: 3 } }));
  const current = (await svc.read({ type: 'test.v1.Counter', ...ns, name: 'c' })).resource;
  const downCas = await rejection(svc.write({ type: 'test.v1.Counter', ...ns, name: 'c', data: { n: 3 }, version: current.version }));
  t.equal(down.code, 'INVALID_ARGUMENT', 'the validate hook judged the current state at apply');
  t.equal(down.message, 'data refused by test.v1.Counter: n cannot decrease (from 5 to 3)');
  t.equal(down.message, downCas.message, 'as the CAS path says it');
  t.same(current.data, { n: 5 }, 'nothing changed');
  const before = leader.fsm.store.get({ group: 'test', kind: 'Counter', tenancy: ns, name: 'c' });
  t.equal(before?.version, Number(current.version));
});

t.test('authorization happens before proposing: a denied unconditional write appends nothing', async (t) => {
  const { svc, leader } = await harness(t, true);
  const lastIndex = leader.replica.status().lastIndex;
  const anon = await rejection(svc.write(artist('x', { name: 'x' })));
  t.match(anon.code, /^(PERMISSION_DENIED|UNAUTHENTICATED)$/, `an anonymous caller is refused (${anon.code})`);
  const readOnly: Identity = { kind: 'token', accessorId: 'acc-ro', roles: ['ro'], management: false, rules: [{ verbs: ['read'], types: ['*'], partitions: ['*'], namespaces: ['*'], namePrefix: '' }] };
  const ro = await rejection(svc.write(artist('x', { name: 'x' }), { asIdentity: readOnly }));
  t.equal(ro.code, 'PERMISSION_DENIED', 'a token without write is refused');
  const hook = await rejection(svc.write({ type: 'test.v1.Secret', ...ns, name: 's', data: {} }, { asIdentity: { kind: 'open' }, token: 'wrong' }));
  t.equal(hook.code, 'PERMISSION_DENIED', "the type's access hook is consulted");
  t.equal(leader.replica.status().lastIndex, lastIndex, 'nothing was appended to the log');
  const ok = await svc.write({ type: 'test.v1.Secret', ...ns, name: 's', data: {} }, { asIdentity: { kind: 'open' }, token: 'open-sesame' });
  t.equal(ok.id.name, 's', 'allowed with the right token');
});

t.test('an idempotency key applies an unconditional write once; the uid precondition and the owner rule still hold', async (t) => {
  const { svc } = await harness(t);
  const ctx: CallContext = { requestId: 'key-1' };
  const a = await svc.write(artist('idem', { name: 'a' }), ctx);
  const b = await svc.write(artist('idem', { name: 'b' }), ctx);
  t.same(b, a, 'the repeat answers the first result');
  t.same((await svc.read({ type: 'demo.v1.Artist', ...ns, name: 'idem' })).resource.data, { name: 'a', genre: 'unknown' });
  const uid = await rejection(svc.write(artist('idem', { name: 'c' }, { uid: 'someone-else' })));
  t.equal(uid.code, 'UID_MISMATCH');
  const owner = await rejection(svc.write(artist('idem', { name: 'c' }, { owner: { type: 'demo.v1.Artist', tenancy: ns, name: 'hot', uid: 'u1' } })));
  t.equal(owner.code, 'INVALID_ARGUMENT');
  t.match(owner.message, /owner is set at creation|does not exist/);
  const meta = await svc.write(artist('idem', { name: 'a' }, { metadata: { team: 'x' } }));
  const kept = await svc.write(artist('idem', { name: 'd' }));
  t.same(kept.metadata, meta.metadata, 'metadata left out keeps the stored metadata');
});

t.test("a restricted caller's unconditional write that clears the last finalizer still needs delete on the cascade", async (t) => {
  const { svc } = await harness(t, true);
  const open: CallContext = { asIdentity: { kind: 'open' } };
  const teamA = { partition: 'default', namespace: 'team-a' };
  const teamB = { partition: 'default', namespace: 'team-b' };
  const owner = await svc.write({ type: 'demo.v1.Artist', ...teamA, name: 'o', data: { name: 'o' }, finalizers: ['x.io/f'] }, open);
  await svc.write({ type: 'demo.v1.Album', ...teamB, name: 'child', data: { title: 'c' }, owner: { type: 'demo.v1.Artist', tenancy: teamA, name: 'o', uid: owner.id.uid } }, open);
  await svc.delete({ type: 'demo.v1.Artist', ...teamA, name: 'o' }, open);
  const rule = (namespaces: string[]): AclRule => ({ verbs: ['read', 'write', 'delete'], types: ['demo.*'], partitions: ['*'], namespaces, namePrefix: '' });
  const onlyA: Identity = { kind: 'token', accessorId: 'acc-a', roles: ['a'], management: false, rules: [rule(['team-a'])] };
  const denied = await rejection(svc.write({ type: 'demo.v1.Artist', ...teamA, name: 'o', data: { name: 'o' }, finalizers: [] }, { asIdentity: onlyA }));
  t.equal(denied.code, 'PERMISSION_DENIED', 'the cascade reaches team-b, which this token may not delete');
  t.ok((await svc.read({ type: 'demo.v1.Album', ...teamB, name: 'child' }, open)).resource, 'the child is still there');
  const both: Identity = { kind: 'token', accessorId: 'acc-ab', roles: ['ab'], management: false, rules: [rule(['team-a', 'team-b'])] };
  await svc.write({ type: 'demo.v1.Artist', ...teamA, name: 'o', data: { name: 'o' }, finalizers: [] }, { asIdentity: both });
  const gone = await rejection(svc.read({ type: 'demo.v1.Album', ...teamB, name: 'child' }, open));
  t.equal(gone.code, 'NOT_FOUND', 'with delete on both, the write deletes the owner and its cascade');
});
