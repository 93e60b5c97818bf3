import type { ResourceJson } from '../resource-json.js';
import {
  HTTP_STATUS_OF_CODE,
  JsonText,
  errorShapeProblem,
  type ApiResult,
  type DeleteJson,
  type ListJson,
  type RawRequest,
  type RawResponse,
  type ResourceApiTarget,
  type WriteBody,
} from './target.js';

/** Requests that take longer than this are a hang: the target throws instead of waiting. */
export const HTTP_REQUEST_TIMEOUT_MS = 15_000;

function queryString(q: Readonly<Record<string, string | undefined>>): string {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(q)) if (v !== undefined) p.append(k, v);
  const s = p.toString();
  return s === '' ? '' : `?${s}`;
}

const seg = (s: string): string => encodeURIComponent(s);

/** The body text of a write; `data` given as JsonText goes in verbatim. */
function writeBodyText(body: WriteBody): string {
  if (!(body.data instanceof JsonText)) return JSON.stringify(body);
  const { data, ...rest } = body;
  const others = JSON.stringify(rest).slice(1, -1);
  return `{"data":${data.text}${others === '' ? '' : `,${others}`}}`;
}

/** One HTTP request with a deadline; returns status, content type, text and parsed JSON. */
export async function rawHttp(baseUrl: string, req: RawRequest, timeoutMs = HTTP_REQUEST_TIMEOUT_MS): Promise<RawResponse> {
  const init: RequestInit & { duplex?: 'half' } = {
    method: req.method,
    // The API takes PUT, POST and PATCH only as application/json, with a body or without.
    headers: { ...(req.body !== undefined || req.method === 'PUT' || req.method === 'POST' || req.method === 'PATCH' ? { 'content-type': 'application/json' } : {}), ...(req.headers ?? {}) },
    signal: AbortSignal.timeout(timeoutMs),
  };
  if (req.body !== undefined) {
    if (req.chunked === true) {
      const bytes = typeof req.body === 'string' ? new TextEncoder().encode(req.body) : req.body;
      init.body = new ReadableStream<Uint8Array>({
        start(c) {
          for (let i = 0; i < bytes.length; i += 64 * 1024) c.enqueue(bytes.subarray(i, i + 64 * 1024));
          c.close();
        },
      });
      init.duplex = 'half';
    } else {
      init.body = req.body;
    }
  }
  const res = await fetch(`${baseUrl}${req.path}`, init);
  const text = await res.text();
  let json: unknown;
  try {
    json = text === '' ? undefined : (JSON.parse(text) as unknown);
  } catch {
    json = undefined;
  }
  return { status: res.status, contentType: res.headers.get('content-type') ?? '', text, json };
}

/**
 * Turns an HTTP answer into an ApiResult. An answer that breaks the contract's shape (an error
 * without the JSON error body, a status that does not match the code, a 2xx that is not JSON)
 * throws: the suite reports it as a failure of the test that made the request.
 */
function toResult<T>(what: string, r: RawResponse): ApiResult<T> {
  if (r.status === 200) {
    if (!r.contentType.startsWith('application/json') || r.json === undefined) throw new Error(`${what}: 200 without a JSON body (${r.contentType}): ${r.text.slice(0, 200)}`);
    return { ok: true, value: r.json as T };
  }
  const problem = errorShapeProblem(r.json);
  if (problem !== undefined) throw new Error(`${what}: HTTP ${r.status} without the error shape of API.md: ${problem}; body ${r.text.slice(0, 300)}`);
  const { code, message, ...details } = (r.json as { error: { code: string; message: string } & Record<string, unknown> }).error;
  if (HTTP_STATUS_OF_CODE[code] !== r.status) throw new Error(`${what}: code ${code} came with HTTP ${r.status}; API.md says ${HTTP_STATUS_OF_CODE[code]}`);
  return { ok: false, error: { code, message, httpStatus: r.status, details } };
}

/** The resource API of one agent over real HTTP (`fetch`). */
export function httpTarget(name: string, httpAddress: string): ResourceApiTarget {
  const base = `http://${httpAddress}`;
  const call = async <T>(what: string, req: RawRequest): Promise<ApiResult<T>> => toResult<T>(`${what} ${req.method} ${req.path}`, await rawHttp(base, req));
  return {
    name,
    write: (type, n, ten, body) =>
      call<ResourceJson>('write', { method: 'PUT', path: `/v1/resource/${seg(type)}/${seg(n)}${queryString({ ...ten })}`, body: writeBodyText(body) }),
    read: (type, n, q) => call<ResourceJson>('read', { method: 'GET', path: `/v1/resource/${seg(type)}/${seg(n)}${queryString({ ...q })}` }),
    delete: (type, n, q) => call<DeleteJson>('delete', { method: 'DELETE', path: `/v1/resource/${seg(type)}/${seg(n)}${queryString({ ...q })}` }),
    writeStatus: (type, n, key, ten, body) =>
      call<ResourceJson>('writeStatus', { method: 'PUT', path: `/v1/resource/${seg(type)}/${seg(n)}/status/${seg(key)}${queryString({ ...ten })}`, body: JSON.stringify(body) }),
    list: (type, q) => call<ListJson>('list', { method: 'GET', path: `/v1/resources/${seg(type)}${queryString({ ...q })}` }),
    raw: (req) => rawHttp(base, req),
  };
}
