import { silentLogger, type Logger } from '../../base/index.js';

/** Something started while leading, stopped when leadership is lost. */
export interface Stoppable {
  stop(): Promise<void> | void;
}

/**
 * Runs something only while this process leads: `set(true)` starts it, `set(false)` stops it.
 * Transitions never overlap: a start completes before the stop that follows it begins, and a
 * stop completes (reconciles aborted and awaited, caches closed) before the next start. Flaps
 * that end where they began do nothing; only the latest wish counts.
 *
 * Built-in controllers use it on each node, driven by Raft role changes (the agent's
 * `onRoleChange`); out-of-process ones through `runWithLock`.
 */
export class LeaderGate {
  private wanted = false;
  private current: Stoppable | undefined;
  private busy: Promise<void> | undefined;
  private closed = false;
  private starts = 0;

  constructor(
    private readonly start: () => Promise<Stoppable> | Stoppable,
    private readonly logger: Logger = silentLogger,
    private readonly what = 'controllers',
  ) {}

  /** Whether the thing runs now. */
  get running(): boolean {
    return this.current !== undefined;
  }

  /** How many times it was started. */
  get startCount(): number {
    return this.starts;
  }

  /** This process leads (true) or not (false). */
  set(leading: boolean): void {
    if (this.closed) return;
    this.wanted = leading;
    this.busy ??= this.converge();
  }

  /** Resolves once the running state matches the latest `set` (for tests and shutdown). */
  async settled(): Promise<void> {
    while (this.busy !== undefined) await this.busy;
  }

  /** Stops it for good. */
  async close(): Promise<void> {
    this.closed = true;
    this.wanted = false;
    this.busy ??= this.converge();
    await this.settled();
  }

  private async converge(): Promise<void> {
    // Not synchronously: `busy` must be assigned before the finally below clears it.
    await Promise.resolve();
    try {
      for (;;) {
        if (this.wanted && this.current === undefined) {
          this.logger.info({ what: this.what }, 'leading: starting');
          try {
            this.current = await this.start();
            this.starts++;
          } catch (e) {
            // Leadership stays; nothing runs. The next change of role tries again.
            this.logger.error({ what: this.what, err: e instanceof Error ? e.message : String(e) }, 'could not start on becoming leader');
            return;
          }
        } else if (!this.wanted && this.current !== undefined) {
          const c = this.current;
          this.logger.info({ what: this.what }, 'not leading: stopping');
          try {
            await c.stop();
          } catch (e) {
            this.logger.error({ what: this.what, err: e instanceof Error ? e.message : String(e) }, 'stopping on loss of leadership failed');
          }
          this.current = undefined;
        } else return;
      }
    } finally {
      this.busy = undefined;
    }
  }
}

/**
 * Runs `start()` whenever `onLeadership` reports leadership and `stop(what start returned)`
 * when it reports its loss (a LeaderGate). `onLeadership(listener)` subscribes and returns the
 * unsubscribe function. `close()` unsubscribes and stops.
 */
export function runWhileLeader<T>(
  onLeadership: (listener: (leading: boolean) => void) => () => void,
  start: () => Promise<T> | T,
  stop: (running: T) => Promise<void> | void,
  logger?: Logger,
): { readonly gate: LeaderGate; close(): Promise<void> } {
  const gate = new LeaderGate(
    async () => {
      const running = await start();
      return { stop: () => stop(running) };
    },
    logger,
  );
  const unsubscribe = onLeadership((leading) => gate.set(leading));
  return {
    gate,
    close: async () => {
      unsubscribe();
      await gate.close();
    },
  };
}
