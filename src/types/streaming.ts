import type { ProposedResource, TypeRegistry } from '../api/index.js';
import type { Resource } from '../store/index.js';
import { partitionName, STREAMING_GROUP, STREAMING_SCOPE, STREAMING_VERSION } from './streaming-model.js';

/**
 * Registers the streaming.v1 types (Fluvio's SC model: SPUs, SPU groups, topics, partitions).
 * Every agent registers them (built-in types). All four are cluster-scoped, as in Fluvio: SPU
 * ids and topic names are global to the cluster, and a partition is named after its topic.
 *
 * The schemas check shapes; mutate fills defaults; validate checks what a schema cannot say
 * (one of two topic forms, names that must leave room for suffixes, fields that may not change
 * once set). What depends on other resources (unique SPU ids, SPUs that exist) is for the
 * controllers to judge, since a hook sees only the resource being written.
 */

/** Limits that keep one resource's consequences bounded (each partition and SPU is a resource). */
export const STREAMING_LIMITS = {
  maxSpuId: 2_147_483_647,
  maxGroupReplicas: 1000,
  maxPartitions: 1000,
  maxReplicationFactor: 100,
} as const;

/** A DNS label's length limit (API names). */
const NAME_MAX = 63;

const endpoint = {
  type: 'object',
  properties: {
    host: { type: 'string', minLength: 1, maxLength: 253 },
    port: { type: 'integer', minimum: 1, maximum: 65535 },
  },
  required: ['host', 'port'],
  additionalProperties: false,
};

const spuId = { type: 'integer', minimum: 0, maximum: STREAMING_LIMITS.maxSpuId };
const rack = { type: 'string', minLength: 1, maxLength: 63 };

type Data = Record<string, unknown>;

const asRecord = (v: unknown): Data | undefined => (typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Data) : undefined);

/** The stored data of `current` (the resource being replaced), if any. */
const currentData = (current: Resource | undefined): Data | undefined => (current === undefined ? undefined : asRecord(current.data));

function fillDefaults(res: ProposedResource, defaults: Data): void {
  const d = asRecord(res.data);
  if (d === undefined) return; // the schema refuses it
  for (const [k, v] of Object.entries(defaults)) if (d[k] === undefined) d[k] = v;
}

const digits = (n: number): number => String(n).length;

function validateSpuGroup(res: ProposedResource, current: Resource | undefined): string | undefined {
  const d = res.data as { replicas: number; minId: number };
  const maxId = d.minId + Math.max(d.replicas, 1) - 1;
  if (maxId > STREAMING_LIMITS.maxSpuId) return `minId ${d.minId} + replicas ${d.replicas} go past the largest SPU id ${STREAMING_LIMITS.maxSpuId}`;
  // Managed SPUs are named <group>-<id>, and names are DNS labels.
  if (res.name.length + 1 + digits(maxId) > NAME_MAX) {
    return `the group name ${JSON.stringify(res.name)} is too long: its SPUs are named ${res.name}-<id>, at most ${NAME_MAX} characters`;
  }
  const before = currentData(current);
  if (before !== undefined && typeof before['minId'] === 'number' && before['minId'] !== d.minId) {
    return `minId cannot change (from ${before['minId']} to ${d.minId}): the group's SPUs keep their ids; delete the group and create it again`;
  }
  return undefined;
}

function duplicate(row: readonly number[]): number | undefined {
  const seen = new Set<number>();
  for (const id of row) {
    if (seen.has(id)) return id;
    seen.add(id);
  }
  return undefined;
}

function validateTopic(res: ProposedResource, current: Resource | undefined): string | undefined {
  const d = res.data as { partitions?: number; replicationFactor?: number; replicaAssignment?: number[][] };
  const manual = d.replicaAssignment !== undefined;
  if (manual && (d.partitions !== undefined || d.replicationFactor !== undefined)) {
    return 'give either partitions and replicationFactor, or replicaAssignment, not both';
  }
  const count = manual ? (d.replicaAssignment?.length ?? 0) : (d.partitions ?? 0);
  if (res.name.length + 1 + digits(Math.max(count - 1, 0)) > NAME_MAX) {
    return `the topic name ${JSON.stringify(res.name)} is too long for ${count} partitions: partitions are named ${res.name}-<index>, at most ${NAME_MAX} characters`;
  }
  for (const [i, row] of (d.replicaAssignment ?? []).entries()) {
    const dup = duplicate(row);
    if (dup !== undefined) return `replicaAssignment[${i}] names SPU ${dup} twice`;
  }
  const before = currentData(current);
  if (before === undefined) return undefined;
  // Partitions that exist keep their replicas; a topic may only grow.
  const beforeRows = Array.isArray(before['replicaAssignment']) ? (before['replicaAssignment'] as number[][]) : undefined;
  if ((beforeRows !== undefined) !== manual) return 'a topic cannot switch between a computed and a manual replica assignment';
  if (beforeRows !== undefined && d.replicaAssignment !== undefined) {
    if (d.replicaAssignment.length < beforeRows.length) return `partitions cannot be removed (from ${beforeRows.length} to ${d.replicaAssignment.length})`;
    for (const [i, row] of beforeRows.entries()) {
      if (JSON.stringify(row) !== JSON.stringify(d.replicaAssignment[i])) return `replicaAssignment[${i}] cannot change (it was [${row.join(',')}]); rows may only be added`;
    }
    return undefined;
  }
  if (typeof before['partitions'] === 'number' && (d.partitions ?? 0) < before['partitions']) return `partitions cannot shrink (from ${before['partitions']} to ${d.partitions})`;
  if (typeof before['replicationFactor'] === 'number' && d.replicationFactor !== before['replicationFactor']) {
    return `replicationFactor cannot change (from ${before['replicationFactor']} to ${d.replicationFactor})`;
  }
  return undefined;
}

function validatePartition(res: ProposedResource): string | undefined {
  const d = res.data as { topic: string; index: number; leader: number; replicas: number[] };
  const dup = duplicate(d.replicas);
  if (dup !== undefined) return `replicas name SPU ${dup} twice`;
  if (!d.replicas.includes(d.leader)) return `the leader ${d.leader} is not one of the replicas [${d.replicas.join(',')}]`;
  const name = partitionName(d.topic, d.index);
  if (res.name !== name) return `partition ${d.index} of topic ${d.topic} must be named ${name}, not ${res.name}`;
  return undefined;
}

export function registerStreamingTypes(registry: TypeRegistry): void {
  const base = { group: STREAMING_GROUP, groupVersion: STREAMING_VERSION, scope: STREAMING_SCOPE } as const;
  registry.register({
    ...base,
    kind: 'Spu',
    schema: {
      type: 'object',
      properties: { id: spuId, type: { type: 'string', enum: ['managed', 'custom'] }, rack, publicEndpoint: endpoint, privateEndpoint: endpoint },
      required: ['id', 'type', 'publicEndpoint', 'privateEndpoint'],
      additionalProperties: false,
    },
    mutate: (res) => fillDefaults(res, { type: 'custom' }),
  });
  registry.register({
    ...base,
    kind: 'SpuGroup',
    schema: {
      type: 'object',
      properties: {
        replicas: { type: 'integer', minimum: 0, maximum: STREAMING_LIMITS.maxGroupReplicas },
        minId: spuId,
        storageSize: { type: 'string', pattern: '^[1-9][0-9]{0,5}(Ki|Mi|Gi|Ti)$' },
        rack,
      },
      required: ['replicas', 'minId', 'storageSize'],
      additionalProperties: false,
    },
    mutate: (res) => fillDefaults(res, { minId: 0, storageSize: '1Gi' }),
    validate: validateSpuGroup,
  });
  registry.register({
    ...base,
    kind: 'Topic',
    schema: {
      type: 'object',
      properties: {
        partitions: { type: 'integer', minimum: 1, maximum: STREAMING_LIMITS.maxPartitions },
        replicationFactor: { type: 'integer', minimum: 1, maximum: STREAMING_LIMITS.maxReplicationFactor },
        replicaAssignment: {
          type: 'array',
          minItems: 1,
          maxItems: STREAMING_LIMITS.maxPartitions,
          items: { type: 'array', minItems: 1, maxItems: STREAMING_LIMITS.maxReplicationFactor, items: spuId },
        },
      },
      additionalProperties: false,
    },
    // The computed form's defaults (Fluvio's CLI: 1 partition, replication 1), only when the
    // manual form is not used.
    mutate: (res) => {
      const d = asRecord(res.data);
      if (d !== undefined && d['replicaAssignment'] === undefined) fillDefaults(res, { partitions: 1, replicationFactor: 1 });
    },
    validate: validateTopic,
  });
  registry.register({
    ...base,
    kind: 'Partition',
    schema: {
      type: 'object',
      properties: {
        topic: { type: 'string', pattern: '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$' },
        index: { type: 'integer', minimum: 0, maximum: STREAMING_LIMITS.maxPartitions - 1 },
        leader: spuId,
        replicas: { type: 'array', minItems: 1, maxItems: STREAMING_LIMITS.maxReplicationFactor, items: spuId },
      },
      required: ['topic', 'index', 'leader', 'replicas'],
      additionalProperties: false,
    },
    validate: (res) => validatePartition(res),
  });
}
