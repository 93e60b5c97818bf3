import t from 'tap';
import type { Revision } from '../base/index.js';
import { ResourceStore, type Resource } from './index.js';
import { adoptJson, canonicalJson, InvalidInput } from './json.js';
import { checkTenancy, checkType, INTERN_LIMIT, internedCounts } from './validate.js';

/**
 * The store's memory savings (docs/performance.md "Memory per resource"): interned type and
 * tenancy objects, bounded; snapshot data adopted in place rather than copied; and a restored
 * store equal to its source.
 */

const T = { group: 'demo', groupVersion: 'v1', kind: 'Album' };

t.test('equal types and tenancies are one object', async (t) => {
  const a = checkType({ ...T }, 'type');
  const b = checkType({ ...T }, 'type');
  t.equal(a, b, 'the same object for equal types');
  t.ok(Object.isFrozen(a));
  t.same(a, T);
  t.not(checkType({ ...T, kind: 'Artist' }, 'type'), a, 'a different kind is a different object');
  t.equal(checkTenancy({ partition: 'p', namespace: 'n' }, 't'), checkTenancy({ partition: 'p', namespace: 'n' }, 't'));
  // 'a' + NUL + 'b' cannot be confused with another split: NUL is refused in a key part.
  t.throws(() => checkType({ group: 'a\u0000b', groupVersion: 'v1', kind: 'K' }, 'type'), InvalidInput);
  t.not(checkTenancy({ partition: 'ab', namespace: '' }, 't'), checkTenancy({ partition: 'a', namespace: 'b' }, 't'));

});

t.test('adoptJson: canonical values are frozen in place, others copied as canonicalJson copies them', async (t) => {
  const sorted = { a: 1, b: { c: [1, { d: 'x' }] } };
  const adopted = adoptJson(sorted, 'data');
  t.equal(adopted, sorted, 'a sorted object is adopted, not copied');
  t.ok(Object.isFrozen(sorted) && Object.isFrozen(sorted.b) && Object.isFrozen(sorted.b.c) && Object.isFrozen(sorted.b.c[1]), 'deeply frozen');

  const unsorted = { b: 1, a: 2 };
  const copied = adoptJson(unsorted, 'data') as Record<string, unknown>;
  t.not(copied, unsorted, 'an unsorted object is copied');
  t.same(Object.keys(copied), ['a', 'b'], 'with its keys in canonical order');
  t.same(copied, canonicalJson({ b: 1, a: 2 }, 'data'));

  const negZero = { n: -0, list: [-0] };
  const z = adoptJson(negZero, 'data') as { n: number; list: number[] };
  t.ok(Object.is(z.n, 0) && Object.is(z.list[0], 0), '-0 becomes 0');

  const frozen = Object.freeze({ a: 1 });
  t.not(adoptJson(frozen, 'data'), frozen, 'a frozen value (someone else’s) is copied, never adopted');

  t.throws(() => adoptJson({ a: Number.NaN }, 'data'), /data\.a holds the number NaN/);
  t.throws(() => adoptJson({ a: new Date() }, 'data'), /data\.a is not a JSON value \(a Date\)/);
  let deep: unknown = 1;
  for (let i = 0; i < 102; i++) deep = { a: deep };
  t.throws(() => adoptJson(deep, 'data'), /nests deeper/);
});

t.test('a restored store shares one type object across resources and equals its source', async (t) => {
  const store = new ResourceStore();
  for (let i = 0; i < 500; i++) {
    const r = store.write(
      { id: { type: T, tenancy: { partition: 'default', namespace: `ns${i % 3}` }, name: `k-${String(i).padStart(4, '0')}` }, data: { z: i, a: `v${i}`, nested: { y: [i, -0], b: null } } },
      { revision: (i + 1) as Revision, time: '2026-11-28T00:00:00.000Z', newUid: `uid-${String(i).padStart(6, '0')}`, newGeneration: `g-${i}` },
    );
    if (!r.ok) throw r.error;
  }
  const restored = ResourceStore.restore([...store.snapshot().chunks(64)]);
  t.equal(restored.size, 500);
  t.equal(restored.dataBytes, store.dataBytes, 'the same data size (the quota figure)');
  const all = [...restored.snapshot().all()] as Resource[];
  t.same(all, [...store.snapshot().all()], 'every resource equal to its source');
  t.ok(all.every((r) => r.id.type === (all[0] as Resource).id.type), 'one shared type object');
  t.equal(new Set(all.map((r) => r.id.tenancy)).size, 3, 'one tenancy object per namespace');
  t.ok(all.every((r) => Object.isFrozen(r.data)), 'data frozen');
});

// Last: it fills the tenancy table to its limit, after which new tenancies are not shared.
t.test('the intern tables stop growing at their limit', async (t) => {
  const before = internedCounts().tenancies;
  for (let i = 0; i < INTERN_LIMIT + 1000; i++) checkTenancy({ partition: 'flood', namespace: `ns-${i}` }, 't');
  t.equal(internedCounts().tenancies, INTERN_LIMIT, `bounded at ${INTERN_LIMIT}`);
  t.ok(before < INTERN_LIMIT);
  const late = checkTenancy({ partition: 'late', namespace: 'x' }, 't');
  t.same(late, { partition: 'late', namespace: 'x' }, 'past the limit a tenancy is still right, only not shared');
  t.ok(Object.isFrozen(late));
});
