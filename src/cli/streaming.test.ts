// `cairn spu|spu-group|topic|partition ...` against a real agent started in this process (the
// streaming.v1 types are built in). No controllers run here: the test writes what they would
// report (status) through a client, so each command's output is pinned for a known state.
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import t, { type Test } from 'tap';
import { CairnClient, type Condition, type Resource } from '../client/index.js';
import { AGENT_DEFAULTS, startAgent, type Agent, type AgentConfig } from '../server/index.js';
import type { AgentDeps } from './agent.js';
import { ExitCode } from './errors.js';
import { runCli } from './program.js';
import { parseReplicaAssignment } from './streaming.js';
import { memoryIo } from './testing.js';

const noAgent = (): Promise<AgentDeps> => Promise.reject(new Error('no agent in this test'));

const dir = await mkdtemp(path.join(os.tmpdir(), 'cairn-cli-streaming-'));
const config: AgentConfig = {
  ...AGENT_DEFAULTS,
  nodeId: 'dev',
  dataDir: path.join(dir, 'data'),
  grpcAddr: '127.0.0.1:0',
  advertiseAddr: '127.0.0.1:0',
  httpAddr: '127.0.0.1:0',
  bootstrap: true,
  logLevel: 'silent',
  tickMs: 20,
};
const agent: Agent = await startAgent(config);
await agent.ready;
for (const end = Date.now() + 10_000; agent.coordinator()?.status().role !== 'leader'; ) {
  if (Date.now() > end) throw new Error('the agent did not become leader within 10 s');
  await new Promise((r) => setTimeout(r, 10));
}
const client = new CairnClient({ endpoints: [agent.grpcAddress], timeoutMs: 10_000 });
t.teardown(async () => {
  client.close();
  await agent.close();
  await rm(dir, { recursive: true, force: true });
});

interface Run {
  readonly code: number;
  readonly out: string;
  readonly err: string;
}

async function cairn(...args: string[]): Promise<Run> {
  const io = memoryIo({}, dir);
  const code = await runCli([...args, '--endpoint', agent.grpcAddress], io, noAgent);
  return { code, out: io.out(), err: io.err() };
}

async function ok(t: Test, ...args: string[]): Promise<string> {
  const r = await cairn(...args);
  t.equal(r.code, 0, `${args.join(' ')}: ${r.err}`);
  return r.out;
}

/** Writes a controller's report, as the controller would. */
async function report(type: string, name: string, key: string, conditions: Condition[]): Promise<void> {
  const r = (await client.read({ type, name })).resource;
  await client.writeStatus({ type, name, uid: r.id.uid }, key, { observed_generation: r.generation, conditions });
}
const resolution = (reason: string, message: string, state: Condition['state'] = 'TRUE'): Condition => ({ type: 'Resolution', state, reason, message });

t.test('spu-group create, list, describe, delete; create-only; bad flags and refused data', async (t) => {
  t.match(await ok(t, 'spu-group', 'create', 'main', '--replicas', '2'), /^SPU group main created \(uid [0-9A-Z]{26}\): {"minId":0,"replicas":2,"storageSize":"1Gi"}\n$/);
  t.equal(await ok(t, 'spu-group', 'list'), ['NAME   REPLICAS   MIN ID   STORAGE   RESOLUTION   REASON', 'main          2        0   1Gi       Init         -', ''].join('\n'), 'no report yet: Init');

  const again = await cairn('spu-group', 'create', 'main', '--replicas', '2');
  t.equal(again.code, ExitCode.CONFLICT);
  t.equal(again.err, 'cairn: SPU group main already exists: delete it first, or change it with cairn resource write streaming.v1.SpuGroup main\n');
  const badFlag = await cairn('spu-group', 'create', 'x', '--replicas', 'three');
  t.equal(badFlag.code, ExitCode.USAGE);
  t.equal(badFlag.err, "cairn: --replicas must be a non-negative integer, got 'three'\n");
  const refused = await cairn('spu-group', 'create', 'x', '--replicas', '1', '--storage-size', '1GB');
  t.equal(refused.code, ExitCode.INVALID, 'the schema refuses it on the server');
  t.match(refused.err, /^cairn: INVALID_ARGUMENT: .*storageSize must match pattern/);

  // The group controller's work, done by hand: two owned SPUs and a Reserved report.
  const group = (await client.read({ type: 'streaming.v1.SpuGroup', name: 'main' })).resource;
  for (const id of [0, 1]) {
    const host = `main-${id}`;
    await client.write(
      { type: 'streaming.v1.Spu', name: host },
      { data: { id, type: 'managed', publicEndpoint: { host, port: 9005 }, privateEndpoint: { host, port: 9006 } }, owner: group.id, version: '0' },
    );
  }
  await report('streaming.v1.SpuGroup', 'main', 'streaming.v1.spu-group-controller', [resolution('Reserved', '2 SPUs, ids 0..1')]);
  const described = await ok(t, 'spu-group', 'describe', 'main');
  t.match(described, /^resolution: Reserved \(2 SPUs, ids 0\.\.1\)\ntype: +streaming\.v1\.SpuGroup\nname: +main\n/);
  t.match(described, /\nspus:\n  NAME +ID +TYPE +RESOLUTION +RACK +PUBLIC +PRIVATE +GROUP\n  main-0 +0 +managed +Init +- +main-0:9005 +main-0:9006 +main\n  main-1 +1 /);
  const j = JSON.parse((await ok(t, 'spu-group', 'describe', 'main', '--json'))) as { resource: Resource; spus: Resource[] };
  t.same(j.spus.map((s) => s.id.name).sort(), ['main-0', 'main-1']);

  t.equal(await ok(t, 'spu-group', 'delete', 'main'), 'streaming.v1.SpuGroup main deleted, with everything it owned\n');
  t.equal(await ok(t, 'spu', 'list'), 'no SPUs\n', 'its SPUs went with it');
  t.equal(await ok(t, 'spu-group', 'delete', 'main'), 'SPU group main does not exist: nothing to delete\n');
  t.equal(await ok(t, 'spu-group', 'list'), 'no SPU groups\n');
});

t.test('spu list, describe and heartbeat', async (t) => {
  const ep = { host: 'edge.example', port: 9005 };
  await client.write({ type: 'streaming.v1.Spu', name: 'edge' }, { data: { id: 7, rack: 'r1', publicEndpoint: ep, privateEndpoint: { host: '::1', port: 9006 } } });
  t.equal(
    await ok(t, 'spu', 'list'),
    ['NAME   ID   TYPE     RESOLUTION   RACK   PUBLIC              PRIVATE      GROUP', 'edge    7   custom   Init         r1     edge.example:9005   [::1]:9006   -', ''].join('\n'),
  );
  t.match(await ok(t, 'spu', 'heartbeat', 'edge'), /^streaming\.v1\.Spu edge heartbeat sent \(version \d+\)\n$/);
  const hb = (await client.read({ type: 'streaming.v1.Spu', name: 'edge' })).resource;
  t.same(hb.status['streaming.v1.spu-heartbeat']?.conditions, [{ type: 'Heartbeat', state: 'TRUE', reason: 'Alive', message: '' }], 'the heartbeat key the SPU controller reads');
  await report('streaming.v1.Spu', 'edge', 'streaming.v1.spu-controller', [resolution('Online', 'heartbeats arriving (timeout 10000 ms)')]);
  t.match(await ok(t, 'spu', 'list'), /\nedge +7 +custom +Online +r1 /);
  t.match(await ok(t, 'spu', 'describe', 'edge'), /^resolution: Online \(heartbeats arriving \(timeout 10000 ms\)\)\ntype: +streaming\.v1\.Spu\n/);
  const missing = await cairn('spu', 'heartbeat', 'nobody');
  t.equal(missing.code, ExitCode.NOT_FOUND);
  await client.delete({ type: 'streaming.v1.Spu', name: 'edge' });
});

t.test('topic create (computed or manual), list, describe with partitions, partition list, delete', async (t) => {
  t.match(await ok(t, 'topic', 'create', 'orders', '-p', '2', '-r', '2'), /^topic orders created \(uid [0-9A-Z]{26}\): {"partitions":2,"replicationFactor":2}\n$/);
  t.match(await ok(t, 'topic', 'create', 'manual', '--replica-assignment', '1,0; 0,1'), /: {"replicaAssignment":\[\[1,0\],\[0,1\]\]}\n$/);
  t.match(await ok(t, 'topic', 'create', 'dflt'), /: {"partitions":1,"replicationFactor":1}\n$/, "the server's defaults");
  const both = await cairn('topic', 'create', 'x', '-p', '2', '--replica-assignment', '0');
  t.equal(both.code, ExitCode.USAGE);
  t.equal(both.err, 'cairn: --replica-assignment cannot be combined with --partitions or --replication\n');
  const zero = await cairn('topic', 'create', 'x', '-p', '0');
  t.equal(zero.code, ExitCode.INVALID);
  const dup = await cairn('topic', 'create', 'x', '--replica-assignment', '0,0');
  t.equal(dup.code, ExitCode.INVALID);
  t.match(dup.err, /replicaAssignment\[0\] names SPU 0 twice/);

  await report('streaming.v1.Topic', 'dflt', 'streaming.v1.topic-controller', [resolution('InsufficientResources', 'replication factor 1 needs 1 online SPUs; 0 available', 'FALSE')]);
  await report('streaming.v1.Topic', 'orders', 'streaming.v1.topic-controller', [resolution('Provisioned', '2 partitions, replication factor 2; replicas (leader first): [0,1] [1,0]')]);
  t.equal(
    await ok(t, 'topic', 'list'),
    [
      'NAME     PARTITIONS   REPLICATION          RESOLUTION              REASON',
      'dflt              1   1                    InsufficientResources   replication factor 1 needs 1 online SPUs; 0 available',
      'manual            2   manual [1,0] [0,1]   Init                    -',
      'orders            2   2                    Provisioned             -',
      '',
    ].join('\n'),
    'a Provisioned topic shows no reason (its replica map is in partition list)',
  );

  // The topic controller's partitions, and the partition controller's report on one of them.
  const orders = (await client.read({ type: 'streaming.v1.Topic', name: 'orders' })).resource;
  for (const [index, replicas] of [
    [0, [0, 1]],
    [1, [1, 0]],
  ] as const) {
    await client.write({ type: 'streaming.v1.Partition', name: `orders-${index}` }, { data: { topic: 'orders', index, leader: replicas[0], replicas }, owner: orders.id, version: '0' });
  }
  await report('streaming.v1.Partition', 'orders-1', 'streaming.v1.partition-controller', [
    resolution('Online', 'leader on SPU 0 (elected; the assigned leader is SPU 1)'),
    { type: 'Leader', state: 'TRUE', reason: 'Elected', message: '0' },
    { type: 'LiveReplicas', state: 'TRUE', reason: 'Online', message: '0' },
  ]);
  const table = ['TOPIC    PARTITION   LEADER   REPLICAS   LIVE   RESOLUTION', 'orders           0        0   [0,1]      -      Init', 'orders           1        0   [1,0]      [0]    Online', ''].join('\n');
  t.equal(await ok(t, 'partition', 'list'), table, 'the elected leader once reported, else the assigned one');
  t.equal(await ok(t, 'partition', 'list', '--topic', 'orders'), table);
  t.equal(await ok(t, 'partition', 'list', '--topic', 'manual'), 'no partitions\n');
  const described = await ok(t, 'topic', 'describe', 'orders');
  t.match(described, /^resolution: Provisioned \(2 partitions, replication factor 2; replicas \(leader first\): \[0,1\] \[1,0\]\)\ntype: +streaming\.v1\.Topic\n/);
  t.match(described, /\npartitions:\n  TOPIC +PARTITION +LEADER +REPLICAS +LIVE +RESOLUTION\n  orders +0 /);
  const listed = JSON.parse(await ok(t, 'partition', 'list', '--json')) as { resources: Resource[]; revision: string };
  t.equal(listed.resources.length, 2);
  t.match(listed.revision, /^\d+$/);

  t.equal(await ok(t, 'topic', 'delete', 'orders'), 'streaming.v1.Topic orders deleted, with everything it owned\n');
  t.equal(await ok(t, 'partition', 'list'), 'no partitions\n', 'the partitions went with their topic');
  const gone = await cairn('topic', 'describe', 'orders');
  t.equal(gone.code, ExitCode.NOT_FOUND);
});

t.test('parseReplicaAssignment', async (t) => {
  t.same(parseReplicaAssignment('0,1,2;1,2,0'), [
    [0, 1, 2],
    [1, 2, 0],
  ]);
  t.same(parseReplicaAssignment(' 3 '), [[3]]);
  t.throws(() => parseReplicaAssignment('0,1;'), /rows of SPU ids separated by ';'/);
  t.throws(() => parseReplicaAssignment('0,x'), /an SPU id must be a non-negative integer, got 'x'/);
});
