/**
 * The SPU controller: SPU liveness. Reports each SPU `Init` (no heartbeat yet, or its id is
 * taken by an older SPU), `Online` (heartbeats arriving) or `Offline` (none for the timeout),
 * under `streaming.v1.spu-controller`. See liveness.ts for how heartbeats are judged.
 */
import { keyOf, type Resource } from '../../client/index.js';
import { heartbeatToken, resolutionCondition, resolutionOf, SPU_TYPE, StatusKey, STREAMING_SCOPE, type SpuSpec } from '../../types/index.js';
import type { ControllerSpec, ReconcileContext, ReconcileResult } from '../runtime/types.js';
import { decideLiveness, spuIdConflicts, type HeartbeatMemory } from './liveness.js';
import { LatestCaches, writeStatusIfChanged, type StreamingLogger } from './shared.js';

export interface SpuControllerOptions {
  readonly spuTimeoutMs: number;
  readonly logger?: StreamingLogger | undefined;
}

export function spuController(opts: SpuControllerOptions): ControllerSpec {
  /** By cache key: the incarnation (uid) and what was seen of its heartbeat. */
  const memory = new Map<string, { uid: string; seen: HeartbeatMemory | undefined }>();
  const caches = new LatestCaches();
  return {
    name: StatusKey.spu,
    managedType: SPU_TYPE,
    managedScope: STREAMING_SCOPE,
    watches: [
      {
        // An SPU that changes or goes may free (or take) the id of another: look at those again.
        type: SPU_TYPE,
        scope: STREAMING_SCOPE,
        map: (changed) => {
          const id = (changed.data as Partial<SpuSpec>).id;
          return caches
            .list<SpuSpec>(SPU_TYPE)
            .filter((s) => s.data.id === id && s.id.uid !== changed.id.uid)
            .map(keyOf);
        },
      },
    ],
    async reconcile(key: string, ctx: ReconcileContext): Promise<ReconcileResult | void> {
      caches.bind(ctx);
      const cache = ctx.cache<SpuSpec>(SPU_TYPE);
      const spu = cache.get(key);
      if (spu === undefined) {
        memory.delete(key);
        return;
      }
      const all = cache.list();
      const conflict = spuIdConflicts(all.map((s: Resource<SpuSpec>) => ({ name: s.id.name, uid: s.id.uid, id: s.data.id }))).get(spu.id.name);
      const remembered = memory.get(key);
      const reported = resolutionOf(spu, StatusKey.spu);
      const d = decideLiveness({
        heartbeat: heartbeatToken(spu),
        memory: remembered?.uid === spu.id.uid ? remembered.seen : undefined,
        reported,
        nowMs: ctx.nowMs(),
        timeoutMs: opts.spuTimeoutMs,
        conflict,
      });
      memory.set(key, { uid: spu.id.uid, seen: d.memory });
      const outcome = await writeStatusIfChanged(ctx, spu, StatusKey.spu, [resolutionCondition(d.resolution, d.message)]);
      if (outcome === 'written' && d.resolution !== reported) {
        opts.logger?.info?.({ spu: spu.id.name, id: spu.data.id, from: reported, to: d.resolution, why: d.message }, 'SPU resolution changed');
      }
      return d.recheckAfterMs !== undefined ? { requeueAfterMs: d.recheckAfterMs } : undefined;
    },
  };
}
