import * as grpc from '@grpc/grpc-js';
import { CairnClientError, ClientErrorCode } from './errors.js';
import type { Resource } from './types.js';
import { decodeFailure, ERROR_CODE_KEY, resourceFromMsg, type AttemptFailure, type WatchEventMsg, type WatchListRequestMsg, type WatchMsg } from './wire.js';

/**
 * Watches (API.md "Watch") over the server-streaming gRPC call WatchList, resumed across lost
 * streams and failed nodes so that the consumer sees every change once, in commit order.
 *
 * The rules, per watch of a stream:
 *
 * - While the server sends an initial state (a watch without `gtRevision`, or after a reset)
 *   revisions are not ordered, so nothing can be resumed: a stream lost before the watch's
 *   `tail` starts the watch over, with a `reset` event first if any of it was delivered.
 * - After the tail (or from the start, for a watch with `gtRevision` or `atTail`) events come in
 *   commit order, and the client remembers the revision through which every event was queued.
 *   One log entry's events (a cascading delete) share a revision and a stream can break
 *   between them, so the resume point is the last revision seen *complete*, and the events of
 *   the incomplete one already delivered are recognised by key and skipped: no gap, no
 *   duplicate.
 * - COMPACTED or RESET (the resume point is gone): a `reset` event, then a fresh initial state
 *   and a tail. With `snapshotOnCompacted` the server does this inside the stream
 *   (new_snapshot_to_follow ... end_of_snapshot), which the client turns into the same `reset`
 *   ... `tail` sequence.
 * - Lost connection, node shutting down (UNAVAILABLE), TIMEOUT, SLOW_CONSUMER, RATE_LIMITED:
 *   reconnect with jittered exponential backoff (at least the Retry-After a RATE_LIMITED node
 *   asked for), moving to the next endpoint when the node failed, and resume.
 * - Anything retrying cannot fix (INVALID_ARGUMENT, NOT_FOUND type, UNAUTHENTICATED,
 *   PERMISSION_DENIED, NO_SPACE, ...) ends
 *   the iteration with that CairnClientError. Nothing else ends it but `close()` or the signal.
 */

/** One watch: a type (`demo.Artist` without the group version: every version), a tenancy (`*` wildcards) and a name prefix, as for List. */
export interface WatchSpec {
  readonly type: string;
  /** `*` for every partition; empty or absent: `default`. */
  readonly partition?: string;
  /** `*` for every namespace; empty or absent: `default`. */
  readonly namespace?: string;
  readonly namePrefix?: string;
  /** Resume after this revision (decimal): every change after it, in commit order, then `tail`. Absent: the initial state first. */
  readonly gtRevision?: string;
  /**
   * No `tail`. Alone: live changes only, no initial state (the client starts it at the current
   * revision, so it too resumes without a gap). With `gtRevision`: every change after it, then
   * live changes, and no `tail` (the resume request of a consumer that has had its tail
   * already; sent to the server as `at_tail` with `gt_revision`).
   */
  readonly atTail?: boolean;
  /**
   * Consul's framing (used by MaterializedView and informers): a resume the server can no
   * longer serve is answered inside the stream with a fresh initial state instead of ending it
   * with COMPACTED; the consumer sees the same `reset` ... `tail` sequence either way.
   */
  readonly snapshotOnCompacted?: boolean;
}

/** Why a watch starts over. */
export type WatchResetReason =
  /** The resume point is older than the server's retained window. */
  | 'COMPACTED'
  /** The node's state was replaced (snapshot installed or restored). */
  | 'RESET'
  /** The server announced a fresh snapshot (snapshotOnCompacted framing). */
  | 'NEW_SNAPSHOT'
  /** The stream was lost in the middle of the watch's initial state. */
  | 'INTERRUPTED';

/**
 * What a watch yields. `watch` is the index of the watch in the request; revisions are decimal
 * strings. `reset` means the consumer must drop what it knows of that watch: a fresh initial
 * state follows, ended by `tail`.
 */
export type WatchEvent<D = unknown> =
  /** Created or updated at `revision` (in an initial state: its current state, `revision` = its version). */
  | { readonly type: 'change'; readonly watch: number; readonly revision: string; readonly resource: Resource<D> }
  /** Deleted at `revision`; `resource` is the last stored state. */
  | { readonly type: 'delete'; readonly watch: number; readonly revision: string; readonly resource: Resource<D> }
  /** The initial state up to `revision` has been delivered; what follows is live. Once per initial state (none for atTail). */
  | { readonly type: 'tail'; readonly watch: number; readonly revision: string }
  /** Every change of every watch up to `revision` has been delivered (quiet streams; do not depend on its timing). */
  | { readonly type: 'bookmark'; readonly revision: string }
  | { readonly type: 'reset'; readonly watch: number; readonly reason: WatchResetReason; readonly message: string };

/** Where a watch reports what it does (pino's logger fits). */
export interface WatchLogger {
  debug?(obj: Record<string, unknown>, msg: string): void;
  info?(obj: Record<string, unknown>, msg: string): void;
  warn?(obj: Record<string, unknown>, msg: string): void;
}

export interface WatchOptions {
  /** Ends the watch (the iteration finishes; no error). */
  readonly signal?: AbortSignal;
  /**
   * Events held for a consumer that does not keep up, at most; beyond it the stream is paused
   * (gRPC flow control pushes back to the server, which may end it with SLOW_CONSUMER; the
   * watch then resumes once the consumer has caught up). Default 1,024. The stream pauses
   * between messages, so one WatchListBatched message (at most 256 events) may take the buffer
   * past this.
   */
  readonly maxBufferedEvents?: number;
  /** First reconnect delay in ms; doubles per failed attempt (jittered). Default 50. */
  readonly reconnectBaseMs?: number;
  /** Longest reconnect delay in ms. Default 2,000. */
  readonly reconnectMaxMs?: number;
  /** End with UNAVAILABLE when no node has served the watch for this long (ms). Default: never (keep trying). */
  readonly unavailableTimeoutMs?: number;
  readonly logger?: WatchLogger;
}

export const WATCH_DEFAULTS = {
  maxBufferedEvents: 1024,
  reconnectBaseMs: 50,
  reconnectMaxMs: 2_000,
  /** The server's limit of watches on one stream. */
  maxWatches: 64,
} as const;

/** What a watch has been through; for diagnostics and tests. */
export interface WatchStats {
  /** Streams opened (the first and every reconnect). */
  streams: number;
  /** Reset events delivered. */
  resets: number;
  /** Events the server sent again after a resume and the client dropped. */
  duplicatesDropped: number;
  /** Lost streams by error code (`SLOW_CONSUMER`, `UNAVAILABLE`, `ENDED` for a stream the server ended cleanly). */
  readonly lostBy: Record<string, number>;
  lastError: { readonly code: string; readonly message: string; readonly endpoint: string } | undefined;
}

/** @internal What a watch needs from its CairnClient. */
export interface WatchTransport {
  readonly endpoints: readonly string[];
  /** Index of the endpoint to try first. */
  readonly firstEndpoint: number;
  /**
   * Opens a watch call: WatchListBatched unless the endpoint is known to lack it (`unbatched`),
   * then WatchList. Either way each message decodes to the events it carries, in order.
   */
  open(endpoint: number, req: WatchListRequestMsg): { readonly call: grpc.ClientReadableStream<readonly WatchEventMsg[]>; readonly batched: boolean };
  /** The endpoint answered WatchListBatched UNIMPLEMENTED: its watches use WatchList from now on. */
  unbatched(endpoint: number): void;
  /** The cluster's current revision (an empty linearizable List of the watch's type): where an atTail watch starts. */
  currentRevision(spec: WatchSpec, signal: AbortSignal): Promise<string>;
  /** The watch ended; the client forgets it. */
  forget(w: WatchStream<unknown>): void;
}

interface Track {
  readonly spec: WatchSpec;
  /** How the server sends this watch on the current stream: an initial state (revisions unordered), or changes in commit order. */
  mode: 'initial' | 'ordered';
  /** Ordered mode: every change of this watch up to this revision has been queued. */
  through: bigint | undefined;
  /** Changes at this revision (> through) queued so far, by key: one entry's events share a revision, and a stream may break between them. */
  partial: bigint | undefined;
  readonly partialKeys: Set<string>;
  /** The consumer has had the tail of its current initial state (or wants none: atTail). */
  tailed: boolean;
  /** Initial-state events were queued since the last reset: starting over must reset first. */
  dirty: boolean;
  /** An atTail watch that does not know its starting revision yet. */
  needsStart: boolean;
}

type StreamEnd =
  | { readonly kind: 'failure'; readonly failure: AttemptFailure; readonly progressed: boolean }
  | { readonly kind: 'ended'; readonly progressed: boolean }
  | { readonly kind: 'outage'; readonly progressed: false }
  | { readonly kind: 'final'; readonly error: CairnClientError }
  | { readonly kind: 'closed' };

const DECIMAL = /^(0|[1-9][0-9]*)$/;

/**
 * Codes a watch retries when the server's handler sends them. RATE_LIMITED: the node is at its
 * cap of streams or watches, or the token's rate; the watch waits the Retry-After the node
 * asked for (or backs off) and tries the next node. UNAUTHENTICATED and PERMISSION_DENIED (a
 * token deleted or losing its grant ends the watch) are final.
 */
const SERVER_RETRY = new Set<string>([ClientErrorCode.UNAVAILABLE, ClientErrorCode.TIMEOUT, ClientErrorCode.SLOW_CONSUMER, ClientErrorCode.COMPACTED, ClientErrorCode.RESET, ClientErrorCode.RATE_LIMITED]);
/** gRPC statuses without a Cairn code that mean the transport failed (connection lost or refused, stream reset). */
const TRANSPORT_RETRY = new Set<number>([grpc.status.UNAVAILABLE, grpc.status.INTERNAL, grpc.status.UNKNOWN, grpc.status.CANCELLED, grpc.status.DEADLINE_EXCEEDED]);

function invalid(msg: string): CairnClientError {
  return new CairnClientError(ClientErrorCode.INVALID_ARGUMENT, msg);
}

/** Identity of a resource within a watch: type, tenancy, name. */
function eventKey(r: Resource<unknown>): string {
  return `${r.id.type}|${r.id.tenancy.partition}|${r.id.tenancy.namespace}|${r.id.name}`;
}

/** Checks the watches of a request before anything is sent (the server checks the rest: types, tenancy, access). */
export function checkWatchSpecs(specs: readonly WatchSpec[]): void {
  if (!Array.isArray(specs) || specs.length === 0) throw invalid('a watch needs at least one WatchSpec');
  if (specs.length > WATCH_DEFAULTS.maxWatches) throw invalid(`at most ${WATCH_DEFAULTS.maxWatches} watches per stream, got ${specs.length}`);
  specs.forEach((s, i) => {
    if (typeof s !== 'object' || s === null) throw invalid(`watch ${i} must be an object {type, partition?, namespace?, namePrefix?, gtRevision?, atTail?}`);
    if (typeof s.type !== 'string' || s.type === '') throw invalid(`watch ${i}: type is required`);
    for (const k of ['partition', 'namespace', 'namePrefix'] as const) {
      if (s[k] !== undefined && typeof s[k] !== 'string') throw invalid(`watch ${i}: ${k} must be a string`);
    }
    if (s.gtRevision !== undefined && (typeof s.gtRevision !== 'string' || !DECIMAL.test(s.gtRevision))) {
      throw invalid(`watch ${i}: gtRevision must be a decimal revision such as "42", got ${JSON.stringify(s.gtRevision)}`);
    }
    if (s.atTail !== undefined && typeof s.atTail !== 'boolean') throw invalid(`watch ${i}: atTail must be a boolean`);
  });
}

function checkCount(v: number, what: string, min: number): number {
  if (typeof v !== 'number' || !Number.isFinite(v) || v < min) throw invalid(`${what} must be a number >= ${min}, got ${String(v)}`);
  return v;
}

/**
 * A running watch: an async iterable of WatchEvents (one consumer), closed by `close()`,
 * `break` out of `for await`, or the signal. See the top of this file for the rules.
 */
export class WatchStream<D = unknown> implements AsyncIterableIterator<WatchEvent<D>> {
  readonly stats: WatchStats = { streams: 0, resets: 0, duplicatesDropped: 0, lostBy: {}, lastError: undefined };
  private readonly tracks: Track[];
  private readonly maxBuffered: number;
  private readonly lowWater: number;
  private readonly baseMs: number;
  private readonly maxMs: number;
  private readonly outageMs: number;
  private readonly logger: WatchLogger;
  private readonly abort = new AbortController();
  private endpointIndex: number;
  private queue: Array<WatchEvent<D>> = [];
  private head = 0;
  private waiter: { resolve: (r: IteratorResult<WatchEvent<D>>) => void; reject: (e: unknown) => void } | undefined;
  private roomWaiter: (() => void) | undefined;
  private call: grpc.ClientReadableStream<readonly WatchEventMsg[]> | undefined;
  private closed = false;
  private finalError: CairnClientError | undefined;
  /** Since when (ms) no stream has been served: the start, or the loss of the last stream that was. */
  private unservedSinceMs = Date.now();
  private lastBookmark = -1n;

  /** @internal Use CairnClient.watch. */
  constructor(
    private readonly transport: WatchTransport,
    specs: readonly WatchSpec[],
    opts: WatchOptions = {},
  ) {
    checkWatchSpecs(specs);
    this.maxBuffered = checkCount(opts.maxBufferedEvents ?? WATCH_DEFAULTS.maxBufferedEvents, 'maxBufferedEvents', 1);
    this.lowWater = Math.floor(this.maxBuffered / 2);
    this.baseMs = checkCount(opts.reconnectBaseMs ?? WATCH_DEFAULTS.reconnectBaseMs, 'reconnectBaseMs', 1);
    this.maxMs = checkCount(opts.reconnectMaxMs ?? WATCH_DEFAULTS.reconnectMaxMs, 'reconnectMaxMs', 1);
    this.outageMs = opts.unavailableTimeoutMs === undefined ? Number.POSITIVE_INFINITY : checkCount(opts.unavailableTimeoutMs, 'unavailableTimeoutMs', 1);
    this.logger = opts.logger ?? {};
    this.endpointIndex = transport.firstEndpoint;
    this.tracks = specs.map((spec) => ({
      spec: { ...spec },
      mode: spec.gtRevision !== undefined ? 'ordered' : 'initial',
      through: spec.gtRevision !== undefined ? BigInt(spec.gtRevision) : undefined,
      partial: undefined,
      partialKeys: new Set<string>(),
      // atTail: the consumer gets no tail (with gtRevision the server sends none either).
      tailed: spec.atTail === true,
      dirty: false,
      needsStart: spec.atTail === true && spec.gtRevision === undefined,
    }));
    const signal = opts.signal;
    if (signal?.aborted) this.close();
    else {
      signal?.addEventListener('abort', () => this.close(), { once: true });
      this.run().catch((e: unknown) => this.fail(new CairnClientError(ClientErrorCode.INTERNAL, `the watch failed: ${e instanceof Error ? e.message : String(e)}`, { cause: e })));
    }
  }

  /** The endpoint the watch is served by (or tries next). */
  get endpoint(): string {
    return this.transport.endpoints[this.endpointIndex] as string;
  }

  /** Whether the watch has ended (closed, or failed for good). */
  get ended(): boolean {
    return this.closed;
  }

  /**
   * Per watch, the revision through which every change has been delivered (its resume point),
   * or undefined while it sends an initial state.
   */
  revisions(): Array<string | undefined> {
    return this.tracks.map((t) => (t.mode === 'ordered' && t.through !== undefined ? String(t.through) : undefined));
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  next(): Promise<IteratorResult<WatchEvent<D>>> {
    if (this.head < this.queue.length) {
      const value = this.queue[this.head++] as WatchEvent<D>;
      if (this.head >= 1024 && this.head * 2 >= this.queue.length) {
        this.queue = this.queue.slice(this.head);
        this.head = 0;
      }
      this.maybeResume();
      return Promise.resolve({ value, done: false });
    }
    if (this.finalError !== undefined) {
      const e = this.finalError;
      this.finalError = undefined;
      return Promise.reject(e);
    }
    if (this.closed) return Promise.resolve({ value: undefined, done: true });
    this.maybeResume();
    return new Promise((resolve, reject) => {
      this.waiter = { resolve, reject };
    });
  }

  /** `break` in `for await`: closes the watch. */
  return(): Promise<IteratorResult<WatchEvent<D>>> {
    this.close();
    return Promise.resolve({ value: undefined, done: true });
  }

  /** Ends the watch: the stream is cancelled, undelivered events are dropped, the iteration finishes. Idempotent. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.finalError = undefined;
    this.shutdown();
    this.queue = [];
    this.head = 0;
    const w = this.waiter;
    this.waiter = undefined;
    w?.resolve({ value: undefined, done: true });
  }

  // ---- Delivery -------------------------------------------------------------------------------

  private get buffered(): number {
    return this.queue.length - this.head;
  }

  private push(ev: WatchEvent<D>): void {
    if (this.closed) return;
    const w = this.waiter;
    if (w !== undefined) {
      this.waiter = undefined;
      w.resolve({ value: ev, done: false });
      return;
    }
    this.queue.push(ev);
    if (this.buffered >= this.maxBuffered && this.call !== undefined && !this.call.isPaused()) this.call.pause();
  }

  /** The consumer took events: let the stream (or a reconnect waiting for room) go on. */
  private maybeResume(): void {
    if (this.buffered > this.lowWater) return;
    if (this.call?.isPaused() === true) this.call.resume();
    const r = this.roomWaiter;
    this.roomWaiter = undefined;
    r?.();
  }

  private fail(error: CairnClientError): void {
    if (this.closed) return;
    this.closed = true;
    this.shutdown();
    this.logger.warn?.({ code: error.code, endpoint: this.endpoint, err: error.message }, 'watch ended: the error cannot be fixed by retrying');
    const w = this.waiter;
    this.waiter = undefined;
    if (w !== undefined) w.reject(error);
    else this.finalError = error;
  }

  private shutdown(): void {
    this.abort.abort();
    const call = this.call;
    this.call = undefined;
    call?.cancel();
    const r = this.roomWaiter;
    this.roomWaiter = undefined;
    r?.();
    this.transport.forget(this as WatchStream<unknown>);
  }

  // ---- The reconnect loop ----------------------------------------------------------------------

  private async run(): Promise<void> {
    let failures = 0;
    while (!this.closed) {
      // A consumer that is behind is not sent more until it catches up.
      if (this.buffered > this.lowWater) await new Promise<void>((resolve) => (this.roomWaiter = resolve));
      if (this.closed) return;
      const end = await this.attempt();
      if (this.closed || end.kind === 'closed') return;
      if (end.kind === 'final') {
        this.fail(end.error);
        return;
      }
      const { code, message, nextEndpoint } = this.verdict(end);
      if (code === undefined) return; // failed for good (verdict called fail)
      this.stats.lostBy[code] = (this.stats.lostBy[code] ?? 0) + 1;
      this.stats.lastError = { code, message, endpoint: this.endpoint };
      if (end.progressed) failures = 0;
      failures++;
      if (Date.now() - this.unservedSinceMs >= this.outageMs) {
        this.fail(
          new CairnClientError(ClientErrorCode.UNAVAILABLE, `no node served the watch for ${this.outageMs} ms (endpoints ${this.transport.endpoints.join(', ')}; last: ${code}: ${message})`, {
            endpoint: this.endpoint,
          }),
        );
        return;
      }
      const from = this.endpoint;
      if (nextEndpoint) this.endpointIndex = (this.endpointIndex + 1) % this.transport.endpoints.length;
      // COMPACTED/RESET resubscribe at once (the node is fine); otherwise back off, jittered,
      // so that the watchers of a failed node do not all land on the next one together.
      const immediate = code === ClientErrorCode.COMPACTED || code === ClientErrorCode.RESET;
      const backoffMs = immediate ? 0 : Math.min(this.maxMs, this.baseMs * 2 ** Math.min(failures - 1, 30)) * (0.5 + Math.random() / 2);
      const askedMs = end.kind === 'failure' ? end.failure.retryAfterMs : undefined;
      const ms = askedMs !== undefined ? Math.max(backoffMs, askedMs) : backoffMs;
      this.logger.info?.({ code, endpoint: from, next: this.endpoint, delayMs: Math.round(ms), err: message }, 'watch stream lost; resuming');
      if (ms > 0) await this.pause(ms);
    }
  }

  private pause(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const signal = this.abort.signal;
      if (signal.aborted) return resolve();
      const done = (): void => {
        clearTimeout(timer);
        signal.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      signal.addEventListener('abort', done, { once: true });
    });
  }

  /** What a lost stream means: the code to record and whether to move on to the next node (or nothing: failed for good). */
  private verdict(end: Exclude<StreamEnd, { kind: 'closed' } | { kind: 'final' }>): { code: string | undefined; message: string; nextEndpoint: boolean } {
    if (end.kind === 'ended') return { code: 'ENDED', message: 'the server ended the stream', nextEndpoint: true };
    if (end.kind === 'outage') return { code: ClientErrorCode.UNAVAILABLE, message: `no answer within ${this.outageMs} ms`, nextEndpoint: true };
    const f = end.failure;
    const code = f.error.code;
    if (f.fromServer) {
      if (!SERVER_RETRY.has(code)) {
        this.fail(f.error);
        return { code: undefined, message: '', nextEndpoint: false };
      }
      if (code === ClientErrorCode.COMPACTED || code === ClientErrorCode.RESET) {
        const w = f.error.details['watch'];
        const reason = code === ClientErrorCode.COMPACTED ? 'COMPACTED' : 'RESET';
        // The stream ended for every watch; only the named one must start over.
        const which = typeof w === 'number' && this.tracks[w] !== undefined ? [w] : this.tracks.map((_, i) => i);
        for (const i of which) this.resetTrack(i, reason, f.error.message);
        return { code, message: f.error.message, nextEndpoint: false };
      }
      // A node that is shutting down (UNAVAILABLE) or has not reached our revision (TIMEOUT):
      // another node serves us now; a slow consumer resumes where it was.
      return { code, message: f.error.message, nextEndpoint: code !== ClientErrorCode.SLOW_CONSUMER };
    }
    if (!TRANSPORT_RETRY.has(f.grpcCode)) {
      this.fail(f.error);
      return { code: undefined, message: '', nextEndpoint: false };
    }
    return { code, message: f.error.message, nextEndpoint: true };
  }

  /** Learns where atTail watches start, then runs one stream until it ends. */
  private async attempt(): Promise<StreamEnd> {
    for (const t of this.tracks) {
      if (!t.needsStart) continue;
      let rev: string;
      try {
        rev = await this.transport.currentRevision(t.spec, this.abort.signal);
      } catch (e) {
        if (this.closed) return { kind: 'closed' };
        const err = e instanceof CairnClientError ? e : new CairnClientError(ClientErrorCode.INTERNAL, e instanceof Error ? e.message : String(e));
        if (err.code === ClientErrorCode.UNAVAILABLE || err.code === ClientErrorCode.TIMEOUT) {
          return { kind: 'failure', failure: { error: err, fromServer: true, grpcCode: err.grpcCode ?? grpc.status.UNAVAILABLE, details: err.message }, progressed: false };
        }
        return { kind: 'final', error: err };
      }
      if (!DECIMAL.test(rev)) return { kind: 'final', error: new CairnClientError(ClientErrorCode.INTERNAL, `the server's answer is malformed: revision ${JSON.stringify(rev)}`) };
      t.needsStart = false;
      t.mode = 'ordered';
      t.through = BigInt(rev);
      t.tailed = true; // atTail: the consumer gets no tail
    }
    if (this.closed) return { kind: 'closed' };
    return this.stream(this.buildRequest());
  }

  /** The request for the next stream: each watch from scratch or from its resume point. */
  private buildRequest(): WatchListRequestMsg {
    const watches: WatchMsg[] = this.tracks.map((t, i) => {
      if (t.mode === 'initial' && t.dirty) this.resetTrack(i, 'INTERRUPTED', 'the stream was lost during the initial state; it starts over');
      return {
        type: t.spec.type,
        tenancy: { partition: t.spec.partition ?? '', namespace: t.spec.namespace ?? '' },
        namePrefix: t.spec.namePrefix ?? '',
        gtRevision: t.mode === 'ordered' ? String(t.through ?? 0n) : '',
        // The client's own resumes ask for the tail (at_tail false) and keep it from the
        // consumer: it closes the resume point up to the present, and servers before at_tail
        // was accepted with gt_revision serve it. A caller who asked for at_tail with
        // gt_revision gets exactly that request on every stream of the ordered watch.
        atTail: t.mode === 'ordered' && t.spec.atTail === true && t.spec.gtRevision !== undefined,
        snapshotOnCompacted: t.spec.snapshotOnCompacted === true,
      };
    });
    return { watches };
  }

  private stream(req: WatchListRequestMsg): Promise<StreamEnd> {
    this.stats.streams++;
    const address = this.endpoint;
    return new Promise<StreamEnd>((resolve) => {
      let call: grpc.ClientReadableStream<readonly WatchEventMsg[]>;
      let batched: boolean;
      try {
        ({ call, batched } = this.transport.open(this.endpointIndex, req));
      } catch (e) {
        resolve({ kind: 'final', error: e instanceof CairnClientError ? e : new CairnClientError(ClientErrorCode.UNAVAILABLE, `WatchList refused: ${e instanceof Error ? e.message : String(e)}`) });
        return;
      }
      this.call = call;
      let progressed = false;
      let served = false;
      let done = false;
      // Without an answer (headers or an event) by the outage deadline, give up on this node.
      const left = this.unservedSinceMs + this.outageMs - Date.now();
      const timer = Number.isFinite(left) ? setTimeout(() => (served ? undefined : finish({ kind: 'outage', progressed: false })), Math.max(0, left)) : undefined;
      const finish = (end: StreamEnd | Promise<StreamEnd>): void => {
        if (done) return;
        done = true;
        if (timer !== undefined) clearTimeout(timer);
        if (served) this.unservedSinceMs = Date.now();
        if (this.call === call) this.call = undefined;
        // Events still buffered in the call are dropped: the next stream resumes after the
        // last event queued, so they come again.
        call.cancel();
        resolve(end);
      };
      const servedNow = (): void => {
        served = true;
      };
      call.on('metadata', servedNow);
      call.on('data', (batch: readonly WatchEventMsg[]) => {
        if (done) return;
        progressed = true;
        servedNow();
        try {
          for (const m of batch) {
            this.handle(m);
            if (done) return;
          }
        } catch (e) {
          const error = e instanceof CairnClientError ? e : new CairnClientError(ClientErrorCode.INTERNAL, `the server's watch event is malformed (${address}): ${e instanceof Error ? e.message : String(e)}`);
          finish({ kind: 'final', error });
        }
      });
      call.on('error', (e: grpc.ServiceError) => {
        if (this.closed) finish({ kind: 'closed' });
        else if (batched && e.code === grpc.status.UNIMPLEMENTED && !progressed && e.metadata?.get(ERROR_CODE_KEY).length === 0) {
          // A server from before WatchListBatched (grpc-js's own answer to an unknown method,
          // without a Cairn code): ask again with WatchList, at once and on the same node.
          this.transport.unbatched(this.endpointIndex);
          if (!done) finish(this.stream(req));
        } else finish({ kind: 'failure', failure: decodeFailure(e, address), progressed });
      });
      call.on('status', (s: grpc.StatusObject) => {
        if (s.code === grpc.status.OK) finish(this.closed ? { kind: 'closed' } : { kind: 'ended', progressed });
      });
      if (this.closed) finish({ kind: 'closed' });
    });
  }

  // ---- Events ----------------------------------------------------------------------------------

  private handle(m: WatchEventMsg): void {
    if (m.event === undefined) {
      this.logger.debug?.({ watch: m.watch, revision: m.revision }, 'watch event of a kind this client does not know: ignored');
      return;
    }
    if (!DECIMAL.test(m.revision)) throw new CairnClientError(ClientErrorCode.INTERNAL, `the server's watch event is malformed: revision ${JSON.stringify(m.revision)}`);
    const rev = BigInt(m.revision);
    if (m.event === 'bookmark') {
      for (const t of this.tracks) if (t.mode === 'ordered') advance(t, rev);
      if (rev > this.lastBookmark) {
        this.lastBookmark = rev;
        this.push({ type: 'bookmark', revision: m.revision });
      }
      return;
    }
    const i = m.watch;
    const t = this.tracks[i];
    if (t === undefined) throw new CairnClientError(ClientErrorCode.INTERNAL, `the server's watch event names watch ${i}; the request has ${this.tracks.length}`);
    switch (m.event) {
      case 'change':
      case 'delete': {
        const resource = resourceFromMsg<D>((m.event === 'change' ? m.change : m.delete) ?? null);
        if (t.mode === 'initial') {
          t.dirty = true;
        } else {
          const key = eventKey(resource);
          if ((t.through !== undefined && rev <= t.through) || (t.partial !== undefined && (rev < t.partial || (rev === t.partial && t.partialKeys.has(key))))) {
            this.stats.duplicatesDropped++;
            return;
          }
          if (t.partial !== undefined && rev > t.partial) {
            // A later revision: the previous entry's events are complete.
            t.through = t.partial;
            t.partialKeys.clear();
          }
          t.partial = rev;
          t.partialKeys.add(key);
        }
        this.push({ type: m.event, watch: i, revision: m.revision, resource });
        return;
      }
      case 'tail':
      case 'endOfSnapshot':
        if (t.mode === 'initial') {
          t.mode = 'ordered';
          t.through = rev;
          t.partial = undefined;
          t.partialKeys.clear();
          t.dirty = false;
        } else advance(t, rev);
        // A resume's tail is the client's business, not the consumer's: one tail per initial state.
        if (!t.tailed) {
          t.tailed = true;
          this.push({ type: 'tail', watch: i, revision: m.revision });
        }
        return;
      case 'newSnapshotToFollow':
        this.resetTrack(i, 'NEW_SNAPSHOT', `revision ${String(t.through ?? '')} can no longer be resumed from; a fresh initial state follows`);
        return;
    }
  }

  /** Watch `i` starts over: the consumer is told, and the next stream (or this one, with framing) sends a fresh initial state. */
  private resetTrack(i: number, reason: WatchResetReason, message: string): void {
    const t = this.tracks[i] as Track;
    t.mode = 'initial';
    t.through = undefined;
    t.partial = undefined;
    t.partialKeys.clear();
    t.tailed = false;
    t.dirty = false;
    t.needsStart = false;
    this.stats.resets++;
    this.push({ type: 'reset', watch: i, reason, message });
  }
}

/** Everything of watch `t` up to `rev` has been delivered. */
function advance(t: Track, rev: bigint): void {
  if (t.partial !== undefined && t.partial <= rev) {
    t.partial = undefined;
    t.partialKeys.clear();
  }
  if (t.through === undefined || rev > t.through) t.through = rev;
}
