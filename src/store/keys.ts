import type { ResourceId, Tenancy, TypeRef } from './types.js';

/**
 * Index keys. The primary key is `group \0 kind \0 partition \0 namespace \0 name`: identity
 * without the group version, ordered so that one (group, kind) is a contiguous range sorted by
 * (partition, namespace, name), and a fixed partition, namespace or name prefix narrows the
 * range further. NUL sorts before every other character, so a field that is a prefix of another
 * ("a" and "ab") orders the same as the tuple would. Key parts never contain NUL (validated).
 */
export const SEP = '\u0000';

export function resourceKey(group: string, kind: string, tenancy: Tenancy, name: string): string {
  return group + SEP + kind + SEP + tenancy.partition + SEP + tenancy.namespace + SEP + name;
}

export function keyOfId(id: ResourceId): string {
  return resourceKey(id.type.group, id.type.kind, id.tenancy, id.name);
}

/** The owner index: `ownerUid \0 childKey`, so one owner's children are one range, in key order. */
export function ownerKey(ownerUid: string, childKey: string): string {
  return ownerUid + SEP + childKey;
}

export function hasNul(...parts: readonly string[]): boolean {
  for (const p of parts) if (p.includes(SEP)) return true;
  return false;
}

/** `demo.v1.Artist`. */
export function formatType(type: TypeRef): string {
  return `${type.group}.${type.groupVersion}.${type.kind}`;
}

/** `demo.v1.Artist default/ns/korn`, leaving out the tenancy fields the scope lacks. */
export function formatName(type: TypeRef, tenancy: Tenancy, name: string): string {
  const path = [tenancy.partition, tenancy.namespace, name].filter((p, i) => i === 2 || p !== '').join('/');
  return `${formatType(type)} ${path}`;
}
