/**
 * The deliberately naive reference for publisher-model.test.ts: the event publisher as it was
 * before subscribers of one filter shared a feed, with a queue of its own per subscriber that
 * every change is pushed into. Same options, same events, same order, same limits; O(subscribers)
 * work and memory per change. Used by tests only (reached through testing/index.ts, never from shipped code).
 */
import { assert, type Clock, type Revision } from '../../base/index.js';
import { resourceBytes, type ChangeRecord, type Resource } from '../../store/index.js';
import type { PublisherOptions, StoreSource, SubscribeOptions } from '../publisher.js';
import { filterKey, matches, type EndCode, type StreamEvent, type WatchFilter } from '../types.js';

interface WindowEntry {
  readonly revision: Revision;
  readonly records: readonly ChangeRecord[];
  readonly atMs: number;
}

interface CachedSnapshot {
  readonly revision: Revision;
  readonly resources: readonly Resource[];
  readonly atMs: number;
}

function topicOf(group: string, kind: string): string {
  return `${group}\u0000${kind}`;
}

/**
 * One subscriber's stream: a bounded queue the transport drains with `next()`. `onReadable`
 * is called (synchronously, at most once per empty-to-non-empty transition) when events wait.
 */
export class NaiveSubscription {
  private queue: StreamEvent[] = [];
  private head = 0;
  ended = false;
  /** Resuming from a revision this node has not applied yet: skip up to it, tail once reached. */
  waitingFor: Revision | undefined;
  waitingSinceMs = 0;
  lastEventMs: number;
  onReadable: (() => void) | undefined;
  /**
   * Events at the head of the queue that do not count against the live limit: the initial
   * state and replayed events, queued at once when the subscription starts. (The limit is
   * for falling behind the live stream; a large initial state is not that.)
   */
  private exempt = 0;

  constructor(
    readonly id: number,
    readonly filter: WatchFilter,
    private readonly publisher: NaivePublisher,
    nowMs: number,
  ) {
    this.lastEventMs = nowMs;
  }

  get queued(): number {
    return this.queue.length - this.head;
  }

  /** The next event without taking it. */
  peek(): StreamEvent | undefined {
    return this.queue[this.head];
  }

  /** The next event, or undefined when none is waiting. After an `end` event, always undefined. */
  next(): StreamEvent | undefined {
    if (this.head >= this.queue.length) return undefined;
    const ev = this.queue[this.head++] as StreamEvent;
    if (this.exempt > 0) this.exempt--;
    if (this.head > 1024 && this.head * 2 > this.queue.length) {
      this.queue = this.queue.slice(this.head);
      this.head = 0;
    }
    return ev;
  }

  /** The consumer is gone: stop delivering. */
  close(): void {
    if (!this.ended) this.publisher.unsubscribe(this);
    this.ended = true;
  }

  /** @internal */
  push(ev: StreamEvent, limit: number, nowMs: number): void {
    if (this.ended) return;
    const wasEmpty = this.queued === 0;
    if (limit === Number.POSITIVE_INFINITY) this.exempt++;
    else if (ev.type !== 'end' && this.queued - this.exempt >= limit) {
      this.end('SLOW_CONSUMER', `the subscriber fell more than ${limit} events behind; resume from the last revision received`, ev.revision, nowMs);
      return;
    }
    this.queue.push(ev);
    this.lastEventMs = nowMs;
    if (wasEmpty) this.onReadable?.();
  }

  /** @internal Ends the stream: pending events are dropped only for a slow consumer. */
  end(code: EndCode, message: string, revision: Revision, nowMs: number): void {
    if (this.ended) return;
    if (code === 'SLOW_CONSUMER') {
      this.queue = [];
      this.head = 0;
      this.exempt = 0;
    }
    const wasEmpty = this.queued === 0;
    this.queue.push({ type: 'end', code, message, revision });
    this.ended = true;
    this.lastEventMs = nowMs;
    this.publisher.unsubscribe(this);
    if (wasEmpty) this.onReadable?.();
  }
}

/**
 * The event publisher (Consul's EventPublisher, Kubernetes' watch cache): fed by the replica
 * after each apply, in commit order; keeps a bounded window of recent change events for
 * resumes; builds initial states from copy-on-write store snapshots and shares them briefly
 * between subscribers of the same filter; splices initial state and live events with no gap or
 * duplicate (both happen synchronously between two applies). Pure: time comes from the clock
 * port, and the caller drives `tick()`.
 */
export class NaivePublisher {
  private readonly window: WindowEntry[] = [];
  private windowHead = 0;
  private windowEvents = 0;
  /** Resumes must be from at least this revision (everything after it is in the window). */
  private compactedThrough: Revision;
  private readonly subs = new Map<number, NaiveSubscription>();
  /** NaiveSubscriptions by topic (group and kind): a change is only offered to its topic's subscribers. */
  private readonly byTopic = new Map<string, Set<NaiveSubscription>>();
  /** NaiveSubscriptions resuming from a revision not yet published here. */
  private readonly waiting = new Set<NaiveSubscription>();
  private readonly cache = new Map<string, CachedSnapshot>();
  private nextId = 1;
  private readonly o: Required<Omit<PublisherOptions, 'clock'>> & { clock: Clock };
  /** How many initial snapshots were built (cache misses), for tests and metrics. */
  snapshotBuilds = 0;
  slowConsumersEnded = 0;

  constructor(
    private readonly source: StoreSource,
    opts: PublisherOptions,
  ) {
    this.o = {
      clock: opts.clock,
      maxWindowEvents: opts.maxWindowEvents ?? 100_000,
      maxWindowBytes: opts.maxWindowBytes ?? 64 * 1024 * 1024,
      maxWindowAgeMs: opts.maxWindowAgeMs ?? 300_000,
      subscriberBufferEvents: opts.subscriberBufferEvents ?? 10_000,
      snapshotCacheMs: opts.snapshotCacheMs ?? 1_000,
      bookmarkIntervalMs: opts.bookmarkIntervalMs ?? 5_000,
      futureRevisionTimeoutMs: opts.futureRevisionTimeoutMs ?? 10_000,
    };
    // Nothing before the state we start from can be replayed.
    this.compactedThrough = source.current().revision;
  }

  /** The applied revision: every change up to it has been published. */
  get revision(): Revision {
    return this.source.current().revision;
  }

  /** The oldest revision a subscriber can resume from. */
  get oldestResumable(): Revision {
    return this.compactedThrough;
  }

  get subscribers(): number {
    return this.subs.size;
  }

  get windowSize(): number {
    return this.windowEvents;
  }

  subscribe(filter: WatchFilter, opts: SubscribeOptions = {}): NaiveSubscription {
    const now = this.o.clock.monotonicMs();
    const sub = new NaiveSubscription(this.nextId++, filter, this, now);
    const current = this.revision;
    const limit = Number.POSITIVE_INFINITY; // the initial state is not subject to the live limit
    if (opts.gtRevision !== undefined) {
      const n = opts.gtRevision;
      if (n < this.compactedThrough) {
        sub.end('COMPACTED', `revision ${n} is older than the retained window; re-list and watch from the new revision`, this.compactedThrough, now);
        return sub;
      }
      this.add(sub);
      if (n > current) {
        sub.waitingFor = n;
        sub.waitingSinceMs = now;
        this.waiting.add(sub);
        return sub;
      }
      this.replay(sub, n, limit, now);
      sub.push({ type: 'tail', revision: current }, limit, now);
      return sub;
    }
    this.add(sub);
    if (opts.atTail === true) {
      sub.push({ type: 'tail', revision: current }, limit, now);
      return sub;
    }
    const snap = this.initialState(filter, now);
    for (const r of snap.resources) sub.push({ type: 'change', revision: r.version, resource: r }, limit, now);
    // A shared snapshot may be a little older than the present: the window covers the rest.
    this.replay(sub, snap.revision, limit, now);
    sub.push({ type: 'tail', revision: current }, limit, now);
    return sub;
  }

  private add(sub: NaiveSubscription): void {
    this.subs.set(sub.id, sub);
    const topic = topicOf(sub.filter.group, sub.filter.kind);
    let set = this.byTopic.get(topic);
    if (!set) {
      set = new Set();
      this.byTopic.set(topic, set);
    }
    set.add(sub);
  }

  /** @internal */
  unsubscribe(sub: NaiveSubscription): void {
    if (!this.subs.delete(sub.id)) return;
    this.waiting.delete(sub);
    const topic = topicOf(sub.filter.group, sub.filter.kind);
    const set = this.byTopic.get(topic);
    set?.delete(sub);
    if (set?.size === 0) this.byTopic.delete(topic);
  }

  private initialState(filter: WatchFilter, now: number): CachedSnapshot {
    const key = filterKey(filter);
    const hit = this.cache.get(key);
    if (hit && now - hit.atMs <= this.o.snapshotCacheMs && hit.revision >= this.compactedThrough) return hit;
    const view = this.source.current().snapshot();
    const resources = view.list(filter);
    this.snapshotBuilds++;
    const built: CachedSnapshot = { revision: view.revision, resources, atMs: now };
    this.cache.set(key, built);
    return built;
  }

  /** Window events after revision `after` matching the subscriber, in order. */
  private replay(sub: NaiveSubscription, after: Revision, limit: number, now: number): void {
    for (let i = this.windowHead; i < this.window.length; i++) {
      const w = this.window[i] as WindowEntry;
      if (w.revision <= after) continue;
      for (const rec of w.records) {
        if (matches(sub.filter, rec.resource)) sub.push({ type: rec.kind === 'delete' ? 'delete' : 'change', revision: w.revision, resource: rec.resource }, limit, now);
      }
    }
  }

  /** The changes made by the entry at `revision`, after it was applied. Called in commit order. */
  publish(revision: Revision, records: readonly ChangeRecord[]): void {
    const now = this.o.clock.monotonicMs();
    const last = this.window[this.window.length - 1];
    assert(last === undefined || revision > last.revision, () => `published revision ${revision} after ${String(last?.revision)}: events must come in commit order`);
    if (records.length > 0) {
      this.window.push({ revision, records, atMs: now });
      this.windowEvents += records.length;
      this.trim(now);
    }
    const limit = this.o.subscriberBufferEvents;
    // Resumes waiting for this revision: the changes up to the one they resume from are ones
    // they already have; what follows is live.
    let caughtUpHere: Set<NaiveSubscription> | undefined;
    for (const sub of this.waiting) {
      const wanted = sub.waitingFor as Revision;
      if (revision < wanted) continue;
      this.waiting.delete(sub);
      sub.waitingFor = undefined;
      const tailAt = revision === wanted ? revision : ((revision - 1) as Revision);
      sub.push({ type: 'tail', revision: tailAt }, limit, now);
      if (tailAt === revision) (caughtUpHere ??= new Set()).add(sub);
    }
    if (records.length === 0) return;
    const topics = new Set<string>();
    for (const rec of records) topics.add(topicOf(rec.resource.id.type.group, rec.resource.id.type.kind));
    // One event object per record, shared by every subscriber it goes to (events are read-only):
    // with thousands of watchers, allocating one per subscriber dominated the fan-out.
    const events: StreamEvent[] = records.map((rec) => ({ type: rec.kind === 'delete' ? 'delete' : 'change', revision, resource: rec.resource }));
    for (const topic of topics) {
      const set = this.byTopic.get(topic);
      if (!set) continue;
      // A subscriber ended mid-loop leaves the set; deleting during iteration is safe, no copy needed.
      for (const sub of set) {
        if (sub.waitingFor !== undefined || caughtUpHere?.has(sub)) continue;
        for (let i = 0; i < records.length; i++) {
          if (!matches(sub.filter, (records[i] as ChangeRecord).resource)) continue;
          sub.push(events[i] as StreamEvent, limit, now);
          if (sub.ended) {
            this.slowConsumersEnded++;
            break;
          }
        }
      }
    }
  }

  /**
   * The state was replaced wholesale (a snapshot installed from the leader, or a restore):
   * history before it cannot be replayed, and every subscriber must start over.
   */
  reset(revision: Revision): void {
    const now = this.o.clock.monotonicMs();
    for (const sub of [...this.subs.values()]) sub.end('RESET', `the state was replaced at revision ${revision} (snapshot install or restore); re-list and watch again`, revision, now);
    this.window.length = 0;
    this.windowHead = 0;
    this.windowEvents = 0;
    this.cache.clear();
    // The new state's revision can be below `revision` (entries after the last change carried
    // none); a watcher at exactly that revision has missed nothing.
    this.compactedThrough = this.source.current().revision;
  }

  /** Periodic duties: bookmarks for quiet subscribers, future-revision waits, age-based trimming. */
  tick(): void {
    const now = this.o.clock.monotonicMs();
    this.trim(now);
    const current = this.revision;
    for (const sub of [...this.subs.values()]) {
      if (sub.waitingFor !== undefined) {
        if (current >= sub.waitingFor) {
          sub.waitingFor = undefined;
          this.waiting.delete(sub);
          sub.push({ type: 'tail', revision: current }, this.o.subscriberBufferEvents, now);
        } else if (now - sub.waitingSinceMs > this.o.futureRevisionTimeoutMs) {
          sub.end('TIMEOUT', `this node has not reached revision ${sub.waitingFor} (at ${current}); resume on another node or later`, current, now);
        }
        continue;
      }
      if (now - sub.lastEventMs >= this.o.bookmarkIntervalMs) sub.push({ type: 'bookmark', revision: current }, this.o.subscriberBufferEvents, now);
    }
    for (const [k, c] of this.cache) if (now - c.atMs > this.o.snapshotCacheMs) this.cache.delete(k);
  }

  /** Ends every subscription (node shutting down). */
  close(): void {
    const now = this.o.clock.monotonicMs();
    for (const sub of [...this.subs.values()]) sub.end('CLOSED', 'the node is shutting down; resume on another node', this.revision, now);
  }

  private trim(now: number): void {
    while (this.windowHead < this.window.length) {
      const oldest = this.window[this.windowHead] as WindowEntry;
      // Naively: the window's bytes summed afresh each time (the publisher keeps a running total).
      let bytes = 0;
      for (let i = this.windowHead; i < this.window.length; i++) for (const r of (this.window[i] as WindowEntry).records) bytes += 2 * resourceBytes(r.resource); // windowEventBytes, written out again here
      if (this.windowEvents <= this.o.maxWindowEvents && bytes <= this.o.maxWindowBytes && now - oldest.atMs <= this.o.maxWindowAgeMs) break;
      this.windowEvents -= oldest.records.length;
      this.compactedThrough = oldest.revision;
      this.windowHead++;
    }
    if (this.windowHead > 4096 && this.windowHead * 2 > this.window.length) {
      this.window.splice(0, this.windowHead);
      this.windowHead = 0;
    }
  }
}
