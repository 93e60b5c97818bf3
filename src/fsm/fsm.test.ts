import t from 'tap';
import type { LogIndex, Term } from '../base/index.js';
import { EntryType, NOOP_ENTRY_DATA, type Entry } from '../raft/index.js';
import { Fsm, CommandType, UnknownEntryTypeError, encodeEnvelope, type ApplyResult } from './index.js';

const artist = { group: 'demo', groupVersion: 'v1', kind: 'Artist' };
const tenancy = { partition: 'default', namespace: 'default' };

let seq = 0;
function header(extra: Record<string, unknown> = {}): Record<string, unknown> {
  seq++;
  return { time: `2026-11-21T10:00:${String(seq % 60).padStart(2, '0')}.000Z`, uid: `uid-${seq}`, generation: `gen-${seq}`, ...extra };
}

function entry(index: number, data: Uint8Array, term = 1): Entry {
  return { index: index as LogIndex, term: term as Term, data };
}

function write(name: string, data: Record<string, unknown>, extra: Record<string, unknown> = {}): Uint8Array {
  return encodeEnvelope(CommandType.ResourceWrite, { ...header(extra), id: { type: artist, tenancy, name }, data });
}

function okWrite(r: ApplyResult): Extract<ApplyResult, { kind: 'write' }> {
  if (!r.ok || r.kind !== 'write') throw new Error(`expected a write result, got ${JSON.stringify(r)}`);
  return r;
}

t.test('a write entry applies to the store with version = entry index and uid from the command', async (t) => {
  const fsm = new Fsm();
  const { result, changes } = fsm.apply(entry(5, write('korn', { name: 'Korn' })));
  const w = okWrite(result);
  t.equal(w.resource.version, 5);
  t.match(w.resource.id.uid, /^uid-/);
  t.equal(changes.length, 1);
  t.equal(changes[0]?.kind, 'upsert');
  t.equal(fsm.appliedIndex, 5);
  t.equal(fsm.store.revision, 5, 'store revision follows every applied entry');
  fsm.apply(entry(6, NOOP_ENTRY_DATA));
  t.equal(fsm.store.revision, 6, 'a no-op also moves the revision');
});

t.test('CAS is decided at apply time: a stale expected version gets CAS_FAILED and changes nothing', async (t) => {
  const fsm = new Fsm();
  fsm.apply(entry(1, write('korn', { name: 'Korn' })));
  const { result, changes } = fsm.apply(entry(2, write('korn', { name: 'Korn2' }, { expectedVersion: 7 })));
  t.equal(result.ok, false);
  if (!result.ok) t.equal(result.error.code, 'CAS_FAILED');
  t.same(changes, []);
  t.same(fsm.store.get({ group: 'demo', kind: 'Artist', tenancy, name: 'korn' })?.data, { name: 'Korn' });
});

t.test('an unknown type with the high bit set is skipped and reported; any other stops with a clear error', async (t) => {
  const ignored: number[] = [];
  const fsm = new Fsm({ onIgnoredEntry: (type) => ignored.push(type) });
  const r = fsm.apply(entry(1, encodeEnvelope(0x81, { future: true })));
  t.same(r.result, { ok: true, kind: 'none' });
  t.same(ignored, [0x81]);
  t.throws(() => fsm.apply(entry(2, encodeEnvelope(0x33, {}))), UnknownEntryTypeError);
  t.throws(() => new Fsm().apply(entry(1, encodeEnvelope(0x33, {}))), /unknown command type 0x33/);
});

t.test('a malformed command body is refused with INTERNAL on every replica alike, store untouched', async (t) => {
  const reports: string[] = [];
  const fsm = new Fsm({ onMalformedEntry: (_type, _i, msg) => reports.push(msg) });
  const bad = encodeEnvelope(CommandType.ResourceWrite, { time: 'x', uid: 'u', generation: 'g', id: { name: 3 } });
  const r = fsm.apply(entry(1, bad));
  t.equal(r.result.ok, false);
  if (!r.result.ok) t.equal(r.result.error.code, 'INTERNAL');
  t.equal(fsm.store.size, 0);
  t.equal(reports.length, 1);
  const garbage = Uint8Array.of(CommandType.ResourceDelete, 0xc1, 0xff);
  t.equal(fsm.apply(entry(2, garbage)).result.ok, false, 'undecodable msgpack too');
});

t.test('a repeated request id returns the first result and applies nothing (forwarding retries)', async (t) => {
  const fsm = new Fsm();
  const first = okWrite(fsm.apply(entry(1, write('a', { name: 'A' }, { requestId: 'req-1' }))).result);
  const again = fsm.apply(entry(2, write('a', { name: 'B' }, { requestId: 'req-1' })));
  t.same(again.result, first, 'same result');
  t.same(again.changes, []);
  t.same(fsm.store.get({ group: 'demo', kind: 'Artist', tenancy, name: 'a' })?.data, { name: 'A' });
});

t.test('the de-duplication window is bounded and survives a snapshot', async (t) => {
  const fsm = new Fsm({ dedupeWindow: 2 });
  fsm.apply(entry(1, write('a', { name: 'A' }, { requestId: 'r1' })));
  fsm.apply(entry(2, write('b', { name: 'B' }, { requestId: 'r2' })));
  fsm.apply(entry(3, write('c', { name: 'C' }, { requestId: 'r3' })));
  const snap = fsm.snapshot();
  const bytes = concat([...snap.chunks()]);
  const copy = new Fsm({ dedupeWindow: 2 });
  copy.restore({ index: snap.index, term: 1 as Term, config: { members: [] } }, bytes);
  t.same(copy.apply(entry(4, write('c', { name: 'X' }, { requestId: 'r3' }))).changes, [], 'r3 still remembered after restore');
  t.equal(okWrite(copy.apply(entry(5, write('a', { name: 'Y' }, { requestId: 'r1' }))).result).changed, true, 'r1 fell out of the window');
});

t.test('the de-duplication window is also bounded by the bytes of the commands it stands for, identically after a restore', async (t) => {
  const big = 'x'.repeat(10_000);
  const mk = (): Fsm => new Fsm({ dedupeMaxBytes: 35_000 });
  const fsm = mk();
  for (let i = 1; i <= 5; i++) fsm.apply(entry(i, write(`n${i}`, { name: big }, { requestId: `r${i}` })));
  t.equal(fsm.dedupeSize.entries, 3, 'three ~10 KB commands fit in 35 KB; the two oldest were forgotten');
  t.ok(fsm.dedupeSize.bytes <= 35_000);
  const snap = fsm.snapshot();
  const copy = mk();
  copy.restore({ index: snap.index, term: 1 as Term, config: { members: [] } }, concat([...snap.chunks()]));
  t.same(copy.dedupeSize, fsm.dedupeSize, 'sizes travel with the snapshot');
  t.same(copy.apply(entry(6, write('n5', { name: 'X' }, { requestId: 'r5' }))).changes, [], 'r5 still remembered');
  t.equal(okWrite(copy.apply(entry(7, write('n2', { name: 'Y' }, { requestId: 'r2' }))).result).changed, true, 'r2 fell out by size');
  fsm.apply(entry(6, write('n5', { name: 'X' }, { requestId: 'r5' })));
  fsm.apply(entry(7, write('n2', { name: 'Y' }, { requestId: 'r2' })));
  t.same(copy.dedupeSize, fsm.dedupeSize, 'and both evict alike afterwards');
});

t.test('replicas applying the same entries produce byte-identical snapshots; restore round-trips', async (t) => {
  const entries: Entry[] = [];
  for (let i = 1; i <= 50; i++) entries.push(entry(i, write(`n${i % 7}`, { name: `v${i}` }, { requestId: `q${i}` })));
  entries.push(entry(51, encodeEnvelope(CommandType.ResourceDelete, { ...header(), id: { type: artist, tenancy, name: 'n3' } })));
  const a = new Fsm();
  const b = new Fsm();
  for (const e of entries) {
    a.apply(e);
    b.apply(e);
  }
  const sa = concat([...a.snapshot().chunks()]);
  t.same(sa, concat([...b.snapshot().chunks()]));
  const c = new Fsm();
  c.restore({ index: 51 as LogIndex, term: 1 as Term, config: { members: [] } }, sa);
  t.equal(c.appliedIndex, 51);
  t.same(concat([...c.snapshot().chunks()]), sa);
  t.throws(() => c.restore({ index: 50 as LogIndex, term: 1 as Term, config: { members: [] } }, sa), /index 51/);
});

t.test('entries are applied at most once, in order', async (t) => {
  const fsm = new Fsm();
  fsm.apply(entry(3, NOOP_ENTRY_DATA));
  t.throws(() => fsm.apply(entry(3, NOOP_ENTRY_DATA)), /applied twice/);
  t.equal(EntryType.Noop, CommandType.Noop);
});

function concat(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let pos = 0;
  for (const p of parts) {
    out.set(p, pos);
    pos += p.length;
  }
  return out;
}

t.test('a restore entry replaces the store on every replica alike and asks subscribers to reset', async (t) => {
  const src = new Fsm();
  src.apply(entry(1, write('a', { name: 'A' })));
  src.apply(entry(2, write('b', { name: 'B' })));
  const frames = concat([...src.snapshot().chunks()]);
  const replicas = [new Fsm(), new Fsm()];
  for (const r of replicas) {
    for (let i = 1; i <= 5; i++) r.apply(entry(i, write(`x${i}`, { name: `X${i}` })));
    const out = r.apply(entry(6, encodeEnvelope(CommandType.Restore, { ...header(), snapshot: frames })));
    t.same(out.result, { ok: true, kind: 'restore', resources: 2, revision: 6 });
    t.equal(out.reset, true);
    t.equal(r.store.revision, 6, 'revisions keep moving forward');
    t.same(r.store.list({ group: 'demo', kind: 'Artist', partition: '*', namespace: '*' }).map((x) => x.id.name), ['a', 'b']);
  }
  t.same(concat([...(replicas[0] as Fsm).snapshot().chunks()]), concat([...(replicas[1] as Fsm).snapshot().chunks()]), 'byte-identical replicas');
  const broken = new Fsm();
  broken.apply(entry(1, write('keep', { name: 'K' })));
  const bad = broken.apply(entry(2, encodeEnvelope(CommandType.Restore, { ...header(), snapshot: Uint8Array.of(0, 0, 0, 9, 1) })));
  t.equal(bad.result.ok, false, 'a snapshot that does not decode is refused');
  t.equal(broken.store.size, 1, 'and the store is untouched');
});
