import { CairnClientError, ClientErrorCode } from './errors.js';
import { WatchFeed, type CacheSpec, type WatchSink, type WatchSource } from './feed.js';
import type { Resource } from './types.js';
import { MaterializedView, type ViewOptions, type WaitOptions } from './view.js';
import { WATCH_DEFAULTS, type WatchOptions, type WatchStats } from './watch.js';

/** How a delete notification came about. */
export interface DeleteInfo {
  /**
   * True when the object vanished while the informer re-listed (the watch could not be resumed):
   * the object given is the last state the informer saw, not necessarily its final one.
   */
  readonly finalStateUnknown: boolean;
}

export interface InformerHandlers<D> {
  /** A new object: in the first list (and in later re-lists), or created live. */
  onAdd?(obj: Resource<D>): void;
  /** An object changed (its version moved). */
  onUpdate?(oldObj: Resource<D>, newObj: Resource<D>): void;
  /** An object is gone; `obj` is its last stored state (see DeleteInfo). */
  onDelete?(obj: Resource<D>, info: DeleteInfo): void;
}

type Listener<D> = { kind: 'add'; fn: (obj: Resource<D>) => void } | { kind: 'update'; fn: (oldObj: Resource<D>, newObj: Resource<D>) => void } | { kind: 'delete'; fn: (obj: Resource<D>, info: DeleteInfo) => void };

/**
 * An informer (client-go's SharedIndexInformer, Nexodus' informers): list + watch into a local
 * cache, with notifications of what changed. It is a MaterializedView (get, list, revision,
 * waitForRevision, the atomic swap of a re-listed state) that also tells its handlers:
 *
 * - after the first complete list, `add` for every object, then `hasSynced()` is true;
 * - live: `add`, `update` (old, new) or `delete` (last stored state), in commit order;
 * - when the watch had to re-list (the server could not resume it), the new state is diffed
 *   against the cache once complete: `add` for new objects, `update` for changed versions,
 *   `delete` with `finalStateUnknown` for vanished ones. Nothing is reported twice or missed.
 *
 * Handlers run synchronously in event order, after the cache was updated; they should be quick
 * (enqueue work, do not do it). A handler that throws is logged and does not disturb the cache
 * or the other handlers. A handler added after the sync is told `add` for every cached object
 * first, so it never misses what came before it.
 */
export class Informer<D = unknown> extends MaterializedView<D> {
  private readonly listeners = new Set<Listener<D>>();

  /** `on('add' | 'update' | 'delete', fn)`; returns a function that removes the handler. */
  on(event: 'add', fn: (obj: Resource<D>) => void): () => void;
  on(event: 'update', fn: (oldObj: Resource<D>, newObj: Resource<D>) => void): () => void;
  on(event: 'delete', fn: (obj: Resource<D>, info: DeleteInfo) => void): () => void;
  on(event: 'add' | 'update' | 'delete', fn: (...args: never[]) => void): () => void {
    if (event !== 'add' && event !== 'update' && event !== 'delete') {
      throw new CairnClientError(ClientErrorCode.INVALID_ARGUMENT, `informer events are add, update and delete, got ${JSON.stringify(event)}`);
    }
    const l = { kind: event, fn } as Listener<D>;
    this.listeners.add(l);
    if (l.kind === 'add' && this.hasSynced()) for (const obj of this.list()) this.call(() => l.fn(obj));
    return () => {
      this.listeners.delete(l);
    };
  }

  /** Adds several handlers at once; returns a function that removes them. */
  addEventHandler(h: InformerHandlers<D>): () => void {
    const offs: Array<() => void> = [];
    if (h.onAdd) offs.push(this.on('add', h.onAdd.bind(h)));
    if (h.onUpdate) offs.push(this.on('update', h.onUpdate.bind(h)));
    if (h.onDelete) offs.push(this.on('delete', h.onDelete.bind(h)));
    return () => offs.forEach((off) => off());
  }

  protected override changed(old: Resource<D> | undefined, now: Resource<D>): void {
    if (old === undefined) this.emitAdd(now);
    else this.emitUpdate(old, now);
  }

  protected override deleted(last: Resource<D>): void {
    this.emitDelete(last, { finalStateUnknown: false });
  }

  protected override replaced(old: ReadonlyMap<string, Resource<D>>, now: ReadonlyMap<string, Resource<D>>): void {
    if (this.listeners.size === 0) return;
    for (const [key, obj] of now) {
      const before = old.get(key);
      if (before === undefined) this.emitAdd(obj);
      else if (before.version !== obj.version || before.id.uid !== obj.id.uid) this.emitUpdate(before, obj);
    }
    for (const [key, obj] of old) if (!now.has(key)) this.emitDelete(obj, { finalStateUnknown: true });
  }

  private emitAdd(obj: Resource<D>): void {
    for (const l of this.listeners) if (l.kind === 'add') this.call(() => l.fn(obj));
  }

  private emitUpdate(oldObj: Resource<D>, newObj: Resource<D>): void {
    for (const l of this.listeners) if (l.kind === 'update') this.call(() => l.fn(oldObj, newObj));
  }

  private emitDelete(obj: Resource<D>, info: DeleteInfo): void {
    for (const l of this.listeners) if (l.kind === 'delete') this.call(() => l.fn(obj, info));
  }

  private call(fn: () => void): void {
    try {
      fn();
    } catch (e) {
      this.logger.warn?.({ type: this.spec.type, err: e instanceof Error ? e.message : String(e) }, 'an informer handler threw; the cache and the other handlers are unaffected');
    }
  }
}

/**
 * Informers for several types served by ONE watch stream (one watch per informer): register
 * every informer, add handlers, `start()`, then `waitForSync()` before acting on the caches
 * (a controller reconciles only once every type it reads has synced).
 *
 * Asking twice for the same spec gives the same informer. Informers are registered before
 * `start()` (the stream's watches are fixed when it opens); at most 64 per factory.
 */
export class SharedInformerFactory {
  private readonly byKey = new Map<string, Informer<unknown>>();
  private readonly sinks: WatchSink[] = [];
  private feed: WatchFeed | undefined;

  constructor(
    private readonly source: WatchSource,
    private readonly opts: WatchOptions = {},
  ) {}

  /** The informer of `spec`, created on first request. */
  informer<D = unknown>(spec: CacheSpec): Informer<D> {
    const key = JSON.stringify([spec.type, spec.partition ?? '', spec.namespace ?? '', spec.namePrefix ?? '']);
    const found = this.byKey.get(key);
    if (found !== undefined) return found as Informer<D>;
    if (this.feed !== undefined) throw new CairnClientError(ClientErrorCode.INVALID_ARGUMENT, `informer for ${spec.type} asked for after the factory started; register every informer before start()`);
    if (this.byKey.size >= WATCH_DEFAULTS.maxWatches) throw new CairnClientError(ClientErrorCode.INVALID_ARGUMENT, `a factory serves at most ${WATCH_DEFAULTS.maxWatches} informers (one stream)`);
    const inf = new Informer<D>(this.source, spec, this.viewOptions());
    this.sinks.push(inf.attachShared());
    this.byKey.set(key, inf as Informer<unknown>);
    return inf;
  }

  /** Every informer, in registration order. */
  get informers(): ReadonlyArray<Informer<unknown>> {
    return [...this.byKey.values()];
  }

  /** Opens the one stream. Idempotent. */
  start(): void {
    if (this.feed !== undefined) return;
    if (this.sinks.length === 0) throw new CairnClientError(ClientErrorCode.INVALID_ARGUMENT, 'the factory has no informers to start');
    this.feed = new WatchFeed(this.source, this.sinks, this.opts);
    this.feed.start();
  }

  /** Whether every informer has its first complete state. */
  hasSynced(): boolean {
    return this.feed !== undefined && this.informers.every((i) => i.hasSynced());
  }

  /** Resolves once every informer has synced; rejects if the stream ended or the wait timed out. */
  async waitForSync(opts: WaitOptions = {}): Promise<void> {
    const deadline = opts.timeoutMs === undefined ? undefined : Date.now() + opts.timeoutMs;
    for (const inf of this.informers) {
      const left = deadline === undefined ? undefined : Math.max(1, deadline - Date.now());
      await inf.waitForSync({ ...(opts.signal !== undefined ? { signal: opts.signal } : {}), ...(left !== undefined ? { timeoutMs: left } : {}) });
    }
  }

  /** The shared stream's stats (undefined before start). */
  get stats(): WatchStats | undefined {
    return this.feed?.stats;
  }

  /** Closes the stream; every informer stops (their caches stay readable). */
  close(): void {
    this.feed?.close();
    for (const i of this.informers) i.close();
  }

  private viewOptions(): ViewOptions {
    return this.opts.logger !== undefined ? { logger: this.opts.logger } : {};
  }
}
