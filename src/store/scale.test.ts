import { performance } from 'node:perf_hooks';
import t from 'tap';
import type { Revision } from '../base/index.js';
import { ResourceStore, type ApplyContext, type Resource, type TypeRef } from './index.js';

/**
 * Scale sanity: 100,000 resources, an O(1) snapshot, 10 more writes that the snapshot must not
 * see, then a serialize + restore round trip. Prints how long each part took.
 */

const N = 100_000;
const ARTIST: TypeRef = { group: 'demo', groupVersion: 'v1', kind: 'Artist' };
const ctx = (r: number): ApplyContext => ({ revision: r as Revision, time: `2026-11-21T10:00:00.000Z`, newUid: `uid-${String(r).padStart(8, '0')}`, newGeneration: `gen-${r}` });
const tenancy = (i: number): { partition: string; namespace: string } => ({ partition: `p${i % 4}`, namespace: `ns${i % 25}` });
const name = (i: number): string => `artist-${String(i).padStart(6, '0')}`;

t.test(`${N.toLocaleString('en')} resources: snapshot isolation and serialize/restore round trip`, async (t) => {
  const ms = (since: number): string => `${(performance.now() - since).toFixed(0)} ms`;
  const store = new ResourceStore();
  let start = performance.now();
  for (let i = 0; i < N; i++) {
    const r = store.write(
      { id: { type: ARTIST, tenancy: tenancy(i), name: name(i) }, data: { name: `Artist ${i}`, genre: 'metal', members: i % 7 }, metadata: { team: `t${i % 3}` } },
      ctx(i + 1),
    );
    if (!r.ok) throw r.error;
  }
  const insertTime = ms(start);
  t.equal(store.size, N);

  start = performance.now();
  const snap = store.snapshot();
  const snapshotTime = `${((performance.now() - start) * 1000).toFixed(0)} µs`;
  const touched = [0, 1, 2, 50_000, 99_999].map((i) => store.get({ group: 'demo', kind: 'Artist', tenancy: tenancy(i), name: name(i) }) as Resource);

  // 10 more writes: 5 updates and 3 deletes of resources the snapshot holds, and 2 creates.
  let rev = N;
  for (const r of touched) store.write({ id: { type: ARTIST, tenancy: r.id.tenancy, name: r.id.name }, data: { changed: true } }, ctx(++rev));
  for (const i of [10, 20, 30]) store.delete({ id: { type: ARTIST, tenancy: tenancy(i), name: name(i) } }, ctx(++rev));
  for (const i of [N, N + 1]) store.write({ id: { type: ARTIST, tenancy: tenancy(i), name: name(i) }, data: {} }, ctx(++rev));
  t.equal(store.size, N - 1);
  t.equal(store.revision, N + 10);

  t.equal(snap.size, N, 'the snapshot still holds every resource');
  t.equal(snap.revision, N);
  for (const r of touched) t.equal(snap.getByUid(r.id.uid), r, `the snapshot still has ${r.id.name} as it was`);
  for (const i of [10, 20, 30]) t.ok(snap.get({ group: 'demo', kind: 'Artist', tenancy: tenancy(i), name: name(i) }), `the snapshot still has ${name(i)}`);
  t.equal(snap.get({ group: 'demo', kind: 'Artist', tenancy: tenancy(N), name: name(N) }), undefined, 'and not the new ones');
  start = performance.now();
  const listed = snap.list({ group: 'demo', kind: 'Artist', partition: 'p1', namespace: 'ns1' });
  const listTime = `${((performance.now() - start) * 1000).toFixed(0)} µs`;
  t.equal(listed.length, N / 100, 'a fixed-tenancy list');

  start = performance.now();
  const chunks = [...snap.chunks()];
  const serializeTime = ms(start);
  const bytes = chunks.reduce((n, c) => n + c.length, 0);
  t.equal(chunks.length, 1 + N / 1000);

  start = performance.now();
  const restored = ResourceStore.restore(chunks);
  const restoreTime = ms(start);
  t.equal(restored.size, N);
  t.equal(restored.revision, N);
  let same = true;
  const a = snap.all();
  for (const r of restored.all()) {
    const s = a.next().value as Resource;
    if (JSON.stringify(r) !== JSON.stringify(s)) same = false;
  }
  t.ok(same, 'the restored store holds exactly the snapshot');
  for (const r of touched) t.same(restored.getByUid(r.id.uid), r, 'and finds them by uid');
  start = performance.now();
  const again = [...restored.snapshot().chunks()];
  const reserializeTime = ms(start);
  t.ok(
    again.length === chunks.length && again.every((c, i) => Buffer.compare(c, chunks[i] as Uint8Array) === 0),
    'and serializes to identical bytes',
  );
  t.comment(
    `${N} writes ${insertTime}; snapshot ${snapshotTime}; fixed-tenancy list ${listTime}; serialize ${serializeTime} ` +
      `(${(bytes / 1e6).toFixed(1)} MB in ${chunks.length} chunks); restore ${restoreTime}; serialize again ${reserializeTime}`,
  );
});
