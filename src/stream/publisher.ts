import { assert, type Clock, type Revision } from '../base/index.js';
import { resourceBytes, type ChangeRecord, type Resource, type StoreReader } from '../store/index.js';
import { filterKey, matches, type EndCode, type StreamEvent, type WatchFilter } from './types.js';

/** The state a publisher reads initial snapshots from: the live store (replaced on restore). */
export interface StoreSource {
  current(): StoreReader & { snapshot(): StoreReader };
}

export interface PublisherOptions {
  readonly clock: Clock;
  /** Change events kept for resumes, at most. Default 100,000. */
  readonly maxWindowEvents?: number;
  /**
   * Memory the events kept for resumes may hold, at most, each event counted as
   * `windowEventBytes` (twice its resource's deterministic size). Default 64 MiB (the agent
   * sizes its default to the heap: `--watch-window-bytes`). Bounds what old versions the
   * window pins: rewriting one 1 MiB resource 10,000 times keeps 32 of them.
   */
  readonly maxWindowBytes?: number;
  /** Age of the oldest event kept for resumes, at most (ms). Default 300,000. */
  readonly maxWindowAgeMs?: number;
  /** Events queued for one subscriber before it is ended as a slow consumer. Default 10,000. */
  readonly subscriberBufferEvents?: number;
  /** How long an initial snapshot is shared with later subscribers of the same filter (ms). Default 1,000. */
  readonly snapshotCacheMs?: number;
  /** A quiet subscriber gets a bookmark this often (ms). Default 5,000. */
  readonly bookmarkIntervalMs?: number;
  /** How long a resume from a revision this node has not reached may wait (ms). Default 10,000. */
  readonly futureRevisionTimeoutMs?: number;
}

export interface SubscribeOptions {
  /** Resume: every matching change after this revision, then tail. Absent: initial state first. */
  readonly gtRevision?: Revision;
  /** Skip the initial state: tail at once, then live events. */
  readonly atTail?: boolean;
}

/**
 * What one change event held by the window is counted as: twice its resource's deterministic
 * size (`resourceBytes`). Measured (scripts/measure-window-heap.mjs, docs/performance.md
 * "Where a node's memory goes"): a superseded version held only by the window costs 1.0-1.1x
 * its resourceBytes of V8 heap, and 2.0x once its protobuf encoding is cached (every version a
 * leader answered a write with, or a node sent to a watcher), for 256-byte and 4 KiB values
 * alike. Counting the larger keeps the bound an upper bound on every node.
 */
export function windowEventBytes(r: Resource): number {
  return 2 * resourceBytes(r);
}

interface WindowEntry {
  readonly revision: Revision;
  readonly records: readonly ChangeRecord[];
  readonly atMs: number;
  /** `windowEventBytes` of its records' resources, summed. */
  readonly bytes: number;
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
 * The live events of one filter, shared by every subscriber of that filter (the idea of
 * Kubernetes' watch cache and etcd's watcher groups): each change is appended once however
 * many subscribers there are, and each reads it at its own cursor. With ten thousand watchers
 * of one type, a change costs one append instead of ten thousand queue pushes, and a backlog
 * is held once instead of once per subscriber. Positions are absolute (`base` + index), so
 * dropping events every member has read moves no cursor.
 */
class Feed {
  readonly members = new Set<Subscription>();
  /** Members with nothing left to read, not ended: woken (onReadable) by the next append. */
  idle = new Set<Subscription>();
  private events: StreamEvent[] = [];
  private base = 0;
  private appendsSinceTrim = 0;
  /**
   * At most the lowest "effective cursor" (cursor minus pending live private events) of the
   * members not ended: a member can be over the live limit only if `end - minHint` is. Lowered
   * when a member joins or queues a private live event; raised only by an exact recount.
   */
  minHint = 0;
  lastAppendMs = Number.NEGATIVE_INFINITY;

  constructor(
    readonly key: string,
    readonly topic: string,
    readonly filter: WatchFilter,
  ) {}

  get end(): number {
    return this.base + this.events.length;
  }

  at(pos: number): StreamEvent {
    const ev = this.events[pos - this.base];
    assert(ev !== undefined, () => `feed position ${pos} is outside [${this.base}, ${this.end})`);
    return ev;
  }

  append(ev: StreamEvent, nowMs: number): void {
    this.events.push(ev);
    this.lastAppendMs = nowMs;
    // Now and then, drop what every member has read (an O(members) pass, so not every time).
    if (++this.appendsSinceTrim >= 1024) this.trim();
  }

  /** Drops the events every member has read. */
  trim(): void {
    this.appendsSinceTrim = 0;
    let min = this.end;
    for (const m of this.members) min = Math.min(min, m.cursor);
    const drop = min - this.base;
    if (drop <= 0) return;
    this.events = drop === this.events.length ? [] : this.events.slice(drop);
    this.base = min;
  }
}

/**
 * One subscriber's stream, drained by the transport with `next()`: its own queue for what is
 * its alone (initial state, replayed events, tail, bookmarks, end), then, once it follows live
 * changes, its filter's shared feed from its cursor. Each private event is due at a feed
 * position: it comes after the feed events before that position and before the rest, so the
 * order is exactly that of one queue. `onReadable` is called (synchronously, at most once per
 * empty-to-non-empty transition) when events wait.
 */
export class Subscription {
  private queue: StreamEvent[] = [];
  /** For each private event, the feed position it is due at (-Infinity: before any feed event). */
  private queuePos: number[] = [];
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
  /** @internal The shared feed of its filter, once it follows live changes (until closed or drained after its end). */
  feed: Feed | undefined;
  /** @internal Its read position in the feed. */
  cursor = 0;
  /** Feed events at or after this position are not its (set when it ends). */
  private feedStop = Number.POSITIVE_INFINITY;

  constructor(
    readonly id: number,
    readonly filter: WatchFilter,
    private readonly publisher: EventPublisher,
    nowMs: number,
  ) {
    this.lastEventMs = nowMs;
  }

  private feedPending(): number {
    const f = this.feed;
    return f === undefined ? 0 : Math.max(0, Math.min(f.end, this.feedStop) - this.cursor);
  }

  get queued(): number {
    return this.queue.length - this.head + this.feedPending();
  }

  /** @internal Events counted against the live limit: everything queued but the initial state. */
  get live(): number {
    return this.queued - this.exempt;
  }

  /** @internal The feed position minus the private live events pending: its live lag is `feed.end` minus this. */
  get effectiveCursor(): number {
    return this.cursor - (this.queue.length - this.head - this.exempt);
  }

  /** Whether the next event is the head of the private queue (due before the feed event at the cursor). */
  private privateFirst(): boolean {
    return this.head < this.queue.length && (this.feedPending() === 0 || (this.queuePos[this.head] as number) <= this.cursor);
  }

  /** The next event without taking it. */
  peek(): StreamEvent | undefined {
    if (this.privateFirst()) return this.queue[this.head];
    return this.feedPending() > 0 ? this.feed?.at(this.cursor) : undefined;
  }

  /** The next event, or undefined when none is waiting. After an `end` event, always undefined. */
  next(): StreamEvent | undefined {
    let ev: StreamEvent;
    if (this.privateFirst()) {
      ev = this.queue[this.head++] as StreamEvent;
      if (this.exempt > 0) this.exempt--;
      if (this.head > 1024 && this.head * 2 > this.queue.length) {
        this.queue = this.queue.slice(this.head);
        this.queuePos = this.queuePos.slice(this.head);
        this.head = 0;
      }
    } else if (this.feed !== undefined && this.feedPending() > 0) {
      ev = this.feed.at(this.cursor++);
    } else return undefined;
    if (this.queued === 0) {
      // Drained: wait for the next append, or (ended) leave the feed for good.
      if (this.ended) this.publisher.leaveFeed(this);
      else this.feed?.idle.add(this);
    }
    return ev;
  }

  /** The consumer is gone: stop delivering. */
  close(): void {
    if (!this.ended) this.publisher.unsubscribe(this);
    this.ended = true;
    this.publisher.leaveFeed(this);
  }

  /** @internal Follows live changes from the feed's end. */
  join(feed: Feed): void {
    this.feed = feed;
    this.cursor = feed.end;
    feed.members.add(this);
    feed.minHint = Math.min(feed.minHint, this.effectiveCursor);
    if (this.queued === 0) feed.idle.add(this);
  }

  /** @internal Queues an event of its own (initial state, tail, bookmark, end). */
  push(ev: StreamEvent, limit: number, nowMs: number): void {
    if (this.ended) return;
    const wasEmpty = this.queued === 0;
    if (limit === Number.POSITIVE_INFINITY) this.exempt++;
    else if (ev.type !== 'end' && this.live >= limit) {
      this.end('SLOW_CONSUMER', `the subscriber fell more than ${limit} events behind; resume from the last revision received`, ev.revision, nowMs);
      return;
    }
    this.queue.push(ev);
    this.queuePos.push(this.feed !== undefined ? this.feed.end : Number.NEGATIVE_INFINITY);
    this.lastEventMs = nowMs;
    if (this.feed !== undefined) this.feed.minHint = Math.min(this.feed.minHint, this.effectiveCursor);
    if (wasEmpty) {
      this.feed?.idle.delete(this);
      this.onReadable?.();
    }
  }

  /** @internal Ends the stream: pending events are dropped only for a slow consumer. */
  end(code: EndCode, message: string, revision: Revision, nowMs: number): void {
    if (this.ended) return;
    if (code === 'SLOW_CONSUMER') {
      this.queue = [];
      this.queuePos = [];
      this.head = 0;
      this.exempt = 0;
      if (this.feed !== undefined) this.cursor = this.feed.end;
    }
    const wasEmpty = this.queued === 0;
    // Nothing appended from now on is its; what is already in the feed comes before the end.
    this.feedStop = this.feed !== undefined ? this.feed.end : this.feedStop;
    this.queue.push({ type: 'end', code, message, revision });
    this.queuePos.push(this.feed !== undefined ? this.feed.end : Number.NEGATIVE_INFINITY);
    this.ended = true;
    this.lastEventMs = nowMs;
    this.feed?.idle.delete(this);
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
export class EventPublisher {
  private readonly window: WindowEntry[] = [];
  private windowHead = 0;
  private windowEvents = 0;
  private windowByteCount = 0;
  /** Resumes must be from at least this revision (everything after it is in the window). */
  private compactedThrough: Revision;
  private readonly subs = new Map<number, Subscription>();
  /** The live feeds by filter (filterKey), and by topic (group and kind): a change is only offered to its topic's feeds. */
  private readonly feeds = new Map<string, Feed>();
  private readonly byTopic = new Map<string, Set<Feed>>();
  /** Subscriptions resuming from a revision not yet published here. */
  private readonly waiting = new Set<Subscription>();
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

  /** Live feeds (one per distinct filter followed), for tests and metrics. */
  get feedCount(): number {
    return this.feeds.size;
  }

  get windowSize(): number {
    return this.windowEvents;
  }

  /** The window's size in bytes (each event counted as `windowEventBytes`). */
  get windowBytes(): number {
    return this.windowByteCount;
  }

  subscribe(filter: WatchFilter, opts: SubscribeOptions = {}): Subscription {
    const now = this.o.clock.monotonicMs();
    const sub = new Subscription(this.nextId++, filter, this, now);
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
      this.follow(sub);
      return sub;
    }
    this.add(sub);
    if (opts.atTail === true) {
      sub.push({ type: 'tail', revision: current }, limit, now);
      this.follow(sub);
      return sub;
    }
    const snap = this.initialState(filter, now);
    for (const r of snap.resources) sub.push({ type: 'change', revision: r.version, resource: r }, limit, now);
    // A shared snapshot may be a little older than the present: the window covers the rest.
    this.replay(sub, snap.revision, limit, now);
    sub.push({ type: 'tail', revision: current }, limit, now);
    this.follow(sub);
    return sub;
  }

  private add(sub: Subscription): void {
    this.subs.set(sub.id, sub);
  }

  /** From now on `sub` gets every live change of its filter: it joins (or starts) the filter's feed at its end. */
  private follow(sub: Subscription): void {
    const key = filterKey(sub.filter);
    let feed = this.feeds.get(key);
    if (!feed) {
      const topic = topicOf(sub.filter.group, sub.filter.kind);
      feed = new Feed(key, topic, sub.filter);
      this.feeds.set(key, feed);
      let set = this.byTopic.get(topic);
      if (!set) {
        set = new Set();
        this.byTopic.set(topic, set);
      }
      set.add(feed);
    }
    sub.join(feed);
  }

  /** @internal A subscription no longer follows (ended or closed); it stays in its feed while it still has feed events to read. */
  unsubscribe(sub: Subscription): void {
    if (!this.subs.delete(sub.id)) return;
    this.waiting.delete(sub);
    if (sub.queued === 0) this.leaveFeed(sub);
  }

  /** @internal `sub` will read nothing more from its feed; the feed goes when its last member does. */
  leaveFeed(sub: Subscription): void {
    const feed = sub.feed;
    if (feed === undefined) return;
    sub.feed = undefined;
    feed.members.delete(sub);
    feed.idle.delete(sub);
    if (feed.members.size > 0) return;
    this.feeds.delete(feed.key);
    const set = this.byTopic.get(feed.topic);
    set?.delete(feed);
    if (set?.size === 0) this.byTopic.delete(feed.topic);
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
  private replay(sub: Subscription, after: Revision, limit: number, now: number): void {
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
      let bytes = 0;
      for (const rec of records) bytes += windowEventBytes(rec.resource);
      this.window.push({ revision, records, atMs: now, bytes });
      this.windowEvents += records.length;
      this.windowByteCount += bytes;
      this.trim(now);
    }
    const limit = this.o.subscriberBufferEvents;
    // Resumes waiting for this revision: the changes up to the one they resume from are ones
    // they already have; what follows is live. One that resumes from exactly this revision
    // follows from after this entry's changes, the others from before them.
    let caughtUpHere: Subscription[] | undefined;
    for (const sub of this.waiting) {
      const wanted = sub.waitingFor as Revision;
      if (revision < wanted) continue;
      this.waiting.delete(sub);
      sub.waitingFor = undefined;
      const tailAt = revision === wanted ? revision : ((revision - 1) as Revision);
      sub.push({ type: 'tail', revision: tailAt }, limit, now);
      if (sub.ended) continue;
      if (tailAt === revision) (caughtUpHere ??= []).push(sub);
      else this.follow(sub);
    }
    if (records.length > 0) {
      const topics = new Set<string>();
      for (const rec of records) topics.add(topicOf(rec.resource.id.type.group, rec.resource.id.type.kind));
      // One event object per record, appended once to each feed it matches: its subscribers
      // share it (events are read-only).
      const events: StreamEvent[] = records.map((rec) => ({ type: rec.kind === 'delete' ? 'delete' : 'change', revision, resource: rec.resource }));
      for (const topic of topics) {
        const feeds = this.byTopic.get(topic);
        if (!feeds) continue;
        for (const feed of feeds) {
          let appended = 0;
          for (let i = 0; i < records.length; i++) {
            if (!matches(feed.filter, (records[i] as ChangeRecord).resource)) continue;
            feed.append(events[i] as StreamEvent, now);
            appended++;
          }
          if (appended > 0) this.afterAppend(feed, limit, revision, now);
        }
      }
    }
    if (caughtUpHere) for (const sub of caughtUpHere) this.follow(sub);
  }

  /** Wakes the feed's idle members, and ends those now more than `limit` live events behind. */
  private afterAppend(feed: Feed, limit: number, revision: Revision, now: number): void {
    if (feed.end - feed.minHint > limit) {
      // Someone may be over the limit: count exactly (O(members), and only when one may be).
      let min = feed.end;
      for (const m of feed.members) {
        if (m.ended) continue;
        if (m.live > limit) {
          m.end('SLOW_CONSUMER', `the subscriber fell more than ${limit} events behind; resume from the last revision received`, revision, now);
          this.slowConsumersEnded++;
          continue;
        }
        min = Math.min(min, m.effectiveCursor);
      }
      feed.minHint = min;
    }
    if (feed.idle.size === 0) return;
    const woken = feed.idle;
    feed.idle = new Set();
    for (const m of woken) m.onReadable?.();
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
    this.windowByteCount = 0;
    this.cache.clear();
    // The new state's revision can be below `revision` (entries after the last change carried
    // none); a watcher at exactly that revision has missed nothing.
    this.compactedThrough = this.source.current().revision;
  }

  /** Periodic duties: bookmarks for quiet subscribers, future-revision waits, age-based trimming. */
  tick(): void {
    const now = this.o.clock.monotonicMs();
    this.trim(now);
    for (const feed of this.feeds.values()) feed.trim();
    const current = this.revision;
    for (const sub of [...this.subs.values()]) {
      if (sub.waitingFor !== undefined) {
        if (current >= sub.waitingFor) {
          sub.waitingFor = undefined;
          this.waiting.delete(sub);
          sub.push({ type: 'tail', revision: current }, this.o.subscriberBufferEvents, now);
          if (!sub.ended) this.follow(sub);
        } else if (now - sub.waitingSinceMs > this.o.futureRevisionTimeoutMs) {
          sub.end('TIMEOUT', `this node has not reached revision ${sub.waitingFor} (at ${current}); resume on another node or later`, current, now);
        }
        continue;
      }
      // Quiet: nothing queued for it, and nothing appended to its feed, for the interval.
      const lastMs = Math.max(sub.lastEventMs, sub.feed?.lastAppendMs ?? Number.NEGATIVE_INFINITY);
      if (now - lastMs >= this.o.bookmarkIntervalMs) sub.push({ type: 'bookmark', revision: current }, this.o.subscriberBufferEvents, now);
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
      if (this.windowEvents <= this.o.maxWindowEvents && this.windowByteCount <= this.o.maxWindowBytes && now - oldest.atMs <= this.o.maxWindowAgeMs) break;
      this.windowEvents -= oldest.records.length;
      this.windowByteCount -= oldest.bytes;
      this.compactedThrough = oldest.revision;
      this.windowHead++;
    }
    if (this.windowHead > 4096 && this.windowHead * 2 > this.window.length) {
      this.window.splice(0, this.windowHead);
      this.windowHead = 0;
    }
  }
}
