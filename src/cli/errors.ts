/**
 * The CLI's exit codes and the error that carries one. Every failure a command reports is a
 * `CliError`; `program.ts` prints it as one line, `cairn: <message>`, and exits with its code.
 * The table is documented in README.md ("Exit codes"); scripts depend on it, so codes are only
 * ever added.
 */
import { ErrorCode } from '../base/index.js';

export const ExitCode = {
  OK: 0,
  /** Anything not below, including INTERNAL errors and unexpected responses. */
  GENERIC: 1,
  /** Bad command line, flags or configuration; nothing was sent. */
  USAGE: 2,
  NOT_FOUND: 3,
  /** CAS_FAILED, UID_MISMATCH, INVALID_CONFIG_CHANGE, NO_SPACE: the state does not allow the change. */
  CONFLICT: 4,
  /** No leader, node down or unreachable, timeout. For a write the outcome may be unknown. */
  UNAVAILABLE: 5,
  /** The server refused the request as invalid or too large. */
  INVALID: 6,
  AUTH: 7,
  /** Interrupted by a second SIGINT/SIGTERM while shutting down (128 + SIGINT). */
  INTERRUPTED: 130,
} as const;
export type ExitCode = (typeof ExitCode)[keyof typeof ExitCode];

export class CliError extends Error {
  override readonly name = 'CliError';
  readonly exitCode: ExitCode;

  constructor(exitCode: ExitCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.exitCode = exitCode;
  }
}

/** A usage error: the command line cannot be acted on. */
export const usageError = (message: string): CliError => new CliError(ExitCode.USAGE, message);

const BY_CODE: Readonly<Record<string, ExitCode>> = {
  [ErrorCode.INVALID_ARGUMENT]: ExitCode.INVALID,
  [ErrorCode.GROUP_VERSION_MISMATCH]: ExitCode.INVALID,
  [ErrorCode.TOO_LARGE]: ExitCode.INVALID,
  [ErrorCode.UNAUTHENTICATED]: ExitCode.AUTH,
  [ErrorCode.PERMISSION_DENIED]: ExitCode.AUTH,
  [ErrorCode.NOT_FOUND]: ExitCode.NOT_FOUND,
  // 410 Gone: what was asked for (an old revision) no longer exists.
  [ErrorCode.COMPACTED]: ExitCode.NOT_FOUND,
  [ErrorCode.CAS_FAILED]: ExitCode.CONFLICT,
  [ErrorCode.UID_MISMATCH]: ExitCode.CONFLICT,
  // Served as 409: a membership change is already pending, or the change contradicts the configuration.
  [ErrorCode.INVALID_CONFIG_CHANGE]: ExitCode.CONFLICT,
  // 507: the data quota is reached (docs/security.md "Quotas"); deletes make room.
  [ErrorCode.NO_SPACE]: ExitCode.CONFLICT,
  [ErrorCode.UNAVAILABLE]: ExitCode.UNAVAILABLE,
  [ErrorCode.TIMEOUT]: ExitCode.UNAVAILABLE,
  [ErrorCode.NOT_LEADER]: ExitCode.UNAVAILABLE,
  [ErrorCode.PROPOSAL_DROPPED]: ExitCode.UNAVAILABLE,
  [ErrorCode.INTERNAL]: ExitCode.GENERIC,
  // Refused before anything was done; trying again later may succeed.
  [ErrorCode.RATE_LIMITED]: ExitCode.UNAVAILABLE,
};

/** The exit code for a server error: by its code, else by the HTTP status. */
export function exitCodeFor(code: string | undefined, httpStatus: number): ExitCode {
  const byCode = code === undefined ? undefined : BY_CODE[code];
  if (byCode !== undefined) return byCode;
  if (httpStatus === 400 || httpStatus === 413 || httpStatus === 422) return ExitCode.INVALID;
  if (httpStatus === 401 || httpStatus === 403) return ExitCode.AUTH;
  if (httpStatus === 404 || httpStatus === 410) return ExitCode.NOT_FOUND;
  if (httpStatus === 409 || httpStatus === 412) return ExitCode.CONFLICT;
  if (httpStatus === 429 || httpStatus === 502 || httpStatus === 503 || httpStatus === 504) return ExitCode.UNAVAILABLE;
  return ExitCode.GENERIC;
}

/**
 * The code to print when an error response names none (a proxy's page, a bare status): the
 * status itself, rather than a guess at which Cairn code it stood for.
 */
export const codeForStatus = (httpStatus: number): string => `HTTP_${httpStatus}`;

/** A Cairn token's secret: `cairn_<accessor>_<64 lowercase hex>`. */
export const SECRET_FORMAT = /^cairn_[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?_[0-9a-f]{64}$/;

/**
 * What to add to a 401/403 message: how to give a token, or why the one given was refused.
 * `sent` is the token the request carried (undefined: none).
 */
export function authHint(code: string, sent: string | undefined, message = ''): string {
  if (code === 'UNAUTHENTICATED') {
    if (sent === undefined) return `; no token was sent: set CAIRN_TOKEN or --token (or --token-file)`;
    if (!SECRET_FORMAT.test(sent)) return '; the token given is not a token secret (cairn_<accessor>_<64 hex>): an accessor id is not a secret. Set CAIRN_TOKEN or --token';
    return `; the token was refused (unknown, expired or deleted): set CAIRN_TOKEN or --token to a current one`;
  }
  if (code === 'PERMISSION_DENIED') {
    if (sent === undefined) return `; no token was sent, so the request ran as anonymous: set CAIRN_TOKEN or --token (or --token-file)`;
    // A watch whose token is deleted or expires while it runs ends this way.
    if (/no longer valid|revoked|expired/.test(message)) return `; the token was deleted or expired: set CAIRN_TOKEN or --token to a current one`;
    return "; the token's roles do not grant this (`cairn acl token self` lists them)";
  }
  return '';
}

