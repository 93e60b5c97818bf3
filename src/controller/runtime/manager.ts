import type * as prom from 'prom-client';
import { CairnError, ErrorCode, silentLogger, type Clock, type Logger, type Timers } from '../../base/index.js';
import { keyOf, type CairnClient, type Informer, type Resource, type SharedInformerFactory, type WatchOptions } from '../../client/index.js';
import { ControllerRunner, RUNNER_DEFAULTS } from './controller-runner.js';
import { controllerMetrics, type ControllerMetrics } from './metrics.js';
import { cacheSpecFor, probeScope } from './scope.js';
import type { ControllerSpec, TypeScope } from './types.js';
import type { WorkQueueOptions } from './work-queue.js';

export interface ControllerManagerOptions {
  /** The client the caches watch through and reconciles write through (`ctx.client`). */
  readonly client: CairnClient;
  readonly controllers: readonly ControllerSpec[];
  /** The host's is src/platform's `systemClock` (this module may not load platform; the process wires it). */
  readonly clock: Clock;
  /** The host's is src/platform's `systemTimers`. */
  readonly timers: Timers;
  /** pino fits. Default: silent. */
  readonly logger?: Logger;
  /** The metrics to feed; or `registry` to feed `controllerMetrics(registry)`. Default: none. */
  readonly metrics?: ControllerMetrics;
  readonly registry?: prom.Registry;
  /** Defaults for every controller (a spec's own `workers`/`resyncMs` win). */
  readonly workers?: number;
  readonly resyncMs?: number;
  readonly queue?: WorkQueueOptions;
  /** The caches' watch stream (reconnect timings, buffer). */
  readonly watch?: Omit<WatchOptions, 'signal' | 'logger'>;
  /** After the caches fail (their stream ended for good, or a type's scope could not be learnt): retry after this, doubling. Default 1,000. */
  readonly restartBaseMs?: number;
  /** Default 30,000. */
  readonly restartCapMs?: number;
}

interface Session {
  readonly factory: SharedInformerFactory;
  readonly informers: ReadonlyMap<string, Informer<unknown>>;
  readonly runners: readonly ControllerRunner[];
}

/** Ends when any cache ends: closed (stop) or failed. */
const NEVER_REACHED = Number.MAX_SAFE_INTEGER;

/**
 * Runs controllers over one client: informer caches for every managed and watched type, served
 * by ONE watch stream (a SharedInformerFactory; two controllers on the same type share its
 * cache), change events mapped to keys (a managed resource -> its own key; a watched one ->
 * the spec's `map`, for its old and new state), and one ControllerRunner (queue, workers,
 * resync) per controller.
 *
 * **The cache-synced gate**: no reconcile runs until every cache has its first complete state
 * (the factory's `waitForSync`). Keys queued while the caches fill are deduplicated and wait.
 *
 * If the caches' stream ends for good (the client gave up: a type unknown to the server,
 * access denied), every controller is stopped and the whole is started again after a backoff,
 * from a fresh list. `stop()` aborts every reconcile's signal, drops the queues and closes the
 * caches.
 */
export class ControllerManager {
  private readonly clock: Clock;
  private readonly timers: Timers;
  private readonly logger: Logger;
  private readonly metrics: ControllerMetrics | undefined;
  private readonly scopes = new Map<string, TypeScope>();
  private readonly stopper = new AbortController();
  private session: Session | undefined;
  private loop: Promise<void> | undefined;
  private syncedOnce = false;
  private readonly syncWaiters = new Set<{ resolve: () => void; reject: (e: unknown) => void }>();
  private restartTimer: { handle: unknown; wake: () => void } | undefined;

  constructor(private readonly opts: ControllerManagerOptions) {
    this.clock = opts.clock;
    this.timers = opts.timers;
    this.logger = opts.logger ?? silentLogger;
    this.metrics = opts.metrics ?? (opts.registry !== undefined ? controllerMetrics(opts.registry) : undefined);
    const names = new Set<string>();
    for (const c of opts.controllers) {
      if (typeof c.name !== 'string' || c.name === '') throw new CairnError(ErrorCode.INVALID_ARGUMENT, 'every controller needs a name (it is also its status key)');
      if (names.has(c.name)) throw new CairnError(ErrorCode.INVALID_ARGUMENT, `two controllers are named ${c.name}; names are status keys and must be unique`);
      names.add(c.name);
      if (typeof c.managedType !== 'string' || c.managedType === '') throw new CairnError(ErrorCode.INVALID_ARGUMENT, `controller ${c.name} needs a managedType`);
      if (c.managedScope !== undefined) this.declare(c.managedType, c.managedScope, c.name);
      for (const w of c.watches ?? []) if (w.scope !== undefined) this.declare(w.type, w.scope, c.name);
    }
    if (opts.controllers.length === 0) throw new CairnError(ErrorCode.INVALID_ARGUMENT, 'a controller manager needs at least one controller');
  }

  /** Whether the caches have synced (this session) and the controllers run. */
  get synced(): boolean {
    return this.session?.runners.every((r) => r.running) ?? false;
  }

  /** The runner of a controller in the current session (for tests and introspection). */
  runner(name: string): ControllerRunner | undefined {
    return this.session?.runners.find((r) => r.name === name);
  }

  /** The current cache of a type. */
  cache(type: string): Informer<unknown> | undefined {
    return this.session?.informers.get(type);
  }

  /** Starts in the background: learn scopes, fill the caches, then run the controllers. Idempotent. */
  start(): this {
    if (this.loop === undefined && !this.stopper.signal.aborted) this.loop = this.run();
    return this;
  }

  /** Resolves once the caches first synced and the controllers run; rejects on stop or timeout. */
  waitForSync(timeoutMs?: number): Promise<void> {
    if (this.syncedOnce) return Promise.resolve();
    if (this.stopper.signal.aborted) return Promise.reject(new CairnError(ErrorCode.UNAVAILABLE, 'the controller manager was stopped'));
    return new Promise<void>((resolve, reject) => {
      let handle: unknown;
      const w = {
        resolve: () => {
          this.timers.clearTimeout(handle);
          this.syncWaiters.delete(w);
          resolve();
        },
        reject: (e: unknown) => {
          this.timers.clearTimeout(handle);
          this.syncWaiters.delete(w);
          reject(e);
        },
      };
      if (timeoutMs !== undefined) handle = this.timers.setTimeout(() => w.reject(new CairnError(ErrorCode.TIMEOUT, `the controllers' caches did not sync within ${timeoutMs} ms`)), timeoutMs);
      this.syncWaiters.add(w);
    });
  }

  /** Stops every controller (signals aborted, queues dropped, reconciles in flight awaited) and closes the caches. Idempotent. */
  async stop(): Promise<void> {
    if (!this.stopper.signal.aborted) {
      this.stopper.abort();
      this.restartTimer?.wake();
      for (const w of [...this.syncWaiters]) w.reject(new CairnError(ErrorCode.UNAVAILABLE, 'the controller manager was stopped'));
      const s = this.session;
      if (s !== undefined) await this.endSession(s);
    }
    await this.loop;
  }

  private declare(type: string, scope: TypeScope, by: string): void {
    const known = this.scopes.get(type);
    if (known !== undefined && known !== scope) throw new CairnError(ErrorCode.INVALID_ARGUMENT, `controller ${by} says ${type} is ${scope}-scoped, another controller says ${known}`);
    this.scopes.set(type, scope);
  }

  private async run(): Promise<void> {
    const base = this.opts.restartBaseMs ?? 1000;
    const cap = this.opts.restartCapMs ?? 30_000;
    let delayMs = base;
    while (!this.stopper.signal.aborted) {
      let synced = false;
      try {
        synced = await this.runSession();
      } catch (e) {
        if (this.stopper.signal.aborted) break;
        this.logger.error({ err: e instanceof Error ? e.message : String(e), code: (e as { code?: unknown } | null)?.code, retryInMs: delayMs }, 'the controllers could not run; starting them again after a pause');
      }
      if (this.stopper.signal.aborted) break;
      if (synced) delayMs = base; // a session that ran is a fresh start
      await this.pause(delayMs);
      delayMs = Math.min(cap, delayMs * 2);
    }
  }

  /** One life of the caches and controllers; resolves (true if it synced) when the caches end. */
  private async runSession(): Promise<boolean> {
    const signal = this.stopper.signal;
    const types = new Set<string>();
    for (const c of this.opts.controllers) {
      types.add(c.managedType);
      for (const w of c.watches ?? []) types.add(w.type);
    }
    for (const type of types) {
      if (!this.scopes.has(type)) this.scopes.set(type, await probeScope(this.opts.client, type, signal));
      if (signal.aborted) return false;
    }
    const factory = this.opts.client.sharedInformers({ ...(this.opts.watch ?? {}), logger: this.logger });
    const informers = new Map<string, Informer<unknown>>();
    for (const type of types) informers.set(type, factory.informer(cacheSpecFor(type, this.scopes.get(type) as TypeScope)));
    const runners = this.opts.controllers.map(
      (spec) =>
        new ControllerRunner(spec, {
          client: this.opts.client,
          caches: (type) => informers.get(type),
          clock: this.clock,
          timers: this.timers,
          logger: this.logger,
          metrics: this.metrics,
          queue: this.opts.queue,
          workers: this.opts.workers,
          resyncMs: this.opts.resyncMs ?? RUNNER_DEFAULTS.resyncMs,
        }),
    );
    for (const r of runners) this.route(r, informers);
    const session: Session = { factory, informers, runners };
    this.session = session;
    try {
      factory.start();
      // The gate: every cache has its first complete state before the first reconcile.
      await factory.waitForSync({ signal });
      if (signal.aborted) return false;
      this.logger.info({ controllers: runners.map((r) => r.name), caches: [...informers].map(([t, i]) => ({ type: t, objects: i.size })) }, 'caches synced; controllers running');
      for (const r of runners) r.start();
      this.syncedOnce = true;
      for (const w of [...this.syncWaiters]) w.resolve();
      // Runs until a cache ends: closed by stop(), or its stream failed for good.
      const ended = await Promise.race([...informers.values()].map((i) => i.waitForRevision(NEVER_REACHED).then(() => undefined, (e: unknown) => e)));
      if (!signal.aborted) throw ended instanceof Error ? ended : new CairnError(ErrorCode.UNAVAILABLE, 'the controllers\' caches ended');
      return true;
    } finally {
      await this.endSession(session);
    }
  }

  /** Sends each cache's changes to the runner's queue as keys. */
  private route(runner: ControllerRunner, informers: ReadonlyMap<string, Informer<unknown>>): void {
    const spec = runner.spec;
    const managed = informers.get(spec.managedType) as Informer<unknown>;
    const own = (obj: Resource<unknown>): void => runner.enqueue(keyOf(obj));
    managed.on('add', own);
    managed.on('update', (_old, obj) => own(obj));
    managed.on('delete', own);
    for (const w of spec.watches ?? []) {
      const inf = informers.get(w.type) as Informer<unknown>;
      const mapped = (obj: Resource<unknown>): void => {
        let keys: readonly string[];
        try {
          keys = w.map(obj);
        } catch (e) {
          this.logger.warn({ controller: spec.name, type: w.type, name: obj.id.name, err: e instanceof Error ? e.message : String(e) }, 'a watch mapper threw; the change is ignored');
          return;
        }
        for (const k of keys) runner.enqueue(k);
      };
      inf.on('add', mapped);
      inf.on('update', (old, obj) => {
        mapped(old);
        mapped(obj);
      });
      inf.on('delete', mapped);
    }
  }

  private async endSession(s: Session): Promise<void> {
    if (this.session === s) this.session = undefined;
    await Promise.all(s.runners.map((r) => r.stop()));
    s.factory.close();
  }

  private pause(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const done = (): void => {
        this.timers.clearTimeout(t.handle);
        this.restartTimer = undefined;
        resolve();
      };
      const t = { handle: this.timers.setTimeout(done, ms), wake: done };
      this.restartTimer = t;
    });
  }
}
