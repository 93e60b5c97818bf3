import * as http from 'node:http';
import * as https from 'node:https';
import type { Socket } from 'node:net';
import { CairnError, ErrorCode, type Logger } from '../base/index.js';
import type { AuditLog } from './audit.js';
import { errorBody, httpStatusOf, RETRY_AFTER_SECONDS, toCairnError } from './errors.js';
import { HostAllowList, isMediaType } from './host-check.js';
import type { AclTarget, AclVerb } from '../auth/index.js';
import { bearerToken, normalizeIp, retryAfterSecondsOf, type RequestLimits } from './limits.js';

/** Request bodies are at most 1 MiB (API.md); more is TOO_LARGE (413). */
export const MAX_BODY_BYTES = 1024 * 1024;

export interface HttpRequest {
  readonly method: string;
  readonly path: string;
  readonly params: Readonly<Record<string, string>>;
  readonly query: URLSearchParams;
  readonly headers: http.IncomingHttpHeaders;
  /** The raw body (empty when none). */
  readonly body: Buffer;
  /** The body parsed as JSON; throws INVALID_ARGUMENT when it is not JSON. */
  json(): unknown;
  /** The client's IP (for limits and the audit log). */
  readonly remoteAddress: string;
  /** The connection the request came on (a key for per-connection limits). */
  readonly connection: object;
}

export type HttpResponse =
  | { readonly status: number; readonly json: unknown; readonly headers?: Readonly<Record<string, string>> }
  | { readonly status: number; readonly bytes: Uint8Array; readonly contentType: string; readonly headers?: Readonly<Record<string, string>> }
  /** The handler writes the response itself (streaming). */
  | { readonly status: 'streamed' };

export type Handler = (req: HttpRequest, res: http.ServerResponse) => Promise<HttpResponse> | HttpResponse;

export interface RouteOptions {
  /** This route's body limit in bytes (default: the server's, 1 MiB). */
  readonly maxBodyBytes?: number;
  /**
   * The Content-Type a PUT, POST or PATCH to this route must carry (default
   * `application/json`); anything else is 415 (host-check.ts says why).
   */
  readonly contentType?: string;
  /**
   * Who may call this route (issue 16: every door checks). `public`: anyone (probes, ACL
   * bootstrap, leader status); `service`: the handler's service checks each operation itself
   * (the resource API, watches, ACL objects); `{verb, target}`: the server checks the caller holds
   * that grant before the handler runs. Routes that do not say are refused at registration.
   */
  readonly access: RouteAccess;
  /** Not counted by the rate limits (the probes: a load balancer must always reach them). */
  readonly rateLimitExempt?: boolean;
  /**
   * An admin action (docs/security.md "Audit log"): the audit log records each call, with its
   * outcome. A string names the action; a function names it per request (undefined: not one).
   */
  readonly audit?: string | ((req: HttpRequest) => { readonly action: string; readonly target?: Readonly<Record<string, unknown>> } | undefined);
}

export type RouteAccess = 'public' | 'service' | { readonly verb: AclVerb; readonly target: AclTarget };

interface Route {
  readonly method: string;
  readonly parts: readonly string[];
  readonly handler: Handler;
  readonly options: RouteOptions;
}

/** The bearer token of a request, if any (kept only for the limits' keys; never logged). */
function tokenOf(req: http.IncomingMessage): string | undefined {
  return bearerToken(req.headers['authorization']);
}

/** The request's path without its query (which may hold anything). */
function pathOf(req: http.IncomingMessage): string {
  const u = req.url ?? '/';
  const q = u.indexOf('?');
  return (q < 0 ? u : u.slice(0, q)).slice(0, 256);
}

/** A small router: `/v1/resource/:type/:name` patterns, exact methods, JSON errors everywhere. */
export class Router {
  private readonly routes: Route[] = [];

  add(method: string, pattern: string, handler: Handler, options: RouteOptions): this {
    if (options.access === undefined) throw new Error(`route ${method} ${pattern} does not say who may call it`);
    this.routes.push({ method, parts: pattern.split('/').filter((p) => p !== ''), handler, options });
    return this;
  }

  /** Every route with who may call it (for the test that every door checks). */
  list(): Array<{ method: string; pattern: string; access: RouteAccess }> {
    return this.routes.map((r) => ({ method: r.method, pattern: `/${r.parts.join('/')}`, access: r.options.access }));
  }

  match(method: string, path: string): { handler: Handler; params: Record<string, string>; options: RouteOptions } | 'method-not-allowed' | undefined {
    const segs = path.split('/').filter((p) => p !== '');
    let pathMatched = false;
    for (const r of this.routes) {
      if (r.parts.length !== segs.length) continue;
      const params: Record<string, string> = {};
      let ok = true;
      for (let i = 0; i < segs.length; i++) {
        const p = r.parts[i] as string;
        const s = segs[i] as string;
        if (p.startsWith(':')) {
          try {
            params[p.slice(1)] = decodeURIComponent(s);
          } catch {
            ok = false;
            break;
          }
        } else if (p !== s) {
          ok = false;
          break;
        }
      }
      if (!ok) continue;
      pathMatched = true;
      if (r.method === method) return { handler: r.handler, params, options: r.options };
    }
    return pathMatched ? 'method-not-allowed' : undefined;
  }
}

export function sendJson(res: http.ServerResponse, status: number, body: unknown, headers: Readonly<Record<string, string>> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...headers });
  res.end(text);
}

export function sendError(res: http.ServerResponse, e: unknown): void {
  const err = toCairnError(e);
  const status = httpStatusOf(err);
  const headers: Record<string, string> =
    err.code === ErrorCode.RATE_LIMITED ? { 'retry-after': String(retryAfterSecondsOf(err)) } : status === 503 ? { 'retry-after': String(RETRY_AFTER_SECONDS) } : {};
  if (res.headersSent) {
    res.destroy();
    return;
  }
  sendJson(res, status, errorBody(err), headers);
}

/** What an over-limit or unroutable request body may still be drained of before we give up. */
const DRAIN_LIMIT_BYTES = 64 * 1024 * 1024;
const DRAIN_LIMIT_MS = 5_000;

/**
 * Reads and discards the rest of a request body (bounded), so that an early answer (413, 404)
 * reaches the client instead of being lost to a TCP reset when the socket closes with unread
 * data. Resolves whether the body was fully drained.
 */
function drain(req: http.IncomingMessage, already: number): Promise<boolean> {
  if (req.complete) return Promise.resolve(true);
  return new Promise((resolve) => {
    let size = already;
    const timer = setTimeout(() => finish(false), DRAIN_LIMIT_MS);
    const finish = (ok: boolean): void => {
      clearTimeout(timer);
      req.removeListener('data', onData);
      req.removeListener('end', onEnd);
      req.removeListener('error', onError);
      resolve(ok);
    };
    const onData = (c: Buffer): void => {
      size += c.length;
      if (size > DRAIN_LIMIT_BYTES) finish(false);
    };
    const onEnd = (): void => finish(true);
    const onError = (): void => finish(false);
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onError);
    req.resume();
  });
}

class BodyTooLarge extends CairnError {
  constructor(
    message: string,
    readonly drained: Promise<boolean>,
    limit: number,
  ) {
    super(ErrorCode.TOO_LARGE, message, { limit });
  }
}

function readBody(req: http.IncomingMessage, limit: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const declared = Number(req.headers['content-length'] ?? '0');
    if (Number.isFinite(declared) && declared > limit) {
      reject(new BodyTooLarge(`request body of ${declared} bytes is over the ${limit}-byte limit`, drain(req, 0), limit));
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (c: Buffer): void => {
      size += c.length;
      if (size > limit) {
        req.removeListener('data', onData);
        req.removeListener('end', onEnd);
        chunks.length = 0;
        reject(new BodyTooLarge(`request body is over the ${limit}-byte limit`, drain(req, size), limit));
        return;
      }
      chunks.push(c);
    };
    const onEnd = (): void => resolve(Buffer.concat(chunks));
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', reject);
  });
}

export interface HttpServerOptions {
  readonly router: Router;
  readonly logger: Logger;
  readonly maxBodyBytes?: number;
  /** Told about every answered request (for metrics). */
  readonly onResponse?: (method: string, status: number) => void;
  /**
   * Serve HTTPS with this certificate and key (PEM; the node's, docs/security.md). Rotated with
   * `server.setSecureContext`. Absent: plain HTTP (a loopback or `--insecure` node).
   */
  readonly tls?: { readonly cert: Buffer; readonly key: Buffer; readonly ca: Buffer };
  /** The Host headers answered (default: loopback names and IP literals only). */
  readonly allowedHosts?: HostAllowList;
  /** Checks a route's `{verb, target}` grant for a request (throws UNAUTHENTICATED or PERMISSION_DENIED). Absent: nothing to check (no access control). */
  readonly authorize?: (req: HttpRequest, verb: AclVerb, target: AclTarget) => Promise<void>;
  /** Per-address and per-token rate limits (default: none). */
  readonly limits?: RequestLimits;
  /** Where denied requests and admin actions are recorded (default: nowhere). */
  readonly audit?: AuditLog;
  /** Open connections at most (0 = no cap; default 0); over it a new connection is answered 503 and closed. */
  readonly maxConnections?: number;
  /** Told of each connection refused by the cap (for metrics). */
  readonly onConnectionRefused?: () => void;
  /** Slow-client timeouts (docs/security.md "Limits"); each defaults to Node's. */
  readonly timeouts?: HttpTimeouts;
}

export interface HttpTimeouts {
  /** The whole header block must arrive within this (ms) of the request's first byte. */
  readonly headersMs: number;
  /** The whole request (headers and body) must arrive within this (ms); a response may stream longer. */
  readonly requestMs: number;
  /** An idle keep-alive connection is closed after this (ms). */
  readonly keepAliveMs: number;
}

/** How often Node checks the header and request timeouts (ms): a slow client is cut at most this late. */
const TIMEOUT_CHECK_INTERVAL_MS = 1_000;

/** The HTTP API's server: plain or TLS, the same handlers. */
export type ApiHttpServer = http.Server | https.Server;

/**
 * The HTTP/JSON API server. Every failure, including unknown routes, bad bodies and handler
 * bugs, is answered with the error shape of API.md; nothing a client sends can crash it.
 */
export function createHttpServer(opts: HttpServerOptions): ApiHttpServer {
  const limit = opts.maxBodyBytes ?? MAX_BODY_BYTES;
  const allowedHosts = opts.allowedHosts ?? new HostAllowList([]);
  /** Connections over the cap: answered 503 at once; a request Node still parses on one is never run. */
  const refused = new WeakSet<object>();
  const listener = (req: http.IncomingMessage, res: http.ServerResponse): void => {
    if (refused.has(req.socket)) {
      req.socket.destroy();
      return;
    }
    if (opts.onResponse) res.once('finish', () => opts.onResponse?.(req.method ?? 'GET', res.statusCode));
    void handle(req, res).catch((e: unknown) => answerError(req, res, e));
  };
  // headersTimeout and requestTimeout bound how long Node waits for a request to *arrive*
  // (checked every connectionsCheckingInterval); they never cut a response being streamed,
  // such as a watch (Node's docs: requestTimeout is "for receiving the entire request").
  const t = opts.timeouts;
  const serverOpts: http.ServerOptions = t === undefined ? {} : { headersTimeout: t.headersMs, requestTimeout: t.requestMs, keepAliveTimeout: t.keepAliveMs, connectionsCheckingInterval: TIMEOUT_CHECK_INTERVAL_MS };
  const server = opts.tls !== undefined ? https.createServer({ ...serverOpts, cert: opts.tls.cert, key: opts.tls.key, ca: opts.tls.ca }, listener) : http.createServer(serverOpts, listener);
  if (t !== undefined) server.keepAliveTimeout = t.keepAliveMs;
  const maxConnections = opts.maxConnections ?? 0;
  let connections = 0;
  server.on(opts.tls !== undefined ? 'secureConnection' : 'connection', (socket: Socket) => {
    connections++;
    socket.once('close', () => connections--);
    if (maxConnections > 0 && connections > maxConnections) {
      refused.add(socket);
      opts.onConnectionRefused?.();
      // Answer and close rather than leave the client hanging: the socket's request (if any)
      // is never read.
      const body = JSON.stringify(errorBody(new CairnError(ErrorCode.UNAVAILABLE, `this node already has ${maxConnections} open HTTP connections, its limit; retry later or use another node`, { limit: maxConnections })));
      socket.on('error', () => {});
      socket.end(`HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: ${RETRY_AFTER_SECONDS}\r\nconnection: close\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
      setTimeout(() => socket.destroy(), 1000).unref();
    }
  });

  /** Answers an error after draining what is left of the body; logs only server-side faults. */
  async function answerError(req: http.IncomingMessage, res: http.ServerResponse, e: unknown): Promise<void> {
    const err = toCairnError(e);
    opts.audit?.denied({ transport: 'http', method: `${req.method ?? 'GET'} ${pathOf(req)}`, address: normalizeIp(req.socket.remoteAddress), token: tokenOf(req), code: err.code, message: err.message });
    if (httpStatusOf(err) >= 500 && err.code !== ErrorCode.UNAVAILABLE && err.code !== ErrorCode.TIMEOUT && err.code !== ErrorCode.NO_SPACE) {
      opts.logger.error({ err: err.message, code: err.code, path: req.url }, 'http request failed on the server side');
    }
    const drained = e instanceof BodyTooLarge ? await e.drained : await drain(req, 0);
    if (!drained) res.setHeader('connection', 'close');
    sendError(res, err);
  }

  async function handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    let url: URL;
    try {
      url = new URL(req.url ?? '/', 'http://cairn');
    } catch {
      sendError(res, new CairnError(ErrorCode.INVALID_ARGUMENT, 'the request URL does not parse'));
      return;
    }
    const method = req.method ?? 'GET';
    if (!allowedHosts.allows(req.headers.host)) {
      // DNS rebinding (etcd CVE-2018-1099): a browser page whose name now points here.
      const host = req.headers.host === undefined ? 'no Host header' : `Host ${JSON.stringify(req.headers.host)}`;
      await answerError(
        req,
        res,
        new CairnError(ErrorCode.PERMISSION_DENIED, `this node does not answer requests for ${host}; use its address or localhost, or add the name to --http-allowed-hosts`, {
          host: req.headers.host ?? null,
        }),
      );
      return;
    }
    const m = opts.router.match(method, url.pathname);
    if (opts.limits !== undefined && !(typeof m === 'object' && m.options.rateLimitExempt === true)) {
      // Before the body is read: a refused request costs no buffering.
      opts.limits.check({ address: normalizeIp(req.socket.remoteAddress), token: tokenOf(req) });
    }
    if (m === undefined) {
      await answerError(req, res, new CairnError(ErrorCode.NOT_FOUND, `no such endpoint: ${method} ${url.pathname}`));
      return;
    }
    if (m === 'method-not-allowed') {
      const err = new CairnError(ErrorCode.INVALID_ARGUMENT, `method ${method} is not allowed on ${url.pathname}`);
      if (!(await drain(req, 0))) res.setHeader('connection', 'close');
      sendJson(res, 405, errorBody(err));
      return;
    }
    if (method === 'PUT' || method === 'POST' || method === 'PATCH') {
      const want = m.options.contentType ?? 'application/json';
      const got = req.headers['content-type'];
      if (!isMediaType(got, want)) {
        // A browser can send a cross-site PUT/POST of another type without a CORS preflight.
        const err = new CairnError(ErrorCode.INVALID_ARGUMENT, `${method} ${url.pathname} needs Content-Type: ${want}, got ${got === undefined ? 'none' : JSON.stringify(got)}`, {
          content_type: got ?? null,
        });
        if (!(await drain(req, 0))) res.setHeader('connection', 'close');
        sendJson(res, 415, errorBody(err));
        return;
      }
    }
    const body = method === 'GET' || method === 'HEAD' ? ((await drain(req, 0)), Buffer.alloc(0)) : await readBody(req, m.options.maxBodyBytes ?? limit);
    const request: HttpRequest = {
      method,
      path: url.pathname,
      params: m.params,
      query: url.searchParams,
      headers: req.headers,
      body,
      remoteAddress: normalizeIp(req.socket.remoteAddress),
      connection: req.socket,
      json: () => {
        if (body.length === 0) throw new CairnError(ErrorCode.INVALID_ARGUMENT, 'the request needs a JSON body');
        try {
          return JSON.parse(body.toString('utf8')) as unknown;
        } catch (e) {
          throw new CairnError(ErrorCode.INVALID_ARGUMENT, `the request body is not valid JSON: ${e instanceof Error ? e.message : String(e)}`);
        }
      },
    };
    const audited = m.options.audit === undefined ? undefined : typeof m.options.audit === 'string' ? { action: m.options.audit } : m.options.audit(request);
    const recordAdmin = (outcome: string): void => {
      if (audited === undefined) return;
      opts.audit?.admin({ transport: 'http', action: audited.action, method: `${method} ${url.pathname}`, address: request.remoteAddress, token: tokenOf(req), outcome, ...(audited.target ? { target: audited.target } : {}) });
    };
    let out: HttpResponse;
    try {
      const access = m.options.access;
      if (typeof access === 'object' && opts.authorize !== undefined) await opts.authorize(request, access.verb, access.target);
      out = await m.handler(request, res);
    } catch (e) {
      recordAdmin(toCairnError(e).code);
      await answerError(req, res, e);
      return;
    }
    recordAdmin('ok');
    if (out.status === 'streamed') return;
    if ('json' in out) sendJson(res, out.status, out.json, out.headers);
    else {
      res.writeHead(out.status, { 'content-type': out.contentType, 'content-length': out.bytes.length, ...(out.headers ?? {}) });
      res.end(out.bytes);
    }
  }

  server.on('clientError', (err: NodeJS.ErrnoException, socket) => {
    // Malformed HTTP that Node refuses before routing: answer with the error shape if we can,
    // never crash.
    if (!socket.writable) {
      socket.destroy();
      return;
    }
    const tooLarge = err.code === 'HPE_HEADER_OVERFLOW';
    // Node's headersTimeout / requestTimeout: the request did not arrive in time (a slow client).
    const timedOut = err.code === 'ERR_HTTP_REQUEST_TIMEOUT';
    const cairnErr = tooLarge
      ? new CairnError(ErrorCode.TOO_LARGE, 'request headers are too large')
      : timedOut
        ? new CairnError(ErrorCode.TIMEOUT, 'the request did not arrive within the header or request timeout (--http-headers-timeout-ms, --http-request-timeout-ms)')
        : new CairnError(ErrorCode.INVALID_ARGUMENT, `malformed HTTP request (${err.code ?? 'parse error'})`);
    const body = JSON.stringify(errorBody(cairnErr));
    const status = tooLarge ? '431 Request Header Fields Too Large' : timedOut ? '408 Request Timeout' : '400 Bad Request';
    socket.end(`HTTP/1.1 ${status}\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
  });
  return server;
}
