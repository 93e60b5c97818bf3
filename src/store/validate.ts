import type { Revision } from '../base/index.js';
import { InvalidInput, canonicalJson, isPlainObject, sortedKeys } from './json.js';
import { SEP } from './keys.js';
import type { Condition, JsonValue, ResourceId, StatusEntry, Tenancy, TypeRef } from './types.js';

/**
 * Checks and canonical, frozen copies of command inputs. The API layer has validated names,
 * tenancy and schemas before proposing and the FSM has checked the decoded shape; these checks
 * are the store's own floor: whatever reaches an index or a stored object is well-formed, and a
 * malformed input is refused the same way on every replica (InvalidInput -> INVALID_ARGUMENT)
 * instead of corrupting state or crashing.
 */

const EMPTY_STRINGS: readonly string[] = Object.freeze([]);
const EMPTY_MAP: Readonly<Record<string, string>> = Object.freeze({});
const EMPTY_STATUS: Readonly<Record<string, StatusEntry>> = Object.freeze({});
export { EMPTY_MAP, EMPTY_STATUS, EMPTY_STRINGS };

function str(v: unknown, what: string): string {
  if (typeof v !== 'string') throw new InvalidInput(`${what} must be a string`);
  return v;
}

/** A string that is part of an index key: non-empty unless `mayBeEmpty`, and without NUL. */
function keyPart(v: unknown, what: string, mayBeEmpty = false): string {
  const s = str(v, what);
  if (!mayBeEmpty && s === '') throw new InvalidInput(`${what} must not be empty`);
  if (s.includes(SEP)) throw new InvalidInput(`${what} must not contain a NUL character`);
  return s;
}

function obj(v: unknown, what: string): Record<string, unknown> {
  if (!isPlainObject(v)) throw new InvalidInput(`${what} must be an object`);
  return v;
}

/**
 * Interned type and tenancy objects. A million resources of one type in one namespace would
 * otherwise each hold their own frozen `{group, groupVersion, kind}` and `{partition, namespace}`
 * objects and five strings (about 190 bytes of heap per resource, docs/performance.md "Memory
 * per resource"); interned, they share one of each. Only memory: an interned object is equal in
 * every field to the one it replaces, and all are frozen. Each table is bounded: past
 * `INTERN_LIMIT` distinct values new ones are returned uninterned (still correct), so input that
 * names ever new types or namespaces cannot grow it without bound.
 */
export const INTERN_LIMIT = 65_536;
const internedTypes = new Map<string, TypeRef>();
const internedTenancies = new Map<string, Tenancy>();

function intern<T>(table: Map<string, T>, key: string, make: () => T): T {
  const found = table.get(key);
  if (found !== undefined) return found;
  const made = make();
  if (table.size < INTERN_LIMIT) table.set(key, made);
  return made;
}

/** How many type and tenancy values are interned (tests). */
export function internedCounts(): { types: number; tenancies: number } {
  return { types: internedTypes.size, tenancies: internedTenancies.size };
}

// The last value each table answered: a snapshot holds resources in key order, so runs of one
// type and tenancy follow each other, and a restore mostly skips the key and the lookup.
let lastType: TypeRef | undefined;
let lastTenancy: Tenancy | undefined;

export function checkType(v: unknown, what: string): TypeRef {
  const o = obj(v, what);
  const group = keyPart(o['group'], `${what}.group`);
  const groupVersion = keyPart(o['groupVersion'], `${what}.groupVersion`);
  const kind = keyPart(o['kind'], `${what}.kind`);
  const last = lastType;
  if (last !== undefined && last.kind === kind && last.group === group && last.groupVersion === groupVersion) return last;
  // SEP (NUL) cannot occur in a key part, so the joined key is unambiguous.
  const t = intern(internedTypes, group + SEP + groupVersion + SEP + kind, () => Object.freeze({ group, groupVersion, kind }));
  lastType = t;
  return t;
}

export function checkTenancy(v: unknown, what: string): Tenancy {
  const o = obj(v, what);
  const partition = keyPart(o['partition'], `${what}.partition`, true);
  const namespace = keyPart(o['namespace'], `${what}.namespace`, true);
  const last = lastTenancy;
  if (last !== undefined && last.namespace === namespace && last.partition === partition) return last;
  const t = intern(internedTenancies, partition + SEP + namespace, () => Object.freeze({ partition, namespace }));
  lastTenancy = t;
  return t;
}

export interface CheckedRef {
  readonly type: TypeRef;
  readonly tenancy: Tenancy;
  readonly name: string;
  /** '' when the caller named no uid. */
  readonly uid: string;
}

export function checkRef(v: unknown, what: string): CheckedRef {
  const o = obj(v, what);
  const uid = o['uid'];
  return {
    type: checkType(o['type'], `${what}.type`),
    tenancy: checkTenancy(o['tenancy'], `${what}.tenancy`),
    name: keyPart(o['name'], `${what}.name`),
    uid: uid === undefined ? '' : keyPart(uid, `${what}.uid`, true),
  };
}

export function checkResourceId(v: unknown, what: string): ResourceId {
  const r = checkRef(v, what);
  if (r.uid === '') throw new InvalidInput(`${what}.uid must be set`);
  return Object.freeze({ type: r.type, tenancy: r.tenancy, name: r.name, uid: r.uid });
}

export function checkMetadata(v: unknown): Readonly<Record<string, string>> {
  const o = obj(v, 'metadata');
  const keys = sortedKeys(o, 'metadata');
  if (keys.length === 0) return EMPTY_MAP;
  const out: Record<string, string> = {};
  for (const k of keys) out[k] = str(o[k], `metadata.${k}`);
  return Object.freeze(out);
}

/** Finalizers are a set kept in the order given: non-empty strings, each at most once. */
export function checkFinalizers(v: unknown): readonly string[] {
  if (!Array.isArray(v)) throw new InvalidInput('finalizers must be an array');
  if (v.length === 0) return EMPTY_STRINGS;
  const seen = new Set<string>();
  for (let i = 0; i < v.length; i++) {
    const f = str(v[i], `finalizers[${i}]`);
    if (f === '') throw new InvalidInput(`finalizers[${i}] must not be empty`);
    if (seen.has(f)) throw new InvalidInput(`finalizers list ${JSON.stringify(f)} more than once`);
    seen.add(f);
  }
  return Object.freeze([...seen]);
}

export function checkConditions(v: unknown, what: string): readonly Condition[] {
  if (!Array.isArray(v)) throw new InvalidInput(`${what} must be an array`);
  return Object.freeze(
    v.map((c: unknown, i): Condition => {
      const o = obj(c, `${what}[${i}]`);
      const state = o['state'];
      if (state !== 'TRUE' && state !== 'FALSE' && state !== 'UNKNOWN') {
        throw new InvalidInput(`${what}[${i}].state must be TRUE, FALSE or UNKNOWN`);
      }
      return Object.freeze({
        type: str(o['type'], `${what}[${i}].type`),
        state,
        reason: str(o['reason'], `${what}[${i}].reason`),
        message: str(o['message'], `${what}[${i}].message`),
      });
    }),
  );
}

export function makeStatusEntry(observedGeneration: string, conditions: readonly Condition[], updatedAt: string): StatusEntry {
  return Object.freeze({ observedGeneration, conditions, updatedAt });
}

export function checkStatusMap(v: unknown): Readonly<Record<string, StatusEntry>> {
  const o = obj(v, 'status');
  const keys = sortedKeys(o, 'status');
  if (keys.length === 0) return EMPTY_STATUS;
  const out: Record<string, StatusEntry> = {};
  for (const k of keys) {
    const e = obj(o[k], `status.${k}`);
    out[k] = makeStatusEntry(
      str(e['observedGeneration'], `status.${k}.observedGeneration`),
      checkConditions(e['conditions'], `status.${k}.conditions`),
      str(e['updatedAt'], `status.${k}.updatedAt`),
    );
  }
  return Object.freeze(out);
}

export function checkStatusKey(v: unknown): string {
  const k = str(v, 'status key');
  if (k === '') throw new InvalidInput('status key must not be empty');
  if (k === '__proto__') throw new InvalidInput('status key "__proto__" cannot be stored');
  return k;
}

export function checkData(v: unknown): JsonValue {
  return canonicalJson(v, 'data');
}

export function checkExpectedVersion(v: unknown): Revision | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) {
    throw new InvalidInput(`expectedVersion must be a non-negative integer, got ${String(v)}`);
  }
  return v as Revision;
}

/** Status maps as JSON, for deep comparison with `jsonEqual`. */
export function statusAsJson(s: Readonly<Record<string, StatusEntry>>): JsonValue {
  return s as unknown as JsonValue;
}
