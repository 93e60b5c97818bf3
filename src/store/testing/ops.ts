import fc from 'fast-check';
import type { CairnError, Result, Revision } from '../../base/index.js';
import type {
  ApplyContext,
  Condition,
  DeleteInput,
  JsonValue,
  ListQuery,
  Resource,
  ResourceId,
  StatusEntry,
  Tenancy,
  TypeRef,
  WriteInput,
  WriteStatusInput,
} from '../types.js';
import { type Outcome, ReferenceStore, SAMPLE_DATA, plain } from './reference.js';

/**
 * Random command sequences for property tests. An op is generated as a *spec* ("write the
 * second name with the stored version", "owner: some existing resource"), resolved against the
 * reference model's state when it runs, so CAS hits, uid matches and owner chains are common
 * instead of vanishingly rare.
 */

/** The names commands draw from. Overlapping prefixes ('a'/'ab', 'p'/'pq') test key encoding. */
export interface Universe {
  readonly groups: readonly string[];
  readonly kinds: readonly string[];
  readonly groupVersions: readonly string[];
  readonly partitions: readonly string[];
  readonly namespaces: readonly string[];
  readonly names: readonly string[];
}

/** Few identities: CAS, updates, finalizers and cascades collide often. */
export const SMALL: Universe = {
  groups: ['demo'],
  kinds: ['Artist', 'Art'],
  groupVersions: ['v1', 'v2'],
  partitions: ['', 'p'],
  namespaces: ['n', 'nm'],
  names: ['a', 'ab'],
};

/** Many identities across groups and tenancies: list filters and key order. */
export const WIDE: Universe = {
  groups: ['demo', 'dem'],
  kinds: ['Artist', 'Art'],
  groupVersions: ['v1', 'v2'],
  partitions: ['', 'p', 'pq'],
  namespaces: ['', 'n', 'nm'],
  names: ['a', 'ab', 'b', 'ba'],
};

export interface Target {
  readonly group: number;
  readonly kind: number;
  readonly partition: number;
  readonly namespace: number;
  readonly name: number;
}

export type UidSpec = 'none' | 'stored' | 'bogus' | 'empty';
export type VersionSpec = { readonly t: 'none' } | { readonly t: 'zero' } | { readonly t: 'stored' } | { readonly t: 'offset'; readonly d: number } | { readonly t: 'abs'; readonly v: number };
export type OwnerSpec = { readonly t: 'absent' } | { readonly t: 'null' } | { readonly t: 'existing'; readonly pick: number; readonly wrongUid: boolean; readonly gv: string } | { readonly t: 'missing' };
export type StatusSpec = 'absent' | 'stored' | 'empty' | 'other';

export type OpSpec =
  | {
      readonly op: 'write';
      readonly target: Target;
      /** Keep the stored data and group version (so finalizer-only and no-op writes happen). */
      readonly keep: boolean;
      readonly gv: number;
      readonly data: number;
      readonly metadata: number;
      readonly finalizers: number;
      readonly owner: OwnerSpec;
      readonly uid: UidSpec;
      readonly version: VersionSpec;
      readonly status: StatusSpec;
    }
  | { readonly op: 'delete'; readonly target: Target; readonly uid: UidSpec; readonly version: VersionSpec }
  | {
      readonly op: 'status';
      readonly target: Target;
      readonly uid: UidSpec;
      readonly key: string;
      readonly observed: 'stored' | 'other';
      readonly conditions: number;
      readonly version: VersionSpec;
    };

/** One spec plus the gap to the next revision (log entries that touch no resource). */
export interface Step {
  readonly spec: OpSpec;
  readonly gap: number;
}

export const METADATA: ReadonlyArray<Readonly<Record<string, string>> | undefined> = [undefined, {}, { team: 'a' }, { team: 'b' }, { env: 'x', team: 'a' }];
export const FINALIZERS: ReadonlyArray<readonly string[] | undefined> = [undefined, [], ['f1'], ['f1', 'f2'], ['f2'], ['f2', 'f1']];
export const CONDITIONS: ReadonlyArray<readonly Condition[]> = [
  [],
  [{ type: 'Ready', state: 'TRUE', reason: 'Ok', message: '' }],
  [{ type: 'Ready', state: 'FALSE', reason: 'Broken', message: 'it broke' }],
];

function targetArb(u: Universe): fc.Arbitrary<Target> {
  const idx = (xs: readonly unknown[]): fc.Arbitrary<number> => fc.integer({ min: 0, max: xs.length - 1 });
  return fc.record({ group: idx(u.groups), kind: idx(u.kinds), partition: idx(u.partitions), namespace: idx(u.namespaces), name: idx(u.names) });
}

const uidArb: fc.Arbitrary<UidSpec> = fc.oneof(
  { weight: 5, arbitrary: fc.constant<UidSpec>('none') },
  { weight: 3, arbitrary: fc.constant<UidSpec>('stored') },
  { weight: 1, arbitrary: fc.constant<UidSpec>('bogus') },
  { weight: 1, arbitrary: fc.constant<UidSpec>('empty') },
);

const versionArb: fc.Arbitrary<VersionSpec> = fc.oneof(
  { weight: 8, arbitrary: fc.constant<VersionSpec>({ t: 'none' }) },
  { weight: 5, arbitrary: fc.constant<VersionSpec>({ t: 'stored' }) },
  { weight: 2, arbitrary: fc.constant<VersionSpec>({ t: 'zero' }) },
  { weight: 2, arbitrary: fc.integer({ min: -2, max: 2 }).map((d): VersionSpec => ({ t: 'offset', d })) },
  { weight: 1, arbitrary: fc.integer({ min: 1, max: 60 }).map((v): VersionSpec => ({ t: 'abs', v })) },
);

function ownerArb(u: Universe): fc.Arbitrary<OwnerSpec> {
  return fc.oneof(
    { weight: 8, arbitrary: fc.constant<OwnerSpec>({ t: 'absent' }) },
    {
      weight: 8,
      arbitrary: fc.record({ pick: fc.nat(), wrongUid: fc.constant(false), gv: fc.constantFrom(...u.groupVersions, 'v9') }).map(
        (o): OwnerSpec => ({ t: 'existing', ...o }),
      ),
    },
    { weight: 1, arbitrary: fc.record({ pick: fc.nat(), gv: fc.constant('v1') }).map((o): OwnerSpec => ({ t: 'existing', ...o, wrongUid: true })) },
    { weight: 2, arbitrary: fc.constant<OwnerSpec>({ t: 'null' }) },
    { weight: 1, arbitrary: fc.constant<OwnerSpec>({ t: 'missing' }) },
  );
}

const statusArb: fc.Arbitrary<StatusSpec> = fc.oneof(
  { weight: 14, arbitrary: fc.constant<StatusSpec>('absent') },
  { weight: 3, arbitrary: fc.constant<StatusSpec>('stored') },
  { weight: 1, arbitrary: fc.constant<StatusSpec>('empty') },
  { weight: 2, arbitrary: fc.constant<StatusSpec>('other') },
);

export function opArb(u: Universe, weights: { write: number; delete: number; status: number } = { write: 6, delete: 2, status: 2 }): fc.Arbitrary<OpSpec> {
  const idx = (xs: readonly unknown[]): fc.Arbitrary<number> => fc.integer({ min: 0, max: xs.length - 1 });
  return fc.oneof(
    {
      weight: weights.write,
      arbitrary: fc.record({
        op: fc.constant('write' as const),
        target: targetArb(u),
        keep: fc.oneof({ weight: 2, arbitrary: fc.constant(false) }, { weight: 1, arbitrary: fc.constant(true) }),
        gv: idx(u.groupVersions),
        data: idx(SAMPLE_DATA),
        metadata: idx(METADATA),
        finalizers: fc.oneof({ weight: 3, arbitrary: fc.constant(0) }, { weight: 2, arbitrary: idx(FINALIZERS) }),
        owner: ownerArb(u),
        uid: uidArb,
        version: versionArb,
        status: statusArb,
      }),
    },
    { weight: weights.delete, arbitrary: fc.record({ op: fc.constant('delete' as const), target: targetArb(u), uid: uidArb, version: versionArb }) },
    {
      weight: weights.status,
      arbitrary: fc.record({
        op: fc.constant('status' as const),
        target: targetArb(u),
        uid: fc.oneof({ weight: 6, arbitrary: fc.constant<UidSpec>('stored') }, { weight: 1, arbitrary: fc.constant<UidSpec>('bogus') }),
        key: fc.constantFrom('c1', 'c2'),
        observed: fc.constantFrom('stored' as const, 'other' as const),
        conditions: idx(CONDITIONS),
        version: versionArb,
      }),
    },
  );
}

export function stepsArb(u: Universe, maxLength = 60, weights?: { write: number; delete: number; status: number }): fc.Arbitrary<Step[]> {
  // size 'max': without it fast-check keeps arrays short (about ten), and sequences that short
  // rarely revisit a name.
  return fc.array(fc.record({ spec: opArb(u, weights), gap: fc.integer({ min: 1, max: 3 }) }), { maxLength, size: 'max' });
}

// ---- Resolution -------------------------------------------------------------------------------

function at<T>(xs: readonly T[], i: number): T {
  return xs[i % xs.length] as T;
}

export function typeOf(u: Universe, t: Target, gv: number): TypeRef {
  return { group: at(u.groups, t.group), groupVersion: at(u.groupVersions, gv), kind: at(u.kinds, t.kind) };
}

export function tenancyOf(u: Universe, t: Target): Tenancy {
  return { partition: at(u.partitions, t.partition), namespace: at(u.namespaces, t.namespace) };
}

export function contextFor(revision: number): ApplyContext {
  return { revision: revision as Revision, time: `2026-01-01T00:00:00.${String(revision).padStart(3, '0')}Z#${revision}`, newUid: `uid-${revision}`, newGeneration: `gen-${revision}` };
}

export type Command =
  | { readonly op: 'write'; readonly input: WriteInput }
  | { readonly op: 'delete'; readonly input: DeleteInput }
  | { readonly op: 'status'; readonly input: WriteStatusInput };

/** Turns a spec into a concrete command against the reference model's current state. */
export function resolve(u: Universe, spec: OpSpec, ref: ReferenceStore): Command {
  let type = typeOf(u, spec.target, spec.op === 'write' ? spec.gv : 0);
  const tenancy = tenancyOf(u, spec.target);
  const name = at(u.names, spec.target.name);
  const stored = ref.resources.find(
    (r) => r.id.type.group === type.group && r.id.type.kind === type.kind && r.id.tenancy.partition === tenancy.partition && r.id.tenancy.namespace === tenancy.namespace && r.id.name === name,
  );
  const keep = spec.op === 'write' && spec.keep && stored !== undefined;
  if (keep) type = stored.id.type;
  const uid = (s: UidSpec): { uid?: string } => {
    switch (s) {
      case 'none':
        return {};
      case 'stored':
        return stored === undefined ? {} : { uid: stored.id.uid };
      case 'bogus':
        return { uid: 'uid-bogus' };
      case 'empty':
        return { uid: '' };
    }
  };
  const version = (v: VersionSpec): { expectedVersion?: Revision } => {
    const cur = stored?.version ?? 0;
    switch (v.t) {
      case 'none':
        return {};
      case 'zero':
        return { expectedVersion: 0 as Revision };
      case 'stored':
        return { expectedVersion: cur as Revision };
      case 'offset':
        return { expectedVersion: Math.max(0, cur + v.d) as Revision };
      case 'abs':
        return { expectedVersion: v.v as Revision };
    }
  };
  switch (spec.op) {
    case 'write': {
      const owner = ((): { owner?: ResourceId | null } => {
        const o = spec.owner;
        switch (o.t) {
          case 'absent':
            return {};
          case 'null':
            return { owner: null };
          case 'missing':
            return { owner: { type: { group: 'demo', groupVersion: 'v1', kind: 'Ghost' }, tenancy: { partition: '', namespace: '' }, name: 'ghost', uid: 'uid-ghost' } };
          case 'existing': {
            const all = ref.all();
            if (all.length === 0) return {};
            const pick = at(all, o.pick);
            return { owner: { type: { ...pick.id.type, groupVersion: o.gv }, tenancy: pick.id.tenancy, name: pick.id.name, uid: o.wrongUid ? 'uid-wrong' : pick.id.uid } };
          }
        }
      })();
      const statusSpec = ((): { status?: Readonly<Record<string, StatusEntry>> } => {
        switch (spec.status) {
          case 'absent':
            return {};
          case 'stored':
            return { status: stored?.status ?? {} };
          case 'empty':
            return { status: {} };
          case 'other':
            return { status: { c9: { observedGeneration: 'x', conditions: [], updatedAt: 'then' } } };
        }
      })();
      const metadata = METADATA[spec.metadata];
      const finalizers = FINALIZERS[spec.finalizers];
      const input: WriteInput = {
        id: { type, tenancy, name, ...uid(spec.uid) },
        data: keep ? stored.data : (SAMPLE_DATA[spec.data] as JsonValue),
        ...owner,
        ...(metadata !== undefined ? { metadata } : {}),
        ...(finalizers !== undefined ? { finalizers } : {}),
        ...statusSpec,
        ...version(spec.version),
      };
      return { op: 'write', input: structuredClone(input) };
    }
    case 'delete':
      return { op: 'delete', input: structuredClone({ id: { type, tenancy, name, ...uid(spec.uid) }, ...version(spec.version) }) };
    case 'status': {
      const input: WriteStatusInput = {
        id: { type, tenancy, name, uid: uid(spec.uid).uid ?? 'uid-absent' },
        key: spec.key,
        observedGeneration: spec.observed === 'stored' ? (stored?.generation ?? 'none') : 'other',
        conditions: CONDITIONS[spec.conditions] as readonly Condition[],
        ...version(spec.version),
      };
      return { op: 'status', input: structuredClone(input) };
    }
  }
}

/** A store result in the reference's terms (details compared only where they carry a verdict). */
export function outcomeOf(r: Result<unknown, CairnError>): Outcome {
  if (r.ok) return { ok: true, value: plain(r.value) };
  const d = r.error.details;
  const details =
    r.error.code === 'CAS_FAILED' || r.error.code === 'UID_MISMATCH'
      ? { expected: d['expected'], actual: d['actual'] }
      : r.error.code === 'GROUP_VERSION_MISMATCH'
        ? { stored_type: d['stored_type'] }
        : {};
  return { ok: false, code: r.error.code, details };
}

/** The reference's outcome with details reduced the same way. */
export function normalizeReference(o: Outcome): Outcome {
  if (o.ok) return { ok: true, value: plain(o.value) };
  return o.code === 'CAS_FAILED' || o.code === 'UID_MISMATCH' || o.code === 'GROUP_VERSION_MISMATCH' ? o : { ok: false, code: o.code, details: {} };
}

/** A list query with the owner uid still to be picked from the resources that exist then. */
export type QuerySpec = Omit<ListQuery, 'ownerUid'> & { readonly owner?: number };

/** Random list queries over a universe, including values that match nothing. */
export function querySpecArb(u: Universe): fc.Arbitrary<QuerySpec> {
  return fc
    .record({
      group: fc.constantFrom(...u.groups),
      kind: fc.constantFrom(...u.kinds),
      groupVersion: fc.option(fc.constantFrom(...u.groupVersions, 'v9'), { nil: undefined, freq: 2 }),
      partition: fc.constantFrom('*', '*', ...u.partitions, 'zz'),
      namespace: fc.constantFrom('*', '*', ...u.namespaces, 'zz'),
      namePrefix: fc.option(fc.constantFrom('', 'a', 'ab', 'b', 'ba', 'abc', 'z'), { nil: undefined, freq: 2 }),
      owner: fc.oneof({ weight: 5, arbitrary: fc.constant(undefined) }, { weight: 2, arbitrary: fc.nat() }),
    })
    .map(({ owner, groupVersion, namePrefix, ...q }): QuerySpec => ({
      ...q,
      ...(groupVersion !== undefined ? { groupVersion } : {}),
      ...(namePrefix !== undefined ? { namePrefix } : {}),
      ...(owner !== undefined ? { owner } : {}),
    }));
}

/** Picks the owner uid: one of `uids` (the owners that exist), or one that matches nothing. */
export function resolveQuery(spec: QuerySpec, uids: readonly string[]): ListQuery {
  const { owner, ...q } = spec;
  if (owner === undefined) return q;
  return { ...q, ownerUid: owner % 5 === 4 || uids.length === 0 ? 'uid-nobody' : at(uids, owner) };
}

/** Plain copies of resources, for comparison. */
export function plainAll(rs: Iterable<Resource>): Resource[] {
  return [...rs].map((r) => plain(r));
}
