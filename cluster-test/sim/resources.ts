/**
 * How the simulator's registers map onto the real state machine (`src/fsm` over `src/store`):
 * key `k3` is the resource `demo.v1.Artist` named `k3` in tenancy default/default, and its
 * value is `data.value` (absent resource = `null`, every register's initial value).
 *
 * Writes are envelopes as the API layer would propose them: everything non-deterministic
 * (time, uid, generation) is chosen by the proposer and travels in the command, and the
 * client's operation id is the command's `requestId`. An unconditional write is a ResourcePut
 * (0x14): the state machine runs the register type's hooks at apply (`registerWriteHooks`:
 * the real registry code, with a mutate hook that records the value it replaced, so a replica
 * that applied writes in another order would hold another state). A compare-and-swap on the
 * value is built by the client on top of the store's version CAS (`expectedVersion`, a
 * ResourceWrite, 0x10, whose hooks the API ran before proposing: none here).
 */
import {
  decodeBody,
  encodeEnvelope,
  envelopeType,
  CommandType,
  revision,
  type ApplyResult,
  type Fsm,
  type StoreReader,
  type Tenancy,
  type TypeRef,
  type PutCommand,
  type TxnCommand,
  type WriteCommand,
  type WriteHooks,
  TypeRegistry,
  registryWriteHooks,
} from './raft.js';
import { hashBytes, hashString } from './hash.js';
import { SimViolation } from './violation.js';

export const REGISTER_TYPE: TypeRef = { group: 'demo', groupVersion: 'v1', kind: 'Artist' };
export const REGISTER_TENANCY: Tenancy = { partition: 'default', namespace: 'default' };

/** What the proposer stamps on a command (deterministic: from the simulated clock and seed). */
export interface Stamp {
  /** ISO timestamp. */
  readonly time: string;
  readonly uid: string;
  readonly generation: string;
  /** The proposer's data quota (docs/security.md "Quotas"), when the run sets one (`--quota-bytes`). */
  readonly quotaBytes?: number;
}

export interface RegisterWrite {
  readonly requestId: string;
  readonly key: string;
  readonly value: string;
  /** The store version the write requires (version CAS); absent = unconditional. 0 = absent. */
  readonly expectedVersion?: number;
}

/**
 * The envelope for one register write: a ResourcePut (0x14) when unconditional, a
 * ResourceWrite (0x10) with the version CAS otherwise.
 */
export function encodeRegisterWrite(w: RegisterWrite, stamp: Stamp): Uint8Array {
  const put: PutCommand = {
    requestId: w.requestId,
    time: stamp.time,
    uid: stamp.uid,
    generation: stamp.generation,
    ...(stamp.quotaBytes !== undefined ? { quotaBytes: stamp.quotaBytes } : {}),
    id: { type: REGISTER_TYPE, tenancy: REGISTER_TENANCY, name: w.key },
    data: { value: w.value },
  };
  if (w.expectedVersion === undefined) return encodeEnvelope(CommandType.ResourcePut, put);
  const cmd: WriteCommand = { ...put, expectedVersion: revision(w.expectedVersion) };
  return encodeEnvelope(CommandType.ResourceWrite, cmd);
}

/**
 * A two-register transaction (envelope `Txn`, 0x15): if `key` is `when` (present or absent) at
 * the entry's position, write `value` to both `key` and `other` in one entry at one revision;
 * otherwise nothing (an empty else branch). The register type's hooks run for each write at
 * apply, as for an unconditional write. The client records it as two writes of one value (one
 * per key, each checked for linearizability), so a branch applied to one key and not the other,
 * or a refused transaction that changed either, is a violation of that key's history.
 */
export function encodePairTxn(requestId: string, key: string, other: string, when: 'exists' | 'absent', value: string, stamp: Stamp, uids: readonly [string, string]): Uint8Array {
  const id = (name: string): { type: TypeRef; tenancy: Tenancy; name: string } => ({ type: REGISTER_TYPE, tenancy: REGISTER_TENANCY, name });
  const cmd: TxnCommand = {
    requestId,
    time: stamp.time,
    uid: stamp.uid,
    generation: stamp.generation,
    ...(stamp.quotaBytes !== undefined ? { quotaBytes: stamp.quotaBytes } : {}),
    compare: [{ target: when, id: id(key) }],
    then: [
      { op: 'write', id: id(key), data: { value } },
      { op: 'write', id: id(other), data: { value } },
    ],
    else: [],
    thenUids: uids,
    elseUids: [],
  };
  return encodeEnvelope(CommandType.Txn, cmd);
}

/** How a client reads the apply result of its pair transaction: which branch applied, or refused. */
export function pairTxnVerdict(requestId: string, result: ApplyResult, noSpaceExpected = false): 'applied' | 'not-applied' | 'no-space' {
  if (result.ok) {
    if (result.kind !== 'txn') throw new SimViolation('exception', `pair transaction ${requestId} applied as a ${result.kind}`);
    if (result.succeeded && result.results.length !== 2) throw new SimViolation('exception', `pair transaction ${requestId} succeeded with ${result.results.length} op results, not 2`);
    if (!result.succeeded && result.results.length !== 0) throw new SimViolation('exception', `pair transaction ${requestId} failed its comparison but reports ${result.results.length} op results`);
    return result.succeeded ? 'applied' : 'not-applied';
  }
  if (result.error.code === 'NO_SPACE' && noSpaceExpected) return 'no-space';
  throw new SimViolation('exception', `pair transaction ${requestId} was refused with ${result.error.code}: ${result.error.message}`);
}

/**
 * The registers' type hooks, as the state machine runs them for an unconditional write: the
 * real registry (`registryWriteHooks`) with the register type, whose schema wants a string
 * `value`, and whose mutate hook sets `replaced` to the value the write replaces (null when
 * absent): state that depends on the order writes applied in, so the simulator's replica state
 * checks see any replica that ran the hooks against another state.
 */
export function registerWriteHooks(): WriteHooks {
  const registry = new TypeRegistry();
  registry.register({
    ...REGISTER_TYPE,
    scope: 'namespace',
    schema: {
      type: 'object',
      properties: { value: { type: 'string', minLength: 1 }, replaced: { type: ['string', 'null'] } },
      required: ['value'],
      additionalProperties: false,
    },
    mutate: (res, current) => {
      const before = current?.data;
      const value = typeof before === 'object' && before !== null && !Array.isArray(before) ? (before as Record<string, unknown>)['value'] : undefined;
      (res.data as Record<string, unknown>)['replaced'] = typeof value === 'string' ? value : null;
    },
  });
  return registryWriteHooks(registry);
}

/**
 * The `requestId` of a committed entry's command, or undefined for entries that carry none
 * (the core's no-op and configuration entries). Decoded here rather than matched by log
 * position, so the exactly-once check sees the id of every command at every index.
 */
export function commandRequestId(data: Uint8Array): string | undefined {
  const type = envelopeType(data);
  if (type !== CommandType.ResourceWrite && type !== CommandType.ResourcePut && type !== CommandType.ResourceDelete && type !== CommandType.ResourceStatus && type !== CommandType.Txn) return undefined;
  const body = decodeBody(data);
  const id = typeof body === 'object' && body !== null ? (body as Record<string, unknown>)['requestId'] : undefined;
  return typeof id === 'string' ? id : undefined;
}

/** A register as a linearizable read sees it: its value and the store version it had. */
export interface RegisterState {
  readonly value: string | null;
  /** The resource's version (the revision of its last change); 0 when absent. */
  readonly version: number;
}

export function readRegister(store: StoreReader, key: string): RegisterState {
  const r = store.get({ group: REGISTER_TYPE.group, kind: REGISTER_TYPE.kind, tenancy: REGISTER_TENANCY, name: key });
  if (r === undefined) return { value: null, version: 0 };
  const data = r.data;
  const value = typeof data === 'object' && data !== null && !Array.isArray(data) ? (data as Record<string, unknown>)['value'] : undefined;
  if (typeof value !== 'string') {
    throw new SimViolation('exception', `resource ${key} holds data ${JSON.stringify(data)}, which no simulated client wrote`);
  }
  return { value, version: r.version as number };
}

/** How a client reads an apply result of one of its register writes. */
export type WriteVerdict = 'ok' | 'cas-failed' | 'no-space';

/**
 * `ok` when the write took effect, `cas-failed` when the version CAS refused it (no effect),
 * `no-space` when the run stamps a quota and the state machine refused the write for space.
 * Any other error means the simulator proposed something the store refuses: a simulator bug,
 * reported rather than counted as a failed operation.
 */
export function writeVerdict(requestId: string, result: ApplyResult, noSpaceExpected = false): WriteVerdict {
  if (result.ok) {
    if (result.kind !== 'write') throw new SimViolation('exception', `register write ${requestId} applied as a ${result.kind}`);
    return 'ok';
  }
  if (result.error.code === 'CAS_FAILED') return 'cas-failed';
  // Only when the run stamps a quota: the state machine refused the write for space (no effect).
  if (result.error.code === 'NO_SPACE' && noSpaceExpected) return 'no-space';
  throw new SimViolation('exception', `register write ${requestId} was refused with ${result.error.code}: ${result.error.message}`);
}

/** The FSM's snapshot, as one byte array (what `compact` stores and a follower installs). */
export function fsmSnapshotBytes(fsm: Fsm): Uint8Array {
  const parts = [...fsm.snapshot().chunks()];
  let n = 0;
  for (const p of parts) n += p.length;
  const out = new Uint8Array(n);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** A digest of the whole FSM state (store and de-duplication window), byte for byte. */
export function fsmStateDigest(fsm: Fsm): string {
  return hashBytes(fsmSnapshotBytes(fsm));
}

/**
 * A digest of an apply result, compared across nodes at every index. Canonical JSON (sorted
 * keys), so two equal results built in a different key order (say, a resource decoded from a
 * snapshot and one created in memory) digest alike.
 */
export function resultDigest(result: ApplyResult): string {
  return hashString(canonicalJson(result));
}

function canonicalJson(v: unknown): string {
  if (v === null || typeof v !== 'object') return JSON.stringify(v) ?? 'undefined';
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(',')}]`;
  const o = v as Record<string, unknown>;
  return `{${Object.keys(o)
    .filter((k) => o[k] !== undefined)
    .sort()
    .map((k) => `${JSON.stringify(k)}:${canonicalJson(o[k])}`)
    .join(',')}}`;
}
