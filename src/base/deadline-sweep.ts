import { CairnError, ErrorCode } from './errors.js';
import type { Clock, Timers } from './ports.js';

/** A deadline registered with a `DeadlineSweep`. */
export interface Deadline {
  /** Forgets the deadline (the work finished first); idempotent. Returns whether it was still pending. */
  cancel(): boolean;
}

export interface DeadlineSweepOptions {
  /**
   * How often pending deadlines are checked, in ms, while any is pending (no timer runs
   * otherwise). A deadline fires at most this late. Default 10 ms.
   */
  readonly sweepMs?: number;
}

interface Entry {
  readonly atMs: number;
  readonly onExpire: () => void;
}

/**
 * Deadlines for many concurrent requests on one periodic timer, instead of a timer armed and
 * cleared per request (etcd's and grpc-go's servers do the same with a timing wheel). Each
 * request registers its deadline (monotonic ms) and a callback; the sweep runs every
 * `sweepMs` while any deadline is pending and fires those that have passed, in registration
 * order, each once. A request that finishes first cancels its deadline (a Set delete). Time
 * comes from the injected `Clock` and `Timers`, so tests drive it by hand.
 */
export class DeadlineSweep {
  private readonly pending = new Set<Entry>();
  private timer: unknown = undefined;
  private readonly sweepMs: number;
  private closed = false;

  constructor(
    private readonly clock: Clock,
    private readonly timers: Timers,
    opts: DeadlineSweepOptions = {},
  ) {
    const ms = opts.sweepMs ?? 10;
    if (!Number.isFinite(ms) || ms <= 0) throw new CairnError(ErrorCode.INVALID_ARGUMENT, `DeadlineSweep: sweepMs must be a positive number of milliseconds, got ${String(ms)}`);
    this.sweepMs = ms;
  }

  /** Deadlines registered and not yet fired or cancelled. */
  get size(): number {
    return this.pending.size;
  }

  /**
   * Calls `onExpire` once the monotonic clock reaches `atMs` (within `sweepMs`), unless
   * cancelled first. After `close()` nothing fires: the deadline is inert.
   */
  add(atMs: number, onExpire: () => void): Deadline {
    const entry: Entry = { atMs, onExpire };
    if (this.closed) return { cancel: () => false };
    this.pending.add(entry);
    if (this.timer === undefined) this.timer = this.timers.setInterval(() => this.sweep(), this.sweepMs);
    return {
      cancel: () => {
        const had = this.pending.delete(entry);
        if (had && this.pending.size === 0) this.stopTimer();
        return had;
      },
    };
  }

  /** Fires every deadline that has passed (the timer calls it; tests may too). */
  sweep(): void {
    const now = this.clock.monotonicMs();
    const due: Entry[] = [];
    for (const e of this.pending) if (e.atMs <= now) due.push(e);
    for (const e of due) this.pending.delete(e);
    if (this.pending.size === 0) this.stopTimer();
    // Callbacks run after the bookkeeping, so one that adds or cancels deadlines sees a consistent set.
    for (const e of due) e.onExpire();
  }

  /** Stops the timer and forgets every pending deadline without firing it (shutdown). */
  close(): void {
    this.closed = true;
    this.pending.clear();
    this.stopTimer();
  }

  private stopTimer(): void {
    if (this.timer === undefined) return;
    this.timers.clearInterval(this.timer);
    this.timer = undefined;
  }
}
