import * as fs from 'node:fs';
import * as path from 'node:path';
import { pino, type Logger as PinoLogger } from 'pino';
import { ErrorCode, type Clock } from '../base/index.js';
import { ROLE_TYPE, TOKEN_TYPE } from './acl.js';
import { accessorOf } from './limits.js';

/**
 * The audit log (docs/security.md "Audit log"): one JSON line per denied request and per admin
 * action, in its own stream (a file beside the data, or stderr), apart from the node's log.
 * A record names the caller by address and, for a `cairn_<accessor>_<secret>` token, by its
 * public accessor id; it never holds a secret.
 */

/** The codes whose answers are recorded as denied requests. */
export const DENIED_CODES: ReadonlySet<string> = new Set([ErrorCode.UNAUTHENTICATED, ErrorCode.PERMISSION_DENIED, ErrorCode.RATE_LIMITED]);

export type AuditTransport = 'http' | 'grpc';

export interface DeniedRecord {
  readonly transport: AuditTransport;
  /** `METHOD /path` (HTTP) or the RPC's full name (gRPC). */
  readonly method: string;
  /** The remote IP. */
  readonly address: string;
  /** The bearer token as sent (only its accessor id is recorded), if any. */
  readonly token?: string | undefined;
  readonly code: string;
  readonly message: string;
}

export interface AdminRecord {
  readonly transport: AuditTransport | 'internal';
  /** What was done: `raft.add-peer`, `raft.remove-peer`, `raft.transfer-leader`, `snapshot.save`, `snapshot.restore`, `acl.write`, `acl.delete`, ... */
  readonly action: string;
  readonly method: string;
  readonly address: string;
  readonly token?: string | undefined;
  /** `ok`, or the error code the action failed with. */
  readonly outcome: string;
  /** What it was done to (a peer id, a resource id, ...): no secrets. */
  readonly target?: Readonly<Record<string, unknown>>;
}

/** Denied-request records written per second at most; the rest are counted in one `suppressed` record. */
export const AUDIT_DENIED_PER_SECOND = 100;

/**
 * A file that keeps at most `maxBytes` bytes: past that, `audit.log` becomes `audit.log.1` (the
 * previous `.1` is replaced) and a new `audit.log` starts. Writes are synchronous, so a record
 * is on its way to disk when the request is answered.
 */
export class RotatingFile {
  private fd: number;
  private size: number;

  constructor(
    readonly file: string,
    readonly maxBytes: number,
  ) {
    fs.mkdirSync(path.dirname(file), { recursive: true });
    this.fd = fs.openSync(file, 'a', 0o600);
    this.size = fs.fstatSync(this.fd).size;
  }

  write(line: string): boolean {
    const bytes = Buffer.byteLength(line);
    if (this.maxBytes > 0 && this.size > 0 && this.size + bytes > this.maxBytes) this.rotate();
    fs.writeSync(this.fd, line);
    this.size += bytes;
    return true;
  }

  private rotate(): void {
    fs.closeSync(this.fd);
    fs.renameSync(this.file, `${this.file}.1`);
    this.fd = fs.openSync(this.file, 'a', 0o600);
    this.size = 0;
  }

  close(): void {
    fs.closeSync(this.fd);
  }
}

export interface AuditLogOptions {
  /** A file path, `-` for stderr, or `off`. */
  readonly destination: string;
  /** Rotate the file past this many bytes (0 = never: rotate it externally). */
  readonly maxBytes: number;
  readonly nodeId: string;
  readonly clock: Pick<Clock, 'monotonicMs'>;
}

/** The audit log: `denied(...)` and `admin(...)`; `AuditLog.off()` records nothing. */
export class AuditLog {
  private windowStartMs = Number.NEGATIVE_INFINITY;
  private deniedInWindow = 0;
  private suppressed = 0;

  private constructor(
    private readonly logger: PinoLogger | undefined,
    private readonly file: RotatingFile | undefined,
    private readonly clock: Pick<Clock, 'monotonicMs'>,
  ) {}

  static off(): AuditLog {
    return new AuditLog(undefined, undefined, { monotonicMs: () => 0 });
  }

  static open(opts: AuditLogOptions): AuditLog {
    if (opts.destination === 'off') return AuditLog.off();
    const file = opts.destination === '-' ? undefined : new RotatingFile(opts.destination, opts.maxBytes);
    const stream = file ?? pino.destination({ dest: 2, sync: true });
    const logger = pino(
      {
        base: { node: opts.nodeId, audit: true },
        timestamp: pino.stdTimeFunctions.isoTime,
        formatters: { level: (label) => ({ level: label }) },
        messageKey: 'event',
      },
      stream,
    );
    return new AuditLog(logger, file, opts.clock);
  }

  get enabled(): boolean {
    return this.logger !== undefined;
  }

  /** Records a request answered UNAUTHENTICATED, PERMISSION_DENIED or RATE_LIMITED (others are ignored). */
  denied(r: DeniedRecord): void {
    if (this.logger === undefined || !DENIED_CODES.has(r.code)) return;
    // A flood of refused requests (the rate limit's whole point) must not become a flood of
    // synchronous writes: at most AUDIT_DENIED_PER_SECOND records a second, then a count.
    const now = this.clock.monotonicMs();
    if (now - this.windowStartMs >= 1000) {
      if (this.suppressed > 0) this.logger.info({ kind: 'denied-suppressed', count: this.suppressed }, 'denied requests not recorded one by one (over the audit rate)');
      this.windowStartMs = now;
      this.deniedInWindow = 0;
      this.suppressed = 0;
    }
    if (this.deniedInWindow >= AUDIT_DENIED_PER_SECOND) {
      this.suppressed++;
      return;
    }
    this.deniedInWindow++;
    this.logger.info(
      {
        kind: 'denied',
        transport: r.transport,
        method: r.method,
        address: r.address,
        accessor: accessorOf(r.token) ?? null,
        token: r.token === undefined ? 'none' : 'given',
        code: r.code,
        message: redact(r.message, r.token),
      },
      'request denied',
    );
  }

  /** Records an admin action, whether it succeeded or not. */
  admin(r: AdminRecord): void {
    if (this.logger === undefined) return;
    this.logger.info(
      { kind: 'admin', transport: r.transport, action: r.action, method: r.method, address: r.address, accessor: accessorOf(r.token) ?? null, outcome: r.outcome, ...(r.target ? { target: r.target } : {}) },
      'admin action',
    );
  }

  close(): void {
    this.file?.close();
  }
}

/** The message with the token, should a message ever quote it, cut out. */
function redact(message: string, token: string | undefined): string {
  return token !== undefined && token.length >= 4 ? message.split(token).join('[redacted]') : message;
}

/** The ACL resource types whose writes and deletes are admin actions. */
export const ACL_TYPES: ReadonlySet<string> = new Set([TOKEN_TYPE, ROLE_TYPE]);
