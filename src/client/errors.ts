import { ErrorCode, type ErrorDetails } from '../base/index.js';

/** The codes a client call can fail with: API.md's codes, plus CANCELLED (the caller's AbortSignal fired). */
export const ClientErrorCode = { ...ErrorCode, CANCELLED: 'CANCELLED' } as const;
export type ClientErrorCode = (typeof ClientErrorCode)[keyof typeof ClientErrorCode];

export interface CairnClientErrorInit {
  readonly details?: ErrorDetails;
  /** True when a write failed in a way that leaves open whether it was applied. */
  readonly outcomeUnknown?: boolean;
  /** The gRPC status code of the last attempt, if it reached gRPC. */
  readonly grpcCode?: number;
  /** The endpoint of the last attempt. */
  readonly endpoint?: string;
  readonly cause?: unknown;
}

/**
 * A failed client call, with a stable `code` (API.md "Errors"). `outcomeUnknown` is set when a
 * write (write, writeStatus, delete) may or may not have been applied: TIMEOUT, a connection
 * lost after the request was sent, or a cancellation after it was sent. Such a write is never
 * reported as a plain failure; read the resource to learn what happened.
 */
export class CairnClientError extends Error {
  override readonly name = 'CairnClientError';
  readonly code: ClientErrorCode;
  /**
   * The server's details (`cairn-error-details-json`): snake_case keys, versions and revisions
   * as decimal strings. CAS_FAILED: `expected`, `actual` (`"0"`: absent); UID_MISMATCH:
   * `expected`, `actual` (uids); GROUP_VERSION_MISMATCH: `stored_type`, `requested_type`;
   * NOT_FOUND: `type`, `partition`, `namespace`, `name`; watch errors: `watch`, `revision`.
   */
  readonly details: ErrorDetails;
  readonly outcomeUnknown: boolean;
  readonly grpcCode: number | undefined;
  readonly endpoint: string | undefined;

  constructor(code: ClientErrorCode, message: string, init: CairnClientErrorInit = {}) {
    super(message, init.cause === undefined ? undefined : { cause: init.cause });
    this.code = code;
    this.details = init.details ?? {};
    this.outcomeUnknown = init.outcomeUnknown ?? false;
    this.grpcCode = init.grpcCode;
    this.endpoint = init.endpoint;
  }
}

export function isCairnClientError(e: unknown, code?: ClientErrorCode): e is CairnClientError {
  return e instanceof CairnClientError && (code === undefined || e.code === code);
}

/**
 * Whether a failed call may nevertheless have taken effect: TIMEOUT (DEADLINE_EXCEEDED) on any
 * call, or a write whose connection was lost or which was cancelled after it was sent.
 */
export function isOutcomeUnknown(e: unknown): boolean {
  return e instanceof CairnClientError && (e.outcomeUnknown || e.code === ClientErrorCode.TIMEOUT);
}
