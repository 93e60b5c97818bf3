import { CairnError, ErrorCode } from '../base/index.js';
import type { DeleteCommand, LeaseGrantCommand, LeaseRevokeCommand, PutCommand, TxnCommand, WriteCommand, WriteStatusCommand } from './commands.js';
import { CommandType, decodeBody } from './envelope.js';
import { readSnapshotFrames } from './snapshot-format.js';
import { validateDelete, validateLeaseGrant, validateLeaseRevoke, validatePut, validateTxn, validateWrite, validateWriteStatus } from './validate.js';

/** An envelope decoded as the FSM will decode it when it applies the entry. */
export type DecodedCommand =
  | { readonly type: typeof CommandType.ResourceWrite; readonly kind: 'write'; readonly cmd: WriteCommand }
  | { readonly type: typeof CommandType.ResourcePut; readonly kind: 'put'; readonly cmd: PutCommand }
  | { readonly type: typeof CommandType.ResourceDelete; readonly kind: 'delete'; readonly cmd: DeleteCommand }
  | { readonly type: typeof CommandType.ResourceStatus; readonly kind: 'status'; readonly cmd: WriteStatusCommand }
  | { readonly type: typeof CommandType.Txn; readonly kind: 'txn'; readonly cmd: TxnCommand }
  | { readonly type: typeof CommandType.LeaseGrant; readonly kind: 'lease-grant'; readonly cmd: LeaseGrantCommand }
  | { readonly type: typeof CommandType.LeaseRevoke; readonly kind: 'lease-revoke'; readonly cmd: LeaseRevokeCommand }
  | { readonly type: typeof CommandType.Restore; readonly kind: 'restore'; readonly snapshotBytes: number };

function refuse(why: string): CairnError {
  return new CairnError(ErrorCode.INVALID_ARGUMENT, `refused to propose the envelope: ${why}`);
}

/**
 * The leader's check of an envelope it did not build (issue 15, item 4): a follower's
 * forwarded write. It must be a command this version's FSM applies (Raft's own types and
 * unknown types are refused, ignorable 0x80 ones included: a leader proposes only what it
 * knows), and its body must decode and pass the same structural checks the FSM runs at apply
 * (validate.ts, the same functions). So nothing that would stop a replica on apply (an unknown
 * non-ignorable type) can enter the log from outside. Content rules (type registry, names,
 * schemas, limits) are the API layer's, checked after this (`CoordinatorOptions.checkCommand`).
 */
export function decodeCommand(envelope: Uint8Array): DecodedCommand {
  const type = envelope[0];
  if (type === undefined) throw refuse('it is empty (no type byte)');
  const hex = `0x${type.toString(16).padStart(2, '0')}`;
  if (type === CommandType.Noop || type === CommandType.Config) throw refuse(`type ${hex} belongs to Raft and is never proposed as a command`);
  if (type !== CommandType.ResourceWrite && type !== CommandType.ResourcePut && type !== CommandType.ResourceDelete && type !== CommandType.ResourceStatus && type !== CommandType.Txn && type !== CommandType.LeaseGrant && type !== CommandType.LeaseRevoke && type !== CommandType.Restore) {
    throw refuse(`type ${hex} is not a command type this version knows`);
  }
  let body: unknown;
  try {
    body = decodeBody(envelope);
  } catch (e) {
    throw refuse(`the body of type ${hex} is not msgpack (${e instanceof Error ? e.message : String(e)})`);
  }
  switch (type) {
    case CommandType.ResourceWrite: {
      const c = validateWrite(body);
      if (typeof c === 'string' || c.kind !== 'write') throw refuse(`malformed write command: ${String(c)}`);
      return { type, kind: 'write', cmd: c.cmd };
    }
    case CommandType.ResourcePut: {
      const c = validatePut(body);
      if (typeof c === 'string' || c.kind !== 'put') throw refuse(`malformed put command: ${String(c)}`);
      return { type, kind: 'put', cmd: c.cmd };
    }
    case CommandType.ResourceDelete: {
      const c = validateDelete(body);
      if (typeof c === 'string' || c.kind !== 'delete') throw refuse(`malformed delete command: ${String(c)}`);
      return { type, kind: 'delete', cmd: c.cmd };
    }
    case CommandType.ResourceStatus: {
      const c = validateWriteStatus(body);
      if (typeof c === 'string' || c.kind !== 'status') throw refuse(`malformed status command: ${String(c)}`);
      return { type, kind: 'status', cmd: c.cmd };
    }
    case CommandType.Txn: {
      const c = validateTxn(body);
      if (typeof c === 'string' || c.kind !== 'txn') throw refuse(`malformed txn command: ${String(c)}`);
      return { type, kind: 'txn', cmd: c.cmd };
    }
    case CommandType.LeaseGrant: {
      const c = validateLeaseGrant(body);
      if (typeof c === 'string' || c.kind !== 'lease-grant') throw refuse(`malformed lease grant command: ${String(c)}`);
      return { type, kind: 'lease-grant', cmd: c.cmd };
    }
    case CommandType.LeaseRevoke: {
      const c = validateLeaseRevoke(body);
      if (typeof c === 'string' || c.kind !== 'lease-revoke') throw refuse(`malformed lease revoke command: ${String(c)}`);
      return { type, kind: 'lease-revoke', cmd: c.cmd };
    }
    case CommandType.Restore: {
      const o = body as { snapshot?: unknown } | null;
      if (typeof o !== 'object' || o === null || !(o.snapshot instanceof Uint8Array)) throw refuse('the restore command carries no snapshot');
      try {
        readSnapshotFrames(o.snapshot);
      } catch (e) {
        throw refuse(`the restore command's snapshot is malformed (${e instanceof Error ? e.message : String(e)})`);
      }
      return { type, kind: 'restore', snapshotBytes: o.snapshot.length };
    }
  }
}
