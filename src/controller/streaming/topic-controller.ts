/**
 * The topic controller: runs the topic state machine (topic.ts) with the fair replica
 * scheduler, creates a provisioned topic's Partition resources (owned by the topic, so deleting
 * the topic deletes them), and reports the resolution under `streaming.v1.topic-controller`.
 *
 * Waiting topics (every state but Provisioned) are woken by any SPU change (a new SPU, one
 * coming online) and also looked at again every `waitingRecheckMs`, a backstop. Partition
 * changes wake the topic that owns them (a deleted partition is created again).
 */
import { keyOf, type Resource } from '../../client/index.js';
import {
  PARTITION_TYPE,
  resolutionCondition,
  resolutionOf,
  SPU_TYPE,
  SpuResolution,
  StatusKey,
  STREAMING_SCOPE,
  TOPIC_TYPE,
  TopicResolution,
  type PartitionSpec,
  type SpuSpec,
  type TopicSpec,
} from '../../types/index.js';
import type { ControllerSpec, ReconcileContext, ReconcileResult } from '../runtime/types.js';
import { isAlreadyExists, LatestCaches, ownerKeyOf, writeStatusIfChanged, type StreamingLogger } from './shared.js';
import { decideTopic, type PartitionView, type SpuState } from './topic.js';

export interface TopicControllerOptions {
  readonly waitingRecheckMs: number;
  readonly logger?: StreamingLogger | undefined;
}

/** SPUs the scheduler may use: reported Online by the SPU controller. */
export function spuStates(spus: ReadonlyArray<Resource<SpuSpec>>): SpuState[] {
  return spus.map((s) => ({ id: s.data.id, online: resolutionOf(s, StatusKey.spu) === SpuResolution.Online }));
}

export function partitionView(p: Resource<PartitionSpec>): PartitionView {
  return { name: p.id.name, ownerUid: p.owner?.uid, spec: p.data };
}

export function topicController(opts: TopicControllerOptions): ControllerSpec {
  const caches = new LatestCaches();
  return {
    name: StatusKey.topic,
    managedType: TOPIC_TYPE,
    managedScope: STREAMING_SCOPE,
    watches: [
      {
        type: SPU_TYPE,
        scope: STREAMING_SCOPE,
        map: () =>
          caches
            .list<TopicSpec>(TOPIC_TYPE)
            .filter((t) => resolutionOf(t, StatusKey.topic) !== TopicResolution.Provisioned)
            .map(keyOf),
      },
      { type: PARTITION_TYPE, scope: STREAMING_SCOPE, map: (changed) => ownerKeyOf(changed, TOPIC_TYPE) },
    ],
    async reconcile(key: string, ctx: ReconcileContext): Promise<ReconcileResult | void> {
      caches.bind(ctx);
      const topic = ctx.cache<TopicSpec>(TOPIC_TYPE).get(key);
      if (topic === undefined) return; // its partitions went with it (owner cascade)
      const spus = spuStates(ctx.cache<SpuSpec>(SPU_TYPE).list());
      const partitions = ctx.cache<PartitionSpec>(PARTITION_TYPE).list().map(partitionView);
      const d = decideTopic({ name: topic.id.name, uid: topic.id.uid, spec: topic.data }, spus, partitions);
      const before = resolutionOf(topic, StatusKey.topic);
      // Pending is reported before the partitions are created: a controller that stops half way
      // leaves a topic that says what it was doing.
      const outcome = await writeStatusIfChanged(ctx, topic, StatusKey.topic, [resolutionCondition(d.resolution, d.message)]);
      if (outcome === 'written' && d.resolution !== before) opts.logger?.info?.({ topic: topic.id.name, from: before, to: d.resolution, why: d.message }, 'topic resolution changed');
      for (const c of d.create) {
        try {
          await ctx.client.write({ type: PARTITION_TYPE, name: c.name }, { data: c.spec, owner: topic.id, version: '0' }, { signal: ctx.signal });
        } catch (e) {
          if (!isAlreadyExists(e)) throw e; // else the cache had not seen it yet
        }
      }
      // The created partitions' events bring the topic back to report Provisioned.
      return d.resolution === TopicResolution.Provisioned ? undefined : { requeueAfterMs: opts.waitingRecheckMs };
    },
  };
}
