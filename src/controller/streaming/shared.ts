/**
 * What the streaming controllers share: status writes that skip no-op reports and treat a lost
 * compare-and-swap as "look again", the caches their watch mappers read, and a logger port.
 */
import { isCairnClientError, keyOf, type Condition, type Resource, type ResourceId, type ResourceRef } from '../../client/index.js';
import type { ConditionView } from '../../types/index.js';
import type { ReconcileContext } from '../runtime/types.js';

/** A pino logger fits. */
export interface StreamingLogger {
  info?(obj: object, msg: string): void;
  warn?(obj: object, msg: string): void;
}

/** Names one incarnation of a stored resource (writes and deletes then touch only it). */
export function refOf(r: Resource<unknown> | ResourceId): ResourceRef {
  const id = 'id' in r ? r.id : r;
  return { type: id.type, name: id.name, tenancy: id.tenancy, uid: id.uid };
}

function sameConditions(a: readonly ConditionView[], b: readonly ConditionView[]): boolean {
  return a.length === b.length && a.every((c, i) => {
    const d = b[i] as ConditionView;
    return c.type === d.type && c.state === d.state && c.reason === d.reason && c.message === d.message;
  });
}

export type StatusWriteOutcome = 'written' | 'unchanged' | 'conflict';

/**
 * Writes `conditions` under `key` for the resource's current generation, compare-and-swap on
 * the version the cache shows. Skips the write when the stored report says the same thing
 * already (so a reconcile that decides nothing new writes nothing, and its own status event
 * does not loop). `conflict`: the resource changed (or went) since the cache saw it; its
 * change event brings the key back, so there is nothing to do but return.
 */
export async function writeStatusIfChanged(ctx: ReconcileContext, r: Resource<unknown>, key: string, conditions: readonly ConditionView[]): Promise<StatusWriteOutcome> {
  const stored = r.status[key];
  if (stored !== undefined && stored.observed_generation === r.generation && sameConditions(stored.conditions, conditions)) return 'unchanged';
  try {
    await ctx.client.writeStatus(refOf(r), key, { observed_generation: r.generation, conditions: conditions as Condition[], version: r.version }, { signal: ctx.signal });
    return 'written';
  } catch (e) {
    if (isCairnClientError(e, 'CAS_FAILED') || isCairnClientError(e, 'NOT_FOUND')) return 'conflict';
    throw e;
  }
}

/** Whether a create failed only because the name exists (the cache had not seen it yet). */
export function isAlreadyExists(e: unknown): boolean {
  return isCairnClientError(e, 'CAS_FAILED');
}

/**
 * The caches of the controller's latest reconcile, for its watch mappers: the contract's
 * `map(changed)` sees only the changed resource, but "which waiting topics does this SPU
 * wake?" needs the topic cache. Before the first reconcile of a session (a start, a new
 * leader, a restart of the caches) the mapper finds nothing, or the previous session's closed
 * cache (readable, stale): that can only queue a key whose reconcile finds nothing to do, or
 * miss one that is queued anyway, since the runtime queues every key of the managed type when
 * its caches first fill, before any reconcile, and those reconciles read the caches as they
 * are then.
 */
export class LatestCaches {
  private ctx: ReconcileContext | undefined;

  bind(ctx: ReconcileContext): void {
    this.ctx = ctx;
  }

  list<D>(type: string): Array<Resource<D>> {
    return this.ctx?.cache<D>(type).list() ?? [];
  }
}

/** Whether two `group.version.Kind` strings name the same group and kind (any version). */
export function sameKind(a: string, b: string): boolean {
  const [ga, , ka] = a.split('.');
  const [gb, , kb] = b.split('.');
  return ga === gb && ka === kb;
}

/** The cache key of a resource's owner, when the owner is of `type`'s kind. */
export function ownerKeyOf(r: Resource<unknown>, type: string): string[] {
  return r.owner !== null && sameKind(r.owner.type, type) ? [keyOf(r.owner)] : [];
}
