/**
 * The topic state machine, decided purely (the topic controller feeds it and creates the
 * partitions it asks for).
 *
 *   Init ──▶ InvalidConfig          the spec cannot be met as written (a manual assignment names
 *     │                             SPUs that do not exist; partitions would shrink)
 *     ├──▶ InsufficientResources    fewer online SPUs than the replication factor
 *     ├──▶ Pending                  replicas placed; the partitions are being created (or a
 *     │                             partition's name is held by something the topic does not own)
 *     └──▶ Provisioned              every partition exists
 *
 * Every state but Provisioned waits: an SPU change (a new or returning SPU) re-evaluates it.
 * The replica map lives in the topic's Partition resources (spec.replicas, leader first): rows
 * that exist are kept, missing ones are placed by the fair scheduler with the load counts of
 * every partition that exists (other topics' and this one's).
 */
import { partitionName, TopicResolution, type PartitionSpec, type TopicSpec } from '../../types/index.js';
import { checkManualAssignment, placeReplicas, type ReplicaRow } from './scheduler.js';

export interface TopicView {
  readonly name: string;
  readonly uid: string;
  readonly spec: TopicSpec;
}

export interface PartitionView {
  readonly name: string;
  readonly ownerUid: string | undefined;
  readonly spec: PartitionSpec;
}

export interface SpuState {
  readonly id: number;
  readonly online: boolean;
}

export interface TopicDecision {
  readonly resolution: TopicResolution;
  /** Depends only on the state, so reconciling again rewrites nothing. */
  readonly message: string;
  /** Partitions to create (owned by the topic), in index order. */
  readonly create: ReadonlyArray<{ readonly name: string; readonly spec: PartitionSpec }>;
}

const rowText = (rows: readonly ReplicaRow[]): string => rows.map((r) => `[${r.join(',')}]`).join(' ');

export function decideTopic(topic: TopicView, spus: readonly SpuState[], partitions: readonly PartitionView[]): TopicDecision {
  const manual = topic.spec.replicaAssignment;
  const count = manual !== undefined ? manual.length : (topic.spec.partitions ?? 0);
  const rf = topic.spec.replicationFactor ?? 0;
  const none = [] as const;

  const own = new Map<number, ReplicaRow>();
  for (const p of partitions) if (p.ownerUid === topic.uid && p.spec.topic === topic.name) own.set(p.spec.index, p.spec.replicas);
  const beyond = [...own.keys()].filter((i) => i >= count);
  if (beyond.length > 0) {
    return { resolution: TopicResolution.InvalidConfig, message: `partitions cannot shrink: ${own.size} exist, the spec asks for ${count}`, create: none };
  }
  const missing: number[] = [];
  for (let i = 0; i < count; i++) if (!own.has(i)) missing.push(i);
  const mode = manual !== undefined ? 'manual assignment' : `replication factor ${rf}`;

  if (missing.length === 0) {
    const rows = [...own.entries()].sort(([a], [b]) => a - b).map(([, r]) => r);
    return { resolution: TopicResolution.Provisioned, message: `${count} partition${count === 1 ? '' : 's'}, ${mode}; replicas (leader first): ${rowText(rows)}`, create: none };
  }

  // A name the topic needs held by a partition it does not own (an older topic of the same
  // name whose delete the cache has not seen yet, or a hand-made one): wait for it to go.
  const wantedNames = new Set(missing.map((i) => partitionName(topic.name, i)));
  const squatter = partitions.find((p) => wantedNames.has(p.name) && p.ownerUid !== topic.uid);
  if (squatter !== undefined) {
    return { resolution: TopicResolution.Pending, message: `waiting for partition ${squatter.name}, which this topic does not own, to go`, create: none };
  }

  let rows: readonly ReplicaRow[];
  if (manual !== undefined) {
    const checked = checkManualAssignment(manual, spus.map((s) => s.id));
    if (!checked.ok) return { resolution: checked.resolution, message: checked.reason, create: none };
    rows = missing.map((i) => manual[i] as ReplicaRow);
  } else {
    // Placing only the missing rows with every existing row counted is the scheduler's `keep`
    // (kept rows are counted like existing ones), and also works when a hole is not at the end.
    const placed = placeReplicas({
      spus: spus.filter((s) => s.online).map((s) => s.id),
      existing: partitions.map((p) => p.spec.replicas),
      partitions: missing.length,
      replicationFactor: rf,
    });
    if (!placed.ok) return { resolution: placed.resolution, message: placed.reason, create: none };
    rows = placed.rows;
  }
  const create = missing.map((index, k) => {
    const replicas = rows[k] as ReplicaRow;
    return { name: partitionName(topic.name, index), spec: { topic: topic.name, index, leader: replicas[0] as number, replicas: [...replicas] } };
  });
  return { resolution: TopicResolution.Pending, message: `creating ${missing.length} of ${count} partitions`, create };
}
