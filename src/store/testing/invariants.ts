import { resourceBytes } from '../size.js';
import type { StoreReader } from '../types.js';

/**
 * The store's structural invariants, checked from the outside through the read API. Returns
 * the first violation as a sentence, or null. Used after every step of property tests (and fit
 * for the simulator's per-step checks).
 */
export function checkInvariants(s: StoreReader): string | null {
  let count = 0;
  let bytes = 0;
  let previous: string | null = null;
  for (const r of s.all()) {
    count++;
    bytes += resourceBytes(r);
    const id = `${r.id.type.group}.${r.id.type.kind} ${r.id.tenancy.partition}/${r.id.tenancy.namespace}/${r.id.name}`;
    const key = [r.id.type.group, r.id.type.kind, r.id.tenancy.partition, r.id.tenancy.namespace, r.id.name].join('\u0000');
    if (previous !== null && !(previous < key)) return `${id} is out of key order`;
    previous = key;
    if (!Object.isFrozen(r) || !Object.isFrozen(r.id) || !Object.isFrozen(r.finalizers) || !Object.isFrozen(r.metadata) || !Object.isFrozen(r.status)) {
      return `${id} is not frozen`;
    }
    if (typeof r.data === 'object' && r.data !== null && !Object.isFrozen(r.data)) return `${id} data is not frozen`;
    if (s.getByUid(r.id.uid) !== r) return `${id}: getByUid(${r.id.uid}) does not return it`;
    if (s.get({ group: r.id.type.group, kind: r.id.type.kind, tenancy: r.id.tenancy, name: r.id.name }) !== r) return `${id}: get does not return it`;
    if (r.version > s.revision) return `${id} has version ${r.version} after the store revision ${s.revision}`;
    if (r.deletionTimestamp !== null && r.finalizers.length === 0) return `${id} is marked for deletion without finalizers`;
    if (r.owner !== null) {
      const owner = s.getByUid(r.owner.uid);
      if (owner === undefined && r.deletionTimestamp === null) return `${id} is an orphan: owner uid ${r.owner.uid} is gone and it is not being deleted`;
      if (!s.listByOwner(r.owner.uid).includes(r)) return `${id} is missing from its owner's index`;
    }
    for (const c of s.listByOwner(r.id.uid)) {
      if (c.owner?.uid !== r.id.uid) return `${id}: listByOwner returned ${c.id.name}, owned by ${c.owner?.uid ?? 'nobody'}`;
    }
  }
  if (count !== s.size) return `size is ${s.size} but ${count} resources are stored`;
  // The incremental figure the quota is decided on equals a from-scratch sum.
  if (bytes !== s.dataBytes) return `dataBytes is ${s.dataBytes} but the stored resources add up to ${bytes}`;
  return null;
}
