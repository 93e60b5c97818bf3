import type { JsonValue } from './types.js';

/**
 * JSON values as the store keeps them: copied (a caller's later mutation cannot reach the
 * store), deeply frozen (snapshots share them), and canonical (object keys inserted in sorted
 * order, -0 stored as 0), so equal documents serialize to identical bytes on every replica.
 */

/** A user-caused problem with an input; converted to INVALID_ARGUMENT at the command boundary. */
export class InvalidInput extends Error {
  override readonly name = 'InvalidInput';
}

/**
 * How deeply `data` may nest (the root is depth 0). The FSM refuses deeper bodies too; the
 * bound keeps apply from overflowing the stack on every replica at once.
 */
export const MAX_JSON_DEPTH = 100;

/**
 * msgpackr decodes a map key `__proto__` as `__proto_`, so such a key could not survive the log
 * or a snapshot unchanged. It is refused rather than silently renamed.
 */
const FORBIDDEN_KEY = '__proto__';

export function isPlainObject(v: unknown): v is Record<string, unknown> {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return false;
  const proto: unknown = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
}

/** Sorted own keys, refusing the one key the codec cannot carry. */
export function sortedKeys(o: Record<string, unknown>, what: string): string[] {
  const keys = Object.keys(o);
  if (keys.includes(FORBIDDEN_KEY)) throw new InvalidInput(`${what} has the key "__proto__", which cannot be stored`);
  return keys.sort();
}

/** A canonical, frozen copy of `v`, or InvalidInput naming `what` if it is not JSON. */
export function canonicalJson(v: unknown, what: string, depth = 0): JsonValue {
  if (depth > MAX_JSON_DEPTH) throw new InvalidInput(`${what} nests deeper than ${MAX_JSON_DEPTH} levels`);
  switch (typeof v) {
    case 'string':
    case 'boolean':
      return v;
    case 'number':
      if (!Number.isFinite(v)) throw new InvalidInput(`${what} holds the number ${String(v)}, which JSON cannot represent`);
      return v === 0 ? 0 : v; // -0 becomes 0
    case 'object': {
      if (v === null) return null;
      if (Array.isArray(v)) {
        const out: JsonValue[] = new Array<JsonValue>(v.length);
        for (let i = 0; i < v.length; i++) out[i] = canonicalJson(v[i], `${what}[${i}]`, depth + 1);
        return Object.freeze(out);
      }
      if (!isPlainObject(v)) throw new InvalidInput(`${what} is not a JSON value (a ${describe(v)})`);
      const out: Record<string, JsonValue> = {};
      for (const k of sortedKeys(v, what)) out[k] = canonicalJson(v[k], `${what}.${k}`, depth + 1);
      return Object.freeze(out);
    }
    default:
      throw new InvalidInput(`${what} is not a JSON value (a ${typeof v})`);
  }
}

/**
 * `canonicalJson` for a value the caller owns and hands over (one just decoded from a snapshot,
 * which nothing else references): the same checks and the same result, but objects and arrays
 * already in canonical form are frozen in place instead of copied, which halves the allocation
 * of a restore. An object is adopted when its own keys already enumerate in sorted order (a
 * snapshot writes canonical objects, so they decode that way); otherwise it is copied as
 * `canonicalJson` would. A -0 inside is rewritten to 0 before freezing.
 */
export function adoptJson(v: unknown, what: string, depth = 0): JsonValue {
  if (depth > MAX_JSON_DEPTH) throw new InvalidInput(`${what} nests deeper than ${MAX_JSON_DEPTH} levels`);
  if (typeof v !== 'object' || v === null) return canonicalJson(v, what, depth);
  if (Object.isFrozen(v)) return canonicalJson(v, what, depth); // not ours to adopt
  if (Array.isArray(v)) {
    for (let i = 0; i < v.length; i++) v[i] = adoptJson(v[i], `${what}[${i}]`, depth + 1);
    return Object.freeze(v) as JsonValue;
  }
  if (!isPlainObject(v)) throw new InvalidInput(`${what} is not a JSON value (a ${describe(v)})`);
  const keys = Object.keys(v);
  for (let i = 1; i < keys.length; i++) {
    if (!((keys[i - 1] as string) < (keys[i] as string))) return canonicalJson(v, what, depth);
  }
  if (keys.includes(FORBIDDEN_KEY)) throw new InvalidInput(`${what} has the key "__proto__", which cannot be stored`);
  for (const k of keys) v[k] = adoptJson(v[k], `${what}.${k}`, depth + 1);
  return Object.freeze(v) as JsonValue;
}

function describe(v: object): string {
  const ctor: unknown = (v as { constructor?: unknown }).constructor;
  return typeof ctor === 'function' && ctor.name !== '' ? ctor.name : 'non-plain object';
}

/**
 * Deep structural equality of JSON values: arrays by position, objects by key set regardless
 * of key order.
 */
export function jsonEqual(a: JsonValue, b: JsonValue): boolean {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  const aArray = Array.isArray(a);
  if (aArray !== Array.isArray(b)) return false;
  if (aArray) {
    const x = a as readonly JsonValue[];
    const y = b as readonly JsonValue[];
    if (x.length !== y.length) return false;
    for (let i = 0; i < x.length; i++) if (!jsonEqual(x[i] as JsonValue, y[i] as JsonValue)) return false;
    return true;
  }
  const x = a as { readonly [k: string]: JsonValue };
  const y = b as { readonly [k: string]: JsonValue };
  const keys = Object.keys(x);
  if (keys.length !== Object.keys(y).length) return false;
  for (const k of keys) {
    if (!Object.hasOwn(y, k)) return false;
    if (!jsonEqual(x[k] as JsonValue, y[k] as JsonValue)) return false;
  }
  return true;
}
