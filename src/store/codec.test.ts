import fc from 'fast-check';
import { Packr } from 'msgpackr';
import t from 'tap';
import { prefixEnd, scanPrefix, stringTree } from './btree.js';
import { valueEnd } from './codec.js';
import { canonicalJson, jsonEqual } from './json.js';
import { resourceKey } from './keys.js';

const packr = new Packr({ useRecords: false, variableMapSize: true });

t.test('valueEnd finds where each msgpack value ends, and says -1 for every truncation (property)', async (t) => {
  const value = fc.oneof(
    fc.jsonValue(),
    fc.uint8Array({ maxLength: 300 }).map((b) => Buffer.from(b)),
    fc.constantFrom(2 ** 31, 2 ** 32 + 1, -(2 ** 40), 1.5, Number.MAX_SAFE_INTEGER, 'x'.repeat(70_000)),
  );
  fc.assert(
    fc.property(fc.array(value, { minLength: 1, maxLength: 4 }), (values) => {
      const parts = values.map((v) => packr.pack(v));
      const all = Buffer.concat(parts);
      let at = 0;
      for (const p of parts) {
        const end = valueEnd(all, at);
        if (end !== at + p.length) throw new Error(`value at ${at} ends at ${end}, not ${at + p.length}`);
        for (let cut = at; cut < end; cut += Math.max(1, Math.floor(p.length / 16))) {
          if (valueEnd(all.subarray(0, cut), at) !== -1) throw new Error(`a value cut at ${cut} was taken as complete`);
        }
        at = end;
      }
    }),
    { numRuns: 300 },
  );
  t.pass('boundaries agree with msgpackr');
});

t.test('prefix scans visit exactly the keys with the prefix, in order (property)', async (t) => {
  const str = fc.string({ unit: fc.constantFrom('a', 'b', '\u0000', '\uffff', 'z'), maxLength: 5 });
  fc.assert(
    fc.property(fc.uniqueArray(str, { maxLength: 40 }), str, (keys, prefix) => {
      const tree = stringTree<number>();
      keys.forEach((k, i) => tree.set(k, i));
      const seen: string[] = [];
      scanPrefix(tree, prefix, (k) => seen.push(k));
      const want = keys.filter((k) => k.startsWith(prefix)).sort();
      if (JSON.stringify(seen) !== JSON.stringify(want)) throw new Error(`prefix ${JSON.stringify(prefix)}: saw ${JSON.stringify(seen)}, want ${JSON.stringify(want)}`);
      const end = prefixEnd(prefix);
      for (const k of keys) {
        const inRange = k >= prefix && (end === undefined || k < end);
        if (inRange !== k.startsWith(prefix)) throw new Error(`${JSON.stringify(k)} vs prefix ${JSON.stringify(prefix)}`);
      }
    }),
    { numRuns: 500 },
  );
  t.pass('prefix scans and prefix ranges agree with startsWith');
});

t.test('the primary key orders like the (group, kind, partition, namespace, name) tuple', async (t) => {
  const part = fc.constantFrom('', 'a', 'ab', 'b', 'a-b', 'a.b');
  const id = fc.tuple(part, part, part, part, part);
  fc.assert(
    fc.property(id, id, (x, y) => {
      const kx = resourceKey(x[0], x[1], { partition: x[2], namespace: x[3] }, x[4]);
      const ky = resourceKey(y[0], y[1], { partition: y[2], namespace: y[3] }, y[4]);
      let tuple = 0;
      for (let i = 0; i < 5 && tuple === 0; i++) tuple = (x[i] as string) < (y[i] as string) ? -1 : (x[i] as string) > (y[i] as string) ? 1 : 0;
      const key = kx < ky ? -1 : kx > ky ? 1 : 0;
      if (key !== tuple) throw new Error(`${JSON.stringify(x)} vs ${JSON.stringify(y)}: key order ${key}, tuple order ${tuple}`);
    }),
    { numRuns: 2000 },
  );
  t.pass('key order is tuple order');
});

t.test('canonical JSON: equal values compare equal whatever their key order, and the copy is frozen', async (t) => {
  fc.assert(
    // A `__proto__` key is refused by design (json.ts); that rule has its own test in store.test.ts.
    fc.property(fc.jsonValue().filter((v) => !JSON.stringify(v).includes('"__proto__"')), (v) => {
      const a = canonicalJson(v, 'data');
      const b = canonicalJson(JSON.parse(JSON.stringify(v, (_k, x: unknown) => (typeof x === 'object' && x !== null && !Array.isArray(x) ? Object.fromEntries(Object.entries(x).reverse()) : x))), 'data');
      if (!jsonEqual(a, b)) throw new Error('reordered keys compare unequal');
      if (JSON.stringify(a) !== JSON.stringify(b)) throw new Error('reordered keys give another canonical form');
      if (typeof a === 'object' && a !== null && !Object.isFrozen(a)) throw new Error('not frozen');
    }),
    { numRuns: 300 },
  );
  t.equal(jsonEqual({ a: [1, 2] }, { a: [2, 1] }), false, 'array order matters');
  t.equal(jsonEqual({ a: 1 }, { a: 1, b: null }), false, 'a key with null is not a missing key');
  t.equal(Object.is(canonicalJson(-0, 'data'), 0), true, '-0 is stored as 0');
});
