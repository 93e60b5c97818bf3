import { CairnError, ErrorCode, type Clock, type Revision } from '../base/index.js';
import type { Resource } from '../store/index.js';
import type { EndCode, EventPublisher, Subscription } from '../stream/index.js';
import type { AuditLog, DeniedRecord } from './audit.js';
import { StreamCounter } from './limits.js';
import { resourceToJson } from './resource-json.js';
import { parseVersion, type CallContext, type ListAccess, type ListFilter, type ResourceService } from './resource-service.js';
import { START_WAIT_DEFAULT_MS, type ServedNode } from './served-node.js';

/** Limits of one watch stream. */
export const WATCH_LIMITS = {
  /** Watches in one request. */
  watchesPerStream: 64,
  /** Events handed to the transport in one write, at most. */
  batchEvents: 256,
  /** Bytes (as the transport encodes them) handed over in one write, at most (one event may exceed it alone). */
  batchBytes: 256 * 1024,
  /** A stream ended while its reader is stalled is cut after this long if the reader never takes its end. */
  stalledEndGraceMs: 10_000,
} as const;

/** One watch of a request, as the HTTP and gRPC front ends give it (not yet validated). */
export interface WatchSpec {
  readonly type: string;
  readonly partition?: string | undefined;
  readonly namespace?: string | undefined;
  readonly namePrefix?: string | undefined;
  /** Decimal revision: resume after it. Absent or empty: the initial state first. */
  readonly gtRevision?: string | undefined;
  /**
   * No `tail` event. Alone: live events only (no initial state). With `gtRevision` (the resume
   * request of the watch API this one follows, Nexodus's): the changes after it, then live
   * events, without the tail marker the client has already seen.
   */
  readonly atTail?: boolean | undefined;
  /**
   * Consul's framing (gRPC): a resume the node cannot serve (or a reset) gets
   * new-snapshot-to-follow, a fresh initial state and end-of-snapshot instead of an error; a
   * fresh watch's initial state ends with end-of-snapshot; a resume has no marker.
   */
  readonly snapshotOnCompacted?: boolean | undefined;
}

/**
 * What a session hands its transport, in order. Change and delete events are `SharedChangeEvent`s
 * (one object per stored version, kind, watch index and revision, whatever the number of
 * streams sending it); transports may also be handed plain objects of this shape (tests).
 */
export type WatchEvent =
  | { readonly kind: 'change' | 'delete'; readonly watch: number; readonly revision: Revision; readonly resource: Resource }
  | { readonly kind: 'tail' | 'new-snapshot-to-follow' | 'end-of-snapshot'; readonly watch: number; readonly revision: Revision }
  | { readonly kind: 'bookmark'; readonly revision: Revision };

/**
 * A change or delete event as every session sends it: built once per (stored version, kind,
 * watch index, revision) and shared by every stream that sends it, so a transport encodes it
 * once however many watchers get it (`encoded`, one slot per transport) and a session allocates
 * nothing per event it hands over. Read-only apart from those caches.
 */
export class SharedChangeEvent {
  /** The event's WatchList message, made once for every unbatched gRPC watcher that gets it. */
  readonly encoded: { grpc?: Buffer } = {};

  constructor(
    readonly kind: 'change' | 'delete',
    readonly watch: number,
    readonly revision: Revision,
    readonly resource: Resource,
  ) {}
}

/**
 * The shared events made from each stored version (usually one: its change at the version's
 * revision to watch 0). A version's entry goes with it; the few-entry array is searched.
 */
const sharedEvents = new WeakMap<Resource, SharedChangeEvent | SharedChangeEvent[]>();

/** The one SharedChangeEvent for (kind, watch index, revision) of `resource`. */
export function sharedChangeEvent(kind: 'change' | 'delete', watch: number, revision: Revision, resource: Resource): SharedChangeEvent {
  const cached = sharedEvents.get(resource);
  if (cached === undefined) {
    const ev = new SharedChangeEvent(kind, watch, revision, resource);
    sharedEvents.set(resource, ev);
    return ev;
  }
  const same = (e: SharedChangeEvent): boolean => e.kind === kind && e.watch === watch && e.revision === revision;
  if (!Array.isArray(cached)) {
    if (same(cached)) return cached;
    const ev = new SharedChangeEvent(kind, watch, revision, resource);
    sharedEvents.set(resource, [cached, ev]);
    return ev;
  }
  for (const e of cached) if (same(e)) return e;
  const ev = new SharedChangeEvent(kind, watch, revision, resource);
  cached.push(ev);
  return ev;
}

/** A transport's side of a session (an HTTP response, a gRPC call). */
export interface WatchSink {
  /** Writes events in order; false when the consumer is not keeping up (call `onDrain` then). */
  send(events: readonly WatchEvent[]): boolean;
  /** Calls `cb` once when the transport can take more. */
  onDrain(cb: () => void): void;
  /** Ends the stream: with an error (and the watch it concerns), or cleanly. */
  end(error: CairnError | undefined, watch: number | undefined): void;
  /** The bytes an event takes on this transport (bounds one write). Default: not bounded by size. */
  sizeOf?(ev: WatchEvent): number;
  /** Bytes (by `sizeOf`) of one `send`, at most, when below WATCH_LIMITS.batchBytes (one event may exceed it alone). */
  readonly maxBatchBytes?: number | undefined;
}

export interface WatchMetricsHooks {
  onEvents?(n: number): void;
  onEnded?(code: string): void;
  /** A new watch refused by a cap. */
  onRefused?(limit: 'node' | 'connection'): void;
}

export interface WatchServiceOptions {
  readonly clock: Clock;
  /** A quiet stream gets a bookmark this often (ms). Default 5,000. */
  readonly bookmarkIntervalMs?: number;
  readonly metrics?: WatchMetricsHooks;
  /** Events handed to transports per event-loop turn, over all streams, before yielding. Default 4,096. */
  readonly fanoutEventsPerTurn?: number;
  /** Watch streams open at once on this node, over HTTP and gRPC (0 = no cap). Default 0. */
  readonly maxStreams?: number;
  /** Watch streams open at once on one connection (0 = no cap). Default 0. */
  readonly maxStreamsPerConnection?: number;
  /** Where a stream ended with UNAUTHENTICATED or PERMISSION_DENIED (a revoked token) is recorded. */
  readonly audit?: AuditLog;
}

/** Where a watch comes from: its connection (for the per-connection cap) and who asked (for the audit log). */
export interface WatchOrigin {
  readonly connection?: unknown;
  readonly caller?: Omit<DeniedRecord, 'code' | 'message'>;
}

interface WatchState {
  readonly index: number;
  readonly filter: ListFilter;
  /** What the caller may see of it (re-checked on every tick: a revoked grant ends the watch). */
  access: ListAccess | undefined;
  /** The reader wants no tail marker (at_tail); a fresh initial state after framing's new-snapshot-to-follow still ends with its marker. */
  atTail: boolean;
  readonly framed: boolean;
  sub: Subscription;
  /** The subscription started from the initial state (its tail ends a snapshot). */
  fresh: boolean;
  pastTail: boolean;
}

const END_TO_ERROR: Record<Exclude<EndCode, never>, ErrorCode> = {
  COMPACTED: ErrorCode.COMPACTED,
  SLOW_CONSUMER: ErrorCode.SLOW_CONSUMER,
  RESET: ErrorCode.RESET,
  TIMEOUT: ErrorCode.TIMEOUT,
  CLOSED: ErrorCode.UNAVAILABLE,
};

/**
 * One watch stream: several subscriptions of the node's event publisher multiplexed onto one
 * transport. Per watch, events keep the publisher's order (initial state, tail, live changes in
 * commit order); across watches, live events go out in revision order. Events are taken from
 * the subscriptions only while the transport keeps up, so a slow reader's backlog stays in its
 * bounded subscription queues, where the publisher ends it with SLOW_CONSUMER.
 */
export class WatchSession {
  private readonly states: WatchState[] = [];
  private scheduled = false;
  private waitingDrain = false;
  private closed = false;
  lastSentMs: number;

  constructor(
    private readonly service: WatchService,
    private readonly publisher: EventPublisher,
    private readonly sink: WatchSink,
    nowMs: number,
    private readonly ctx: CallContext = {},
    /** Gives back this stream's place under the watch caps (once, on close). */
    private readonly release: () => void = () => {},
    private readonly origin: WatchOrigin = {},
  ) {
    this.lastSentMs = nowMs;
  }

  /**
   * @internal The caller's grants again (the service's tick): a token deleted, expired or no
   * longer granted `watch` on a watch's filter ends the stream with PERMISSION_DENIED; a narrower
   * grant narrows what is sent from now on.
   */
  recheck(resources: ResourceService): void {
    if (this.closed || this.states.every((s) => s.access === undefined)) return;
    let identity;
    try {
      identity = resources.identifyNow(this.ctx);
    } catch {
      this.finish(new CairnError(ErrorCode.PERMISSION_DENIED, "the watch's token is no longer valid (revoked or expired)"), undefined);
      return;
    }
    if (identity === undefined) return;
    for (const st of this.states) {
      try {
        st.access = resources.listAccess(identity, st.filter, 'watch');
      } catch (e) {
        const message = e instanceof CairnError ? e.message : String(e);
        this.finish(new CairnError(ErrorCode.PERMISSION_DENIED, `watch ${st.index}: ${message}`, { watch: st.index }), st.index);
        return;
      }
    }
  }

  /** @internal */
  add(index: number, filter: ListFilter, spec: WatchSpec, gtRevision: Revision | undefined, access?: ListAccess): void {
    // With gt_revision the publisher replays the changes after it and then tails; at_tail only
    // keeps that tail from the reader (Nexodus's resume request).
    const atTail = spec.atTail === true;
    const sub = this.publisher.subscribe(filter, gtRevision !== undefined ? { gtRevision } : { atTail });
    const st: WatchState = { index, filter, access, atTail, framed: spec.snapshotOnCompacted === true, sub, fresh: gtRevision === undefined && !atTail, pastTail: false };
    this.watchReadable(st);
    this.states.push(st);
  }

  private watchReadable(st: WatchState): void {
    st.sub.onReadable = () => {
      // A subscription ended while the reader is stalled (SLOW_CONSUMER drops its queue, so
      // the end is all that is left): end the stream now rather than when the reader drains,
      // which a stuck reader never does; the transport cuts it if even the end is not taken.
      if (this.waitingDrain && st.sub.ended && st.sub.queued === 1 && st.sub.peek()?.type === 'end') {
        const ev = st.sub.next();
        if (ev?.type === 'end') this.finish(new CairnError(END_TO_ERROR[ev.code], ev.message, { watch: st.index, revision: String(ev.revision) }), st.index);
        return;
      }
      this.schedule();
    };
  }

  /** @internal */
  schedule(): void {
    if (this.scheduled || this.closed || this.waitingDrain) return;
    this.scheduled = true;
    this.service.enqueue(this);
  }

  /** @internal Called by the service's fan-out loop: one pump; returns the events handed over. */
  run(): number {
    this.scheduled = false;
    return this.pump();
  }

  /** Whether every watch is live and nothing waits to be sent: a bookmark would be true now. */
  get idle(): boolean {
    if (this.closed || this.waitingDrain || this.scheduled) return false;
    return this.states.every((s) => s.pastTail && s.sub.queued === 0);
  }

  /** @internal Sends a bookmark if the stream is idle and has been quiet for `intervalMs`. */
  maybeBookmark(nowMs: number, intervalMs: number): void {
    if (nowMs - this.lastSentMs < intervalMs || !this.idle) return;
    this.write([{ kind: 'bookmark', revision: this.publisher.revision }], nowMs);
  }

  /** The next subscription to take from: a watch still sending its initial state first, then the oldest live event. */
  private pick(): WatchState | undefined {
    let best: WatchState | undefined;
    let bestRev = Number.POSITIVE_INFINITY;
    for (const st of this.states) {
      const head = st.sub.peek();
      if (head === undefined) continue;
      if (!st.pastTail) return st;
      if (head.revision < bestRev) {
        best = st;
        bestRev = head.revision;
      }
    }
    return best;
  }

  private pump(): number {
    if (this.closed || this.waitingDrain) return 0;
    const now = this.service.clock.monotonicMs();
    const batch: WatchEvent[] = [];
    let bytes = 0;
    const maxBytes = Math.min(WATCH_LIMITS.batchBytes, this.sink.maxBatchBytes ?? WATCH_LIMITS.batchBytes);
    while (batch.length < WATCH_LIMITS.batchEvents && bytes < maxBytes) {
      const st = this.pick();
      if (st === undefined) break;
      const ev = st.sub.next();
      if (ev === undefined) break;
      switch (ev.type) {
        case 'change':
        case 'delete': {
          // An item the caller may not see is never sent (issue 16 item 2).
          if (st.access !== undefined && !st.access.visible(ev.resource)) break;
          const out = sharedChangeEvent(ev.type, st.index, ev.revision, ev.resource);
          batch.push(out);
          if (this.sink.sizeOf) bytes += this.sink.sizeOf(out);
          break;
        }
        case 'tail':
          st.pastTail = true;
          if (st.atTail) break;
          if (!st.framed) batch.push({ kind: 'tail', watch: st.index, revision: ev.revision });
          else if (st.fresh) batch.push({ kind: 'end-of-snapshot', watch: st.index, revision: ev.revision });
          break;
        case 'bookmark':
          break; // the session sends its own, covering every watch
        case 'end': {
          if (st.framed && (ev.code === 'COMPACTED' || ev.code === 'RESET')) {
            // Consul's framing: rebuild the view in place.
            batch.push({ kind: 'new-snapshot-to-follow', watch: st.index, revision: ev.revision });
            st.sub = this.publisher.subscribe(st.filter);
            st.fresh = true;
            st.atTail = false; // the fresh initial state must be closed by end-of-snapshot
            st.pastTail = false;
            this.watchReadable(st);
            break;
          }
          this.write(batch, now);
          const code = END_TO_ERROR[ev.code];
          this.finish(new CairnError(code, ev.message, { watch: st.index, revision: String(ev.revision) }), st.index);
          return batch.length;
        }
      }
    }
    if (batch.length > 0) this.write(batch, now);
    if (!this.waitingDrain && this.states.some((s) => s.sub.queued > 0)) this.schedule();
    return batch.length;
  }

  private write(batch: readonly WatchEvent[], nowMs: number): void {
    if (batch.length === 0 || this.closed) return;
    this.lastSentMs = nowMs;
    this.service.opts.metrics?.onEvents?.(batch.length);
    if (!this.sink.send(batch)) {
      this.waitingDrain = true;
      this.sink.onDrain(() => {
        this.waitingDrain = false;
        this.schedule();
      });
    }
  }

  private finish(error: CairnError | undefined, watch: number | undefined): void {
    if (this.closed) return;
    this.service.opts.metrics?.onEnded?.(error?.code ?? 'OK');
    // A stream the node ends because its caller lost the right to it is a denied request.
    if (error !== undefined && this.origin.caller !== undefined) this.service.opts.audit?.denied({ ...this.origin.caller, code: error.code, message: error.message });
    this.close();
    this.sink.end(error, watch);
  }

  /** The consumer went away (or the stream ended): release every subscription. Idempotent. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const st of this.states) st.sub.close();
    this.release();
    this.service.forget(this);
  }
}

/**
 * The watch operation of API.md ("Watch") for both front ends: validates the watches (as List
 * validates its filter, access hooks included), subscribes them to this node's event
 * publisher, and drives the periodic duties (the publisher's tick, bookmarks).
 */
export class WatchService {
  private readonly sessions = new Set<WatchSession>();
  private closing = false;
  private runnable: WatchSession[] = [];
  private turnScheduled = false;
  /** Fan-out turns run so far (for tests). */
  turns = 0;
  readonly fanoutEventsPerTurn: number;
  readonly clock: Clock;
  readonly bookmarkIntervalMs: number;
  /** The watch-stream caps (per node, per connection). */
  readonly streams: StreamCounter;

  constructor(
    private readonly node: Pick<ServedNode, 'publisher' | 'publisherNow'>,
    private readonly resources: ResourceService,
    readonly opts: WatchServiceOptions,
  ) {
    this.clock = opts.clock;
    this.bookmarkIntervalMs = opts.bookmarkIntervalMs ?? 5_000;
    this.fanoutEventsPerTurn = opts.fanoutEventsPerTurn ?? 4_096;
    this.streams = new StreamCounter(opts.maxStreams ?? 0, opts.maxStreamsPerConnection ?? 0, 'watch streams', (limit) => opts.metrics?.onRefused?.(limit));
  }

  get activeSessions(): number {
    return this.sessions.size;
  }

  /**
   * Validates `specs` and opens a session writing to `sink`. Rejects (before anything is sent)
   * on a bad request, or with UNAVAILABLE while the node is stopping. A watch that arrives while
   * the node starts waits for it (at most `ctx.timeoutMs`, default START_WAIT_DEFAULT_MS): its
   * initial state is then the started node's.
   */
  async open(specs: readonly WatchSpec[], ctx: CallContext, sink: WatchSink, origin: WatchOrigin = {}): Promise<WatchSession> {
    if (specs.length === 0) throw new CairnError(ErrorCode.INVALID_ARGUMENT, 'a watch request needs at least one watch');
    if (specs.length > WATCH_LIMITS.watchesPerStream) throw new CairnError(ErrorCode.INVALID_ARGUMENT, `at most ${WATCH_LIMITS.watchesPerStream} watches per stream, got ${specs.length}`);
    const checked = specs.map((s, i) => {
      try {
        const filter = this.resources.listFilter(s);
        const gtRevision = parseVersion(s.gtRevision, 'gt_revision');
        return { filter, gtRevision };
      } catch (e) {
        if (e instanceof CairnError) throw new CairnError(e.code, `watch ${i}: ${e.message}`, { ...e.details, watch: i });
        throw e;
      }
    });
    const stopping = (): CairnError => new CairnError(ErrorCode.UNAVAILABLE, 'this node is shutting down; watch through another node');
    if (this.closing) throw stopping();
    const identity = await this.resources.identifyCall(ctx);
    const accesses = checked.map((c, i) => {
      try {
        return this.resources.listAccess(identity, c.filter, 'watch');
      } catch (e) {
        if (e instanceof CairnError) throw new CairnError(e.code, `watch ${i}: ${e.message}`, { ...e.details, watch: i });
        throw e;
      }
    });
    const limited = identity.kind !== 'open';
    // The place is taken before waiting for a starting node, so waiting watches count too.
    const release = this.streams.acquire(origin.connection);
    let pub: EventPublisher;
    try {
      pub = this.node.publisherNow() ?? (await this.node.publisher(ctx.timeoutMs ?? START_WAIT_DEFAULT_MS));
      if (this.closing) throw stopping();
    } catch (e) {
      release();
      throw e;
    }
    const session = new WatchSession(this, pub, sink, this.clock.monotonicMs(), ctx, release, origin);
    checked.forEach((c, i) => session.add(i, c.filter, specs[i] as WatchSpec, c.gtRevision, limited ? accesses[i] : undefined));
    this.sessions.add(session);
    session.schedule();
    return session;
  }

  /** The node is stopping: refuse new watches and end the open ones (UNAVAILABLE: resume elsewhere). */
  close(): void {
    this.closing = true;
    this.node.publisherNow()?.close();
  }

  /**
   * @internal The fan-out loop: sessions with events to send wait in one queue, and each turn
   * of the event loop hands over at most `fanoutEventsPerTurn` events before yielding, so
   * however many watchers there are, Raft messages, proposals and reads get their turns in
   * between (watchers that cannot be served in time fall behind and end as slow consumers,
   * rather than writes stalling).
   */
  enqueue(s: WatchSession): void {
    this.runnable.push(s);
    if (!this.turnScheduled) {
      this.turnScheduled = true;
      setImmediate(() => this.turn());
    }
  }

  private turn(): void {
    this.turnScheduled = false;
    let budget = this.fanoutEventsPerTurn;
    let i = 0;
    // Sessions enqueued during this turn (by a pump that could not finish) go to the next one.
    const end = this.runnable.length;
    for (; i < end && budget > 0; i++) budget -= (this.runnable[i] as WatchSession).run();
    this.runnable.splice(0, i);
    this.turns++;
    if (this.runnable.length > 0 && !this.turnScheduled) {
      this.turnScheduled = true;
      setImmediate(() => this.turn());
    }
  }

  /** @internal */
  forget(s: WatchSession): void {
    this.sessions.delete(s);
  }

  /** Periodic duties: the publisher's (waits, trimming), then bookmarks for quiet streams. */
  tick(): void {
    this.node.publisherNow()?.tick();
    const now = this.clock.monotonicMs();
    for (const s of this.sessions) {
      s.recheck(this.resources);
      s.maybeBookmark(now, this.bookmarkIntervalMs);
    }
  }
}

/** A resource's JSON text as the watch sends it, built once per stored version however many watchers get it. */
const jsonText = new WeakMap<Resource, string>();

export function resourceJsonText(r: Resource): string {
  let t = jsonText.get(r);
  if (t === undefined) {
    t = JSON.stringify(resourceToJson(r));
    jsonText.set(r, t);
  }
  return t;
}
