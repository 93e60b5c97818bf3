import * as grpc from '@grpc/grpc-js';
import { monotonicFactory } from 'ulid';

/**
 * ULIDs for uids, generations and request ids: monotonic within a millisecond, random bits from
 * Math.random (they are identifiers, not secrets). The default ulid() draws crypto randomness
 * for every character, which profiling showed at 17% of a busy leader's CPU.
 */
const ulid = monotonicFactory(() => Math.random());
import { CairnClientError, ClientErrorCode, isCairnClientError } from './errors.js';
import type {
  CallOptions,
  Consistency,
  DeleteOptions,
  DeleteResult,
  ListByOwnerOptions,
  ListOptions,
  ListPage,
  ListPageOptions,
  ListResult,
  MutationOptions,
  ReadOptions,
  ReadResult,
  Resource,
  ResourceId,
  ResourceRef,
  StatusBody,
  UpdateFn,
  UpdateOptions,
  WriteBody,
} from './types.js';
import { SharedInformerFactory, Informer } from './informer.js';
import { MaterializedView, type ViewOptions } from './view.js';
import { TxnBuilder, txnRequestMsg, txnResultFromMsg, writeMsg } from './txn.js';
import { Leases, leaseKeepAliveMethod } from './lease.js';
import { WatchStream, type WatchOptions, type WatchSpec, type WatchTransport } from './watch.js';
import type { CacheSpec } from './feed.js';
import {
  CONSISTENCY,
  conditionToMsg,
  decodeFailure,
  methods,
  optionalUint64,
  refToMsg,
  resourceFromMsg,
  watchListBatchedMethod,
  watchListMethod,
  type AttemptFailure,
  type Method,
  type WatchEventMsg,
  type WatchListRequestMsg,
} from './wire.js';

export interface CairnClientOptions {
  /** gRPC addresses (host:port) of any nodes of one cluster; every node serves every call. */
  readonly endpoints: readonly string[];
  /** Default deadline of a call in milliseconds, retries and failovers included. Default 10,000. */
  readonly timeoutMs?: number;
  /**
   * How long one attempt on one node may go unanswered before the client gives up on that node
   * and tries the next (a write with the same request id, so it is applied at most once). A node
   * that is stopped, hung or cut off by the network keeps its connection open and answers
   * nothing: without this, every call sent to it would wait out its whole deadline and the
   * client would never move on. Default 2,000 (above a healthy cluster's slowest answers, and
   * the 400-800 ms a new leader takes to be elected). Capped by the call's deadline.
   */
  readonly attemptTimeoutMs?: number;
  /**
   * The ACL token's secret (`cairn_<accessor>_<64 hex>`, from `cairn acl bootstrap` or `cairn
   * acl token create`), sent as `authorization: Bearer <token>` on every call and watch stream.
   * Absent: calls are anonymous (refused with UNAUTHENTICATED or PERMISSION_DENIED where ACLs
   * are on). The client never puts it in an error message.
   */
  readonly token?: string;
  /**
   * Which endpoint calls and watches go to first: `random` (default) spreads clients over the
   * nodes; `listed` starts with the first one listed (fail-over still moves down the list).
   */
  readonly endpointOrder?: 'random' | 'listed';
  /**
   * TLS to the cluster (docs/security.md): `ca` is the cluster CA certificate (PEM) the nodes'
   * certificates must chain to; `cert` and `key` (both or neither) are a client certificate
   * (`cairn tls cert create --client NAME`). Absent: plaintext, for a node on loopback or one run
   * `--insecure`.
   */
  readonly tls?: { readonly ca: string | Uint8Array; readonly cert?: string | Uint8Array; readonly key?: string | Uint8Array };
}

export const CLIENT_DEFAULTS = {
  timeoutMs: 10_000,
  attemptTimeoutMs: 2_000,
  updateMaxAttempts: 20,
  updateBaseBackoffMs: 10,
  updateMaxBackoffMs: 1_000,
  /** Pause after every endpoint failed once, doubling per round up to failoverMaxBackoffMs (jittered). */
  failoverBaseBackoffMs: 50,
  failoverMaxBackoffMs: 1_000,
  /** Times `list` and `listByOwner` start over when the server lost the list's revision between pages (COMPACTED). */
  listRestarts: 3,
} as const;

/** What a bearer token may hold: visible ASCII only, so it is a valid metadata value and header. */
const TOKEN_CHARS = /^[\x21-\x7e]{1,4096}$/;

/** A page size for the wire: 0 asks for the server's maximum. */
function pageSize(limit: number | undefined): number {
  if (limit === undefined) return 0;
  if (!Number.isSafeInteger(limit) || limit < 1 || limit > 0xffffffff) throw invalidOption(`limit must be a positive integer, got ${String(limit)}`);
  return limit;
}

function pageOf<D>(res: { resources: Parameters<typeof resourceFromMsg>[0][]; revision: string; lastLeaderContactMs?: Parameters<typeof optionalUint64>[0]; continue?: string | null }): ListPage<D> {
  const page = { resources: res.resources.map((r) => resourceFromMsg<D>(r)), revision: res.revision, lastLeaderContactMs: optionalUint64(res.lastLeaderContactMs) };
  return res.continue !== undefined && res.continue !== null && res.continue !== '' ? { ...page, continue: res.continue } : page;
}

const ENDPOINT = /^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):([0-9]{1,5})$/;

/** Plaintext, or TLS verifying the nodes against the cluster CA (with a client certificate if given). */
function channelCredentials(tls: CairnClientOptions['tls']): grpc.ChannelCredentials {
  if (tls === undefined) return grpc.credentials.createInsecure();
  const buf = (v: string | Uint8Array): Buffer => (typeof v === 'string' ? Buffer.from(v) : Buffer.from(v.buffer, v.byteOffset, v.byteLength));
  if (!tls.ca || tls.ca.length === 0) throw invalidOption('tls.ca must be the cluster CA certificate (PEM)');
  if ((tls.cert === undefined) !== (tls.key === undefined)) throw invalidOption('tls.cert and tls.key go together: give both or neither');
  return grpc.credentials.createSsl(buf(tls.ca), tls.key !== undefined ? buf(tls.key) : null, tls.cert !== undefined ? buf(tls.cert) : null);
}

function invalidOption(msg: string): CairnClientError {
  return new CairnClientError(ClientErrorCode.INVALID_ARGUMENT, msg);
}

function checkPositive(v: number, what: string): number {
  if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0) throw invalidOption(`${what} must be a positive number of milliseconds, got ${String(v)}`);
  return v;
}

interface Endpoint {
  readonly address: string;
  readonly client: grpc.Client;
  /** The server answered WatchListBatched UNIMPLEMENTED (a server from before it): watches use WatchList. */
  watchListOnly?: boolean;
}

/** How a failed attempt bears on the call: give up, or try the next endpoint (and whether a write may have happened). */
type Verdict = 'final' | 'retry' | 'retry-maybe-applied';

function verdictOf(f: AttemptFailure, mutates: boolean): Verdict {
  if (f.fromServer) {
    // The server's handler answered: UNAVAILABLE means it did not act (no leader, shutting
    // down, still starting); TIMEOUT means it proposed but saw no verdict in time.
    if (f.error.code === ClientErrorCode.UNAVAILABLE) return 'retry';
    if (f.error.code === ClientErrorCode.TIMEOUT) return mutates ? 'retry-maybe-applied' : 'retry';
    return 'final';
  }
  // No Cairn code: the call failed in transit (connection refused or lost, stream reset, server
  // stopping). grpc-js says "No connection established" when no connection could be made, so
  // the request never left; otherwise it may have reached the server.
  switch (f.grpcCode) {
    case grpc.status.UNAVAILABLE:
    case grpc.status.INTERNAL:
    case grpc.status.UNKNOWN:
    case grpc.status.CANCELLED:
      return mutates && !f.details.includes('No connection established') ? 'retry-maybe-applied' : 'retry';
    default:
      return 'final';
  }
}

/** Resolves after `ms`, or early (true) when `signal` fires. */
function pause(ms: number, signal: AbortSignal | undefined): Promise<boolean> {
  return new Promise((resolve) => {
    if (signal?.aborted) {
      resolve(true);
      return;
    }
    const onAbort = (): void => {
      clearTimeout(timer);
      resolve(true);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve(false);
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * A client of a Cairn cluster over gRPC (API.md "Operations").
 *
 * - Any node serves any call, so the client sticks to one endpoint and moves to the next when
 *   it is unreachable or answers UNAVAILABLE; after every endpoint failed once it backs off
 *   (jittered, doubling) and goes round again, until the call's deadline.
 * - Every write (write, writeStatus, delete) carries a request id, the same on every retry,
 *   so a write retried after a lost answer is applied at most once.
 * - A write that may or may not have been applied fails with `outcomeUnknown` set
 *   (isOutcomeUnknown): never as a plain failure.
 */
export class CairnClient {
  private readonly endpoints: readonly Endpoint[];
  private readonly timeoutMs: number;
  private readonly attemptTimeoutMs: number;
  private readonly token: string | undefined;
  private current: number;
  private closed = false;
  private readonly watches = new Set<WatchStream<unknown>>();
  /** Leases (docs/api.md "Leases"): grant, revoke, timeToLive, list, and keepAlive in the background. */
  readonly leases: Leases;

  constructor(opts: CairnClientOptions) {
    if (!Array.isArray(opts.endpoints) || opts.endpoints.length === 0) throw invalidOption('endpoints must list at least one gRPC address (host:port)');
    for (const e of opts.endpoints) {
      const m = typeof e === 'string' ? ENDPOINT.exec(e) : null;
      const port = m ? Number(m[2]) : 0;
      if (!m || port < 1 || port > 65535) throw invalidOption(`endpoints: ${JSON.stringify(e)} is not a host:port address`);
    }
    this.timeoutMs = checkPositive(opts.timeoutMs ?? CLIENT_DEFAULTS.timeoutMs, 'timeoutMs');
    this.attemptTimeoutMs = checkPositive(opts.attemptTimeoutMs ?? CLIENT_DEFAULTS.attemptTimeoutMs, 'attemptTimeoutMs');
    if (opts.token !== undefined && (typeof opts.token !== 'string' || !TOKEN_CHARS.test(opts.token))) {
      // The value is not shown: it is a secret.
      throw invalidOption('token must be a token secret (cairn_<accessor>_<64 hex>): 1 to 4096 visible ASCII characters, no spaces or line breaks');
    }
    this.token = opts.token;
    const credentials = channelCredentials(opts.tls);
    this.endpoints = opts.endpoints.map((address) => ({
      address,
      client: new grpc.Client(address, credentials, {
        // Find a dead peer on an idle connection; reconnect quickly once it is back.
        'grpc.keepalive_time_ms': 10_000,
        'grpc.keepalive_timeout_ms': 5_000,
        'grpc.initial_reconnect_backoff_ms': 100,
        'grpc.max_reconnect_backoff_ms': 1_000,
        'grpc.max_receive_message_length': 64 * 1024 * 1024,
      }),
    }));
    const order = opts.endpointOrder ?? 'random';
    if (order !== 'random' && order !== 'listed') throw invalidOption(`endpointOrder must be random or listed, got ${JSON.stringify(order)}`);
    // Clients start on different nodes, spreading the load.
    this.current = order === 'listed' ? 0 : Math.floor(Math.random() * this.endpoints.length);
    this.leases = new Leases(
      (m, req, o) => this.invoke(m, req, o),
      {
        endpoints: this.endpoints.length,
        firstEndpoint: () => this.current,
        closed: () => this.closed,
        open: (index) => {
          const ep = this.endpoints[index] as Endpoint;
          const metadata = new grpc.Metadata();
          if (this.token !== undefined) metadata.set('authorization', `Bearer ${this.token}`);
          const m = leaseKeepAliveMethod;
          return ep.client.makeBidiStreamRequest(m.path, m.serialize, m.deserialize, metadata, {});
        },
      },
      () => ulid(),
    );
  }

  /** The endpoint the next call goes to first. */
  get endpoint(): string {
    return (this.endpoints[this.current] as Endpoint).address;
  }

  /** Closes every connection and ends every open watch; calls after this fail with UNAVAILABLE. */
  close(): void {
    this.closed = true;
    for (const w of [...this.watches]) w.close();
    for (const e of this.endpoints) e.client.close();
  }

  /**
   * Watches one or more selections of resources on one stream (API.md "Watch"): an async
   * iterable of WatchEvents that resumes by itself across lost streams and failed nodes, with no
   * gap and no duplicate, and tells the consumer with a `reset` event when a watch has to start
   * over. It ends only when closed (`close()`, `break`, the signal) or on an error retrying
   * cannot fix. See watch.ts and README.md for the rules.
   */
  watch<D = unknown>(watches: WatchSpec | readonly WatchSpec[], opts: WatchOptions = {}): WatchStream<D> {
    if (this.closed) throw new CairnClientError(ClientErrorCode.UNAVAILABLE, 'watch refused: the client is closed');
    const specs: readonly WatchSpec[] = Array.isArray(watches) ? (watches as readonly WatchSpec[]) : [watches as WatchSpec];
    const w = new WatchStream<D>(this.watchTransport(), specs, opts);
    if (!w.ended) this.watches.add(w as WatchStream<unknown>);
    return w;
  }

  /** A started MaterializedView of `spec` (see view.ts): a local cache kept current by a watch. */
  view<D = unknown>(spec: CacheSpec, opts: ViewOptions = {}): MaterializedView<D> {
    return new MaterializedView<D>(this, spec, opts).start();
  }

  /** An informer of `spec` (see informer.ts); add handlers, then `start()` it. */
  informer<D = unknown>(spec: CacheSpec, opts: ViewOptions = {}): Informer<D> {
    return new Informer<D>(this, spec, opts);
  }

  /** A factory of informers that share one watch stream. */
  sharedInformers(opts: WatchOptions = {}): SharedInformerFactory {
    return new SharedInformerFactory(this, opts);
  }

  private watchTransport(): WatchTransport {
    return {
      endpoints: this.endpoints.map((e) => e.address),
      firstEndpoint: this.current,
      open: (index: number, req: WatchListRequestMsg) => {
        const ep = this.endpoints[index] as Endpoint;
        const metadata = new grpc.Metadata();
        if (this.token !== undefined) metadata.set('authorization', `Bearer ${this.token}`);
        const m = ep.watchListOnly ? watchListMethod : watchListBatchedMethod;
        return { call: ep.client.makeServerStreamRequest<WatchListRequestMsg, readonly WatchEventMsg[]>(m.path, m.serialize, m.deserialize, req, metadata, {}), batched: !ep.watchListOnly };
      },
      unbatched: (index: number) => {
        (this.endpoints[index] as Endpoint).watchListOnly = true;
      },
      currentRevision: async (spec: WatchSpec, signal: AbortSignal) => {
        // A List that matches nothing ("-" starts no DNS label) still says the revision it reflects.
        const r = await this.list(spec.type, {
          ...(spec.partition !== undefined ? { partition: spec.partition } : {}),
          ...(spec.namespace !== undefined ? { namespace: spec.namespace } : {}),
          namePrefix: '-',
          signal,
        });
        return r.revision;
      },
      forget: (w) => {
        this.watches.delete(w);
      },
    };
  }

  /** Reads one resource. NOT_FOUND when absent, or when `ref.uid` names another incarnation. */
  async read<D = unknown>(ref: ResourceRef, opts: ReadOptions = {}): Promise<ReadResult<D>> {
    const res = await this.invoke(methods.read, { id: refToMsg(ref), consistency: consistencyOf(opts.consistency) }, opts);
    return { resource: resourceFromMsg<D>(res.resource), revision: res.revision, lastLeaderContactMs: optionalUint64(res.lastLeaderContactMs) };
  }

  /**
   * Creates or replaces a resource (see WriteBody.version for create-only and
   * compare-and-swap). Returns the stored resource.
   */
  async write<D = unknown>(ref: ResourceRef, body: WriteBody<D>, opts: MutationOptions = {}): Promise<Resource<D>> {
    const res = await this.invoke(methods.write, { ...writeMsg(ref, body), requestId: opts.requestId ?? ulid() }, opts);
    return resourceFromMsg<D>(res.resource);
  }

  /**
   * A transaction (docs/api.md "Transactions"): `client.txn().if(...).then(...).else(...).commit()`.
   * The comparisons (`Compare`) are evaluated at the transaction's place in the log; the then
   * ops (`Op`) apply if all hold, else the else ops; all of the branch or none, at one revision.
   * One call with one request id: retried across failovers, it applies at most once.
   */
  txn(): TxnBuilder {
    return new TxnBuilder(async (spec, opts) => txnResultFromMsg(await this.invoke(methods.txn, txnRequestMsg(spec, opts.requestId ?? ulid()), opts)));
  }

  /** Sets one status key (usually the controller's name). `ref.uid` is required. */
  async writeStatus<D = unknown>(ref: ResourceRef, key: string, body: StatusBody, opts: MutationOptions = {}): Promise<Resource<D>> {
    const res = await this.invoke(
      methods.writeStatus,
      {
        id: refToMsg(ref),
        key,
        observedGeneration: body.observed_generation,
        conditions: body.conditions.map(conditionToMsg),
        version: body.version ?? '',
        requestId: opts.requestId ?? ulid(),
      },
      opts,
    );
    return resourceFromMsg<D>(res.resource);
  }

  /**
   * Deletes a resource and what it owns. `deleted: false` means either that there was nothing
   * to delete (`resource: null`) or that finalizers hold the delete back (`resource` is the
   * marked state); see DeleteResult.
   */
  async delete<D = unknown>(ref: ResourceRef, opts: DeleteOptions = {}): Promise<DeleteResult<D>> {
    const res = await this.invoke(methods.delete, { id: refToMsg(ref), version: opts.version ?? '', requestId: opts.requestId ?? ulid() }, opts);
    return { deleted: res.deleted, resource: res.resource === null || res.resource === undefined ? null : resourceFromMsg<D>(res.resource) };
  }

  /**
   * Lists resources of a type (`demo.Artist`, without the group version, lists every version):
   * every match, at one revision, read a page at a time (`limit` per request) by following the
   * server's continue tokens. If the server no longer holds the list's revision when a later
   * page is asked for (COMPACTED: the node restarted, the client failed over to another node,
   * or the list took longer than the server holds it), the pages read so far are dropped and
   * the list starts over, at most `CLIENT_DEFAULTS.listRestarts` times; then COMPACTED is
   * thrown. The result is never a mix of revisions. `timeoutMs` applies to each page.
   */
  async list<D = unknown>(type: string, opts: ListOptions = {}): Promise<ListResult<D>> {
    return this.allPages<D>('List', (cont) => this.listPage<D>(type, { ...opts, ...(cont !== undefined ? { continue: cont } : {}) }));
  }

  /**
   * One page of a list: at most `limit` resources (the server's page maximum when absent)
   * after the page `continue` names. The answer's `continue`, when present, reads the next
   * page at the same revision; COMPACTED means the server no longer holds that revision (start
   * over without `continue`), INVALID_ARGUMENT that the token is not this list's.
   */
  async listPage<D = unknown>(type: string, opts: ListPageOptions = {}): Promise<ListPage<D>> {
    const res = await this.invoke(
      methods.list,
      {
        type,
        tenancy: { partition: opts.partition ?? '', namespace: opts.namespace ?? '' },
        namePrefix: opts.namePrefix ?? '',
        ownerUid: opts.ownerUid ?? '',
        consistency: consistencyOf(opts.consistency),
        limit: pageSize(opts.limit),
        continue: opts.continue ?? '',
      },
      opts,
    );
    return pageOf<D>(res);
  }

  /**
   * The pages of a list, one per step, all at the first page's revision: for callers that
   * process a long list as it comes instead of holding it whole. A COMPACTED on a later page
   * is thrown (the pages already handed out cannot be taken back): start over.
   */
  async *listPages<D = unknown>(type: string, opts: ListOptions = {}): AsyncGenerator<ListPage<D>, void, undefined> {
    let cont: string | undefined;
    do {
      const page: ListPage<D> = await this.listPage<D>(type, { ...opts, ...(cont !== undefined ? { continue: cont } : {}) });
      yield page;
      cont = page.continue;
    } while (cont !== undefined);
  }

  /** Every resource owned by `owner` (a uid, or the owner's id), of any type; paged as `list`. */
  async listByOwner<D = unknown>(owner: string | ResourceId, opts: ListByOwnerOptions = {}): Promise<ListResult<D>> {
    const ownerUid = typeof owner === 'string' ? owner : owner.uid;
    return this.allPages<D>('ListByOwner', async (cont) =>
      pageOf<D>(await this.invoke(methods.listByOwner, { ownerUid, consistency: consistencyOf(opts.consistency), limit: pageSize(opts.limit), continue: cont ?? '' }, opts)),
    );
  }

  /** Follows continue tokens to the end; starts over on COMPACTED after the first page (see `list`). */
  private async allPages<D>(what: string, page: (cont: string | undefined) => Promise<ListPage<D>>): Promise<ListResult<D>> {
    for (let restarts = 0; ; restarts++) {
      const first = await page(undefined);
      const resources = [...first.resources];
      let cont = first.continue;
      try {
        while (cont !== undefined) {
          const next = await page(cont);
          // The server answers every page with the first page's revision; anything else would
          // make this list a mix of revisions.
          if (next.revision !== first.revision) throw new CairnClientError(ClientErrorCode.INTERNAL, `${what}: a later page answered revision ${next.revision}, not the first page's ${first.revision}`);
          for (const r of next.resources) resources.push(r);
          cont = next.continue;
        }
      } catch (e) {
        if (isCairnClientError(e, ClientErrorCode.COMPACTED) && restarts < CLIENT_DEFAULTS.listRestarts) continue;
        throw e;
      }
      return { resources, revision: first.revision, lastLeaderContactMs: first.lastLeaderContactMs };
    }
  }

  /**
   * Read-modify-write with optimistic concurrency: reads the resource (linearizably), asks `fn`
   * for the new content, and writes it with a compare-and-swap on the version read (create-only
   * when it was absent). When someone else wrote in between (CAS_FAILED) it backs off
   * (exponential, full jitter) and starts over, at most `maxAttempts` rounds. `fn` returning
   * undefined leaves the resource as it is. Returns the written resource, or the current one
   * (null when absent) if `fn` skipped. `timeoutMs` applies to each read and write; bound the
   * whole with `signal` (e.g. AbortSignal.timeout(ms)).
   */
  async update<D = unknown>(ref: ResourceRef, fn: UpdateFn<D>, opts: UpdateOptions = {}): Promise<Resource<D> | null> {
    const maxAttempts = opts.maxAttempts ?? CLIENT_DEFAULTS.updateMaxAttempts;
    if (!Number.isInteger(maxAttempts) || maxAttempts < 1) throw invalidOption(`maxAttempts must be an integer >= 1, got ${String(maxAttempts)}`);
    const base = checkPositive(opts.baseBackoffMs ?? CLIENT_DEFAULTS.updateBaseBackoffMs, 'baseBackoffMs');
    const cap = checkPositive(opts.maxBackoffMs ?? CLIENT_DEFAULTS.updateMaxBackoffMs, 'maxBackoffMs');
    const callOpts: CallOptions = { ...(opts.signal ? { signal: opts.signal } : {}), ...(opts.timeoutMs !== undefined ? { timeoutMs: opts.timeoutMs } : {}) };
    for (let attempt = 1; ; attempt++) {
      let current: Resource<D> | null;
      try {
        current = (await this.read<D>(ref, callOpts)).resource;
      } catch (e) {
        if (!isCairnClientError(e, ClientErrorCode.NOT_FOUND)) throw e;
        current = null;
      }
      const body = await fn(current);
      if (body === undefined) return current;
      try {
        return await this.write<D>(ref, { ...body, version: current?.version ?? '0' }, callOpts);
      } catch (e) {
        if (!isCairnClientError(e, ClientErrorCode.CAS_FAILED) || attempt >= maxAttempts) throw e;
      }
      // Someone else wrote between our read and our write: back off (full jitter) and retry.
      const ms = Math.random() * Math.min(cap, base * 2 ** (attempt - 1));
      if (await pause(ms, opts.signal)) throw new CairnClientError(ClientErrorCode.CANCELLED, `update of ${ref.type} ${ref.name} was cancelled after ${attempt} attempt(s)`);
    }
  }

  // ---- Calls, retries and failover ----------------------------------------------------------

  private async invoke<Req, Res>(m: Method<Req, Res>, req: Req, opts: CallOptions): Promise<Res> {
    if (this.closed) throw new CairnClientError(ClientErrorCode.UNAVAILABLE, `${m.name} refused: the client is closed`);
    const timeoutMs = checkPositive(opts.timeoutMs ?? this.timeoutMs, 'timeoutMs');
    const deadline = Date.now() + timeoutMs;
    const signal = opts.signal;
    if (signal?.aborted) throw new CairnClientError(ClientErrorCode.CANCELLED, `${m.name} was cancelled before it was sent`);
    let maybeApplied = false;
    let last: AttemptFailure | undefined;
    let rateLimited = 0;
    for (let attempts = 1; ; attempts++) {
      const index = this.current;
      const ep = this.endpoints[index] as Endpoint;
      const r = await this.attempt(ep, m, req, Math.min(deadline, Date.now() + this.attemptTimeoutMs), signal);
      if (r.ok) return r.value;
      const f = r.failure;
      if (r.cancelled || signal?.aborted) {
        throw new CairnClientError(ClientErrorCode.CANCELLED, `${m.name} was cancelled${m.mutates ? '; the write may or may not have been applied' : ''}`, {
          outcomeUnknown: m.mutates,
          grpcCode: f.grpcCode,
          endpoint: ep.address,
        });
      }
      const unanswered = !f.fromServer && f.grpcCode === grpc.status.DEADLINE_EXCEEDED;
      if (unanswered && Date.now() >= deadline) throw this.deadlineError(m, timeoutMs, maybeApplied || m.mutates, f, attempts);
      if (f.fromServer && f.error.code === ClientErrorCode.RATE_LIMITED) {
        // Refused before anything was done, so a write is safe to send again. Wait as long as
        // the node asked (or back off, doubling) and retry on the same node: moving on would
        // dodge the node's limit rather than honour it. Give up at once if the wait would pass
        // the deadline.
        rateLimited++;
        const waitMs = f.retryAfterMs ?? Math.min(CLIENT_DEFAULTS.failoverMaxBackoffMs, CLIENT_DEFAULTS.failoverBaseBackoffMs * 2 ** (rateLimited - 1)) * (0.5 + Math.random() / 2);
        if (Date.now() + waitMs >= deadline) {
          throw new CairnClientError(
            ClientErrorCode.RATE_LIMITED,
            `${m.name} was rate limited (${attempts} attempt(s)); the server asked to wait ${Math.ceil(waitMs)} ms, past the deadline: ${f.error.message}`,
            { details: f.error.details, grpcCode: f.grpcCode, ...(f.error.endpoint !== undefined ? { endpoint: f.error.endpoint } : {}), outcomeUnknown: maybeApplied, cause: f.error },
          );
        }
        if (await pause(waitMs, signal)) {
          throw new CairnClientError(ClientErrorCode.CANCELLED, `${m.name} was cancelled${maybeApplied ? '; the write may or may not have been applied' : ''}`, { outcomeUnknown: maybeApplied });
        }
        last = f;
        continue;
      }
      // Unanswered within attemptTimeoutMs, the call's deadline not yet reached: the node may be
      // stopped or cut off (its connection stays open), so try the next one. A write may have
      // reached it: the retry carries the same request id.
      const verdict: Verdict = unanswered ? (m.mutates ? 'retry-maybe-applied' : 'retry') : verdictOf(f, m.mutates);
      // A definite answer is trusted even after an attempt with an unknown outcome: the retry
      // carried the same request id, so had that attempt been applied, the server would have
      // answered with its result.
      if (verdict === 'final') throw f.error;
      if (verdict === 'retry-maybe-applied') maybeApplied = true;
      last = f;
      // Move on, unless a concurrent call already did.
      if (this.current === index) this.current = (index + 1) % this.endpoints.length;
      if (attempts % this.endpoints.length === 0) {
        const round = attempts / this.endpoints.length;
        const ms = Math.min(CLIENT_DEFAULTS.failoverMaxBackoffMs, CLIENT_DEFAULTS.failoverBaseBackoffMs * 2 ** (round - 1)) * (0.5 + Math.random() / 2);
        if (await pause(Math.min(ms, Math.max(0, deadline - Date.now())), signal)) {
          throw new CairnClientError(ClientErrorCode.CANCELLED, `${m.name} was cancelled${maybeApplied ? '; the write may or may not have been applied' : ''}`, { outcomeUnknown: maybeApplied });
        }
      }
      if (Date.now() >= deadline) throw this.deadlineError(m, timeoutMs, maybeApplied, last, attempts);
    }
  }

  private deadlineError(m: Method<unknown, unknown>, timeoutMs: number, maybeApplied: boolean, last: AttemptFailure, attempts: number): CairnClientError {
    const init = { grpcCode: last.grpcCode, cause: last.error, ...(last.error.endpoint !== undefined ? { endpoint: last.error.endpoint } : {}) };
    if (maybeApplied) {
      return new CairnClientError(
        ClientErrorCode.TIMEOUT,
        `${m.name} not confirmed within ${timeoutMs} ms (${attempts} attempt(s); last: ${last.error.message}); the write may or may not have been applied`,
        { ...init, outcomeUnknown: true },
      );
    }
    // Every attempt was refused outright (or this is a read): report why, as the last node said it.
    const code = last.error.code === ClientErrorCode.CANCELLED ? ClientErrorCode.UNAVAILABLE : last.error.code;
    return new CairnClientError(code, `${m.name} failed within ${timeoutMs} ms after ${attempts} attempt(s): ${last.error.message}`, { ...init, details: last.error.details });
  }

  private attempt<Req, Res>(
    ep: Endpoint,
    m: Method<Req, Res>,
    req: Req,
    deadline: number,
    signal: AbortSignal | undefined,
  ): Promise<{ ok: true; value: Res } | { ok: false; failure: AttemptFailure; cancelled: boolean }> {
    return new Promise((resolve) => {
      const metadata = new grpc.Metadata();
      if (this.token !== undefined) metadata.set('authorization', `Bearer ${this.token}`);
      let cancelled = false;
      const onAbort = (): void => {
        cancelled = true;
        call.cancel();
      };
      const call = ep.client.makeUnaryRequest<Req, Res>(m.path, m.serialize, m.deserialize, req, metadata, { deadline }, (err, value) => {
        signal?.removeEventListener('abort', onAbort);
        if (err) resolve({ ok: false, failure: decodeFailure(err, ep.address), cancelled });
        else if (value === undefined) {
          const error = new CairnClientError(ClientErrorCode.INTERNAL, `${m.name} got an empty answer (${ep.address})`, { endpoint: ep.address });
          resolve({ ok: false, failure: { error, fromServer: true, grpcCode: grpc.status.INTERNAL, details: error.message }, cancelled });
        } else resolve({ ok: true, value });
      });
      signal?.addEventListener('abort', onAbort, { once: true });
      if (signal?.aborted) onAbort();
    });
  }
}

function consistencyOf(c: Consistency | undefined): number {
  const v = CONSISTENCY[c ?? 'linearizable'];
  if (v === undefined) throw invalidOption(`consistency must be linearizable or stale, got ${JSON.stringify(c)}`);
  return v;
}
