import { hostname } from 'node:os';
import { CairnError, ErrorCode, silentLogger, type Clock, type Logger, type Timers } from '../../base/index.js';
import { LEASE_TYPE, type LeaseData } from '../../api/index.js';
import { isCairnClientError, isOutcomeUnknown, type CairnClient, type Resource } from '../../client/index.js';

/** What the lock needs of a client (a CairnClient). */
export type LeaseClient = Pick<CairnClient, 'read' | 'write'>;

/** Lock timings, in milliseconds (client-go leader election's, with the same defaults). */
export interface LockOptions {
  /** Candidates take the lock once they have seen no renewal for this long. Default 15,000. */
  readonly leaseDurationMs?: number;
  /** The holder gives up (aborts `run`) when it has not renewed for this long. Less than leaseDurationMs. Default 10,000. */
  readonly renewDeadlineMs?: number;
  /** How often the holder renews and candidates look. Less than renewDeadlineMs. Default 2,000. */
  readonly retryPeriodMs?: number;
  /** The host's is src/platform's `systemClock` (this module may not load platform; the process wires it). */
  readonly clock: Clock;
  /** The host's is src/platform's `systemTimers`. */
  readonly timers: Timers;
  /** pino fits. Default: silent. */
  readonly logger?: Logger;
  /** Told true on acquiring the lock and false on losing or releasing it. */
  readonly onChange?: (holding: boolean) => void;
}

export const LOCK_DEFAULTS = { leaseDurationMs: 15_000, renewDeadlineMs: 10_000, retryPeriodMs: 2_000 } as const;

/** A running lock: campaigns, holds, renews; `stop()` ends it. */
export interface LockHandle {
  readonly lockName: string;
  readonly identity: string;
  /** Whether this process holds the lock now (and `run` runs). */
  isHolder(): boolean;
  /** Times this process acquired the lock. */
  readonly acquisitions: number;
  /** Aborts `run` (and awaits it), releases the lock if held so another takes over at once, and stops campaigning. */
  stop(): Promise<void>;
}

/** An identity unique to this process: `host-pid-random`. */
export function lockIdentity(): string {
  return `${hostname()}-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;
}

const DNS_LABEL = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;

/**
 * Runs `run` in at most one process at a time: the holder of the lock resource
 * `cairn.v1.Lease/<lockName>` (cluster-scoped), taken and renewed by compare-and-swap on its
 * version (client-go's leaderelection with a Lease lock).
 *
 * - A candidate reads the lease every `retryPeriodMs`. It takes a lease that is absent
 *   (create-only write), released (empty holder) or its own; otherwise it remembers the version
 *   and when it first saw it, on ITS OWN monotonic clock, and takes the lease (CAS on that
 *   version) only once the version has not changed for the lease's `leaseDurationMs`. No clock
 *   is compared with another machine's: skew does not matter, only clock rates over a lease
 *   duration (see src/controller/README.md).
 * - The holder renews (CAS) every `retryPeriodMs`. If it has not renewed for `renewDeadlineMs`,
 *   counted from the start of its last successful renewal, it aborts `run`'s signal at once,
 *   even while a renewal is still in flight. A candidate's clock for that renewal started after
 *   it was committed, so it cannot take over before `leaseDurationMs` after the same start:
 *   `run` has `leaseDurationMs - renewDeadlineMs` to stop before anyone else starts.
 * - `run(signal)` is called on each acquisition. The lock is held until it is lost or
 *   `stop()` is called, whether or not `run` has returned (it may start work and return). If it
 *   throws, the lock is released and campaigning resumes. It is never called again before the
 *   previous call has settled.
 */
export function runWithLock(client: LeaseClient, lockName: string, identity: string, run: (signal: AbortSignal) => Promise<void> | void, opts: LockOptions): LockHandle {
  const lock = new LeaseLock(client, lockName, identity, run, opts);
  lock.start();
  return lock;
}

class LeaseLock implements LockHandle {
  private readonly leaseMs: number;
  private readonly deadlineMs: number;
  private readonly retryMs: number;
  private readonly clock: Clock;
  private readonly timers: Timers;
  private readonly logger: Logger;
  private readonly ref: { readonly type: string; readonly name: string };
  private stopping = false;
  private loop: Promise<void> | undefined;
  private wakeUp: (() => void) | undefined;
  private holding = false;
  private count = 0;
  /** The lease's version as this holder last wrote (or adopted) it. */
  private version = '';
  /** The lease as this holder last wrote it. */
  private lease: LeaseData | undefined;
  /** Monotonic start of the last successful write of the lease by this holder. */
  private renewedAtMs = 0;
  /** A candidate's view of the other holder's lease: its version and when it was first seen. */
  private observed: { readonly version: string; readonly atMs: number } | undefined;

  constructor(
    private readonly client: LeaseClient,
    readonly lockName: string,
    readonly identity: string,
    private readonly run: (signal: AbortSignal) => Promise<void> | void,
    private readonly opts: LockOptions,
  ) {
    if (!DNS_LABEL.test(lockName)) throw new CairnError(ErrorCode.INVALID_ARGUMENT, `a lock name must be a lowercase DNS label, got ${JSON.stringify(lockName)}`);
    if (typeof identity !== 'string' || identity === '' || identity.length > 253) throw new CairnError(ErrorCode.INVALID_ARGUMENT, 'a lock identity must be a non-empty string of at most 253 characters, unique per process (lockIdentity())');
    this.leaseMs = opts.leaseDurationMs ?? LOCK_DEFAULTS.leaseDurationMs;
    this.deadlineMs = opts.renewDeadlineMs ?? LOCK_DEFAULTS.renewDeadlineMs;
    this.retryMs = opts.retryPeriodMs ?? LOCK_DEFAULTS.retryPeriodMs;
    if (!Number.isSafeInteger(this.leaseMs) || !Number.isSafeInteger(this.deadlineMs) || !Number.isSafeInteger(this.retryMs) || !(this.retryMs > 0 && this.retryMs < this.deadlineMs && this.deadlineMs < this.leaseMs)) {
      throw new CairnError(
        ErrorCode.INVALID_ARGUMENT,
        `lock timings must be whole milliseconds with 0 < retryPeriodMs < renewDeadlineMs < leaseDurationMs, got ${this.retryMs} < ${this.deadlineMs} < ${this.leaseMs}`,
      );
    }
    this.clock = opts.clock;
    this.timers = opts.timers;
    this.logger = opts.logger ?? silentLogger;
    this.ref = { type: LEASE_TYPE, name: lockName };
  }

  get acquisitions(): number {
    return this.count;
  }

  isHolder(): boolean {
    return this.holding;
  }

  start(): void {
    this.loop ??= this.campaign();
  }

  async stop(): Promise<void> {
    this.stopping = true;
    this.wake();
    await this.loop;
  }

  private async campaign(): Promise<void> {
    while (!this.stopping) {
      let acquired = false;
      try {
        acquired = await this.tryAcquire();
      } catch (e) {
        this.logger.debug({ lock: this.lockName, identity: this.identity, err: errText(e) }, 'could not read or take the lock; trying again');
      }
      // Taken just as stop() was called: hand it straight back rather than start the work.
      if (acquired && this.stopping) await this.release();
      else if (acquired) await this.hold();
      if (this.stopping) break;
      await this.sleep(this.retryMs);
    }
  }

  /** One look at the lease; takes it if it is free or expired. */
  private async tryAcquire(): Promise<boolean> {
    let cur: Resource<LeaseData> | undefined;
    try {
      cur = (await this.client.read<LeaseData>(this.ref, { timeoutMs: this.retryMs })).resource;
    } catch (e) {
      if (!isCairnClientError(e, 'NOT_FOUND')) throw e;
    }
    if (this.stopping) return false;
    const now = this.clock.monotonicMs();
    if (cur === undefined) return this.take('0', undefined);
    const d = cur.data;
    if (d.holder !== '' && d.holder !== this.identity) {
      if (this.observed?.version !== cur.version) {
        // A new renewal (or a first look): the holder's clock restarts here, on ours.
        this.observed = { version: cur.version, atMs: now };
        return false;
      }
      if (now - this.observed.atMs < d.leaseDurationMs) return false;
      this.logger.info({ lock: this.lockName, identity: this.identity, holder: d.holder, silentMs: Math.round(now - this.observed.atMs), leaseDurationMs: d.leaseDurationMs }, "the lock's holder stopped renewing it; taking it over");
    }
    return this.take(cur.version, d);
  }

  /** CAS-writes the lease with this process as holder. */
  private async take(version: string, prev: LeaseData | undefined): Promise<boolean> {
    const startedAt = this.clock.monotonicMs();
    const nowIso = new Date(this.clock.nowMs()).toISOString();
    const lease: LeaseData = {
      holder: this.identity,
      leaseDurationMs: this.leaseMs,
      acquireTime: nowIso,
      renewTime: nowIso,
      transitions: (prev?.transitions ?? 0) + (prev !== undefined && prev.holder !== this.identity ? 1 : 0),
    };
    try {
      const r = await this.client.write<LeaseData>(this.ref, { data: lease, version }, { timeoutMs: this.retryMs });
      this.version = r.version;
      this.lease = lease;
      this.renewedAtMs = startedAt;
      this.observed = undefined;
      return true;
    } catch (e) {
      // CAS_FAILED: someone else renewed or took it first. Outcome unknown: the next read tells.
      if (isCairnClientError(e, 'CAS_FAILED') || isOutcomeUnknown(e)) {
        this.observed = undefined;
        return false;
      }
      throw e;
    }
  }

  /** Holds the lock: runs `run`, renews, until lost, stopped or `run` fails. */
  private async hold(): Promise<void> {
    const ac = new AbortController();
    let lostWhy: string | undefined;
    let runFailed = false;
    this.holding = true;
    this.count++;
    this.logger.info({ lock: this.lockName, identity: this.identity, version: this.version }, 'acquired the lock');
    this.opts.onChange?.(true);

    let deadline: unknown;
    const lose = (why: string): void => {
      if (lostWhy !== undefined) return;
      lostWhy = why;
      ac.abort(new CairnError(ErrorCode.UNAVAILABLE, `lock ${this.lockName} lost: ${why}`));
      this.wake();
    };
    const arm = (): void => {
      this.timers.clearTimeout(deadline);
      const leftMs = this.renewedAtMs + this.deadlineMs - this.clock.monotonicMs();
      deadline = this.timers.setTimeout(() => lose(`not renewed for ${this.deadlineMs} ms`), Math.max(0, leftMs));
    };
    arm();
    const running = (async () => this.run(ac.signal))().then(
      () => undefined,
      (e: unknown) => {
        runFailed = true;
        this.logger.error({ lock: this.lockName, identity: this.identity, err: errText(e) }, 'the work run under the lock failed; releasing the lock');
        this.wake();
      },
    );

    while (!this.stopping && lostWhy === undefined && !runFailed) {
      await this.sleep(this.retryMs);
      if (this.stopping || lostWhy !== undefined || runFailed) break;
      const lostTo = await this.renew(ac.signal);
      if (lostTo !== undefined) lose(`${lostTo} holds it now`);
      else if (lostWhy === undefined) arm();
    }
    this.timers.clearTimeout(deadline);
    ac.abort(new CairnError(ErrorCode.UNAVAILABLE, `lock ${this.lockName} ${lostWhy !== undefined ? `lost: ${lostWhy}` : 'released'}`));
    await running;
    this.holding = false;
    if (lostWhy !== undefined) this.logger.warn({ lock: this.lockName, identity: this.identity, why: lostWhy }, 'lost the lock; stopped the work run under it');
    else await this.release();
    this.opts.onChange?.(false);
  }

  /** One renewal. Returns the other holder's identity if the lease was taken from us. */
  private async renew(signal: AbortSignal): Promise<string | undefined> {
    const startedAt = this.clock.monotonicMs();
    const lease: LeaseData = { ...(this.lease as LeaseData), renewTime: new Date(this.clock.nowMs()).toISOString() };
    try {
      const r = await this.client.write<LeaseData>(this.ref, { data: lease, version: this.version }, { signal, timeoutMs: this.deadlineMs });
      this.version = r.version;
      this.lease = lease;
      this.renewedAtMs = startedAt;
      return undefined;
    } catch (e) {
      if (signal.aborted) return undefined;
      if (!isCairnClientError(e, 'CAS_FAILED') && !isCairnClientError(e, 'NOT_FOUND') && !isOutcomeUnknown(e)) {
        this.logger.debug({ lock: this.lockName, identity: this.identity, err: errText(e) }, 'renewing the lock failed; retrying');
        return undefined;
      }
    }
    // The version moved (or the write's fate is unknown): whose is the lease now?
    try {
      const cur = (await this.client.read<LeaseData>(this.ref, { signal, timeoutMs: this.retryMs })).resource;
      if (cur.data.holder !== this.identity) return cur.data.holder === '' ? '(nobody)' : cur.data.holder;
      // Still ours (an earlier renewal of unknown outcome went through): carry on from it.
      // It earns no credit towards the deadline: when it was committed is unknown.
      this.version = cur.version;
      return undefined;
    } catch (e) {
      if (isCairnClientError(e, 'NOT_FOUND')) return '(deleted)';
      return undefined;
    }
  }

  /** Hands the lock back (empty holder), so a candidate takes it at its next look. Best effort. */
  private async release(): Promise<void> {
    try {
      const r = await this.client.write<LeaseData>(this.ref, { data: { ...(this.lease as LeaseData), holder: '', renewTime: new Date(this.clock.nowMs()).toISOString() }, version: this.version }, { timeoutMs: this.retryMs });
      this.version = r.version;
      this.logger.info({ lock: this.lockName, identity: this.identity }, 'released the lock');
    } catch (e) {
      this.logger.warn({ lock: this.lockName, identity: this.identity, err: errText(e) }, `could not release the lock; others take it after ${this.leaseMs} ms`);
    }
  }

  private sleep(ms: number): Promise<void> {
    if (this.stopping) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const handle = this.timers.setTimeout(() => done(), ms);
      const done = (): void => {
        this.timers.clearTimeout(handle);
        this.wakeUp = undefined;
        resolve();
      };
      this.wakeUp = done;
    });
  }

  private wake(): void {
    this.wakeUp?.();
  }
}

function errText(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
