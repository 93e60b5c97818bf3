import t from 'tap';
import type { PartitionSpec } from '../../types/index.js';
import { placeReplicas } from './scheduler.js';
import { decideTopic, type PartitionView, type SpuState, type TopicDecision, type TopicView } from './topic.js';

const online = (...ids: number[]): SpuState[] => ids.map((id) => ({ id, online: true }));
const topic = (name: string, spec: TopicView['spec'], uid = `T-${name}`): TopicView => ({ name, uid, spec });

/** The partitions a decision asks for, as they would exist once created. */
const created = (tv: TopicView, d: TopicDecision): PartitionView[] => d.create.map((c) => ({ name: c.name, ownerUid: tv.uid, spec: c.spec }));
const rows = (d: TopicDecision): number[][] => d.create.map((c) => [...c.spec.replicas]);

const partition = (topicName: string, ownerUid: string, index: number, replicas: number[]): PartitionView => ({
  name: `${topicName}-${index}`,
  ownerUid,
  spec: { topic: topicName, index, leader: replicas[0] as number, replicas } satisfies PartitionSpec,
});

t.test('6 partitions x RF 3 on SPUs {0,1,2}: Pending with the vector rows, then Provisioned once they exist', async (t) => {
  const tv = topic('orders', { partitions: 6, replicationFactor: 3 });
  const d = decideTopic(tv, online(0, 1, 2), []);
  t.equal(d.resolution, 'Pending');
  t.equal(d.message, 'creating 6 of 6 partitions');
  t.same(rows(d), [
    [0, 1, 2],
    [1, 0, 2],
    [2, 0, 1],
    [0, 1, 2],
    [1, 0, 2],
    [2, 0, 1],
  ]);
  t.same(d.create[2], { name: 'orders-2', spec: { topic: 'orders', index: 2, leader: 2, replicas: [2, 0, 1] } });
  const after = decideTopic(tv, online(0, 1, 2), created(tv, d));
  t.same(after, {
    resolution: 'Provisioned',
    message: '6 partitions, replication factor 3; replicas (leader first): [0,1,2] [1,0,2] [2,0,1] [0,1,2] [1,0,2] [2,0,1]',
    create: [],
  });
  t.same(decideTopic(tv, [], created(tv, d)).resolution, 'Provisioned', 'a provisioned topic stays so when SPUs go (leaders are the partition controller\'s business)');
});

t.test('only online SPUs take replicas; RF above them is InsufficientResources; a new SPU re-evaluates', async (t) => {
  const tv = topic('t', { partitions: 2, replicationFactor: 3 });
  const spus: SpuState[] = [...online(0, 1), { id: 2, online: false }];
  t.same(decideTopic(tv, spus, []), { resolution: 'InsufficientResources', message: 'replication factor 3 needs 3 online SPUs; 2 available', create: [] });
  t.same(decideTopic(topic('t', { partitions: 1, replicationFactor: 1 }), [], []).resolution, 'InsufficientResources', 'no SPU at all');
  const later = decideTopic(tv, online(0, 1, 2), []);
  t.equal(later.resolution, 'Pending', 'the same topic once a third SPU is online');
  t.same(rows(later), [
    [0, 1, 2],
    [1, 0, 2],
  ]);
});

t.test('load counts include the partitions of other topics (the issue\'s vector)', async (t) => {
  const existing = [partition('t1', 'T-t1', 0, [0, 1, 2]), partition('t1', 'T-t1', 1, [1, 2]), partition('t2', 'T-t2', 0, [0, 3])];
  const d = decideTopic(topic('t3', { partitions: 5, replicationFactor: 3 }), online(0, 1, 2, 3), existing);
  t.same(rows(d), [
    [2, 0, 1],
    [3, 0, 1],
    [1, 3, 0],
    [2, 3, 0],
    [3, 2, 1],
  ]);
});

t.test('adding partitions keeps the rows that exist and places only the new ones', async (t) => {
  const v1 = topic('t', { partitions: 2, replicationFactor: 2 });
  const first = decideTopic(v1, online(0, 1, 2), []);
  const have = created(v1, first);
  t.same(rows(first), [
    [0, 1],
    [1, 0],
  ]);
  const v2 = topic('t', { partitions: 4, replicationFactor: 2 });
  const grown = decideTopic(v2, online(0, 1, 2), have);
  t.equal(grown.message, 'creating 2 of 4 partitions');
  t.same(
    grown.create.map((c) => [c.spec.index, ...c.spec.replicas]),
    [
      [2, 2, 0],
      [3, 0, 2],
    ],
    'indexes 2 and 3, placed with rows 0 and 1 counted',
  );
  const kept = placeReplicas({ spus: [0, 1, 2], existing: [], keep: rows(first), partitions: 4, replicationFactor: 2 });
  t.same(kept.ok ? kept.rows.slice(2) : kept, rows(grown), "the same rows as the scheduler's own keep");
  // A hole (partition 0 deleted by hand) is placed again, counting the rest.
  const hole = decideTopic(v2, online(0, 1, 2), [...have.slice(1), ...created(v2, grown)]);
  t.same(hole.create.map((c) => c.name), ['t-0']);
});

t.test('a spec with fewer partitions than exist is InvalidConfig', async (t) => {
  const tv = topic('t', { partitions: 1, replicationFactor: 1 });
  const d = decideTopic(tv, online(0), [partition('t', tv.uid, 0, [0]), partition('t', tv.uid, 1, [0])]);
  t.same(d, { resolution: 'InvalidConfig', message: 'partitions cannot shrink: 2 exist, the spec asks for 1', create: [] });
});

t.test('manual assignment: rows as given, whatever the SPUs\' state; unknown SPUs are InvalidConfig until they exist', async (t) => {
  const tv = topic('m', { replicaAssignment: [[2, 0], [0, 2]] });
  t.same(decideTopic(tv, online(0), []), { resolution: 'InvalidConfig', message: 'partition 0 names SPUs that do not exist: 2', create: [] });
  const d = decideTopic(tv, [...online(0), { id: 2, online: false }], []);
  t.equal(d.resolution, 'Pending');
  t.same(rows(d), [
    [2, 0],
    [0, 2],
  ]);
  t.match(decideTopic(tv, online(0, 2), created(tv, d)), { resolution: 'Provisioned', message: '2 partitions, manual assignment; replicas (leader first): [2,0] [0,2]' });
});

t.test('a partition name held by a partition the topic does not own: Pending until it goes', async (t) => {
  const tv = topic('t', { partitions: 2, replicationFactor: 1 }, 'NEW');
  const stale = [partition('t', 'OLD', 0, [0]), partition('t', 'OLD', 1, [0])];
  t.same(decideTopic(tv, online(0), stale), { resolution: 'Pending', message: 'waiting for partition t-0, which this topic does not own, to go', create: [] });
});
