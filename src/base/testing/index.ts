import type { Clock, Timers } from '../ports.js';

/**
 * Real time for in-process tests of the modules below src/platform that may not import it
 * (replica, api, controller): the same calls as platform's `systemClock` and `systemTimers`,
 * which are the one implementation shipped code uses. Test-only; nothing shipped imports this.
 */
export const realClock: Clock = {
  nowMs: () => Date.now(),
  monotonicMs: () => performance.now(),
};

export const realTimers: Timers = {
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (h) => clearTimeout(h as ReturnType<typeof setTimeout> | undefined),
  setInterval: (fn, ms) => setInterval(fn, ms),
  clearInterval: (h) => clearInterval(h as ReturnType<typeof setInterval> | undefined),
  yield: () => new Promise<void>((resolve) => setImmediate(resolve)),
};
export { ManualTime } from './manual-time.js';
