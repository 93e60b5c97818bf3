/** The timer port, so tests and the simulator can drive time. */
export interface Timers {
  setInterval(fn: () => void, ms: number): unknown;
  clearInterval(handle: unknown): void;
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
  /** Yield to the event loop (between snapshot chunks). */
  yield(): Promise<void>;
}
