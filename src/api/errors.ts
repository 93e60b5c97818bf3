import * as grpc from '@grpc/grpc-js';
import { CairnError, ErrorCode, isCairnError } from '../base/index.js';
import { retryAfterSecondsOf } from './limits.js';

/**
 * The one place that maps error codes to HTTP and gRPC statuses (API.md "Errors"). Internal
 * codes that should not reach users (NOT_LEADER after forwarding gave up, PROPOSAL_DROPPED)
 * surface as UNAVAILABLE: retry later.
 */
const TABLE: Record<ErrorCode, { http: number; grpc: grpc.status; publicCode: ErrorCode }> = {
  INVALID_ARGUMENT: { http: 400, grpc: grpc.status.INVALID_ARGUMENT, publicCode: ErrorCode.INVALID_ARGUMENT },
  GROUP_VERSION_MISMATCH: { http: 400, grpc: grpc.status.INVALID_ARGUMENT, publicCode: ErrorCode.GROUP_VERSION_MISMATCH },
  UNAUTHENTICATED: { http: 401, grpc: grpc.status.UNAUTHENTICATED, publicCode: ErrorCode.UNAUTHENTICATED },
  PERMISSION_DENIED: { http: 403, grpc: grpc.status.PERMISSION_DENIED, publicCode: ErrorCode.PERMISSION_DENIED },
  NOT_FOUND: { http: 404, grpc: grpc.status.NOT_FOUND, publicCode: ErrorCode.NOT_FOUND },
  CAS_FAILED: { http: 409, grpc: grpc.status.ABORTED, publicCode: ErrorCode.CAS_FAILED },
  UID_MISMATCH: { http: 409, grpc: grpc.status.FAILED_PRECONDITION, publicCode: ErrorCode.UID_MISMATCH },
  COMPACTED: { http: 410, grpc: grpc.status.OUT_OF_RANGE, publicCode: ErrorCode.COMPACTED },
  TOO_LARGE: { http: 413, grpc: grpc.status.RESOURCE_EXHAUSTED, publicCode: ErrorCode.TOO_LARGE },
  UNAVAILABLE: { http: 503, grpc: grpc.status.UNAVAILABLE, publicCode: ErrorCode.UNAVAILABLE },
  TIMEOUT: { http: 504, grpc: grpc.status.DEADLINE_EXCEEDED, publicCode: ErrorCode.TIMEOUT },
  INTERNAL: { http: 500, grpc: grpc.status.INTERNAL, publicCode: ErrorCode.INTERNAL },
  NOT_LEADER: { http: 503, grpc: grpc.status.UNAVAILABLE, publicCode: ErrorCode.UNAVAILABLE },
  PROPOSAL_DROPPED: { http: 503, grpc: grpc.status.UNAVAILABLE, publicCode: ErrorCode.UNAVAILABLE },
  INVALID_CONFIG_CHANGE: { http: 409, grpc: grpc.status.FAILED_PRECONDITION, publicCode: ErrorCode.INVALID_CONFIG_CHANGE },
  SLOW_CONSUMER: { http: 429, grpc: grpc.status.RESOURCE_EXHAUSTED, publicCode: ErrorCode.SLOW_CONSUMER },
  RESET: { http: 410, grpc: grpc.status.ABORTED, publicCode: ErrorCode.RESET },
  NO_SPACE: { http: 507, grpc: grpc.status.RESOURCE_EXHAUSTED, publicCode: ErrorCode.NO_SPACE },
  RATE_LIMITED: { http: 429, grpc: grpc.status.RESOURCE_EXHAUSTED, publicCode: ErrorCode.RATE_LIMITED },
};

/** Seconds a client should wait before retrying an UNAVAILABLE answer. */
export const RETRY_AFTER_SECONDS = 1;

export function toCairnError(e: unknown): CairnError {
  if (isCairnError(e)) return e;
  return new CairnError(ErrorCode.INTERNAL, e instanceof Error ? e.message : String(e));
}

export function httpStatusOf(e: CairnError): number {
  return TABLE[e.code].http;
}

export function grpcStatusOf(e: CairnError): grpc.status {
  return TABLE[e.code].grpc;
}

/** camelCase to snake_case (`storedType` -> `stored_type`); snake_case is left as it is. */
function snakeCase(key: string): string {
  return key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}

/**
 * Detail keys whose numbers are log positions: the versions of CAS_FAILED (`expected`,
 * `actual`), and any `*revision`, `*version` or `*index`. They travel as decimal strings, as
 * versions and revisions do everywhere in the API (JSON numbers lose precision past 2^53).
 */
function isPositionKey(key: string): boolean {
  return key === 'expected' || key === 'actual' || /(^|_)(revision|version|index)$/.test(key);
}

/**
 * The details of an error as clients see them, over HTTP and gRPC alike: top-level keys in
 * snake_case, versions, revisions and indexes as decimal strings. Details are built in many
 * modules (the store, the replica, the watch) and some are stored in the FSM's de-duplication
 * window as an older version wrote them, so they are made public here, in the one module that
 * maps errors, rather than trusted to each builder. Other values (the watch index in a
 * request, byte limits, ajv's `schema_errors` objects) are left as they are.
 */
export function publicDetails(details: Readonly<Record<string, unknown>>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(details)) {
    const key = snakeCase(k);
    out[key] = isPositionKey(key) && (typeof v === 'number' || typeof v === 'bigint') ? String(v) : v;
  }
  return out;
}

/** The HTTP error body: {"error": {"code", "message", ...details}} (details as publicDetails makes them). */
export function errorBody(e: CairnError): { error: Record<string, unknown> } {
  return { error: { ...publicDetails(e.details), code: TABLE[e.code].publicCode, message: e.message } };
}

/** Trailing metadata of a failed gRPC call (proto/cairn/resource/v1/resource.proto, "Errors"). */
export const GRPC_ERROR_CODE_KEY = 'cairn-error-code';
export const GRPC_ERROR_DETAILS_KEY = 'cairn-error-details-json';
/** Trailing metadata of a RATE_LIMITED gRPC answer: seconds to wait before retrying. */
export const GRPC_RETRY_AFTER_KEY = 'retry-after';
/** Bounds on what an error puts in gRPC headers (HTTP/2 header lists are limited, typically to 8-64 KiB). */
const GRPC_DETAILS_MAX_BYTES = 8 * 1024;
const GRPC_MESSAGE_MAX_CHARS = 4 * 1024;

/** JSON with every character outside printable ASCII \u-escaped: gRPC text metadata is ASCII only. */
function asciiJson(v: unknown): string {
  let text: string;
  try {
    text = JSON.stringify(v) ?? '{}';
  } catch {
    text = '{"unserializable":true}';
  }
  return text.replace(/[^\x20-\x7e]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/**
 * The gRPC status for an error: the gRPC code of API.md's table, the message, and the public
 * Cairn code and details in trailing metadata (the client library decodes them).
 */
export function grpcErrorOf(e: CairnError): { code: grpc.status; details: string; metadata: grpc.Metadata } {
  const row = TABLE[e.code];
  const metadata = new grpc.Metadata();
  metadata.set(GRPC_ERROR_CODE_KEY, row.publicCode);
  let details = asciiJson(publicDetails(e.details));
  if (details.length > GRPC_DETAILS_MAX_BYTES) details = '{"truncated":true}';
  metadata.set(GRPC_ERROR_DETAILS_KEY, details);
  // RATE_LIMITED says when to come back, as HTTP's Retry-After header does (seconds).
  if (e.code === ErrorCode.RATE_LIMITED) metadata.set(GRPC_RETRY_AFTER_KEY, String(retryAfterSecondsOf(e)));
  const message = e.message.length > GRPC_MESSAGE_MAX_CHARS ? `${e.message.slice(0, GRPC_MESSAGE_MAX_CHARS)}...` : e.message;
  return { code: row.grpc, details: message, metadata };
}
