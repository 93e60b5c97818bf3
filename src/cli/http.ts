/**
 * The CLI's one HTTP helper: a request to an agent's HTTP/JSON API (API.md "Cluster and
 * operations") with a deadline, turning every failure into a `CliError` with the exit code of
 * errors.ts and a message that says what happened. Server errors arrive as
 * `{"error": {"code", "message", ...details}}` and print as `CODE: message`.
 *
 * A write that times out or loses its connection after it was sent may or may not have been
 * applied (API.md "Errors"); the message says so rather than calling it failed. A connection
 * that was never made sent nothing, and the message says that instead.
 */
import type { Agent, fetch as UndiciFetch } from 'undici';
import { CliError, ExitCode, authHint, codeForStatus, exitCodeFor, usageError } from './errors.js';

export type Method = 'GET' | 'POST' | 'PUT' | 'DELETE';

export interface RequestOptions {
  /** The base URL from `parseEndpoint`, e.g. `http://127.0.0.1:7501`. */
  readonly endpoint: string;
  readonly method: Method;
  /** The path under the endpoint, e.g. `/v1/operator/raft/configuration`. */
  readonly path: string;
  /** A JSON request body. */
  readonly json?: unknown;
  /** A binary request body, sent as application/octet-stream. */
  readonly body?: Uint8Array;
  /** The deadline for the whole exchange, body included, in milliseconds. */
  readonly timeoutMs: number;
  /** Whether the request changes state: if its fate is unknown, the message says so. */
  readonly write: boolean;
  /** HTTPS checked against this CA (with a client certificate if given): `--tls-ca-file`. */
  readonly tls?: { readonly ca: Buffer; readonly cert?: Buffer; readonly key?: Buffer };
  /** The ACL token's secret, sent as `authorization: Bearer <token>` (`--token`, `CAIRN_TOKEN`). */
  readonly token?: string;
  /** Whether a 401/403 message gets the hint on how to give a token (default true). */
  readonly authHint?: boolean;
}

/**
 * undici, loaded on the first TLS request: the agent runs in the same executable and never
 * makes one, and loading undici costs 3.5 MiB of heap (docs/performance.md "Where a node's
 * memory goes").
 */
async function undici(): Promise<{ Agent: typeof Agent; fetch: typeof UndiciFetch }> {
  const { Agent: A, fetch: f } = await import('undici');
  return { Agent: A, fetch: f };
}

/** One connection pool per CA and certificate (a command makes few requests). */
const agents = new Map<string, Promise<Agent>>();
function tlsAgent(tls: NonNullable<RequestOptions['tls']>): Promise<Agent> {
  const key = `${tls.ca.toString('base64')}|${tls.cert?.toString('base64') ?? ''}`;
  let a = agents.get(key);
  if (a === undefined) {
    a = undici().then(({ Agent }) => new Agent({ connect: { ca: tls.ca, ...(tls.cert !== undefined && tls.key !== undefined ? { cert: tls.cert, key: tls.key } : {}) } }));
    agents.set(key, a);
  }
  return a;
}

const OUTCOME_UNKNOWN = 'the outcome is unknown: the change may or may not have been applied';

/**
 * `host:port`, `[v6]:port` or an `http(s)://` URL -> the base URL requests are made against.
 * `what` names where the value came from, for the usage error.
 */
export function parseEndpoint(value: string, what: string): string {
  const bad = (): CliError => usageError(`${what} must be host:port or an http(s) URL, got '${value}'`);
  const hasScheme = /^[a-z][a-z0-9+.-]*:\/\//i.test(value);
  if (!hasScheme && !/^(\[[0-9a-f:.]+\]|[^:/[\]\s]+):\d{1,5}$/i.test(value)) throw bad();
  let url: URL;
  try {
    url = new URL(hasScheme ? value : `http://${value}`);
  } catch {
    throw bad();
  }
  if ((url.protocol !== 'http:' && url.protocol !== 'https:') || url.hostname === '' || url.search !== '' || url.hash !== '') {
    throw bad();
  }
  return `${url.origin}${url.pathname.replace(/\/+$/, '')}`;
}

/** Sends the request; returns the response if it is a 2xx, else throws a `CliError`. */
export async function request(opts: RequestOptions): Promise<Response> {
  const headers: Record<string, string> = { accept: 'application/json' };
  if (opts.token !== undefined) headers['authorization'] = `Bearer ${opts.token}`;
  let body: string | Uint8Array | undefined;
  if (opts.json !== undefined) {
    headers['content-type'] = 'application/json';
    body = JSON.stringify(opts.json);
  } else if (opts.body !== undefined) {
    headers['content-type'] = 'application/octet-stream';
    body = opts.body;
  }
  const signal = AbortSignal.timeout(opts.timeoutMs);
  let response: Response;
  try {
    const init = { method: opts.method, headers, redirect: 'manual' as const, signal, ...(body === undefined ? {} : { body }) };
    // With TLS options, undici's own fetch and an Agent that trusts the cluster CA (the global
    // fetch cannot be given a CA); otherwise the global fetch.
    response =
      opts.tls !== undefined
        ? ((await (await undici()).fetch(`${opts.endpoint}${opts.path}`, { ...init, dispatcher: await tlsAgent(opts.tls) })) as unknown as Response)
        : await fetch(`${opts.endpoint}${opts.path}`, init);
  } catch (e) {
    throw transportError(e, opts);
  }
  if (response.ok) return response;
  throw await responseError(response, opts);
}

/** Sends the request and returns its JSON body (`{}` for an empty one). */
export async function requestJson(opts: RequestOptions): Promise<unknown> {
  const response = await request(opts);
  const text = await readBody(() => response.text(), opts);
  if (text.trim() === '') return {};
  try {
    return JSON.parse(text) as unknown;
  } catch {
    throw unexpected(opts, `its body is not JSON: ${clip(text)}`);
  }
}

/** Reads a response body under the request's deadline, mapping a failure like the request's. */
export async function readBody<T>(read: () => Promise<T>, opts: RequestOptions): Promise<T> {
  try {
    return await read();
  } catch (e) {
    throw transportError(e, opts);
  }
}

/** A response that does not have the shape the API promises. */
export function unexpected(opts: RequestOptions, why: string): CliError {
  return new CliError(ExitCode.GENERIC, `INTERNAL: unexpected response to ${opts.method} ${opts.endpoint}${opts.path}: ${why}`);
}

const clip = (s: string): string => (s.length > 200 ? `${s.slice(0, 200)}...` : s).replace(/\s+/g, ' ').trim();

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

async function responseError(response: Response, opts: RequestOptions): Promise<CliError> {
  let text = '';
  try {
    text = await response.text();
  } catch {
    // The status alone says enough.
  }
  let code: string | undefined;
  let message: string | undefined;
  let leader: string | undefined;
  try {
    const parsed: unknown = JSON.parse(text);
    const err = isRecord(parsed) ? parsed['error'] : undefined;
    if (isRecord(err)) {
      if (typeof err['code'] === 'string') code = err['code'];
      if (typeof err['message'] === 'string') message = err['message'];
      if (typeof err['leader'] === 'string' && err['leader'] !== '') leader = err['leader'];
    }
  } catch {
    // Not our error shape (a proxy's page, say): report the status.
  }
  if (response.status >= 300 && response.status < 400) {
    const location = response.headers.get('location');
    message ??= `the agent answered with a redirect${location === null ? '' : ` to ${location}`}; point --endpoint at that node`;
  }
  const status = `HTTP ${response.status}${response.statusText === '' ? '' : ` ${response.statusText}`}`;
  message ??= `${status} from ${opts.method} ${opts.endpoint}${opts.path}${text.trim() === '' ? '' : `: ${clip(text)}`}`;
  const printed = code ?? codeForStatus(response.status);
  let line = `${printed}: ${message}`;
  if (leader !== undefined) line += ` (leader: ${leader})`;
  const authCode = code ?? (response.status === 401 ? 'UNAUTHENTICATED' : response.status === 403 ? 'PERMISSION_DENIED' : undefined);
  if (authCode !== undefined && opts.authHint !== false) line += authHint(authCode, opts.token, message);
  if (code === 'RATE_LIMITED' || (code === undefined && response.status === 429)) {
    const after = response.headers.get('retry-after');
    line += after !== null && /^\d+$/.test(after.trim()) ? `; retry after ${after.trim()} s` : '; retry later';
  }
  if (opts.write && (code === 'TIMEOUT' || (code === undefined && response.status === 504))) line += `; ${OUTCOME_UNKNOWN}`;
  return new CliError(exitCodeFor(code, response.status), line);
}

/** Connection failures where nothing reached the server. */
const NOT_CONNECTED: Readonly<Record<string, string>> = {
  ECONNREFUSED: 'connection refused',
  ENOTFOUND: 'host not found',
  EAI_AGAIN: 'host name lookup failed',
  EHOSTUNREACH: 'host unreachable',
  ENETUNREACH: 'network unreachable',
  EADDRNOTAVAIL: 'address not available',
};

/** The first `code` on an error, its cause, or (for an AggregateError) its parts. */
function errnoOf(e: unknown, depth = 0): string | undefined {
  if (!isRecord(e) || depth > 4) return undefined;
  const rec = e;
  if (typeof rec['code'] === 'string') return rec['code'];
  const errors = rec['errors'];
  if (Array.isArray(errors)) {
    for (const part of errors) {
      const c = errnoOf(part, depth + 1);
      if (c !== undefined) return c;
    }
  }
  return errnoOf(rec['cause'], depth + 1);
}

function transportError(e: unknown, opts: RequestOptions): CliError {
  const name = e instanceof Error ? e.name : '';
  if (name === 'TimeoutError' || name === 'AbortError') {
    const note = opts.write ? `; ${OUTCOME_UNKNOWN}` : '';
    return new CliError(ExitCode.UNAVAILABLE, `TIMEOUT: no response from ${opts.endpoint} within ${opts.timeoutMs} ms (--timeout)${note}`, { cause: e });
  }
  const errno = errnoOf(e);
  const notConnected = errno === undefined ? undefined : NOT_CONNECTED[errno];
  if (notConnected !== undefined) {
    return new CliError(
      ExitCode.UNAVAILABLE,
      `UNAVAILABLE: cannot connect to ${opts.endpoint} (${notConnected}); is a cairn agent's HTTP API listening there? Set --endpoint or CAIRN_HTTP_ADDR${opts.write ? '; nothing was sent' : ''}`,
      { cause: e },
    );
  }
  const why = errno ?? (e instanceof Error ? (e.cause instanceof Error ? e.cause.message : e.message) : String(e));
  const note = opts.write ? `; ${OUTCOME_UNKNOWN}` : '';
  return new CliError(ExitCode.UNAVAILABLE, `UNAVAILABLE: the connection to ${opts.endpoint} failed (${why})${note}`, { cause: e });
}
