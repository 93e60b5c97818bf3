/**
 * The partition controller: elects a partition's leader (partition.ts) and reports, under
 * `streaming.v1.partition-controller`, the resolution (`Online`, `LeaderOffline`, `Offline`),
 * the leader (`Leader` condition, message = SPU id; reason `Assigned` when it is the spec's
 * leader, `Elected` when a follower took over) and the live replicas (`LiveReplicas`, message
 * = ids, leader first). Any SPU change wakes the partitions with a replica on that SPU.
 */
import { keyOf, type Resource } from '../../client/index.js';
import {
  ConditionType,
  formatIds,
  PARTITION_TYPE,
  partitionObserved,
  reportedOffsets,
  resolutionCondition,
  resolutionOf,
  SPU_TYPE,
  SpuResolution,
  StatusKey,
  STREAMING_SCOPE,
  type ConditionView,
  type PartitionSpec,
  type SpuSpec,
} from '../../types/index.js';
import type { ControllerSpec, ReconcileContext, ReconcileResult } from '../runtime/types.js';
import { electLeader, type ElectionResult } from './partition.js';
import { LatestCaches, writeStatusIfChanged, type StreamingLogger } from './shared.js';

export interface PartitionControllerOptions {
  readonly maxLagOffsets: number;
  readonly logger?: StreamingLogger | undefined;
}

/** The conditions the partition controller reports for an election result. */
export function partitionConditions(r: ElectionResult, assignedLeader: number, online: ReadonlySet<number>): ConditionView[] {
  return [
    resolutionCondition(r.resolution, r.message),
    { type: ConditionType.leader, state: online.has(r.leader) ? 'TRUE' : 'FALSE', reason: r.leader === assignedLeader ? 'Assigned' : 'Elected', message: String(r.leader) },
    { type: ConditionType.liveReplicas, state: r.live.length > 0 ? 'TRUE' : 'FALSE', reason: 'Online', message: formatIds(r.live) },
  ];
}

export function onlineSpuIds(spus: ReadonlyArray<Resource<SpuSpec>>): Set<number> {
  return new Set(spus.filter((s) => resolutionOf(s, StatusKey.spu) === SpuResolution.Online).map((s) => s.data.id));
}

export function partitionController(opts: PartitionControllerOptions): ControllerSpec {
  const caches = new LatestCaches();
  return {
    name: StatusKey.partition,
    managedType: PARTITION_TYPE,
    managedScope: STREAMING_SCOPE,
    watches: [
      {
        type: SPU_TYPE,
        scope: STREAMING_SCOPE,
        map: (changed) => {
          const id = (changed.data as Partial<SpuSpec>).id;
          return caches
            .list<PartitionSpec>(PARTITION_TYPE)
            .filter((p) => typeof id === 'number' && p.data.replicas.includes(id))
            .map(keyOf);
        },
      },
    ],
    async reconcile(key: string, ctx: ReconcileContext): Promise<ReconcileResult | void> {
      caches.bind(ctx);
      const p = ctx.cache<PartitionSpec>(PARTITION_TYPE).get(key);
      if (p === undefined) return;
      const online = onlineSpuIds(ctx.cache<SpuSpec>(SPU_TYPE).list());
      const observed = partitionObserved(p);
      const r = electLeader({
        replicas: p.data.replicas,
        assignedLeader: p.data.leader,
        currentLeader: observed.leader,
        online,
        offsets: reportedOffsets(p, p.data.replicas),
        maxLag: opts.maxLagOffsets,
      });
      const outcome = await writeStatusIfChanged(ctx, p, StatusKey.partition, partitionConditions(r, p.data.leader, online));
      if (outcome !== 'written') return;
      const log = { partition: p.id.name, leader: r.leader, resolution: r.resolution };
      if (r.elected !== undefined) opts.logger?.info?.({ ...log, from: r.elected.from, lag: r.elected.lag }, 'partition leader moved to an online follower');
      else if (r.resolution !== observed.resolution) opts.logger?.info?.({ ...log, from: observed.resolution, why: r.message }, 'partition resolution changed');
    },
  };
}
