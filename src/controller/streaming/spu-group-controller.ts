/**
 * The SPU group controller: creates, scales and checks a group's managed SPUs (spu-group.ts
 * decides), and reports the group `Invalid` (with the reason) or `Reserved` under
 * `streaming.v1.spu-group-controller`.
 *
 * Deletes name the SPU's uid rather than a version: an SPU's version moves with every heartbeat,
 * and the decision depends only on its name and owner, which never change. Creates are
 * create-only (version 0) with the group as owner, so deleting the group deletes its SPUs.
 */
import { keyOf, type Resource } from '../../client/index.js';
import { resolutionCondition, SPU_GROUP_TYPE, SPU_TYPE, StatusKey, STREAMING_SCOPE, type SpuGroupSpec, type SpuSpec } from '../../types/index.js';
import type { ControllerSpec, ReconcileContext, ReconcileResult } from '../runtime/types.js';
import { isAlreadyExists, LatestCaches, ownerKeyOf, writeStatusIfChanged, type StreamingLogger } from './shared.js';
import { planSpuGroup, type SpuGroupView, type SpuView } from './spu-group.js';

export interface SpuGroupControllerOptions {
  readonly logger?: StreamingLogger | undefined;
}

function groupView(g: Resource<SpuGroupSpec>): SpuGroupView {
  return { name: g.id.name, uid: g.id.uid, replicas: g.data.replicas, minId: g.data.minId, rack: g.data.rack };
}

function spuView(s: Resource<SpuSpec>): SpuView {
  return { name: s.id.name, uid: s.id.uid, ownerUid: s.owner?.uid, version: s.version, spec: s.data };
}

/** Whether an SPU bears on a group: it holds one of the group's ids or names. */
function touches(g: Resource<SpuGroupSpec>, spu: Resource<unknown>): boolean {
  const id = (spu.data as Partial<SpuSpec>).id;
  const { minId, replicas } = g.data;
  if (typeof id === 'number' && id >= minId && id < minId + replicas) return true;
  return spu.id.name.startsWith(`${g.id.name}-`) && /^[0-9]+$/.test(spu.id.name.slice(g.id.name.length + 1));
}

export function spuGroupController(opts: SpuGroupControllerOptions = {}): ControllerSpec {
  const caches = new LatestCaches();
  return {
    name: StatusKey.spuGroup,
    managedType: SPU_GROUP_TYPE,
    managedScope: STREAMING_SCOPE,
    watches: [
      {
        // Its own SPUs (created, changed, deleted by hand), and SPUs of others that take or free its ids.
        type: SPU_TYPE,
        scope: STREAMING_SCOPE,
        map: (changed) => [
          ...new Set([
            ...ownerKeyOf(changed, SPU_GROUP_TYPE),
            ...caches
              .list<SpuGroupSpec>(SPU_GROUP_TYPE)
              .filter((g) => touches(g, changed))
              .map(keyOf),
          ]),
        ],
      },
    ],
    async reconcile(key: string, ctx: ReconcileContext): Promise<ReconcileResult | void> {
      caches.bind(ctx);
      const group = ctx.cache<SpuGroupSpec>(SPU_GROUP_TYPE).get(key);
      if (group === undefined) return; // its SPUs went with it (owner cascade)
      const plan = planSpuGroup(groupView(group), ctx.cache<SpuSpec>(SPU_TYPE).list().map(spuView));
      if (plan.resolution === 'Invalid') {
        await writeStatusIfChanged(ctx, group, StatusKey.spuGroup, [resolutionCondition(plan.resolution, plan.message)]);
        return;
      }
      const log = { group: group.id.name };
      for (const r of plan.remove) {
        await ctx.client.delete({ type: SPU_TYPE, name: r.name, uid: r.uid }, { signal: ctx.signal });
        opts.logger?.info?.({ ...log, spu: r.name, id: r.id }, 'removed a managed SPU (scaled down)');
      }
      for (const c of plan.create) {
        try {
          await ctx.client.write({ type: SPU_TYPE, name: c.name }, { data: c.spec, owner: group.id, version: '0' }, { signal: ctx.signal });
          opts.logger?.info?.({ ...log, spu: c.name, id: c.spec.id }, 'created a managed SPU');
        } catch (e) {
          if (!isAlreadyExists(e)) throw e; // else the cache had not seen it: its event brings this group back
        }
      }
      for (const u of plan.update) {
        try {
          await ctx.client.write({ type: SPU_TYPE, name: u.name, uid: u.uid }, { data: u.spec, version: u.version }, { signal: ctx.signal });
        } catch (e) {
          if (!isAlreadyExists(e)) throw e; // changed since: its event brings this group back
        }
      }
      await writeStatusIfChanged(ctx, group, StatusKey.spuGroup, [resolutionCondition(plan.resolution, plan.message)]);
    },
  };
}

