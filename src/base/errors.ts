/**
 * The error family. Every error a caller can act on carries a stable `code` (like undici's
 * `UND_ERR_*`); the api module is the one place that maps codes to gRPC and HTTP statuses.
 */
export const ErrorCode = {
  INVALID_ARGUMENT: 'INVALID_ARGUMENT',
  GROUP_VERSION_MISMATCH: 'GROUP_VERSION_MISMATCH',
  UNAUTHENTICATED: 'UNAUTHENTICATED',
  PERMISSION_DENIED: 'PERMISSION_DENIED',
  NOT_FOUND: 'NOT_FOUND',
  CAS_FAILED: 'CAS_FAILED',
  UID_MISMATCH: 'UID_MISMATCH',
  COMPACTED: 'COMPACTED',
  TOO_LARGE: 'TOO_LARGE',
  UNAVAILABLE: 'UNAVAILABLE',
  TIMEOUT: 'TIMEOUT',
  INTERNAL: 'INTERNAL',
  /** This node is not the leader; `details.leader` may name the one it knows. */
  NOT_LEADER: 'NOT_LEADER',
  /** The proposal was not appended (leadership transfer in progress, config change pending). */
  PROPOSAL_DROPPED: 'PROPOSAL_DROPPED',
  /** A membership change request breaks the one-change-at-a-time rule or names a bad node. */
  INVALID_CONFIG_CHANGE: 'INVALID_CONFIG_CHANGE',
  /** A watcher fell too far behind and was ended; it resumes from its last revision. */
  SLOW_CONSUMER: 'SLOW_CONSUMER',
  /** The node's state was replaced (snapshot installed or restored); watchers start over. */
  RESET: 'RESET',
  /** The data quota is reached: writes that grow the stored data are refused until it shrinks (docs/security.md "Quotas"). */
  NO_SPACE: 'NO_SPACE',
  /** A rate limit or a connection, stream or watch cap refused the request; retry after `Retry-After`. */
  RATE_LIMITED: 'RATE_LIMITED',
} as const;
export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

export type ErrorDetails = Readonly<Record<string, unknown>>;

export class CairnError extends Error {
  override readonly name = 'CairnError';
  readonly code: ErrorCode;
  readonly details: ErrorDetails;

  constructor(code: ErrorCode, message: string, details: ErrorDetails = {}, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.details = details;
  }

  toJSON(): { code: ErrorCode; message: string } & ErrorDetails {
    return { ...this.details, code: this.code, message: this.message };
  }
}

/** A code received as a string (from a peer or the log); anything unknown is INTERNAL. */
export function parseErrorCode(s: string): ErrorCode {
  return (Object.values(ErrorCode) as string[]).includes(s) ? (s as ErrorCode) : ErrorCode.INTERNAL;
}

export function isCairnError(e: unknown, code?: ErrorCode): e is CairnError {
  return e instanceof CairnError && (code === undefined || e.code === code);
}
