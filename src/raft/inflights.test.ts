/**
 * Inflights: the FIFO of unacknowledged appends to one follower (thesis §10.2 pipelining; etcd
 * tracker/inflights.go), bounded by count and by bytes.
 */
import fc from 'fast-check';
import t from 'tap';
import { AssertionError } from '../base/index.js';
import { Inflights } from './inflights.js';

t.test('§10.2 full when the count reaches maxInflightMsgs', async (t) => {
  const f = new Inflights(3, 0);
  t.same([f.count, f.full()], [0, false]);
  f.add(1, 10);
  f.add(2, 10);
  t.same([f.count, f.full()], [2, false]);
  f.add(5, 10);
  t.same([f.count, f.full()], [3, true], 'three of three: stop pipelining');
});

t.test('§10.2 full when the bytes reach maxInflightBytes (0 = unlimited)', async (t) => {
  const f = new Inflights(100, 25);
  f.add(1, 10);
  f.add(2, 10);
  t.equal(f.full(), false, '20 of 25 bytes');
  f.add(3, 5);
  t.equal(f.full(), true, '25 of 25 bytes');
  f.freeLE(1);
  t.equal(f.full(), false, 'freeing 10 bytes reopens it');
  const unlimited = new Inflights(100, 0);
  unlimited.add(1, 1e12);
  t.equal(unlimited.full(), false, 'maxBytes 0 means no byte limit');
});

t.test('freeLE frees every message up to an acknowledged index; freeFirstOne frees one', async (t) => {
  const f = new Inflights(10, 0);
  for (const i of [2, 4, 6, 8, 10]) f.add(i, 1);
  f.freeLE(1);
  t.equal(f.count, 5, 'nothing is <= 1');
  f.freeLE(5);
  t.equal(f.count, 3, '2 and 4 are acknowledged by 5');
  f.freeLE(6);
  t.equal(f.count, 2, '6 exactly');
  f.freeLE(5);
  t.equal(f.count, 2, 'a stale (lower) acknowledgement frees nothing');
  f.freeFirstOne();
  t.equal(f.count, 1, 'one freed (8)');
  f.freeLE(100);
  t.equal(f.count, 0);
  f.freeFirstOne();
  t.equal(f.count, 0, 'freeing from an empty window is harmless');
});

t.test('indexes must increase; reset empties the window', async (t) => {
  const f = new Inflights(10, 100);
  f.add(5, 50);
  t.throws(() => f.add(5, 1), AssertionError, 'the same index twice is a bug');
  t.throws(() => f.add(3, 1), AssertionError, 'a lower index is a bug');
  f.add(6, 50);
  t.equal(f.full(), true);
  f.reset();
  t.same([f.count, f.full()], [0, false]);
  f.add(1, 1);
  t.equal(f.count, 1, 'after a reset indexes start over');
});

t.test('a long run keeps count and bytes right while its storage is compacted', async (t) => {
  const f = new Inflights(1000, 0);
  let next = 1;
  for (let round = 0; round < 50; round++) {
    for (let k = 0; k < 20; k++) f.add(next++, 3);
    f.freeLE(next - 6); // leave 5 outstanding
    if (f.count !== 5) t.fail(`round ${round}: count ${f.count}, want 5`);
  }
  t.equal(f.count, 5);
  f.freeLE(next - 3);
  t.equal(f.count, 2, 'the right two remain');
});

t.test('property: Inflights agrees with a naive array model', async (t) => {
  type Op = { kind: 'add'; gap: number; bytes: number } | { kind: 'free'; back: number } | { kind: 'first' } | { kind: 'reset' };
  const op: fc.Arbitrary<Op> = fc.oneof(
    { weight: 5, arbitrary: fc.record({ kind: fc.constant('add' as const), gap: fc.integer({ min: 1, max: 3 }), bytes: fc.nat(20) }) },
    { weight: 2, arbitrary: fc.record({ kind: fc.constant('free' as const), back: fc.nat(10) }) },
    { weight: 1, arbitrary: fc.constant({ kind: 'first' as const }) },
    { weight: 1, arbitrary: fc.constant({ kind: 'reset' as const }) },
  );
  fc.assert(
    fc.property(fc.integer({ min: 1, max: 8 }), fc.nat(60), fc.array(op, { maxLength: 300, size: 'max' }), (maxCount, maxBytes, ops) => {
      const f = new Inflights(maxCount, maxBytes);
      let model: Array<{ index: number; bytes: number }> = [];
      let last = 0;
      for (const o of ops) {
        switch (o.kind) {
          case 'add': {
            const full = model.length >= maxCount || (maxBytes > 0 && model.reduce((s, x) => s + x.bytes, 0) >= maxBytes);
            if (full) break; // callers never add to a full window
            last += o.gap;
            f.add(last, o.bytes);
            model.push({ index: last, bytes: o.bytes });
            break;
          }
          case 'free': {
            const upTo = last - o.back;
            f.freeLE(upTo);
            model = model.filter((x) => x.index > upTo);
            break;
          }
          case 'first':
            f.freeFirstOne();
            model = model.slice(1);
            break;
          case 'reset':
            f.reset();
            model = [];
            break;
        }
        const bytes = model.reduce((s, x) => s + x.bytes, 0);
        const wantFull = model.length >= maxCount || (maxBytes > 0 && bytes >= maxBytes);
        if (f.count !== model.length || f.full() !== wantFull) return false;
      }
      return true;
    }),
    { numRuns: 500 },
  );
  t.pass('500 random runs agree');
});
