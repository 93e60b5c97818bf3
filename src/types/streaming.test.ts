import t from 'tap';
import { TypeRegistry, type ProposedResource } from '../api/index.js';
import type { JsonValue, Resource } from '../store/index.js';
import { registerStreamingTypes } from './streaming.js';
import {
  clipText,
  CONDITION_TEXT_MAX,
  heartbeatToken,
  parseIds,
  partitionObserved,
  replicaStatusKey,
  reportedOffsets,
  resolutionCondition,
  resolutionOf,
  StatusKey,
  type StatusView,
} from './streaming-model.js';

/**
 * The streaming.v1 registrations: each write runs mutate, the schema and validate in that order
 * (as ResourceService does), so these tests drive the hooks the same way.
 */

const registry = new TypeRegistry();
registerStreamingTypes(registry);

type Outcome = { ok: true; data: unknown } | { ok: false; error: string };

function write(kind: string, name: string, data: unknown, currentData?: unknown): Outcome {
  const t = registry.resolve(`streaming.v1.${kind}`);
  const proposed: ProposedResource = {
    type: { group: 'streaming', groupVersion: 'v1', kind },
    partition: '',
    namespace: '',
    name,
    data: structuredClone(data) as JsonValue,
    metadata: {},
  };
  const current = currentData === undefined ? undefined : ({ data: currentData } as unknown as Resource);
  t.mutate?.(proposed, current);
  if (!t.validateData(proposed.data)) return { ok: false, error: `schema: ${(t.validateData.errors ?? []).map((e) => `${e.instancePath} ${e.message ?? ''}`).join('; ')}` };
  const reason = t.validate?.(proposed, current);
  return reason === undefined ? { ok: true, data: proposed.data } : { ok: false, error: reason };
}

const ep = (port: number): { host: string; port: number } => ({ host: 'spu.example', port });

t.test('the four types are registered, cluster-scoped', async (t) => {
  t.same(registry.list(), ['streaming.v1.Partition', 'streaming.v1.Spu', 'streaming.v1.SpuGroup', 'streaming.v1.Topic']);
  for (const k of registry.all()) t.equal(k.scope, 'cluster', k.kind);
});

t.test('Spu: id, type (default custom), rack, endpoints', async (t) => {
  t.same(write('Spu', 's1', { id: 1, publicEndpoint: ep(9005), privateEndpoint: ep(9006) }), {
    ok: true,
    data: { id: 1, type: 'custom', publicEndpoint: ep(9005), privateEndpoint: ep(9006) },
  });
  t.match(write('Spu', 's1', { id: 1, type: 'managed', rack: 'r1', publicEndpoint: ep(9005), privateEndpoint: ep(9006) }), { ok: true });
  t.match(write('Spu', 's1', { id: -1, publicEndpoint: ep(9005), privateEndpoint: ep(9006) }), { ok: false, error: /schema: \/id must be >= 0/ });
  t.match(write('Spu', 's1', { id: 1.5, publicEndpoint: ep(9005), privateEndpoint: ep(9006) }), { ok: false, error: /integer/ });
  t.match(write('Spu', 's1', { id: 1, type: 'other', publicEndpoint: ep(9005), privateEndpoint: ep(9006) }), { ok: false, error: /\/type must be equal to one of the allowed values/ });
  t.match(write('Spu', 's1', { id: 1, publicEndpoint: ep(0), privateEndpoint: ep(9006) }), { ok: false, error: /\/publicEndpoint\/port/ });
  t.match(write('Spu', 's1', { id: 1, publicEndpoint: ep(9005) }), { ok: false, error: /privateEndpoint/ });
  t.match(write('Spu', 's1', { id: 1, publicEndpoint: ep(9005), privateEndpoint: ep(9006), extra: 1 }), { ok: false, error: /additional properties/ });
});

t.test('SpuGroup: defaults, range and name limits, minId fixed once set', async (t) => {
  t.same(write('SpuGroup', 'main', { replicas: 3 }), { ok: true, data: { replicas: 3, minId: 0, storageSize: '1Gi' } });
  t.same(write('SpuGroup', 'main', { replicas: 0, minId: 5, storageSize: '20Gi', rack: 'r1' }), { ok: true, data: { replicas: 0, minId: 5, storageSize: '20Gi', rack: 'r1' } });
  t.match(write('SpuGroup', 'main', { replicas: -1 }), { ok: false, error: /\/replicas must be >= 0/ });
  t.match(write('SpuGroup', 'main', { replicas: 1, storageSize: '1GB' }), { ok: false, error: /\/storageSize must match pattern/ });
  t.match(write('SpuGroup', 'main', { replicas: 2, minId: 2_147_483_647 }), { ok: false, error: /go past the largest SPU id/ });
  t.match(write('SpuGroup', 'a'.repeat(61), { replicas: 11 }), { ok: false, error: /too long: its SPUs are named a+-<id>/ });
  t.match(write('SpuGroup', 'a'.repeat(61), { replicas: 10 }), { ok: true }, 'a-9 fits in 63 characters');
  t.match(write('SpuGroup', 'main', { replicas: 5, minId: 0 }, { replicas: 3, minId: 0, storageSize: '1Gi' }), { ok: true }, 'scaling is an update');
  t.match(write('SpuGroup', 'main', { replicas: 3, minId: 1 }, { replicas: 3, minId: 0, storageSize: '1Gi' }), { ok: false, error: /minId cannot change \(from 0 to 1\)/ });
});

t.test('Topic: computed or manual, never both; defaults; it may only grow', async (t) => {
  t.same(write('Topic', 'orders', {}), { ok: true, data: { partitions: 1, replicationFactor: 1 } }, "Fluvio's defaults");
  t.same(write('Topic', 'orders', { partitions: 6, replicationFactor: 3 }), { ok: true, data: { partitions: 6, replicationFactor: 3 } });
  t.same(write('Topic', 'orders', { replicaAssignment: [[0, 1], [1, 0]] }), { ok: true, data: { replicaAssignment: [[0, 1], [1, 0]] } }, 'no defaults in the manual form');
  t.match(write('Topic', 'orders', { partitions: 2, replicaAssignment: [[0]] }), { ok: false, error: /either partitions and replicationFactor, or replicaAssignment, not both/ });
  t.match(write('Topic', 'orders', { replicationFactor: 2, replicaAssignment: [[0]] }), { ok: false, error: /not both/ });
  t.match(write('Topic', 'orders', { replicaAssignment: [[0, 1, 0]] }), { ok: false, error: /replicaAssignment\[0\] names SPU 0 twice/ });
  t.match(write('Topic', 'orders', { replicaAssignment: [] }), { ok: false, error: /must NOT have fewer than 1 items/ });
  t.match(write('Topic', 'orders', { partitions: 0 }), { ok: false, error: /\/partitions must be >= 1/ });
  t.match(write('Topic', 'orders', { partitions: 1001 }), { ok: false, error: /\/partitions must be <= 1000/ });
  t.match(write('Topic', 'a'.repeat(61), { partitions: 11 }), { ok: false, error: /too long for 11 partitions/ });
  t.match(write('Topic', 'a'.repeat(61), { partitions: 10 }), { ok: true });

  const was = { partitions: 6, replicationFactor: 3 };
  t.match(write('Topic', 'orders', { partitions: 8, replicationFactor: 3 }, was), { ok: true }, 'partitions may be added');
  t.match(write('Topic', 'orders', { partitions: 4, replicationFactor: 3 }, was), { ok: false, error: /partitions cannot shrink \(from 6 to 4\)/ });
  t.match(write('Topic', 'orders', { partitions: 6, replicationFactor: 2 }, was), { ok: false, error: /replicationFactor cannot change \(from 3 to 2\)/ });
  t.match(write('Topic', 'orders', { replicaAssignment: [[0]] }, was), { ok: false, error: /cannot switch between a computed and a manual/ });
  const rows = { replicaAssignment: [[0, 1], [1, 0]] };
  t.match(write('Topic', 'orders', { replicaAssignment: [[0, 1], [1, 0], [2, 0]] }, rows), { ok: true }, 'rows may be added');
  t.match(write('Topic', 'orders', { replicaAssignment: [[0, 1]] }, rows), { ok: false, error: /partitions cannot be removed \(from 2 to 1\)/ });
  t.match(write('Topic', 'orders', { replicaAssignment: [[0, 1], [0, 1]] }, rows), { ok: false, error: /replicaAssignment\[1\] cannot change \(it was \[1,0\]\)/ });
  t.match(write('Topic', 'orders', { partitions: 2, replicationFactor: 1 }, rows), { ok: false, error: /cannot switch/ });
});

t.test('Partition: named after its topic and index; the leader is a replica', async (t) => {
  t.match(write('Partition', 'orders-2', { topic: 'orders', index: 2, leader: 1, replicas: [1, 0] }), { ok: true });
  t.match(write('Partition', 'orders-3', { topic: 'orders', index: 2, leader: 1, replicas: [1, 0] }), { ok: false, error: /must be named orders-2, not orders-3/ });
  t.match(write('Partition', 'orders-2', { topic: 'orders', index: 2, leader: 5, replicas: [1, 0] }), { ok: false, error: /the leader 5 is not one of the replicas \[1,0\]/ });
  t.match(write('Partition', 'orders-2', { topic: 'orders', index: 2, leader: 1, replicas: [1, 1] }), { ok: false, error: /replicas name SPU 1 twice/ });
  t.match(write('Partition', 'orders-2', { topic: 'orders', index: 2, leader: 1, replicas: [] }), { ok: false, error: /fewer than 1 items/ });
  t.match(write('Partition', 'orders-2', { topic: 'Orders', index: 2, leader: 1, replicas: [1] }), { ok: false, error: /\/topic must match pattern/ });
});

t.test('status encoding: resolution conditions, leader and live replicas, reports', async (t) => {
  t.same(resolutionCondition('Online', 'fine'), { type: 'Resolution', state: 'TRUE', reason: 'Online', message: 'fine' });
  t.equal(resolutionCondition('Provisioned', '').state, 'TRUE');
  t.equal(resolutionCondition('Reserved', '').state, 'TRUE');
  t.equal(resolutionCondition('Pending', '').state, 'UNKNOWN');
  t.equal(resolutionCondition('Init', '').state, 'UNKNOWN');
  t.equal(resolutionCondition('LeaderOffline', '').state, 'FALSE');
  t.equal(resolutionCondition('InsufficientResources', '').state, 'FALSE');
  t.equal(resolutionCondition('Online', 'x'.repeat(5000)).message.length, CONDITION_TEXT_MAX, 'messages are cut to the API limit');
  t.equal(clipText('short'), 'short');

  const entry = (conditions: StatusView['conditions'], updated = '2026-01-01T00:00:00.000Z'): StatusView => ({ observed_generation: 'g', conditions, updated_at: updated });
  const none = { status: {} };
  t.equal(resolutionOf(none, StatusKey.topic), 'Init', 'no report yet is Init');
  t.equal(heartbeatToken(none), undefined);
  t.same(partitionObserved(none), { resolution: 'Init', leader: undefined, liveReplicas: undefined });

  const p = {
    status: {
      [StatusKey.partition]: entry([
        resolutionCondition('Online', 'leader on SPU 2'),
        { type: 'Leader', state: 'TRUE', reason: 'Elected', message: '2' },
        { type: 'LiveReplicas', state: 'TRUE', reason: 'Online', message: '2,0' },
      ]),
      [replicaStatusKey(0)]: entry([{ type: 'LogEnd', state: 'TRUE', reason: 'Reported', message: '120' }]),
      [replicaStatusKey(1)]: entry([{ type: 'LogEnd', state: 'TRUE', reason: 'Reported', message: 'not a number' }]),
      [StatusKey.spuHeartbeat]: entry([], '2026-01-01T00:00:01.000Z'),
    },
  } as const;
  t.same(partitionObserved(p), { resolution: 'Online', leader: 2, liveReplicas: [2, 0] });
  t.same([...reportedOffsets(p, [2, 0, 1])], [[0, 120]], 'only well-formed reports of the given replicas');
  t.equal(heartbeatToken(p), '2026-01-01T00:00:01.000Z');
  t.same(parseIds(''), []);
  t.same(parseIds('1, 2'), [1, 2]);
  t.equal(parseIds('1,x'), undefined);
});
