import type { Clock } from '../base/index.js';

/** The host's clocks: wall time from `Date.now`, monotonic time from `performance.now`. */
export class SystemClock implements Clock {
  nowMs(): number {
    return Date.now();
  }

  monotonicMs(): number {
    return performance.now();
  }
}

export const systemClock: Clock = new SystemClock();
