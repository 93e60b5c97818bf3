import type { Timers } from '../base/index.js';

type TimeoutHandle = ReturnType<typeof setTimeout>;
type IntervalHandle = ReturnType<typeof setInterval>;

/**
 * The replica's `Timers` port on the Node event loop. Handles are Node's own timer objects;
 * clearing anything else (undefined, a handle from another implementation) is a no-op, as
 * with the globals.
 */
export class SystemTimers implements Timers {
  setTimeout(fn: () => void, ms: number): unknown {
    return setTimeout(fn, ms);
  }

  clearTimeout(handle: unknown): void {
    clearTimeout(handle as TimeoutHandle | undefined);
  }

  setInterval(fn: () => void, ms: number): unknown {
    return setInterval(fn, ms);
  }

  clearInterval(handle: unknown): void {
    clearInterval(handle as IntervalHandle | undefined);
  }

  /** Resolves on the next turn of the event loop, after pending I/O callbacks. */
  yield(): Promise<void> {
    return new Promise<void>((resolve) => setImmediate(resolve));
  }
}

export const systemTimers: Timers = new SystemTimers();
