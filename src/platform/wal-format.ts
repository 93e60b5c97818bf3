import { crc32 } from 'node:zlib';
import type { LogIndex, NodeId, Term } from '../base/index.js';
import type { Entry, HardState } from '../raft/index.js';
import { readU64, viewOf, writeU64, type Decoded } from './log-codec.js';

/**
 * The byte layout of the segment-file write-ahead log (`WalLogStore`; README.md, "wal").
 *
 * A segment is a preallocated file of zeros that records are appended to, each aligned to 8
 * bytes:
 *
 *   [u32 length L][u32 crc][u8 type][payload: L - 1 bytes][zero padding to a multiple of 8]
 *
 * A zero length is the end of the log (the file's preallocated zeros). The crc is zlib's crc32
 * over, in order, the record's position (u64 segment sequence number, u32 file offset; not
 * stored), the length field, and the type byte and payload. Seeding it with the position means
 * a record copied to the wrong place, or a stale one, fails verification, and a search for
 * intact records behind damage (see wal-scan.ts) cannot be fooled by a record's bytes sitting
 * inside another record's payload. All integers are big-endian.
 *
 * Record types: a segment header (the first record of every segment) and a batch (everything
 * one `append` wrote, so a batch is all or nothing: one record, one checksum).
 */
export const WAL_FORMAT_VERSION = 1;
export const WAL_DIR = 'wal';
/** Length and crc fields. */
export const RECORD_HEADER_BYTES = 8;
/** Segment offsets are u32 in the checksum seed. */
export const MAX_SEGMENT_BYTES = 2 ** 31;

export const RecordType = { segment: 1, batch: 2 } as const;

const BATCH_HAS_HARD_STATE = 1;
const BATCH_HAS_SNAPSHOT = 2;
const BATCH_HAS_COMPACT = 4;
const BATCH_HAS_TRUNCATE = 8;
const BATCH_FLAGS = BATCH_HAS_HARD_STATE | BATCH_HAS_SNAPSHOT | BATCH_HAS_COMPACT | BATCH_HAS_TRUNCATE;

/**
 * What one batch record says, applied in this order on replay: `installedSnapshot` drops every
 * entry; `truncateFrom` drops entries at or after it (a cut made by `load`); `compact` drops
 * entries at or below it; the entries replace everything at or after the first one's index
 * (Raft §5.3); then the hard state.
 */
export interface Batch {
  readonly hardState?: HardState | undefined;
  readonly installedSnapshot?: number | undefined;
  readonly compact?: number | undefined;
  readonly truncateFrom?: number | undefined;
  readonly entries: readonly Entry[];
}

export const align8 = (n: number): number => Math.ceil(n / 8) * 8;

// One of each for the module rather than one per record encoded or decoded (an allocation per
// append, and per record on every start-up's read-back).
const utf8Encoder = new TextEncoder();
const utf8Decoder = new TextDecoder('utf-8', { fatal: true });

/** Bytes a record with a body (type byte + payload) of `bodyLength` bytes takes in a segment. */
export const recordBytes = (bodyLength: number): number => align8(RECORD_HEADER_BYTES + bodyLength);

const hex16 = (n: number): string => n.toString(16).padStart(16, '0');

/** `<seq>-<firstIndex>.wal`, both 16 hex digits: name order is log order. */
export function segmentName(seq: number, firstIndex: number): string {
  return `${hex16(seq)}-${hex16(firstIndex)}.wal`;
}

/** A segment being prepared (zeros and a header) before it joins the log under its real name. */
export function preparedName(seq: number): string {
  return `${hex16(seq)}.tmp`;
}

/**
 * The marker of a cut in progress (WalLogStore's cutDamage): segment `seq` is cut at file offset
 * `offset`, and the marker holds the record written there. Its presence at open means a crash
 * interrupted the cut, which is then finished from the marker (see wal-log-store.ts).
 */
export function cutMarkerName(seq: number, offset: number): string {
  return `${hex16(seq)}-${hex16(offset)}.cut`;
}

export function parseCutMarkerName(name: string): { readonly seq: number; readonly offset: number } | undefined {
  const m = /^([0-9a-f]{16})-([0-9a-f]{16})\.cut$/.exec(name);
  if (m === null) return undefined;
  const seq = Number.parseInt(m[1] ?? '', 16);
  const offset = Number.parseInt(m[2] ?? '', 16);
  return Number.isSafeInteger(seq) && Number.isSafeInteger(offset) ? { seq, offset } : undefined;
}

export function parseSegmentName(name: string): { readonly seq: number; readonly firstIndex: number } | undefined {
  const m = /^([0-9a-f]{16})-([0-9a-f]{16})\.wal$/.exec(name);
  if (m === null) return undefined;
  const seq = Number.parseInt(m[1] ?? '', 16);
  const firstIndex = Number.parseInt(m[2] ?? '', 16);
  return Number.isSafeInteger(seq) && Number.isSafeInteger(firstIndex) ? { seq, firstIndex } : undefined;
}

function positionSeed(seq: number, offset: number): number {
  const pos = new Uint8Array(12);
  const view = viewOf(pos);
  writeU64(view, 0, seq);
  view.setUint32(8, offset);
  return crc32(pos);
}

function recordCrc(seq: number, offset: number, lengthField: Uint8Array, body: Uint8Array): number {
  return crc32(body, crc32(lengthField, positionSeed(seq, offset)));
}

/**
 * Writes the record holding `body` (type byte first) into `target` at `at`, for the file offset
 * `fileOffset` of segment `seq`. `target` must be zeroed (the padding is not written). Returns
 * the bytes the record takes.
 */
export function writeRecord(target: Uint8Array, at: number, body: Uint8Array, seq: number, fileOffset: number): number {
  const view = viewOf(target);
  view.setUint32(at, body.length);
  view.setUint32(at + 4, recordCrc(seq, fileOffset, target.subarray(at, at + 4), body));
  target.set(body, at + RECORD_HEADER_BYTES);
  return recordBytes(body.length);
}

export type ReadRecord =
  | { readonly kind: 'end' }
  | { readonly kind: 'record'; readonly type: number; readonly body: Uint8Array; readonly next: number }
  | { readonly kind: 'bad'; readonly problem: string; readonly body: Uint8Array | undefined };

/**
 * Reads the record at `offset` of segment `seq`, whose bytes are `buf` (the whole file).
 * `body` of a bad record is what its length field claims, when that lies inside the file.
 * `fileOffset` is where the record sits in the segment when `buf` is not the whole file.
 */
export function readRecord(buf: Uint8Array, offset: number, seq: number, fileOffset = offset): ReadRecord {
  if (offset + RECORD_HEADER_BYTES > buf.length) return { kind: 'end' };
  const view = viewOf(buf);
  const length = view.getUint32(offset);
  if (length === 0) return { kind: 'end' };
  const end = offset + RECORD_HEADER_BYTES + length;
  if (end > buf.length) {
    return { kind: 'bad', problem: `a record claims ${length} bytes, past the end of the segment`, body: undefined };
  }
  const body = buf.subarray(offset + RECORD_HEADER_BYTES, end);
  if (view.getUint32(offset + 4) !== recordCrc(seq, fileOffset, buf.subarray(offset, offset + 4), body)) {
    return { kind: 'bad', problem: 'a record fails its checksum', body };
  }
  const type = body[0] ?? 0;
  if (type !== RecordType.segment && type !== RecordType.batch) return { kind: 'bad', problem: `a record has the unknown type ${type}`, body };
  return { kind: 'record', type, body, next: offset + recordBytes(length) };
}

// ---- Segment header --------------------------------------------------------------------------

const SEGMENT_BODY_BYTES = 1 + 4 + 8;

export function encodeSegmentHeader(seq: number): Uint8Array {
  const body = new Uint8Array(SEGMENT_BODY_BYTES);
  const view = viewOf(body);
  body[0] = RecordType.segment;
  view.setUint32(1, WAL_FORMAT_VERSION);
  writeU64(view, 5, seq);
  return body;
}

export function decodeSegmentHeader(body: Uint8Array): Decoded<{ readonly formatVersion: number; readonly seq: number | undefined }> {
  if (body.length !== SEGMENT_BODY_BYTES || body[0] !== RecordType.segment) return { ok: false, problem: 'the segment does not start with a segment header' };
  const view = viewOf(body);
  return { ok: true, value: { formatVersion: view.getUint32(1), seq: readU64(view, 5) } };
}

/** Bytes the header record takes at the start of every segment. */
export const SEGMENT_HEADER_BYTES = recordBytes(SEGMENT_BODY_BYTES);

// ---- Batch -----------------------------------------------------------------------------------

/**
 *   u8 type (2) | u8 flags | [hard state: u64 term, u64 commit, u16 vote length, vote UTF-8]
 *   | [u64 installed snapshot] | [u64 compact] | [u64 truncate from]
 *   | u64 first entry index (0 without entries) | u32 entry count
 *   | per entry: u64 term, u32 data length, data
 */
export function encodeBatch(batch: Batch): Uint8Array {
  const { hardState, installedSnapshot, compact, truncateFrom, entries } = batch;
  const vote = hardState === undefined ? undefined : utf8Encoder.encode(hardState.vote);
  let size = 2 + 8 + 4;
  if (vote !== undefined) size += 8 + 8 + 2 + vote.length;
  if (installedSnapshot !== undefined) size += 8;
  if (compact !== undefined) size += 8;
  if (truncateFrom !== undefined) size += 8;
  for (const e of entries) size += 12 + e.data.length;
  const body = new Uint8Array(size);
  const view = viewOf(body);
  body[0] = RecordType.batch;
  body[1] =
    (hardState !== undefined ? BATCH_HAS_HARD_STATE : 0) |
    (installedSnapshot !== undefined ? BATCH_HAS_SNAPSHOT : 0) |
    (compact !== undefined ? BATCH_HAS_COMPACT : 0) |
    (truncateFrom !== undefined ? BATCH_HAS_TRUNCATE : 0);
  let at = 2;
  if (hardState !== undefined && vote !== undefined) {
    writeU64(view, at, hardState.term);
    writeU64(view, at + 8, hardState.commit);
    view.setUint16(at + 16, vote.length);
    body.set(vote, at + 18);
    at += 18 + vote.length;
  }
  for (const n of [installedSnapshot, compact, truncateFrom]) {
    if (n === undefined) continue;
    writeU64(view, at, n);
    at += 8;
  }
  writeU64(view, at, entries[0]?.index ?? 0);
  view.setUint32(at + 8, entries.length);
  at += 12;
  for (const e of entries) {
    writeU64(view, at, e.term);
    view.setUint32(at + 8, e.data.length);
    body.set(e.data, at + 12);
    at += 12 + e.data.length;
  }
  return body;
}

export interface DecodeBatchOptions {
  /** Entries below this index are counted but not materialized (no data copied). */
  readonly keepFrom: number;
}

export interface DecodedBatch extends Batch {
  /** Index of the first entry (0 without entries) and how many the record holds. */
  readonly firstIndex: number;
  readonly count: number;
}

/**
 * Decodes a batch record's body (type byte first). Entries at or above `keepFrom` are copied
 * out of `body` (so the segment buffer can be freed); the others are skipped.
 */
export function decodeBatch(body: Uint8Array, options: DecodeBatchOptions): Decoded<DecodedBatch> {
  const bad = (what: string): Decoded<DecodedBatch> => ({ ok: false, problem: `a batch record is malformed (${what})` });
  if (body.length < 2 + 12 || body[0] !== RecordType.batch) return bad('too short');
  const flags = body[1] ?? 0;
  if ((flags & ~BATCH_FLAGS) !== 0) return bad(`unknown flags ${flags}`);
  const view = viewOf(body);
  let at = 2;
  const u64 = (): number | undefined => {
    if (at + 8 > body.length) return undefined;
    const n = readU64(view, at);
    at += 8;
    return n;
  };
  let hardState: HardState | undefined;
  if ((flags & BATCH_HAS_HARD_STATE) !== 0) {
    const term = u64();
    const commit = u64();
    if (term === undefined || commit === undefined || at + 2 > body.length) return bad('hard state');
    const voteLength = view.getUint16(at);
    at += 2;
    if (at + voteLength > body.length) return bad('vote');
    let vote: string;
    try {
      vote = utf8Decoder.decode(body.subarray(at, at + voteLength));
    } catch {
      return bad('the vote is not UTF-8');
    }
    at += voteLength;
    hardState = { term: term as Term, vote: vote as NodeId, commit: commit as LogIndex };
  }
  const optional = (flag: number): number | undefined | null => {
    if ((flags & flag) === 0) return undefined;
    return u64() ?? null;
  };
  const installedSnapshot = optional(BATCH_HAS_SNAPSHOT);
  const compact = optional(BATCH_HAS_COMPACT);
  const truncateFrom = optional(BATCH_HAS_TRUNCATE);
  if (installedSnapshot === null || compact === null || truncateFrom === null) return bad('an index field');
  const firstIndex = u64();
  if (firstIndex === undefined || at + 4 > body.length) return bad('entry range');
  const count = view.getUint32(at);
  at += 4;
  if (count > 0 && firstIndex < 1) return bad('entries from index 0');
  if (!Number.isSafeInteger(firstIndex + count)) return bad('entry range');
  const entries: Entry[] = [];
  for (let k = 0; k < count; k++) {
    const term = u64();
    if (term === undefined || at + 4 > body.length) return bad(`entry ${firstIndex + k}`);
    const length = view.getUint32(at);
    at += 4;
    if (at + length > body.length) return bad(`entry ${firstIndex + k} data`);
    const index = firstIndex + k;
    if (index >= options.keepFrom) entries.push({ index: index as LogIndex, term: term as Term, data: body.slice(at, at + length) });
    at += length;
  }
  if (at !== body.length) return bad(`${body.length - at} bytes after the entries`);
  return { ok: true, value: { hardState, installedSnapshot, compact, truncateFrom, entries, firstIndex, count } };
}
