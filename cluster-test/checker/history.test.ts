import t from 'tap';
import fc from 'fast-check';
import { HistoryRecorder, pairOperations, parseJsonLines, toJsonLines } from './history.js';
import type { HistoryEvent } from './history.js';
import { generate } from './testing/index.js';
import type { OpSpec } from './testing/index.js';

t.test('the recorder writes the documented JSON Lines format', async (t) => {
  const rec = new HistoryRecorder();
  const w = rec.invoke(1, 'write', 'a', 'v1', 10);
  const c = rec.invoke(2, 'cas', 'a', [null, 3], 11);
  rec.complete(w, 'ok', 'v1', 12);
  rec.complete(c, 'fail', [null, 3], 13);
  const r = rec.invoke(1, 'read', 'a', null, 14);
  rec.complete(r, 'ok', 'v1', 15);
  t.equal(rec.toJsonLines(), [
    '{"process":1,"type":"invoke","f":"write","key":"a","value":"v1","time":10,"index":0}',
    '{"process":2,"type":"invoke","f":"cas","key":"a","value":[null,3],"time":11,"index":1}',
    '{"process":1,"type":"ok","f":"write","key":"a","value":"v1","time":12,"index":2}',
    '{"process":2,"type":"fail","f":"cas","key":"a","value":[null,3],"time":13,"index":3}',
    '{"process":1,"type":"invoke","f":"read","key":"a","value":null,"time":14,"index":4}',
    '{"process":1,"type":"ok","f":"read","key":"a","value":"v1","time":15,"index":5}',
    '',
  ].join('\n'));
  t.same(parseJsonLines(rec.toJsonLines()), rec.events, 'parses back to the same events');
});

t.test('after an info, a worker continues under a fresh process number', async (t) => {
  const rec = new HistoryRecorder();
  const a = rec.invoke(0, 'write', 'k', 1, 0);
  rec.complete(a, 'info', 1, 1);
  const b = rec.invoke(0, 'read', 'k', null, 2);
  t.equal(a.process, 0);
  t.equal(b.process, 1, 'fresh number for worker 0');
  rec.complete(b, 'ok', 1, 3);
  // Worker 1 appears later; its own number is taken, so it is given another.
  const c = rec.invoke(1, 'read', 'k', null, 4);
  t.equal(c.process, 2);
  const d = rec.invoke(0, 'read', 'k', null, 5);
  t.equal(d.process, 1, 'worker 0 keeps its fresh number until its next info');
  t.doesNotThrow(() => pairOperations(rec.events), 'the history pairs cleanly');
});

t.test('the recorder refuses to record a malformed history', async (t) => {
  const rec = new HistoryRecorder();
  const h = rec.invoke(0, 'write', 'k', 1, 5);
  t.throws(() => rec.invoke(0, 'read', 'k', null, 6), /process 0 already has an outstanding operation/);
  t.throws(() => rec.complete(h, 'ok', 1, 4), /time went backwards from 5 to 4/);
  rec.complete(h, 'ok', 1, 6);
  t.throws(() => rec.complete(h, 'ok', 1, 7), /no such outstanding operation/);
  t.throws(() => rec.invoke(1, 'write', 'k', Number.NaN, 8), /must be a string, a finite number or null, got NaN/);
  t.equal(rec.events.length, 2, 'nothing recorded by the refused calls');
});

t.test('parseJsonLines names the line and the field at fault', async (t) => {
  const good = '{"process":0,"type":"invoke","f":"read","key":"k","value":null,"time":0}';
  t.throws(() => parseJsonLines(`${good}\n{"process":0,`), { message: /^history line 2: not valid JSON/, details: { line: 2 } });
  t.throws(() => parseJsonLines(`${good}\n\n{"process":-1,"type":"ok","f":"read","key":"k","value":null,"time":1}`), /^history line 3: "process" must be a non-negative integer, got -1/);
  t.throws(() => parseJsonLines('{"process":0,"type":"done","f":"read","key":"k","value":null,"time":0}'), /line 1: "type" must be "invoke", "ok", "fail" or "info", got "done"/);
  t.throws(() => parseJsonLines('{"process":0,"type":"invoke","f":"cas","key":"k","value":3,"time":0}'), /line 1: "value" of a cas invoke must be \[expected, new\]/);
  t.throws(() => parseJsonLines('{"process":0,"type":"invoke","f":"read","key":"k","value":2,"time":0}'), /line 1: "value" of a read invoke must be null, got 2/);
  t.throws(() => parseJsonLines('{"process":0,"type":"invoke","f":"write","key":"k","value":{},"time":0}'), /"value" of a write invoke must be a string, a finite number or null/);
  t.throws(() => parseJsonLines('{"process":0,"type":"invoke","f":"write","key":"k","value":1}'), /line 1: "time" must be a finite number, got nothing/);
  t.throws(() => parseJsonLines('[1,2]'), /line 1: expected a JSON object, got \[1,2\]/);
  // Blank lines, CRLF endings and unknown fields are fine.
  const events = parseJsonLines(`\r\n${good.replace('}', ',"error":"timeout"}')}\r\n\n`);
  t.same(events, [{ process: 0, type: 'invoke', f: 'read', key: 'k', value: null, time: 0 }]);
});

t.test('pairOperations pairs invokes with completions', async (t) => {
  const rec = new HistoryRecorder();
  const w = rec.invoke(0, 'write', 'k', 1, 0);
  const r = rec.invoke(1, 'read', 'k', null, 1);
  const c = rec.invoke(2, 'cas', 'k', [1, 2], 2);
  rec.complete(r, 'ok', 1, 3);
  rec.complete(w, 'info', 1, 4);
  rec.complete(c, 'fail', [1, 2], 5);
  rec.invoke(3, 'write', 'k', 9, 6); // never completes
  const ops = pairOperations(rec.events);
  t.same(ops.map((op) => [op.id, op.process, op.f, op.status, op.input, op.output, op.invokeTime, op.completeTime, op.invokeIndex, op.completeIndex]), [
    [0, 0, 'write', 'info', 1, undefined, 0, Infinity, 0, Infinity],
    [1, 1, 'read', 'ok', null, 1, 1, 3, 1, 3],
    [2, 2, 'cas', 'fail', [1, 2], [1, 2], 2, 5, 2, 5],
    [3, 3, 'write', 'info', 9, undefined, 6, Infinity, 6, Infinity],
  ]);
});

t.test('pairOperations rejects histories that break the format', async (t) => {
  const ev = (process: number, type: HistoryEvent['type'], f: 'read' | 'write', time: number, key = 'k'): HistoryEvent =>
    f === 'read' ? { process, type, f, key, value: null, time } : { process, type, f, key, value: 1, time };
  t.throws(() => pairOperations([ev(0, 'ok', 'write', 0)]), { message: /event 0 .*completion with no outstanding invoke/, details: { event: 0 } });
  t.throws(() => pairOperations([ev(0, 'invoke', 'write', 0), ev(0, 'invoke', 'read', 1)]), /event 1 .*already has an outstanding operation \(invoked at event 0\)/);
  t.throws(() => pairOperations([ev(0, 'invoke', 'write', 0), ev(0, 'ok', 'read', 1)]), /event 1 .*does not match its invoke \(write "k" at event 0\)/);
  t.throws(() => pairOperations([ev(0, 'invoke', 'write', 0), ev(0, 'ok', 'write', 1, 'j')]), /does not match its invoke/);
  t.throws(() => pairOperations([ev(0, 'invoke', 'write', 0), ev(0, 'info', 'write', 1), ev(0, 'invoke', 'read', 2)]), /event 2 .*after one of its operations ended in info/);
  t.throws(() => pairOperations([ev(0, 'invoke', 'write', 5), ev(0, 'ok', 'write', 4)]), /event 1 .*time 4 is before the previous event's time 5/);
});

t.test('property: recorded histories survive JSON Lines and pair one operation per invoke', async (t) => {
  const spec: fc.Arbitrary<OpSpec> = fc.record({
    worker: fc.integer({ min: 0, max: 3 }),
    key: fc.integer({ min: 0, max: 2 }),
    f: fc.constantFrom('read', 'write', 'cas') as fc.Arbitrary<'read' | 'write' | 'cas'>,
    value: fc.integer({ min: 1, max: 5 }),
    expected: fc.integer({ min: 0, max: 5 }),
    gap: fc.integer({ min: 1, max: 3 }),
    duration: fc.integer({ min: 1, max: 8 }),
    at: fc.integer({ min: 1, max: 99 }),
    outcome: fc.constantFrom('ok', 'refused', 'info-applied', 'info-lost', 'hang') as fc.Arbitrary<OpSpec['outcome']>,
  });
  fc.assert(
    fc.property(fc.array(spec, { maxLength: 40 }), (specs) => {
      const { events } = generate(specs);
      const text = toJsonLines(events);
      const parsed = parseJsonLines(text);
      const ops = pairOperations(parsed);
      return toJsonLines(parsed) === text && ops.length === events.filter((e) => e.type === 'invoke').length;
    }),
    { numRuns: 300 },
  );
  t.pass('300 recorded histories round-tripped');
});
