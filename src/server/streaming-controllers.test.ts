import t from 'tap';
import { mkdtemp, rm } from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { CairnClient, keyOf, type Informer, type Resource, type SharedInformerFactory } from '../client/index.js';
import { reportReplicaOffset, sendSpuHeartbeat, streamingControllers, type ControllerSpec, type ReconcileContext } from '../controller/index.js';
import { createLogger } from '../platform/index.js';
import {
  PARTITION_TYPE,
  partitionObserved,
  resolutionMessageOf,
  resolutionOf,
  SPU_GROUP_TYPE,
  SPU_TYPE,
  StatusKey,
  TOPIC_TYPE,
  type PartitionSpec,
  type SpuSpec,
} from '../types/index.js';
import { startAgent, type Agent } from './agent.js';
import { clusterConfigs } from './testing/index.js';

/**
 * The streaming.v1 controllers end to end against a real 3-node cluster in this process: the
 * issue's scenario (an SPU group of 3 makes 3 SPUs; a 6x3 topic becomes Provisioned with 6
 * partitions; stopping one SPU's heartbeats moves leadership of its partitions; deleting the
 * topic removes its partitions), then re-evaluation of a waiting topic by a new SPU, group
 * scaling and id conflicts.
 *
 * The controllers run under a small driver written here against the runtime contract
 * (src/controller/runtime/types.ts): one shared informer factory over the client, a
 * deduplicating queue worked one key at a time, requeueAfter on an injected clock that only the
 * test moves (so SPU timeouts are exact, not slept), and errors retried after a short delay.
 * (Here rather than in src/controller: `controller` may not import `server`.) The same
 * controllers under the real runtime, on the leader of real agent processes with kill -9 of
 * the leader: cluster-test/cluster/streaming-controllers.test.ts.
 */

const SPU_TIMEOUT_MS = 10_000;
const MAX_LAG = 100;

async function until(cond: () => boolean | Promise<boolean>, what: string, ms = 20_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** The runtime contract, driven by hand: informers -> a deduplicating queue -> reconcile, on a test clock. */
class Driver {
  private nowMs = 1_000_000;
  private readonly factory: SharedInformerFactory;
  private readonly informers = new Map<string, Informer<unknown>>();
  private readonly queue: Array<{ spec: ControllerSpec; key: string }> = [];
  private readonly queued = new Set<string>();
  private timers: Array<{ atMs: number; spec: ControllerSpec; key: string }> = [];
  private wake: (() => void) | undefined;
  private busy = false;
  private stopped = false;
  private readonly abort = new AbortController();
  readonly errors: string[] = [];
  reconciles = 0;

  constructor(
    private readonly client: CairnClient,
    private readonly specs: readonly ControllerSpec[],
  ) {
    this.factory = client.sharedInformers();
    for (const s of specs) for (const type of [s.managedType, ...(s.watches ?? []).map((w) => w.type)]) this.informer(type);
    for (const s of specs) {
      const own = (obj: Resource<unknown>): void => this.enqueue(s, keyOf(obj));
      const managed = this.informer(s.managedType);
      managed.addEventHandler({ onAdd: own, onUpdate: (_old, obj) => own(obj), onDelete: own });
      for (const w of s.watches ?? []) {
        const mapped = (obj: Resource<unknown>): void => {
          for (const key of w.map(obj)) this.enqueue(s, key);
        };
        this.informer(w.type).addEventHandler({ onAdd: mapped, onUpdate: (_old, obj) => mapped(obj), onDelete: mapped });
      }
    }
  }

  private informer(type: string): Informer<unknown> {
    let inf = this.informers.get(type);
    if (inf === undefined) {
      inf = this.factory.informer({ type });
      this.informers.set(type, inf);
    }
    return inf;
  }

  cache<D>(type: string): Informer<D> {
    const inf = this.informers.get(type);
    if (inf === undefined) throw new Error(`no informer for ${type}`);
    return inf as Informer<D>;
  }

  async start(): Promise<void> {
    this.factory.start();
    await this.factory.waitForSync({ timeoutMs: 20_000 });
    void this.loop();
  }

  stop(): void {
    this.stopped = true;
    this.abort.abort();
    this.factory.close();
    this.wake?.();
  }

  /** Moves the test clock; due requeues are enqueued. */
  advance(ms: number): void {
    this.nowMs += ms;
    const due = this.timers.filter((x) => x.atMs <= this.nowMs);
    this.timers = this.timers.filter((x) => x.atMs > this.nowMs);
    for (const x of due) this.enqueue(x.spec, x.key);
  }

  /** Enqueues every cached key of every controller's managed type (the runtime's periodic resync). */
  resync(): void {
    for (const s of this.specs) for (const key of this.cache(s.managedType).keys()) this.enqueue(s, key);
  }

  /** Resolves when every cache has seen revision `rev` and the queue is empty with nothing running. */
  async settle(rev: string): Promise<void> {
    for (const inf of this.informers.values()) await inf.waitForRevision(rev, { timeoutMs: 20_000 });
    await until(() => this.queue.length === 0 && !this.busy, 'the controllers to settle');
  }

  private enqueue(spec: ControllerSpec, key: string): void {
    const id = `${spec.name}\u0000${key}`;
    if (this.queued.has(id)) return;
    this.queued.add(id);
    this.queue.push({ spec, key });
    this.wake?.();
  }

  private ctx(): ReconcileContext {
    return { client: this.client, cache: <D>(type: string) => this.cache<D>(type), nowMs: () => this.nowMs, signal: this.abort.signal };
  }

  private async loop(): Promise<void> {
    while (!this.stopped) {
      const item = this.queue.shift();
      if (item === undefined) {
        await new Promise<void>((r) => (this.wake = r));
        this.wake = undefined;
        continue;
      }
      this.queued.delete(`${item.spec.name}\u0000${item.key}`);
      this.busy = true;
      try {
        this.reconciles++;
        const r = await item.spec.reconcile(item.key, this.ctx());
        if (r?.requeueAfterMs !== undefined) this.timers.push({ atMs: this.nowMs + r.requeueAfterMs, spec: item.spec, key: item.key });
      } catch (e) {
        if (this.stopped) break;
        this.errors.push(`${item.spec.name} ${item.key}: ${e instanceof Error ? e.message : String(e)}`);
        setTimeout(() => this.enqueue(item.spec, item.key), 50).unref();
      } finally {
        this.busy = false;
      }
    }
  }
}

// ---- The cluster ------------------------------------------------------------------------------

const dir = await mkdtemp(path.join(os.tmpdir(), 'cairn-streaming-'));
const agents: Agent[] = [];
// Quiet informers advance with bookmarks; the driver's settle() waits on every cache.
const configs = await clusterConfigs(dir, 3, { demoTypes: false, watchBookmarkMs: 100 });
const addrs = configs.map((c) => c.grpcAddr);
for (const cfg of configs) {
  agents.push(await startAgent(cfg, { logger: createLogger({ level: 'error', nodeId: cfg.nodeId }) }));
}
await Promise.all(agents.map((a) => a.ready));
await until(() => agents.some((a) => a.coordinator()?.status().role === 'leader'), 'a leader');

const client = new CairnClient({ endpoints: addrs, timeoutMs: 15_000 });
const driver = new Driver(client, streamingControllers({ spuTimeoutMs: SPU_TIMEOUT_MS, maxLagOffsets: MAX_LAG }));
await driver.start();
t.teardown(async () => {
  driver.stop();
  client.close();
  await Promise.all(agents.map((a) => a.close()));
  await rm(dir, { recursive: true, force: true });
});

const spus = (): Array<Resource<SpuSpec>> => driver.cache<SpuSpec>(SPU_TYPE).list();
const spu = (name: string): Resource<SpuSpec> | undefined => driver.cache<SpuSpec>(SPU_TYPE).get(`//${name}`);
const partitions = (topic: string): Array<Resource<PartitionSpec>> =>
  driver
    .cache<PartitionSpec>(PARTITION_TYPE)
    .list()
    .filter((p) => p.data.topic === topic)
    .sort((a, b) => a.data.index - b.data.index);
const partition = (name: string): Resource<PartitionSpec> | undefined => driver.cache<PartitionSpec>(PARTITION_TYPE).get(`//${name}`);
const resolution = (type: string, name: string, key: string): string => {
  const r = driver.cache(type).get(`//${name}`);
  return r === undefined ? '(absent)' : resolutionOf(r, key);
};

/** Heartbeats for these SPUs; resolves once the controllers have seen them. */
async function heartbeat(...names: string[]): Promise<void> {
  let last = '0';
  for (const n of names) last = (await sendSpuHeartbeat(client, n)).version;
  await driver.settle(last);
}

t.test('the issue scenario: group of 3 -> 3 SPUs; 6x3 topic -> Provisioned; an SPU stops -> leaders move; delete -> partitions go', async (t) => {
  const group = await client.write({ type: SPU_GROUP_TYPE, name: 'main' }, { data: { replicas: 3 }, version: '0' });
  t.same(group.data, { replicas: 3, minId: 0, storageSize: '1Gi' }, 'defaults filled by the mutate hook');
  await until(() => spus().length === 3 && resolution(SPU_GROUP_TYPE, 'main', StatusKey.spuGroup) === 'Reserved', 'the group to make 3 SPUs');
  t.same(
    spus().map((s) => [s.id.name, s.data.id, s.data.type, s.owner?.uid]),
    [0, 1, 2].map((id) => [`main-${id}`, id, 'managed', group.id.uid]),
  );
  t.equal(resolutionMessageOf(driver.cache(SPU_GROUP_TYPE).get('//main') as Resource<unknown>, StatusKey.spuGroup), '3 SPUs, ids 0..2');
  await until(() => spus().every((s) => resolutionOf(s, StatusKey.spu) === 'Init'), 'the SPUs to be reported Init');

  await heartbeat('main-0', 'main-1', 'main-2');
  await until(() => spus().every((s) => resolutionOf(s, StatusKey.spu) === 'Online'), 'every SPU Online');

  await client.write({ type: TOPIC_TYPE, name: 'orders' }, { data: { partitions: 6, replicationFactor: 3 }, version: '0' });
  await until(() => resolution(TOPIC_TYPE, 'orders', StatusKey.topic) === 'Provisioned', 'the topic to be Provisioned');
  const parts = partitions('orders');
  t.same(
    parts.map((p) => [p.id.name, p.data.replicas]),
    [
      ['orders-0', [0, 1, 2]],
      ['orders-1', [1, 0, 2]],
      ['orders-2', [2, 0, 1]],
      ['orders-3', [0, 1, 2]],
      ['orders-4', [1, 0, 2]],
      ['orders-5', [2, 0, 1]],
    ],
    'the fair scheduler vector',
  );
  const topic = driver.cache(TOPIC_TYPE).get('//orders') as Resource<unknown>;
  t.ok(parts.every((p) => p.owner?.uid === topic.id.uid), 'the topic owns its partitions');
  t.equal(resolutionMessageOf(topic, StatusKey.topic), '6 partitions, replication factor 3; replicas (leader first): [0,1,2] [1,0,2] [2,0,1] [0,1,2] [1,0,2] [2,0,1]');
  await until(() => partitions('orders').every((p) => partitionObserved(p).resolution === 'Online'), 'every partition Online');
  t.same(
    partitions('orders').map((p) => partitionObserved(p)),
    parts.map((p) => ({ resolution: 'Online', leader: p.data.replicas[0], liveReplicas: p.data.replicas })),
  );

  // SPU 2 leads orders-2 and orders-5 ([2,0,1]). Replica reports: on orders-2 follower 1 is
  // closest (lag 10, bound 100); on orders-5 both followers lag beyond the bound.
  await reportReplicaOffset(client, 'orders-2', 2, 1000);
  await reportReplicaOffset(client, 'orders-2', 0, 950);
  await reportReplicaOffset(client, 'orders-2', 1, 990);
  await reportReplicaOffset(client, 'orders-5', 2, 1000);
  await reportReplicaOffset(client, 'orders-5', 0, 500);
  const lastReport = await reportReplicaOffset(client, 'orders-5', 1, 800);
  await driver.settle(lastReport.version);
  t.equal(partitionObserved(partition('orders-2') as Resource<unknown>).leader, 2, 'reports alone move nothing');

  // SPU 2 stops heartbeating; 0 and 1 keep on. The timeout passes on the test clock.
  driver.advance(SPU_TIMEOUT_MS / 2);
  await heartbeat('main-0', 'main-1');
  driver.advance(SPU_TIMEOUT_MS / 2 + 1);
  await until(() => resolution(SPU_TYPE, 'main-2', StatusKey.spu) === 'Offline', 'SPU main-2 to go Offline');
  t.equal(resolution(SPU_TYPE, 'main-0', StatusKey.spu), 'Online');
  t.equal(resolution(SPU_TYPE, 'main-1', StatusKey.spu), 'Online');
  t.equal(resolutionMessageOf(spu('main-2') as Resource<unknown>, StatusKey.spu), `no heartbeat for ${SPU_TIMEOUT_MS} ms`);

  await until(() => partitionObserved(partition('orders-2') as Resource<unknown>).leader === 1, 'orders-2 to elect SPU 1');
  await until(() => partitionObserved(partition('orders-5') as Resource<unknown>).resolution === 'LeaderOffline', 'orders-5 to be LeaderOffline');
  await until(() => partitions('orders').every((p) => !(partitionObserved(p).liveReplicas ?? [2]).includes(2)), 'SPU 2 gone from every live list');
  t.same(
    partitions('orders').map((p) => [p.id.name, partitionObserved(p)]),
    [
      ['orders-0', { resolution: 'Online', leader: 0, liveReplicas: [0, 1] }],
      ['orders-1', { resolution: 'Online', leader: 1, liveReplicas: [1, 0] }],
      ['orders-2', { resolution: 'Online', leader: 1, liveReplicas: [1, 0] }],
      ['orders-3', { resolution: 'Online', leader: 0, liveReplicas: [0, 1] }],
      ['orders-4', { resolution: 'Online', leader: 1, liveReplicas: [1, 0] }],
      ['orders-5', { resolution: 'LeaderOffline', leader: 2, liveReplicas: [0, 1] }],
    ],
    'leadership of SPU 2 partitions moved to the closest follower within the bound, or nowhere',
  );
  const o2 = partition('orders-2') as Resource<unknown>;
  t.match(o2.status[StatusKey.partition]?.conditions.find((c) => c.type === 'Leader'), { state: 'TRUE', reason: 'Elected', message: '1' });
  t.match(resolutionMessageOf(partition('orders-5') as Resource<unknown>, StatusKey.partition), /SPU 0 lags 500, SPU 1 lags 200/);

  // SPU 2 returns: it regains the partition that had no leader; orders-2 keeps its new leader.
  await heartbeat('main-2');
  await until(() => partitionObserved(partition('orders-5') as Resource<unknown>).resolution === 'Online', 'orders-5 Online again');
  t.same(partitionObserved(partition('orders-5') as Resource<unknown>), { resolution: 'Online', leader: 2, liveReplicas: [2, 0, 1] });
  t.same(partitionObserved(partition('orders-2') as Resource<unknown>), { resolution: 'Online', leader: 1, liveReplicas: [1, 2, 0] }, 'no fail-back');

  // Level-triggered and idempotent: reconciling every key again changes nothing.
  const quiet = (await client.list(SPU_TYPE)).revision;
  await driver.settle(quiet);
  const reconciles = driver.reconciles;
  driver.resync();
  await driver.settle(quiet);
  t.ok(driver.reconciles >= reconciles + 3 + 1 + 1 + 6, 'every SPU, group, topic and partition was reconciled again');
  t.equal((await client.list(SPU_TYPE)).revision, quiet, 'and nothing was written');

  // Deleting the topic deletes its partitions in the same entry (owner cascade).
  const del = await client.delete({ type: TOPIC_TYPE, name: 'orders' });
  t.ok(del.deleted);
  t.same((await client.list(PARTITION_TYPE)).resources, [], 'no partition is left');
  await driver.settle((await client.list(TOPIC_TYPE)).revision);
  t.same((await client.list(PARTITION_TYPE)).resources, [], 'and the controllers made none again');
  t.same(driver.errors, [], 'no reconcile failed');
});

t.test('a waiting topic is re-evaluated when a new SPU comes online; group scaling and id conflicts', async (t) => {
  await heartbeat('main-0', 'main-1', 'main-2');
  await client.write({ type: TOPIC_TYPE, name: 'wide' }, { data: { partitions: 2, replicationFactor: 4 }, version: '0' });
  await until(() => resolution(TOPIC_TYPE, 'wide', StatusKey.topic) === 'InsufficientResources', 'the RF-4 topic to wait for SPUs');
  t.equal(resolutionMessageOf(driver.cache(TOPIC_TYPE).get('//wide') as Resource<unknown>, StatusKey.topic), 'replication factor 4 needs 4 online SPUs; 3 available');

  const endpoint = { host: 'edge.example', port: 9005 };
  await client.write({ type: SPU_TYPE, name: 'edge' }, { data: { id: 3, publicEndpoint: endpoint, privateEndpoint: endpoint }, version: '0' });
  await until(() => resolution(SPU_TYPE, 'edge', StatusKey.spu) === 'Init', 'the custom SPU to be Init');
  t.equal(resolution(TOPIC_TYPE, 'wide', StatusKey.topic), 'InsufficientResources', 'an SPU that is not online does not count');
  await heartbeat('edge');
  // No clock movement: only the SPU watch can wake the topic (its recheck timer is 30 s away).
  await until(() => resolution(TOPIC_TYPE, 'wide', StatusKey.topic) === 'Provisioned', 'the topic to be Provisioned once SPU 3 is online');
  t.same(
    partitions('wide').map((p) => p.data.replicas),
    [
      [0, 1, 2, 3],
      [1, 0, 2, 3],
    ],
  );

  // An SPU with an id that is taken stays Init.
  await client.write({ type: SPU_TYPE, name: 'dup' }, { data: { id: 0, publicEndpoint: endpoint, privateEndpoint: endpoint }, version: '0' });
  await heartbeat('dup');
  await until(() => resolutionMessageOf(spu('dup') as Resource<unknown>, StatusKey.spu).startsWith('id 0 is already used by SPU main-0'), 'the duplicate id to be reported');
  t.equal(resolution(SPU_TYPE, 'dup', StatusKey.spu), 'Init');
  await client.delete({ type: SPU_TYPE, name: 'dup' });
  await driver.settle((await client.list(SPU_TYPE)).revision);
  t.equal(resolution(SPU_GROUP_TYPE, 'main', StatusKey.spuGroup), 'Reserved', 'the group was Invalid only while the duplicate held id 0');

  // Scaling up onto id 3, held by the custom SPU: Invalid, and nothing is created.
  const g = await client.read({ type: SPU_GROUP_TYPE, name: 'main' });
  await client.write({ type: SPU_GROUP_TYPE, name: 'main' }, { data: { replicas: 5, minId: 0, storageSize: '1Gi' }, version: g.resource.version });
  await until(
    () => resolutionMessageOf(driver.cache(SPU_GROUP_TYPE).get('//main') as Resource<unknown>, StatusKey.spuGroup) === 'SPU ids 0..4 are not free: taken by edge (id 3), which this group does not own',
    'the group to be Invalid',
  );
  t.equal(resolution(SPU_GROUP_TYPE, 'main', StatusKey.spuGroup), 'Invalid');
  t.same(
    spus().map((s) => s.id.name),
    ['edge', 'main-0', 'main-1', 'main-2'],
  );

  // Scaling down to 2: valid again, the highest id goes.
  await client.update({ type: SPU_GROUP_TYPE, name: 'main' }, (cur) => ({ data: { ...(cur?.data as object), replicas: 2 } }));
  await until(() => resolution(SPU_GROUP_TYPE, 'main', StatusKey.spuGroup) === 'Reserved' && spu('main-2') === undefined, 'the group to scale down');
  t.same(
    spus().map((s) => s.id.name),
    ['edge', 'main-0', 'main-1'],
  );
  // A managed SPU deleted by hand is made again.
  await client.delete({ type: SPU_TYPE, name: 'main-1' });
  await until(() => spu('main-1') !== undefined, 'main-1 to be made again');
  t.same(driver.errors, [], 'no reconcile failed');
  t.ok(driver.reconciles > 0);
});
