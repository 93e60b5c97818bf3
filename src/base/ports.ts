/**
 * Ports for time, randomness and logging. Pure modules (raft, store, fsm, stream) never read the
 * system clock or `Math.random`; they receive these, so the simulator can drive them. The one
 * system implementation of `Clock` and `Timers` (`systemClock`, `systemTimers`) and the pino
 * `Logger` factory (`createLogger`) live in src/platform; tests drive time with a manual
 * implementation (src/controller/testing `ManualTime`, the simulator's clock).
 */
export interface Clock {
  /** Milliseconds since the Unix epoch (wall time; may jump). */
  nowMs(): number;
  /** Milliseconds from an arbitrary origin that never goes backwards. */
  monotonicMs(): number;
}

export interface Random {
  /** A float in [0, 1). */
  next(): number;
  /** An integer in [0, n). `n` must be a positive safe integer. */
  int(n: number): number;
}

/**
 * The timer port, so tests and the simulator can drive time. Handles are opaque: clearing a
 * handle this implementation did not make (or `undefined`) is a no-op.
 */
export interface Timers {
  setInterval(fn: () => void, ms: number): unknown;
  clearInterval(handle: unknown): void;
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
  /** Yield to the event loop (between snapshot chunks), after pending I/O callbacks. */
  yield(): Promise<void>;
}

/** The logging port: the subset of pino Cairn uses (structured: fields first, then message). A pino logger fits. */
export interface Logger {
  debug(obj: object, msg: string): void;
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

/** A `Logger` that drops everything: the default where logging is optional. */
export const silentLogger: Logger = {
  debug: () => {},
  info: () => {},
  warn: () => {},
  error: () => {},
};
