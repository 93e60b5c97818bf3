import { CairnError, ErrorCode, type Clock, type Timers } from '../../base/index.js';
import { TokenBucket } from './token-bucket.js';

/** Work queue settings; every time is in milliseconds. */
export interface WorkQueueOptions {
  /** First retry delay of a key whose reconcile failed; doubles per consecutive failure. Default 100. */
  readonly backoffBaseMs?: number;
  /** The longest retry delay. Default 30,000. */
  readonly backoffCapMs?: number;
  /** Keys handed out per second on average, over all keys (the global rate limit). Default 50. */
  readonly qps?: number;
  /** Keys that may be handed out at once before `qps` applies. Default 100. */
  readonly burst?: number;
}

export const WORK_QUEUE_DEFAULTS = {
  backoffBaseMs: 100,
  backoffCapMs: 30_000,
  qps: 50,
  burst: 100,
} as const;

function positive(v: number, what: string): number {
  if (!(v > 0) || !Number.isFinite(v)) throw new CairnError(ErrorCode.INVALID_ARGUMENT, `${what} must be a positive number of milliseconds, got ${v}`);
  return v;
}

/**
 * The controller work queue (client-go's workqueue: a deduplicating queue, a delaying queue
 * and a rate limiter in one), keyed by strings:
 *
 * - **Dedupe.** A key waiting in the queue is queued once however often it is added.
 * - **One at a time per key.** A key handed out by `get()` is processing until `done(key)`;
 *   adding it meanwhile marks it dirty, and `done` queues it again once: a change that arrives
 *   during a reconcile is never lost and never reconciled concurrently with it.
 * - **Delays.** `addAfter(key, ms)` adds it once the delay has passed (the earliest pending
 *   delay of a key wins); `addRateLimited(key)` uses the key's backoff, `backoffBaseMs` doubled
 *   per consecutive failure up to `backoffCapMs`; `forget(key)` resets it (after a success).
 *   A plain `add` is not delayed by a key's backoff (an event is new information; client-go
 *   does the same) but still counts against the global rate.
 * - **Global rate.** `get()` hands out keys at most `qps` per second on average with bursts of
 *   `burst` (a token bucket), over all keys.
 * - **Time** comes from the injected clock and timers only.
 */
export class WorkQueue {
  private readonly queue: string[] = [];
  /** Keys that need a reconcile: queued, or processing and added again. */
  private readonly dirty = new Set<string>();
  private readonly processing = new Set<string>();
  private readonly delayed = new Map<string, { readonly atMs: number; readonly handle: unknown }>();
  private readonly failuresByKey = new Map<string, number>();
  private readonly getters: Array<(key: string | undefined) => void> = [];
  private readonly tokenWaits = new Set<{ handle: unknown; resolve: () => void }>();
  private readonly bucket: TokenBucket;
  private readonly baseMs: number;
  private readonly capMs: number;
  private shut = false;

  constructor(
    private readonly clock: Clock,
    private readonly timers: Timers,
    opts: WorkQueueOptions = {},
  ) {
    this.baseMs = positive(opts.backoffBaseMs ?? WORK_QUEUE_DEFAULTS.backoffBaseMs, 'backoffBaseMs');
    this.capMs = positive(opts.backoffCapMs ?? WORK_QUEUE_DEFAULTS.backoffCapMs, 'backoffCapMs');
    if (this.capMs < this.baseMs) throw new CairnError(ErrorCode.INVALID_ARGUMENT, `backoffCapMs (${this.capMs}) must be at least backoffBaseMs (${this.baseMs})`);
    this.bucket = new TokenBucket(opts.qps ?? WORK_QUEUE_DEFAULTS.qps, opts.burst ?? WORK_QUEUE_DEFAULTS.burst, clock);
  }

  /** Keys ready to be handed out (the queue depth). */
  get length(): number {
    return this.queue.length;
  }

  /** Keys waiting for a delay (requeueAfter or backoff) to pass. */
  get waiting(): number {
    return this.delayed.size;
  }

  /** Keys handed out and not yet done. */
  get active(): number {
    return this.processing.size;
  }

  get isShutDown(): boolean {
    return this.shut;
  }

  /** Queues `key` now (once, however often it is added before it is handed out). */
  add(key: string): void {
    if (this.shut || this.dirty.has(key)) return;
    this.dirty.add(key);
    if (this.processing.has(key)) return; // queued again by done()
    this.push(key);
  }

  /** Queues `key` after `ms`. A key with an earlier pending delay keeps it. */
  addAfter(key: string, ms: number): void {
    if (this.shut) return;
    if (!(ms > 0)) {
      this.add(key);
      return;
    }
    const atMs = this.clock.monotonicMs() + ms;
    const prev = this.delayed.get(key);
    if (prev !== undefined) {
      if (prev.atMs <= atMs) return;
      this.timers.clearTimeout(prev.handle);
    }
    const handle = this.timers.setTimeout(() => {
      this.delayed.delete(key);
      this.add(key);
    }, ms);
    this.delayed.set(key, { atMs, handle });
  }

  /** Queues `key` after its backoff and counts a failure; returns the delay used. */
  addRateLimited(key: string): number {
    const ms = this.backoffMs(key);
    this.failuresByKey.set(key, this.failures(key) + 1);
    this.addAfter(key, ms);
    return ms;
  }

  /** The delay the next `addRateLimited(key)` would use. */
  backoffMs(key: string): number {
    // 2^n overflows to Infinity for large n, which min() turns into the cap.
    return Math.min(this.capMs, this.baseMs * 2 ** this.failures(key));
  }

  /** Consecutive failures counted for `key`. */
  failures(key: string): number {
    return this.failuresByKey.get(key) ?? 0;
  }

  /** Resets the key's backoff (its reconcile succeeded). */
  forget(key: string): void {
    this.failuresByKey.delete(key);
  }

  /**
   * The next key to work on, once the global rate allows; the key is processing until
   * `done(key)`. Resolves undefined once the queue is shut down.
   */
  async get(): Promise<string | undefined> {
    if (this.shut) return undefined;
    let key = this.queue.shift();
    if (key !== undefined) this.take(key);
    // push() takes the key for a waiting getter in the same turn it hands it over.
    else key = await new Promise<string | undefined>((resolve) => this.getters.push(resolve));
    if (key === undefined || this.shut) return undefined;
    const waitMs = this.bucket.reserve();
    if (waitMs > 0) await this.sleep(waitMs);
    return this.shut ? undefined : key;
  }

  /** The work on `key` is finished; a key added meanwhile is queued again. */
  done(key: string): void {
    if (!this.processing.delete(key)) return;
    if (!this.shut && this.dirty.has(key)) this.push(key);
  }

  /** Drops every key, cancels the delays and wakes every waiting `get()` with undefined. Final. */
  shutDown(): void {
    if (this.shut) return;
    this.shut = true;
    for (const d of this.delayed.values()) this.timers.clearTimeout(d.handle);
    this.delayed.clear();
    this.queue.length = 0;
    this.dirty.clear();
    this.failuresByKey.clear();
    for (const g of this.getters.splice(0)) g(undefined);
    for (const w of [...this.tokenWaits]) {
      this.timers.clearTimeout(w.handle);
      w.resolve();
    }
    this.tokenWaits.clear();
  }

  private push(key: string): void {
    const g = this.getters.shift();
    if (g === undefined) {
      this.queue.push(key);
      return;
    }
    this.take(key);
    g(key);
  }

  /** Queued -> processing, synchronously (an add in between must see the key as processing). */
  private take(key: string): void {
    this.dirty.delete(key);
    this.processing.add(key);
  }

  private sleep(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const w = {
        handle: undefined as unknown,
        resolve: () => {
          this.tokenWaits.delete(w);
          resolve();
        },
      };
      w.handle = this.timers.setTimeout(() => w.resolve(), ms);
      this.tokenWaits.add(w);
    });
  }
}
