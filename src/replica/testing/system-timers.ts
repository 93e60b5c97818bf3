import type { Timers } from '../timers.js';

/** Timers on the host event loop, for in-process tests of the replica. */
export const systemTimers: Timers = {
  setInterval: (fn, ms) => setInterval(fn, ms),
  clearInterval: (h) => clearInterval(h as ReturnType<typeof setInterval>),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (h) => clearTimeout(h as ReturnType<typeof setTimeout>),
  yield: () => new Promise<void>((resolve) => setImmediate(resolve)),
};
