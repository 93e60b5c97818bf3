import type * as grpc from '@grpc/grpc-js';
import { cairn } from '../gen/resource.js';
import { CairnClientError, ClientErrorCode } from './errors.js';
import type { CallOptions, MutationOptions, ResourceId } from './types.js';
import { idFromMsg, leaseKeepAliveMethod, methods, type Method } from './wire.js';

import pb = cairn.resource.v1;

/** A lease as the server granted it (docs/api.md "Leases"). */
export interface LeaseInfo {
  readonly id: string;
  /** The TTL granted, in seconds (at least the server's minimum). */
  readonly ttlSeconds: number;
}

/** A lease's time to live on the leader's clock. */
export interface LeaseTimeToLive extends LeaseInfo {
  /** Whole seconds left, rounded up (0: its expiry is being committed). */
  readonly remainingSeconds: number;
  readonly remainingMs: number;
  /** With `attached: true`: the resources attached to it. */
  readonly attached: readonly ResourceId[];
}

export interface LeaseGrantOptions extends MutationOptions {
  /** The lease id (a lowercase DNS label); absent: the server chooses one. */
  readonly id?: string;
}

/** Why a kept-alive lease ended (`LeaseKeepAlive.lost`). */
export type LeaseLostReason =
  /** The server no longer has it: revoked, expired, or never granted (NOT_FOUND). */
  | 'gone'
  /** No keep-alive was confirmed for a whole TTL: the leader may have expired it; treat it as lost. */
  | 'unconfirmed'
  /** The server refused to keep it alive (PERMISSION_DENIED, UNAUTHENTICATED, INVALID_ARGUMENT). */
  | 'refused'
  /** `stop()` was called (the lease itself is left as it is: revoke it to end it at once). */
  | 'stopped';

export interface LeaseLost {
  readonly id: string;
  readonly reason: LeaseLostReason;
  readonly message: string;
}

export interface KeepAliveOptions {
  /**
   * The lease's TTL, if known (from `grant`): renewals go out every TTL/3 from the start.
   * Absent: the first answer tells it.
   */
  readonly ttlSeconds?: number;
  /** Told after each renewal the leader confirmed. */
  readonly onRenewed?: (ttlSeconds: number) => void;
  /** The monotonic clock the watchdog reads, in ms (default `performance.now()`; tests pass a fake). */
  readonly nowMs?: () => number;
}

/** What the keep-alive helper needs of the client: its endpoints and the stream call. */
export interface KeepAliveTransport {
  readonly endpoints: number;
  firstEndpoint(): number;
  open(index: number): grpc.ClientDuplexStream<pb.LeaseKeepAliveRequest.$Properties, pb.LeaseKeepAliveResponse>;
  closed(): boolean;
}

/** Codes of a keep-alive answer after which renewing cannot help. */
const REFUSED = new Set(['PERMISSION_DENIED', 'UNAUTHENTICATED', 'INVALID_ARGUMENT']);

/**
 * Keeps one lease alive in the background, as etcd's `KeepAlive`: over one LeaseKeepAlive
 * stream, a renewal every TTL/3; when the stream breaks (a node stops, a failover), it opens
 * one to the next endpoint at once and goes on. It tells the caller when the lease is lost:
 * `lost` resolves and `signal` aborts, once, with the reason: the server says the lease is
 * gone; or no renewal was confirmed for a whole TTL since the last confirmed one (the leader
 * may have expired it; work guarded by the lease must stop); or the server refused; or
 * `stop()`.
 */
export class LeaseKeepAlive {
  readonly lost: Promise<LeaseLost>;
  private readonly controller = new AbortController();
  private resolveLost!: (l: LeaseLost) => void;
  private ttlMs: number | undefined;
  private lastConfirmedMs: number;
  private endpoint: number;
  private call: ReturnType<KeepAliveTransport['open']> | undefined;
  /** When each unanswered request on `call` was sent (monotonic ms), oldest first: the stream answers in order. */
  private sentAtMs: number[] = [];
  private readonly nowMs: () => number;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private watchdog: ReturnType<typeof setTimeout> | undefined;
  private reconnects = 0;
  private done = false;

  constructor(
    readonly id: string,
    private readonly transport: KeepAliveTransport,
    private readonly opts: KeepAliveOptions = {},
  ) {
    this.lost = new Promise((resolve) => (this.resolveLost = resolve));
    this.ttlMs = opts.ttlSeconds !== undefined ? opts.ttlSeconds * 1000 : undefined;
    // The monotonic clock: a wall-clock step must not stretch or cut the watchdog.
    this.nowMs = opts.nowMs ?? (() => performance.now());
    this.lastConfirmedMs = this.nowMs();
    this.endpoint = transport.firstEndpoint();
    this.armWatchdog();
    this.connect();
  }

  /** Aborted when the lease is lost (see `lost`): pass it to work that must stop then. */
  get signal(): AbortSignal {
    return this.controller.signal;
  }

  /** Stops renewing (the lease then expires after its TTL unless revoked). Resolves `lost` with `stopped`. */
  stop(): void {
    this.finish('stopped', 'keep-alive stopped by the caller');
  }

  private finish(reason: LeaseLostReason, message: string): void {
    if (this.done) return;
    this.done = true;
    clearTimeout(this.timer);
    clearTimeout(this.watchdog);
    this.call?.cancel();
    this.call = undefined;
    this.resolveLost({ id: this.id, reason, message });
    this.controller.abort(new CairnClientError(reason === 'gone' ? ClientErrorCode.NOT_FOUND : ClientErrorCode.CANCELLED, `lease ${this.id} lost: ${message}`));
  }

  /**
   * Lost when nothing was confirmed for a whole TTL (once the TTL is known), counted from when
   * the last confirmed request was sent: the leader renewed from when that request reached it,
   * which was no earlier, so the client gives the lease up no later than the leader may expire it.
   */
  private armWatchdog(): void {
    clearTimeout(this.watchdog);
    if (this.done || this.ttlMs === undefined) return;
    const left = this.lastConfirmedMs + this.ttlMs - this.nowMs();
    this.watchdog = setTimeout(() => {
      if (this.nowMs() - this.lastConfirmedMs >= (this.ttlMs ?? 0)) this.finish('unconfirmed', `no keep-alive confirmed for ${(this.ttlMs ?? 0) / 1000} s (its TTL): the leader may have expired it`);
      else this.armWatchdog();
    }, Math.max(0, left));
  }

  private connect(): void {
    if (this.done) return;
    if (this.transport.closed()) {
      this.finish('stopped', 'the client was closed');
      return;
    }
    const call = this.transport.open(this.endpoint);
    this.call = call;
    const sent: number[] = [];
    this.sentAtMs = sent;
    let broken = false;
    const onBroken = (): void => {
      if (broken || this.call !== call) return;
      broken = true;
      this.call = undefined;
      clearTimeout(this.timer);
      if (this.done) return;
      // Another node, at once the first time, then with a short backoff (a failover takes an election).
      this.endpoint = (this.endpoint + 1) % this.transport.endpoints;
      this.reconnects++;
      const wait = this.reconnects <= this.transport.endpoints ? 0 : Math.min(1000, 50 * 2 ** Math.min(5, this.reconnects - this.transport.endpoints));
      this.timer = setTimeout(() => this.connect(), wait);
    };
    call.on('data', (a: pb.LeaseKeepAliveResponse) => this.answer(a, sent.shift()));
    call.on('error', onBroken);
    call.on('end', onBroken);
    this.send();
  }

  private send(): void {
    if (this.done || this.call === undefined) return;
    this.sentAtMs.push(this.nowMs());
    this.call.write({ id: this.id });
  }

  /** An answer on the stream; `sentAtMs` is when the request it answers was sent. */
  private answer(a: pb.LeaseKeepAliveResponse, sentAtMs: number | undefined): void {
    if (this.done) return;
    const ttl = typeof a.ttlSeconds === 'number' ? a.ttlSeconds : Number(a.ttlSeconds.toString());
    if (ttl > 0) {
      this.reconnects = 0;
      // An answer with no request of ours outstanding cannot be placed in time: it confirms nothing new.
      if (sentAtMs !== undefined) this.lastConfirmedMs = Math.max(this.lastConfirmedMs, sentAtMs);
      this.ttlMs = ttl * 1000;
      this.armWatchdog();
      this.opts.onRenewed?.(ttl);
      this.schedule(this.ttlMs / 3);
      return;
    }
    if (a.errorCode === 'NOT_FOUND') {
      this.finish('gone', a.errorMessage || `lease ${this.id} does not exist`);
      return;
    }
    if (REFUSED.has(a.errorCode)) {
      this.finish('refused', a.errorMessage || a.errorCode);
      return;
    }
    // No leader answered (UNAVAILABLE, TIMEOUT, RATE_LIMITED): try again soon, the watchdog bounds it.
    this.schedule(Math.min(500, (this.ttlMs ?? 3000) / 6));
  }

  private schedule(ms: number): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.send(), ms);
  }
}

type Invoke = <Req, Res>(m: Method<Req, Res>, req: Req, opts: CallOptions) => Promise<Res>;

function num(v: number | Long | null | undefined): number {
  if (v === null || v === undefined) return 0;
  return typeof v === 'number' ? v : Number(v.toString());
}

/** `client.leases` (docs/api.md "Leases"). */
export class Leases {
  constructor(
    private readonly invoke: Invoke,
    private readonly transport: KeepAliveTransport,
    private readonly newRequestId: () => string,
  ) {}

  /** Grants a lease of `ttlSeconds` (whole seconds; raised to the server's minimum). */
  async grant(ttlSeconds: number, opts: LeaseGrantOptions = {}): Promise<LeaseInfo> {
    if (!Number.isSafeInteger(ttlSeconds) || ttlSeconds < 1) throw new CairnClientError(ClientErrorCode.INVALID_ARGUMENT, `ttlSeconds must be a positive whole number of seconds, got ${String(ttlSeconds)}`);
    const r = await this.invoke(methods.leaseGrant, { ttlSeconds, id: opts.id ?? '', requestId: opts.requestId ?? this.newRequestId() }, opts);
    return { id: r.id, ttlSeconds: num(r.ttlSeconds) };
  }

  /** Revokes a lease: every resource attached to it is deleted, at one revision. NOT_FOUND when there is none. */
  async revoke(id: string, opts: MutationOptions = {}): Promise<{ readonly id: string; readonly deleted: number; readonly revision: string }> {
    const r = await this.invoke(methods.leaseRevoke, { id, requestId: opts.requestId ?? this.newRequestId() }, opts);
    return { id: r.id, deleted: r.deleted, revision: r.revision };
  }

  /** The lease's granted TTL and the time left on the leader's clock (and, asked, its attached resources). */
  async timeToLive(id: string, opts: CallOptions & { readonly attached?: boolean } = {}): Promise<LeaseTimeToLive> {
    const r = await this.invoke(methods.leaseTimeToLive, { id, attached: opts.attached === true }, opts);
    return { id: r.id, ttlSeconds: num(r.ttlSeconds), remainingSeconds: num(r.remainingSeconds), remainingMs: num(r.remainingMs), attached: r.attached.map(idFromMsg) };
  }

  /** Every lease the caller may list, in id order. */
  async list(opts: CallOptions = {}): Promise<LeaseInfo[]> {
    const r = await this.invoke(methods.leaseList, {}, opts);
    return r.leases.map((l) => ({ id: l.id ?? '', ttlSeconds: num(l.ttlSeconds) }));
  }

  /** Keeps lease `id` alive in the background (see LeaseKeepAlive); `stop()` it when done. */
  keepAlive(id: string, opts: KeepAliveOptions = {}): LeaseKeepAlive {
    return new LeaseKeepAlive(id, this.transport, opts);
  }
}

export { leaseKeepAliveMethod };
