import type {
  ApplyContext,
  DeleteInput,
  JsonValue,
  ListQuery,
  ReadInput,
  Resource,
  ResourceId,
  StatusEntry,
  WriteInput,
  WriteStatusInput,
} from '../types.js';

/**
 * A deliberately naive model of the store, for property tests (STYLE.md: "property tests
 * against a deliberately naive reference"). A plain array of plain objects, linear scans, sorts
 * on every list, equality by canonical JSON text, cascades by recursion. It shares no code with
 * the store, so a bug in the store's keys, indexes or B+ tree scans shows up as a difference.
 *
 * It implements the same semantics choices as the store (see ../README.md); it skips input
 * validation (property tests generate valid inputs).
 */

/** The verdict of a command, in a form both implementations can be compared in. */
export type Outcome = { readonly ok: true; readonly value: unknown } | { readonly ok: false; readonly code: string; readonly details: unknown };

type Mutable<T> = { -readonly [K in keyof T]: T[K] };
type Res = Mutable<Resource>;

/** JSON text with object keys sorted: equal text means structurally equal JSON. */
export function canonicalText(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonicalText).join(',')}]`;
  if (typeof v === 'object' && v !== null) {
    const o = v as Record<string, unknown>;
    return `{${Object.keys(o)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonicalText(o[k])}`)
      .join(',')}}`;
  }
  return JSON.stringify(v) ?? 'undefined';
}

/** A plain, canonical deep copy (what tests compare). */
export function plain<T>(v: T): T {
  return JSON.parse(canonicalText(v)) as T;
}

function copy<T>(v: T): T {
  return JSON.parse(JSON.stringify(v)) as T;
}

function tuple(r: { id: ResourceId }): string[] {
  return [r.id.type.group, r.id.type.kind, r.id.tenancy.partition, r.id.tenancy.namespace, r.id.name];
}

function compareTuples(a: string[], b: string[]): number {
  for (let i = 0; i < a.length; i++) {
    const x = a[i] as string;
    const y = b[i] as string;
    if (x < y) return -1;
    if (x > y) return 1;
  }
  return 0;
}

function byTuple(a: Res, b: Res): number {
  return compareTuples(tuple(a), tuple(b));
}

function sameIdentity(a: ResourceId | { type: { group: string; kind: string }; tenancy: ResourceId['tenancy']; name: string }, b: ResourceId): boolean {
  return (
    a.type.group === b.type.group &&
    a.type.kind === b.type.kind &&
    a.tenancy.partition === b.tenancy.partition &&
    a.tenancy.namespace === b.tenancy.namespace &&
    a.name === b.name
  );
}

const fail = (code: string, details: unknown = {}): Outcome => ({ ok: false, code, details });

export class ReferenceStore {
  resources: Res[] = [];
  revision = 0;

  private find(ref: { type: { group: string; kind: string }; tenancy: ResourceId['tenancy']; name: string }): Res | undefined {
    return this.resources.find((r) => sameIdentity(ref, r.id));
  }

  private bump(ctx: ApplyContext): void {
    if (ctx.revision > this.revision) this.revision = ctx.revision;
  }

  write(input: WriteInput, ctx: ApplyContext): Outcome {
    this.bump(ctx);
    const stored = this.find(input.id);
    const ev = input.expectedVersion;
    if (stored === undefined) {
      if (ev !== undefined && ev !== 0) return fail('CAS_FAILED', { expected: ev, actual: 0 });
      if (input.status !== undefined && canonicalText(input.status) !== '{}') return fail('INVALID_ARGUMENT');
      let owner: ResourceId | null = null;
      if (input.owner !== undefined && input.owner !== null) {
        const o = this.find(input.owner);
        if (o === undefined || o.id.uid !== input.owner.uid) return fail('INVALID_ARGUMENT');
        owner = copy(input.owner);
      }
      const r: Res = {
        id: { type: copy(input.id.type), tenancy: copy(input.id.tenancy), name: input.id.name, uid: ctx.newUid },
        owner,
        version: ctx.revision,
        generation: ctx.newGeneration,
        metadata: copy(input.metadata ?? {}),
        finalizers: copy(input.finalizers ?? []),
        deletionTimestamp: null,
        data: copy(input.data),
        status: {},
      };
      this.resources.push(r);
      return { ok: true, value: { resource: copy(r), changed: true, changes: [{ kind: 'upsert', revision: ctx.revision, resource: copy(r) }] } };
    }
    const uid = input.id.uid ?? '';
    if (uid !== '' && uid !== stored.id.uid) return fail('UID_MISMATCH', { expected: uid, actual: stored.id.uid });
    if (ev !== undefined && ev !== stored.version) return fail('CAS_FAILED', { expected: ev, actual: stored.version });
    if (input.status !== undefined && canonicalText(input.status) !== canonicalText(stored.status)) return fail('INVALID_ARGUMENT');
    if (input.owner !== undefined) {
      const a = input.owner;
      const b = stored.owner;
      const same = a === null || b === null ? a === b : a.uid === b.uid && sameIdentity(a, b);
      if (!same) return fail('INVALID_ARGUMENT');
    }
    const metadata = input.metadata ?? stored.metadata;
    const finalizers = input.finalizers ?? stored.finalizers;
    const dataChanged = canonicalText(input.data) !== canonicalText(stored.data);
    const metadataChanged = canonicalText(metadata) !== canonicalText(stored.metadata);
    const finalizersChanged = JSON.stringify(finalizers) !== JSON.stringify(stored.finalizers);
    const gvChanged = input.id.type.groupVersion !== stored.id.type.groupVersion;
    if (stored.deletionTimestamp !== null) {
      const onlyRemoves = finalizers.every((f) => stored.finalizers.includes(f));
      if (dataChanged || metadataChanged || gvChanged || !onlyRemoves) return fail('INVALID_ARGUMENT');
    }
    if (!dataChanged && !metadataChanged && !finalizersChanged && !gvChanged) {
      return { ok: true, value: { resource: copy(stored), changed: false, changes: [] } };
    }
    const next: Res = copy(stored);
    next.id = { ...next.id, type: { ...next.id.type, groupVersion: input.id.type.groupVersion } };
    next.version = ctx.revision;
    if (dataChanged || metadataChanged || finalizersChanged) next.generation = ctx.newGeneration;
    next.metadata = copy(metadata);
    next.finalizers = copy(finalizers);
    next.data = copy(input.data);
    if (next.deletionTimestamp !== null && next.finalizers.length === 0) {
      const changes: unknown[] = [];
      this.removeTree(stored, next, ctx, changes);
      return { ok: true, value: { resource: copy(next), changed: true, changes } };
    }
    this.resources[this.resources.indexOf(stored)] = next;
    return { ok: true, value: { resource: copy(next), changed: true, changes: [{ kind: 'upsert', revision: ctx.revision, resource: copy(next) }] } };
  }

  private mark(r: Res, ctx: ApplyContext): Res {
    const m = copy(r);
    m.deletionTimestamp = ctx.time;
    m.version = ctx.revision;
    m.generation = ctx.newGeneration;
    this.resources[this.resources.indexOf(r)] = m;
    return m;
  }

  private removeTree(r: Res, last: Res, ctx: ApplyContext, changes: unknown[]): void {
    this.resources.splice(this.resources.indexOf(r), 1);
    changes.push({ kind: 'delete', revision: ctx.revision, resource: copy(last) });
    const children = this.resources.filter((c) => c.owner !== null && c.owner.uid === r.id.uid).sort(byTuple);
    for (const c of children) {
      if (c.finalizers.length > 0) {
        if (c.deletionTimestamp === null) changes.push({ kind: 'upsert', revision: ctx.revision, resource: copy(this.mark(c, ctx)) });
      } else {
        this.removeTree(c, c, ctx, changes);
      }
    }
  }

  delete(input: DeleteInput, ctx: ApplyContext): Outcome {
    this.bump(ctx);
    const stored = this.find(input.id);
    const uid = input.id.uid ?? '';
    if (stored === undefined || (uid !== '' && uid !== stored.id.uid)) return { ok: true, value: { deleted: false, resource: null, changes: [] } };
    const ev = input.expectedVersion;
    if (ev !== undefined && ev !== stored.version) return fail('CAS_FAILED', { expected: ev, actual: stored.version });
    if (stored.deletionTimestamp !== null) return { ok: true, value: { deleted: false, resource: copy(stored), changes: [] } };
    if (stored.finalizers.length > 0) {
      const m = this.mark(stored, ctx);
      return { ok: true, value: { deleted: false, resource: copy(m), changes: [{ kind: 'upsert', revision: ctx.revision, resource: copy(m) }] } };
    }
    const changes: unknown[] = [];
    this.removeTree(stored, stored, ctx, changes);
    return { ok: true, value: { deleted: true, resource: copy(stored), changes } };
  }

  writeStatus(input: WriteStatusInput, ctx: ApplyContext): Outcome {
    this.bump(ctx);
    const stored = this.find(input.id);
    if (stored === undefined || stored.id.uid !== input.id.uid) return fail('NOT_FOUND');
    const ev = input.expectedVersion;
    if (ev !== undefined && ev !== stored.version) return fail('CAS_FAILED', { expected: ev, actual: stored.version });
    const next = copy(stored);
    const entry: StatusEntry = { observedGeneration: input.observedGeneration, conditions: copy(input.conditions), updatedAt: ctx.time };
    (next.status as Record<string, StatusEntry>)[input.key] = entry;
    next.version = ctx.revision;
    this.resources[this.resources.indexOf(stored)] = next;
    return { ok: true, value: { resource: copy(next), changes: [{ kind: 'upsert', revision: ctx.revision, resource: copy(next) }] } };
  }

  read(input: ReadInput): Outcome {
    const r = this.find(input);
    const uid = input.uid ?? '';
    if (r === undefined || (uid !== '' && r.id.uid !== uid)) return fail('NOT_FOUND');
    if (r.id.type.groupVersion !== input.type.groupVersion) {
      return fail('GROUP_VERSION_MISMATCH', { stored_type: `${r.id.type.group}.${r.id.type.groupVersion}.${r.id.type.kind}` });
    }
    return { ok: true, value: copy(r) };
  }

  list(q: ListQuery): Resource[] {
    return this.resources
      .filter(
        (r) =>
          r.id.type.group === q.group &&
          r.id.type.kind === q.kind &&
          (q.groupVersion === undefined || r.id.type.groupVersion === q.groupVersion) &&
          (q.partition === '*' || r.id.tenancy.partition === q.partition) &&
          (q.namespace === '*' || r.id.tenancy.namespace === q.namespace) &&
          r.id.name.startsWith(q.namePrefix ?? '') &&
          (q.ownerUid === undefined || (r.owner !== null && r.owner.uid === q.ownerUid)),
      )
      .sort(byTuple)
      .map(copy);
  }

  listByOwner(ownerUid: string): Resource[] {
    return this.resources
      .filter((r) => r.owner !== null && r.owner.uid === ownerUid)
      .sort(byTuple)
      .map(copy);
  }

  getByUid(uid: string): Resource | undefined {
    const r = this.resources.find((x) => x.id.uid === uid);
    return r === undefined ? undefined : copy(r);
  }

  /** Every resource in key order. */
  all(): Resource[] {
    return [...this.resources].sort(byTuple).map(copy);
  }

  /** A deep copy, for remembering the state at a point in time. */
  clone(): ReferenceStore {
    const c = new ReferenceStore();
    c.resources = copy(this.resources);
    c.revision = this.revision;
    return c;
  }
}

/** Data values for generators: note the two spellings of one object with different key order. */
export const SAMPLE_DATA: readonly JsonValue[] = [
  { x: 1 },
  { x: 2 },
  { x: 1, y: [1, 2] },
  { y: [1, 2], x: 1 },
  'text',
  null,
  [1, { a: null, b: true }],
];
