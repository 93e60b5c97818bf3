/**
 * A storage operation failed (I/O error, full disk, a database that will not open). The
 * message names the operation, the path and the cause in one sentence; `cause` keeps the
 * original error. Nothing a store reports as done was done if this was thrown instead.
 */
export class StorageError extends Error {
  override readonly name = 'StorageError';
  /** What was being done, e.g. "append entries 12..40 (fsync)". */
  readonly operation: string;
  /** The file or directory involved. */
  readonly path: string;
  /** True when the cause is a full disk (ENOSPC). */
  readonly noSpace: boolean;

  constructor(operation: string, path: string, cause: unknown, detail?: string) {
    const causeMessage = cause instanceof Error ? cause.message : String(cause);
    super(`${operation} in ${path} failed: ${detail ?? causeMessage}`, { cause });
    this.operation = operation;
    this.path = path;
    this.noSpace = isNoSpace(cause);
  }
}

/** Whether an error (or one of its causes) is ENOSPC. LevelDB reports it only in its message. */
export function isNoSpace(e: unknown): boolean {
  for (let c: unknown = e, depth = 0; c instanceof Error && depth < 5; c = c.cause, depth++) {
    if ((c as NodeJS.ErrnoException).code === 'ENOSPC' || /No space left on device|ENOSPC/.test(c.message)) return true;
  }
  return false;
}

/** Stored data in a format this build does not read (written by a newer cairn). */
export class UnsupportedFormatError extends Error {
  override readonly name = 'UnsupportedFormatError';
}
