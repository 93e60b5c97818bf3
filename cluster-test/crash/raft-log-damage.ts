/**
 * Plants damage in a stopped node's raft log through a raw LevelDB handle, below the log
 * store's own checksums. The byte layout is the log store's (src/platform/log-codec.ts,
 * README "On-disk formats"), which its front door does not export:
 *
 *   key `e` + u64 BE index -> [u32 crc32 of the rest][u64 index][u64 term][data...]
 *   key `h`                -> [u32 crc32 of the rest][u64 term][u64 commit][vote, UTF-8]
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { Level } from 'level';
import { RAFT_LOG_DIR } from '../../src/platform/index.js';

type RawDb = Level<Uint8Array, Uint8Array>;

const ENTRY_PREFIX = 0x65; // 'e'
const HARD_STATE_KEY = Uint8Array.of(0x68); // 'h'

function entryKey(index: number): Uint8Array {
  const key = new Uint8Array(9);
  key[0] = ENTRY_PREFIX;
  const view = new DataView(key.buffer);
  view.setUint32(1, Math.floor(index / 2 ** 32));
  view.setUint32(5, index >>> 0);
  return key;
}

function keyIndex(key: Uint8Array): number {
  const view = new DataView(key.buffer, key.byteOffset, key.byteLength);
  return view.getUint32(1) * 2 ** 32 + view.getUint32(5);
}

async function withRaw<T>(dataDir: string, fn: (db: RawDb) => Promise<T>): Promise<T> {
  const db: RawDb = new Level<Uint8Array, Uint8Array>(path.join(dataDir, RAFT_LOG_DIR), { keyEncoding: 'view', valueEncoding: 'view' });
  await db.open();
  try {
    return await fn(db);
  } finally {
    await db.close();
  }
}

export interface RawLogState {
  /** The commit index in the stored hard state. */
  readonly commit: number;
  readonly term: number;
  /** The lowest and highest stored entry index (0 when none). */
  readonly firstIndex: number;
  readonly lastIndex: number;
}

export function readRawLog(dataDir: string): Promise<RawLogState> {
  return withRaw(dataDir, async (db) => {
    const hs: Uint8Array | undefined = await db.get(HARD_STATE_KEY);
    if (hs === undefined) throw new Error(`no hard state in ${dataDir}`);
    const view = new DataView(hs.buffer, hs.byteOffset, hs.byteLength);
    const term = view.getUint32(4) * 2 ** 32 + view.getUint32(8);
    const commit = view.getUint32(12) * 2 ** 32 + view.getUint32(16);
    const range = { gte: entryKey(0), lt: Uint8Array.of(ENTRY_PREFIX + 1), limit: 1 };
    const first = (await db.keys(range).all())[0];
    const last = (await db.keys({ ...range, reverse: true }).all())[0];
    return { commit, term, firstIndex: first ? keyIndex(first) : 0, lastIndex: last ? keyIndex(last) : 0 };
  });
}

/** Flips the low bit of the last byte of entry `index` (in its data): its checksum no longer verifies. */
export function damageEntry(dataDir: string, index: number): Promise<void> {
  return withRaw(dataDir, async (db) => {
    const value: Uint8Array | undefined = await db.get(entryKey(index));
    if (value === undefined) throw new Error(`entry ${index} is not stored in ${dataDir}`);
    const damaged = Uint8Array.from(value);
    damaged[damaged.length - 1] = (damaged[damaged.length - 1] ?? 0) ^ 0x01;
    await db.put(entryKey(index), damaged, { sync: true });
  });
}

/** Stores garbage that fails its checksum as entry `index`: a torn write of a new entry. */
export function plantTornEntry(dataDir: string, index: number): Promise<void> {
  return withRaw(dataDir, (db) => db.put(entryKey(index), Uint8Array.of(1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9), { sync: true }));
}

export interface LevelDbLogRecord {
  /** Byte offset of the record's 7-byte header in the file. */
  readonly offset: number;
  /** Payload bytes after the header. */
  readonly length: number;
  /** 1 full, 2 first, 3 middle, 4 last fragment of a write batch. */
  readonly type: number;
}

/**
 * The physical records of a LevelDB write-ahead log file (LevelDB doc/log_format.md): 32 KiB
 * blocks of records, each a header [masked crc32c u32][length u16 LE][type u8] and its payload;
 * a block's last < 7 bytes are zero padding. Lets a test aim damage at a chosen record.
 */
export async function levelDbLogRecords(file: string): Promise<LevelDbLogRecord[]> {
  const BLOCK = 32 * 1024;
  const HEADER = 7;
  const buf = await readFile(file);
  const out: LevelDbLogRecord[] = [];
  let pos = 0;
  while (pos + HEADER <= buf.length) {
    const left = BLOCK - (pos % BLOCK);
    if (left < HEADER) {
      pos += left;
      continue;
    }
    const length = buf.readUInt16LE(pos + 4);
    const type = buf[pos + 6] ?? 0;
    if (type === 0 && length === 0) break; // zero fill: nothing written here
    out.push({ offset: pos, length, type });
    pos += HEADER + length;
  }
  return out;
}
