import fs, { constants } from 'node:fs';
import { open, type FileHandle } from 'node:fs/promises';

/**
 * The two system calls on the segment-file log's hot path (WalLogStore), as a seam: the store
 * takes them from its options (`io`), so a test can watch every write and sync and check what
 * was durable when an append resolved. Default: node:fs's callback functions (one thread-pool
 * round trip each).
 */
export interface WalIo {
  writev(fd: number, buffers: readonly Uint8Array[], position: number, callback: (err: NodeJS.ErrnoException | null, bytesWritten: number) => void): void;
  fdatasync(fd: number, callback: (err: NodeJS.ErrnoException | null) => void): void;
}

export const nodeWalIo: WalIo = {
  writev: (fd, buffers, position, callback) => fs.writev(fd, buffers as NodeJS.ArrayBufferView[], position, callback),
  fdatasync: (fd, callback) => fs.fdatasync(fd, callback),
};

/**
 * How a synced round is made durable. `dsync`: one write through a second descriptor of the
 * segment opened with O_DSYNC (the kernel returns from the write once its data is on disk: one
 * thread-pool round trip). `fdatasync`: a write, then fdatasync (two). Default `dsync` where
 * the platform has O_DSYNC (Linux, macOS), else `fdatasync`.
 */
export type WalSyncMethod = 'dsync' | 'fdatasync';

export const O_DSYNC: number | undefined = (constants as { O_DSYNC?: number }).O_DSYNC;

export function defaultSyncMethod(): WalSyncMethod {
  return O_DSYNC !== undefined ? 'dsync' : 'fdatasync';
}

/** Opens `file` for writing with O_DSYNC (the platform has it: checked by the store's options). */
export function openDsync(file: string): Promise<FileHandle> {
  return open(file, constants.O_WRONLY | (O_DSYNC as number));
}

/**
 * Writes all of `buffers` at `position` (a short write continues with the rest). Resolves with
 * the seconds the system calls took, each timed from the call to the first statement of its
 * libuv callback: the thread pool's time (queueing included) and the wait for the loop to run
 * the completion, not the promise continuation or the rest of the caller's turn.
 */
export function writevFully(io: WalIo, fd: number, buffers: readonly Uint8Array[], position: number): Promise<number> {
  let total = 0;
  for (const b of buffers) total += b.length;
  return new Promise<number>((resolve, reject) => {
    let seconds = 0;
    let done = 0;
    let rest = buffers;
    const step = (): void => {
      const started = performance.now();
      io.writev(fd, rest, position + done, (err, bytesWritten) => {
        seconds += (performance.now() - started) / 1000;
        if (err) return reject(err);
        if (bytesWritten <= 0) return reject(new Error(`write returned ${bytesWritten} at offset ${position + done}`));
        done += bytesWritten;
        if (done >= total) return resolve(seconds);
        rest = remaining(rest, bytesWritten);
        step();
      });
    };
    step();
  });
}

/** `buffers` without their first `skip` bytes. */
function remaining(buffers: readonly Uint8Array[], skip: number): Uint8Array[] {
  const out: Uint8Array[] = [];
  for (const b of buffers) {
    if (skip >= b.length) {
      skip -= b.length;
      continue;
    }
    out.push(skip > 0 ? b.subarray(skip) : b);
    skip = 0;
  }
  return out;
}

/** fdatasync, resolving with its seconds, timed as `writevFully` times its writes. */
export function timedDatasync(io: WalIo, fd: number): Promise<number> {
  return new Promise<number>((resolve, reject) => {
    const started = performance.now();
    io.fdatasync(fd, (err) => {
      const seconds = (performance.now() - started) / 1000;
      if (err) reject(err);
      else resolve(seconds);
    });
  });
}
