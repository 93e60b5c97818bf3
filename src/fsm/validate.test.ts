import t from 'tap';
import { Packr } from 'msgpackr';
import { validateWrite } from './validate.js';

/**
 * validate.ts checks a write's plain data in place (no copy: the store copies it at apply) and
 * copies anything else as it always did. Apply must stay deterministic across versions, so the
 * verdict and the value must be what the copying code gave for every body.
 */
const head = { time: '2026-11-27T10:00:00.000Z', uid: 'u1', generation: 'g1', id: { type: { group: 'demo', groupVersion: 'v1', kind: 'Artist' }, tenancy: { partition: 'default', namespace: 'default' }, name: 'a' } };
const packr = new Packr({ useRecords: false, mapsAsObjects: true, moreTypes: false, variableMapSize: true });

/** The copying check every body took before: the reference the fast path must agree with. */
function referenceJson(v: unknown, depth = 0): unknown {
  if (depth > 100) throw new Error('data is nested too deeply');
  if (v === null || typeof v === 'boolean' || typeof v === 'string') return v;
  if (typeof v === 'number') {
    if (!Number.isFinite(v)) throw new Error('data contains a non-finite number');
    return v;
  }
  if (Array.isArray(v)) return v.map((x) => referenceJson(x, depth + 1));
  if (typeof v !== 'object' || v === null) throw new Error('data must be an object');
  const out: Record<string, unknown> = {};
  for (const k of Object.keys(v)) out[k] = referenceJson((v as Record<string, unknown>)[k], depth + 1);
  return out;
}

function verdict(data: unknown): { ok: true; data: unknown } | { ok: false; why: string } {
  const c = validateWrite(packr.unpack(packr.pack({ ...head, data })));
  if (typeof c === 'string') return { ok: false, why: c };
  if (c.kind !== 'write') throw new Error('not a write');
  return { ok: true, data: c.cmd.data };
}

function reference(data: unknown): { ok: true; data: unknown } | { ok: false; why: string } {
  try {
    return { ok: true, data: referenceJson(packr.unpack(packr.pack(data))) };
  } catch (e) {
    return { ok: false, why: (e as Error).message };
  }
}

let deep: unknown = 1;
for (let i = 0; i < 101; i++) deep = [deep];
let deepOk: unknown = 'x';
for (let i = 0; i < 100; i++) deepOk = { k: deepOk };

const cases: Array<[string, unknown]> = [
  ['a flat object', { name: 'Korn', genre: 'metal' }],
  ['nested objects and arrays', { a: [1, 2, { b: null, c: [true, false] }], d: { e: { f: -0 } }, g: '' }],
  ['a scalar', 'just a string'],
  ['null', null],
  ['100 levels deep (the limit)', deepOk],
  ['101 levels deep', deep],
  ['NaN inside an array', { a: [1, Number.NaN] }],
  ['Infinity', { a: Number.POSITIVE_INFINITY }],
  ['a msgpack binary (a foreign writer)', { bin: new Uint8Array([7, 8, 9]) }],
  ['a binary after a non-finite number', { x: Number.NaN, bin: new Uint8Array([1]) }],
  ['a binary before a non-finite number', { bin: new Uint8Array([1]), x: Number.NaN }],
  ['a key __proto__ (msgpackr renames it)', JSON.parse('{"__proto__": {"x": 1}, "y": 2}') as unknown],
  ['undefined inside (msgpack ext)', { u: undefined }],
];

t.test('the in-place check gives the verdict and value of the copying check, body by body', async (t) => {
  for (const [what, data] of cases) t.same(verdict(data), reference(data), what);
});

t.test('plain data is checked in place, not copied; other data is copied as before', async (t) => {
  const body = { ...head, data: { name: 'Korn', tags: ['a', 'b'] } };
  const checked = validateWrite(body);
  if (typeof checked === 'string') throw new Error('refused');
  t.equal((checked.cmd as { data: unknown }).data, body.data, 'the same object: no copy');
  const withBin = { ...head, data: { bin: new Uint8Array([1, 2]) } };
  const c2 = validateWrite(withBin);
  if (typeof c2 === 'string') throw new Error('refused');
  t.not((c2.cmd as { data: unknown }).data, withBin.data, 'a binary makes it take the copying path');
  t.same((c2.cmd as { data: unknown }).data, { bin: { 0: 1, 1: 2 } }, 'which turns it into a plain object, as it always did');
});
