import { Packr, Unpackr } from 'msgpackr';
import { CairnError, ErrorCode, assert, type Revision } from '../base/index.js';
import { Indexes } from './indexes.js';
import { InvalidInput, adoptJson } from './json.js';
import { keyOfId } from './keys.js';
import type { Resource, ResourceId, StatusEntry } from './types.js';
import {
  EMPTY_STATUS,
  checkConditions,
  checkFinalizers,
  checkMetadata,
  checkResourceId,
  makeStatusEntry,
} from './validate.js';

/**
 * The store's snapshot format: a sequence of msgpack values.
 *
 *   header:  { format: 'cairn.store', version: 1, revision, count }
 *   chunks:  [ resource, ... ]   (at most `resourcesPerChunk` each, in key order)
 *
 * A resource is a tuple (compact: field names are not repeated 100,000 times):
 *
 *   [group, groupVersion, kind, partition, namespace, name, uid,
 *    owner, version, generation, metadata, finalizers, deletionTimestamp, data, status, lease?]
 *
 *   lease: the 16th field, present only on a resource attached to a lease (docs/api.md
 *   "Leases"); a store without leases writes the same bytes as before leases existed, and
 *   15-field tuples (every older snapshot) read as resources without a lease.
 *
 *   owner:  null | [group, groupVersion, kind, partition, namespace, name, uid]
 *   status: { key: [observedGeneration, updatedAt, [[type, state, reason, message], ...]] }
 *
 * Encoding is deterministic: resources go out in key order, tuples have a fixed layout, and
 * stored objects are canonical (keys in sorted order, see json.ts), so equal stores give
 * identical bytes. Change the layout only together with FORMAT_VERSION, and keep reading the
 * old versions.
 */
export const FORMAT = 'cairn.store';
export const FORMAT_VERSION = 1;

// variableMapSize: objects with more than 65,535 keys need map32, and smaller maps get the
// compact fixmap/map16 encodings. useRecords: false keeps the output plain msgpack.
const packr = new Packr({ useRecords: false, variableMapSize: true, moreTypes: false });
const unpackr = new Unpackr({ useRecords: false, mapsAsObjects: true });

type IdTuple = [string, string, string, string, string, string, string];

function idTuple(id: ResourceId): IdTuple {
  return [id.type.group, id.type.groupVersion, id.type.kind, id.tenancy.partition, id.tenancy.namespace, id.name, id.uid];
}

function resourceTuple(r: Resource): unknown[] {
  const status: Record<string, unknown> = {};
  for (const [k, e] of Object.entries(r.status)) {
    status[k] = [e.observedGeneration, e.updatedAt, e.conditions.map((c) => [c.type, c.state, c.reason, c.message])];
  }
  const tuple: unknown[] = [
    ...idTuple(r.id),
    r.owner === null ? null : idTuple(r.owner),
    r.version,
    r.generation,
    r.metadata,
    r.finalizers,
    r.deletionTimestamp,
    r.data,
    status,
  ];
  // Only an attached resource has the 16th field (no extra work for the others).
  if (r.lease !== undefined) tuple.push(r.lease);
  return tuple;
}

export function* encodeSnapshot(resources: Iterable<Resource>, count: number, revision: Revision, resourcesPerChunk: number): Generator<Uint8Array> {
  assert(
    Number.isSafeInteger(resourcesPerChunk) && resourcesPerChunk > 0,
    () => `chunks(resourcesPerChunk): resourcesPerChunk must be a positive integer, got ${String(resourcesPerChunk)}`,
  );
  yield packr.pack({ format: FORMAT, version: FORMAT_VERSION, revision, count });
  let batch: unknown[] = [];
  let written = 0;
  for (const r of resources) {
    batch.push(resourceTuple(r));
    written++;
    if (batch.length === resourcesPerChunk) {
      yield packr.pack(batch);
      batch = [];
    }
  }
  if (batch.length > 0) yield packr.pack(batch);
  assert(written === count, () => `snapshot of ${count} resources wrote ${written}`);
}

// ---- Decoding ---------------------------------------------------------------------------------

function bad(message: string): CairnError {
  return new CairnError(ErrorCode.INVALID_ARGUMENT, `restore store snapshot: ${message}`);
}

/**
 * The msgpack values in a byte stream that arrives in pieces of any size: a value may span
 * pieces, a piece may hold several values. Value boundaries are found by `valueEnd` (which
 * walks headers only), never by decoding a truncated value: msgpackr reports truncation
 * inconsistently (with native string extraction, a cut string anywhere in the buffer fails the
 * whole call). Complete values are decoded in one call per attempt; an attempt is made once the
 * pending bytes have doubled since the last one that found no complete value, so the work stays
 * linear in the input however small the pieces are.
 */
function* values(pieces: Iterable<Uint8Array>): Generator<unknown> {
  let pending: Uint8Array[] = [];
  let pendingBytes = 0;
  let nextAttemptAt = 0;
  let n = 0;
  const attempt = function* (final: boolean): Generator<unknown> {
    const buf = pending.length === 1 ? (pending[0] as Uint8Array) : concat(pending);
    let end = 0;
    for (let next = valueEnd(buf, end); next >= 0; next = end < buf.length ? valueEnd(buf, end) : -1) end = next;
    if (end > 0) {
      let decoded: unknown[];
      try {
        decoded = unpackr.unpackMultiple(buf.subarray(0, end)) as unknown[];
      } catch (e) {
        throw bad(`undecodable msgpack (in the first ${n} pieces): ${e instanceof Error ? e.message : String(e)}`);
      }
      yield* decoded;
    }
    if (final && end < buf.length) throw bad(`the data ends inside a value (${buf.length - end} bytes left over): truncated`);
    pending = end < buf.length ? [buf.subarray(end)] : [];
    pendingBytes = buf.length - end;
    nextAttemptAt = end > 0 ? 0 : 2 * pendingBytes;
  };
  for (const piece of pieces) {
    if (!(piece instanceof Uint8Array)) throw bad(`piece ${n} is not a byte array`);
    n++;
    if (piece.length === 0) continue;
    pending.push(piece);
    pendingBytes += piece.length;
    if (pendingBytes >= nextAttemptAt) yield* attempt(false);
  }
  if (pendingBytes > 0) yield* attempt(true);
}

/**
 * Where the msgpack value starting at `pos` ends, or -1 if `buf` ends first. Reads only type
 * bytes and lengths (the msgpack spec's formats), so it costs O(values), not a decode.
 */
export function valueEnd(buf: Uint8Array, pos: number): number {
  const view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  let remaining = 1; // values still to skip
  while (remaining > 0) {
    if (pos >= buf.length) return -1;
    const b = buf[pos] as number;
    remaining--;
    if (b <= 0x7f || b >= 0xe0 || b === 0xc0 || b === 0xc2 || b === 0xc3) {
      pos += 1; // fixint, negative fixint, nil, false, true
    } else if (b <= 0x8f) {
      pos += 1;
      remaining += 2 * (b & 0x0f); // fixmap
    } else if (b <= 0x9f) {
      pos += 1;
      remaining += b & 0x0f; // fixarray
    } else if (b <= 0xbf) {
      pos += 1 + (b & 0x1f); // fixstr
    } else {
      const fixed = FIXED_SIZE[b - 0xc4];
      if (fixed !== undefined && fixed > 0) {
        pos += fixed;
        continue;
      }
      const lenBytes = LENGTH_BYTES[b - 0xc4];
      if (lenBytes === undefined || lenBytes === 0) throw bad(`byte 0x${b.toString(16)} at offset ${pos} is not a msgpack type`);
      if (pos + 1 + lenBytes > buf.length) return -1;
      const len = lenBytes === 1 ? view.getUint8(pos + 1) : lenBytes === 2 ? view.getUint16(pos + 1) : view.getUint32(pos + 1);
      if (b === 0xdc || b === 0xdd) {
        pos += 1 + lenBytes;
        remaining += len; // array16/32
      } else if (b === 0xde || b === 0xdf) {
        pos += 1 + lenBytes;
        remaining += 2 * len; // map16/32
      } else {
        // bin, str: header then `len` bytes; ext: header, a type byte, then `len` bytes.
        pos += 1 + lenBytes + (b >= 0xc7 && b <= 0xc9 ? 1 : 0) + len;
      }
    }
  }
  return pos <= buf.length ? pos : -1;
}

// Indexed by type byte - 0xc4 (0xc4..0xdf). FIXED_SIZE: whole size of fixed-size formats;
// LENGTH_BYTES: size of the length field of variable-size formats (0 = neither: invalid).
//                     c4 c5 c6 c7 c8 c9 ca cb cc cd ce cf d0 d1 d2 d3 d4 d5 d6 d7  d8 d9 da db dc dd de df
const FIXED_SIZE = [0, 0, 0, 0, 0, 0, 5, 9, 2, 3, 5, 9, 2, 3, 5, 9, 3, 4, 6, 10, 18, 0, 0, 0, 0, 0, 0, 0];
const LENGTH_BYTES = [1, 2, 4, 1, 2, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 4, 2, 4, 2, 4];

export function concat(parts: readonly Uint8Array[]): Uint8Array {
  let total = 0;
  for (const p of parts) total += p.length;
  const out = new Uint8Array(total);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function count(v: unknown, what: string): number {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) throw bad(`${what} is not a non-negative integer`);
  return v;
}

function string(v: unknown, what: string): string {
  if (typeof v !== 'string') throw bad(`${what} is not a string`);
  return v;
}

function idFrom(t: unknown, what: string): ResourceId {
  if (!Array.isArray(t) || t.length !== 7) throw bad(`${what} is not a 7-field id`);
  const [group, groupVersion, kind, partition, namespace, name, uid] = t as unknown[];
  return checkResourceId({ type: { group, groupVersion, kind }, tenancy: { partition, namespace }, name, uid }, what);
}

function statusFrom(v: unknown, what: string): Readonly<Record<string, StatusEntry>> {
  if (!isRecord(v)) throw bad(`${what}.status is not a map`);
  const keys = Object.keys(v).sort();
  if (keys.length === 0) return EMPTY_STATUS;
  const out: Record<string, StatusEntry> = {};
  for (const k of keys) {
    const e = v[k];
    if (!Array.isArray(e) || e.length !== 3) throw bad(`${what}.status.${k} is not an [observedGeneration, updatedAt, conditions] tuple`);
    const [observedGeneration, updatedAt, conditions] = e as unknown[];
    if (!Array.isArray(conditions)) throw bad(`${what}.status.${k}.conditions is not an array`);
    const objects = conditions.map((c: unknown, i) => {
      if (!Array.isArray(c) || c.length !== 4) throw bad(`${what}.status.${k}.conditions[${i}] is not a 4-field tuple`);
      const [type, state, reason, message] = c as unknown[];
      return { type, state, reason, message };
    });
    out[k] = makeStatusEntry(
      string(observedGeneration, `${what}.status.${k}.observedGeneration`),
      checkConditions(objects, `${what}.status.${k}.conditions`),
      string(updatedAt, `${what}.status.${k}.updatedAt`),
    );
  }
  return Object.freeze(out);
}

function resourceFrom(t: unknown, what: string): Resource {
  if (!Array.isArray(t) || (t.length !== 15 && t.length !== 16)) throw bad(`${what} is not a 15-field resource tuple (16 with a lease)`);
  const f = t as unknown[];
  const id = idFrom(f.slice(0, 7), `${what}.id`);
  const owner = f[7] === null ? null : idFrom(f[7], `${what}.owner`);
  const version = count(f[8], `${what}.version`) as Revision;
  const generation = string(f[9], `${what}.generation`);
  const deletionTimestamp = f[12] === null ? null : string(f[12], `${what}.deletionTimestamp`);
  const finalizers = checkFinalizers(f[11]);
  if (deletionTimestamp !== null && finalizers.length === 0) throw bad(`${what} is marked for deletion but has no finalizers`);
  return Object.freeze({
    id,
    owner,
    version,
    generation,
    metadata: checkMetadata(f[10]),
    finalizers,
    deletionTimestamp,
    data: adoptJson(f[13], 'data'),
    status: statusFrom(f[14], what),
    ...(f.length === 16 ? { lease: leaseFrom(f[15], what) } : {}),
  });
}

function leaseFrom(v: unknown, what: string): string {
  if (typeof v !== 'string' || v === '' || v.length > 128) throw bad(`${what}.lease is not a lease id`);
  return v;
}

/** Rebuilds the indexes from snapshot data; throws a CairnError naming what is wrong. */
export function decodeSnapshot(pieces: Iterable<Uint8Array>): { indexes: Indexes; revision: Revision } {
  try {
    return decodeValues(values(pieces));
  } catch (e) {
    if (e instanceof InvalidInput) throw bad(e.message);
    throw e;
  }
}

function decodeValues(stream: Iterator<unknown> & Iterable<unknown>): { indexes: Indexes; revision: Revision } {
  const first = stream.next();
  if (first.done === true) throw bad('no data (a snapshot starts with a header)');
  const h = first.value;
  if (!isRecord(h) || h['format'] !== FORMAT) throw bad(`the first value is not a ${FORMAT} header`);
  if (h['version'] !== FORMAT_VERSION) {
    throw bad(`format version ${JSON.stringify(h['version'])} is not supported (this node reads version ${FORMAT_VERSION})`);
  }
  const revision = count(h['revision'], 'header.revision') as Revision;
  const expected = count(h['count'], 'header.count');
  // Collected in key order, then indexed in one pass (Indexes.fromSorted bulk-loads the
  // primary index): a restore at 1M resources is dominated by this loop.
  const keys: string[] = [];
  const resources: Resource[] = [];
  let n = 0;
  let lastKey: string | null = null;
  let chunk = 0;
  for (const value of stream) {
    chunk++;
    if (!Array.isArray(value)) throw bad(`chunk ${chunk} is not an array of resources`);
    for (const t of value as unknown[]) {
      const what = `resource ${n}`;
      if (n >= expected) throw bad(`more resources than the ${expected} the header announces`);
      const r = resourceFrom(t, what);
      const key = keyOfId(r.id);
      if (lastKey !== null && !(lastKey < key)) throw bad(`${what} is out of key order or repeated`);
      if (r.version > revision) throw bad(`${what} has version ${r.version}, after the snapshot revision ${revision}`);
      keys.push(key);
      resources.push(r);
      lastKey = key;
      n++;
    }
  }
  if (n !== expected) throw bad(`the header announces ${expected} resources but the data holds ${n}: truncated`);
  const indexes = Indexes.fromSorted(keys, resources);
  if (!(indexes instanceof Indexes)) {
    const i = indexes.repeatedUid;
    throw bad(`resource ${i} repeats uid ${(resources[i] as Resource).id.uid}`);
  }
  return { indexes, revision };
}
