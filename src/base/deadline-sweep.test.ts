import t from 'tap';
import { DeadlineSweep } from './deadline-sweep.js';
import type { Clock, Timers } from './ports.js';

/** Time moved by hand: intervals fire as `advance` passes their due times; counts live timers. */
class HandTime implements Clock, Timers {
  now = 1_000;
  private next = 1;
  private readonly intervals = new Map<number, { fn: () => void; ms: number; due: number }>();
  nowMs(): number {
    return this.now;
  }
  monotonicMs(): number {
    return this.now;
  }
  setInterval(fn: () => void, ms: number): unknown {
    const id = this.next++;
    this.intervals.set(id, { fn, ms, due: this.now + ms });
    return id;
  }
  clearInterval(h: unknown): void {
    this.intervals.delete(h as number);
  }
  setTimeout(): unknown {
    throw new Error('the sweep must not arm a timer per deadline');
  }
  clearTimeout(): void {}
  yield(): Promise<void> {
    return Promise.resolve();
  }
  get liveTimers(): number {
    return this.intervals.size;
  }
  advance(ms: number): void {
    const end = this.now + ms;
    for (;;) {
      let first: [number, { fn: () => void; ms: number; due: number }] | undefined;
      for (const e of this.intervals) if (e[1].due <= end && (first === undefined || e[1].due < first[1].due)) first = e;
      if (first === undefined) break;
      this.now = first[1].due;
      first[1].due += first[1].ms;
      first[1].fn();
    }
    this.now = end;
  }
}

t.test('a deadline fires once, after its time and within one sweep period, never before', async (t) => {
  const time = new HandTime();
  const sweep = new DeadlineSweep(time, time, { sweepMs: 10 });
  const fired: number[] = [];
  sweep.add(time.now + 25, () => fired.push(time.now));
  time.advance(24);
  t.same(fired, [], 'not before its deadline (24 ms of 25)');
  time.advance(10);
  t.same(fired, [1_030], 'fired at the first sweep at or after the deadline (25 ms -> the 30 ms sweep)');
  time.advance(100);
  t.equal(fired.length, 1, 'only once');
  t.equal(sweep.size, 0);
});

t.test('one timer serves many deadlines, and none runs when nothing is pending', async (t) => {
  const time = new HandTime();
  const sweep = new DeadlineSweep(time, time, { sweepMs: 10 });
  t.equal(time.liveTimers, 0, 'idle: no timer');
  const fired: string[] = [];
  const a = sweep.add(time.now + 50, () => fired.push('a'));
  sweep.add(time.now + 15, () => fired.push('b'));
  sweep.add(time.now + 15, () => fired.push('c'));
  t.equal(time.liveTimers, 1, 'three deadlines, one timer');
  time.advance(20);
  t.same(fired, ['b', 'c'], 'the due ones, in the order they were added');
  t.ok(a.cancel(), 'cancelling a pending deadline says so');
  t.notOk(a.cancel(), 'cancelling twice is harmless');
  t.equal(time.liveTimers, 0, 'the timer stops with the last pending deadline');
  time.advance(100);
  t.same(fired, ['b', 'c'], 'a cancelled deadline never fires');
});

t.test('a callback may add a deadline; close forgets all without firing', async (t) => {
  const time = new HandTime();
  const sweep = new DeadlineSweep(time, time, { sweepMs: 5 });
  const fired: string[] = [];
  sweep.add(time.now + 5, () => {
    fired.push('first');
    sweep.add(time.now + 5, () => fired.push('second'));
  });
  time.advance(5);
  t.same(fired, ['first']);
  t.equal(time.liveTimers, 1, 'the added deadline re-armed the timer');
  time.advance(5);
  t.same(fired, ['first', 'second']);
  sweep.add(time.now + 5, () => fired.push('never'));
  sweep.close();
  time.advance(50);
  t.same(fired, ['first', 'second'], 'closed: nothing fires');
  t.equal(time.liveTimers, 0);
  sweep.add(time.now + 1, () => fired.push('after close'));
  time.advance(50);
  t.same(fired, ['first', 'second'], 'a deadline added after close is inert');
});

t.test('a bad period is refused, naming the option', async (t) => {
  const time = new HandTime();
  t.throws(() => new DeadlineSweep(time, time, { sweepMs: 0 }), /sweepMs must be a positive number/);
  t.throws(() => new DeadlineSweep(time, time, { sweepMs: Number.NaN }), /sweepMs/);
});
