import { crc32 } from 'node:zlib';
import type { Entry, HardState } from '../raft/index.js';
import type { LogIndex, NodeId, Term } from '../base/index.js';

/**
 * The byte layout of the raft-log LevelDB database (see README.md, "On-disk formats").
 *
 *   key `e` + u64 BE index -> [u32 crc32 of the rest][u64 index][u64 term][data...]
 *   key `h`                -> [u32 crc32 of the rest][u64 term][u64 commit][vote, UTF-8]
 *   key `m`                -> [u32 crc32 of the rest][u32 format version]
 *
 * Big-endian keys make LevelDB's byte order equal index order. The index is repeated inside
 * the value so a record found under the wrong key (a misdirected write) fails verification.
 * All integers are u64 on disk; the in-memory values are safe integers (< 2^53).
 */
export const LOG_FORMAT_VERSION = 1;

export const ENTRY_PREFIX = 0x65; // 'e'
const ENTRY_PREFIX_END = 0x66; // 'f': every entry key sorts below this
export const HARD_STATE_KEY: Uint8Array = Uint8Array.of(0x68); // 'h'
export const META_KEY: Uint8Array = Uint8Array.of(0x6d); // 'm'
/** Exclusive upper bound of the entry key range. */
export const ENTRY_KEY_END: Uint8Array = Uint8Array.of(ENTRY_PREFIX_END);

const ENTRY_KEY_LENGTH = 9;
const ENTRY_HEADER_LENGTH = 4 + 8 + 8;
const HARD_STATE_HEADER_LENGTH = 4 + 8 + 8;
const META_LENGTH = 4 + 4;
const TWO_32 = 2 ** 32;

export function writeU64(view: DataView, offset: number, n: number): void {
  view.setUint32(offset, Math.floor(n / TWO_32));
  view.setUint32(offset + 4, n >>> 0);
}

/** Reads a u64; undefined if it does not fit a safe integer (which no writer of ours produces). */
export function readU64(view: DataView, offset: number): number | undefined {
  const n = view.getUint32(offset) * TWO_32 + view.getUint32(offset + 4);
  return Number.isSafeInteger(n) ? n : undefined;
}

export function viewOf(b: Uint8Array): DataView {
  return new DataView(b.buffer, b.byteOffset, b.byteLength);
}

/** Seals a value: fills bytes 0..4 with the crc32 of bytes 4.. . */
function seal(value: Uint8Array): Uint8Array {
  viewOf(value).setUint32(0, crc32(value.subarray(4)));
  return value;
}

function sealed(value: Uint8Array): boolean {
  return value.length >= 4 && viewOf(value).getUint32(0) === crc32(value.subarray(4));
}

export function entryKey(index: number): Uint8Array {
  const key = new Uint8Array(ENTRY_KEY_LENGTH);
  key[0] = ENTRY_PREFIX;
  writeU64(viewOf(key), 1, index);
  return key;
}

/** The index in an entry key, or undefined if `key` is not a well-formed entry key. */
export function entryKeyIndex(key: Uint8Array): number | undefined {
  if (key.length !== ENTRY_KEY_LENGTH || key[0] !== ENTRY_PREFIX) return undefined;
  return readU64(viewOf(key), 1);
}

export function encodeEntry(e: Entry): Uint8Array {
  const value = new Uint8Array(ENTRY_HEADER_LENGTH + e.data.length);
  const view = viewOf(value);
  writeU64(view, 4, e.index);
  writeU64(view, 12, e.term);
  value.set(e.data, ENTRY_HEADER_LENGTH);
  return seal(value);
}

export type Decoded<T> = { readonly ok: true; readonly value: T } | { readonly ok: false; readonly problem: string };

/**
 * Verifies and decodes an entry value stored under the key for `keyIndex`. `data` is a view
 * into `value` (no copy).
 */
export function decodeEntry(keyIndex: number, value: Uint8Array): Decoded<Entry> {
  if (value.length < ENTRY_HEADER_LENGTH) {
    return { ok: false, problem: `log entry ${keyIndex} is ${value.length} bytes, shorter than its ${ENTRY_HEADER_LENGTH}-byte header` };
  }
  if (!sealed(value)) return { ok: false, problem: `log entry ${keyIndex} fails its checksum` };
  const view = viewOf(value);
  const index = readU64(view, 4);
  const term = readU64(view, 12);
  if (index !== keyIndex) {
    return { ok: false, problem: `log entry stored under index ${keyIndex} says it is entry ${String(index)}` };
  }
  if (term === undefined) return { ok: false, problem: `log entry ${keyIndex} has an out-of-range term` };
  const data = new Uint8Array(value.buffer, value.byteOffset + ENTRY_HEADER_LENGTH, value.length - ENTRY_HEADER_LENGTH);
  return { ok: true, value: { index: index as LogIndex, term: term as Term, data } };
}

export function encodeHardState(hs: HardState): Uint8Array {
  const vote = new TextEncoder().encode(hs.vote);
  const value = new Uint8Array(HARD_STATE_HEADER_LENGTH + vote.length);
  const view = viewOf(value);
  writeU64(view, 4, hs.term);
  writeU64(view, 12, hs.commit);
  value.set(vote, HARD_STATE_HEADER_LENGTH);
  return seal(value);
}

export function decodeHardState(value: Uint8Array): Decoded<HardState> {
  if (value.length < HARD_STATE_HEADER_LENGTH || !sealed(value)) {
    return { ok: false, problem: 'the stored hard state (term, vote, commit index) fails its checksum' };
  }
  const view = viewOf(value);
  const term = readU64(view, 4);
  const commit = readU64(view, 12);
  if (term === undefined || commit === undefined) return { ok: false, problem: 'the stored hard state has an out-of-range term or commit index' };
  let vote: string;
  try {
    vote = new TextDecoder('utf-8', { fatal: true }).decode(value.subarray(HARD_STATE_HEADER_LENGTH));
  } catch {
    return { ok: false, problem: 'the stored hard state has a vote that is not UTF-8' };
  }
  return { ok: true, value: { term: term as Term, vote: vote as NodeId, commit: commit as LogIndex } };
}

export function encodeMeta(formatVersion: number): Uint8Array {
  const value = new Uint8Array(META_LENGTH);
  viewOf(value).setUint32(4, formatVersion);
  return seal(value);
}

export function decodeMeta(value: Uint8Array): Decoded<number> {
  if (value.length !== META_LENGTH || !sealed(value)) return { ok: false, problem: 'the raft log metadata record fails its checksum' };
  return { ok: true, value: viewOf(value).getUint32(4) };
}
