import { AssertionError, CairnError, ErrorCode, err, ok, type LogIndex, type Result, type Revision } from '../base/index.js';
import { EntryType, type Entry, type SnapshotMeta } from '../raft/index.js';
import { ResourceStore, formatName, lowWaterBytes, type ApplyContext, type ChangeRecord, type Resource, type ResourceId, type Tenancy } from '../store/index.js';
import { txnCompareHolds, txnOpUid, type DeleteCommand, type LeaseGrantCommand, type LeaseRevokeCommand, type LeaseRevokeReason, type PutCommand, type TxnCommand, type TxnCompare, type TxnOp, type WriteCommand, type WriteStatusCommand } from './commands.js';
import { MissingWriteHooksError, type WriteHooks } from './hooks.js';
import { decodeBody, envelopeType, IGNORABLE_FLAG, CommandType } from './envelope.js';
import { readSnapshotFrames, writeSnapshotFrames } from './snapshot-format.js';
import { validateDelete, validateLeaseGrant, validateLeaseRevoke, validatePut, validateTxn, validateWrite, validateWriteStatus } from './validate.js';

/**
 * A resource as a transaction's op result names it: its id (with uid), version and generation,
 * never its body. A transaction's answer, its de-duplication entry and the snapshot that keeps
 * that entry are thus bounded by the request's size, not by the size of what it touched (128
 * status writes on 100 KB resources would otherwise answer ~13 MB; etcd's txn put responses
 * carry no value either). A client that needs the bodies reads them at the answer's revision.
 */
export interface TxnResourceRef {
  readonly id: ResourceId;
  readonly version: Revision;
  readonly generation: string;
}

/** What one op of an applied transaction branch did (slim: `TxnResourceRef`). */
export type TxnOpResult =
  | { readonly kind: 'write'; readonly resource: TxnResourceRef; readonly changed: boolean }
  /** `deleted`: removed; `deleting`: finalizers hold it back (resource is the marked state); neither: nothing to delete (resource null). */
  | { readonly kind: 'delete'; readonly deleted: boolean; readonly deleting: boolean; readonly resource: TxnResourceRef | null }
  | { readonly kind: 'status'; readonly resource: TxnResourceRef };

/** The slim form of a resource in a transaction's result. */
export function txnResourceRef(r: Resource): TxnResourceRef {
  return { id: r.id, version: r.version, generation: r.generation };
}

/** What the proposer learns from applying its entry. Plain data, so it can be forwarded. */
export type ApplyResult =
  | {
      readonly ok: true;
      readonly kind: 'txn';
      /** Whether every comparison held (the `then` branch applied; otherwise `else`). */
      readonly succeeded: boolean;
      /** When not: the index of the first comparison that did not hold. */
      readonly failedComparison?: number;
      /** One per op of the branch that applied, in order. */
      readonly results: readonly TxnOpResult[];
      readonly revision: Revision;
    }
  | { readonly ok: true; readonly kind: 'write'; readonly resource: Resource; readonly changed: boolean }
  | { readonly ok: true; readonly kind: 'delete'; readonly deleted: boolean; readonly resource: Resource | null }
  | { readonly ok: true; readonly kind: 'status'; readonly resource: Resource }
  | { readonly ok: true; readonly kind: 'restore'; readonly resources: number; readonly revision: Revision }
  | { readonly ok: true; readonly kind: 'lease-grant'; readonly id: string; readonly ttlSeconds: number; readonly revision: Revision }
  /** `deleted`: how many resources the entry deleted (attached ones and their cascades); marked ones (finalizers) are not counted. */
  | { readonly ok: true; readonly kind: 'lease-revoke'; readonly id: string; readonly reason: LeaseRevokeReason; readonly deleted: number; readonly revision: Revision }
  | { readonly ok: true; readonly kind: 'none' }
  | { readonly ok: false; readonly error: { readonly code: string; readonly message: string; readonly details: Readonly<Record<string, unknown>> } };

export class UnknownEntryTypeError extends Error {
  override readonly name = 'UnknownEntryTypeError';
}

export interface FsmOptions {
  /** How many recent request ids are remembered for de-duplication. Default 10,000. */
  readonly dedupeWindow?: number;
  /**
   * How many bytes of commands the remembered results may stand for (each counted as its log
   * entry's size, the same on every replica): large resources shorten the window rather than
   * filling memory and snapshots. Default 32 MiB.
   */
  readonly dedupeMaxBytes?: number;
  /** Told about skipped entries of unknown ignorable types (0x80 and above). */
  readonly onIgnoredEntry?: (type: number, index: LogIndex) => void;
  /** Told about a command that could not be decoded (applied as a deterministic error). */
  readonly onMalformedEntry?: (type: number, index: LogIndex, message: string) => void;
  /**
   * The types' hooks, run when an unconditional write (0x14) applies (hooks.ts). Absent: an
   * unconditional write stops the node with MissingWriteHooksError (a node that proposes them
   * must have them; tests and harnesses that do not propose them need none).
   */
  readonly writeHooks?: WriteHooks;
  /** Test-only: bugs planted so the simulator can show its checks catch them (never set in production). */
  readonly plantedBugs?: FsmPlantedBugs;
}

export interface FsmPlantedBugs {
  /** A transaction branch of two or more ops silently skips its last op, answering as if it applied. */
  readonly txnDropsLastOp?: boolean;
}

const NONE: ApplyResult = { ok: true, kind: 'none' };

/** State-machine alarms (replicated state, in the snapshot header). */
export const Alarm = {
  /** The data reached its quota: writes that grow it are refused until deletes bring it down (docs/security.md "Quotas"). */
  NO_SPACE: 'NO_SPACE',
} as const;
export type Alarm = (typeof Alarm)[keyof typeof Alarm];

/** What one lease costs against the quota, besides its id's bytes (docs/api.md "Leases"). */
export const LEASE_BYTES = 64;

/** A lease in the replicated table: its granted TTL and the uids of the resources attached to it. */
export interface LeaseEntry {
  readonly ttlSeconds: number;
  /**
   * The revision (log index) of the grant: tells two grants of one id apart, so the leader's
   * lease clock gives a lease granted again under a revoked one's id a deadline of its own.
   */
  readonly grantRevision: number;
  readonly attached: ReadonlySet<string>;
}

interface MutableLease {
  readonly ttlSeconds: number;
  readonly grantRevision: number;
  readonly attached: Set<string>;
}

/**
 * The finite state machine: decodes each committed envelope and applies it to the store,
 * deterministically. Owns the de-duplication window for proposal ids (so a retried
 * forwarded write never applies twice) and the snapshot format.
 */
export class Fsm {
  store: ResourceStore;
  private applied = 0 as LogIndex;
  private readonly dedupe = new Map<string, { readonly result: ApplyResult; readonly bytes: number }>();
  private readonly dedupeWindow: number;
  private readonly dedupeMaxBytes: number;
  private dedupeBytes = 0;
  /** The NO_SPACE alarm (docs/security.md "Quotas"): replicated, decided by stamped commands only. */
  private noSpace = false;
  /** The lease table (docs/api.md "Leases"): id -> granted TTL and attached uids. No deadlines: time is the leader's. */
  private leases = new Map<string, MutableLease>();
  /** uid -> the lease it is attached to (the inverse of `attached`), kept from change records. */
  private attachedTo = new Map<string, string>();
  private leaseBytes = 0;
  private leaseChangeCount = 0;

  constructor(private readonly opts: FsmOptions = {}) {
    this.store = new ResourceStore();
    this.dedupeWindow = opts.dedupeWindow ?? 10_000;
    this.dedupeMaxBytes = opts.dedupeMaxBytes ?? 32 * 1024 * 1024;
  }

  get appliedIndex(): LogIndex {
    return this.applied;
  }

  /** The raised alarms, in a fixed order (`['NO_SPACE']` or `[]`). */
  get alarms(): readonly Alarm[] {
    return this.noSpace ? [Alarm.NO_SPACE] : [];
  }

  /** The replicated lease table, read-only (the leader's lease clock and the API read it; never change it). */
  get leaseTable(): ReadonlyMap<string, LeaseEntry> {
    return this.leases;
  }

  /** Counts grants, revokes and restores: the lease clock re-reads the table only when it moved. */
  get leaseChanges(): number {
    return this.leaseChangeCount;
  }

  apply(entry: Entry): { readonly result: ApplyResult; readonly changes: readonly ChangeRecord[]; readonly reset?: boolean } {
    if (entry.index <= this.applied) {
      throw new AssertionError(`entry ${entry.index} applied twice (applied index ${this.applied})`);
    }
    const out = this.dispatch(entry);
    this.applied = entry.index;
    this.store.setRevision(entry.index as number as Revision);
    return out;
  }

  private dispatch(entry: Entry): { result: ApplyResult; changes: readonly ChangeRecord[]; reset?: boolean } {
    const type = envelopeType(entry.data);
    switch (type) {
      case CommandType.Restore:
        return this.applyRestore(entry);
      case EntryType.Noop:
      case EntryType.Config:
        return { result: NONE, changes: [] };
      case CommandType.ResourceWrite:
      case CommandType.ResourcePut:
      case CommandType.ResourceDelete:
      case CommandType.ResourceStatus:
      case CommandType.Txn:
      case CommandType.LeaseGrant:
      case CommandType.LeaseRevoke:
        return this.applyCommand(type, entry);
      default:
        skipUnknownEntry(type, entry.index, this.opts.onIgnoredEntry);
        return { result: NONE, changes: [] };
    }
  }

  private applyCommand(type: number, entry: Entry): { result: ApplyResult; changes: readonly ChangeRecord[] } {
    let body: unknown;
    try {
      body = decodeBody(entry.data);
    } catch (e) {
      return this.malformed(type, entry, e instanceof Error ? e.message : String(e));
    }
    const checked =
      type === CommandType.ResourceWrite
        ? validateWrite(body)
        : type === CommandType.ResourcePut
          ? validatePut(body)
          : type === CommandType.ResourceDelete
            ? validateDelete(body)
            : type === CommandType.Txn
              ? validateTxn(body)
              : type === CommandType.LeaseGrant
                ? validateLeaseGrant(body)
                : type === CommandType.LeaseRevoke
                  ? validateLeaseRevoke(body)
                  : validateWriteStatus(body);
    if (typeof checked === 'string') return this.malformed(type, entry, checked);
    const cmd = checked.cmd;
    if (cmd.requestId !== undefined) {
      const seen = this.dedupe.get(cmd.requestId);
      if (seen) return { result: seen.result, changes: [] };
    }
    const ctx: ApplyContext = {
      revision: entry.index as number as Revision,
      time: cmd.time,
      newUid: cmd.uid,
      newGeneration: cmd.generation,
      ...(cmd.quotaBytes !== undefined ? { quota: { bytes: cmd.quotaBytes, alarm: this.noSpace } } : {}),
    };
    let result: ApplyResult;
    let changes: readonly ChangeRecord[] = [];
    switch (checked.kind) {
      case 'write': {
        const missing = this.leaseRefusal(checked.cmd.lease, checked.cmd.id, cmd.leaseMaxAttached);
        const r = missing !== undefined ? err(missing) : this.store.write(toStoreWrite(checked.cmd), ctx);
        if (r.ok) {
          result = { ok: true, kind: 'write', resource: r.value.resource, changed: r.value.changed };
          changes = r.value.changes;
        } else result = failure(r.error);
        break;
      }
      case 'put': {
        const missing = this.leaseRefusal(checked.cmd.lease, checked.cmd.id, cmd.leaseMaxAttached);
        const r = missing !== undefined ? err(missing) : this.applyPut(checked.cmd, ctx, entry.index);
        if (r.ok) {
          result = { ok: true, kind: 'write', resource: r.value.resource, changed: r.value.changed };
          changes = r.value.changes;
        } else result = failure(r.error);
        break;
      }
      case 'delete': {
        const r = this.store.delete(toStoreDelete(checked.cmd), ctx);
        if (r.ok) {
          result = { ok: true, kind: 'delete', deleted: r.value.deleted, resource: r.value.resource };
          changes = r.value.changes;
        } else result = failure(r.error);
        break;
      }
      case 'status': {
        const r = this.store.writeStatus(toStoreStatus(checked.cmd), ctx);
        if (r.ok) {
          result = { ok: true, kind: 'status', resource: r.value.resource };
          changes = r.value.changes;
        } else result = failure(r.error);
        break;
      }
      case 'txn': {
        const r = this.applyTxn(checked.cmd, ctx, entry.index);
        result = r.result;
        changes = r.changes;
        break;
      }
      case 'lease-grant':
        result = this.applyLeaseGrant(checked.cmd, ctx);
        break;
      case 'lease-revoke': {
        const r = this.applyLeaseRevoke(checked.cmd, ctx);
        result = r.result;
        changes = r.changes;
        break;
      }
    }
    if (changes.length > 0 && (this.leases.size > 0 || this.attachedTo.size > 0)) this.trackLeases(changes);
    if (cmd.requestId !== undefined) this.remember(cmd.requestId, result, entry.data.length);
    if (cmd.quotaBytes !== undefined) this.evaluateNoSpace(cmd.quotaBytes, result);
    return { result, changes };
  }

  /**
   * An unconditional write (0x14; docs/api.md "Unconditional writes"): the type's hooks run
   * here, against the resource as stored at this log position, then the store writes the
   * result with no version precondition. Concurrent writers of one key are thus ordered by the
   * log, each one's hooks see its predecessor's result, and none is refused for contention.
   * What the hooks refuse is refused with their error (INVALID_ARGUMENT), the same on every
   * replica; the store's own rules (owner fixed at creation, status only passed back, the
   * uid precondition, finalizers while deleting, the cascade guard, the quota) apply as for
   * any write. The result is a write result: the stored resource, `changed` false when the
   * write changed nothing (no new version).
   */
  private applyPut(cmd: PutCommand, ctx: ApplyContext, index: LogIndex, expectedVersion?: Revision): ReturnType<ResourceStore['write']> {
    const hooks = this.opts.writeHooks;
    const typeName = `${cmd.id.type.group}.${cmd.id.type.groupVersion}.${cmd.id.type.kind}`;
    const current = this.store.get({ group: cmd.id.type.group, kind: cmd.id.type.kind, tenancy: cmd.id.tenancy, name: cmd.id.name });
    const prepared = hooks?.prepare({ type: cmd.id.type, tenancy: cmd.id.tenancy, name: cmd.id.name, data: cmd.data, metadata: cmd.metadata }, current);
    if (prepared === undefined) {
      throw new MissingWriteHooksError(
        `log entry ${index} is an unconditional write of ${typeName}, whose hooks this node ${hooks === undefined ? 'was not given' : 'does not have (the type is not registered here)'}; ` +
          'applying it without them could diverge from the other nodes: register the same types on every node before it applies further entries',
      );
    }
    if (!prepared.ok) return { ok: false, error: prepared.error };
    // As a read-then-CAS write sent it: metadata when the client gave some or the hooks left some.
    const metadata = cmd.metadata !== undefined || Object.keys(prepared.metadata).length > 0 ? prepared.metadata : undefined;
    // A transaction's write may carry a version: checked by the store, as for 0x10.
    return this.store.write(toStoreWrite({ ...cmd, data: prepared.data, ...(metadata !== undefined ? { metadata } : {}), ...(expectedVersion !== undefined ? { expectedVersion } : {}) }), ctx);
  }

  /**
   * A transaction (0x15; docs/api.md "Transactions"). The comparisons are evaluated in order
   * against the state at this log position; the first that does not hold picks the `else`
   * branch (and is reported). The branch's ops then apply in order, each through the same
   * store call as its single command (a write through the type's hooks, as 0x14, with its
   * version precondition when it has one), all inside `ResourceStore.atomically`: the first op
   * that fails (CAS, uid, validation, hooks, quota, cascade guard), names a resource an earlier
   * op of the branch named, or changes a resource an earlier op changed (through a cascade),
   * undoes the whole branch, and the answer is that op's error with its place (`branch`,
   * `failedOp`). Every change record carries this entry's revision, so watchers see the branch
   * as one revision.
   */
  private applyTxn(cmd: TxnCommand, ctx: ApplyContext, index: LogIndex): { result: ApplyResult; changes: readonly ChangeRecord[] } {
    let failedComparison: number | undefined;
    for (let i = 0; i < cmd.compare.length; i++) {
      if (!this.holds(cmd.compare[i] as TxnCompare)) {
        failedComparison = i;
        break;
      }
    }
    const branchName = failedComparison === undefined ? 'then' : 'else';
    const branch = failedComparison === undefined ? cmd.then : cmd.else;
    const changes: ChangeRecord[] = [];
    const results: TxnOpResult[] = [];
    // The quota is judged once, on the branch's net growth (below), not op by op: without the
    // quota in their context the ops are not refused for space one at a time.
    const { quota, ...opCtx } = ctx;
    const applied = this.store.atomically((): Result<undefined, CairnError> => {
      const dataBytesBefore = this.store.dataBytes;
      const named = new Set<string>();
      // Attachments this branch's earlier ops made, per lease (the attachment sets are updated
      // from the change records after the entry): each counts against the limit.
      const attaching = new Map<string, number>();
      const changed = new Set<string>();
      for (let i = 0; i < branch.length; i++) {
        const op = branch[i] as TxnOp;
        const at = (e: CairnError): Result<undefined, CairnError> => err(txnOpError(branchName, i, op, e));
        const key = identityKey(op.id);
        if (named.has(key)) return at(new CairnError(ErrorCode.INVALID_ARGUMENT, 'it names a resource an earlier op of the branch names (a resource may appear once per branch)'));
        named.add(key);
        if (this.opts.plantedBugs?.txnDropsLastOp === true && branch.length > 1 && i === branch.length - 1 && results.length > 0) {
          results.push(results[results.length - 1] as TxnOpResult);
          continue;
        }
        const r = this.applyTxnOp(op, { ...opCtx, newUid: (branchName === 'then' ? cmd.thenUids : cmd.elseUids)?.[i] ?? txnOpUid(cmd.uid, i) }, index, cmd.leaseMaxAttached, attaching);
        if (!r.ok) return at(r.error);
        for (const c of r.value.changes) {
          const k = identityKey(c.resource.id);
          if (changed.has(k)) return at(new CairnError(ErrorCode.INVALID_ARGUMENT, `it changes ${formatName(c.resource.id.type, c.resource.id.tenancy, c.resource.id.name)}, which an earlier op of the branch changed (through a cascade)`));
          changed.add(k);
          changes.push(c);
        }
        results.push(r.value.result);
      }
      if (quota !== undefined) {
        const full = this.store.checkNetGrowth(`transaction ${branchName} branch (${branch.length} ops)`, dataBytesBefore, { ...ctx, quota });
        if (full !== undefined) {
          return err(new CairnError(full.code, `${full.message}; none of the ${branchName} branch applied`, { ...full.details, branch: branchName }));
        }
      }
      return ok(undefined);
    });
    if (!applied.ok) return { result: failure(applied.error), changes: [] };
    const result: ApplyResult = {
      ok: true,
      kind: 'txn',
      succeeded: failedComparison === undefined,
      ...(failedComparison !== undefined ? { failedComparison } : {}),
      results,
      revision: ctx.revision,
    };
    return { result, changes };
  }

  private holds(c: TxnCompare): boolean {
    const stored = this.store.get({ group: c.id.type.group, kind: c.id.type.kind, tenancy: c.id.tenancy, name: c.id.name });
    return txnCompareHolds(c, stored);
  }

  private applyTxnOp(op: TxnOp, ctx: ApplyContext, index: LogIndex, leaseMaxAttached: number | undefined, attaching: Map<string, number>): Result<{ result: TxnOpResult; changes: readonly ChangeRecord[] }, CairnError> {
    switch (op.op) {
      case 'write': {
        const missing = this.leaseRefusal(op.lease, op.id, leaseMaxAttached, attaching);
        if (missing !== undefined) return err(missing);
        const r = this.applyPut({ ...op, ...HEADERLESS }, ctx, index, op.expectedVersion);
        return r.ok ? ok({ result: { kind: 'write', resource: txnResourceRef(r.value.resource), changed: r.value.changed }, changes: r.value.changes }) : r;
      }
      case 'delete': {
        const r = this.store.delete(toStoreDelete({ ...op, ...HEADERLESS }), ctx);
        if (!r.ok) return r;
        const { deleted, resource } = r.value;
        return ok({ result: { kind: 'delete', deleted, deleting: !deleted && resource !== null, resource: resource === null ? null : txnResourceRef(resource) }, changes: r.value.changes });
      }
      case 'status': {
        const r = this.store.writeStatus(toStoreStatus({ ...op, ...HEADERLESS }), ctx);
        return r.ok ? ok({ result: { kind: 'status', resource: txnResourceRef(r.value.resource) }, changes: r.value.changes }) : r;
      }
    }
  }

  /**
   * Why a write naming `lease` (not '': detach) is refused at this log position, or undefined:
   * NOT_FOUND when the lease is not in the table; TOO_LARGE when the write would attach a
   * resource to a lease that already has `maxAttached` attached (`--lease-max-attached`,
   * stamped into the entry; docs/api.md "Leases"), counting `attaching`, the attachments a
   * transaction branch's earlier ops made (a write that succeeds is added to it). A resource
   * already attached to that lease, or marked for deletion (never tracked as attached), adds
   * nothing. The limit keeps a revoke's deletes (one entry, one revision) within a watcher's
   * buffer and the apply of one entry short.
   */
  private leaseRefusal(
    lease: string | undefined,
    id: { readonly type: { readonly group: string; readonly groupVersion: string; readonly kind: string }; readonly tenancy: Tenancy; readonly name: string },
    maxAttached: number | undefined,
    attaching?: Map<string, number>,
  ): CairnError | undefined {
    if (lease === undefined || lease === '') return undefined;
    const entry = this.leases.get(lease);
    if (entry === undefined) {
      return new CairnError(ErrorCode.NOT_FOUND, `write ${formatName(id.type, id.tenancy, id.name)}: lease ${lease} does not exist (never granted, revoked or expired); nothing was written`, { lease });
    }
    if (maxAttached === undefined) return undefined;
    const stored = this.store.get({ group: id.type.group, kind: id.type.kind, tenancy: id.tenancy, name: id.name });
    if (stored !== undefined && (stored.deletionTimestamp !== null || this.attachedTo.get(stored.id.uid) === lease)) return undefined;
    const pending = attaching?.get(lease) ?? 0;
    const count = entry.attached.size + pending;
    if (count >= maxAttached) {
      return new CairnError(
        ErrorCode.TOO_LARGE,
        `write ${formatName(id.type, id.tenancy, id.name)}: lease ${lease} has ${count} resources attached, the most --lease-max-attached (${maxAttached}) allows; nothing was written (attach to another lease, or detach some first)`,
        { lease, attached: count, lease_max_attached: maxAttached },
      );
    }
    attaching?.set(lease, pending + 1);
    return undefined;
  }

  /**
   * A lease grant (0x16; docs/api.md "Leases"): adds the lease with no resources attached. The
   * same id twice is CAS_FAILED (the first grant stands; a retried request id is answered
   * from the de-duplication window before this). `maxLeases` and the quota are the
   * proposer's, stamped into the entry, so every replica reaches the same verdict.
   */
  private applyLeaseGrant(cmd: LeaseGrantCommand, ctx: ApplyContext): ApplyResult {
    if (this.leases.has(cmd.id)) {
      return failure(new CairnError(ErrorCode.CAS_FAILED, `grant lease ${cmd.id}: a lease with this id exists; revoke it first or choose another id`, { lease: cmd.id }));
    }
    if (cmd.maxLeases !== undefined && this.leases.size >= cmd.maxLeases) {
      return failure(new CairnError(ErrorCode.NO_SPACE, `grant lease ${cmd.id}: the cluster holds ${this.leases.size} leases, the most --max-leases (${cmd.maxLeases}) allows; revoke some first`, { leases: this.leases.size, max_leases: cmd.maxLeases }));
    }
    const bytes = leaseBytes(cmd.id);
    if (ctx.quota !== undefined) {
      const after = this.store.dataBytes + this.leaseBytes + bytes;
      if (ctx.quota.alarm || after > ctx.quota.bytes) {
        return failure(new CairnError(ErrorCode.NO_SPACE, `grant lease ${cmd.id}: the data (${this.store.dataBytes + this.leaseBytes} bytes with leases) is at its quota of ${ctx.quota.bytes} bytes${ctx.quota.alarm ? ' (NO_SPACE alarm raised)' : ''}; delete data or revoke leases first`, { quota_bytes: ctx.quota.bytes }));
      }
    }
    this.leases.set(cmd.id, { ttlSeconds: cmd.ttlSeconds, grantRevision: ctx.revision, attached: new Set() });
    this.leaseBytes += bytes;
    this.leaseChangeCount++;
    return { ok: true, kind: 'lease-grant', id: cmd.id, ttlSeconds: cmd.ttlSeconds, revision: ctx.revision };
  }

  /**
   * A lease revoke or expiry (0x17): every resource attached to the lease at this log position
   * is deleted through the store's ordinary delete, as a single delete would (finalizers mark
   * instead of remove; owned resources cascade), in one entry at one revision, inside
   * `atomically` (all or nothing, as a transaction). The lease leaves the table. In key order,
   * so the change records are the same on every replica however the attachments were built.
   * A resource marked for deletion (finalizers) keeps showing the lease id until it goes.
   */
  private applyLeaseRevoke(cmd: LeaseRevokeCommand, ctx: ApplyContext): { result: ApplyResult; changes: readonly ChangeRecord[] } {
    const lease = this.leases.get(cmd.id);
    if (lease === undefined) {
      return { result: failure(new CairnError(ErrorCode.NOT_FOUND, `revoke lease ${cmd.id}: no such lease (never granted, or already revoked or expired)`, { lease: cmd.id })), changes: [] };
    }
    // An expiry decided for an earlier grant of this id (revoked and granted again before the
    // entry applied, or an expiry proposed twice): the grant now in the table keeps its TTL.
    if (cmd.reason === 'expired' && cmd.grantRevision !== lease.grantRevision) return { result: NONE, changes: [] };
    const targets: Resource[] = [];
    for (const uid of lease.attached) {
      const r = this.store.getByUid(uid);
      if (r !== undefined) targets.push(r);
    }
    targets.sort((a, b) => (identityKey(a.id) < identityKey(b.id) ? -1 : 1));
    const changes: ChangeRecord[] = [];
    const { quota: _quota, ...deleteCtx } = ctx;
    const done = this.store.atomically((): Result<undefined, CairnError> => {
      for (const r of targets) {
        // An earlier delete's cascade may have removed it already.
        if (this.store.getByUid(r.id.uid) === undefined) continue;
        const d = this.store.delete({ id: { type: r.id.type, tenancy: r.id.tenancy, name: r.id.name, uid: r.id.uid } }, deleteCtx);
        if (!d.ok) return err(d.error);
        changes.push(...d.value.changes);
      }
      return ok(undefined);
    });
    if (!done.ok) return { result: failure(new CairnError(done.error.code, `revoke lease ${cmd.id}: ${done.error.message}; nothing was deleted and the lease stays`, { ...done.error.details, lease: cmd.id })), changes: [] };
    this.leases.delete(cmd.id);
    this.leaseBytes -= leaseBytes(cmd.id);
    this.leaseChangeCount++;
    // Marked (finalizers) resources still name it; they no longer count as attached.
    for (const uid of lease.attached) if (this.attachedTo.get(uid) === cmd.id) this.attachedTo.delete(uid);
    const deleted = changes.filter((c) => c.kind === 'delete').length;
    return { result: { ok: true, kind: 'lease-revoke', id: cmd.id, reason: cmd.reason, deleted, revision: ctx.revision }, changes };
  }

  /**
   * Keeps the attachment sets in step with the store from a command's change records: a
   * deleted resource leaves its lease; an upserted one is attached to the lease its `lease`
   * field names, when that lease is in the table (a resource marked for deletion may still name
   * a revoked lease: it is attached to nothing).
   */
  private trackLeases(changes: readonly ChangeRecord[]): void {
    for (const c of changes) {
      const uid = c.resource.id.uid;
      const before = this.attachedTo.get(uid);
      // A resource marked for deletion (finalizers) is attached to nothing, as restoreLeases
      // rebuilds it: a later grant of the id it names must attach it on no replica.
      const named = c.kind === 'delete' || c.resource.deletionTimestamp !== null ? undefined : c.resource.lease;
      const after = named !== undefined && this.leases.has(named) ? named : undefined;
      if (before === after) continue;
      if (before !== undefined) this.leases.get(before)?.attached.delete(uid);
      if (after !== undefined) {
        this.leases.get(after)?.attached.add(uid);
        this.attachedTo.set(uid, after);
      } else this.attachedTo.delete(uid);
    }
  }

  /**
   * Rebuilds the lease table from a snapshot header's `leases` and the store's resources (their
   * `lease` fields; a resource marked for deletion is attached to nothing, as in trackLeases).
   */
  private restoreLeases(rows: unknown): void {
    this.leases = new Map();
    this.attachedTo = new Map();
    this.leaseBytes = 0;
    this.leaseChangeCount++;
    if (Array.isArray(rows)) {
      for (const row of rows as unknown[]) {
        if (!Array.isArray(row) || typeof row[0] !== 'string' || typeof row[1] !== 'number' || typeof row[2] !== 'number') throw new AssertionError('snapshot lease table row is malformed');
        this.leases.set(row[0], { ttlSeconds: row[1], grantRevision: row[2], attached: new Set() });
        this.leaseBytes += leaseBytes(row[0]);
      }
    }
    if (this.leases.size === 0) return;
    for (const r of this.store.all()) {
      // Marked for deletion: attached to nothing, as trackLeases keeps it.
      if (r.lease === undefined || r.deletionTimestamp !== null) continue;
      const lease = this.leases.get(r.lease);
      if (lease === undefined) continue;
      lease.attached.add(r.id.uid);
      this.attachedTo.set(r.id.uid, r.lease);
    }
  }

  /**
   * The NO_SPACE alarm after a command stamped with `quotaBytes` (docs/security.md "Quotas"):
   * raised when the command was refused for space or the data is at or over the quota;
   * cleared when the data is at or below the low-water mark (90% of the quota), so it does not
   * flap on every small write; otherwise unchanged. Depends only on the entry and the state,
   * so every replica agrees. Commands without a quota (older entries) leave it as it is. A grant
   * refused for `--max-leases` (NO_SPACE, details `max_leases`) is a count, not space: it
   * raises nothing (else one grant too many froze every growing write cluster-wide).
   */
  private evaluateNoSpace(quotaBytes: number, result: ApplyResult): void {
    const data = this.store.dataBytes + this.leaseBytes;
    const forSpace = !result.ok && result.error.code === ErrorCode.NO_SPACE && result.error.details['max_leases'] === undefined;
    if (forSpace || data >= quotaBytes) this.noSpace = true;
    else if (data <= lowWaterBytes(quotaBytes)) this.noSpace = false;
  }

  /**
   * An operator's restore: every replica replaces its store with the snapshot carried in the
   * entry, at the same log index. Revisions stay monotonic (the store's revision becomes this
   * entry's index); subscribers are told to reset (watchers re-list).
   */
  private applyRestore(entry: Entry): { result: ApplyResult; changes: readonly ChangeRecord[]; reset?: boolean } {
    let store: ResourceStore;
    let leaseRows: unknown;
    try {
      const body = decodeBody(entry.data) as { snapshot?: unknown } | null;
      if (!body || !(body.snapshot instanceof Uint8Array)) throw new Error('the restore command carries no snapshot');
      const { header, bodies } = readSnapshotFrames(body.snapshot);
      store = ResourceStore.restore(bodies);
      leaseRows = header.leases;
    } catch (e) {
      return this.malformed(CommandType.Restore, entry, e instanceof Error ? e.message : String(e));
    }
    this.store = store;
    // The saved lease table comes back with the resources (their deadlines are the leader's: full TTLs).
    this.restoreLeases(leaseRows);
    // A restored state starts without alarms; the next stamped command judges it against its quota.
    this.noSpace = false;
    return { result: { ok: true, kind: 'restore', resources: store.size, revision: entry.index as number as Revision }, changes: [], reset: true };
  }

  private malformed(type: number, entry: Entry, message: string): { result: ApplyResult; changes: readonly ChangeRecord[] } {
    // Every replica sees the same bytes and reaches the same verdict, so refusing the command
    // (rather than crashing every node) keeps the cluster up and identical.
    this.opts.onMalformedEntry?.(type, entry.index, message);
    return { result: failure(new CairnError(ErrorCode.INTERNAL, `log entry ${entry.index} is malformed: ${message}`)), changes: [] };
  }

  /** Remembers a result; `bytes` is its entry's size (identical on every replica, so eviction is too). */
  private remember(requestId: string, result: ApplyResult, bytes: number): void {
    this.dedupe.set(requestId, { result, bytes });
    this.dedupeBytes += bytes;
    while (this.dedupe.size > 1 && (this.dedupe.size > this.dedupeWindow || this.dedupeBytes > this.dedupeMaxBytes)) {
      const oldest = this.dedupe.entries().next();
      if (oldest.done) break;
      this.dedupe.delete(oldest.value[0]);
      this.dedupeBytes -= oldest.value[1].bytes;
    }
  }

  /** Remembered request ids (for tests and metrics). */
  get dedupeSize(): { readonly entries: number; readonly bytes: number } {
    return { entries: this.dedupe.size, bytes: this.dedupeBytes };
  }

  /** A copy-on-write view of the state, serialized in chunks on demand. */
  snapshot(): { readonly index: LogIndex; chunks(): Iterable<Uint8Array> } {
    const index = this.applied;
    const view = this.store.snapshot();
    // [id, result, entry bytes]: the size travels with the result so eviction stays identical.
    const dedupe = [...this.dedupe.entries()].map(([id, d]) => [id, d.result, d.bytes] as const);
    const alarms = [...this.alarms];
    const leases = [...this.leases.entries()].map(([id, l]) => [id, l.ttlSeconds, l.grantRevision] as const).sort((a, b) => (a[0] < b[0] ? -1 : 1));
    return {
      index,
      chunks: () => writeSnapshotFrames({ format: 1, index, dedupe, alarms, ...(leases.length > 0 ? { leases } : {}) }, view.chunks()),
    };
  }

  restore(meta: SnapshotMeta, data: Uint8Array): void {
    const { header, bodies } = readSnapshotFrames(data);
    if (header.index !== meta.index) {
      throw new AssertionError(`snapshot data is for index ${header.index} but its metadata says ${meta.index}`);
    }
    this.store = ResourceStore.restore(bodies);
    this.dedupe.clear();
    this.dedupeBytes = 0;
    for (const row of header.dedupe) {
      const [id, result, bytes] = row;
      // Snapshots written before sizes were kept have none: count a small command.
      const size = typeof bytes === 'number' && Number.isSafeInteger(bytes) && bytes >= 0 ? bytes : 256;
      this.dedupe.set(id, { result: result as ApplyResult, bytes: size });
      this.dedupeBytes += size;
    }
    // Snapshots written before alarms existed have none: nothing raised.
    this.noSpace = Array.isArray(header.alarms) && header.alarms.includes(Alarm.NO_SPACE);
    // Snapshots written before leases existed have none.
    this.restoreLeases(header.leases);
    this.applied = meta.index;
  }
}

function leaseBytes(id: string): number {
  return LEASE_BYTES + id.length;
}

/** Header fields an op borrows to reuse the single commands' conversions (they read none of them). */
const HEADERLESS = { time: '', uid: '', generation: '' } as const;

/** A resource's identity (no group version, no uid), as the store keys it. */
function identityKey(id: { readonly type: { readonly group: string; readonly kind: string }; readonly tenancy: Tenancy; readonly name: string }): string {
  return JSON.stringify([id.type.group, id.type.kind, id.tenancy.partition, id.tenancy.namespace, id.name]);
}

/** The error of a transaction op, saying which op and why; the op's own code and details, plus `branch` and `failedOp`. */
/**
 * What a node does with an entry whose command type it does not know (an older node meeting a
 * newer command): skips it, telling `onIgnored`, when the type has the IGNORABLE_FLAG (0x80);
 * otherwise stops with UnknownEntryTypeError rather than diverge from nodes that apply it.
 * Exported so a test can show what a node that predates a command type does with it.
 */
export function skipUnknownEntry(type: number, index: LogIndex, onIgnored?: (type: number, index: LogIndex) => void): void {
  if (type & IGNORABLE_FLAG) {
    onIgnored?.(type, index);
    return;
  }
  throw new UnknownEntryTypeError(
    `log entry ${index} has unknown command type 0x${type.toString(16).padStart(2, '0')}; ` +
      'this node is older than the cluster: upgrade it before it applies further entries',
  );
}

function txnOpError(branch: 'then' | 'else', i: number, op: TxnOp, e: CairnError): CairnError {
  const what = `${op.op === 'status' ? 'status write' : op.op} of ${formatName(op.id.type, op.id.tenancy, op.id.name)}`;
  return new CairnError(e.code, `transaction ${branch}[${i}] (${what}) failed, so none of the ${branch} branch applied: ${e.message}`, { ...e.details, branch, failedOp: i });
}

function failure(e: CairnError): ApplyResult {
  return { ok: false, error: { code: e.code, message: e.message, details: e.details } };
}

function toStoreWrite(c: WriteCommand | PutCommand): Parameters<ResourceStore['write']>[0] {
  return {
    id: c.id,
    data: c.data,
    ...(c.owner !== undefined ? { owner: c.owner } : {}),
    ...(c.metadata !== undefined ? { metadata: c.metadata } : {}),
    ...(c.finalizers !== undefined ? { finalizers: c.finalizers } : {}),
    ...(c.status !== undefined ? { status: c.status } : {}),
    ...('expectedVersion' in c && c.expectedVersion !== undefined ? { expectedVersion: c.expectedVersion } : {}),
    ...(c.cascadeAllowed !== undefined ? { cascadeAllowed: c.cascadeAllowed } : {}),
    ...(c.lease !== undefined ? { lease: c.lease } : {}),
  } as Parameters<ResourceStore['write']>[0];
}

function toStoreDelete(c: DeleteCommand): Parameters<ResourceStore['delete']>[0] {
  return {
    id: c.id,
    ...(c.expectedVersion !== undefined ? { expectedVersion: c.expectedVersion } : {}),
    ...(c.cascadeAllowed !== undefined ? { cascadeAllowed: c.cascadeAllowed } : {}),
  } as Parameters<ResourceStore['delete']>[0];
}

function toStoreStatus(c: WriteStatusCommand): Parameters<ResourceStore['writeStatus']>[0] {
  return {
    id: c.id,
    key: c.key,
    observedGeneration: c.observedGeneration,
    conditions: c.conditions,
    ...(c.expectedVersion !== undefined ? { expectedVersion: c.expectedVersion } : {}),
  } as Parameters<ResourceStore['writeStatus']>[0];
}
