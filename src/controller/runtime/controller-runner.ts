import { CairnError, ErrorCode, type Clock, type Logger, type Timers } from '../../base/index.js';
import type { CairnClient, Informer } from '../../client/index.js';
import type { ControllerMetrics } from './metrics.js';
import type { ControllerSpec, ReconcileContext, ReconcileResult } from './types.js';
import { WorkQueue, type WorkQueueOptions } from './work-queue.js';

export interface ControllerRunnerOptions {
  readonly client: CairnClient;
  /** The informer of a type the controller manages or watches (the manager's shared caches). */
  readonly caches: (type: string) => Informer<unknown> | undefined;
  readonly clock: Clock;
  readonly timers: Timers;
  readonly logger: Logger;
  readonly metrics?: ControllerMetrics | undefined;
  readonly queue?: WorkQueueOptions | undefined;
  /** Keys reconciled at once; the spec's `workers` wins. Default 1. */
  readonly workers?: number | undefined;
  /** Every cached key of the managed type is queued this often (ms); the spec's `resyncMs` wins. Default 60,000. */
  readonly resyncMs?: number | undefined;
}

export const RUNNER_DEFAULTS = {
  /**
   * One worker: reconciles of different keys run one after another. Controllers that place or
   * allocate across keys (the topic scheduler) then never race themselves on the cache; raise
   * `workers` for controllers whose keys are independent and whose reconciles wait on I/O.
   */
  workers: 1,
  resyncMs: 60_000,
} as const;

/** Reconciles that take longer than this are logged (they hold up a worker). */
const SLOW_RECONCILE_MS = 10_000;

/**
 * Runs one controller: its work queue, `workers` loops that take keys and call `reconcile`,
 * the periodic resync, metrics and logs. Keys can be queued before `start()` (the manager does
 * so while the caches fill); nothing is reconciled until `start()`, which the manager calls
 * once every cache has synced. `stop()` aborts the context's signal, drops the queue and waits
 * for the reconciles in flight.
 *
 * After a reconcile: thrown -> the key is retried after its backoff (`addRateLimited`);
 * `requeueAfterMs` -> its backoff is reset and it is queued again after that delay; otherwise
 * its backoff is reset.
 */
export class ControllerRunner {
  readonly queue: WorkQueue;
  private readonly abort = new AbortController();
  private readonly workerCount: number;
  private readonly resyncMs: number;
  private readonly ctx: ReconcileContext;
  private readonly types: ReadonlySet<string>;
  private workers: Array<Promise<void>> = [];
  private resyncTimer: unknown;
  private untrack: (() => void) | undefined;
  private state: 'new' | 'running' | 'stopped' = 'new';
  private reconciles = 0;

  constructor(
    readonly spec: ControllerSpec,
    private readonly opts: ControllerRunnerOptions,
  ) {
    this.workerCount = spec.workers ?? opts.workers ?? RUNNER_DEFAULTS.workers;
    if (!Number.isSafeInteger(this.workerCount) || this.workerCount < 1) throw new CairnError(ErrorCode.INVALID_ARGUMENT, `controller ${spec.name}: workers must be a positive integer, got ${this.workerCount}`);
    this.resyncMs = spec.resyncMs ?? opts.resyncMs ?? RUNNER_DEFAULTS.resyncMs;
    if (!(this.resyncMs > 0)) throw new CairnError(ErrorCode.INVALID_ARGUMENT, `controller ${spec.name}: resyncMs must be a positive number of milliseconds, got ${this.resyncMs}`);
    this.queue = new WorkQueue(opts.clock, opts.timers, opts.queue);
    this.types = new Set([spec.managedType, ...(spec.watches ?? []).map((w) => w.type)]);
    this.ctx = {
      client: opts.client,
      cache: <D>(type: string): Informer<D> => this.cache<D>(type),
      nowMs: () => opts.clock.nowMs(),
      signal: this.abort.signal,
      controllerName: spec.name,
      logger: opts.logger,
    };
  }

  get name(): string {
    return this.spec.name;
  }

  get running(): boolean {
    return this.state === 'running';
  }

  /** Reconciles finished so far (any outcome). */
  get reconcileCount(): number {
    return this.reconciles;
  }

  /** The context every reconcile gets. */
  get context(): ReconcileContext {
    return this.ctx;
  }

  /** Queues a key (deduplicated); it is reconciled once the runner runs. */
  enqueue(key: string): void {
    this.queue.add(key);
  }

  /** Queues every cached key of the managed type. */
  resync(): void {
    const inf = this.opts.caches(this.spec.managedType);
    if (inf === undefined) return;
    for (const key of inf.keys()) this.queue.add(key);
  }

  /** Starts the workers and the resync timer. */
  start(): void {
    if (this.state !== 'new') return;
    this.state = 'running';
    this.untrack = this.opts.metrics?.track(this.spec.name, () => ({ length: this.queue.length, waiting: this.queue.waiting, active: this.queue.active }));
    this.resyncTimer = this.opts.timers.setInterval(() => this.resync(), this.resyncMs);
    for (let i = 0; i < this.workerCount; i++) this.workers.push(this.work(i));
    this.opts.logger.info({ controller: this.spec.name, workers: this.workerCount, queued: this.queue.length, resyncMs: this.resyncMs }, 'controller started');
  }

  /** Aborts the context's signal, drops every queued key and waits for the reconciles in flight. Idempotent. */
  async stop(): Promise<void> {
    if (this.state === 'stopped') return;
    const wasRunning = this.state === 'running';
    this.state = 'stopped';
    this.abort.abort(new CairnError(ErrorCode.UNAVAILABLE, `controller ${this.spec.name} stopped`));
    this.opts.timers.clearInterval(this.resyncTimer);
    this.queue.shutDown();
    await Promise.all(this.workers);
    this.workers = [];
    this.untrack?.();
    if (wasRunning) this.opts.logger.info({ controller: this.spec.name, reconciles: this.reconciles }, 'controller stopped');
  }

  private cache<D>(type: string): Informer<D> {
    if (!this.types.has(type)) {
      throw new CairnError(ErrorCode.INVALID_ARGUMENT, `controller ${this.spec.name} has no cache of ${type}: it manages ${this.spec.managedType} and watches ${[...this.types].filter((t) => t !== this.spec.managedType).join(', ') || 'nothing else'}`);
    }
    const inf = this.opts.caches(type);
    if (inf === undefined) throw new CairnError(ErrorCode.UNAVAILABLE, `controller ${this.spec.name}: the cache of ${type} is not running`);
    return inf as Informer<D>;
  }

  private async work(worker: number): Promise<void> {
    for (;;) {
      const key = await this.queue.get();
      if (key === undefined) return;
      try {
        await this.reconcileOne(key, worker);
      } finally {
        this.queue.done(key);
      }
    }
  }

  private async reconcileOne(key: string, worker: number): Promise<void> {
    const name = this.spec.name;
    const started = this.opts.clock.monotonicMs();
    let result: ReconcileResult | void = undefined;
    let failure: unknown;
    let failed = false;
    try {
      result = await this.spec.reconcile(key, this.ctx);
    } catch (e) {
      failed = true;
      failure = e;
    }
    const ms = this.opts.clock.monotonicMs() - started;
    this.reconciles++;
    if (ms > SLOW_RECONCILE_MS) this.opts.logger.warn({ controller: name, key, ms }, 'a reconcile was slow');
    if (this.abort.signal.aborted) return; // stopping: the queue is gone, and errors are expected
    if (failed) {
      const failures = this.queue.failures(key) + 1;
      const delayMs = this.queue.addRateLimited(key);
      this.opts.metrics?.observe(name, ms / 1000, 'error');
      const err = failure instanceof Error ? failure.message : String(failure);
      const code = (failure as { code?: unknown } | null)?.code;
      this.opts.logger.warn({ controller: name, key, worker, failures, retryInMs: delayMs, err, ...(typeof code === 'string' ? { code } : {}) }, 'reconcile failed; retrying after backoff');
      return;
    }
    this.queue.forget(key);
    const after = result?.requeueAfterMs;
    if (after !== undefined && after >= 0) {
      this.queue.addAfter(key, after);
      this.opts.metrics?.observe(name, ms / 1000, 'requeue');
    } else {
      this.opts.metrics?.observe(name, ms / 1000, 'success');
    }
    this.opts.logger.debug({ controller: name, key, worker, ms, ...(after !== undefined ? { requeueAfterMs: after } : {}) }, 'reconciled');
  }
}
