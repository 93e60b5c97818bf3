import type { CairnClient, CacheSpec, ListOptions } from '../../client/index.js';
import { isCairnClientError } from '../../client/index.js';
import type { TypeScope } from './types.js';

/** The cache spec that follows every resource of a type of this scope (`*` where the scope has the field). */
export function cacheSpecFor(type: string, scope: TypeScope): CacheSpec {
  switch (scope) {
    case 'namespace':
      return { type, partition: '*', namespace: '*' };
    case 'partition':
      return { type, partition: '*' };
    case 'cluster':
      return { type };
  }
}

/**
 * Learns a type's scope from the server, which refuses a wildcard in a tenancy field the type
 * does not have (INVALID_ARGUMENT): an empty list (`namePrefix: '-'` matches no DNS label) is
 * tried with both wildcards, then with the partition one, then with none. An unknown type fails
 * all three; its last error is thrown.
 */
export async function probeScope(client: Pick<CairnClient, 'list'>, type: string, signal?: AbortSignal): Promise<TypeScope> {
  const tries: Array<[TypeScope, ListOptions]> = [
    ['namespace', { partition: '*', namespace: '*' }],
    ['partition', { partition: '*' }],
    ['cluster', {}],
  ];
  let last: unknown;
  for (const [scope, tenancy] of tries) {
    try {
      await client.list(type, { ...tenancy, namePrefix: '-', consistency: 'stale', ...(signal !== undefined ? { signal } : {}) });
      return scope;
    } catch (e) {
      if (!isCairnClientError(e, 'INVALID_ARGUMENT')) throw e;
      last = e;
    }
  }
  throw last;
}
