import type { AclTarget } from '../auth/index.js';

/**
 * The ACL target of lease `id` (docs/security.md "Every door checks"): the pseudo-type
 * `cairn.v1.ClusterLease`, cluster-scoped, named by the lease id, so a rule's `name_prefix`
 * can give a token its own leases. `write` grants, revokes, keeps alive and attaches; `read`
 * reads its time to live; `list` lists (filtered lease by lease). Its own module so both the
 * lease service and the resource service (attaching) use it without importing each other.
 */
export function leaseAclTarget(id: string): AclTarget {
  return { group: 'cairn', groupVersion: 'v1', kind: 'ClusterLease', partition: '', namespace: '', name: id };
}
