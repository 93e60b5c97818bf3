/**
 * What an SPU group should do about its managed SPUs, decided purely (the SPU group controller
 * feeds it and acts on the plan).
 *
 * A group of `replicas` with `minId` wants SPUs with ids minId .. minId + replicas - 1, named
 * `<group>-<id>` and owned by the group. SPUs it owns outside that set are removed (scaling down
 * removes the highest ids); missing ones are created; owned ones whose spec drifted are
 * rewritten. If any of its ids or names is taken by an SPU the group does not own, the group is
 * Invalid and nothing is changed until that SPU goes.
 */
import { MANAGED_PRIVATE_PORT, MANAGED_PUBLIC_PORT, managedSpuName, SpuGroupResolution, SpuType, type SpuSpec } from '../../types/index.js';

export interface SpuGroupView {
  readonly name: string;
  readonly uid: string;
  readonly replicas: number;
  readonly minId: number;
  readonly rack?: string | undefined;
}

export interface SpuView {
  readonly name: string;
  readonly uid: string;
  /** The owner's uid, if any. */
  readonly ownerUid: string | undefined;
  readonly version: string;
  readonly spec: SpuSpec;
}

export type SpuGroupPlan =
  | { readonly resolution: typeof SpuGroupResolution.Invalid; readonly message: string }
  | {
      readonly resolution: typeof SpuGroupResolution.Reserved;
      readonly message: string;
      /** Highest id first. */
      readonly remove: ReadonlyArray<{ readonly name: string; readonly uid: string; readonly id: number }>;
      /** Lowest id first. */
      readonly create: ReadonlyArray<{ readonly name: string; readonly spec: SpuSpec }>;
      readonly update: ReadonlyArray<{ readonly name: string; readonly uid: string; readonly version: string; readonly spec: SpuSpec }>;
    };

/** The spec of the group's managed SPU with `id`: endpoints on its own name (a host name in the deployment). */
export function managedSpuSpec(group: SpuGroupView, id: number): SpuSpec {
  const host = managedSpuName(group.name, id);
  return {
    id,
    type: SpuType.managed,
    ...(group.rack !== undefined ? { rack: group.rack } : {}),
    publicEndpoint: { host, port: MANAGED_PUBLIC_PORT },
    privateEndpoint: { host, port: MANAGED_PRIVATE_PORT },
  };
}

/** Specs compared field by field (key order does not matter). */
function sameSpec(a: SpuSpec, b: SpuSpec): boolean {
  return (
    a.id === b.id &&
    a.type === b.type &&
    a.rack === b.rack &&
    a.publicEndpoint.host === b.publicEndpoint.host &&
    a.publicEndpoint.port === b.publicEndpoint.port &&
    a.privateEndpoint.host === b.privateEndpoint.host &&
    a.privateEndpoint.port === b.privateEndpoint.port
  );
}

function listSome(items: readonly string[], max = 5): string {
  return items.length <= max ? items.join(', ') : `${items.slice(0, max).join(', ')} and ${items.length - max} more`;
}

export function planSpuGroup(group: SpuGroupView, spus: readonly SpuView[]): SpuGroupPlan {
  const wanted = new Map<string, number>(); // name -> id
  for (let i = 0; i < group.replicas; i++) wanted.set(managedSpuName(group.name, group.minId + i), group.minId + i);
  const ids = new Set(wanted.values());

  const foreign = spus.filter((s) => s.ownerUid !== group.uid && (ids.has(s.spec.id) || wanted.has(s.name)));
  if (foreign.length > 0) {
    const taken = [...foreign].sort((a, b) => a.spec.id - b.spec.id).map((s) => `${s.name} (id ${s.spec.id})`);
    return {
      resolution: SpuGroupResolution.Invalid,
      message: `SPU ids ${group.minId}..${group.minId + group.replicas - 1} are not free: taken by ${listSome(taken)}, which this group does not own`,
    };
  }

  const owned = spus.filter((s) => s.ownerUid === group.uid);
  const remove = owned
    .filter((s) => !wanted.has(s.name))
    .map((s) => ({ name: s.name, uid: s.uid, id: s.spec.id }))
    .sort((a, b) => b.id - a.id || (a.name < b.name ? -1 : 1));
  const byName = new Map(owned.map((s) => [s.name, s]));
  const create: Array<{ name: string; spec: SpuSpec }> = [];
  const update: Array<{ name: string; uid: string; version: string; spec: SpuSpec }> = [];
  for (const [name, id] of wanted) {
    const spec = managedSpuSpec(group, id);
    const have = byName.get(name);
    if (have === undefined) create.push({ name, spec });
    else if (!sameSpec(have.spec, spec)) update.push({ name, uid: have.uid, version: have.version, spec });
  }
  const message = group.replicas === 0 ? 'no SPUs (replicas 0)' : `${group.replicas} SPU${group.replicas === 1 ? '' : 's'}, ids ${group.minId}..${group.minId + group.replicas - 1}`;
  return { resolution: SpuGroupResolution.Reserved, message, remove, create, update };
}
