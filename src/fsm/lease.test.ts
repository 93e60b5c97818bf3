import t from 'tap';
import { ErrorCode, type LogIndex, type Term } from '../base/index.js';
import type { Entry } from '../raft/index.js';
import type { ChangeRecord, Resource } from '../store/index.js';
import { CommandType, Fsm, UnknownEntryTypeError, decodeCommand, encodeEnvelope, skipUnknownEntry, type ApplyResult } from './index.js';
import { readSnapshotFrames, writeSnapshotFrames } from './snapshot-format.js';

/**
 * Leases in the state machine (envelopes 0x16 LeaseGrant and 0x17 LeaseRevoke, docs/api.md
 * "Leases"): the replicated lease table, attaching resources with a write's `lease`, and a
 * revoke (or expiry) deleting every attached resource in one entry at one revision. The state
 * machine is time-free: nothing here has a clock.
 */

const TOPIC = { group: 'test', groupVersion: 'v1', kind: 'Topic' };
const tenancy = { partition: 'default', namespace: 'default' };
const id = (name: string) => ({ type: TOPIC, tenancy, name });

let seq = 0;
function header(extra: Record<string, unknown> = {}): Record<string, unknown> {
  seq++;
  return { time: `2026-11-28T10:00:${String(seq % 60).padStart(2, '0')}.000Z`, uid: `uid${seq}`, generation: `gen${seq}`, ...extra };
}
const entry = (index: number, data: Uint8Array): Entry => ({ index: index as LogIndex, term: 1 as Term, data });
const grant = (lid: string, ttlSeconds: number, extra: Record<string, unknown> = {}) => encodeEnvelope(CommandType.LeaseGrant, { ...header(), id: lid, ttlSeconds, ...extra });
const revoke = (lid: string, reason = 'revoked', extra: Record<string, unknown> = {}) => encodeEnvelope(CommandType.LeaseRevoke, { ...header(), id: lid, reason, ...extra });
const write = (name: string, extra: Record<string, unknown> = {}) => encodeEnvelope(CommandType.ResourceWrite, { ...header(), id: id(name), data: { n: name }, ...extra });
const del = (name: string) => encodeEnvelope(CommandType.ResourceDelete, { ...header(), id: id(name) });

function failed(r: ApplyResult): Extract<ApplyResult, { ok: false }>['error'] {
  if (r.ok) throw new Error(`expected a failure, got ${JSON.stringify(r)}`);
  return r.error;
}
const leasesOf = (fsm: Fsm) => [...fsm.leaseTable.entries()].map(([lid, l]) => `${lid}:${l.ttlSeconds}:[${[...l.attached].map((u) => fsm.store.getByUid(u)?.id.name).sort().join(',')}]`).sort();
const names = (fsm: Fsm) => [...fsm.store.all()].map((r) => `${r.id.name}@${r.version}${r.lease !== undefined ? `~${r.lease}` : ''}`);

/** Applies `datas` from index 1; returns the fsm and each entry's outcome. */
function run(datas: Uint8Array[], fsm = new Fsm()): { fsm: Fsm; outs: Array<{ result: ApplyResult; changes: readonly ChangeRecord[] }> } {
  const outs = datas.map((d) => fsm.apply(entry(fsm.appliedIndex + 1, d)));
  return { fsm, outs };
}

t.test('grant adds a lease; a write attaches to it and shows the lease id; omitted keeps it; "" detaches', async (t) => {
  const { fsm, outs } = run([grant('l1', 10), write('a', { lease: 'l1' }), write('a', { data: { n: 'a2' } }), write('b', { lease: 'l1' }), write('b', { lease: '' })]);
  t.same(outs[0]?.result, { ok: true, kind: 'lease-grant', id: 'l1', ttlSeconds: 10, revision: 1 });
  t.equal(fsm.store.get({ group: 'test', kind: 'Topic', tenancy, name: 'a' })?.lease, 'l1', 'a later write without lease keeps the attachment');
  t.equal(fsm.store.get({ group: 'test', kind: 'Topic', tenancy, name: 'b' })?.lease, undefined, '"" detaches');
  t.same(leasesOf(fsm), ['l1:10:[a]']);
  const detach = outs[4]?.result;
  t.ok(detach?.ok && detach.kind === 'write' && detach.changed, 'detaching is a change (new version)');
});

t.test('attaching is a new version but not a new generation', async (t) => {
  const { fsm } = run([grant('l1', 10), write('a')]);
  const before = fsm.store.get({ group: 'test', kind: 'Topic', tenancy, name: 'a' }) as Resource;
  run([write('a', { data: { n: 'a' }, lease: 'l1' })], fsm);
  const a = fsm.store.get({ group: 'test', kind: 'Topic', tenancy, name: 'a' }) as Resource;
  t.equal(a.version, 3);
  t.equal(a.generation, before.generation);
  t.equal(a.lease, 'l1');
});

t.test('a write to a lease that does not exist fails with NOT_FOUND and changes nothing', async (t) => {
  const { fsm, outs } = run([write('a', { lease: 'nope' }), grant('l1', 5), revoke('l1'), write('b', { lease: 'l1' })]);
  const e = failed(outs[0]?.result as ApplyResult);
  t.equal(e.code, ErrorCode.NOT_FOUND);
  t.match(e.message, /lease nope does not exist/);
  t.same(e.details, { lease: 'nope' });
  t.equal(failed(outs[3]?.result as ApplyResult).code, ErrorCode.NOT_FOUND, 'a revoked lease is gone');
  t.same(names(fsm), []);
  t.same(leasesOf(fsm), []);
});

t.test('an unconditional write (0x14) attaches too, and a missing lease fails it before the hooks', async (t) => {
  const hooks = { prepare: (input: { data: unknown; metadata?: unknown }) => ({ ok: true as const, data: input.data as never, metadata: {} }) };
  const fsm = new Fsm({ writeHooks: hooks });
  run([grant('l1', 5), encodeEnvelope(CommandType.ResourcePut, { ...header(), id: id('p'), data: { n: 1 }, lease: 'l1' })], fsm);
  t.same(leasesOf(fsm), ['l1:5:[p]']);
  const out = fsm.apply(entry(3, encodeEnvelope(CommandType.ResourcePut, { ...header(), id: id('q'), data: { n: 1 }, lease: 'l2' })));
  t.equal(failed(out.result).code, ErrorCode.NOT_FOUND);
});

t.test('an expiry ends only the grant it was decided for: a later grant of the same id stays (a no-op)', async (t) => {
  // Grant svc (revision 1), attach a; the client revokes and grants svc again (revision 4)
  // while the leader's expiry for the first grant is in the log behind them.
  const { fsm, outs } = run([grant('svc', 10), write('a', { lease: 'svc' }), revoke('svc'), grant('svc', 10), write('b', { lease: 'svc' }), revoke('svc', 'expired', { grantRevision: 1 })]);
  t.same(outs[5]?.result, { ok: true, kind: 'none' }, 'the stale expiry changes nothing');
  t.same(outs[5]?.changes, []);
  t.same(leasesOf(fsm), ['svc:10:[b]'], 'the second grant and its attachment stay');
  const second = fsm.leaseTable.get('svc')?.grantRevision;
  t.equal(second, 4);
  const now = fsm.apply(entry(7, revoke('svc', 'expired', { grantRevision: second })));
  t.same(now.result, { ok: true, kind: 'lease-revoke', id: 'svc', reason: 'expired', deleted: 1, revision: 7 }, 'an expiry for the grant in the table expires it');
  t.same(leasesOf(fsm), []);
  for (const bad of [{}, { grantRevision: 0 }, { grantRevision: '4' }]) {
    t.equal(failed(run([grant('x', 10), revoke('x', 'expired', bad)]).outs[1]!.result).code, ErrorCode.INTERNAL, `an expiry with ${JSON.stringify(bad)} is refused as malformed`);
  }
  t.equal(failed(run([grant('x', 10), revoke('x', 'revoked', { grantRevision: 1 })]).outs[1]!.result).code, ErrorCode.INTERNAL, 'a client revoke carries no grant revision');
});

t.test('revoke deletes every attached resource, with its owned children, in one entry at one revision; others stay', async (t) => {
  const { fsm } = run([grant('l1', 10), grant('l2', 10), write('a', { lease: 'l1' }), write('b', { lease: 'l1' }), write('c', { lease: 'l2' }), write('d')]);
  const b = fsm.store.get({ group: 'test', kind: 'Topic', tenancy, name: 'b' }) as Resource;
  fsm.apply(entry(7, encodeEnvelope(CommandType.ResourceWrite, { ...header(), id: id('child'), data: {}, owner: b.id })));
  const out = fsm.apply(entry(8, revoke('l1', 'expired', { grantRevision: 1 })));
  t.same(out.result, { ok: true, kind: 'lease-revoke', id: 'l1', reason: 'expired', deleted: 3, revision: 8 });
  t.same(
    out.changes.map((c) => `${c.kind}:${c.resource.id.name}@${c.revision}`),
    ['delete:a@8', 'delete:b@8', 'delete:child@8'],
    'ordinary delete records, key order, one revision, the owned child cascaded',
  );
  t.same(names(fsm), ['c@5~l2', 'd@6']);
  t.same(leasesOf(fsm), ['l2:10:[c]']);
  t.equal(failed(fsm.apply(entry(9, revoke('l1'))).result).code, ErrorCode.NOT_FOUND, 'a second revoke finds nothing');
});

t.test('a resource with finalizers is marked, as a single delete would, and no longer counts as attached', async (t) => {
  const { fsm } = run([grant('l1', 10), write('f', { lease: 'l1', finalizers: ['x'] }), revoke('l1')]);
  const f = fsm.store.get({ group: 'test', kind: 'Topic', tenancy, name: 'f' }) as Resource;
  t.not(f.deletionTimestamp, null);
  t.same(leasesOf(fsm), []);
  // Removing the finalizer deletes it; a new lease of the same id does not adopt it.
  run([grant('l1', 3), write('f', { finalizers: [] })], fsm);
  t.same(names(fsm), []);
  t.same(leasesOf(fsm), ['l1:3:[]']);
});

t.test('deleting a resource detaches it', async (t) => {
  const { fsm } = run([grant('l1', 10), write('a', { lease: 'l1' }), del('a'), write('a')]);
  t.same(leasesOf(fsm), ['l1:10:[]']);
  const out = fsm.apply(entry(5, revoke('l1')));
  t.same(out.changes, [], 'the re-created a was never attached');
  t.same(names(fsm), ['a@4']);
});

t.test('moving a resource from one lease to another', async (t) => {
  const { fsm } = run([grant('l1', 10), grant('l2', 20), write('a', { lease: 'l1' }), write('a', { data: { n: 'a' }, lease: 'l2' })]);
  t.same(leasesOf(fsm), ['l1:10:[]', 'l2:20:[a]']);
});

t.test('a transaction branch attaching to a missing lease applies nothing; one attaching to an existing lease attaches', async (t) => {
  const { fsm, outs } = run([
    grant('l1', 10),
    encodeEnvelope(CommandType.Txn, { ...header(), compare: [], then: [{ op: 'write', id: id('x'), data: {}, lease: 'l1' }, { op: 'write', id: id('y'), data: {}, lease: 'gone' }], else: [] }),
  ], new Fsm({ writeHooks: { prepare: (i) => ({ ok: true, data: i.data as never, metadata: {} }) } }));
  const e = failed(outs[1]?.result as ApplyResult);
  t.equal(e.code, ErrorCode.NOT_FOUND);
  t.same(e.details, { lease: 'gone', branch: 'then', failedOp: 1 });
  t.same(names(fsm), [], 'x was not written either');
  t.same(leasesOf(fsm), ['l1:10:[]']);
  fsm.apply(entry(3, encodeEnvelope(CommandType.Txn, { ...header(), compare: [], then: [{ op: 'write', id: id('x'), data: {}, lease: 'l1' }], else: [] })));
  t.same(leasesOf(fsm), ['l1:10:[x]']);
});

t.test('grant refusals: an id in use, --max-leases, the quota; bad bodies are malformed entries', async (t) => {
  const { fsm, outs } = run([
    grant('l1', 10),
    grant('l1', 99),
    grant('l2', 10, { maxLeases: 1 }),
    grant('l3', 10, { quotaBytes: 50 }),
    grant('Bad_ID', 10),
    grant('l4', 0),
    grant('l5', 1.5),
    grant('l6', -3),
    grant('l7', 9_000_000_001),
    encodeEnvelope(CommandType.LeaseRevoke, { ...header(), id: 'l1', reason: 'bored' }),
  ]);
  t.equal(failed(outs[1]?.result as ApplyResult).code, ErrorCode.CAS_FAILED);
  t.equal(fsm.leaseTable.get('l1')?.ttlSeconds, 10, 'the first grant stands');
  t.equal(failed(outs[2]?.result as ApplyResult).code, ErrorCode.NO_SPACE);
  t.equal(failed(outs[3]?.result as ApplyResult).code, ErrorCode.NO_SPACE);
  for (const i of [4, 5, 6, 7, 8, 9]) t.equal(failed(outs[i]?.result as ApplyResult).code, ErrorCode.INTERNAL, `entry ${i + 1} is malformed`);
  t.same(leasesOf(fsm), ['l1:10:[]']);
  t.throws(() => decodeCommand(grant('l9', 0)), /ttlSeconds must be an integer/, 'a leader refuses to propose a malformed forwarded grant');
  t.throws(() => decodeCommand(revoke('UPPER')), /not a lowercase DNS label/);
  t.throws(() => decodeCommand(write('a', { lease: 'a b' })), /not a lowercase DNS label/);
  t.equal(decodeCommand(grant('l9', 5)).kind, 'lease-grant');
});

t.test('snapshot and restore keep leases and attachments; replicas applying the same entries end equal', async (t) => {
  const datas = [grant('l1', 10), grant('l2', 30), write('a', { lease: 'l1' }), write('b', { lease: 'l2' }), write('c'), write('d', { lease: 'l1' }), del('d'), revoke('l2')];
  const one = run(datas).fsm;
  const two = run(datas).fsm;
  const bytes = (f: Fsm) => Buffer.concat([...f.snapshot().chunks()]);
  t.ok(bytes(one).equals(bytes(two)), 'identical snapshots');
  t.same(leasesOf(one), ['l1:10:[a]']);
  const restored = new Fsm();
  restored.restore({ index: one.appliedIndex, term: 1 as Term } as never, bytes(one));
  t.same(leasesOf(restored), leasesOf(one));
  t.same(names(restored), names(one));
  t.ok(bytes(restored).equals(bytes(one)), 'the restored state snapshots to the same bytes');
  // The restored table works: revoking l1 deletes a there.
  const out = restored.apply(entry(restored.appliedIndex + 1, revoke('l1')));
  t.same(out.changes.map((c) => c.resource.id.name), ['a']);
  // An operator's restore (0x13) brings the lease table back too.
  const viaLog = new Fsm();
  viaLog.apply(entry(1, grant('zz', 4)));
  viaLog.apply(entry(20, encodeEnvelope(CommandType.Restore, { ...header(), snapshot: new Uint8Array(bytes(one)) })));
  t.same(leasesOf(viaLog), ['l1:10:[a]']);
});

t.test('an old snapshot without leases still loads (no lease table)', async (t) => {
  const { fsm } = run([write('a'), write('b')]);
  const { header: h, bodies } = readSnapshotFrames(new Uint8Array(Buffer.concat([...fsm.snapshot().chunks()])));
  t.equal('leases' in h, false, 'a store without leases writes no lease field');
  const old = Buffer.concat([...writeSnapshotFrames({ format: 1, index: h.index, dedupe: h.dedupe }, bodies)]);
  const restored = new Fsm();
  restored.restore({ index: h.index, term: 1 as Term } as never, old);
  t.same(names(restored), ['a@1', 'b@2']);
  t.same(leasesOf(restored), []);
});

t.test('an older node stops on the lease entries rather than diverge', async (t) => {
  for (const type of [CommandType.LeaseGrant, CommandType.LeaseRevoke]) {
    t.equal(type & 0x80, 0, 'not ignorable');
    t.throws(() => skipUnknownEntry(type, 5 as LogIndex), UnknownEntryTypeError);
  }
});
