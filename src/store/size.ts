import type { JsonValue, Resource, ResourceId, StatusEntry } from './types.js';

/**
 * The deterministic size of a stored resource (docs/security.md "Quotas"): an estimate of its
 * encoded size (about what msgpack makes of it in a snapshot), plus a fixed overhead for the
 * indexes and the object itself. It depends only on the resource's content, never on V8 (no
 * heap measurement, no object identity), so every replica computes the same number and the
 * quota, decided in the state machine, reaches the same verdict everywhere.
 *
 * What counts: the id (type, tenancy, name, uid), the owner reference, version, generation,
 * metadata, finalizers, deletion timestamp, data and status (every entry's conditions), each
 * string as its UTF-8 length plus a 2-byte header, numbers as 9 bytes, `true`/`false`/`null`
 * as 1, and a 5-byte header per array or object. Measured against the real heap cost in
 * docs/security.md: the heap holds about 2-3 times this figure for string-heavy data.
 */
export const RESOURCE_OVERHEAD_BYTES = 256;

/** Sizes of data values already measured: frozen objects are shared between versions, so a status write does not walk 1 MiB of data again. Only a cache: the figure is the same without it. */
const dataSizes = new WeakMap<object, number>();
/** The smallest measured size that `dataSizes` keeps (bytes). */
const CACHE_DATA_SIZE_FROM = 4096;

/** The UTF-8 length of a string, counted from its UTF-16 code units (a lone surrogate counts 3, as its replacement character). */
const NON_ASCII = /[^\x00-\x7f]/;

export function utf8Length(s: string): number {
  // Most strings are ASCII: one native scan instead of a loop over every code unit.
  if (!NON_ASCII.test(s)) return s.length;
  let n = s.length;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) continue;
    if (c < 0x800) n += 1;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
      const d = s.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        n += 2; // a pair: 2 code units, 4 bytes
        i++;
        continue;
      }
      n += 2;
    } else n += 2;
  }
  return n;
}

function str(s: string): number {
  return utf8Length(s) + 2;
}

/** The size of a JSON value, without recursion (depth is bounded by the store, but a loop costs nothing). */
export function jsonBytes(v: JsonValue): number {
  if (typeof v !== 'object' || v === null) return scalar(v);
  const cached = dataSizes.get(v);
  if (cached !== undefined) return cached;
  let n = 0;
  const stack: JsonValue[] = [v];
  for (let x = stack.pop(); x !== undefined; x = stack.pop()) {
    if (typeof x !== 'object' || x === null) {
      n += scalar(x);
    } else if (Array.isArray(x)) {
      n += 5;
      for (const e of x as readonly JsonValue[]) {
        // Scalars inline; only containers wait on the stack.
        if (typeof e === 'object' && e !== null) stack.push(e);
        else n += scalar(e);
      }
    } else {
      n += 5;
      const o = x as { readonly [k: string]: JsonValue };
      for (const k of Object.keys(o)) {
        n += str(k);
        const e = o[k] as JsonValue;
        if (typeof e === 'object' && e !== null) stack.push(e);
        else n += scalar(e);
      }
    }
  }
  // Only large values are worth remembering: a WeakMap entry per small resource would cost
  // more heap (and GC ephemeron work) than walking it again.
  if (n >= CACHE_DATA_SIZE_FROM && Object.isFrozen(v)) dataSizes.set(v, n);
  return n;
}

function scalar(v: string | number | boolean | null): number {
  if (typeof v === 'string') return str(v);
  if (typeof v === 'number') return 9;
  return 1;
}

function idBytes(id: ResourceId): number {
  return str(id.type.group) + str(id.type.groupVersion) + str(id.type.kind) + str(id.tenancy.partition) + str(id.tenancy.namespace) + str(id.name) + str(id.uid);
}

function statusEntryBytes(s: StatusEntry): number {
  let n = 5 + str(s.observedGeneration) + str(s.updatedAt) + 5;
  for (const c of s.conditions) n += 5 + str(c.type) + str(c.state) + str(c.reason) + str(c.message);
  return n;
}

/** The deterministic size of a stored resource, in bytes (see the module comment). */
export function resourceBytes(r: Resource): number {
  let n = RESOURCE_OVERHEAD_BYTES + idBytes(r.id) + (r.owner === null ? 1 : idBytes(r.owner)) + 9 + str(r.generation);
  n += 5;
  for (const [k, v] of Object.entries(r.metadata)) n += str(k) + str(v);
  n += 5;
  for (const f of r.finalizers) n += str(f);
  n += r.deletionTimestamp === null ? 1 : str(r.deletionTimestamp);
  n += jsonBytes(r.data);
  n += 5;
  for (const [k, s] of Object.entries(r.status)) n += str(k) + statusEntryBytes(s);
  // Attached to a lease (only then: the sizes of resources without one are unchanged).
  if (r.lease !== undefined) n += str(r.lease);
  return n;
}
