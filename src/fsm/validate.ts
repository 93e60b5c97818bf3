import type { Revision } from '../base/index.js';
import type { Condition, JsonValue, ResourceId, StatusEntry, Tenancy, TypeRef } from '../store/index.js';
import { MAX_LEASE_TTL_SECONDS, leaseIdProblem, type DeleteCommand, type LeaseGrantCommand, type LeaseRevokeCommand, type NameRef, type PutCommand, type TxnCommand, type TxnCompare, type TxnOp, type WriteCommand, type WriteStatusCommand } from './commands.js';

/**
 * Structural checks of decoded command bodies. The API layer validated the content before
 * proposing; this guards against a malformed entry (a bug or a foreign writer) so that apply
 * refuses it deterministically instead of corrupting the store. Returns a reason on failure.
 */
type Checked =
  | { readonly kind: 'write'; readonly cmd: WriteCommand }
  | { readonly kind: 'put'; readonly cmd: PutCommand }
  | { readonly kind: 'delete'; readonly cmd: DeleteCommand }
  | { readonly kind: 'status'; readonly cmd: WriteStatusCommand }
  | { readonly kind: 'txn'; readonly cmd: TxnCommand }
  | { readonly kind: 'lease-grant'; readonly cmd: LeaseGrantCommand }
  | { readonly kind: 'lease-revoke'; readonly cmd: LeaseRevokeCommand };

class Invalid extends Error {}

function rec(v: unknown, what: string): Record<string, unknown> {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new Invalid(`${what} must be an object`);
  return v as Record<string, unknown>;
}

function str(v: unknown, what: string): string {
  if (typeof v !== 'string') throw new Invalid(`${what} must be a string`);
  return v;
}

function optStr(v: unknown, what: string): string | undefined {
  return v === undefined || v === null ? undefined : str(v, what);
}

function optVersion(v: unknown): Revision | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) throw new Invalid('expectedVersion must be a non-negative integer');
  return v as Revision;
}

function typeRef(v: unknown): TypeRef {
  const o = rec(v, 'type');
  return { group: str(o['group'], 'type.group'), groupVersion: str(o['groupVersion'], 'type.groupVersion'), kind: str(o['kind'], 'type.kind') };
}

function tenancy(v: unknown): Tenancy {
  const o = rec(v, 'tenancy');
  return { partition: str(o['partition'], 'tenancy.partition'), namespace: str(o['namespace'], 'tenancy.namespace') };
}

function nameRef(v: unknown): NameRef {
  const o = rec(v, 'id');
  const uid = optStr(o['uid'], 'id.uid');
  const out: { type: TypeRef; tenancy: Tenancy; name: string; uid?: string } = { type: typeRef(o['type']), tenancy: tenancy(o['tenancy']), name: str(o['name'], 'id.name') };
  if (uid !== undefined) out.uid = uid;
  return out;
}

function resourceId(v: unknown): ResourceId {
  const o = rec(v, 'owner');
  return { type: typeRef(o['type']), tenancy: tenancy(o['tenancy']), name: str(o['name'], 'owner.name'), uid: str(o['uid'], 'owner.uid') };
}

/**
 * The command's data, checked. When it is made only of plain objects, arrays and JSON
 * primitives (every body the API layer builds), it is checked in place and returned as it is:
 * the store makes its own canonical, frozen copy at apply (store/json.ts), so a copy here only
 * cost time. Anything else (a msgpack binary or timestamp a foreign writer put in the body)
 * takes `jsonCopy`, as every body did before, so the verdict and the stored value are the same
 * as before for every entry: apply stays deterministic across versions.
 */
function json(v: unknown): JsonValue {
  return plainJson(v, 0) ? (v as JsonValue) : jsonCopy(v);
}

/** Whether `v` is plain JSON; throws the same `Invalid` as `jsonCopy` would for depth and non-finite numbers. */
function plainJson(v: unknown, depth: number): boolean {
  if (depth > 100) throw new Invalid('data is nested too deeply');
  if (v === null || typeof v === 'boolean' || typeof v === 'string') return true;
  if (typeof v === 'number') {
    if (!Number.isFinite(v)) throw new Invalid('data contains a non-finite number');
    return true;
  }
  if (typeof v !== 'object') return false;
  if (Array.isArray(v)) {
    for (let i = 0; i < v.length; i++) if (!(i in v) || !plainJson(v[i], depth + 1)) return false;
    return true;
  }
  if (Object.getPrototypeOf(v) !== Object.prototype) return false;
  const o = v as Record<string, unknown>;
  for (const k in o) if (!Object.prototype.hasOwnProperty.call(o, k) || !plainJson(o[k], depth + 1)) return false;
  return true;
}

function jsonCopy(v: unknown, depth = 0): JsonValue {
  if (depth > 100) throw new Invalid('data is nested too deeply');
  if (v === null || typeof v === 'boolean' || typeof v === 'string') return v;
  if (typeof v === 'number') {
    if (!Number.isFinite(v)) throw new Invalid('data contains a non-finite number');
    return v;
  }
  if (Array.isArray(v)) return v.map((x) => jsonCopy(x, depth + 1));
  const o = rec(v, 'data');
  const out: Record<string, JsonValue> = {};
  for (const k of Object.keys(o)) out[k] = jsonCopy(o[k], depth + 1);
  return out;
}

function stringMap(v: unknown, what: string): Record<string, string> {
  const o = rec(v, what);
  const out: Record<string, string> = {};
  for (const k of Object.keys(o)) out[k] = str(o[k], `${what}.${k}`);
  return out;
}

function strings(v: unknown, what: string): string[] {
  if (!Array.isArray(v)) throw new Invalid(`${what} must be an array`);
  return v.map((x, i) => str(x, `${what}[${i}]`));
}

function conditions(v: unknown): Condition[] {
  if (!Array.isArray(v)) throw new Invalid('conditions must be an array');
  return v.map((c, i) => {
    const o = rec(c, `conditions[${i}]`);
    const state = o['state'];
    if (state !== 'TRUE' && state !== 'FALSE' && state !== 'UNKNOWN') throw new Invalid(`conditions[${i}].state is invalid`);
    return { type: str(o['type'], 'type'), state, reason: str(o['reason'], 'reason'), message: str(o['message'], 'message') };
  });
}

function statusMap(v: unknown): Record<string, StatusEntry> {
  const o = rec(v, 'status');
  const out: Record<string, StatusEntry> = {};
  for (const k of Object.keys(o)) {
    const s = rec(o[k], `status.${k}`);
    out[k] = { observedGeneration: str(s['observedGeneration'], 'observedGeneration'), conditions: conditions(s['conditions']), updatedAt: str(s['updatedAt'], 'updatedAt') };
  }
  return out;
}

function optQuota(v: unknown): number | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v <= 0) throw new Invalid('quotaBytes must be a positive integer');
  return v;
}

/** The header fields, in the order a command's keys always had; the body's fields are added to the same object. */
type Building = { -readonly [K in keyof WriteCommand | keyof DeleteCommand | keyof WriteStatusCommand | keyof LeaseGrantCommand | keyof LeaseRevokeCommand]?: unknown };

// Objects are built by assignment, not spreads of conditional objects (each spread allocated
// an object and copied it: most of this file's time at apply).
function header(o: Record<string, unknown>): Building {
  const requestId = optStr(o['requestId'], 'requestId');
  const quotaBytes = optQuota(o['quotaBytes']);
  const leaseMaxAttached = o['leaseMaxAttached'];
  if (leaseMaxAttached !== undefined && (typeof leaseMaxAttached !== 'number' || !Number.isSafeInteger(leaseMaxAttached) || leaseMaxAttached < 1)) throw new Invalid('leaseMaxAttached must be a positive integer');
  const out: Building = {};
  if (requestId !== undefined) out.requestId = requestId;
  out.time = str(o['time'], 'time');
  out.uid = str(o['uid'], 'uid');
  out.generation = str(o['generation'], 'generation');
  if (quotaBytes !== undefined) out.quotaBytes = quotaBytes;
  if (leaseMaxAttached !== undefined) out.leaseMaxAttached = leaseMaxAttached;
  return out;
}

function guard(f: () => Checked): Checked | string {
  try {
    return f();
  } catch (e) {
    if (e instanceof Invalid) return e.message;
    throw e;
  }
}

export function validateWrite(body: unknown): Checked | string {
  return guard(() => {
    const o = rec(body, 'write command');
    const expectedVersion = optVersion(o['expectedVersion']);
    const cmd = header(o);
    cmd.id = nameRef(o['id']);
    cmd.data = json(o['data']);
    if (o['owner'] === null) cmd.owner = null;
    else if (o['owner'] !== undefined) cmd.owner = resourceId(o['owner']);
    if (o['metadata'] !== undefined) cmd.metadata = stringMap(o['metadata'], 'metadata');
    if (o['finalizers'] !== undefined) cmd.finalizers = strings(o['finalizers'], 'finalizers');
    if (o['status'] !== undefined) cmd.status = statusMap(o['status']);
    if (expectedVersion !== undefined) cmd.expectedVersion = expectedVersion;
    if (o['cascadeAllowed'] !== undefined) cmd.cascadeAllowed = strings(o['cascadeAllowed'], 'cascadeAllowed');
    if (o['lease'] !== undefined && o['lease'] !== null) {
      const lease = str(o['lease'], 'lease');
      const problem = lease === '' ? undefined : leaseIdProblem(lease);
      if (problem !== undefined) throw new Invalid(problem);
      cmd.lease = lease;
    }
    return { kind: 'write', cmd: cmd as WriteCommand };
  });
}

/**
 * An unconditional write (0x14): the shape of a write command, and no `expectedVersion` (a
 * version belongs to a compare-and-swap, which is 0x10's).
 */
export function validatePut(body: unknown): Checked | string {
  return guard(() => {
    const o = rec(body, 'put command');
    if (o['expectedVersion'] !== undefined && o['expectedVersion'] !== null) throw new Invalid('an unconditional write (put) carries no expectedVersion');
    const w = validateWrite(o);
    if (typeof w === 'string') throw new Invalid(w);
    if (w.kind !== 'write') throw new Invalid('not a write command');
    return { kind: 'put', cmd: w.cmd };
  });
}

export function validateDelete(body: unknown): Checked | string {
  return guard(() => {
    const o = rec(body, 'delete command');
    const expectedVersion = optVersion(o['expectedVersion']);
    const cmd = header(o);
    cmd.id = nameRef(o['id']);
    if (expectedVersion !== undefined) cmd.expectedVersion = expectedVersion;
    if (o['cascadeAllowed'] !== undefined) cmd.cascadeAllowed = strings(o['cascadeAllowed'], 'cascadeAllowed');
    return { kind: 'delete', cmd: cmd as DeleteCommand };
  });
}

export function validateWriteStatus(body: unknown): Checked | string {
  return guard(() => {
    const o = rec(body, 'status command');
    const id = nameRef(o['id']);
    if (id.uid === undefined) throw new Invalid('a status write needs id.uid');
    const expectedVersion = optVersion(o['expectedVersion']);
    const cmd = header(o);
    cmd.id = id;
    cmd.key = str(o['key'], 'key');
    cmd.observedGeneration = str(o['observedGeneration'], 'observedGeneration');
    cmd.conditions = conditions(o['conditions']);
    if (expectedVersion !== undefined) cmd.expectedVersion = expectedVersion;
    return { kind: 'status', cmd: cmd as WriteStatusCommand };
  });
}

function keyId(v: unknown, what: string): TxnCompare['id'] {
  const o = rec(v, what);
  return { type: typeRef(o['type']), tenancy: tenancy(o['tenancy']), name: str(o['name'], `${what}.name`) };
}

function txnCompare(v: unknown, i: number): TxnCompare {
  const what = `compare[${i}]`;
  const o = rec(v, what);
  const id = keyId(o['id'], `${what}.id`);
  const target = o['target'];
  switch (target) {
    case 'version': {
      const version = optVersion(o['version']);
      if (version === undefined) throw new Invalid(`${what}: a version comparison needs a version`);
      return { target, id, version };
    }
    case 'uid':
      return { target, id, uid: str(o['uid'], `${what}.uid`) };
    case 'exists':
    case 'absent':
      return { target, id };
    default:
      throw new Invalid(`${what}.target must be version, exists, absent or uid`);
  }
}

/** One op of a branch: the body of the single command of its kind, without the header. */
function txnOp(v: unknown, what: string): TxnOp {
  const o = rec(v, what);
  const op = o['op'];
  // The single-command checks, given the header fields they need and then dropped.
  const withHeader = { ...o, time: '', uid: '', generation: '' };
  let c: Checked | string;
  switch (op) {
    case 'write':
      c = validateWrite(withHeader);
      break;
    case 'delete':
      c = validateDelete(withHeader);
      break;
    case 'status':
      c = validateWriteStatus(withHeader);
      break;
    default:
      throw new Invalid(`${what}.op must be write, delete or status`);
  }
  if (typeof c === 'string') throw new Invalid(`${what}: ${c}`);
  if (c.kind === 'txn' || 'requestId' in c.cmd || 'quotaBytes' in c.cmd || 'leaseMaxAttached' in c.cmd) throw new Invalid(`${what} carries header fields (requestId, quotaBytes, leaseMaxAttached): they belong to the transaction`);
  const { time: _t, uid: _u, generation: _g, ...body } = c.cmd;
  return { op, ...body } as TxnOp;
}

function txnOps(v: unknown, what: string): TxnOp[] {
  if (!Array.isArray(v)) throw new Invalid(`${what} must be an array`);
  return v.map((x, i) => txnOp(x, `${what}[${i}]`));
}

/**
 * A transaction (0x15): the header, `compare`, `then` and `else` (arrays, possibly empty).
 * Only the structure is checked here; limits on their length are the API layer's (they are
 * settings of the node that proposes), and a name given twice in one branch is refused when
 * the branch applies (so the verdict is part of the answer, the same on every replica).
 */
export function validateTxn(body: unknown): Checked | string {
  return guard(() => {
    const o = rec(body, 'txn command');
    const cmd = header(o) as Record<string, unknown>;
    const compare = o['compare'];
    if (!Array.isArray(compare)) throw new Invalid('compare must be an array');
    cmd['compare'] = compare.map((c, i) => txnCompare(c, i));
    cmd['then'] = txnOps(o['then'], 'then');
    cmd['else'] = txnOps(o['else'], 'else');
    for (const [branch, key] of [['then', 'thenUids'], ['else', 'elseUids']] as const) {
      const uids = o[key];
      if (uids === undefined) continue;
      const n = (cmd[branch] as unknown[]).length;
      if (!Array.isArray(uids) || uids.length !== n || !uids.every((u) => typeof u === 'string' && u !== '' && u.length <= 128)) {
        throw new Invalid(`${key} must be an array of ${n} non-empty strings, one per op of the ${branch} branch`);
      }
      cmd[key] = uids;
    }
    return { kind: 'txn', cmd: cmd as unknown as TxnCommand };
  });
}

function leaseId(v: unknown): string {
  const problem = leaseIdProblem(v);
  if (problem !== undefined) throw new Invalid(problem);
  return v as string;
}

/** A lease grant (0x16): the header, a lease id, a TTL of whole seconds within MAX_LEASE_TTL_SECONDS, and optionally the proposer's `maxLeases`. */
export function validateLeaseGrant(body: unknown): Checked | string {
  return guard(() => {
    const o = rec(body, 'lease grant command');
    const cmd = header(o);
    cmd.id = leaseId(o['id']);
    const ttl = o['ttlSeconds'];
    if (typeof ttl !== 'number' || !Number.isSafeInteger(ttl) || ttl < 1 || ttl > MAX_LEASE_TTL_SECONDS) throw new Invalid(`ttlSeconds must be an integer from 1 to ${MAX_LEASE_TTL_SECONDS}`);
    cmd.ttlSeconds = ttl;
    const max = o['maxLeases'];
    if (max !== undefined && max !== null) {
      if (typeof max !== 'number' || !Number.isSafeInteger(max) || max < 1) throw new Invalid('maxLeases must be a positive integer');
      cmd.maxLeases = max;
    }
    return { kind: 'lease-grant', cmd: cmd as LeaseGrantCommand };
  });
}

/** A lease revoke (0x17): the header, a lease id and a reason (`revoked` or `expired`); an expiry also carries the `grantRevision` it was decided for. */
export function validateLeaseRevoke(body: unknown): Checked | string {
  return guard(() => {
    const o = rec(body, 'lease revoke command');
    const cmd = header(o);
    cmd.id = leaseId(o['id']);
    const reason = o['reason'];
    if (reason !== 'revoked' && reason !== 'expired') throw new Invalid('reason must be revoked or expired');
    cmd.reason = reason;
    const grantRevision = o['grantRevision'];
    if (reason === 'expired') {
      // An expiry without the grant it was decided for could end a later grant of the same id.
      if (typeof grantRevision !== 'number' || !Number.isSafeInteger(grantRevision) || grantRevision < 1) throw new Invalid('an expiry needs grantRevision, a positive integer');
      cmd.grantRevision = grantRevision;
    } else if (grantRevision !== undefined && grantRevision !== null) throw new Invalid('grantRevision is only for an expiry');
    return { kind: 'lease-revoke', cmd: cmd as LeaseRevokeCommand };
  });
}
