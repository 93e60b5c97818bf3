import type { Clock, Timers } from '../ports.js';

interface Pending {
  readonly id: number;
  at: number;
  readonly fn: () => void;
  /** Set for intervals: the period. */
  readonly everyMs: number | undefined;
}

/**
 * A clock and timers driven by the test: time moves only in `advance`, which fires every timer
 * that falls due, in time order (ties in creation order), and lets the promise chains they start
 * run before the next one fires. Tests of timing (backoff, rate limits, leases) use it instead
 * of sleeping.
 */
export class ManualTime implements Clock, Timers {
  private mono = 0;
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();

  /** @param wallStartMs what `nowMs()` says at monotonic time 0. */
  constructor(private readonly wallStartMs = Date.UTC(2026, 10, 21, 10, 0, 0)) {}

  nowMs(): number {
    return this.wallStartMs + this.mono;
  }

  monotonicMs(): number {
    return this.mono;
  }

  setTimeout(fn: () => void, ms: number): unknown {
    return this.schedule(fn, ms, undefined);
  }

  clearTimeout(handle: unknown): void {
    if (typeof handle === 'number') this.pending.delete(handle);
  }

  setInterval(fn: () => void, ms: number): unknown {
    return this.schedule(fn, ms, Math.max(1, ms));
  }

  clearInterval(handle: unknown): void {
    if (typeof handle === 'number') this.pending.delete(handle);
  }

  yield(): Promise<void> {
    return settle();
  }

  /** Timers not yet fired or cleared. */
  get timers(): number {
    return this.pending.size;
  }

  /** When the next timer falls due (monotonic ms), if any. */
  get nextDueMs(): number | undefined {
    let best: number | undefined;
    for (const p of this.pending.values()) if (best === undefined || p.at < best) best = p.at;
    return best;
  }

  /** Lets promise chains started so far run (no time passes). */
  flush(): Promise<void> {
    return settle();
  }

  /**
   * Moves time forward by `ms`, firing each timer that falls due at its own time (so code that
   * reads the clock in a timer sees the right time) and settling promise chains after each.
   */
  async advance(ms: number): Promise<void> {
    const end = this.mono + ms;
    await settle();
    for (;;) {
      const due = this.nextDue(end);
      if (due === undefined) break;
      this.mono = Math.max(this.mono, due.at);
      if (due.everyMs !== undefined) due.at += due.everyMs;
      else this.pending.delete(due.id);
      due.fn();
      await settle();
    }
    this.mono = end;
    await settle();
  }

  /** Advances to the next timer and fires it (and any due at the same time); returns the time. */
  async advanceToNext(): Promise<number> {
    const at = this.nextDueMs;
    if (at === undefined) throw new Error('ManualTime: no timer is pending');
    await this.advance(Math.max(0, at - this.mono));
    return this.mono;
  }

  private schedule(fn: () => void, ms: number, everyMs: number | undefined): number {
    const id = this.nextId++;
    this.pending.set(id, { id, at: this.mono + Math.max(0, ms), fn, everyMs });
    return id;
  }

  private nextDue(end: number): Pending | undefined {
    let best: Pending | undefined;
    for (const p of this.pending.values()) {
      if (p.at > end) continue;
      if (best === undefined || p.at < best.at || (p.at === best.at && p.id < best.id)) best = p;
    }
    return best;
  }
}

/** A few turns of the event loop: enough for chains of resolved promises to run. */
async function settle(): Promise<void> {
  for (let i = 0; i < 5; i++) await new Promise<void>((resolve) => setImmediate(resolve));
}
