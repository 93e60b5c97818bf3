import t from 'tap';
import { ManualTime } from '../testing/index.js';
import { WorkQueue } from './work-queue.js';

/** Keys handed out by the queue, with the (manual) time at which each came out. */
function drain(q: WorkQueue, time: ManualTime, out: Array<{ key: string; atMs: number }>, doneAtOnce = true): { stop: () => void } {
  let stopped = false;
  void (async () => {
    while (!stopped) {
      const key = await q.get();
      if (key === undefined) return;
      out.push({ key, atMs: time.monotonicMs() });
      if (doneAtOnce) q.done(key);
    }
  })();
  return { stop: () => (stopped = true) };
}

t.test('dedupe: a key waiting in the queue is queued once, in first-add order', async (t) => {
  const time = new ManualTime();
  const q = new WorkQueue(time, time);
  for (const k of ['a', 'b', 'a', 'c', 'b', 'a']) q.add(k);
  t.equal(q.length, 3);
  const got = [await q.get(), await q.get(), await q.get()];
  t.same(got, ['a', 'b', 'c']);
  t.equal(q.length, 0);
  t.equal(q.active, 3);
});

t.test('a key added while it is processing is not handed out again until done, then exactly once', async (t) => {
  const time = new ManualTime();
  const q = new WorkQueue(time, time);
  q.add('a');
  t.equal(await q.get(), 'a');
  q.add('a');
  q.add('a');
  q.add('b');
  t.equal(q.length, 1, 'only b is ready: a is processing');
  t.equal(await q.get(), 'b');
  t.equal(q.length, 0);
  q.done('a');
  t.equal(q.length, 1, 'a is queued again once, for the adds that came during its processing');
  t.equal(await q.get(), 'a');
  q.done('a');
  q.done('b');
  t.equal(q.length, 0, 'nothing more: the two adds were one');
});

t.test('a waiting get() is handed the key at once, and an add right after sees it as processing', async (t) => {
  const time = new ManualTime();
  const q = new WorkQueue(time, time);
  const waiting = q.get();
  q.add('a');
  q.add('a'); // same turn: a is already processing (handed to the waiting get)
  t.equal(await waiting, 'a');
  t.equal(q.length, 0);
  q.done('a');
  t.equal(q.length, 1, 'the second add is kept: a runs again');
});

t.test('addAfter: the key comes out after the delay; the earliest pending delay of a key wins', async (t) => {
  const time = new ManualTime();
  const q = new WorkQueue(time, time);
  const out: Array<{ key: string; atMs: number }> = [];
  drain(q, time, out);
  q.addAfter('a', 500);
  q.addAfter('a', 800); // later: ignored
  q.addAfter('b', 300);
  q.addAfter('b', 100); // earlier: replaces
  t.equal(q.waiting, 2);
  await time.advance(99);
  t.same(out, []);
  await time.advance(1);
  t.same(out, [{ key: 'b', atMs: 100 }]);
  await time.advance(1000);
  t.same(out, [
    { key: 'b', atMs: 100 },
    { key: 'a', atMs: 500 },
  ]);
  t.equal(q.waiting, 0);
  t.equal(time.timers, 0, 'no timer left behind');
  q.addAfter('c', 0);
  await time.flush();
  t.equal(out.at(-1)?.key, 'c', 'a delay of 0 adds at once');
});

t.test('backoff: base doubled per failure up to the cap; forget resets it', async (t) => {
  const time = new ManualTime();
  const q = new WorkQueue(time, time, { backoffBaseMs: 100, backoffCapMs: 1000 });
  const delays = [1, 2, 3, 4, 5, 6].map(() => q.addRateLimited('a'));
  t.same(delays, [100, 200, 400, 800, 1000, 1000]);
  t.equal(q.failures('a'), 6);
  t.equal(q.backoffMs('b'), 100, 'per key: b has no failures');
  q.forget('a');
  t.equal(q.failures('a'), 0);
  t.equal(q.addRateLimited('a'), 100, 'after forget, from the base again');
  for (let i = 0; i < 2000; i++) q.addRateLimited('x');
  t.equal(q.backoffMs('x'), 1000, '2^n overflowing still gives the cap');
});

t.test('global rate limit: a token bucket over all keys (burst, then qps)', async (t) => {
  const time = new ManualTime();
  const q = new WorkQueue(time, time, { qps: 10, burst: 3 });
  const out: Array<{ key: string; atMs: number }> = [];
  drain(q, time, out);
  for (let i = 0; i < 7; i++) q.add(`k${i}`);
  await time.flush();
  t.same(
    out.map((o) => o.atMs),
    [0, 0, 0],
    'the burst goes at once',
  );
  await time.advance(1000);
  t.same(
    out.map((o) => o.atMs),
    [0, 0, 0, 100, 200, 300, 400],
    'then one every 1/qps',
  );
  t.same(
    out.map((o) => o.key),
    ['k0', 'k1', 'k2', 'k3', 'k4', 'k5', 'k6'],
  );
  // Idle time refills the bucket up to the burst, not beyond.
  await time.advance(10_000);
  for (let i = 0; i < 5; i++) q.add(`m${i}`);
  await time.advance(1000);
  t.same(
    out.slice(7).map((o) => o.atMs - 11_000),
    [0, 0, 0, 100, 200],
  );
});

t.test('shutDown: waiting gets resolve undefined, delays are cancelled, adds are ignored', async (t) => {
  const time = new ManualTime();
  const q = new WorkQueue(time, time, { qps: 1, burst: 1 });
  q.add('a');
  t.equal(await q.get(), 'a');
  q.add('b');
  const rateLimited = q.get(); // b waits for a token (1 s)
  const waiting = q.get();
  q.addAfter('c', 1000);
  q.shutDown();
  t.equal(await rateLimited, undefined, 'a get waiting for a token ends');
  t.equal(await waiting, undefined, 'a get waiting for a key ends');
  t.equal(await q.get(), undefined);
  q.add('d');
  t.equal(q.length, 0);
  t.equal(time.timers, 0, 'every timer cleared');
  t.ok(q.isShutDown);
});

t.test('options are validated', async (t) => {
  const time = new ManualTime();
  t.throws(() => new WorkQueue(time, time, { backoffBaseMs: 0 }), /backoffBaseMs must be a positive number/);
  t.throws(() => new WorkQueue(time, time, { backoffBaseMs: 100, backoffCapMs: 50 }), /backoffCapMs \(50\) must be at least backoffBaseMs \(100\)/);
  t.throws(() => new WorkQueue(time, time, { qps: 0 }), /qps must be a positive number/);
  t.throws(() => new WorkQueue(time, time, { burst: 0.5 }), /burst must be a positive integer/);
});
