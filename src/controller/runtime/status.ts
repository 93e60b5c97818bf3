import { CairnError, ErrorCode } from '../../base/index.js';
import type { Condition, Resource, Status } from '../../client/index.js';
import type { ReconcileContext } from './types.js';

export interface WriteStatusOptions {
  /** The status key; default the controller's name (`ctx.controllerName`). */
  readonly key?: string;
  /** Write only if the resource is still at this version (CAS_FAILED otherwise). Default: no check. */
  readonly version?: string;
  /** The call's deadline (default: the client's). */
  readonly timeoutMs?: number;
}

export interface WriteStatusOutcome<D> {
  /** False when the stored status already said this: nothing was written. */
  readonly written: boolean;
  /** The resource as stored after the write, or the one given when nothing was written. */
  readonly resource: Resource<D>;
}

/** Whether two condition lists say the same (same conditions, same order). */
export function sameConditions(a: readonly Condition[], b: readonly Condition[]): boolean {
  return a.length === b.length && a.every((c, i) => {
    const d = b[i];
    return d !== undefined && c.type === d.type && c.state === d.state && c.reason === d.reason && c.message === d.message;
  });
}

/** Whether `status` already records `conditions` for the resource's current generation. */
export function statusUpToDate(resource: Resource<unknown>, status: Status | undefined, conditions: readonly Condition[]): boolean {
  return status !== undefined && status.observed_generation === resource.generation && sameConditions(status.conditions, conditions);
}

/**
 * Writes the controller's status on `resource` (WriteStatus, keyed by the controller's name)
 * with `observed_generation` = the resource's generation and these conditions, unless the
 * stored status already says exactly that. Skipping unchanged writes is what lets a
 * level-triggered controller settle: every status write changes the resource's version, which
 * the informer reports as an update, which reconciles the key again.
 *
 * The resource's uid goes with the write, so a resource deleted and re-created under the same
 * name is never given its predecessor's status (UID_MISMATCH). Cancelled with `ctx.signal`.
 */
export async function writeStatus<D>(
  ctx: Pick<ReconcileContext, 'client' | 'signal' | 'controllerName'>,
  resource: Resource<D>,
  conditions: readonly Condition[],
  opts: WriteStatusOptions = {},
): Promise<WriteStatusOutcome<D>> {
  const key = opts.key ?? ctx.controllerName;
  if (key === undefined || key === '') throw new CairnError(ErrorCode.INVALID_ARGUMENT, `writeStatus on ${resource.id.type} ${resource.id.name} needs a status key: the runtime's context names the controller, or pass opts.key`);
  if (resource.id.uid === '') throw new CairnError(ErrorCode.INVALID_ARGUMENT, `writeStatus on ${resource.id.type} ${resource.id.name} needs the resource's uid`);
  if (statusUpToDate(resource, resource.status[key], conditions)) return { written: false, resource };
  const stored = await ctx.client.writeStatus<D>(
    resource.id,
    key,
    { observed_generation: resource.generation, conditions, ...(opts.version !== undefined ? { version: opts.version } : {}) },
    { signal: ctx.signal, ...(opts.timeoutMs !== undefined ? { timeoutMs: opts.timeoutMs } : {}) },
  );
  return { written: true, resource: stored };
}
