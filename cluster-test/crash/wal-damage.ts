/**
 * Reads and damages a stopped node's segment-file raft log (src/platform, README "wal") below
 * the log store, through the platform's test helpers (`walRecords`: every intact record with
 * its position).
 */
import { open, readdir } from 'node:fs/promises';
import path from 'node:path';
import { WAL_DIR } from '../../src/platform/index.js';
import { flipByte, walRecordOf, walRecords, walSegments, type WalRecord } from '../../src/platform/testing/index.js';

export interface RawWalState {
  /** The commit index of the newest record (every record carries the newest hard state). */
  readonly commit: number;
  /** The lowest entry index any record holds (0: none) and the last index after the newest entry record. */
  readonly firstIndex: number;
  readonly lastIndex: number;
  readonly records: readonly WalRecord[];
  readonly segments: number;
}

export async function readRawWal(dataDir: string): Promise<RawWalState> {
  const records = await walRecords(dataDir);
  const batches = records.filter((r) => r.type === 'batch');
  const withEntries = batches.filter((r) => r.count > 0);
  const last = withEntries[withEntries.length - 1];
  return {
    commit: batches.reduce((c, r) => (r.commit !== undefined ? r.commit : c), 0),
    firstIndex: withEntries.length === 0 ? 0 : withEntries.reduce((m, r) => Math.min(m, r.firstIndex), Number.POSITIVE_INFINITY),
    lastIndex: last === undefined ? 0 : last.firstIndex + last.count - 1,
    records,
    segments: (await walSegments(dataDir)).length,
  };
}

/** Prepared segments (`.tmp`) in the log directory: a kill landed while one was being made or was ready. */
export async function preparedSegments(dataDir: string): Promise<string[]> {
  return (await readdir(path.join(dataDir, WAL_DIR))).filter((n) => n.endsWith('.tmp'));
}

/** Flips the low bit of the last byte of the newest record holding entry `index` (in its data): its checksum fails. */
export async function damageWalEntry(dataDir: string, index: number): Promise<WalRecord> {
  const r = await walRecordOf(dataDir, index);
  await flipByte(r.file, r.offset + r.length - 1, 0x01);
  return r;
}

/**
 * Tears the newest record as a crash during its write would (a power loss: the preallocated
 * zeros show where the write stopped): bytes from `keep(end)` on are zeroed, where `end` is the
 * record's length without its trailing zeros, so a `keep` below `end` always changes it.
 */
export async function tearLastRecord(dataDir: string, keep: (end: number) => number): Promise<{ record: WalRecord; kept: number }> {
  const { records } = await readRawWal(dataDir);
  const record = records[records.length - 1];
  if (record === undefined || record.type !== 'batch') throw new Error(`the newest record of ${dataDir} is not a batch: ${JSON.stringify(record)}`);
  const handle = await open(record.file, 'r+');
  try {
    // Zeros from `kept` on must change something: a record's last bytes may be zeros already
    // (small numbers, padding), and "tearing" only those leaves an intact record behind.
    const bytes = new Uint8Array(record.length);
    await handle.read(bytes, 0, record.length, record.offset);
    let end = record.length;
    while (end > 0 && bytes[end - 1] === 0) end--;
    const kept = keep(end);
    await handle.write(new Uint8Array(record.length - kept), 0, record.length - kept, record.offset + kept);
    await handle.sync();
    return { record, kept };
  } finally {
    await handle.close();
  }
}

/** Writes a record-like header that fails its checksum right after the newest record: a torn new record. */
export async function plantTornRecord(dataDir: string): Promise<WalRecord> {
  const { records } = await readRawWal(dataDir);
  const last = records[records.length - 1];
  if (last === undefined) throw new Error(`no records in ${dataDir}`);
  const at = last.offset + Math.ceil(last.length / 8) * 8;
  const handle = await open(last.file, 'r+');
  try {
    if (at + 16 > (await handle.stat()).size) throw new Error(`no room after the newest record of ${last.file} to plant a torn one`);
    // Length 40, a wrong crc, the batch type, garbage.
    await handle.write(Uint8Array.of(0, 0, 0, 40, 1, 2, 3, 4, 2, 9, 9, 9, 9, 9, 9, 9), 0, 16, at);
    await handle.sync();
  } finally {
    await handle.close();
  }
  return last;
}
