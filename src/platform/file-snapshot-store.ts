import { mkdir, open, readdir, rename, rm, type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import { crc32 } from 'node:zlib';
import type { Snapshot, SnapshotMeta } from '../raft/index.js';
import { silentLogger, type Logger } from '../base/index.js';
import type { SnapshotStore } from '../replica/index.js';
import { fsyncDir } from './durable-fs.js';
import { StorageError, UnsupportedFormatError } from './errors.js';
import { Serial } from './serial.js';
import {
  decodeMeta,
  encodeMeta,
  encodeSnapshotHeader,
  parseFixedHeader,
  parseSnapshotFileName,
  SNAPSHOT_FIXED_HEADER_BYTES,
  snapshotFileName,
  verifyHeader,
} from './snapshot-format.js';

/** The snapshot directory inside a node's data dir. */
export const SNAPSHOTS_DIR = 'snapshots';
const TEMP_SUFFIX = '.tmp';
const CORRUPT_SUFFIX = '.corrupt';
/** Writes and checksums go in pieces of this size, so a huge snapshot never blocks the event loop for long. */
const PIECE_BYTES = 4 << 20;

export interface FileSnapshotStoreOptions {
  /** The node's data directory; snapshots live in `<dataDir>/snapshots` (created if missing). */
  readonly dataDir: string;
  readonly logger?: Logger;
  /** How many snapshots to keep, newest first. Default 2 (the newest and one to fall back to); at least 1. */
  readonly retain?: number;
}

export interface SavedSnapshot {
  readonly path: string;
  /** File size: header plus body. */
  readonly bytes: number;
}

type Verified = { readonly ok: true; readonly snapshot: Snapshot } | { readonly ok: false; readonly problem: string };

/**
 * Snapshot files in `<dataDir>/snapshots`, written atomically (temp file, fsync, rename, fsync
 * of the directory) and verified on load (magic, lengths, header and body checksums). See
 * README.md for the format.
 */
export class FileSnapshotStore implements SnapshotStore {
  private readonly serial = new Serial();
  private closed = false;

  private constructor(
    /** The snapshot directory. */
    readonly dir: string,
    private readonly logger: Logger,
    private readonly retain: number,
  ) {}

  static async open(options: FileSnapshotStoreOptions): Promise<FileSnapshotStore> {
    const retain = options.retain ?? 2;
    if (!Number.isSafeInteger(retain) || retain < 1) {
      throw new TypeError(`FileSnapshotStore option retain must be an integer of at least 1, got ${String(retain)}`);
    }
    const dir = path.join(options.dataDir, SNAPSHOTS_DIR);
    try {
      const created = await mkdir(dir, { recursive: true });
      if (created !== undefined) await fsyncDir(path.dirname(dir));
    } catch (e) {
      throw new StorageError('create the snapshot directory', dir, e);
    }
    const store = new FileSnapshotStore(dir, options.logger ?? silentLogger, retain);
    await store.removeTempFiles();
    return store;
  }

  save(snapshot: Snapshot): Promise<void> {
    return this.saveChunks(snapshot.meta, [snapshot.data]).then(() => undefined);
  }

  /**
   * Writes a snapshot from pieces (e.g. a state machine's `chunks()`), never joining them in
   * memory. Durable when the promise resolves; older snapshots beyond `retain` are deleted
   * only after that.
   */
  saveChunks(meta: SnapshotMeta, chunks: Iterable<Uint8Array> | AsyncIterable<Uint8Array>): Promise<SavedSnapshot> {
    return this.serial.run(async () => {
      this.checkOpen('save a snapshot');
      const name = snapshotFileName(meta.index, meta.term);
      const file = path.join(this.dir, name);
      const temp = file + TEMP_SUFFIX;
      const operation = `save snapshot ${meta.index} (term ${meta.term})`;
      let bytes: number;
      try {
        bytes = await writeSnapshotFile(temp, meta, chunks);
        await rename(temp, file);
        await fsyncDir(this.dir);
      } catch (e) {
        await rm(temp, { force: true }).catch(() => undefined);
        throw new StorageError(operation, file, e);
      }
      this.logger.info({ path: file, index: meta.index, term: meta.term, bytes }, 'saved snapshot');
      await this.prune(name);
      return { path: file, bytes };
    });
  }

  loadNewest(): Promise<{ snapshot: Snapshot | undefined; skippedCorrupt: readonly string[] }> {
    return this.serial.run(async () => {
      this.checkOpen('load the newest snapshot');
      await this.removeTempFiles();
      const skippedCorrupt: string[] = [];
      for (const name of await this.listNames()) {
        const file = path.join(this.dir, name);
        const verified = await verifySnapshotFile(file, name);
        if (verified.ok) return { snapshot: verified.snapshot, skippedCorrupt };
        skippedCorrupt.push(file);
        await this.quarantine(file, verified.problem);
      }
      return { snapshot: undefined, skippedCorrupt };
    });
  }

  /**
   * Bytes of a saved snapshot's body, read straight from its file (not through the serial
   * queue: a long save must not hold up a transfer, and a file pruned meanwhile fails the read
   * with ENOENT, which the caller treats as "snapshot gone"). The body was verified against its
   * checksum when it was saved or loaded; a chunk read is bounds-checked against the header.
   */
  async readBody(meta: SnapshotMeta, offset: number, length: number): Promise<Uint8Array> {
    this.checkOpen('read a snapshot');
    const file = path.join(this.dir, snapshotFileName(meta.index, meta.term));
    let handle: FileHandle;
    try {
      handle = await open(file, 'r');
    } catch (e) {
      throw new StorageError('open a snapshot file', file, e);
    }
    try {
      const fixed = new Uint8Array(SNAPSHOT_FIXED_HEADER_BYTES);
      const parsed = (await readExactly(handle, fixed, 0)) ? parseFixedHeader(fixed) : undefined;
      if (parsed === undefined || !parsed.ok) throw new StorageError('read a snapshot', file, undefined, 'its header is unreadable');
      const { headerLength, bodyLength } = parsed.value;
      if (!Number.isSafeInteger(offset) || !Number.isSafeInteger(length) || offset < 0 || length < 0 || offset + length > bodyLength) {
        throw new StorageError('read a snapshot', file, undefined, `bytes ${offset}..${offset + length} are outside its ${bodyLength}-byte body`);
      }
      const out = new Uint8Array(length);
      if (!(await readExactly(handle, out, headerLength + offset))) throw new StorageError('read a snapshot', file, undefined, 'it is shorter than its header says');
      return out;
    } finally {
      await handle.close().catch(() => undefined);
    }
  }

  /** Snapshot file names (not temp or quarantined files), newest first. */
  list(): Promise<string[]> {
    return this.serial.run(() => this.listNames());
  }

  close(): Promise<void> {
    return this.serial.run(async () => {
      this.closed = true;
    });
  }

  private checkOpen(operation: string): void {
    if (this.closed) throw new StorageError(operation, this.dir, undefined, 'the snapshot store is closed');
  }

  private async listNames(): Promise<string[]> {
    let names: string[];
    try {
      names = await readdir(this.dir);
    } catch (e) {
      throw new StorageError('list snapshots', this.dir, e);
    }
    const parsed: { name: string; index: number; term: number }[] = [];
    for (const name of names) {
      const p = parseSnapshotFileName(name);
      if (p !== undefined) parsed.push({ name, ...p });
    }
    parsed.sort((a, b) => b.index - a.index || b.term - a.term);
    return parsed.map((p) => p.name);
  }

  /**
   * Keeps the newest `retain` snapshots (and always the one just written), deletes the rest
   * and any quarantined files. Runs only after the new snapshot is durable; a failure here
   * costs disk space, not data, so it is logged rather than thrown.
   */
  private async prune(justWritten: string): Promise<void> {
    try {
      const names = await this.listNames();
      const doomed = names.slice(this.retain).filter((n) => n !== justWritten);
      for (const name of await readdir(this.dir)) if (name.endsWith(CORRUPT_SUFFIX)) doomed.push(name);
      for (const name of doomed) await rm(path.join(this.dir, name), { force: true });
      if (doomed.length > 0) {
        await fsyncDir(this.dir);
        this.logger.info({ dir: this.dir, deleted: doomed }, 'deleted old snapshots');
      }
    } catch (e) {
      this.logger.warn({ dir: this.dir, err: e instanceof Error ? e.message : String(e) }, 'could not delete old snapshots');
    }
  }

  /**
   * Renames a corrupt snapshot to `<name>.corrupt`: kept for inspection until the next
   * successful save, and no longer counted among the newest `retain` (so pruning cannot
   * keep a corrupt file and delete the good one it would fall back to).
   */
  private async quarantine(file: string, problem: string): Promise<void> {
    this.logger.error({ path: file, problem }, `skipped a corrupt snapshot file: it ${problem}`);
    try {
      await rename(file, file + CORRUPT_SUFFIX);
      await fsyncDir(this.dir);
    } catch (e) {
      this.logger.warn({ path: file, err: e instanceof Error ? e.message : String(e) }, 'could not quarantine a corrupt snapshot file');
    }
  }

  /** Leftovers of a save interrupted by a crash: never renamed into place, so never valid. */
  private async removeTempFiles(): Promise<void> {
    let names: string[];
    try {
      names = await readdir(this.dir);
    } catch (e) {
      throw new StorageError('list snapshots', this.dir, e);
    }
    for (const name of names) {
      if (!name.endsWith(TEMP_SUFFIX)) continue;
      const file = path.join(this.dir, name);
      try {
        await rm(file, { force: true });
      } catch (e) {
        throw new StorageError('delete a leftover temporary snapshot file', file, e);
      }
      this.logger.info({ path: file }, 'deleted a leftover temporary snapshot file');
    }
  }
}

async function writeAll(handle: FileHandle, data: Uint8Array, position: number): Promise<void> {
  let done = 0;
  while (done < data.length) {
    const { bytesWritten } = await handle.write(data, done, data.length - done, position + done);
    done += bytesWritten;
  }
}

/**
 * Writes header placeholder, body (checksummed as it streams), then the real header, then
 * fsyncs. Returns the file size. The header's size depends only on the meta, so the
 * placeholder reserves exactly the right space.
 */
async function writeSnapshotFile(file: string, meta: SnapshotMeta, chunks: Iterable<Uint8Array> | AsyncIterable<Uint8Array>): Promise<number> {
  const metaBytes = encodeMeta(meta);
  const headerLength = SNAPSHOT_FIXED_HEADER_BYTES + metaBytes.length;
  const handle = await open(file, 'w', 0o644);
  try {
    let position = headerLength;
    let crc = 0;
    for await (const chunk of chunks) {
      for (let off = 0; off < chunk.length; off += PIECE_BYTES) {
        const piece = chunk.subarray(off, Math.min(chunk.length, off + PIECE_BYTES));
        crc = crc32(piece, crc);
        await writeAll(handle, piece, position);
        position += piece.length;
      }
    }
    const bodyLength = position - headerLength;
    await writeAll(handle, encodeSnapshotHeader(metaBytes, bodyLength, crc), 0);
    await handle.sync();
    return position;
  } finally {
    await handle.close();
  }
}

async function readExactly(handle: FileHandle, into: Uint8Array, position: number): Promise<boolean> {
  let done = 0;
  while (done < into.length) {
    const { bytesRead } = await handle.read(into, done, into.length - done, position + done);
    if (bytesRead === 0) return false;
    done += bytesRead;
  }
  return true;
}

/**
 * Reads and verifies one snapshot file. Damage (bad magic, lengths, checksums, metadata, a
 * name that disagrees with the metadata) is a problem to skip; an I/O error or a file from a
 * newer format version is thrown, because falling back to an older snapshot would hide it.
 */
async function verifySnapshotFile(file: string, name: string): Promise<Verified> {
  let handle: FileHandle;
  try {
    handle = await open(file, 'r');
  } catch (e) {
    throw new StorageError('open a snapshot file', file, e);
  }
  try {
    const { size } = await handle.stat();
    const fixed = new Uint8Array(SNAPSHOT_FIXED_HEADER_BYTES);
    if (!(await readExactly(handle, fixed, 0))) {
      return { ok: false, problem: `is truncated: ${size} bytes, shorter than the ${SNAPSHOT_FIXED_HEADER_BYTES}-byte header` };
    }
    const parsed = parseFixedHeader(fixed);
    if (!parsed.ok) {
      if ('unsupportedVersion' in parsed) {
        throw new UnsupportedFormatError(`snapshot ${file} has format version ${parsed.unsupportedVersion}; this build reads only version 1 (was it written by a newer cairn?)`);
      }
      return { ok: false, problem: parsed.problem };
    }
    const { headerLength, bodyLength, bodyCrc } = parsed.value;
    const header = new Uint8Array(headerLength);
    if (!(await readExactly(handle, header, 0))) {
      return { ok: false, problem: `is truncated: ${size} bytes, shorter than its ${headerLength}-byte header` };
    }
    if (!verifyHeader(header)) return { ok: false, problem: 'fails its header checksum' };
    const expectedSize = headerLength + bodyLength;
    if (size < expectedSize) return { ok: false, problem: `is truncated: ${size} bytes, its header says ${expectedSize}` };
    if (size > expectedSize) return { ok: false, problem: `has ${size - expectedSize} bytes after the end its header gives (${expectedSize})` };
    const meta = decodeMeta(header.subarray(SNAPSHOT_FIXED_HEADER_BYTES));
    if (!meta.ok) return { ok: false, problem: meta.problem };
    const named = parseSnapshotFileName(name);
    if (named === undefined || named.index !== meta.value.index || named.term !== meta.value.term) {
      return { ok: false, problem: `holds snapshot ${meta.value.index} (term ${meta.value.term}), not what its name says` };
    }
    // One buffer for the body, filled piece by piece: the data is held once.
    const buffer = Buffer.allocUnsafeSlow(bodyLength); // every byte is overwritten below
    const data = new Uint8Array(buffer.buffer, buffer.byteOffset, bodyLength);
    let crc = 0;
    for (let off = 0; off < bodyLength; off += PIECE_BYTES) {
      const piece = data.subarray(off, Math.min(bodyLength, off + PIECE_BYTES));
      if (!(await readExactly(handle, piece, headerLength + off))) {
        return { ok: false, problem: 'is truncated (it shrank while being read)' };
      }
      crc = crc32(piece, crc);
    }
    if (crc >>> 0 !== bodyCrc) return { ok: false, problem: 'fails its body checksum' };
    return { ok: true, snapshot: { meta: meta.value, data } };
  } catch (e) {
    if (e instanceof StorageError || e instanceof UnsupportedFormatError) throw e;
    throw new StorageError('read a snapshot file', file, e);
  } finally {
    await handle.close();
  }
}
