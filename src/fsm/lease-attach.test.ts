import t from 'tap';
import { ErrorCode, type LogIndex, type Term } from '../base/index.js';
import type { Entry } from '../raft/index.js';
import { CommandType, Fsm, encodeEnvelope, type ApplyResult } from './index.js';

/**
 * Attachments in the state machine (docs/api.md "Leases"): the per-lease limit stamped into a
 * write that attaches (`leaseMaxAttached`, `--lease-max-attached`), decided at apply; and a
 * resource marked for deletion (held by a finalizer) is attached to nothing, the same whether
 * the replica applied the log or restored a snapshot.
 */

const TOPIC = { group: 'test', groupVersion: 'v1', kind: 'Topic' };
const tenancy = { partition: 'default', namespace: 'default' };
const id = (name: string) => ({ type: TOPIC, tenancy, name });

let seq = 0;
function header(extra: Record<string, unknown> = {}): Record<string, unknown> {
  seq++;
  return { time: '2026-11-28T10:00:00.000Z', uid: `uid${seq}`, generation: `gen${seq}`, ...extra };
}
const entry = (index: number, data: Uint8Array): Entry => ({ index: index as LogIndex, term: 1 as Term, data });
const grant = (lid: string) => encodeEnvelope(CommandType.LeaseGrant, { ...header(), id: lid, ttlSeconds: 10 });
const revoke = (lid: string) => encodeEnvelope(CommandType.LeaseRevoke, { ...header(), id: lid, reason: 'revoked' });
const write = (name: string, extra: Record<string, unknown> = {}) => encodeEnvelope(CommandType.ResourceWrite, { ...header(), id: id(name), data: { n: name }, ...extra });
const put = (name: string, extra: Record<string, unknown> = {}) => encodeEnvelope(CommandType.ResourcePut, { ...header(), id: id(name), data: { n: name }, ...extra });
const del = (name: string) => encodeEnvelope(CommandType.ResourceDelete, { ...header(), id: id(name) });
const txn = (then: unknown[], extra: Record<string, unknown> = {}) => encodeEnvelope(CommandType.Txn, { ...header(), compare: [], then, else: [], ...extra });
const hooks = { prepare: (i: { data: unknown }) => ({ ok: true as const, data: i.data as never, metadata: {} }) };

function failed(r: ApplyResult | undefined): Extract<ApplyResult, { ok: false }>['error'] {
  if (r === undefined || r.ok) throw new Error(`expected a failure, got ${JSON.stringify(r)}`);
  return r.error;
}
const attachedOf = (fsm: Fsm, lid: string) => [...(fsm.leaseTable.get(lid)?.attached ?? [])].map((u) => fsm.store.getByUid(u)?.id.name).sort();
const names = (fsm: Fsm) => [...fsm.store.all()].map((r) => r.id.name).sort();
const run = (datas: Uint8Array[], fsm = new Fsm({ writeHooks: hooks })) => ({ fsm, outs: datas.map((d) => fsm.apply(entry(fsm.appliedIndex + 1, d)).result) });
const bytes = (f: Fsm) => Buffer.concat([...f.snapshot().chunks()]);
function restoredOf(f: Fsm): Fsm {
  const r = new Fsm({ writeHooks: hooks });
  r.restore({ index: f.appliedIndex, term: 1 as Term } as never, bytes(f));
  return r;
}

t.test('the attachment limit: a write (0x10), a put (0x14) beyond it is TOO_LARGE and writes nothing; re-attaching, detaching and other leases are not counted', async (t) => {
  const max = { leaseMaxAttached: 2 };
  const { fsm, outs } = run([
    grant('l1'),
    grant('l2'),
    write('a', { lease: 'l1', ...max }),
    put('b', { lease: 'l1', ...max }),
    write('c', { lease: 'l1', ...max }), // 4: refused
    put('c', { lease: 'l1', ...max }), // 5: refused
    write('a', { lease: 'l1', data: { n: 'a2' }, ...max }), // 6: already attached: allowed
    write('c', { lease: 'l2', ...max }), // 7: another lease
    write('b', { lease: '', ...max }), // 8: detach
    write('d', { lease: 'l1', ...max }), // 9: room again
  ]);
  for (const i of [4, 5]) {
    const e = failed(outs[i]);
    t.equal(e.code, ErrorCode.TOO_LARGE, `entry ${i + 1} is refused`);
    t.match(e.message, /lease l1 has 2 resources attached, the most --lease-max-attached \(2\) allows/);
    t.same(e.details, { lease: 'l1', attached: 2, lease_max_attached: 2 });
  }
  for (const i of [6, 7, 8, 9]) t.ok(outs[i]?.ok, `entry ${i + 1} applies`);
  t.same(attachedOf(fsm, 'l1'), ['a', 'd']);
  t.same(attachedOf(fsm, 'l2'), ['c']);
  // Without the stamp (entries from before the limit) there is none.
  run([write('e', { lease: 'l1' })], fsm);
  t.same(attachedOf(fsm, 'l1'), ['a', 'd', 'e']);
  // A refused attach did not raise the NO_SPACE alarm (it is not a space refusal).
  const q = run([write('f', { lease: 'l1', leaseMaxAttached: 1, quotaBytes: 1 << 30 }), write('g', { quotaBytes: 1 << 30 })], fsm);
  t.equal(failed(q.outs[0]).code, ErrorCode.TOO_LARGE);
  t.ok(q.outs[1]?.ok, 'an ordinary write after it is not refused for space');
});

t.test('the attachment limit in a transaction: a branch counts its own attachments, and one over the limit applies nothing', async (t) => {
  const { fsm, outs } = run([
    grant('l1'),
    write('a', { lease: 'l1' }),
    txn([{ op: 'write', id: id('x'), data: {}, lease: 'l1' }, { op: 'write', id: id('y'), data: {}, lease: 'l1' }], { leaseMaxAttached: 2 }),
    txn([{ op: 'write', id: id('x'), data: {}, lease: 'l1' }], { leaseMaxAttached: 2 }),
  ]);
  const e = failed(outs[2]);
  t.equal(e.code, ErrorCode.TOO_LARGE);
  t.same(e.details, { lease: 'l1', attached: 2, lease_max_attached: 2, branch: 'then', failedOp: 1 });
  t.same(names(fsm), ['a', 'x'], 'y and the first x were not written; the later single-op branch was');
  t.same(attachedOf(fsm, 'l1'), ['a', 'x']);
  t.equal(failed(run([txn([{ op: 'write', id: id('z'), data: {}, lease: 'l1' }], { leaseMaxAttached: 2 })], fsm).outs[0]).code, ErrorCode.TOO_LARGE);
  // The stamp belongs to the transaction, not to an op.
  t.match(failed(run([txn([{ op: 'write', id: id('z'), data: {}, lease: 'l1', leaseMaxAttached: 9 }])], fsm).outs[0]).message, /header fields/);
});

t.test('a resource marked for deletion is attached to nothing, on a replica that applied the log and on one restored from its snapshot', async (t) => {
  // The reviewer's scenario (finding 8): r, held by a finalizer, keeps naming x after x is
  // revoked; x is granted again. Then s, marked while its lease y lives.
  const { fsm: live } = run([
    grant('x'),
    write('r', { finalizers: ['f'], lease: 'x' }),
    revoke('x'),
    grant('x'),
    grant('y'),
    write('s', { finalizers: ['f'], lease: 'y' }),
    del('s'),
    write('u', { lease: 'y' }),
  ]);
  t.equal(live.store.get({ group: 'test', kind: 'Topic', tenancy, name: 'r' })?.lease, 'x', 'r still names x');
  t.equal(live.store.get({ group: 'test', kind: 'Topic', tenancy, name: 's' })?.lease, 'y', 's names y');
  t.same(attachedOf(live, 'x'), [], 'the new x adopts nothing');
  t.same(attachedOf(live, 'y'), ['u'], 'marked s is not attached to y');
  const restored = restoredOf(live);
  t.same(attachedOf(restored, 'x'), attachedOf(live, 'x'));
  t.same(attachedOf(restored, 'y'), attachedOf(live, 'y'));
  // Both replicas go on to the same state: revoking y deletes u only, on both.
  const next = [revoke('y'), revoke('x')];
  const a = run(next, live);
  const b = run(next, restored);
  t.same(a.outs, b.outs);
  t.same(
    a.outs.map((r) => (r?.ok && r.kind === 'lease-revoke' ? r.deleted : -1)),
    [1, 0],
  );
  t.ok(bytes(live).equals(bytes(restored)), 'identical snapshots after');
  t.same(names(live), ['r', 's']);
});

t.test('a resource marked while attached leaves its lease: it no longer counts against the limit, on either replica', async (t) => {
  const { fsm } = run([grant('x'), write('m', { finalizers: ['f'], lease: 'x' }), del('m')]);
  t.same(attachedOf(fsm, 'x'), []);
  const restored = restoredOf(fsm);
  const next = [write('b', { lease: 'x', leaseMaxAttached: 1 }), write('c', { lease: 'x', leaseMaxAttached: 1 })];
  const a = run(next, fsm).outs;
  const b = run(next, restored).outs;
  t.ok(a[0]?.ok, 'b attaches: marked m does not fill the one place');
  t.equal(failed(a[1]).code, ErrorCode.TOO_LARGE);
  t.same(a, b);
});

t.test('a grant refused for --max-leases does not raise the NO_SPACE alarm (it is a count, not space)', async (t) => {
  const q = { quotaBytes: 1 << 30 };
  const g = (lid: string) => encodeEnvelope(CommandType.LeaseGrant, { ...header(q), id: lid, ttlSeconds: 10, maxLeases: 1 });
  const { outs } = run([g('a'), g('b'), write('w', q)]);
  t.equal(failed(outs[1]).code, ErrorCode.NO_SPACE, 'the second grant is refused');
  t.ok(outs[2]?.ok, `a write after it is not refused for space (${JSON.stringify(outs[2]).slice(0, 160)})`);
});
