import { crc32 } from 'node:zlib';
import { Packr } from 'msgpackr';
import type { LogIndex, NodeId, Term } from '../base/index.js';
import type { Member, SnapshotMeta } from '../raft/index.js';
import type { Decoded } from './log-codec.js';

/**
 * A snapshot file (see README.md, "On-disk formats"):
 *
 *   offset  size  field
 *        0     8  magic "CAIRNSNP"
 *        8     4  format version (u32 BE, 1)
 *       12     4  header length H (u32 BE): bytes before the body, 32 + meta length
 *       16     8  body length (u64 BE)
 *       24     4  crc32 of the body
 *       28     4  crc32 of bytes 0..28 followed by the meta bytes
 *       32   H-32 the SnapshotMeta, msgpack {index, term, config: {members: [{id, suffrage, address}]}}
 *        H   ...  the body: the state machine's snapshot data
 *
 * The file must be exactly H + body length bytes long: shorter is a truncated write, longer
 * is damage. The header checksum covers the lengths, so they can be trusted once it verifies.
 */
export const SNAPSHOT_MAGIC = 'CAIRNSNP';
export const SNAPSHOT_FORMAT_VERSION = 1;
export const SNAPSHOT_FIXED_HEADER_BYTES = 32;
/** Far above any real configuration; a larger header length is damage, not a big cluster. */
export const SNAPSHOT_MAX_HEADER_BYTES = 1 << 20;

const MAGIC_BYTES = new TextEncoder().encode(SNAPSHOT_MAGIC);
const TWO_32 = 2 ** 32;
// Plain msgpack (no records extension), as for log envelopes: any msgpack reader can decode it.
const packr = new Packr({ useRecords: false, mapsAsObjects: true, moreTypes: false });

export interface SnapshotHeader {
  readonly headerLength: number;
  readonly bodyLength: number;
  readonly bodyCrc: number;
}

const NAME_RE = /^snap-(\d{20})-(\d+)\.snap$/;

export function snapshotFileName(index: number, term: number): string {
  return `snap-${String(index).padStart(20, '0')}-${term}.snap`;
}

/** The index and term a snapshot file name claims, or undefined for any other name. */
export function parseSnapshotFileName(name: string): { readonly index: number; readonly term: number } | undefined {
  const m = NAME_RE.exec(name);
  if (m === null) return undefined;
  const index = Number(m[1]);
  const term = Number(m[2]);
  return Number.isSafeInteger(index) && Number.isSafeInteger(term) ? { index, term } : undefined;
}

export function encodeMeta(meta: SnapshotMeta): Uint8Array {
  const canonical = {
    index: meta.index,
    term: meta.term,
    config: { members: meta.config.members.map((m) => ({ id: m.id, suffrage: m.suffrage, address: m.address })) },
  };
  return packr.pack(canonical);
}

/** The full header (fixed part + meta) for a body of the given length and crc32. */
export function encodeSnapshotHeader(metaBytes: Uint8Array, bodyLength: number, bodyCrc: number): Uint8Array {
  const headerLength = SNAPSHOT_FIXED_HEADER_BYTES + metaBytes.length;
  const header = new Uint8Array(headerLength);
  const view = new DataView(header.buffer);
  header.set(MAGIC_BYTES, 0);
  view.setUint32(8, SNAPSHOT_FORMAT_VERSION);
  view.setUint32(12, headerLength);
  view.setUint32(16, Math.floor(bodyLength / TWO_32));
  view.setUint32(20, bodyLength >>> 0);
  view.setUint32(24, bodyCrc >>> 0);
  header.set(metaBytes, SNAPSHOT_FIXED_HEADER_BYTES);
  view.setUint32(28, headerCrc(header));
  return header;
}

function headerCrc(header: Uint8Array): number {
  return crc32(header.subarray(SNAPSHOT_FIXED_HEADER_BYTES), crc32(header.subarray(0, 28)));
}

/**
 * Checks the fixed 32 bytes that can be checked alone (magic, version, header length bounds).
 * The lengths are only trustworthy after `verifyHeader` on the full header.
 */
export function parseFixedHeader(fixed: Uint8Array): Decoded<SnapshotHeader> | { readonly ok: false; readonly unsupportedVersion: number } {
  if (fixed.length < SNAPSHOT_FIXED_HEADER_BYTES) return { ok: false, problem: `shorter than the ${SNAPSHOT_FIXED_HEADER_BYTES}-byte header` };
  for (let i = 0; i < MAGIC_BYTES.length; i++) {
    if (fixed[i] !== MAGIC_BYTES[i]) return { ok: false, problem: `does not start with the magic "${SNAPSHOT_MAGIC}"` };
  }
  const view = new DataView(fixed.buffer, fixed.byteOffset, fixed.byteLength);
  const version = view.getUint32(8);
  const headerLength = view.getUint32(12);
  if (headerLength < SNAPSHOT_FIXED_HEADER_BYTES || headerLength > SNAPSHOT_MAX_HEADER_BYTES) {
    return { ok: false, problem: `has an impossible header length ${headerLength}` };
  }
  if (version !== SNAPSHOT_FORMAT_VERSION) {
    // Only trust a version number the header checksum vouches for; callers verify first.
    return { ok: false, unsupportedVersion: version };
  }
  const bodyLength = view.getUint32(16) * TWO_32 + view.getUint32(20);
  return { ok: true, value: { headerLength, bodyLength, bodyCrc: view.getUint32(24) } };
}

/** Verifies the header checksum over the full header (fixed part + meta bytes). */
export function verifyHeader(header: Uint8Array): boolean {
  if (header.length < SNAPSHOT_FIXED_HEADER_BYTES) return false;
  const view = new DataView(header.buffer, header.byteOffset, header.byteLength);
  return view.getUint32(28) === headerCrc(header);
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function isCount(v: unknown): v is number {
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
}

export function decodeMeta(bytes: Uint8Array): Decoded<SnapshotMeta> {
  let raw: unknown;
  try {
    raw = packr.unpack(bytes);
  } catch (e) {
    return { ok: false, problem: `has undecodable metadata (${e instanceof Error ? e.message : String(e)})` };
  }
  if (!isRecord(raw) || !isCount(raw['index']) || !isCount(raw['term']) || !isRecord(raw['config']) || !Array.isArray(raw['config']['members'])) {
    return { ok: false, problem: 'has metadata without an index, term and member list' };
  }
  const members: Member[] = [];
  for (const m of raw['config']['members'] as unknown[]) {
    if (!isRecord(m) || typeof m['id'] !== 'string' || (m['suffrage'] !== 'voter' && m['suffrage'] !== 'learner') || typeof m['address'] !== 'string') {
      return { ok: false, problem: 'has a malformed member in its configuration' };
    }
    members.push({ id: m['id'] as NodeId, suffrage: m['suffrage'], address: m['address'] });
  }
  return { ok: true, value: { index: raw['index'] as LogIndex, term: raw['term'] as Term, config: { members } } };
}
