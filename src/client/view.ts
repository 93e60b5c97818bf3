import { CairnClientError, ClientErrorCode } from './errors.js';
import { keyOf, WatchFeed, type CacheSpec, type WatchSink, type WatchSource } from './feed.js';
import type { Resource } from './types.js';
import type { WatchEvent, WatchLogger, WatchOptions, WatchStats } from './watch.js';

export type ViewOptions = WatchOptions;

/** Options of a wait on a view. */
export interface WaitOptions {
  readonly signal?: AbortSignal;
  /** Reject with TIMEOUT after this many ms. Default: no limit. */
  readonly timeoutMs?: number;
}

const DECIMAL = /^(0|[1-9][0-9]*)$/;

function toRevision(n: string | number | bigint): bigint {
  if (typeof n === 'bigint' && n >= 0n) return n;
  if (typeof n === 'number' && Number.isSafeInteger(n) && n >= 0) return BigInt(n);
  if (typeof n === 'string' && DECIMAL.test(n)) return BigInt(n);
  throw new CairnClientError(ClientErrorCode.INVALID_ARGUMENT, `a revision must be a non-negative integer or decimal string, got ${JSON.stringify(String(n))}`);
}

interface Waiter {
  ready(): boolean;
  resolve(): void;
  reject(e: CairnClientError): void;
}

function checkSpec(spec: CacheSpec): CacheSpec {
  if (typeof spec !== 'object' || spec === null || typeof spec.type !== 'string' || spec.type === '') {
    throw new CairnClientError(ClientErrorCode.INVALID_ARGUMENT, 'a view needs {type, partition?, namespace?, namePrefix?}');
  }
  return {
    type: spec.type,
    ...(spec.partition !== undefined ? { partition: spec.partition } : {}),
    ...(spec.namespace !== undefined ? { namespace: spec.namespace } : {}),
    ...(spec.namePrefix !== undefined ? { namePrefix: spec.namePrefix } : {}),
  };
}

/**
 * A materialized view: a local copy of the resources one watch matches, kept current by the
 * watch (with Consul's framing: `snapshotOnCompacted`), readable at any time without a call.
 *
 * - `revision` is the store revision the view reflects: every matching change up to it is in
 *   the view. `waitForRevision(n)` waits until it is at least n (e.g. the version your own
 *   write returned). Quiet views advance with the server's bookmarks.
 * - A fresh state (the first one, or after the server could not resume the watch, or after a
 *   stream lost mid-state) is built aside and swapped in whole when complete: readers never see
 *   a half-built or empty view, and `revision` never goes back. Until the first state is
 *   complete the view is empty and `hasSynced()` is false.
 * - Objects are shared with the caller: do not mutate them.
 */
export class MaterializedView<D = unknown> {
  readonly spec: CacheSpec;
  /** The state readers see. */
  protected items = new Map<string, Resource<D>>();
  /** A state being built aside (from the start, or after a reset) until its tail. */
  private building: Map<string, Resource<D>> | undefined = new Map();
  private rev = 0n;
  private synced = false;
  private ended = false;
  private endError: CairnClientError | undefined;
  private readonly waiters = new Set<Waiter>();
  private feed: WatchFeed | undefined;
  /** Set when a SharedInformerFactory runs this cache's watch. */
  private shared = false;
  protected readonly logger: WatchLogger;
  /** What the watch feeds. */
  private readonly sink: WatchSink;

  constructor(
    private readonly source: WatchSource,
    spec: CacheSpec,
    private readonly opts: ViewOptions = {},
  ) {
    this.spec = checkSpec(spec);
    this.logger = opts.logger ?? {};
    this.sink = { spec: this.spec, handle: (ev) => this.handle(ev as WatchEvent<D>), end: (error) => this.finish(error) };
  }

  /** Opens the view's own watch stream. Returns the view. */
  start(): this {
    if (this.shared) throw new CairnClientError(ClientErrorCode.INVALID_ARGUMENT, `the cache of ${this.spec.type} belongs to a SharedInformerFactory: start the factory`);
    if (this.feed !== undefined || this.ended) return this;
    this.feed = new WatchFeed(this.source, [this.sink], this.opts);
    this.feed.start();
    return this;
  }

  /** Stops following the watch; pending waits reject with CANCELLED. The cached state stays readable. */
  close(): void {
    this.feed?.close();
    this.finish(undefined);
  }

  /** The resource with this key (`partition/namespace/name`, see keyOf/resourceKey), if present. */
  get(key: string): Resource<D> | undefined {
    return this.items.get(key);
  }

  has(key: string): boolean {
    return this.items.has(key);
  }

  /** Every cached resource, ordered by key. */
  list(): Array<Resource<D>> {
    return [...this.items.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, r]) => r);
  }

  keys(): string[] {
    return [...this.items.keys()].sort();
  }

  get size(): number {
    return this.items.size;
  }

  /** The revision (decimal) the view reflects; "0" before the first state is complete. */
  get revision(): string {
    return String(this.rev);
  }

  /** Whether the first complete state is in. */
  hasSynced(): boolean {
    return this.synced;
  }

  /** Why the view stopped (undefined while it runs, or after close()). */
  get error(): CairnClientError | undefined {
    return this.endError;
  }

  /** Stats of the view's own stream (undefined for a shared one: see the factory). */
  get stats(): WatchStats | undefined {
    return this.feed?.stats;
  }

  /** Resolves once the first complete state is in. */
  waitForSync(opts: WaitOptions = {}): Promise<void> {
    return this.wait(() => this.synced, 'the first complete state', opts);
  }

  /** Resolves (with the view's revision) once the view reflects at least revision `n`. */
  async waitForRevision(n: string | number | bigint, opts: WaitOptions = {}): Promise<string> {
    const target = toRevision(n);
    await this.wait(() => this.synced && this.rev >= target, `revision ${target}`, opts);
    return this.revision;
  }

  /** @internal A SharedInformerFactory runs this cache's watch. */
  attachShared(): WatchSink {
    if (this.feed !== undefined) throw new CairnClientError(ClientErrorCode.INVALID_ARGUMENT, `the cache of ${this.spec.type} already runs its own watch`);
    this.shared = true;
    return this.sink;
  }

  // ---- Hooks for informers ------------------------------------------------------------------

  /** A live change. */
  protected changed(_old: Resource<D> | undefined, _now: Resource<D>): void {}
  /** A live delete: `last` is the last stored state. */
  protected deleted(_last: Resource<D>): void {}
  /** A complete state replaced `old` (empty the first time). */
  protected replaced(_old: ReadonlyMap<string, Resource<D>>, _now: ReadonlyMap<string, Resource<D>>): void {}

  // ---- Events -------------------------------------------------------------------------------

  private handle(ev: WatchEvent<D>): void {
    if (this.ended) return;
    switch (ev.type) {
      case 'reset':
        // The old state stays visible until the new one is complete.
        this.building = new Map();
        return;
      case 'change':
      case 'delete': {
        const key = keyOf(ev.resource);
        if (this.building !== undefined) {
          if (ev.type === 'change') this.building.set(key, ev.resource);
          else this.building.delete(key);
          return;
        }
        const old = this.items.get(key);
        if (ev.type === 'change') this.items.set(key, ev.resource);
        else this.items.delete(key);
        this.advance(BigInt(ev.revision));
        this.safely(() => (ev.type === 'change' ? this.changed(old, ev.resource) : this.deleted(ev.resource)));
        this.check();
        return;
      }
      case 'tail': {
        const next = this.building;
        if (next === undefined) return; // not sent outside an initial state
        const old = this.items;
        this.building = undefined;
        this.items = next;
        this.synced = true;
        this.advance(BigInt(ev.revision));
        this.safely(() => this.replaced(old, next));
        this.check();
        return;
      }
      case 'bookmark':
        if (this.building !== undefined) return;
        this.advance(BigInt(ev.revision));
        this.check();
        return;
    }
  }

  /** The revision never goes back (a re-list on a node slightly behind the last one could). */
  private advance(rev: bigint): void {
    if (rev > this.rev) this.rev = rev;
  }

  private safely(fn: () => void): void {
    try {
      fn();
    } catch (e) {
      this.logger.warn?.({ type: this.spec.type, err: e instanceof Error ? e.message : String(e) }, 'an informer handler threw; the cache is unaffected');
    }
  }

  private finish(error: CairnClientError | undefined): void {
    if (this.ended) return;
    this.ended = true;
    this.endError = error;
    const why = error ?? new CairnClientError(ClientErrorCode.CANCELLED, `the view of ${this.spec.type} was closed`);
    for (const w of [...this.waiters]) w.reject(why);
    this.waiters.clear();
  }

  private check(): void {
    for (const w of [...this.waiters]) if (w.ready()) w.resolve();
  }

  private wait(ready: () => boolean, what: string, opts: WaitOptions): Promise<void> {
    if (ready()) return Promise.resolve();
    if (this.ended) return Promise.reject(this.endError ?? new CairnClientError(ClientErrorCode.CANCELLED, `the view of ${this.spec.type} is closed`));
    const signal = opts.signal;
    if (signal?.aborted) return Promise.reject(new CairnClientError(ClientErrorCode.CANCELLED, `waiting for ${what} of ${this.spec.type} was cancelled`));
    return new Promise<void>((resolve, reject) => {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const cleanup = (): void => {
        this.waiters.delete(w);
        if (timer !== undefined) clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
      };
      const w: Waiter = {
        ready,
        resolve: () => {
          cleanup();
          resolve();
        },
        reject: (e) => {
          cleanup();
          reject(e);
        },
      };
      const onAbort = (): void => w.reject(new CairnClientError(ClientErrorCode.CANCELLED, `waiting for ${what} of ${this.spec.type} was cancelled`));
      signal?.addEventListener('abort', onAbort, { once: true });
      if (opts.timeoutMs !== undefined) {
        timer = setTimeout(
          () => w.reject(new CairnClientError(ClientErrorCode.TIMEOUT, `the view of ${this.spec.type} did not reach ${what} within ${opts.timeoutMs} ms (at revision ${this.revision}${this.synced ? '' : ', not synced yet'})`)),
          opts.timeoutMs,
        );
      }
      this.waiters.add(w);
    });
  }
}
