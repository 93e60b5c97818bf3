/**
 * The discrete-event scheduler: simulated milliseconds, no real time. Events are ordered by
 * (time, sequence number), so two events due at the same millisecond run in the order they
 * were scheduled and a run is a pure function of its seed (FoundationDB-style simulation).
 */
import { assert } from '../../src/base/index.js';

export interface SimEvent {
  readonly time: number;
  readonly seq: number;
  readonly run: () => void;
}

/** A binary min-heap keyed by (time, seq). */
export class Scheduler {
  private heap: SimEvent[] = [];
  private nextSeq = 0;
  private nowMs = 0;

  /** The current simulated time in milliseconds. */
  now(): number {
    return this.nowMs;
  }

  /** Number of events waiting. */
  get size(): number {
    return this.heap.length;
  }

  /** Runs `run` `delayMs` simulated milliseconds from now (0 = after everything already due now). */
  after(delayMs: number, run: () => void): void {
    assert(Number.isSafeInteger(delayMs) && delayMs >= 0, () => `delay must be a non-negative integer ms, got ${delayMs}`);
    this.push({ time: this.nowMs + delayMs, seq: this.nextSeq++, run });
  }

  /** Runs `run` at simulated time `timeMs` (not in the past). */
  at(timeMs: number, run: () => void): void {
    assert(Number.isSafeInteger(timeMs) && timeMs >= this.nowMs, () => `cannot schedule at ${timeMs}, now is ${this.nowMs}`);
    this.push({ time: timeMs, seq: this.nextSeq++, run });
  }

  /** Time of the next event, or undefined when none is waiting. */
  peekTime(): number | undefined {
    return this.heap[0]?.time;
  }

  /** Pops the next event, advances the clock to it and runs it. Returns false when empty. */
  step(): boolean {
    const ev = this.pop();
    if (ev === undefined) return false;
    this.nowMs = ev.time;
    ev.run();
    return true;
  }

  private less(a: SimEvent, b: SimEvent): boolean {
    return a.time < b.time || (a.time === b.time && a.seq < b.seq);
  }

  private push(ev: SimEvent): void {
    const h = this.heap;
    h.push(ev);
    let i = h.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      const parent = h[p] as SimEvent;
      if (!this.less(ev, parent)) break;
      h[i] = parent;
      i = p;
    }
    h[i] = ev;
  }

  private pop(): SimEvent | undefined {
    const h = this.heap;
    const top = h[0];
    if (top === undefined) return undefined;
    const last = h.pop() as SimEvent;
    if (h.length > 0) {
      let i = 0;
      const n = h.length;
      for (;;) {
        const l = 2 * i + 1;
        if (l >= n) break;
        const r = l + 1;
        let c = l;
        if (r < n && this.less(h[r] as SimEvent, h[l] as SimEvent)) c = r;
        const child = h[c] as SimEvent;
        if (!this.less(child, last)) break;
        h[i] = child;
        i = c;
      }
      h[i] = last;
    }
    return top;
  }
}
