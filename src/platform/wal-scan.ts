import { open, type FileHandle } from 'node:fs/promises';
import type { Entry, HardState } from '../raft/index.js';
import { StorageError, UnsupportedFormatError } from './errors.js';
import { align8, decodeBatch, decodeSegmentHeader, readRecord, RecordType, SEGMENT_HEADER_BYTES, WAL_FORMAT_VERSION, type DecodedBatch } from './wal-format.js';

/**
 * Reading a segment-file write-ahead log back (wal-format.ts): replaying its batch records in
 * order, finding where it ends or is damaged, and looking behind damage for intact records
 * (which tell a torn tail from damage in the middle of the log, and carry the newest commit
 * index and hard state). Decisions about what to do with damage are the store's.
 */

/** A segment file of the log. */
export interface SegmentRef {
  readonly seq: number;
  /** The log's last index + 1 when the segment was started (from its name). */
  readonly firstIndex: number;
  readonly path: string;
}

/**
 * The shape of the log that the writer needs (no entries): the newest hard state, the floor
 * (entries at or below it are compacted or replaced by an installed snapshot) and the last
 * index (of the last live entry, or the floor if that is higher).
 */
export class LogShape {
  hardState: HardState | undefined = undefined;
  floor = 0;
  lastIndex = 0;

  apply(b: { readonly hardState?: HardState | undefined; readonly installedSnapshot?: number | undefined; readonly compact?: number | undefined; readonly truncateFrom?: number | undefined; readonly firstIndex: number; readonly count: number }): void {
    if (b.installedSnapshot !== undefined) {
      this.floor = Math.max(this.floor, b.installedSnapshot);
      this.lastIndex = this.floor;
    }
    if (b.truncateFrom !== undefined) this.lastIndex = Math.max(this.floor, Math.min(this.lastIndex, b.truncateFrom - 1));
    if (b.compact !== undefined) {
      this.floor = Math.max(this.floor, b.compact);
      this.lastIndex = Math.max(this.lastIndex, this.floor);
    }
    if (b.count > 0) this.lastIndex = Math.max(this.floor, b.firstIndex + b.count - 1);
    if (b.hardState !== undefined) this.hardState = b.hardState;
  }
}

/** The log as replayed: its shape and the entries at or above `keepFrom`, by index. */
export class Replay {
  readonly shape = new LogShape();
  readonly entries = new Map<number, Entry>();

  constructor(readonly keepFrom: number) {}

  apply(b: DecodedBatch): void {
    if (b.installedSnapshot !== undefined) this.entries.clear();
    if (b.truncateFrom !== undefined) this.dropRange(b.truncateFrom, this.shape.lastIndex);
    if (b.compact !== undefined) this.dropRange(this.keepFrom, b.compact);
    if (b.count > 0) {
      // Raft §5.3: an entry at index i replaces everything at or after i.
      this.dropRange(b.firstIndex, this.shape.lastIndex);
      for (const e of b.entries) this.entries.set(e.index, e);
    }
    this.shape.apply(b);
  }

  /** Deletes entries from..to, walking whichever is shorter: the range or the map. */
  private dropRange(from: number, to: number): void {
    const lo = Math.max(from, this.keepFrom);
    if (to < lo || this.entries.size === 0) return;
    if (to - lo + 1 <= this.entries.size) {
      for (let i = lo; i <= to; i++) this.entries.delete(i);
      return;
    }
    for (const i of [...this.entries.keys()]) if (i >= lo && i <= to) this.entries.delete(i);
  }
}

/** What intact records behind damage say. */
export interface Beyond {
  /** Intact batch records found after the damage (in its segment and in later segments). */
  readonly records: number;
  /** Entries those records hold. */
  readonly entries: number;
  /** The highest commit index among their hard states (0 if none). */
  readonly maxCommit: number;
  /** The hard state of the last of them that has one (the newest: written last). */
  readonly hardState: HardState | undefined;
}

export interface Damage {
  /** Position of the damaged segment in the scanned list. */
  readonly segment: number;
  /** File offset of the first record that is not intact (or of zeros with intact records after them). */
  readonly offset: number;
  readonly problem: string;
  /** Entries the damaged record holds when its body still decodes, else 1 (at least one lost write). */
  readonly entries: number;
  /** Bytes [offset, zeroEnd) of the segment are not all zeros; zeroing them cuts the log there. */
  readonly zeroEnd: number;
}

export interface ScannedSegment {
  readonly ref: SegmentRef;
  readonly size: number;
  /** Offset just after the last intact record (where the next record goes, for the last segment). */
  readonly end: number;
  /** The end of the last 8-byte word from `end` on that is not all zeros (`end` if none). */
  readonly nonZeroEnd: number;
}

export interface ScanResult {
  readonly replay: Replay;
  /** Segment files read (each once) and the bytes read from them (their whole size). */
  readonly segmentsRead: number;
  readonly bytesRead: number;
  /** Every segment that was read, in order (including the damaged one and those after it). */
  readonly segments: readonly ScannedSegment[];
  readonly damage: Damage | undefined;
  readonly beyond: Beyond;
}

/** Cap on bytes checksummed while searching behind damage, so a large damaged region cannot stall a start. */
const SEARCH_CRC_BUDGET = 256 * 1024 * 1024;

class BeyondCollector {
  records = 0;
  entries = 0;
  maxCommit = 0;
  hardState: HardState | undefined = undefined;
  crcBudget = SEARCH_CRC_BUDGET;

  add(b: DecodedBatch): void {
    this.records++;
    this.entries += b.count;
    if (b.hardState !== undefined) {
      this.maxCommit = Math.max(this.maxCommit, b.hardState.commit);
      this.hardState = b.hardState;
    }
  }

  result(): Beyond {
    return { records: this.records, entries: this.entries, maxCommit: this.maxCommit, hardState: this.hardState };
  }
}

/**
 * Looks for intact records anywhere in `seg` from `from` on, at every 8-byte boundary (records
 * are aligned). Zero words are skipped cheaply, and the zero tail `readSegment` left out is not
 * looked at (it holds nothing). Returns the end of the last non-zero 8-byte word seen (or
 * `from` if none).
 */
function searchIntact(seg: SegmentData, from: number, seq: number, into: BeyondCollector): number {
  let buf = seg.bytes;
  let words = wordsOf(buf);
  let lastNonZeroEnd = from;
  for (let off = align8(from); off + 8 <= buf.length; off += 8) {
    const w = off / 4;
    if (words[w] === 0 && words[w + 1] === 0) continue;
    lastNonZeroEnd = off + 8;
    if (words[w] === 0 || into.crcBudget <= 0) continue;
    // Cheap checks before the checksum: a type byte we write and a length that fits.
    const length = ((buf[off] ?? 0) * 2 ** 24) + ((buf[off + 1] ?? 0) << 16) + ((buf[off + 2] ?? 0) << 8) + (buf[off + 3] ?? 0);
    const type = buf[off + 8];
    if (length < 2 || off + 8 + length > seg.size || (type !== RecordType.batch && type !== RecordType.segment)) continue;
    if (off + 8 + length > buf.length) {
      // A record whose end lies in the zero tail that was not kept: its bytes there are zeros.
      buf = seg.cover(off + 8 + length);
      words = wordsOf(buf);
    }
    into.crcBudget -= length;
    const r = readRecord(buf, off, seq);
    if (r.kind !== 'record') continue;
    if (r.type === RecordType.batch) {
      const decoded = decodeBatch(r.body, { keepFrom: Number.POSITIVE_INFINITY });
      if (decoded.ok) into.add(decoded.value);
    }
    lastNonZeroEnd = Math.max(lastNonZeroEnd, r.next);
    off = r.next - 8;
  }
  return lastNonZeroEnd;
}

function wordsOf(buf: Uint8Array): Uint32Array {
  return buf.byteOffset % 4 === 0 ? new Uint32Array(buf.buffer, buf.byteOffset, Math.floor(buf.length / 4)) : new Uint32Array(buf.slice().buffer, 0, Math.floor(buf.length / 4));
}

/** Bytes read per read() of a segment. */
const READ_CHUNK_BYTES = 4 * 1024 * 1024;
/** Granularity of the zero check: a piece this big that is all zeros is not kept. */
const ZERO_PIECE_BYTES = 64 * 1024;
const ZERO_PIECE = new Uint8Array(ZERO_PIECE_BYTES);

/**
 * A segment's bytes as read: `bytes` is the file from its start up to the end of its last piece
 * that is not all zeros; the rest, up to `size`, is known to be zeros (it was read and
 * compared, not kept). `cover(end)` gives a buffer that also holds the zeros up to `end` (at
 * most `size`), for a record whose claimed length reaches into that tail, so every check reads
 * exactly what the file holds.
 */
class SegmentData {
  constructor(
    public bytes: Uint8Array,
    readonly size: number,
  ) {}

  cover(end: number): Uint8Array {
    const want = Math.min(end, this.size);
    if (want > this.bytes.length) {
      const grown = new Uint8Array(want);
      grown.set(this.bytes);
      this.bytes = grown;
    }
    return this.bytes;
  }
}

/**
 * Reads a whole segment once, in 4 MiB pieces into one reused buffer, keeping only what lies
 * before its zero tail. A preallocated segment is mostly zeros: each 64 KiB of a piece is
 * compared with zeros (a memcmp) and a piece that is all zeros is not kept, so the tail of a
 * 64 MiB segment is neither copied out nor walked word by word in JavaScript. What is kept goes
 * into a buffer of the file's size allocated without zero-filling, of which only the pages
 * written are ever touched. The result is byte for byte what reading the whole file gives
 * (`SegmentData`).
 */
async function readSegment(ref: SegmentRef): Promise<SegmentData> {
  let handle: FileHandle | undefined;
  try {
    handle = await open(ref.path, 'r');
    const { size } = await handle.stat();
    // Neither is zero-filled: every byte compared or kept below is read first, and the gaps
    // between kept pieces are zeroed explicitly.
    const piece = Buffer.allocUnsafeSlow(Math.min(size, READ_CHUNK_BYTES));
    let out: Buffer | undefined;
    let keptEnd = 0;
    for (let pos = 0; pos < size; ) {
      const want = Math.min(piece.length, size - pos);
      let got = 0;
      while (got < want) {
        const { bytesRead } = await handle.read(piece, got, want - got, pos + got);
        if (bytesRead === 0) throw new Error(`the file ended at ${pos + got} bytes while reading ${size} (it shrank while being read)`);
        got += bytesRead;
      }
      let lastNonZero = -1;
      for (let p = 0; p < want; p += ZERO_PIECE_BYTES) {
        const end = Math.min(want, p + ZERO_PIECE_BYTES);
        if (piece.compare(ZERO_PIECE, 0, end - p, p, end) !== 0) lastNonZero = end;
      }
      if (lastNonZero >= 0) {
        out ??= Buffer.allocUnsafeSlow(size);
        out.fill(0, keptEnd, pos);
        out.set(piece.subarray(0, lastNonZero), pos);
        keptEnd = pos + lastNonZero;
      }
      pos += want;
    }
    return new SegmentData(out === undefined ? new Uint8Array(0) : out.subarray(0, keptEnd), size);
  } catch (e) {
    throw new StorageError('read a raft log segment', ref.path, e);
  } finally {
    await handle?.close().catch(() => undefined);
  }
}

function unsupported(ref: SegmentRef, formatVersion: number): UnsupportedFormatError {
  return new UnsupportedFormatError(`the raft log segment ${ref.path} has format version ${formatVersion}; this build reads only version ${WAL_FORMAT_VERSION}`);
}

/**
 * Reads the header record of each segment (its first bytes only) and throws
 * `UnsupportedFormatError` for one with a format version this build does not read, so that a
 * newer log is refused when the store opens, before anything else. A header that does not read
 * back intact is left to the scan (damage, which `load` refuses).
 */
export async function checkFormatVersions(segments: readonly SegmentRef[]): Promise<void> {
  for (const ref of segments) {
    const buf = new Uint8Array(SEGMENT_HEADER_BYTES);
    let handle: FileHandle | undefined;
    let got = 0;
    try {
      handle = await open(ref.path, 'r');
      ({ bytesRead: got } = await handle.read(buf, 0, buf.length, 0));
    } catch (e) {
      throw new StorageError('read a raft log segment header', ref.path, e);
    } finally {
      await handle?.close().catch(() => undefined);
    }
    const r = readRecord(buf.subarray(0, got), 0, ref.seq);
    if (r.kind !== 'record' || r.type !== RecordType.segment) continue;
    const header = decodeSegmentHeader(r.body);
    if (header.ok && header.value.formatVersion !== WAL_FORMAT_VERSION) throw unsupported(ref, header.value.formatVersion);
  }
}

/**
 * Replays `segments` (in order, sequence numbers already checked to be consecutive) into a
 * `Replay` keeping entries at or above `keepFrom`, up to the end of the log or the first damage.
 * A segment with a newer format version throws `UnsupportedFormatError`.
 */
export async function scanSegments(segments: readonly SegmentRef[], keepFrom: number): Promise<ScanResult> {
  const replay = new Replay(keepFrom);
  const scanned: ScannedSegment[] = [];
  const beyond = new BeyondCollector();
  let damage: Damage | undefined;
  let bytesRead = 0;
  for (let j = 0; j < segments.length; j++) {
    const ref = segments[j] as SegmentRef;
    const seg = await readSegment(ref);
    bytesRead += seg.size;
    const prev = scanned[j - 1];
    if (prev === undefined) {
      // The log stood at firstIndex - 1 when this segment began (its name says so); the
      // segments before it, if any, are compacted away.
      replay.shape.lastIndex = ref.firstIndex - 1;
    } else if (damage === undefined && replay.shape.lastIndex !== ref.firstIndex - 1) {
      // Every later segment begins where the log before it ended. If it does not, records at
      // the end of the one before are missing (zeros read back where they were: a lost sector
      // reads as the segment's end), and the records of this segment would replay onto a log
      // they were not written after. Damage at the end of the one before, with this segment
      // and the later ones behind it.
      damage = {
        segment: j - 1,
        offset: prev.end,
        problem: `the next segment begins at index ${ref.firstIndex}, but the log before it ends at index ${replay.shape.lastIndex}: records are missing`,
        entries: 0,
        zeroEnd: Math.min(prev.size, Math.max(prev.end + 8, prev.nonZeroEnd)),
      };
    }
    if (damage !== undefined) {
      // Behind damage: every intact record counts, from the segment's start.
      searchIntact(seg, 0, ref.seq, beyond);
      scanned.push({ ref, size: seg.size, end: 0, nonZeroEnd: 0 });
      continue;
    }
    let off = 0;
    let problem: string | undefined;
    let lostEntries = 1;
    for (;;) {
      const r = readRecordAt(seg, off, ref.seq);
      if (r.kind === 'end') break;
      if (r.kind === 'bad') {
        problem = r.problem;
        const body = r.body;
        if (body !== undefined && body[0] === RecordType.batch) {
          const guess = decodeBatch(body, { keepFrom: Number.POSITIVE_INFINITY });
          if (guess.ok) lostEntries = guess.value.count;
        }
        break;
      }
      if (off === 0) {
        const header = r.type === RecordType.segment ? decodeSegmentHeader(r.body) : undefined;
        if (header === undefined || !header.ok) {
          problem = 'the segment does not start with a segment header';
          break;
        }
        if (header.value.formatVersion !== WAL_FORMAT_VERSION) throw unsupported(ref, header.value.formatVersion);
        if (header.value.seq !== ref.seq) {
          problem = `the segment header names sequence number ${String(header.value.seq)}, not the ${ref.seq} of its file name`;
          break;
        }
        off = r.next;
        continue;
      }
      if (r.type !== RecordType.batch) {
        problem = 'a segment header appears in the middle of a segment';
        break;
      }
      const decoded = decodeBatch(r.body, { keepFrom });
      if (!decoded.ok) {
        problem = decoded.problem;
        break;
      }
      replay.apply(decoded.value);
      off = r.next;
    }
    let nonZeroEnd: number;
    if (problem === undefined) {
      // The end marker. Intact records after it mean zeros where data was (a lost sector),
      // not the end of the log.
      const before = beyond.records;
      nonZeroEnd = searchIntact(seg, off + 8, ref.seq, beyond);
      if (beyond.records > before || off === 0) {
        damage = {
          segment: j,
          offset: off,
          problem: off === 0 ? 'the segment does not start with a segment header' : 'zeros inside the log, with intact records after them',
          entries: 0,
          zeroEnd: Math.min(seg.size, Math.max(off + 8, nonZeroEnd)),
        };
      }
    } else {
      nonZeroEnd = searchIntact(seg, off + 8, ref.seq, beyond);
      damage = { segment: j, offset: off, problem, entries: lostEntries, zeroEnd: Math.min(seg.size, Math.max(off + 8, nonZeroEnd)) };
    }
    scanned.push({ ref, size: seg.size, end: off, nonZeroEnd });
  }
  return { replay, segments: scanned, damage, beyond: beyond.result(), segmentsRead: segments.length, bytesRead };
}

/** `readRecord` on a segment read by `readSegment`: the zero tail it left out is covered as needed. */
function readRecordAt(seg: SegmentData, off: number, seq: number): ReturnType<typeof readRecord> {
  let buf = seg.bytes;
  if (off + 8 > buf.length) buf = seg.cover(off + 8);
  if (off + 8 <= buf.length) {
    const length = ((buf[off] ?? 0) * 2 ** 24) + ((buf[off + 1] ?? 0) << 16) + ((buf[off + 2] ?? 0) << 8) + (buf[off + 3] ?? 0);
    if (off + 8 + length > buf.length) buf = seg.cover(off + 8 + length);
  }
  return readRecord(buf, off, seq);
}
