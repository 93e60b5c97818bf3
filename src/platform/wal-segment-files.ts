import { open, rm, type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import { StorageError } from './errors.js';
import { encodeSegmentHeader, preparedName, SEGMENT_HEADER_BYTES, writeRecord } from './wal-format.js';

/** File operations of the segment-file log (WalLogStore): preparing segments, writing, zeroing. */

/** Zeros are written in pieces this big when a segment is prepared or a tail is cut. */
const ZERO_CHUNK_BYTES = 1024 * 1024;
/** While preparing a segment, fdatasync after this many bytes, so the disk sees no 64 MiB burst. */
const PREPARE_SYNC_EVERY_BYTES = 8 * 1024 * 1024;
const ZEROS = new Uint8Array(ZERO_CHUNK_BYTES);

/** A segment file made ready for the log under its temporary name, open for writing. */
export interface Prepared {
  readonly seq: number;
  readonly path: string;
  readonly size: number;
  readonly handle: FileHandle;
}

export async function writeFully(handle: FileHandle, data: Uint8Array, position: number): Promise<void> {
  let done = 0;
  while (done < data.length) {
    const { bytesWritten } = await handle.write(data, done, data.length - done, position + done);
    if (bytesWritten <= 0) throw new Error(`write returned ${bytesWritten} at offset ${position + done}`);
    done += bytesWritten;
  }
}

export async function writeZeros(handle: FileHandle, from: number, to: number): Promise<void> {
  for (let off = from; off < to; off += ZERO_CHUNK_BYTES) await writeFully(handle, ZEROS.subarray(0, Math.min(ZERO_CHUNK_BYTES, to - off)), off);
}

/**
 * A new segment `<seq>.tmp` of `size` bytes: a segment header, then zeros written out (not
 * fallocated: an unwritten extent would make each later fdatasync commit metadata), fsynced.
 */
export async function prepareSegment(dir: string, seq: number, size: number): Promise<Prepared> {
  const file = path.join(dir, preparedName(seq));
  let handle: FileHandle | undefined;
  try {
    await rm(file, { force: true });
    handle = await open(file, 'wx+', 0o644);
    const header = new Uint8Array(SEGMENT_HEADER_BYTES);
    writeRecord(header, 0, encodeSegmentHeader(seq), seq, 0);
    await writeFully(handle, header, 0);
    let synced = 0;
    for (let off = SEGMENT_HEADER_BYTES; off < size; off += ZERO_CHUNK_BYTES) {
      const end = Math.min(size, off + ZERO_CHUNK_BYTES);
      await writeFully(handle, ZEROS.subarray(0, end - off), off);
      if (end - synced >= PREPARE_SYNC_EVERY_BYTES) {
        await handle.datasync();
        synced = end;
      }
    }
    await handle.sync();
    return { seq, path: file, size, handle };
  } catch (e) {
    await handle?.close().catch(() => undefined);
    await rm(file, { force: true }).catch(() => undefined);
    throw new StorageError(`prepare raft log segment ${seq}`, file, e);
  }
}

export async function discard(p: Prepared): Promise<void> {
  await p.handle.close().catch(() => undefined);
  await rm(p.path, { force: true }).catch(() => undefined);
}

/**
 * Cuts a segment at `offset`: zeros over [offset, zeroEnd) (every byte there that is not zero
 * already), `record` written at `offset`, fdatasync.
 */
export async function writeCut(handle: FileHandle, offset: number, zeroEnd: number, record: Uint8Array): Promise<void> {
  await writeZeros(handle, offset, zeroEnd);
  await writeFully(handle, record, offset);
  await handle.datasync();
}

/** The end of the last 8-byte word at or after `from` in `buf` that is not all zeros (or `from`). */
export function nonZeroEnd(buf: Uint8Array, from: number): number {
  for (let end = buf.length; end > from; end--) if (buf[end - 1] !== 0) return Math.min(buf.length, Math.ceil(end / 8) * 8);
  return from;
}
