/**
 * The streaming.v1 controllers under the real controller runtime, on the Raft leader of three
 * real `cairn agent --controllers` processes, driven only through the public API (a
 * CairnClient; SPU heartbeats with `sendSpuHeartbeat`, as an SPU process would send them):
 *
 * 1. an SPU group of 3 makes SPUs main-0..main-2, which come Online once they heartbeat;
 * 2. a 6x3 topic becomes Provisioned with 6 partitions and the fair scheduler's replica rows;
 * 3. main-2 stops heartbeating: after the SPU timeout (--spu-timeout-ms, short here) it is
 *    Offline, and leadership of its partitions moves to an online follower;
 * 4. deleting the topic removes its partitions, and no controller makes them again;
 * 5. kill -9 the leader, and create a topic right after: the controllers start on the new
 *    leader (its log says so) and converge: the topic is Provisioned on the SPUs still online,
 *    its partitions are Online, and main-2, heartbeating again, comes back Online.
 */
import t from 'tap';
import { CairnClient, type Resource } from '../../src/client/index.js';
import { sendSpuHeartbeat } from '../../src/controller/index.js';
import {
  PARTITION_TYPE,
  partitionObserved,
  resolutionMessageOf,
  resolutionOf,
  SPU_GROUP_TYPE,
  SPU_TYPE,
  StatusKey,
  TOPIC_TYPE,
  type PartitionObserved,
  type PartitionSpec,
  type SpuSpec,
} from '../../src/types/index.js';
import { Cluster, now, until, type ClusterNode } from './harness.js';

/** Short, so the test sees an SPU go Offline quickly; heartbeats come 8 times as often. */
const SPU_TIMEOUT_MS = 4000;
const HEARTBEAT_EVERY_MS = 500;
const RUNNING = 'caches synced; controllers running';

/**
 * What SPU processes do: heartbeat every HEARTBEAT_EVERY_MS for each name in `names` (a set the
 * test changes to stop or resume an SPU). Failed heartbeats (no leader for a moment) are
 * counted and the loop goes on, as an SPU's would.
 */
class Heartbeats {
  readonly names = new Set<string>();
  failures = 0;
  sent = 0;
  /** By SPU name: when its last acknowledged heartbeat was sent (test clock, ms). */
  readonly lastSentAt = new Map<string, number>();
  private stopped = false;
  private readonly done: Promise<void>;

  constructor(private readonly client: CairnClient) {
    this.done = this.loop();
  }

  private async loop(): Promise<void> {
    while (!this.stopped) {
      await Promise.all(
        [...this.names].map(async (name) => {
          const at = now();
          try {
            await sendSpuHeartbeat(this.client, name, { timeoutMs: 3000 });
            this.sent++;
            this.lastSentAt.set(name, at);
          } catch {
            this.failures++;
          }
        }),
      );
      // The SPU's heartbeat period (a periodic action, not a wait for a condition).
      await new Promise((r) => setTimeout(r, HEARTBEAT_EVERY_MS));
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.done;
  }
}

t.test('streaming controllers on the leader of 3 real agents: SPU group, topic, SPU failure, delete, kill -9 of the leader', async (t) => {
  const cluster = await Cluster.start(t, { size: 3, flags: ['--controllers', '--spu-timeout-ms', String(SPU_TIMEOUT_MS)] });
  const auth = await cluster.clientOptions(); // TLS trust and the management token
  const client = new CairnClient({ endpoints: cluster.nodes.map((n) => n.grpcAddr), timeoutMs: 20_000, ...auth });
  const beats = new Heartbeats(new CairnClient({ endpoints: cluster.nodes.map((n) => n.grpcAddr), timeoutMs: 5000, ...auth }));
  t.teardown(async () => {
    await beats.stop();
    client.close();
  });

  let seen = '';
  const list = async <D>(type: string): Promise<Array<Resource<D>>> => (await client.list<D>(type)).resources as Array<Resource<D>>;
  const spuStates = async (): Promise<Map<string, string>> => new Map((await list<SpuSpec>(SPU_TYPE)).map((s) => [s.id.name, resolutionOf(s, StatusKey.spu)]));
  const partitionsOf = async (topic: string): Promise<Array<Resource<PartitionSpec>>> =>
    (await list<PartitionSpec>(PARTITION_TYPE)).filter((p) => p.data.topic === topic).sort((a, b) => a.data.index - b.data.index);
  const topicResolution = async (name: string): Promise<string> => {
    const r = (await list(TOPIC_TYPE)).find((x) => x.id.name === name);
    return r === undefined ? '(absent)' : resolutionOf(r, StatusKey.topic);
  };
  const spusAre = (want: Record<string, string>) => async (): Promise<true | undefined> => {
    const states = await spuStates();
    seen = JSON.stringify(Object.fromEntries(states));
    return Object.entries(want).every(([n, r]) => states.get(n) === r) ? true : undefined;
  };
  const partitionsAre = (topic: string, want: PartitionObserved[]) => async (): Promise<true | undefined> => {
    const got = (await partitionsOf(topic)).map((p) => partitionObserved(p));
    seen = JSON.stringify(got);
    return JSON.stringify(got) === JSON.stringify(want) ? true : undefined;
  };
  const started = now();

  // 1. An SPU group of 3 makes 3 managed SPUs; they are Init until they heartbeat, then Online.
  const group = await client.write({ type: SPU_GROUP_TYPE, name: 'main' }, { data: { replicas: 3 }, version: '0' });
  await until(
    'the group to make SPUs main-0..main-2 and be Reserved',
    20_000,
    async () => {
      const spus = await list<SpuSpec>(SPU_TYPE);
      const g = (await list(SPU_GROUP_TYPE)).find((x) => x.id.name === 'main');
      seen = `${spus.map((s) => `${s.id.name}:${resolutionOf(s, StatusKey.spu)}`).join(' ')}; group ${g === undefined ? '-' : resolutionOf(g, StatusKey.spuGroup)}`;
      return spus.length === 3 && g !== undefined && resolutionOf(g, StatusKey.spuGroup) === 'Reserved' && spus.every((s) => resolutionOf(s, StatusKey.spu) === 'Init') ? true : undefined;
    },
    () => seen,
  );
  const spus = await list<SpuSpec>(SPU_TYPE);
  t.same(
    spus.map((s) => [s.id.name, s.data.id, s.data.type, s.owner?.uid]),
    [0, 1, 2].map((id) => [`main-${id}`, id, 'managed', group.id.uid]),
    'three managed SPUs, ids 0..2, owned by the group, Init before any heartbeat',
  );
  for (const n of ['main-0', 'main-1', 'main-2']) beats.names.add(n);
  await until('every SPU to be Online once heartbeating', 20_000, spusAre({ 'main-0': 'Online', 'main-1': 'Online', 'main-2': 'Online' }), () => seen);
  t.pass(`group -> 3 SPUs Online in ${Math.round(now() - started)} ms`);

  // 2. A 6x3 topic: Provisioned, 6 partitions with the issue's replica vector, all Online.
  await client.write({ type: TOPIC_TYPE, name: 'orders' }, { data: { partitions: 6, replicationFactor: 3 }, version: '0' });
  await until('the topic to be Provisioned', 20_000, async () => ((seen = await topicResolution('orders')) === 'Provisioned' ? true : undefined), () => seen);
  const rows = [
    [0, 1, 2],
    [1, 0, 2],
    [2, 0, 1],
    [0, 1, 2],
    [1, 0, 2],
    [2, 0, 1],
  ];
  const parts = await partitionsOf('orders');
  const topic = (await list(TOPIC_TYPE)).find((x) => x.id.name === 'orders') as Resource<unknown>;
  t.same(
    parts.map((p) => [p.id.name, p.data.leader, p.data.replicas]),
    rows.map((r, i) => [`orders-${i}`, r[0], r]),
    'the fair scheduler rows (leader first)',
  );
  t.ok(parts.every((p) => p.owner?.uid === topic.id.uid), 'the topic owns its partitions');
  t.equal(resolutionMessageOf(topic, StatusKey.topic), '6 partitions, replication factor 3; replicas (leader first): [0,1,2] [1,0,2] [2,0,1] [0,1,2] [1,0,2] [2,0,1]', 'the topic reports its replica map');
  await until('every partition to be Online with its assigned leader', 20_000, partitionsAre('orders', rows.map((r) => ({ resolution: 'Online', leader: r[0] as number, liveReplicas: r }))), () => seen);

  // 3. main-2 stops heartbeating: Offline after the timeout; its partitions (orders-2 and
  //    orders-5, [2,0,1]) elect SPU 0, the first online follower (no offsets reported: lag 0).
  beats.names.delete('main-2');
  const stoppedAt = now();
  await until('main-2 to go Offline (and only it)', 30_000, spusAre({ 'main-0': 'Online', 'main-1': 'Online', 'main-2': 'Offline' }), () => seen);
  // The controller saw main-2's last token no earlier than that heartbeat was sent, so it may
  // not report Offline before the timeout has passed since then.
  const silentMs = now() - (beats.lastSentAt.get('main-2') as number);
  t.ok(silentMs >= SPU_TIMEOUT_MS, `main-2 was seen Offline ${Math.round(silentMs)} ms after its last heartbeat was sent: not before the timeout (${SPU_TIMEOUT_MS} ms)`);
  const without2 = (r: number[]): number[] => r.filter((id) => id !== 2);
  await until(
    'leadership of main-2 partitions to move to an online follower',
    20_000,
    partitionsAre(
      'orders',
      rows.map((r) => ({ resolution: 'Online', leader: r[0] === 2 ? 0 : (r[0] as number), liveReplicas: r[0] === 2 ? [0, 1] : without2(r) })),
    ),
    () => seen,
  );
  t.pass(`leaders of orders-2 and orders-5 moved to SPU 0 ${Math.round(now() - stoppedAt)} ms after main-2 stopped`);
  const o2 = (await partitionsOf('orders'))[2] as Resource<unknown>;
  t.match(o2.status[StatusKey.partition]?.conditions.find((c) => c.type === 'Leader'), { state: 'TRUE', reason: 'Elected', message: '0' }, 'orders-2 reports an elected leader');

  // 4. Deleting the topic deletes its partitions (owner cascade); the controllers make none again.
  t.ok((await client.delete({ type: TOPIC_TYPE, name: 'orders' })).deleted, 'the topic is deleted');
  t.same(await partitionsOf('orders'), [], 'no partition is left');
  // Nothing makes them again: a topic with the same name would be needed, and the controllers'
  // caches see the delete; checked again at the end, after every other change settled.

  // 5. kill -9 the leader, then at once create a topic: the controllers must resume on the new leader.
  const { leader: old, followers } = await cluster.roles();
  t.ok(old.logEvents(RUNNING).length >= 1, `the leader ${old.id} runs the controllers`);
  t.ok(followers.every((f) => f.logEvents(RUNNING).length === 0), 'the followers do not');
  await old.kill9();
  const killedAt = now();
  // Written through the survivors (the client fails over); RF 2 on the two SPUs still online.
  await client.write({ type: TOPIC_TYPE, name: 'events' }, { data: { partitions: 4, replicationFactor: 2 }, version: '0' });
  const { leader: next } = await cluster.roles({ among: followers });
  t.comment(`killed ${old.id}; new leader ${next.id}`);
  await until('the new topic to be Provisioned on the new leader', 30_000, async () => ((seen = await topicResolution('events')) === 'Provisioned' ? true : undefined), () => seen);
  const evRows = [
    [0, 1],
    [1, 0],
    [0, 1],
    [1, 0],
  ];
  t.same(
    (await partitionsOf('events')).map((p) => p.data.replicas),
    evRows,
    'placed on the online SPUs 0 and 1 only (main-2 is still Offline on the new leader: it has not heartbeated since)',
  );
  await until('the new partitions to be Online', 20_000, partitionsAre('events', evRows.map((r) => ({ resolution: 'Online', leader: r[0] as number, liveReplicas: r }))), () => seen);
  t.comment(`FAILOVER: converged ${Math.round(now() - killedAt)} ms after the SIGKILL`);
  t.ok(next.logEvents(RUNNING).length >= 1, `the new leader ${next.id} started the controllers`);
  const other = followers.find((f) => f !== next) as ClusterNode;
  t.equal(other.logEvents(RUNNING).length, 0, `${other.id}, a follower throughout, never ran them`);
  t.ok(await spusAre({ 'main-0': 'Online', 'main-1': 'Online' })(), `main-0 and main-1, heartbeating throughout, are Online on the new leader (${seen})`);

  // main-2 heartbeats again: the new leader's SPU controller brings it back Online.
  beats.names.add('main-2');
  await until('main-2 to come back Online', 20_000, spusAre({ 'main-0': 'Online', 'main-1': 'Online', 'main-2': 'Online' }), () => seen);
  t.same(await partitionsOf('orders'), [], 'the deleted topic\'s partitions never came back');
  t.comment(`${beats.sent} heartbeats sent, ${beats.failures} failed (during the election); ${Math.round(now() - started)} ms in all`);
});
