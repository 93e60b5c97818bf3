import type { Clock } from '../../base/index.js';
import type { Timers } from '../../replica/index.js';

/**
 * The host's clock and timers, the runtime's defaults. (The platform module has the same for
 * the server; the controller module may not import it, and users' own controller processes
 * should not load it.)
 */
export const hostClock: Clock = {
  nowMs: () => Date.now(),
  monotonicMs: () => performance.now(),
};

export const hostTimers: Timers = {
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (h) => clearTimeout(h as ReturnType<typeof setTimeout> | undefined),
  setInterval: (fn, ms) => setInterval(fn, ms),
  clearInterval: (h) => clearInterval(h as ReturnType<typeof setInterval> | undefined),
  yield: () => new Promise<void>((resolve) => setImmediate(resolve)),
};
