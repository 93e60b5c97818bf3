/**
 * Ports for time and randomness. Pure modules (raft, store, fsm, stream) never read the
 * system clock or `Math.random`; they receive these, so the simulator can drive them.
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
