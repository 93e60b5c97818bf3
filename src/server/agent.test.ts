import t from 'tap';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { CommandType, type ApplyResult } from '../fsm/index.js';
import { createLogger } from '../platform/index.js';
import { AGENT_DEFAULTS, type AgentConfig } from './config.js';
import { startAgent, type Agent } from './agent.js';
import { clusterConfigs, devConfig, freePorts, waitUntil } from './testing/index.js';

let seq = 0;
function body(name: string): Record<string, unknown> {
  seq++;
  return {
    requestId: `req-${seq}-${name}`,
    time: new Date(0).toISOString(),
    uid: `uid-${seq}`,
    generation: `gen-${seq}`,
    id: { type: { group: 'demo', groupVersion: 'v1', kind: 'Artist' }, tenancy: { partition: 'default', namespace: 'default' }, name },
    data: { name },
  };
}

t.test('three agents form a cluster over gRPC; a write sent to a follower commits once and reads back everywhere', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'cairn-agent-'));
  const agents: Agent[] = [];
  t.teardown(async () => {
    for (const a of agents) await a.close();
    await rm(dir, { recursive: true, force: true });
  });
  // The demo types are registered: the leader validates a forwarded write as a local request (issue 15).
  for (const cfg of await clusterConfigs(dir, 3)) {
    agents.push(await startAgent(cfg, { logger: createLogger({ level: 'warn', nodeId: cfg.nodeId }) }));
  }
  await Promise.all(agents.map((a) => a.ready));
  await waitUntil(() => agents.some((a) => a.coordinator()?.status().role === 'leader'), 10_000, 'a leader');
  const follower = agents.find((a) => a.coordinator()?.status().role !== 'leader') as Agent;
  const res: ApplyResult = await (follower.coordinator() as NonNullable<ReturnType<Agent['coordinator']>>).propose(CommandType.ResourceWrite, body('korn'));
  t.ok(res.ok && res.kind === 'write' && res.changed, 'the forwarded write was applied');
  for (const a of agents) {
    const c = a.coordinator();
    if (!c) throw new Error('not running');
    const r = await c.read('linearizable', (s) => s.get({ group: 'demo', kind: 'Artist', tenancy: { partition: 'default', namespace: 'default' }, name: 'korn' }));
    t.same(r.value?.data, { name: 'korn' }, `${a.nodeId} reads it linearizably`);
  }
  const again = await (follower.coordinator() as NonNullable<ReturnType<Agent['coordinator']>>).propose(CommandType.ResourceWrite, { ...body('korn'), requestId: 'req-1-korn', data: { name: 'other' } });
  t.same(again, res, 'a retried request id returns the first result (no second apply)');
  const resp = await fetch(`http://${agents[0]?.httpAddress}/v1/operator/raft/configuration`);
  const conf = (await resp.json()) as { servers: Array<{ id: string; suffrage: string }> };
  t.same(conf.servers.map((s) => `${s.id}:${s.suffrage}`), ['n1:voter', 'n2:voter', 'n3:voter']);
  const metrics = await (await fetch(`http://${agents[0]?.httpAddress}/metrics`)).text();
  t.match(metrics, /cairn_raft_commit_index \d+/);

  // Snapshot save on one node, more writes, restore through a follower: every node converges
  // on the saved state, at a new (higher) revision.
  const saved = Buffer.from(await (await fetch(`http://${agents[0]?.httpAddress}/v1/snapshot`)).arrayBuffer());
  t.ok(saved.subarray(0, 8).equals(Buffer.from('CAIRNSV1')), 'a snapshot file starts with its magic');
  await (follower.coordinator() as NonNullable<ReturnType<Agent['coordinator']>>).propose(CommandType.ResourceWrite, body('later'));
  const put = await fetch(`http://${follower.httpAddress}/v1/snapshot`, { method: 'PUT', headers: { 'content-type': 'application/octet-stream' }, body: saved });
  t.equal(put.status, 200, 'restore accepted on a follower');
  const restored = (await put.json()) as { revision: string; resources: number };
  t.equal(restored.resources, 1);
  for (const a of agents) {
    const c = a.coordinator();
    if (!c) throw new Error('not running');
    const r = await c.read('linearizable', (s) => s.list({ group: 'demo', kind: 'Artist', partition: '*', namespace: '*' }).map((x) => x.id.name));
    t.same(r.value, ['korn'], `${a.nodeId} holds exactly the saved state`);
    t.ok(r.revision >= Number(restored.revision), `${a.nodeId} revision moved forward`);
  }
  const bad = await fetch(`http://${follower.httpAddress}/v1/snapshot`, { method: 'PUT', headers: { 'content-type': 'application/octet-stream' }, body: saved.subarray(0, saved.length - 1) });
  t.equal(bad.status, 400, 'a truncated snapshot is refused');
});

t.test('connections accepted on the gRPC port have TCP_NODELAY set (grpc-js leaves Nagle on for them)', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'cairn-agent-'));
  const agent = await startAgent(
    { ...AGENT_DEFAULTS, nodeId: 'n1', dataDir: dir, grpcAddr: '127.0.0.1:0', advertiseAddr: '127.0.0.1:0', httpAddr: '127.0.0.1:0', bootstrap: true, logLevel: 'silent' },
    { logger: createLogger({ level: 'silent', nodeId: 'n1' }) },
  );
  const setNoDelay = net.Socket.prototype.setNoDelay;
  const seen: Array<{ local: number | undefined; on: boolean | undefined }> = [];
  net.Socket.prototype.setNoDelay = function (this: net.Socket, on?: boolean) {
    seen.push({ local: this.localPort, on });
    return setNoDelay.call(this, on);
  };
  t.teardown(async () => {
    net.Socket.prototype.setNoDelay = setNoDelay;
    await agent.close();
    await rm(dir, { recursive: true, force: true });
  });
  const port = Number(agent.grpcAddress.split(':').at(-1));
  const socket = net.connect(port, '127.0.0.1');
  t.teardown(() => socket.destroy());
  await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  await waitUntil(() => seen.some((s) => s.local === port && s.on !== false), 5000, 'TCP_NODELAY on the accepted socket');
  t.pass('the server side of the connection (local port = the gRPC port) turned Nagle off');
});

t.test('a removed node restarted with its data and --join asks the leader to add it back', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'cairn-agent-'));
  const agents: Agent[] = [];
  t.teardown(async () => {
    for (const a of agents) await a.close();
    await rm(dir, { recursive: true, force: true });
  });
  const configs = await clusterConfigs(dir, 3, { demoTypes: false });
  const start = async (i: number): Promise<Agent> => {
    const a = await startAgent(configs[i] as (typeof configs)[number], { logger: createLogger({ level: 'warn', nodeId: `n${i + 1}` }) });
    agents[i] = a;
    return a;
  };
  for (let i = 0; i < 3; i++) await start(i);
  await Promise.all(agents.map((a) => a.ready));
  // A leader all three agree on: in the window after an election a deposed leader may still call
  // itself leader, and a change sent to it is forwarded to the real one, which could be the victim.
  const agreed = (): Agent | undefined => {
    const sts = agents.map((a) => a.coordinator()?.status());
    const lead = agents.find((_, i) => sts[i]?.role === 'leader');
    const st = lead?.coordinator()?.status();
    return st && sts.every((s) => s?.leader === st.id && s.term === st.term) ? lead : undefined;
  };
  await waitUntil(() => agreed() !== undefined, 10_000, 'a leader all agree on');
  const leader = agreed() as Agent;
  const victim = agents.findIndex((a) => a !== leader);
  const victimId = `n${victim + 1}`;
  const voters = (): string =>
    (leader.coordinator()?.status().config.members ?? []).filter((m) => m.suffrage === 'voter').map((m) => m.id).sort().join(',');
  await leader.coordinator()?.changeMembership({ type: 'remove', id: victimId as never });
  t.notOk(voters().includes(victimId), `${victimId} removed: voters ${voters()}`);
  // The leader stopped sending to it when it appended the change (thesis §4.2.2), so the
  // removed node's own configuration still names it: it cannot tell it was removed.
  t.ok(agents[victim]?.coordinator()?.status().config.members.some((m) => m.id === victimId), `${victimId} still counts itself a member (its status: ${JSON.stringify(agents[victim]?.coordinator()?.status(), (_, v: unknown) => (v instanceof Map ? [...v] : v))})`);
  await agents[victim]?.close();
  // Back on a new port: its old one may have been taken meanwhile (as a client's local port) on
  // a busy machine; a removed node may come back at another address.
  const [port] = await freePorts(1);
  configs[victim] = { ...(configs[victim] as (typeof configs)[number]), grpcAddr: `127.0.0.1:${String(port)}`, advertiseAddr: `127.0.0.1:${String(port)}` };
  await (await start(victim)).ready;
  await waitUntil(() => voters() === 'n1,n2,n3', 20_000, `${victimId} added back and promoted (voters ${voters()})`);
  t.equal(voters(), 'n1,n2,n3', `${victimId} is a voter again`);
});

t.test('the raft log store: wal for a new data dir, a LevelDB data dir keeps LevelDB; fsyncs are counted', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'cairn-agent-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const run = async (dataDir: string, overrides: Partial<AgentConfig>, name: string): Promise<{ names: string[]; fsyncs: number }> => {
    const agent = await startAgent(devConfig(dataDir, { demoTypes: false, ...overrides }), { logger: createLogger({ level: 'silent', nodeId: 'dev' }) });
    try {
      await agent.ready;
      await waitUntil(() => agent.coordinator()?.status().role === 'leader', 10_000, 'leadership');
      const c = agent.coordinator() as NonNullable<ReturnType<Agent['coordinator']>>;
      await c.propose(CommandType.ResourceWrite, body(name));
      const r = await c.read('linearizable', (s) => s.list({ group: 'demo', kind: 'Artist', partition: '*', namespace: '*' }).map((x) => x.id.name));
      const metrics = await (await fetch(`http://${agent.httpAddress}/metrics`)).text();
      return { names: r.value, fsyncs: Number(/^cairn_log_fsync_seconds_count (\d+)$/m.exec(metrics)?.[1] ?? 'NaN') };
    } finally {
      await agent.close();
    }
  };
  const fresh = path.join(dir, 'fresh');
  const first = await run(fresh, {}, 'a');
  t.ok(existsSync(path.join(fresh, 'wal')) && !existsSync(path.join(fresh, 'raft-log')), 'a new data dir gets the segment-file log (wal/)');
  t.ok(first.fsyncs > 0, `cairn_log_fsync_seconds counts the WAL's fdatasyncs (${first.fsyncs})`);
  t.same((await run(fresh, { logStore: 'level' }, 'b')).names, ['a', 'b'], 'restarted with --log-store level: it keeps its wal, and its data');
  t.notOk(existsSync(path.join(fresh, 'raft-log')), 'no LevelDB log was made');

  const old = path.join(dir, 'old');
  const level = await run(old, { logStore: 'level' }, 'c');
  t.ok(existsSync(path.join(old, 'raft-log')) && !existsSync(path.join(old, 'wal')), '--log-store level makes a LevelDB log (raft-log/)');
  t.ok(level.fsyncs > 0, 'and the metric counts its synced batches');
  t.same((await run(old, {}, 'd')).names, ['c', 'd'], 'restarted with the default (wal): it keeps LevelDB, and its data');
  t.notOk(existsSync(path.join(old, 'wal')), 'no wal/ was made');
});
