import type { Revision } from '../base/index.js';
import type { ListQuery, Resource } from '../store/index.js';

/**
 * Which resources a subscription sees: a topic (type) and a subject (tenancy with `*`
 * wildcards, name prefix). The same selection as a List, without the owner.
 */
export type WatchFilter = Omit<ListQuery, 'ownerUid'>;

export type EndCode = 'COMPACTED' | 'SLOW_CONSUMER' | 'RESET' | 'TIMEOUT' | 'CLOSED';

/**
 * What a subscriber receives, in order: the initial state (`change` events at a consistent
 * revision, unless resuming or `atTail`), one `tail`, then live `change`/`delete` events in
 * commit order, `bookmark`s when quiet, and at most one `end`. Events made by one log entry
 * (a cascading delete) share its revision; revisions strictly increase from entry to entry.
 */
export type StreamEvent =
  | { readonly type: 'change'; readonly revision: Revision; readonly resource: Resource }
  | { readonly type: 'delete'; readonly revision: Revision; readonly resource: Resource }
  | { readonly type: 'tail'; readonly revision: Revision }
  | { readonly type: 'bookmark'; readonly revision: Revision }
  | { readonly type: 'end'; readonly code: EndCode; readonly message: string; readonly revision: Revision };

export function matches(f: WatchFilter, r: Resource): boolean {
  const t = r.id.type;
  if (t.group !== f.group || t.kind !== f.kind) return false;
  if (f.groupVersion !== undefined && t.groupVersion !== f.groupVersion) return false;
  if (f.partition !== '*' && r.id.tenancy.partition !== f.partition) return false;
  if (f.namespace !== '*' && r.id.tenancy.namespace !== f.namespace) return false;
  if (f.namePrefix !== undefined && !r.id.name.startsWith(f.namePrefix)) return false;
  return true;
}

/** A stable key for a filter (the snapshot cache is shared per key). */
export function filterKey(f: WatchFilter): string {
  return JSON.stringify([f.group, f.kind, f.groupVersion ?? '', f.partition, f.namespace, f.namePrefix ?? '']);
}
