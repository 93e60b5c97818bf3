import { CairnError, ErrorCode, assert, err, ok, type Result, type Revision } from '../base/index.js';
import { scanPrefix } from './btree.js';
import { decodeSnapshot } from './codec.js';
import { Indexes } from './indexes.js';
import { InvalidInput, jsonEqual } from './json.js';
import { SEP, formatName, formatType, keyOfId, resourceKey } from './keys.js';
import { IndexReader } from './reader.js';
import { resourceBytes } from './size.js';
import { StoreSnapshot } from './snapshot.js';
import type {
  ApplyContext,
  ChangeRecord,
  DeleteInput,
  DeleteResult,
  Resource,
  ResourceId,
  StatusEntry,
  WriteInput,
  WriteResult,
  WriteStatusInput,
  WriteStatusResult,
} from './types.js';
import {
  EMPTY_MAP,
  EMPTY_STATUS,
  EMPTY_STRINGS,
  type CheckedRef,
  checkConditions,
  checkData,
  checkExpectedVersion,
  checkFinalizers,
  checkMetadata,
  checkRef,
  checkResourceId,
  checkStatusKey,
  checkStatusMap,
  makeStatusEntry,
  statusAsJson,
} from './validate.js';

/**
 * The in-memory store of typed, versioned resources (API.md "Resources"). The FSM applies
 * committed commands to it in log order; every replica computes the same state because every
 * decision depends only on the stored state and the command, and everything non-deterministic
 * (uid, generation, time) arrives in the `ApplyContext` the leader chose. CAS verdicts are
 * decided here, at apply time (ARCHITECTURE.md "CAS is decided in the FSM").
 *
 * Stored resources are frozen and never mutated: a change builds a new object. That lets
 * `snapshot()` be O(1): it clones the B+ tree indexes copy-on-write and shares the resources.
 *
 * A condition a caller can act on is an `err(CairnError)`; a broken invariant asserts.
 */
export class ResourceStore extends IndexReader {
  private ix: Indexes = Indexes.empty();
  private rev = 0 as Revision;

  protected get indexes(): Indexes {
    return this.ix;
  }

  get revision(): Revision {
    return this.rev;
  }

  /**
   * Records that the entry at `revision` has been applied. The FSM calls this for every entry,
   * including those that touch no resource (no-ops, configuration, refused commands), so the
   * revision a list reports is the applied index. Commands advance it too.
   */
  setRevision(revision: Revision): void {
    assert(
      Number.isSafeInteger(revision) && revision >= this.rev,
      () => `store revision may only move forward: at ${this.rev}, asked to set ${String(revision)}`,
    );
    this.rev = revision;
  }

  /** An O(1) point-in-time view; later changes to the store do not show in it. */
  snapshot(): StoreSnapshot {
    return new StoreSnapshot(this.ix.frozenClone(), this.rev);
  }

  /**
   * Rebuilds a store from `StoreSnapshot.chunks()` (as produced, split at any byte boundary, or
   * concatenated into one array). Throws a CairnError (INVALID_ARGUMENT) naming the problem if
   * the data is malformed, truncated or of an unknown format version.
   */
  static restore(chunks: Iterable<Uint8Array> | Uint8Array): ResourceStore {
    const { indexes, revision } = decodeSnapshot(chunks instanceof Uint8Array ? [chunks] : chunks);
    const store = new ResourceStore();
    store.ix = indexes;
    store.rev = revision;
    return store;
  }

  /** `restore` of one byte array (`StoreSnapshot.toBytes()`). */
  static fromSnapshotBytes(bytes: Uint8Array): ResourceStore {
    return ResourceStore.restore(bytes);
  }

  /**
   * Runs `f` (writes, deletes, status writes of this store) all or nothing: if it answers an
   * error, or throws, the store is as it was before: the indexes are put back to an O(1)
   * copy-on-write clone taken first, and the revision to what it was (the FSM then sets the
   * entry's revision for a refused entry, as for any other). A transaction's branch (fsm `Txn`, 0x15) applies this way.
   */
  atomically<T>(f: () => Result<T, CairnError>): Result<T, CairnError> {
    const saved = this.ix.clone();
    const savedRev = this.rev;
    let r: Result<T, CairnError>;
    try {
      r = f();
    } catch (e) {
      // A hook's error (or a broken invariant) mid-branch: the revision goes back with the
      // indexes, so the store never claims a revision whose entry it did not apply.
      this.ix = saved;
      this.rev = savedRev;
      throw e;
    }
    if (!r.ok) {
      this.ix = saved;
      this.rev = savedRev;
    }
    return r;
  }

  // ---- Write -------------------------------------------------------------------------------

  write(input: WriteInput, ctx: ApplyContext): Result<WriteResult, CairnError> {
    this.advance(ctx);
    let w: CheckedWrite;
    try {
      w = checkWrite(input);
    } catch (e) {
      return invalid('write', e);
    }
    const key = resourceKey(w.ref.type.group, w.ref.type.kind, w.ref.tenancy, w.ref.name);
    const stored = this.ix.byKey.get(key);
    return stored === undefined ? this.create(w, key, ctx) : this.update(w, key, stored, ctx, input);
  }

  private create(w: CheckedWrite, key: string, ctx: ApplyContext): Result<WriteResult, CairnError> {
    const what = `write ${formatName(w.ref.type, w.ref.tenancy, w.ref.name)}`;
    if (w.expectedVersion !== undefined && w.expectedVersion !== 0) {
      return err(casFailed(`${what}: expected version ${w.expectedVersion} but the resource does not exist`, w.expectedVersion, 0));
    }
    if (w.status !== undefined && !jsonEqual(statusAsJson(w.status), statusAsJson(EMPTY_STATUS))) {
      return err(statusViaWrite(what));
    }
    let owner: ResourceId | null = null;
    if (w.owner !== undefined && w.owner !== null) {
      const o = w.owner;
      const stored = this.ix.byKey.get(keyOfId(o));
      const ownerName = `${formatName(o.type, o.tenancy, o.name)} (uid ${o.uid})`;
      if (stored === undefined) {
        return err(new CairnError(ErrorCode.INVALID_ARGUMENT, `${what}: owner ${ownerName} does not exist`, { owner: ownerName }));
      }
      if (stored.id.uid !== o.uid) {
        return err(
          new CairnError(ErrorCode.INVALID_ARGUMENT, `${what}: owner ${ownerName} does not exist; the stored one has uid ${stored.id.uid}`, {
            owner: ownerName,
          }),
        );
      }
      owner = o;
    }
    if (ctx.newUid === '' || ctx.newUid.includes(SEP) || this.ix.byUid.has(ctx.newUid)) {
      // The leader chose the uid; a bad one is a proposer bug, refused the same way everywhere.
      return err(new CairnError(ErrorCode.INTERNAL, `${what}: the command's new uid ${JSON.stringify(ctx.newUid)} is empty, malformed or in use`));
    }
    const resource: Resource = Object.freeze({
      id: Object.freeze({ type: w.ref.type, tenancy: w.ref.tenancy, name: w.ref.name, uid: ctx.newUid }),
      owner,
      version: ctx.revision,
      generation: ctx.newGeneration,
      metadata: w.metadata ?? EMPTY_MAP,
      finalizers: w.finalizers ?? EMPTY_STRINGS,
      deletionTimestamp: null,
      data: w.data,
      status: EMPTY_STATUS,
      ...(w.lease !== undefined && w.lease !== '' ? { lease: w.lease } : {}),
    });
    const full = this.checkSpace(what, undefined, resource, ctx);
    if (full !== undefined) return err(full);
    this.ix.insert(key, resource);
    return ok({ resource, changed: true, changes: [upsert(ctx, resource)] });
  }

  private update(w: CheckedWrite, key: string, stored: Resource, ctx: ApplyContext, input: WriteInput): Result<WriteResult, CairnError> {
    const what = `write ${formatName(w.ref.type, w.ref.tenancy, w.ref.name)}`;
    if (w.ref.uid !== '' && w.ref.uid !== stored.id.uid) {
      return err(
        new CairnError(ErrorCode.UID_MISMATCH, `${what}: the write names uid ${w.ref.uid} but the stored resource has uid ${stored.id.uid}`, {
          expected: w.ref.uid,
          actual: stored.id.uid,
        }),
      );
    }
    if (w.expectedVersion !== undefined && w.expectedVersion !== stored.version) {
      return err(casFailed(`${what}: expected version ${w.expectedVersion} but the stored version is ${stored.version}`, w.expectedVersion, stored.version));
    }
    if (w.status !== undefined && !jsonEqual(statusAsJson(w.status), statusAsJson(stored.status))) {
      return err(statusViaWrite(what));
    }
    if (w.owner !== undefined && !sameOwner(w.owner, stored.owner)) {
      const from = stored.owner === null ? 'none' : formatName(stored.owner.type, stored.owner.tenancy, stored.owner.name);
      return err(
        new CairnError(ErrorCode.INVALID_ARGUMENT, `${what}: the owner is set at creation and never changed (stored owner: ${from})`, {
          stored_owner: from,
        }),
      );
    }
    const metadata = w.metadata ?? stored.metadata;
    const finalizers = w.finalizers ?? stored.finalizers;
    const dataChanged = !jsonEqual(w.data, stored.data);
    const metadataChanged = !jsonEqual(metadata, stored.metadata);
    const finalizersChanged = !stringsEqual(finalizers, stored.finalizers);
    const groupVersionChanged = w.ref.type.groupVersion !== stored.id.type.groupVersion;
    const lease = w.lease === undefined ? stored.lease : w.lease === '' ? undefined : w.lease;
    const leaseChanged = lease !== stored.lease;

    if (stored.deletionTimestamp !== null) {
      // API.md: while deletion_timestamp is set, the only write accepted removes finalizers.
      const kept = new Set(stored.finalizers);
      if (dataChanged || metadataChanged || groupVersionChanged || leaseChanged || !finalizers.every((f) => kept.has(f))) {
        return err(
          new CairnError(
            ErrorCode.INVALID_ARGUMENT,
            `${what}: the resource is being deleted (since ${stored.deletionTimestamp}); the only write accepted removes finalizers`,
            { deletionTimestamp: stored.deletionTimestamp },
          ),
        );
      }
    }
    if (!dataChanged && !metadataChanged && !finalizersChanged && !groupVersionChanged && !leaseChanged) {
      return ok({ resource: stored, changed: false, changes: [] });
    }
    let next: Resource = Object.freeze({
      ...stored,
      id: groupVersionChanged ? Object.freeze({ ...stored.id, type: w.ref.type }) : stored.id,
      version: ctx.revision,
      // Generation tracks the desired state: data, metadata, owner (fixed after creation) and
      // finalizers. A group-version-only change is a new version but the same generation.
      generation: dataChanged || metadataChanged || finalizersChanged ? ctx.newGeneration : stored.generation,
      // Unchanged parts keep the stored objects (equal copies would only cost memory).
      metadata: metadataChanged ? metadata : stored.metadata,
      finalizers: finalizersChanged ? finalizers : stored.finalizers,
      data: dataChanged ? w.data : stored.data,
    });
    // Only a write that attaches or detaches pays for a second copy; the common update does not.
    if (leaseChanged) next = withLease(next, lease);
    if (next.deletionTimestamp !== null && next.finalizers.length === 0) {
      // The last finalizer is gone: the resource is deleted by this same command.
      const refused = this.checkCascade(input.cascadeAllowed, stored, what);
      if (refused !== undefined) return err(refused);
      const changes: ChangeRecord[] = [];
      this.removeCascade(key, stored, next, ctx, changes);
      return ok({ resource: next, changed: true, changes });
    }
    const full = this.checkSpace(what, stored, next, ctx);
    if (full !== undefined) return err(full);
    this.ix.replace(key, stored, next);
    return ok({ resource: next, changed: true, changes: [upsert(ctx, next)] });
  }

  // ---- Delete ------------------------------------------------------------------------------

  delete(input: DeleteInput, ctx: ApplyContext): Result<DeleteResult, CairnError> {
    this.advance(ctx);
    let ref: CheckedRef;
    let expectedVersion: Revision | undefined;
    try {
      ref = checkRef(input.id, 'id');
      expectedVersion = checkExpectedVersion(input.expectedVersion);
    } catch (e) {
      return invalid('delete', e);
    }
    const key = resourceKey(ref.type.group, ref.type.kind, ref.tenancy, ref.name);
    const stored = this.ix.byKey.get(key);
    // What the caller means is not there (absent, or replaced by another uid): nothing to do.
    if (stored === undefined || (ref.uid !== '' && ref.uid !== stored.id.uid)) {
      return ok({ deleted: false, resource: null, changes: [] });
    }
    if (expectedVersion !== undefined && expectedVersion !== stored.version) {
      const what = `delete ${formatName(ref.type, ref.tenancy, ref.name)}`;
      return err(casFailed(`${what}: expected version ${expectedVersion} but the stored version is ${stored.version}`, expectedVersion, stored.version));
    }
    if (stored.deletionTimestamp !== null) {
      // Already being deleted: the first deletion timestamp stands.
      return ok({ deleted: false, resource: stored, changes: [] });
    }
    if (stored.finalizers.length > 0) {
      const marked = markForDeletion(stored, ctx);
      this.ix.replace(key, stored, marked);
      return ok({ deleted: false, resource: marked, changes: [upsert(ctx, marked)] });
    }
    const refused = this.checkCascade(input.cascadeAllowed, stored, `delete ${formatName(ref.type, ref.tenancy, ref.name)}`);
    if (refused !== undefined) return err(refused);
    const changes: ChangeRecord[] = [];
    this.removeCascade(key, stored, stored, ctx, changes);
    return ok({ deleted: true, resource: stored, changes });
  }

  /**
   * The cascade guard (docs/security.md "Cascades"): the API authorized deleting the uids in
   * `allowed`; if the cascade now reaches anything else (a child created since), refuse, so the
   * caller re-checks. Deterministic: it compares the command with the state, never a token.
   */
  private checkCascade(allowed: readonly string[] | undefined, root: Resource, what: string): CairnError | undefined {
    if (allowed === undefined) return undefined;
    if (!Array.isArray(allowed) || !allowed.every((u) => typeof u === 'string')) {
      return new CairnError(ErrorCode.INVALID_ARGUMENT, `${what}: cascadeAllowed must be an array of uids`);
    }
    const ok = new Set(allowed);
    const outside = this.cascadeOf(root).filter((r) => !ok.has(r.id.uid)).length;
    if (outside === 0) return undefined;
    return new CairnError(ErrorCode.CAS_FAILED, `${what}: the resources it would cascade to changed since the request was authorized`, { cascade_changed: true });
  }

  /**
   * Removes the resource at `key` (stored as `stored`, last state `last`) and, through the owner
   * index, everything it owns, recursively: a child without finalizers is removed (and its own
   * children visited); a child with finalizers is marked for deletion instead (its children stay
   * until it is removed in turn). Records are in pre-order: the resource, then each child in key
   * order, depth first. Ownership forms a forest (an owner exists before its child, and owners
   * never change), so every resource is visited at most once.
   */
  private removeCascade(key: string, stored: Resource, last: Resource, ctx: ApplyContext, changes: ChangeRecord[]): void {
    const stack: Array<{ key: string; resource: Resource; root: boolean }> = [{ key, resource: stored, root: true }];
    for (let item = stack.pop(); item !== undefined; item = stack.pop()) {
      const r = item.resource;
      if (!item.root && r.finalizers.length > 0) {
        if (r.deletionTimestamp === null) {
          const marked = markForDeletion(r, ctx);
          this.ix.replace(item.key, r, marked);
          changes.push(upsert(ctx, marked));
        }
        continue;
      }
      this.ix.remove(item.key, r);
      changes.push(Object.freeze({ kind: 'delete', revision: ctx.revision, resource: item.root ? last : r }));
      const children: Array<{ key: string; resource: Resource; root: boolean }> = [];
      scanPrefix(this.ix.byOwner, r.id.uid + SEP, (_k, childKey) => {
        children.push({ key: childKey, resource: this.stored(childKey), root: false });
      });
      for (let i = children.length - 1; i >= 0; i--) stack.push(children[i] as (typeof children)[number]);
    }
  }

  // ---- WriteStatus -------------------------------------------------------------------------

  writeStatus(input: WriteStatusInput, ctx: ApplyContext): Result<WriteStatusResult, CairnError> {
    this.advance(ctx);
    let ref: CheckedRef;
    let entry: StatusEntry;
    let statusKey: string;
    let expectedVersion: Revision | undefined;
    try {
      ref = checkRef(input.id, 'id');
      statusKey = checkStatusKey(input.key);
      if (typeof input.observedGeneration !== 'string') throw new InvalidInput('observedGeneration must be a string');
      entry = makeStatusEntry(input.observedGeneration, checkConditions(input.conditions, 'conditions'), ctx.time);
      expectedVersion = checkExpectedVersion(input.expectedVersion);
    } catch (e) {
      return invalid('write status', e);
    }
    const key = resourceKey(ref.type.group, ref.type.kind, ref.tenancy, ref.name);
    const stored = this.ix.byKey.get(key);
    const what = `write status ${JSON.stringify(statusKey)} of ${formatName(ref.type, ref.tenancy, ref.name)}`;
    if (stored === undefined || stored.id.uid !== ref.uid) {
      // The uid is required: a status report is about one particular resource, not a name.
      const why = stored === undefined ? 'no such resource' : `the stored resource has uid ${stored.id.uid}, not ${ref.uid === '' ? '(none)' : ref.uid}`;
      return err(
        new CairnError(ErrorCode.NOT_FOUND, `${what}: ${why}`, {
          type: formatType(ref.type),
          partition: ref.tenancy.partition,
          namespace: ref.tenancy.namespace,
          name: ref.name,
        }),
      );
    }
    if (expectedVersion !== undefined && expectedVersion !== stored.version) {
      return err(casFailed(`${what}: expected version ${expectedVersion} but the stored version is ${stored.version}`, expectedVersion, stored.version));
    }
    const status: Record<string, StatusEntry> = {};
    for (const k of [...Object.keys(stored.status), ...(Object.hasOwn(stored.status, statusKey) ? [] : [statusKey])].sort()) {
      status[k] = k === statusKey ? entry : (stored.status[k] as StatusEntry);
    }
    // The stored group version is kept: a status report addresses the resource, whatever
    // version of its type the reporter uses. updatedAt always changes, so this is a change.
    const next: Resource = Object.freeze({ ...stored, version: ctx.revision, status: Object.freeze(status) });
    const full = this.checkSpace(what, stored, next, ctx);
    if (full !== undefined) return err(full);
    this.ix.replace(key, stored, next);
    return ok({ resource: next, changes: [upsert(ctx, next)] });
  }

  // ---- Helpers -----------------------------------------------------------------------------

  /**
   * The quota (docs/security.md "Quotas"): NO_SPACE when replacing `prev` (absent: creating)
   * by `next` grows the data and either the result would be above the stamped quota or the
   * NO_SPACE alarm is raised. A change that shrinks or keeps the size always passes, so a
   * store over its quota (a lowered quota) can still be cleaned up. Deletes never come here.
   */
  private checkSpace(what: string, prev: Resource | undefined, next: Resource, ctx: ApplyContext): CairnError | undefined {
    return this.checkGrowth(what, resourceBytes(next) - (prev === undefined ? 0 : resourceBytes(prev)), this.ix.dataBytes, ctx);
  }

  /**
   * The quota for several changes as a whole (a transaction's branch, fsm `Txn`; docs/api.md
   * "Transactions"): called inside `atomically` after the changes, with the data's size before
   * them; judged as one write growing the data by the net difference, so the order of a
   * branch's ops does not matter (a write and a larger delete pass in either order).
   */
  checkNetGrowth(what: string, dataBytesBefore: number, ctx: ApplyContext): CairnError | undefined {
    return this.checkGrowth(what, this.ix.dataBytes - dataBytesBefore, dataBytesBefore, ctx);
  }

  private checkGrowth(what: string, needed: number, dataBytes: number, ctx: ApplyContext): CairnError | undefined {
    const quota = ctx.quota;
    if (quota === undefined) return undefined;
    if (needed <= 0) return undefined;
    if (!quota.alarm && dataBytes + needed <= quota.bytes) return undefined;
    const why = quota.alarm
      ? `the NO_SPACE alarm is raised (data ${dataBytes} of quota ${quota.bytes} bytes): no write may grow the data until deletes bring it to ${lowWaterBytes(quota.bytes)} bytes or less`
      : `it needs ${needed} more bytes and the data (${dataBytes} bytes) would exceed the quota of ${quota.bytes} bytes`;
    return new CairnError(ErrorCode.NO_SPACE, `${what}: ${why}; delete or shrink resources to make room`, {
      quotaBytes: quota.bytes,
      dataBytes,
      needed,
      alarm: quota.alarm,
    });
  }

  private advance(ctx: ApplyContext): void {
    this.setRevision(ctx.revision);
  }
}

interface CheckedWrite {
  readonly ref: CheckedRef;
  readonly owner: ResourceId | null | undefined;
  readonly metadata: Readonly<Record<string, string>> | undefined;
  readonly finalizers: readonly string[] | undefined;
  readonly data: Resource['data'];
  readonly status: Readonly<Record<string, StatusEntry>> | undefined;
  readonly expectedVersion: Revision | undefined;
  readonly lease: string | undefined;
}

function checkWrite(input: WriteInput): CheckedWrite {
  return {
    ref: checkRef(input.id, 'id'),
    owner: input.owner === undefined || input.owner === null ? input.owner : checkResourceId(input.owner, 'owner'),
    metadata: input.metadata === undefined ? undefined : checkMetadata(input.metadata),
    finalizers: input.finalizers === undefined ? undefined : checkFinalizers(input.finalizers),
    data: checkData(input.data),
    status: input.status === undefined ? undefined : checkStatusMap(input.status),
    expectedVersion: checkExpectedVersion(input.expectedVersion),
    lease: input.lease === undefined ? undefined : checkLease(input.lease),
  };
}

/** A lease id as the store keeps it: any string of at most 128 characters ('' detaches); its form and existence are the state machine's to check. */
function checkLease(v: unknown): string {
  if (typeof v !== 'string' || v.length > 128) throw new InvalidInput('lease must be a string of at most 128 characters');
  return v;
}

/**
 * Marks a resource for deletion. Like Kubernetes (apiserver `rest.BeforeDelete` and the
 * registry's `markAsDeleting`: "controllers of the object that's being deleted shouldn't take
 * any nontrivial actions, hence its behavior changes"), setting the deletion timestamp starts a
 * new generation, so a status whose observedGeneration is the old one has not seen the deletion.
 */
function markForDeletion(r: Resource, ctx: ApplyContext): Resource {
  assert(r.deletionTimestamp === null, 'a resource is marked for deletion once');
  return Object.freeze({ ...r, version: ctx.revision, generation: ctx.newGeneration, deletionTimestamp: ctx.time });
}

/** `r` attached to `lease`, or detached when it is undefined (the field absent, not undefined). */
function withLease(r: Resource, lease: string | undefined): Resource {
  if (lease !== undefined) return Object.freeze({ ...r, lease });
  const { lease: _dropped, ...rest } = r;
  return Object.freeze(rest);
}

/** Owners compare by identity and uid; the group version of an owner reference is an attribute. */
function sameOwner(a: ResourceId | null, b: ResourceId | null): boolean {
  if (a === null || b === null) return a === b;
  return a.uid === b.uid && keyOfId(a) === keyOfId(b);
}

/**
 * Where a raised NO_SPACE alarm clears: data at or below 90% of the quota (integer arithmetic,
 * the same on every replica). The gap keeps the alarm from flapping on every small write.
 */
export function lowWaterBytes(quotaBytes: number): number {
  return quotaBytes - Math.floor(quotaBytes / 10);
}

function stringsEqual(a: readonly string[], b: readonly string[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

function upsert(ctx: ApplyContext, resource: Resource): ChangeRecord {
  return Object.freeze({ kind: 'upsert', revision: ctx.revision, resource });
}

function casFailed(message: string, expected: Revision, actual: number): CairnError {
  return new CairnError(ErrorCode.CAS_FAILED, message, { expected, actual });
}

function statusViaWrite(what: string): CairnError {
  return new CairnError(ErrorCode.INVALID_ARGUMENT, `${what}: status is written only through WriteStatus; pass the stored status unchanged or leave it out`);
}

function invalid(action: string, e: unknown): Result<never, CairnError> {
  if (e instanceof InvalidInput) return err(new CairnError(ErrorCode.INVALID_ARGUMENT, `${action}: ${e.message}`));
  throw e;
}
