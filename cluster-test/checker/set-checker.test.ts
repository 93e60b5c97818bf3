import t from 'tap';
import fc from 'fast-check';
import { checkSet } from './set-checker.js';
import type { SetAdd, SetElement } from './set-checker.js';

t.test('every acknowledged add present is valid', async (t) => {
  const r = checkSet([{ element: 1, status: 'ok' }, { element: 2, status: 'ok' }], [2, 1]);
  t.same(r, { valid: true, ok: 2, lost: [], unexpected: [], failedButPresent: [], duplicated: [], recovered: [], notApplied: 0 });
});

t.test('an acknowledged add missing from the final read is lost', async (t) => {
  const r = checkSet([{ element: 1, status: 'ok' }, { element: 'b', status: 'ok' }, { element: 3, status: 'ok' }], [1]);
  t.equal(r.valid, false);
  t.same(r.lost, [3, 'b'], 'numbers before strings');
});

t.test('an element no one tried to add is unexpected', async (t) => {
  const r = checkSet([{ element: 1, status: 'ok' }], [1, 7, '1']);
  t.equal(r.valid, false);
  t.same(r.unexpected, [7, '1'], '1 and "1" are different elements');
});

t.test('an info add may be present or absent', async (t) => {
  const r = checkSet([{ element: 1, status: 'info' }, { element: 2, status: 'info' }], [1]);
  t.equal(r.valid, true);
  t.same(r.recovered, [1]);
  t.equal(r.notApplied, 1);
});

t.test('a failed add must be absent, and the read must not repeat elements', async (t) => {
  t.same(checkSet([{ element: 1, status: 'fail' }], []).valid, true);
  const r = checkSet([{ element: 1, status: 'fail' }, { element: 2, status: 'ok' }], [1, 2, 2]);
  t.equal(r.valid, false);
  t.same(r.failedButPresent, [1]);
  t.same(r.duplicated, [2]);
});

t.test('adds must be unique', async (t) => {
  t.throws(() => checkSet([{ element: 'a', status: 'ok' }, { element: 'a', status: 'fail' }], []), /adds "a" more than once/);
});

t.test('property: a final read of exactly the ok adds plus any info adds is valid, and dropping an ok add is caught', async (t) => {
  const adds = fc.uniqueArray(fc.integer({ min: 0, max: 200 }), { maxLength: 60 }).chain((elements) =>
    fc.tuple(fc.constant(elements), fc.array(fc.constantFrom('ok', 'fail', 'info') as fc.Arbitrary<'ok' | 'fail' | 'info'>, { minLength: elements.length, maxLength: elements.length }), fc.array(fc.boolean(), { minLength: elements.length, maxLength: elements.length })));
  fc.assert(
    fc.property(adds, ([elements, statuses, infoPresent]) => {
      const history: SetAdd[] = elements.map((element, i) => ({ element, status: statuses[i] ?? 'ok' }));
      const read: SetElement[] = history.filter((a, i) => a.status === 'ok' || (a.status === 'info' && infoPresent[i] === true)).map((a) => a.element);
      if (!checkSet(history, read).valid) return false;
      const okAdds = history.filter((a) => a.status === 'ok');
      if (okAdds.length === 0) return true;
      const victim = okAdds[0]!.element;
      const r = checkSet(history, read.filter((e) => e !== victim));
      return !r.valid && r.lost.length === 1 && r.lost[0] === victim;
    }),
    { numRuns: 300 },
  );
  t.pass('300 set histories checked');
});
