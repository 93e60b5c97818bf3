import { Packr } from 'msgpackr';
import { AssertionError } from '../base/index.js';

/**
 * Log entry envelopes: byte 0 is the command type, the rest is the msgpack body
 * (ARCHITECTURE.md). The table is numbered append-only: a number is never reused, even after
 * its command is retired. Types with the high bit (0x80) set may be skipped by a node that
 * does not know them (the sender promises they only add optional behaviour); any other
 * unknown type stops the node rather than let it diverge silently.
 *
 * | type | name            | owner | body                                   |
 * |------|-----------------|-------|----------------------------------------|
 * | 0x01 | Noop            | raft  | nil                                    |
 * | 0x02 | Config          | raft  | { change, config }                     |
 * | 0x10 | ResourceWrite   | fsm   | CommandHeader & WriteBody              |
 * | 0x11 | ResourceDelete  | fsm   | CommandHeader & DeleteBody             |
 * | 0x12 | ResourceStatus  | fsm   | CommandHeader & WriteStatusBody        |
 * | 0x13 | Restore         | fsm   | CommandHeader & { snapshot: bin }      |
 * | 0x14 | ResourcePut     | fsm   | CommandHeader & WriteBody, no version  |
 * | 0x15 | Txn             | fsm   | CommandHeader & { compare, then, else } |
 * | 0x16 | LeaseGrant      | fsm   | CommandHeader & { id, ttlSeconds, maxLeases? } |
 * | 0x17 | LeaseRevoke     | fsm   | CommandHeader & { id, reason, grantRevision? } |
 *
 * 0x14 is an unconditional write whose type hooks run at apply (`PutCommand`, `WriteHooks`).
 * It is a new type rather than a flag on 0x10 so that an older node, which would apply it
 * without the hooks and diverge, stops with "unknown command type" instead; and every 0x10
 * entry already in a log keeps applying exactly as before (no hooks at apply).
 *
 * 0x15 is a transaction (`TxnCommand`): comparisons, then one of two branches of writes, status
 * writes and deletes, applied all or nothing at one revision. Not ignorable: an older node
 * that skipped it would diverge, so it stops on it instead.
 *
 * 0x16 and 0x17 are leases (`LeaseGrantCommand`, `LeaseRevokeCommand`; docs/api.md "Leases").
 * 0x16 adds a lease (its id chosen by the client or by the leader, carried in the entry) to
 * the replicated lease table; 0x17 removes one, deleting every resource attached to it at that
 * log position in the same entry, at one revision (`reason`: `revoked` by a client, or `expired`
 * by the leader's lease clock: the state machine never reads a clock). Keep-alives are not
 * log entries. Not ignorable: an older node that skipped them would diverge (the resources of
 * a revoked lease would live on there), so it stops on them instead.
 *
 * `CommandHeader` (commands.ts) includes the optional `quotaBytes` of writes, deletes and
 * status writes (docs/security.md "Quotas"); a body without it is an older entry: no quota.
 */
export const CommandType = {
  Noop: 0x01,
  Config: 0x02,
  ResourceWrite: 0x10,
  ResourceDelete: 0x11,
  ResourceStatus: 0x12,
  /** Replaces the whole store with a saved snapshot (an operator's restore). */
  Restore: 0x13,
  /** An unconditional write: the type's hooks run at apply, against the state at that position. */
  ResourcePut: 0x14,
  /** A transaction: comparisons, then one branch of ops, all or nothing, at one revision (`TxnCommand`). */
  Txn: 0x15,
  /** Grants a lease: adds it to the replicated lease table (`LeaseGrantCommand`). */
  LeaseGrant: 0x16,
  /** Revokes (or expires) a lease and deletes every resource attached to it, at one revision (`LeaseRevokeCommand`). */
  LeaseRevoke: 0x17,
} as const;
export type CommandType = (typeof CommandType)[keyof typeof CommandType];

export const IGNORABLE_FLAG = 0x80;

// variableMapSize: objects with more than 65,535 keys must still encode.
const packr = new Packr({ useRecords: false, mapsAsObjects: true, moreTypes: false, variableMapSize: true });

/**
 * msgpackr packs into one module-level buffer shared by every Packr in the process, grows it to
 * fit the largest message packed so far (up to 4x) and never shrinks it: one snapshot header of
 * 6 MB left 10-20 MiB behind on every node (docs/performance.md "Where a node's memory goes").
 * After a message this large, the caller gets a copy and msgpackr a fresh small buffer, so the
 * large one is garbage once the caller drops its copy.
 */
export const PACK_BUFFER_RESET_BYTES = 1024 * 1024;

function releaseLargePackBuffer(packedLength: number): void {
  if (packedLength >= PACK_BUFFER_RESET_BYTES) packr.useBuffer(Buffer.allocUnsafeSlow(8192));
}

function packed(body: unknown): Uint8Array {
  const out = packr.pack(body);
  if (out.length < PACK_BUFFER_RESET_BYTES) return out;
  const copy = new Uint8Array(out);
  releaseLargePackBuffer(out.length);
  return copy;
}

export function encodeEnvelope(type: number, body: unknown): Uint8Array {
  if (!Number.isInteger(type) || type < 0 || type > 0xff) throw new AssertionError(`envelope type ${type} is not a byte`);
  const body8 = packr.pack(body);
  const out = new Uint8Array(body8.length + 1);
  out[0] = type;
  out.set(body8, 1);
  releaseLargePackBuffer(body8.length);
  return out;
}

export function envelopeType(data: Uint8Array): number {
  const t = data[0];
  if (t === undefined) throw new AssertionError('empty log entry: an envelope needs a type byte');
  return t;
}

export function decodeBody(data: Uint8Array): unknown {
  return packr.unpack(data.subarray(1));
}

export function packBody(v: unknown): Uint8Array {
  return packed(v);
}

export function unpackBody(b: Uint8Array): unknown {
  return packr.unpack(b);
}
