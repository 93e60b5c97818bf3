import { secretAccessor } from '../auth/index.js';
import { createHash } from 'node:crypto';
import { CairnError, ErrorCode, type Clock } from '../base/index.js';

/**
 * Limits that protect a node from its clients (docs/security.md "Limits"): per-token and
 * per-address rate limits, and the key helpers they share with the audit log. Peer traffic on
 * the cluster port (Raft, forwarding) never comes through here.
 */

/** The token of an `authorization: Bearer <token>` header (HTTP) or metadata value (gRPC). */
export function bearerToken(auth: unknown): string | undefined {
  // A header of another form is not ignored (that would run the request as anonymous): it is
  // handed on as it is, and access control refuses it as a token that is not valid.
  if (auth === undefined || auth === null) return undefined;
  if (typeof auth !== 'string') return '\u0000not-a-token';
  // RFC 7235: the scheme is case-insensitive and one or more spaces may follow it. Any other
  // scheme (or a bare secret) is a credential this node does not take.
  const m = /^bearer +(.*)$/is.exec(auth);
  return m === null ? '\u0000not-a-token' : (m[1] as string).trim();
}

/** The public accessor id of a `cairn_<accessor>_<secret>` token, or undefined for any other value. */
export function accessorOf(token: string | undefined): string | undefined {
  // The one definition of the token format is access control's (src/auth/acl.ts).
  return token === undefined ? undefined : secretAccessor(token);
}

/**
 * The rate limiter's key for a bearer token: `sha256:<first 32 hex of its SHA-256>`, so no
 * secret is kept in memory. The whole token is hashed, not just a Cairn token's accessor id:
 * the limit runs before the token is verified, and keying by the (public) accessor would let
 * anyone empty a token holder's bucket with forged `cairn_<their accessor>_<garbage>` tokens.
 */
export function tokenKey(token: string): string {
  return `sha256:${createHash('sha256').update(token).digest('hex').slice(0, 32)}`;
}

/** An IP as the limits key it: an IPv4-mapped IPv6 address (`::ffff:1.2.3.4`) as IPv4; none as `unknown`. */
export function normalizeIp(ip: string | undefined): string {
  if (ip === undefined || ip === '') return 'unknown';
  const a = ip.replace(/^\[|\]$/g, '');
  return /^::ffff:\d+\.\d+\.\d+\.\d+$/i.test(a) ? a.slice(7) : a;
}

/** The IP of a grpc-js peer string (`getPeer()`: `<address>:<port>`, IPv6 unbracketed). */
export function ipOfGrpcPeer(peer: string | undefined): string {
  if (peer === undefined) return 'unknown';
  // Asked once per request, of the few strings a node's connections have: parsed once each.
  const known = peerIps.get(peer);
  if (known !== undefined) return known;
  const m = /^(.*):(\d+)$/.exec(peer);
  const ip = normalizeIp(m ? m[1] : peer);
  if (peerIps.size >= PEER_IPS_MAX) peerIps.clear();
  peerIps.set(peer, ip);
  return ip;
}

/** Parsed peer strings (a pure function's memo), dropped whole when full. */
const peerIps = new Map<string, string>();
const PEER_IPS_MAX = 4096;

export interface RateLimit {
  /** Requests per second refilled; 0 turns the limit off. */
  readonly perSecond: number;
  /** Requests that may arrive at once (the bucket's size). */
  readonly burst: number;
}

/**
 * Token buckets by key (an address or a token key), at most `maxKeys` of them: the least
 * recently used bucket is dropped to make room (a Map keeps insertion order; a use re-inserts),
 * so a flood of random tokens or addresses cannot grow it. A dropped key starts again with a
 * full bucket: the cap bounds memory, not what one fresh key may do (the per-address limit
 * still applies to a caller that rotates tokens).
 */
export class KeyedRateLimiter {
  private readonly buckets = new Map<string, { tokens: number; lastMs: number }>();
  /** Buckets dropped to stay under maxKeys (for tests and metrics). */
  evicted = 0;

  constructor(
    readonly limit: RateLimit,
    readonly maxKeys: number,
    private readonly clock: Pick<Clock, 'monotonicMs'>,
  ) {
    if (!(limit.perSecond >= 0) || !Number.isFinite(limit.perSecond)) throw new CairnError(ErrorCode.INVALID_ARGUMENT, `a rate limit must be a non-negative number per second, got ${limit.perSecond}`);
    if (limit.perSecond > 0 && !(limit.burst >= 1)) throw new CairnError(ErrorCode.INVALID_ARGUMENT, `a rate limit's burst must be at least 1, got ${limit.burst}`);
    if (!Number.isSafeInteger(maxKeys) || maxKeys < 1) throw new CairnError(ErrorCode.INVALID_ARGUMENT, `the rate limiter's key cap must be a positive integer, got ${maxKeys}`);
  }

  get enabled(): boolean {
    return this.limit.perSecond > 0;
  }

  /** Keys held now (at most maxKeys). */
  get size(): number {
    return this.buckets.size;
  }

  /**
   * Takes one request for `key`: 0 when allowed, else the milliseconds until one would be
   * (the request is refused and takes nothing).
   */
  take(key: string): number {
    if (!this.enabled) return 0;
    const now = this.clock.monotonicMs();
    let b = this.buckets.get(key);
    if (b === undefined) {
      b = { tokens: this.limit.burst, lastMs: now };
      if (this.buckets.size >= this.maxKeys) {
        const oldest = this.buckets.keys().next();
        if (oldest.done !== true) {
          this.buckets.delete(oldest.value);
          this.evicted++;
        }
      }
    } else {
      this.buckets.delete(key); // re-inserted below: most recently used last
      b.tokens = Math.min(this.limit.burst, b.tokens + ((now - b.lastMs) * this.limit.perSecond) / 1000);
      b.lastMs = now;
    }
    this.buckets.set(key, b);
    if (b.tokens >= 1) {
      b.tokens -= 1;
      return 0;
    }
    return Math.max(1, Math.ceil(((1 - b.tokens) * 1000) / this.limit.perSecond));
  }
}

export interface RequestLimitsOptions {
  readonly perAddress: RateLimit;
  readonly perToken: RateLimit;
  /** Buckets kept per limiter (addresses, tokens). Default 100,000. */
  readonly maxKeys?: number;
  readonly clock: Pick<Clock, 'monotonicMs'>;
  /** Told of each refusal (for metrics). */
  readonly onRefused?: (limit: 'address' | 'token') => void;
}

/** Defaults (docs/security.md "Limits"): far above what the benchmarks and the fault harness do. */
export const RATE_LIMIT_DEFAULTS = {
  perAddress: { perSecond: 10_000, burst: 20_000 },
  perToken: { perSecond: 10_000, burst: 20_000 },
  maxKeys: 100_000,
} as const;

/** Who is asking, as the rate limits and the audit log see it. */
export interface Caller {
  /** The remote address (an IP; a port is stripped). */
  readonly address: string;
  /** The bearer token, if any (never stored: keyed by tokenKey). */
  readonly token?: string | undefined;
}

/** The per-address and per-token rate limits of the public API (HTTP routes, gRPC methods, watches). */
export class RequestLimits {
  readonly byAddress: KeyedRateLimiter;
  readonly byToken: KeyedRateLimiter;
  private readonly onRefused: ((limit: 'address' | 'token') => void) | undefined;

  constructor(opts: RequestLimitsOptions) {
    this.onRefused = opts.onRefused;
    const maxKeys = opts.maxKeys ?? RATE_LIMIT_DEFAULTS.maxKeys;
    this.byAddress = new KeyedRateLimiter(opts.perAddress, maxKeys, opts.clock);
    this.byToken = new KeyedRateLimiter(opts.perToken, maxKeys, opts.clock);
  }

  /**
   * Counts one request; throws RATE_LIMITED (details: `retry_after_seconds`, `limit`) when the
   * caller's address or token is over its rate. The address is checked first: a refused
   * request takes nothing from the token's bucket.
   */
  check(caller: Caller): void {
    const addrWait = this.byAddress.take(normalizeIp(caller.address));
    if (addrWait > 0) {
      this.onRefused?.('address');
      throw rateLimited('address', caller.address, addrWait, this.byAddress.limit);
    }
    if (caller.token === undefined || caller.token === '') return;
    const tokWait = this.byToken.take(tokenKey(caller.token));
    if (tokWait > 0) {
      this.onRefused?.('token');
      throw rateLimited('token', accessorOf(caller.token) ?? 'this token', tokWait, this.byToken.limit);
    }
  }
}

function rateLimited(kind: 'address' | 'token', who: string, waitMs: number, limit: RateLimit): CairnError {
  const seconds = Math.max(1, Math.ceil(waitMs / 1000));
  const subject = kind === 'address' ? `address ${normalizeIp(who)}` : `token ${who}`;
  return new CairnError(ErrorCode.RATE_LIMITED, `too many requests from ${subject}: over ${limit.perSecond} per second (burst ${limit.burst}); retry after ${seconds} s`, {
    limit: kind,
    retryAfterSeconds: seconds,
  });
}

/** The seconds a RATE_LIMITED error asks the caller to wait (its detail), at least 1. */
export function retryAfterSecondsOf(e: CairnError): number {
  const v = e.details['retryAfterSeconds'] ?? e.details['retry_after_seconds'];
  return typeof v === 'number' && Number.isFinite(v) && v >= 1 ? Math.ceil(v) : 1;
}

/**
 * Open streams counted per node and per connection (watch streams). `acquire` reserves a
 * place or throws RATE_LIMITED; the returned release is idempotent.
 */
export class StreamCounter {
  private total = 0;
  private readonly perConnection = new Map<unknown, number>();

  constructor(
    /** Streams per node; 0 = no cap. */
    readonly maxPerNode: number,
    /** Streams per connection; 0 = no cap. */
    readonly maxPerConnection: number,
    private readonly what: string,
    /** Told of each refusal (for metrics). */
    private readonly onRefused?: (limit: 'node' | 'connection') => void,
  ) {}

  get open(): number {
    return this.total;
  }

  acquire(connection: unknown): () => void {
    if (this.maxPerNode > 0 && this.total >= this.maxPerNode) {
      this.onRefused?.('node');
      throw new CairnError(ErrorCode.RATE_LIMITED, `this node already serves ${this.total} ${this.what}, its limit; retry later or use another node`, { limit: 'node', retryAfterSeconds: 1 });
    }
    const key = connection ?? 'unknown';
    const n = this.perConnection.get(key) ?? 0;
    if (this.maxPerConnection > 0 && n >= this.maxPerConnection) {
      this.onRefused?.('connection');
      throw new CairnError(ErrorCode.RATE_LIMITED, `this connection already has ${n} ${this.what}, its limit; close one or open another connection`, { limit: 'connection', retryAfterSeconds: 1 });
    }
    this.total++;
    this.perConnection.set(key, n + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.total--;
      const m = (this.perConnection.get(key) ?? 1) - 1;
      if (m <= 0) this.perConnection.delete(key);
      else this.perConnection.set(key, m);
    };
  }
}
