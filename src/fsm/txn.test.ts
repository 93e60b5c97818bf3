import t from 'tap';
import { CairnError, ErrorCode, type LogIndex, type Term } from '../base/index.js';
import type { Entry } from '../raft/index.js';
import type { ChangeRecord, JsonValue, Resource } from '../store/index.js';
import { Fsm, CommandType, IGNORABLE_FLAG, MissingWriteHooksError, UnknownEntryTypeError, decodeCommand, encodeEnvelope, envelopeType, skipUnknownEntry, type ApplyResult, type PutInput, type PreparedPut, type WriteHooks } from './index.js';

/**
 * Transactions (envelope 0x15, docs/api.md "Transactions"): comparisons against the state at
 * the entry's position, then one branch of ops, all or nothing, at one revision. Driven
 * through whole log entries (validation, the fsm, the store).
 */

const TOPIC = { group: 'test', groupVersion: 'v1', kind: 'Topic' };
const tenancy = { partition: 'default', namespace: 'default' };

/** `partitions` must be a positive integer (the "schema"); `replicas` defaults to 1 (the mutate hook). */
class TopicHooks implements WriteHooks {
  prepare(input: PutInput, current: Resource | undefined): PreparedPut | undefined {
    if (input.type.group !== TOPIC.group || input.type.kind !== TOPIC.kind) return undefined;
    const data = input.data as Record<string, JsonValue>;
    if (data['replicas'] === undefined) data['replicas'] = 1;
    const partitions = data['partitions'];
    if (typeof partitions !== 'number' || !Number.isInteger(partitions) || partitions < 1) {
      return { ok: false, error: new CairnError(ErrorCode.INVALID_ARGUMENT, 'data does not match the schema of test.v1.Topic: /partitions must be a positive integer') };
    }
    return { ok: true, data, metadata: { ...(input.metadata ?? current?.metadata ?? {}) } };
  }
}

let seq = 0;
function header(extra: Record<string, unknown> = {}): Record<string, unknown> {
  seq++;
  return { time: `2026-11-27T10:00:${String(seq % 60).padStart(2, '0')}.000Z`, uid: `uid${seq}`, generation: `gen${seq}`, ...extra };
}

function entry(index: number, data: Uint8Array): Entry {
  return { index: index as LogIndex, term: 1 as Term, data };
}

const id = (name: string) => ({ type: TOPIC, tenancy, name });
const write = (name: string, partitions: unknown, extra: Record<string, unknown> = {}) => ({ op: 'write', id: id(name), data: { partitions }, ...extra });
const del = (name: string, extra: Record<string, unknown> = {}) => ({ op: 'delete', id: id(name), ...extra });

function txn(body: { compare?: unknown[]; then?: unknown[]; else?: unknown[] }, extra: Record<string, unknown> = {}): Uint8Array {
  return encodeEnvelope(CommandType.Txn, { ...header(extra), compare: body.compare ?? [], then: body.then ?? [], else: body.else ?? [] });
}

function put(name: string, partitions: number): Uint8Array {
  return encodeEnvelope(CommandType.ResourcePut, { ...header(), id: id(name), data: { partitions } });
}

function txnResult(r: ApplyResult): Extract<ApplyResult, { kind: 'txn' }> {
  if (!r.ok || r.kind !== 'txn') throw new Error(`expected a txn result, got ${JSON.stringify(r)}`);
  return r;
}

function failed(r: ApplyResult): Extract<ApplyResult, { ok: false }>['error'] {
  if (r.ok) throw new Error(`expected a failure, got ${JSON.stringify(r)}`);
  return r.error;
}

function names(fsm: Fsm): string[] {
  return [...fsm.store.all()].map((r) => `${r.id.name}@${r.version}`);
}

/** An fsm with a@1 (partitions 1) and b@2 (partitions 2). */
function seeded(): Fsm {
  const fsm = new Fsm({ writeHooks: new TopicHooks() });
  fsm.apply(entry(1, put('a', 1)));
  fsm.apply(entry(2, put('b', 2)));
  return fsm;
}

t.test('all comparisons hold: the then branch applies, every change at the entry index, in op order', async (t) => {
  const fsm = seeded();
  const out = fsm.apply(
    entry(3, txn({ compare: [{ target: 'version', id: id('a'), version: 1 }, { target: 'exists', id: id('b') }, { target: 'absent', id: id('c') }], then: [write('a', 5), del('b'), write('c', 7)], else: [write('z', 1)] })),
  );
  const r = txnResult(out.result);
  t.equal(r.succeeded, true);
  t.equal(r.failedComparison, undefined);
  t.equal(r.revision, 3);
  t.same(
    r.results.map((x) => x.kind),
    ['write', 'delete', 'write'],
  );
  t.same(
    out.changes.map((c: ChangeRecord) => `${c.kind} ${c.resource.id.name}@${c.revision}`),
    ['upsert a@3', 'delete b@3', 'upsert c@3'],
  );
  t.same(names(fsm), ['a@3', 'c@3']);
  const c = fsm.store.get({ group: 'test', kind: 'Topic', tenancy, name: 'c' });
  t.same(c?.data, { partitions: 7, replicas: 1 }, 'the type hooks ran at apply');
  t.equal(c?.id.uid, `uid${seq}-2`, 'a created resource gets <command uid>-<op index>');
});

t.test('a comparison that does not hold: the else branch applies, and the first failing comparison is named', async (t) => {
  const fsm = seeded();
  const out = fsm.apply(
    entry(3, txn({ compare: [{ target: 'exists', id: id('a') }, { target: 'uid', id: id('b'), uid: 'nope' }, { target: 'version', id: id('a'), version: 99 }], then: [write('a', 5)], else: [write('x', 3)] })),
  );
  const r = txnResult(out.result);
  t.equal(r.succeeded, false);
  t.equal(r.failedComparison, 1, 'the uid comparison, the first of the two that fail');
  t.same(names(fsm), ['a@1', 'b@2', 'x@3'], 'only the else branch applied');
});

t.test('no else branch: a failed comparison changes nothing and is still an answer at its revision', async (t) => {
  const fsm = seeded();
  const out = fsm.apply(entry(3, txn({ compare: [{ target: 'absent', id: id('a') }], then: [del('a')] })));
  const r = txnResult(out.result);
  t.same({ succeeded: r.succeeded, failedComparison: r.failedComparison, results: r.results, revision: r.revision }, { succeeded: false, failedComparison: 0, results: [], revision: 3 });
  t.same(out.changes, []);
  t.same(names(fsm), ['a@1', 'b@2']);
  t.equal(fsm.store.revision, 3);
});

t.test('version 0 compares an absent resource; uid compares the stored uid', async (t) => {
  const fsm = seeded();
  const uidA = fsm.store.get({ group: 'test', kind: 'Topic', tenancy, name: 'a' })?.id.uid;
  const r = txnResult(fsm.apply(entry(3, txn({ compare: [{ target: 'version', id: id('nope'), version: 0 }, { target: 'uid', id: id('a'), uid: uidA }], then: [write('n', 1)] }))).result);
  t.equal(r.succeeded, true);
});

t.test('all or nothing: the third op fails (CAS), the first two are undone, the answer names the op and why', async (t) => {
  const fsm = seeded();
  const before = fsm.store.dataBytes;
  const out = fsm.apply(entry(3, txn({ then: [write('a', 5), del('b'), write('c', 1, { expectedVersion: 42 })] })));
  const e = failed(out.result);
  t.equal(e.code, ErrorCode.CAS_FAILED);
  t.match(e.message, /then\[2\] \(write of test\.v1\.Topic .*c\)/);
  t.equal(e.details['failedOp'], 2);
  t.equal(e.details['branch'], 'then');
  t.same(out.changes, [], 'nothing published');
  t.same(names(fsm), ['a@1', 'b@2'], 'a and b as before');
  t.equal(fsm.store.dataBytes, before, 'the data size as before');
  // The store is still consistent afterwards: a later write applies normally.
  t.equal(txnResult(fsm.apply(entry(4, txn({ then: [write('c', 1)] }))).result).succeeded, true);
  t.same(names(fsm), ['a@1', 'b@2', 'c@4']);
});

t.test('all or nothing for every kind of apply failure: hooks (validation), a missing status target, a uid mismatch, a name twice', async (t) => {
  const cases: Array<[string, unknown[], string]> = [
    ['the type hooks refuse', [write('a', 5), write('c', -1)], ErrorCode.INVALID_ARGUMENT],
    ['a status write of a resource that does not exist', [write('a', 5), { op: 'status', id: { ...id('zz'), uid: 'u' }, key: 'k', observedGeneration: 'g', conditions: [] }], ErrorCode.NOT_FOUND],
    ['a write naming another uid', [write('a', 5), write('b', 3, { id: { ...id('b'), uid: 'other' } })], ErrorCode.UID_MISMATCH],
    ['a name twice in the branch', [write('a', 5), del('a')], ErrorCode.INVALID_ARGUMENT],
  ];
  for (const [what, ops, code] of cases) {
    const fsm = seeded();
    const e = failed(fsm.apply(entry(3, txn({ then: ops }))).result);
    t.equal(e.code, code, what);
    t.equal(e.details['failedOp'], 1, `${what}: op 1 is named`);
    t.same(names(fsm), ['a@1', 'b@2'], `${what}: nothing applied`);
  }
});

t.test('the else branch is all or nothing too', async (t) => {
  const fsm = seeded();
  const e = failed(fsm.apply(entry(3, txn({ compare: [{ target: 'absent', id: id('a') }], else: [write('x', 1), write('y', 0)] }))).result);
  t.equal(e.details['branch'], 'else');
  t.equal(e.details['failedOp'], 1);
  t.same(names(fsm), ['a@1', 'b@2']);
});

t.test('a retried request id answers with the first result and applies nothing again', async (t) => {
  const fsm = seeded();
  const first = fsm.apply(entry(3, txn({ then: [write('c', 1)] }, { requestId: 'rid-1' })));
  // The same request again (a forwarded retry after a leader change), now with a comparison that would fail.
  const again = fsm.apply(entry(4, txn({ compare: [{ target: 'absent', id: id('c') }], then: [write('c', 9)] }, { requestId: 'rid-1' })));
  t.same(again.result, first.result);
  t.same(again.changes, []);
  t.same(fsm.store.get({ group: 'test', kind: 'Topic', tenancy, name: 'c' })?.data, { partitions: 1, replicas: 1 });
});

t.test('the quota: a branch that would grow the data past it is refused whole with NO_SPACE, and raises the alarm', async (t) => {
  const fsm = seeded();
  const quotaBytes = fsm.store.dataBytes + 300;
  const big = 'x'.repeat(400);
  const e = failed(fsm.apply(entry(3, txn({ then: [del('b'), write('c', 1, { data: { partitions: 1, note: big } })] }, { quotaBytes }))).result);
  t.equal(e.code, ErrorCode.NO_SPACE);
  t.same(names(fsm), ['a@1', 'b@2'], 'the delete of b is undone too');
  t.same(fsm.alarms, ['NO_SPACE']);
});

t.test('the quota judges the branch as a whole: a write and a larger delete pass in either order, at a quota just above the data', async (t) => {
  for (const order of ['write first', 'delete first'] as const) {
    const fsm = seeded();
    // b holds ~10 KB; the new write ~5 KB: the branch shrinks the data.
    fsm.apply(entry(3, encodeEnvelope(CommandType.ResourcePut, { ...header(), id: id('b'), data: { partitions: 2, note: 'y'.repeat(10_000) } })));
    const quotaBytes = fsm.store.dataBytes + 100;
    const w = write('c', 1, { data: { partitions: 1, note: 'x'.repeat(5_000) } });
    const ops = order === 'write first' ? [w, del('b')] : [del('b'), w];
    const r = txnResult(fsm.apply(entry(4, txn({ then: ops }, { quotaBytes }))).result);
    t.equal(r.succeeded, true, `${order}: applied`);
    t.same(names(fsm), ['a@1', 'c@4'], `${order}: b deleted, c written`);
    t.same(fsm.alarms, [], `${order}: no NO_SPACE alarm`);
  }
  // Net growth past the quota is refused, naming the branch, whatever the order.
  const fsm = seeded();
  const quotaBytes = fsm.store.dataBytes + 100;
  const e = failed(fsm.apply(entry(3, txn({ then: [write('c', 1, { data: { partitions: 1, note: 'x'.repeat(5_000) } }), del('b')] }, { quotaBytes }))).result);
  t.equal(e.code, ErrorCode.NO_SPACE);
  t.equal(e.details['branch'], 'then');
  t.match(e.message, /^transaction then branch \(2 ops\): it needs \d+ more bytes .* none of the then branch applied$/);
});

t.test('a created resource gets its op’s uid from thenUids / elseUids; the counts must match the branches', async (t) => {
  const fsm = seeded();
  const U = ['01JDQ0000000000000000000A1', '01JDQ0000000000000000000A2'];
  t.equal(txnResult(fsm.apply(entry(3, txn({ then: [write('c', 1), write('d', 1)] }, { thenUids: U, elseUids: [] }))).result).succeeded, true);
  t.same([...fsm.store.all()].filter((r) => r.version === 3).map((r) => r.id.uid), U, 'each created resource has its op’s ULID');
  t.equal(txnResult(fsm.apply(entry(4, txn({ compare: [{ target: 'absent', id: id('a') }], else: [write('e', 1)] }, { thenUids: [], elseUids: ['01JDQ0000000000000000000B1'] }))).result).succeeded, false);
  t.equal(fsm.store.get({ group: 'test', kind: 'Topic', tenancy, name: 'e' })?.id.uid, '01JDQ0000000000000000000B1', 'else ops use elseUids');
  let index = 5;
  for (const bad of [{ thenUids: ['01JDQ0000000000000000000C1'] }, { thenUids: 'x' }, { thenUids: [1, 2] }, { elseUids: ['01JDQ0000000000000000000C1'] }]) {
    const e = failed(fsm.apply(entry(index++, txn({ then: [write('f', 1), write('g', 1)] }, bad))).result);
    t.equal(e.code, ErrorCode.INTERNAL, `${JSON.stringify(bad)}: malformed`);
    t.match(e.message, /Uids must be an array of \d+ non-empty strings/);
  }
});

t.test('results are slim: each op names its resource (id, version, generation), never its body, so the answer and the remembered result stay small', async (t) => {
  const fsm = seeded();
  const note = 'n'.repeat(100 * 1024);
  const names = ['r0', 'r1', 'r2', 'r3'];
  names.forEach((n, i) => fsm.apply(entry(3 + i, encodeEnvelope(CommandType.ResourcePut, { ...header(), id: id(n), data: { partitions: 1, note } }))));
  const uidOf = (n: string) => (fsm.store.get({ group: 'test', kind: 'Topic', tenancy, name: n }) as Resource).id.uid;
  const status = (n: string) => ({ op: 'status', id: { ...id(n), uid: uidOf(n) }, key: 'test.v1.c', observedGeneration: 'g', conditions: [] });
  const out = fsm.apply(entry(7, txn({ then: [...names.slice(0, 3).map(status), del('r3'), write('a', 1)] }, { requestId: 'rid-slim' })));
  const r = txnResult(out.result);
  const size = JSON.stringify(r).length;
  t.ok(size < 2_000, `the result of five ops on 100 KB resources is ${size} bytes`);
  for (const x of r.results) {
    t.same(Object.keys(x.resource ?? {}).sort(), ['generation', 'id', 'version'], `${x.kind}: the resource is named, not carried`);
  }
  const d = r.results[3];
  t.same(d?.kind === 'delete' ? [d.deleted, d.deleting, d.resource?.id.name] : [], [true, false, 'r3'], 'a delete says it is gone');
  const w = r.results[4];
  t.same(w?.kind === 'write' ? [w.changed, w.resource.version] : [], [false, 1], 'an unchanging write says so, with the stored version');
  const again = fsm.apply(entry(8, txn({ then: [write('b', 9)] }, { requestId: 'rid-slim' })));
  t.same(again.result, r, 'the de-duplication table remembers the slim result');
  t.ok(JSON.stringify(again.result).length < 2_000);
});

t.test('a delete held back by finalizers is reported deleting', async (t) => {
  const fsm = seeded();
  fsm.apply(entry(3, encodeEnvelope(CommandType.ResourcePut, { ...header(), id: id('f'), data: { partitions: 1 }, finalizers: ['test.v1/keep'] })));
  const r = txnResult(fsm.apply(entry(4, txn({ then: [del('f'), del('nothing')] }))).result);
  const [held, none] = r.results;
  t.same(held?.kind === 'delete' ? [held.deleted, held.deleting, held.resource?.version] : [], [false, true, 4]);
  t.same(none?.kind === 'delete' ? [none.deleted, none.deleting, none.resource] : [], [false, false, null]);
});

t.test('a cascade that reaches a resource another op of the branch changes is refused', async (t) => {
  const fsm = seeded();
  const a = fsm.store.get({ group: 'test', kind: 'Topic', tenancy, name: 'a' }) as Resource;
  fsm.apply(entry(3, encodeEnvelope(CommandType.ResourcePut, { ...header(), id: id('child'), data: { partitions: 1 }, owner: a.id })));
  const e = failed(fsm.apply(entry(4, txn({ then: [write('child', 2), del('a')] }))).result);
  t.equal(e.code, ErrorCode.INVALID_ARGUMENT);
  t.equal(e.details['failedOp'], 1);
  t.same(names(fsm), ['a@1', 'b@2', 'child@3']);
});

t.test('replicas applying the same entries end equal (state, results, change records)', async (t) => {
  const entries = [
    put('a', 1),
    txn({ compare: [{ target: 'exists', id: id('a') }], then: [write('a', 2), write('b', 1)] }),
    txn({ compare: [{ target: 'version', id: id('a'), version: 1 }], then: [del('a')], else: [write('c', 3), del('b')] }),
    txn({ then: [write('d', 1), write('e', 0)] }),
    txn({ compare: [{ target: 'absent', id: id('b') }], then: [{ op: 'status', id: { ...id('c'), uid: 'placeholder' }, key: 'k', observedGeneration: 'g', conditions: [] }] }),
  ].map((d, i) => entry(i + 1, d));
  const run = () => {
    const fsm = new Fsm({ writeHooks: new TopicHooks() });
    const outs = entries.map((e) => fsm.apply(e));
    return { outs: JSON.stringify(outs), state: JSON.stringify([...fsm.store.all()]), bytes: fsm.store.dataBytes };
  };
  const one = run();
  const two = run();
  t.same(two, one);
  t.match(one.state, /"name":"c"/);
});

t.test('a write in a transaction without hooks stops the node; a transaction without writes needs none', async (t) => {
  const fsm = new Fsm();
  fsm.apply(entry(1, encodeEnvelope(CommandType.ResourceWrite, { ...header(), id: id('a'), data: { partitions: 1 }, expectedVersion: 0 })));
  const r = txnResult(fsm.apply(entry(2, txn({ compare: [{ target: 'exists', id: id('a') }], then: [del('a')] }))).result);
  t.equal(r.succeeded, true);
  t.throws(() => fsm.apply(entry(3, txn({ then: [write('b', 1)] }))), MissingWriteHooksError);
});

t.test('malformed transaction bodies are refused with INTERNAL, the same everywhere, changing nothing; the leader refuses them before proposing', async (t) => {
  const bodies: unknown[] = [
    { ...header(), compare: 'x', then: [], else: [] },
    { ...header(), compare: [{ target: 'bigger', id: id('a') }], then: [], else: [] },
    { ...header(), compare: [{ target: 'version', id: id('a') }], then: [], else: [] },
    { ...header(), compare: [], then: [{ op: 'rename', id: id('a') }], else: [] },
    { ...header(), compare: [], then: [{ op: 'write', id: id('a') }], else: [] },
    { ...header(), compare: [], then: [], else: [{ op: 'status', id: id('a'), key: 'k', observedGeneration: 'g', conditions: [] }] },
    { ...header(), compare: [], then: [{ op: 'delete', id: id('a'), requestId: 'sneaky' }], else: [] },
    { ...header(), compare: [], then: [] },
  ];
  for (const [i, body] of bodies.entries()) {
    const fsm = seeded();
    const envelope = encodeEnvelope(CommandType.Txn, body);
    const e = failed(fsm.apply(entry(3, envelope)).result);
    t.equal(e.code, ErrorCode.INTERNAL, `body ${i}`);
    t.same(names(fsm), ['a@1', 'b@2']);
    t.throws(() => decodeCommand(envelope), /malformed txn command/, `body ${i}: refused by the leader`);
  }
});

t.test('0x15 is not ignorable: a node that does not know it stops rather than skip it', async (t) => {
  // A real transaction entry, as the leader encodes it.
  const data = txn({ then: [write('c', 1)] });
  const type = envelopeType(data);
  t.equal(type, 0x15, 'the entry carries type 0x15');
  t.equal(type & IGNORABLE_FLAG, 0, 'without the ignorable flag');
  // What a node that predates 0x15 runs for it: the unknown-type path (the Fsm's default case).
  t.throws(() => skipUnknownEntry(type, 3 as LogIndex), { name: 'UnknownEntryTypeError', message: /log entry 3 has unknown command type 0x15; this node is older than the cluster/ });
  // The same path skips an ignorable type (so the check above is the flag's doing, not the path's).
  const ignored: number[] = [];
  skipUnknownEntry(0x95, 4 as LogIndex, (ty) => ignored.push(ty));
  t.same(ignored, [0x95]);
  // And a node of this version applies 0x15 but stops at an unknown non-ignorable type (0x18: 0x16 and 0x17 are leases).
  const fsm = seeded();
  t.equal(txnResult(fsm.apply(entry(3, data)).result).succeeded, true);
  t.throws(() => fsm.apply(entry(4, encodeEnvelope(0x18, {}))), UnknownEntryTypeError);
});

t.test('an op that throws (a hook error) mid-branch: the store is as before, its revision and indexes both', async (t) => {
  class Throwing extends TopicHooks {
    override prepare(input: PutInput, current: Resource | undefined): PreparedPut | undefined {
      if (input.name === 'boom') throw new Error('hook bug');
      return super.prepare(input, current);
    }
  }
  const fsm = new Fsm({ writeHooks: new Throwing() });
  fsm.apply(entry(1, put('a', 1)));
  fsm.apply(entry(2, put('b', 2)));
  const before = { names: names(fsm), revision: fsm.store.revision, data: fsm.store.dataBytes };
  t.throws(() => fsm.apply(entry(3, txn({ then: [write('a', 5), del('b'), write('c', 1), write('boom', 1)] }))), /hook bug/);
  t.same(names(fsm), before.names, 'the ops before it are undone (a, b as they were; no c)');
  t.same(fsm.store.get({ group: 'test', kind: 'Topic', tenancy, name: 'a' })?.data, { partitions: 1, replicas: 1 });
  t.equal(fsm.store.dataBytes, before.data);
  t.equal(fsm.store.revision, before.revision, 'the revision rolled back with the indexes');
  t.equal(fsm.appliedIndex, 2, 'the entry was not applied');
});

t.test('snapshots keep a transaction’s remembered result (dedupe survives restore)', async (t) => {
  const fsm = seeded();
  const first = fsm.apply(entry(3, txn({ then: [write('c', 1)] }, { requestId: 'rid-snap' }))).result;
  const snap = fsm.snapshot();
  const bytes = Buffer.concat([...snap.chunks()]);
  const copy = new Fsm({ writeHooks: new TopicHooks() });
  copy.restore({ index: snap.index, term: 1 as Term } as Parameters<Fsm['restore']>[0], bytes);
  const again = copy.apply(entry(4, txn({ then: [write('c', 5)] }, { requestId: 'rid-snap' })));
  t.same(again.result, first);
  t.same(again.changes, []);
});
