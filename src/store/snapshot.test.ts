import { deepStrictEqual } from 'node:assert/strict';
import fc from 'fast-check';
import { Packr } from 'msgpackr';
import t from 'tap';
import { isCairnError, type Revision } from '../base/index.js';
import { ResourceStore, SNAPSHOT_FORMAT, SNAPSHOT_FORMAT_VERSION, type ApplyContext, type StoreReader, type TypeRef } from './index.js';
import { ReferenceStore, SMALL, WIDE, checkInvariants, contextFor, plain, plainAll, resolve, stepsArb, type Step, type Universe } from './testing/index.js';

const ARTIST: TypeRef = { group: 'demo', groupVersion: 'v1', kind: 'Artist' };
const NS = { partition: 'default', namespace: 'default' };
const ctx = (r: number): ApplyContext => ({ revision: r as Revision, time: `t${r}`, newUid: `uid-${r}`, newGeneration: `gen-${r}` });

/** Applies random steps to a store (and the reference, which resolves the specs). */
function build(u: Universe, steps: readonly Step[], onStep?: (store: ResourceStore, ref: ReferenceStore) => void): { store: ResourceStore; ref: ReferenceStore } {
  const store = new ResourceStore();
  const ref = new ReferenceStore();
  let revision = 0;
  for (const step of steps) {
    revision += step.gap;
    const cmd = resolve(u, step.spec, ref);
    const c = contextFor(revision);
    if (cmd.op === 'write') {
      store.write(cmd.input, c);
      ref.write(cmd.input, c);
    } else if (cmd.op === 'delete') {
      store.delete(cmd.input, c);
      ref.delete(cmd.input, c);
    } else {
      store.writeStatus(cmd.input, c);
      ref.writeStatus(cmd.input, c);
    }
    onStep?.(store, ref);
  }
  return { store, ref };
}

/** Everything a reader can say, for comparing two readers. */
function view(r: StoreReader): unknown {
  const all = [...r.all()];
  return plain({
    revision: r.revision,
    size: r.size,
    all,
    byUid: all.map((x) => r.getByUid(x.id.uid)),
    byOwner: [...new Set(all.flatMap((x) => (x.owner === null ? [] : [x.owner.uid])))].sort().map((uid) => r.listByOwner(uid)),
  });
}

function bytesOf(r: { chunks(n?: number): Iterable<Uint8Array> }, n?: number): Buffer {
  return Buffer.concat([...r.chunks(n)]);
}

t.test('a snapshot is not changed by later writes, deletes and status writes', async (t) => {
  const s = new ResourceStore();
  const parent = s.write({ id: { type: ARTIST, tenancy: NS, name: 'parent' }, data: { v: 1 } }, ctx(1));
  if (!parent.ok) throw parent.error;
  s.write({ id: { type: ARTIST, tenancy: NS, name: 'child' }, data: 1, owner: parent.value.resource.id }, ctx(2));
  const snap = s.snapshot();
  const before = view(snap);
  const beforeBytes = bytesOf(snap);
  s.write({ id: { type: ARTIST, tenancy: NS, name: 'parent' }, data: { v: 2 } }, ctx(3));
  s.writeStatus({ id: { ...parent.value.resource.id }, key: 'c', observedGeneration: 'g', conditions: [] }, ctx(4));
  s.write({ id: { type: ARTIST, tenancy: NS, name: 'new' }, data: 1 }, ctx(5));
  s.delete({ id: { type: ARTIST, tenancy: NS, name: 'parent' } }, ctx(6));
  s.setRevision(9 as Revision);
  t.same(view(snap), before, 'the snapshot reads as before');
  t.same(bytesOf(snap), beforeBytes, 'and serializes to the same bytes');
  t.equal(snap.revision, 2);
  t.equal(snap.size, 2);
  t.equal(s.size, 1);
  t.same(snap.get({ group: 'demo', kind: 'Artist', tenancy: NS, name: 'parent' })?.data, { v: 1 });
  t.equal(snap.listByOwner(parent.value.resource.id.uid).length, 1);
  t.equal(snap.read({ type: ARTIST, tenancy: NS, name: 'child' }).ok, true);
  t.same(
    snap.list({ group: 'demo', kind: 'Artist', partition: '*', namespace: '*' }).map((r) => r.id.name),
    ['child', 'parent'],
  );
});

t.test('snapshot isolation: every snapshot keeps reading the state it was taken at (property)', async (t) => {
  fc.assert(
    fc.property(stepsArb(SMALL, 60), fc.array(fc.nat({ max: 59 }), { maxLength: 6 }), (steps, points) => {
      const taken: Array<{ snap: ReturnType<ResourceStore['snapshot']>; want: unknown; bytes: Buffer }> = [];
      let i = 0;
      build(SMALL, steps, (store, ref) => {
        if (points.includes(i)) {
          const snap = store.snapshot();
          // What the snapshot must keep showing: the reference's state at this point.
          deepStrictEqual(plainAll(snap.all()), plain(ref.all()));
          taken.push({ snap, want: view(snap), bytes: bytesOf(snap) });
        }
        i++;
      });
      for (const { snap, want, bytes } of taken) {
        deepStrictEqual(view(snap), want);
        deepStrictEqual(bytesOf(snap), bytes);
      }
    }),
    { numRuns: 200 },
  );
  t.pass('snapshots are unaffected by later commands');
});

t.test('a snapshot refuses writes to its indexes (they are frozen clones)', async (t) => {
  const s = new ResourceStore();
  s.write({ id: { type: ARTIST, tenancy: NS, name: 'a' }, data: 1 }, ctx(1));
  const snap = s.snapshot();
  const ix = (snap as unknown as { ix: { byKey: { set(k: string, v: unknown): void } } }).ix;
  t.throws(() => ix.byKey.set('x', 1));
  t.equal(s.write({ id: { type: ARTIST, tenancy: NS, name: 'b' }, data: 1 }, ctx(2)).ok, true, 'the store itself still writes');
});

t.test('chunks: a header chunk with the format version and revision, then resources in key order', async (t) => {
  const s = new ResourceStore();
  for (const [i, name] of ['c', 'a', 'b', 'e', 'd'].entries()) s.write({ id: { type: ARTIST, tenancy: NS, name }, data: i }, ctx(i + 1));
  s.setRevision(10 as Revision);
  const chunks = [...s.snapshot().chunks(2)];
  t.equal(chunks.length, 4, 'header + 2 + 2 + 1');
  const unpack = new Packr({ useRecords: false, mapsAsObjects: true });
  t.same(unpack.unpack(chunks[0] as Uint8Array), { format: SNAPSHOT_FORMAT, version: SNAPSHOT_FORMAT_VERSION, revision: 10, count: 5 });
  const names = chunks.slice(1).flatMap((c) => (unpack.unpack(c) as unknown[][]).map((r) => r[5]));
  t.same(names, ['a', 'b', 'c', 'd', 'e']);
  t.same([...new ResourceStore().snapshot().chunks()].length, 1, 'an empty store is one header chunk');
  t.throws(() => [...s.snapshot().chunks(0)], /resourcesPerChunk must be a positive integer/);
});

t.test('serialization round trip: restore(serialize(s)) equals s, indexes included (property)', async (t) => {
  fc.assert(
    fc.property(stepsArb(WIDE, 100, { write: 10, delete: 2, status: 3 }), fc.integer({ min: 1, max: 7 }), fc.array(fc.integer({ min: 1, max: 64 }), { minLength: 1, maxLength: 5 }), (steps, perChunk, cuts) => {
      const { store } = build(WIDE, steps);
      const snap = store.snapshot();
      const bytes = bytesOf(snap, perChunk);
      const want = view(store);
      // As produced, as one array, and re-split at arbitrary byte boundaries.
      const pieces: Uint8Array[] = [];
      for (let at = 0, k = 0; at < bytes.length; k++) {
        const n = cuts[k % cuts.length] as number;
        pieces.push(bytes.subarray(at, at + n));
        at += n;
      }
      for (const restored of [ResourceStore.restore(snap.chunks(perChunk)), ResourceStore.fromSnapshotBytes(bytes), ResourceStore.restore(pieces)]) {
        deepStrictEqual(view(restored), want);
        const broken = checkInvariants(restored);
        if (broken !== null) throw new Error(`restored store: ${broken}`);
        deepStrictEqual(bytesOf(restored.snapshot(), perChunk), bytes, 'a restored store serializes to the same bytes');
      }
    }),
    { numRuns: 150 },
  );
  t.pass('round trips are exact');
});

t.test('serialization is deterministic: equal stores give identical bytes (property)', async (t) => {
  fc.assert(
    fc.property(stepsArb(WIDE, 80), (steps) => {
      const a = build(WIDE, steps).store;
      const b = build(WIDE, steps).store; // another replica applying the same log
      deepStrictEqual(bytesOf(a.snapshot()), bytesOf(b.snapshot()));
    }),
    { numRuns: 100 },
  );
  // Equal content reached differently: other key order in the JSON, other command history.
  const x = new ResourceStore();
  x.write({ id: { type: ARTIST, tenancy: NS, name: 'a' }, data: { b: 1, a: [1, { d: 2, c: 3 }] }, metadata: { y: '1', x: '2' } }, ctx(5));
  const y = new ResourceStore();
  y.write({ id: { type: ARTIST, tenancy: NS, name: 'a' }, data: { a: [1, { c: 3, d: 2 }], b: 1 }, metadata: { x: '2', y: '1' } }, ctx(5));
  t.same(bytesOf(x.snapshot()), bytesOf(y.snapshot()), 'JSON key order does not matter');
  t.pass('replicas applying the same commands serialize identically');
});

t.test('restore keeps working after the restored store is written to', async (t) => {
  const s = new ResourceStore();
  const p = s.write({ id: { type: ARTIST, tenancy: NS, name: 'p' }, data: 1 }, ctx(1));
  if (!p.ok) throw p.error;
  s.write({ id: { type: ARTIST, tenancy: NS, name: 'c' }, data: 1, owner: p.value.resource.id }, ctx(2));
  const r = ResourceStore.fromSnapshotBytes(s.snapshot().toBytes());
  t.equal(r.revision, 2);
  const d = r.delete({ id: { type: ARTIST, tenancy: NS, name: 'p' } }, ctx(3));
  t.ok(d.ok && d.value.changes.length === 2, 'the owner index was rebuilt: the cascade reaches the child');
  t.equal(r.write({ id: { type: ARTIST, tenancy: NS, name: 'x' }, data: 1 }, ctx(4)).ok, true);
  t.equal(s.size, 2, 'the original is untouched');
});

t.test('restore refuses malformed data with a clear error', async (t) => {
  const s = new ResourceStore();
  for (const [i, name] of ['a', 'b', 'c'].entries()) s.write({ id: { type: ARTIST, tenancy: NS, name }, data: i }, ctx(i + 1));
  const good = [...s.snapshot().chunks(2)];
  const packr = new Packr({ useRecords: false });
  const unpack = (b: Uint8Array): unknown => packr.unpack(b);
  const header = unpack(good[0] as Uint8Array) as Record<string, unknown>;
  const rows = [...(unpack(good[1] as Uint8Array) as unknown[][]), ...(unpack(good[2] as Uint8Array) as unknown[][])];
  const withRow = (i: number, field: number, value: unknown): unknown[][] => rows.map((r, j) => (j === i ? r.map((f, k) => (k === field ? value : f)) : r));
  const cases: Array<[string, Iterable<Uint8Array> | Uint8Array, RegExp]> = [
    ['empty', [], /no data/],
    ['not a header', [packr.pack([1, 2])], /not a cairn\.store header/],
    ['another format version', [packr.pack({ ...header, version: 2 }), ...good.slice(1)], /format version 2 is not supported \(this node reads version 1\)/],
    ['truncated in a value', Buffer.concat(good).subarray(0, Buffer.concat(good).length - 5), /ends inside a value.*truncated/],
    ['a chunk missing', good.slice(0, 2), /announces 3 resources but the data holds 2/],
    ['extra resources', [packr.pack({ ...header, count: 2 }), ...good.slice(1)], /more resources than the 2 the header announces/],
    ['out of order', [good[0] as Uint8Array, packr.pack([rows[1], rows[0], rows[2]])], /out of key order or repeated/],
    ['repeated key', [good[0] as Uint8Array, packr.pack([rows[0], rows[0], rows[2]])], /out of key order or repeated/],
    ['repeated uid', [good[0] as Uint8Array, packr.pack(withRow(1, 6, (rows[0] as unknown[])[6]))], /repeats uid/],
    ['bad field', [good[0] as Uint8Array, packr.pack(withRow(0, 8, 'seven'))], /resource 0\.version is not a non-negative integer/],
    ['short tuple', [good[0] as Uint8Array, packr.pack([[1, 2, 3]])], /not a 15-field resource tuple/],
    ['version after the revision', [good[0] as Uint8Array, packr.pack(withRow(0, 8, 99))], /version 99, after the snapshot revision 3/],
    ['marked without finalizers', [good[0] as Uint8Array, packr.pack(withRow(0, 12, 'then'))], /marked for deletion but has no finalizers/],
    ['not msgpack', [new Uint8Array([0xc1, 0, 0])], /0xc1 .* is not a msgpack type/],
    ['not bytes', ['text' as unknown as Uint8Array], /piece 0 is not a byte array/],
  ];
  for (const [what, input, message] of cases) {
    try {
      ResourceStore.restore(input);
      t.fail(`${what}: restored`);
    } catch (e) {
      t.ok(isCairnError(e, 'INVALID_ARGUMENT'), `${what}: a CairnError`);
      t.match((e as Error).message, message, what);
      t.match((e as Error).message, /^restore store snapshot: /);
    }
  }
});
