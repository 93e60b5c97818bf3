import * as prom from 'prom-client';
import t from 'tap';
import type { CairnClient, Informer } from '../../client/index.js';
import { silentLogger } from '../../base/index.js';
import { ManualTime } from '../testing/index.js';
import { ControllerRunner, type ControllerRunnerOptions } from './controller-runner.js';
import { ControllerMetrics } from './metrics.js';
import type { ControllerSpec, ReconcileContext, ReconcileResult } from './types.js';

/**
 * The runner's rules with a manual clock: one reconcile per key at a time, a key changed during
 * its reconcile is reconciled once more after it, per-key backoff on errors (base, doubling,
 * cap, reset on success), requeueAfter without backoff, the global rate, resync, stop.
 */

const client = {} as unknown as CairnClient;

/** A managed-type cache that only knows its keys (what resync reads). */
function keysCache(keys: string[]): Informer<unknown> {
  return { keys: () => [...keys] } as unknown as Informer<unknown>;
}

function runner(time: ManualTime, reconcile: ControllerSpec['reconcile'], opts: Partial<ControllerRunnerOptions> & { workers?: number; resyncMs?: number } = {}, spec: Partial<ControllerSpec> = {}): ControllerRunner {
  return new ControllerRunner(
    { name: 'test.v1.ctl', managedType: 'demo.v1.Artist', watches: [{ type: 'demo.v1.Album', map: () => [] }], reconcile, ...spec },
    { client, caches: () => undefined, clock: time, timers: time, logger: silentLogger, queue: { backoffBaseMs: 100, backoffCapMs: 1000, qps: 1000, burst: 1000 }, ...opts },
  );
}

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve = (): void => {};
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

t.test('one reconcile per key at a time; a change during it gives exactly one more; other keys run alongside', async (t) => {
  const time = new ManualTime();
  const inFlight = new Map<string, number>();
  let maxSameKey = 0;
  const calls: string[] = [];
  const gates: Array<() => void> = [];
  const r = runner(
    time,
    async (key) => {
      calls.push(key);
      const n = (inFlight.get(key) ?? 0) + 1;
      inFlight.set(key, n);
      maxSameKey = Math.max(maxSameKey, n);
      const d = deferred();
      gates.push(d.resolve);
      await d.promise;
      inFlight.set(key, (inFlight.get(key) ?? 1) - 1);
    },
    { workers: 4 },
  );
  r.enqueue('a');
  r.start();
  await time.flush();
  t.same(calls, ['a']);
  for (let i = 0; i < 5; i++) r.enqueue('a'); // changes while a is being reconciled
  r.enqueue('b');
  await time.flush();
  t.same(calls, ['a', 'b'], 'b runs on another worker; a does not run twice at once');
  gates.shift()?.(); // a's first reconcile ends
  await time.flush();
  t.same(calls, ['a', 'b', 'a'], 'a once more, for the five changes during its first reconcile');
  while (gates.length > 0) {
    gates.shift()?.();
    await time.flush();
  }
  t.same(calls, ['a', 'b', 'a'], 'and no more');
  t.equal(maxSameKey, 1);
  t.equal(r.reconcileCount, 3);
  await r.stop();
});

t.test('backoff on error: base, doubling, cap; success resets it (injected clock)', async (t) => {
  const time = new ManualTime();
  const at: number[] = [];
  let failuresLeft = 6;
  const r = runner(time, async () => {
    at.push(time.monotonicMs());
    if (failuresLeft-- > 0) throw new Error('not yet');
  });
  r.enqueue('a');
  r.start();
  await time.advance(10_000);
  const gaps = at.slice(1).map((v, i) => v - (at[i] as number));
  t.same(gaps, [100, 200, 400, 800, 1000, 1000], 'retries after 100, 200, 400, 800, then the 1000 ms cap');
  t.equal(r.queue.failures('a'), 0, 'the success forgot the failures');
  // Fail again: the backoff starts from the base.
  failuresLeft = 2;
  at.length = 0;
  r.enqueue('a');
  await time.advance(10_000);
  t.same(
    at.slice(1).map((v, i) => v - (at[i] as number)),
    [100, 200],
    'reset after the success',
  );
  await r.stop();
});

t.test('requeueAfter: reconciled again after exactly that delay, without backoff, and it resets the backoff', async (t) => {
  const time = new ManualTime();
  const at: number[] = [];
  const script: Array<'fail' | number | 'ok'> = ['fail', 'fail', 'fail', 5000, 'fail', 'ok'];
  const r = runner(time, async (): Promise<ReconcileResult | void> => {
    at.push(time.monotonicMs());
    const step = script.shift() ?? 'ok';
    if (step === 'fail') throw new Error('boom');
    if (typeof step === 'number') return { requeueAfterMs: step };
  });
  r.enqueue('a');
  r.start();
  await time.advance(60_000);
  t.same(
    at.slice(1).map((v, i) => v - (at[i] as number)),
    [100, 200, 400, 5000, 100],
    'three failures back off; requeueAfter 5000 waits exactly 5000; the next failure starts from the base',
  );
  t.equal(at.length, 6, 'nothing after the success');
  await r.stop();
});

t.test('the global rate limit spaces reconciles of different keys', async (t) => {
  const time = new ManualTime();
  const at: number[] = [];
  const r = runner(
    time,
    async () => {
      at.push(time.monotonicMs());
    },
    { queue: { qps: 20, burst: 2 }, workers: 3 },
  );
  for (const k of ['a', 'b', 'c', 'd', 'e']) r.enqueue(k);
  r.start();
  await time.advance(1000);
  t.same(at, [0, 0, 50, 100, 150]);
  await r.stop();
});

t.test('resync: every cached key of the managed type is queued each resyncMs', async (t) => {
  const time = new ManualTime();
  const calls: Array<[string, number]> = [];
  const r = runner(
    time,
    async (key) => {
      calls.push([key, time.monotonicMs()]);
    },
    { caches: (type) => (type === 'demo.v1.Artist' ? keysCache(['x', 'y']) : undefined) },
    { resyncMs: 30_000 },
  );
  r.start();
  await time.advance(29_999);
  t.same(calls, [], 'nothing before the first resync');
  await time.advance(1);
  t.same(calls, [
    ['x', 30_000],
    ['y', 30_000],
  ]);
  await time.advance(30_000);
  t.equal(calls.length, 4);
  await r.stop();
  await time.advance(60_000);
  t.equal(calls.length, 4, 'no resync after stop');
  t.equal(time.timers, 0, 'the resync timer is cleared');
});

t.test('the context: caches of declared types only, the controller name, the injected clock, a signal aborted on stop', async (t) => {
  const time = new ManualTime();
  const artists = keysCache([]);
  let seen: ReconcileContext | undefined;
  const started = deferred();
  const r = runner(
    time,
    async (_key, ctx) => {
      seen = ctx;
      started.resolve();
      // A long reconcile that honours the signal.
      await new Promise<void>((resolve) => ctx.signal.addEventListener('abort', () => resolve(), { once: true }));
    },
    { caches: (type) => (type === 'demo.v1.Artist' ? artists : undefined) },
  );
  r.enqueue('a');
  r.enqueue('b');
  r.start();
  await started.promise;
  const ctx = seen as ReconcileContext;
  t.equal(ctx.cache('demo.v1.Artist'), artists);
  t.throws(() => ctx.cache('demo.v1.Nope'), /controller test\.v1\.ctl has no cache of demo\.v1\.Nope: it manages demo\.v1\.Artist and watches demo\.v1\.Album/);
  t.throws(() => ctx.cache('demo.v1.Album'), /the cache of demo\.v1\.Album is not running/);
  t.equal(ctx.controllerName, 'test.v1.ctl');
  t.equal(ctx.nowMs(), time.nowMs());
  t.equal(ctx.signal.aborted, false);
  await r.stop();
  t.equal(ctx.signal.aborted, true, 'stop aborts the signal and waits for the reconcile to end');
  t.equal(r.reconcileCount, 1, 'the queued key b was dropped, not reconciled');
  t.equal(r.running, false);
});

t.test('metrics: reconcile latency by result, errors, queue depth; labelled by controller', async (t) => {
  const time = new ManualTime();
  const registry = new prom.Registry();
  const metrics = new ControllerMetrics(registry);
  let n = 0;
  const r = runner(
    time,
    async () => {
      await new Promise<void>((resolve) => time.setTimeout(resolve, 30));
      if (n++ === 0) throw new Error('first fails');
    },
    { metrics, queue: { backoffBaseMs: 100, backoffCapMs: 1000, qps: 1, burst: 1 } },
  );
  r.enqueue('a');
  r.enqueue('b');
  r.enqueue('c');
  r.start();
  await time.advance(1);
  let text = await registry.metrics();
  t.match(text, /cairn_controller_queue_depth\{controller="test\.v1\.ctl"\} 2/, 'two keys wait for the rate limit');
  t.match(text, /cairn_controller_active\{controller="test\.v1\.ctl"\} 1/);
  await time.advance(5000);
  text = await registry.metrics();
  t.match(text, /cairn_controller_reconcile_seconds_count\{controller="test\.v1\.ctl",result="error"\} 1/);
  t.match(text, /cairn_controller_reconcile_seconds_count\{controller="test\.v1\.ctl",result="success"\} 3/);
  t.match(text, /cairn_controller_reconcile_seconds_sum\{controller="test\.v1\.ctl",result="success"\} 0\.09/, 'latency from the injected clock: 3 x 30 ms');
  t.match(text, /cairn_controller_reconcile_errors_total\{controller="test\.v1\.ctl"\} 1/);
  t.match(text, /cairn_controller_queue_depth\{controller="test\.v1\.ctl"\} 0/);
  await r.stop();
  text = await registry.metrics();
  t.match(text, /cairn_controller_active\{controller="test\.v1\.ctl"\} 0/, 'a stopped controller reads 0');
});

t.test('options are validated', async (t) => {
  const time = new ManualTime();
  t.throws(() => runner(time, async () => {}, { workers: 0 }), /workers must be a positive integer/);
  t.throws(() => runner(time, async () => {}, {}, { resyncMs: 0 }), /resyncMs must be a positive number/);
});
