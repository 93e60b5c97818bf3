/**
 * A safety or liveness violation found by the simulator. Thrown from wherever it is detected
 * (the invariant checker, the disk model, the driver) and caught by the simulation loop, which
 * stops the run and reports it with the seed and the step at which it happened.
 */
export type ViolationKind =
  /** Two leaders in one term (Raft §5.2). */
  | 'election-safety'
  /** Two logs hold the same (index, term) with different contents or predecessors (§5.3). */
  | 'log-matching'
  /** A new leader lacks an entry committed in an earlier term (§5.4). */
  | 'leader-completeness'
  /** Two nodes applied different entries (or reached different states) at one index (§5.4.3). */
  | 'state-machine-safety'
  /** The client history has no linearization (includes lost acknowledged writes). */
  | 'linearizability'
  /** After faults stopped, no leader was elected or no write committed within the budget. */
  | 'liveness'
  /**
   * More messages in flight than a healthy cluster ever has: the core amplifies traffic (some
   * message draws more than one reply, so duplicates and retransmissions multiply). Stops the
   * run before it exhausts memory.
   */
  | 'message-storm'
  /** The core handed the driver something the Ready contract forbids (gap in the log, ...). */
  | 'ready-contract'
  /** A node applied an entry that was not yet durable on a quorum (the driver's order). */
  | 'apply-before-commit'
  /** A client was answered for a write whose entry was not committed (the driver's order). */
  | 'answer-before-commit'
  /** After a crash, a node's disk no longer holds an entry it had applied (un-applied). */
  | 'lost-applied-entry'
  /** A node's event stream skipped, repeated or reordered a change. */
  | 'watch-stream'
  /** An exception escaped the core or the simulator (an assertion failed). */
  | 'exception';

export class SimViolation extends Error {
  override readonly name = 'SimViolation';
  constructor(
    readonly kind: ViolationKind,
    message: string,
  ) {
    super(`${kind}: ${message}`);
  }
}
