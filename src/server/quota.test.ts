/**
 * The quota through a running agent (docs/security.md "Quotas"): the HTTP contract of NO_SPACE
 * (507, its details), the alarm in /v1/agent/self and the metrics, deletes clearing it; and the
 * leader clamping a forwarded command's quota to its own, so a follower with a larger quota, or
 * an older one that stamps none, cannot grow the data past the leader's quota.
 */
import t from 'tap';
import { mkdtemp, rm } from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { CommandType, type ApplyResult } from '../fsm/index.js';
import { createLogger } from '../platform/index.js';
import { startAgent, type Agent } from './agent.js';
import { clusterConfigs, devConfig, waitForAgreedLeader, waitUntil } from './testing/index.js';

const MIB = 1024 * 1024;

async function http(agent: Agent, method: string, p: string, body?: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await fetch(`http://${agent.httpAddress}${p}`, {
    method,
    ...(body !== undefined ? { body: JSON.stringify(body), headers: { 'content-type': 'application/json' } } : {}),
  });
  const text = await res.text();
  return { status: res.status, json: (text === '' ? {} : JSON.parse(text)) as Record<string, unknown> };
}

const put = (a: Agent, name: string, bytes: number): ReturnType<typeof http> => http(a, 'PUT', `/v1/resource/demo.v1.Artist/${name}`, { data: { name: 'x'.repeat(bytes) } });

t.test('a dev node: fill to the quota over HTTP, 507 NO_SPACE, the alarm in agent/self and metrics, deletes clear it', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'cairn-quota-'));
  const agent = await startAgent(devConfig(dir, { quotaBytes: MIB, demoTypes: true }), { logger: createLogger({ level: 'silent', nodeId: 'dev' }) });
  t.teardown(async () => {
    await agent.close();
    await rm(dir, { recursive: true, force: true });
  });
  await agent.ready;
  await waitUntil(() => agent.coordinator()?.status().role === 'leader', 10_000, 'the dev node to lead');

  let self = await http(agent, 'GET', '/v1/agent/self');
  t.same([self.json['alarms'], self.json['quota_bytes'], self.json['data_bytes']], [[], MIB, 0], 'agent/self: no alarm, the quota, no data');
  const written: string[] = [];
  let refused: Awaited<ReturnType<typeof http>> | undefined;
  for (let i = 0; i < 40 && refused === undefined; i++) {
    const r = await put(agent, `r${i}`, 64 * 1024);
    if (r.status === 200) written.push(`r${i}`);
    else refused = r;
  }
  if (refused === undefined) throw new Error('40 writes of 64 KiB fit in a 1 MiB quota');
  t.equal(refused.status, 507, 'HTTP 507 Insufficient Storage');
  const e = refused.json['error'] as Record<string, unknown>;
  t.equal(e['code'], 'NO_SPACE');
  t.match(e['message'], /would exceed the quota of 1048576 bytes; delete or shrink resources to make room/);
  t.equal(e['quota_bytes'], MIB, 'details: quota_bytes');
  t.ok(typeof e['data_bytes'] === 'number' && (e['data_bytes'] as number) <= MIB, `details: data_bytes ${String(e['data_bytes'])}`);
  t.ok(typeof e['needed'] === 'number' && (e['needed'] as number) > 64 * 1024, `details: needed ${String(e['needed'])}`);
  t.ok(written.length >= 12 && written.length <= 16, `${written.length} writes of 64 KiB fit in 1 MiB`);

  self = await http(agent, 'GET', '/v1/agent/self');
  t.same(self.json['alarms'], ['NO_SPACE'], 'agent/self shows the alarm');
  const metrics = await (await fetch(`http://${agent.httpAddress}/metrics`)).text();
  t.match(metrics, /^cairn_alarm_active\{alarm="NO_SPACE"\} 1$/m);
  t.match(metrics, /^cairn_quota_bytes 1048576$/m);
  t.match(metrics, new RegExp(`^cairn_store_data_bytes ${String(self.json['data_bytes'])}$`, 'm'));
  t.match(metrics, /^cairn_watch_window_bytes \d+$/m);

  t.equal((await put(agent, 'small', 10)).status, 507, 'under the alarm even a small create is refused');
  t.equal((await http(agent, 'GET', `/v1/resource/demo.v1.Artist/${written[0] as string}`)).status, 200, 'reads work');
  t.equal((await put(agent, written[0] as string, 63 * 1024)).status, 200, 'a shrinking write works');
  const alarms = async (): Promise<unknown> => (await http(agent, 'GET', '/v1/agent/self')).json['alarms'];
  t.same(await alarms(), ['NO_SPACE'], 'shrinking by 1 KiB leaves the alarm raised (above the low-water mark)');
  let deletes = 0;
  while (JSON.stringify(await alarms()) !== '[]') {
    const name = written.pop();
    if (name === undefined) throw new Error('deleted everything and the alarm is still raised');
    t.equal((await http(agent, 'DELETE', `/v1/resource/demo.v1.Artist/${name}`)).status, 200, `delete ${name} works under the alarm`);
    deletes++;
  }
  t.ok(deletes >= 1, `${deletes} deletes cleared the alarm`);
  const after = await (await fetch(`http://${agent.httpAddress}/metrics`)).text();
  t.match(after, /^cairn_alarm_active\{alarm="NO_SPACE"\} 0$/m, 'the metric follows');
  t.equal((await put(agent, 'small', 10)).status, 200, 'growing writes work again');
});

t.test('the leader clamps a forwarded command\'s quota to its own (a larger one, or none)', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'cairn-quota-'));
  const agents: Agent[] = [];
  t.teardown(async () => {
    for (const a of agents) await a.close();
    await rm(dir, { recursive: true, force: true });
  });
  for (const cfg of await clusterConfigs(dir, 3, { quotaBytes: MIB })) agents.push(await startAgent(cfg, { logger: createLogger({ level: 'silent', nodeId: cfg.nodeId }) }));
  await Promise.all(agents.map((a) => a.ready));
  // A follower of the leader all three agree on (not merely a node that does not call itself leader).
  const leader = await waitForAgreedLeader(agents, 15_000);
  const follower = agents.find((a) => a !== leader) as Agent;
  const fc = follower.coordinator() as NonNullable<ReturnType<Agent['coordinator']>>;
  let seq = 0;
  const body = (name: string, bytes: number, quota: number | undefined): Record<string, unknown> => {
    seq++;
    return {
      requestId: `clamp-${seq}`,
      time: new Date(0).toISOString(),
      uid: `uid-clamp-${seq}`,
      generation: `gen-clamp-${seq}`,
      id: { type: { group: 'demo', groupVersion: 'v1', kind: 'Artist' }, tenancy: { partition: 'default', namespace: 'default' }, name },
      data: { name: 'x'.repeat(bytes) },
      expectedVersion: 0,
      ...(quota !== undefined ? { quotaBytes: quota } : {}),
    };
  };
  // A follower's own propose goes to the leader through forwarding: claim 1 GiB, then none.
  const results: ApplyResult[] = [];
  for (let i = 0; i < 24; i++) results.push(await fc.propose(CommandType.ResourceWrite, body(`big${i}`, 64 * 1024, i % 2 === 0 ? 1024 * MIB : undefined)));
  const refused = results.filter((r) => !r.ok);
  t.ok(refused.length > 0, `${refused.length} of 24 forwarded 64 KiB writes claiming a larger quota or none were refused`);
  t.ok(refused.every((r) => !r.ok && r.error.code === 'NO_SPACE' && r.error.details['quotaBytes'] === MIB), 'with NO_SPACE against the leader\'s quota of 1 MiB');
  for (const a of agents) {
    await waitUntil(() => (a.coordinator()?.status().applied ?? 0) >= (fc.status().commit ?? 0), 10_000, `${a.nodeId} to catch up`);
    const d = a.coordinator()?.dataStatus();
    t.ok(d !== undefined && d.dataBytes <= MIB, `${a.nodeId} holds ${String(d?.dataBytes)} bytes, within the leader's quota`);
    t.same(d?.alarms, ['NO_SPACE'], `${a.nodeId} has the alarm raised`);
  }
});
