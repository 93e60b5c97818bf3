import type { ResourceJson } from '../resource-json.js';

/**
 * What the conformance suite talks to: the five resource operations of API.md, HTTP-shaped
 * (query parameters and JSON bodies as a client sends them), answering with the JSON result or
 * the error of API.md's table. One suite, several targets: the ResourceService over an
 * in-process replica, one agent over HTTP, a follower of a three-node cluster over HTTP.
 */
export interface ResourceApiTarget {
  /** Shown in test names. */
  readonly name: string;
  write(type: string, name: string, tenancy: TenancyQuery, body: WriteBody): Promise<ApiResult<ResourceJson>>;
  read(type: string, name: string, query: ReadQuery): Promise<ApiResult<ResourceJson>>;
  delete(type: string, name: string, query: DeleteQuery): Promise<ApiResult<DeleteJson>>;
  writeStatus(type: string, name: string, key: string, tenancy: TenancyQuery, body: StatusBody): Promise<ApiResult<ResourceJson>>;
  list(type: string, query: ListQuery): Promise<ApiResult<ListJson>>;
  /** Raw HTTP access, for the cases only a wire protocol has (unknown query parameters, bodies that are not JSON, 405, the 1 MiB limit). Absent for in-process targets. */
  readonly raw?: (req: RawRequest) => Promise<RawResponse>;
}

export interface TenancyQuery {
  readonly partition?: string;
  readonly namespace?: string;
}

export interface ReadQuery extends TenancyQuery {
  readonly uid?: string;
  readonly consistency?: 'linearizable' | 'stale';
}

export interface DeleteQuery extends TenancyQuery {
  readonly version?: string;
  readonly uid?: string;
}

export interface ListQuery extends TenancyQuery {
  readonly name_prefix?: string;
  readonly owner_uid?: string;
  readonly consistency?: 'linearizable' | 'stale';
  /** Page size (decimal); absent: the server's page maximum. */
  readonly limit?: string;
  /** The previous page's `continue`. */
  readonly continue?: string;
}

/**
 * JSON text to send as `data` verbatim (for data no JavaScript value can be serialized as here,
 * such as nesting deeper than JSON.stringify's recursion allows). In-process targets parse it.
 */
export class JsonText {
  constructor(readonly text: string) {}
}

/** The Write body of API.md. `data` (or a JsonText), `metadata`, `owner`, `finalizers` and `status` are sent as given. */
export interface WriteBody {
  readonly data?: unknown;
  readonly metadata?: unknown;
  readonly owner?: unknown;
  readonly finalizers?: unknown;
  readonly version?: string;
  readonly status?: unknown;
  readonly uid?: string;
}

/** The WriteStatus body of API.md. */
export interface StatusBody {
  readonly uid?: string;
  readonly observed_generation?: string;
  readonly conditions?: unknown;
  readonly version?: string;
}

export interface DeleteJson {
  readonly deleted: boolean;
  readonly resource?: ResourceJson;
}

export interface ListJson {
  readonly resources: ResourceJson[];
  readonly revision: string;
  /** Present when more remain. */
  readonly continue?: string;
}

/** An error of API.md's table: `code`, `message`, the HTTP status it maps to, and the details. */
export interface ApiError {
  readonly code: string;
  readonly message: string;
  readonly httpStatus: number;
  readonly details: Readonly<Record<string, unknown>>;
}

export type ApiResult<T> = { readonly ok: true; readonly value: T } | { readonly ok: false; readonly error: ApiError };

export interface RawRequest {
  readonly method: string;
  /** Path and query, sent as is (no encoding added). */
  readonly path: string;
  readonly body?: string | Uint8Array;
  readonly headers?: Readonly<Record<string, string>>;
  /** Send the body as a stream in 64 KiB chunks (Transfer-Encoding: chunked, no Content-Length). */
  readonly chunked?: boolean;
}

export interface RawResponse {
  readonly status: number;
  readonly contentType: string;
  readonly text: string;
  /** The body parsed as JSON, or undefined when it is not JSON. */
  readonly json: unknown;
}

/** API.md's error table: code -> HTTP status. */
export const HTTP_STATUS_OF_CODE: Readonly<Record<string, number>> = {
  INVALID_ARGUMENT: 400,
  GROUP_VERSION_MISMATCH: 400,
  UNAUTHENTICATED: 401,
  PERMISSION_DENIED: 403,
  NOT_FOUND: 404,
  CAS_FAILED: 409,
  UID_MISMATCH: 409,
  COMPACTED: 410,
  TOO_LARGE: 413,
  UNAVAILABLE: 503,
  TIMEOUT: 504,
  INTERNAL: 500,
};

/**
 * Checks that `body` has the HTTP error shape of API.md, `{"error": {"code", "message", ...}}`,
 * and returns the problem, or undefined when it conforms.
 */
export function errorShapeProblem(body: unknown): string | undefined {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return `the body is not a JSON object: ${JSON.stringify(body)?.slice(0, 200)}`;
  const keys = Object.keys(body);
  if (keys.length !== 1 || keys[0] !== 'error') return `the body has keys ${JSON.stringify(keys)}, not just "error"`;
  const e = (body as { error: unknown }).error;
  if (typeof e !== 'object' || e === null || Array.isArray(e)) return 'body.error is not an object';
  const o = e as Record<string, unknown>;
  if (typeof o['code'] !== 'string' || !(o['code'] in HTTP_STATUS_OF_CODE)) return `body.error.code ${JSON.stringify(o['code'])} is not a code of API.md`;
  if (typeof o['message'] !== 'string' || o['message'] === '') return 'body.error.message is not a non-empty string';
  return undefined;
}
