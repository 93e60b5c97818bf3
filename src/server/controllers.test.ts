import t, { type Test } from 'tap';
import { mkdtemp, rm } from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { LEASE_TYPE, type LeaseData } from '../api/index.js';
import { CairnClient, keyOf, resourceKey, type Resource } from '../client/index.js';
import { ControllerManager, DEMO_ARTIST_CONTROLLER, runWithLock, writeStatus, type ControllerSpec, type LockHandle } from '../controller/index.js';
import { createLogger, systemClock, systemTimers } from '../platform/index.js';
import { AGENT_DEFAULTS, type AgentConfig } from './config.js';
import { startAgent, type Agent, type StartAgentOptions } from './agent.js';
import { loopbackAddress } from './leader-controllers.js';
import { agreedLeader, clusterConfigs } from './testing/index.js';

/**
 * The controller runtime against real agents in this process (here rather than in
 * src/controller: `controller` may not import `server`): the cache-synced gate, the demo
 * controller converging and settling, scopes learnt from the server, leader-only built-in
 * controllers moving with leadership, and the lease lock over the client.
 */

const ARTIST = 'demo.v1.Artist';
const ALBUM = 'demo.v1.Album';

async function until<T>(what: string, ms: number, probe: () => T | undefined | Promise<T | undefined>): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

class Fixture {
  readonly agents: Agent[] = [];
  readonly clients: CairnClient[] = [];
  readonly stops: Array<() => Promise<void>> = [];
  private constructor(readonly dir: string) {}

  static async create(t: Test): Promise<Fixture> {
    const f = new Fixture(await mkdtemp(path.join(os.tmpdir(), 'cairn-ctl-')));
    t.teardown(async () => {
      for (const s of f.stops) await s();
      for (const c of f.clients) c.close();
      await Promise.all(f.agents.map((a) => a.close()));
      await rm(f.dir, { recursive: true, force: true });
    });
    return f;
  }

  client(endpoints: string[]): CairnClient {
    const c = new CairnClient({ endpoints, endpointOrder: 'listed', timeoutMs: 20_000 });
    this.clients.push(c);
    return c;
  }

  manager(m: ControllerManager): ControllerManager {
    this.stops.push(() => m.stop());
    return m.start();
  }

  lock(h: LockHandle): LockHandle {
    this.stops.push(() => h.stop());
    return h;
  }

  async dev(cfg: Partial<AgentConfig> = {}, opts: StartAgentOptions = {}): Promise<Agent> {
    const config: AgentConfig = {
      ...AGENT_DEFAULTS,
      nodeId: 'dev',
      dataDir: path.join(this.dir, `dev${this.agents.length}`),
      grpcAddr: '127.0.0.1:0',
      advertiseAddr: '127.0.0.1:0',
      httpAddr: '127.0.0.1:0',
      bootstrap: true,
      dev: true,
      demoTypes: true,
      tickMs: 20,
      ...cfg,
    };
    const agent = await startAgent(config, { logger: createLogger({ level: 'error', nodeId: config.nodeId }), ...opts });
    this.agents.push(agent);
    await agent.ready;
    await until('the dev node to lead', 15_000, () => (agent.coordinator()?.status().role === 'leader' ? true : undefined));
    return agent;
  }

  async three(opts: StartAgentOptions): Promise<Agent[]> {
    const agents: Agent[] = [];
    for (const cfg of await clusterConfigs(this.dir, 3)) {
      const a = await startAgent(cfg, { logger: createLogger({ level: 'error', nodeId: cfg.nodeId }), ...opts });
      agents.push(a);
      this.agents.push(a);
    }
    await Promise.all(agents.map((a) => a.ready));
    return agents;
  }
}

/** Writes `n` items with `write(i)`, `parallel` at once. */
async function writeAll(n: number, parallel: number, write: (i: number) => Promise<unknown>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: parallel }, async () => {
      while (next < n) await write(next++);
    }),
  );
}

const statusOf = (r: Resource<unknown> | undefined, key = DEMO_ARTIST_CONTROLLER): string | undefined => {
  const s = r?.status[key];
  return s === undefined ? undefined : `${s.observed_generation === r?.generation ? 'current' : 'stale'} ${s.conditions.map((c) => `${c.type}=${c.state} ${c.message}`).join(',')}`;
};

t.test('the cache-synced gate: no reconcile before every cache (managed and watched) has its first complete state', async (t) => {
  const f = await Fixture.create(t);
  const agent = await f.dev();
  const c = f.client([agent.grpcAddress]);
  const korn = await c.write({ type: ARTIST, name: 'korn', tenancy: { namespace: 'gate' } }, { data: { name: 'Korn' } });
  // Many albums: the albums' initial state comes in several batches after the artists' (the
  // artists' watch is the stream's first), so without the gate korn would be reconciled while
  // the album cache is still filling.
  const ALBUMS = 700;
  const started = Date.now();
  await writeAll(ALBUMS, 32, (i) => c.write({ type: ALBUM, name: `a${i}`, tenancy: { namespace: 'gate' } }, { data: { title: `Album ${i}`, tracks: ['x'.repeat(200)] }, owner: korn.id }));
  t.comment(`${ALBUMS} albums written in ${Date.now() - started} ms`);

  const seen: Array<{ key: string; artistsSynced: boolean; albumsSynced: boolean; albums: number }> = [];
  const spec: ControllerSpec = {
    name: 'test.v1.gate',
    managedType: ARTIST,
    watches: [{ type: ALBUM, map: (a) => (a.owner !== null ? [keyOf(a.owner)] : []) }],
    async reconcile(key, ctx) {
      const albums = ctx.cache(ALBUM);
      seen.push({ key, artistsSynced: ctx.cache(ARTIST).hasSynced(), albumsSynced: albums.hasSynced(), albums: albums.size });
    },
  };
  const m = f.manager(new ControllerManager({ client: f.client([agent.grpcAddress]), controllers: [spec], clock: systemClock, timers: systemTimers }));
  await m.waitForSync(30_000);
  await until('korn reconciled', 30_000, () => (seen.length > 0 ? true : undefined));
  const first = seen[0];
  t.equal(first?.key, 'default/gate/korn');
  t.ok(first?.artistsSynced, 'the managed cache had synced');
  t.ok(first?.albumsSynced, 'the watched cache had synced');
  t.equal(first?.albums, ALBUMS, 'and held every album');
  t.ok(
    seen.every((s) => s.albumsSynced && s.artistsSynced),
    'every reconcile saw synced caches',
  );
  // 700 album adds each mapped to korn, while queued: deduplicated to very few reconciles.
  t.ok(seen.length <= 3, `korn reconciled ${seen.length} times for ${ALBUMS + 1} add events`);
});

t.test('the demo controller converges, follows watched albums, and settles (an unchanged status is not rewritten)', async (t) => {
  const f = await Fixture.create(t);
  const agent = await f.dev({ demoControllers: true });
  const c = f.client([agent.grpcAddress]);
  const names = ['korn', 'tool', 'abba'];
  for (const n of names) await c.write({ type: ARTIST, name: n, tenancy: { namespace: 'demo' } }, { data: { name: n } });
  const artists = async (): Promise<Array<Resource<unknown>>> => (await c.list(ARTIST, { namespace: 'demo' })).resources;
  await until('every artist to have a current status', 20_000, async () => ((await artists()).every((a) => statusOf(a) === 'current Accepted=TRUE 0 albums') ? true : undefined));
  t.pass('three artists: Accepted, 0 albums, for their current generation');
  t.ok(agent.controllerManager(), 'the dev node leads, so it runs the controllers');

  // A watched type: an album owned by korn maps to korn's key.
  const korn = (await c.read({ type: ARTIST, name: 'korn', tenancy: { namespace: 'demo' } })).resource;
  const album = await c.write({ type: ALBUM, name: 'issues', tenancy: { namespace: 'demo' } }, { data: { title: 'Issues' }, owner: korn.id });
  await until("korn's album count", 20_000, async () => (statusOf((await c.read(korn.id)).resource) === 'current Accepted=TRUE 1 album' ? true : undefined));
  // A new generation of korn: the status follows it.
  await c.write(korn.id, { data: { name: 'Korn', genre: 'metal' } });
  await until('a status for the new generation', 20_000, async () => (statusOf((await c.read(korn.id)).resource) === 'current Accepted=TRUE 1 album' ? true : undefined));

  // Settled: a change that reconciles korn without changing its status writes nothing.
  const runner = agent.controllerManager()?.runner(DEMO_ARTIST_CONTROLLER);
  const idle = (): boolean => runner !== undefined && runner.queue.length === 0 && runner.queue.active === 0 && runner.queue.waiting === 0;
  await until('the controller to be idle', 20_000, () => (idle() ? true : undefined));
  const before = (await c.read(korn.id)).resource;
  const count = runner?.reconcileCount ?? 0;
  await c.write(album.id, { data: { title: 'Issues' }, metadata: { touched: 'yes' } });
  await until('korn reconciled again, and the controller idle', 20_000, () => ((runner?.reconcileCount ?? 0) > count && idle() ? true : undefined));
  const after = (await c.read(korn.id)).resource;
  t.equal(after.version, before.version, 'the same status was not written again: korn is unchanged');

  const text = await agent.metrics.registry.metrics();
  t.match(text, new RegExp(`cairn_controller_reconcile_seconds_count\\{controller="${DEMO_ARTIST_CONTROLLER.replace(/\./g, '\\.')}",result="success"\\} \\d+`), 'reconcile latency in the agent registry');
  t.match(text, /cairn_controller_active\{controller="demo\.v1\.artist-controller"\} 1/);
  t.match(text, /cairn_controller_queue_depth\{controller="demo\.v1\.artist-controller"\} 0/);
});

t.test('scopes are learnt from the server: cluster- and partition-scoped types, and their keys', async (t) => {
  const f = await Fixture.create(t);
  const agent = await f.dev();
  const c = f.client([agent.grpcAddress]);
  await c.write({ type: 'demo.v1.Executive', name: 'boss' }, { data: { name: 'Boss' } });
  await c.write({ type: 'demo.v1.RecordLabel', name: 'acme', tenancy: { partition: 'p1' } }, { data: { name: 'Acme' } });
  const keys: string[] = [];
  const record = (name: string, type: string): ControllerSpec => ({
    name,
    managedType: type,
    async reconcile(key, ctx) {
      keys.push(key);
      const r = ctx.cache(type).get(key);
      if (r !== undefined) await writeStatus(ctx, r, [{ type: 'Seen', state: 'TRUE', reason: 'Ok', message: '' }]);
    },
  });
  f.manager(new ControllerManager({ client: f.client([agent.grpcAddress]), controllers: [record('test.v1.execs', 'demo.v1.Executive'), record('test.v1.labels', 'demo.v1.RecordLabel')], clock: systemClock, timers: systemTimers }));
  await until('both reconciled', 20_000, () => (keys.length >= 2 ? true : undefined));
  t.same([...new Set(keys)].sort(), [resourceKey('', '', 'boss'), resourceKey('p1', '', 'acme')], 'keys are partition/namespace/name with empty unused parts');
  // reconcile records the key before its status write lands: wait for the write, not for the call.
  const boss = await until('the status of boss written', 20_000, async () => {
    const r = (await c.read({ type: 'demo.v1.Executive', name: 'boss' })).resource;
    return r.status['test.v1.execs'] !== undefined ? r : undefined;
  });
  t.equal(boss.status['test.v1.execs']?.observed_generation, boss.generation, 'the status observes the generation it reconciled');

  const bad = new ControllerManager({ client: f.client([agent.grpcAddress]), controllers: [record('test.v1.nope', 'demo.v1.Nope')], restartBaseMs: 50, clock: systemClock, timers: systemTimers });
  f.manager(bad);
  await t.rejects(bad.waitForSync(1000), /did not sync within 1000 ms/, 'an unknown type never syncs (the manager logs it and retries)');
});

t.test('built-in controllers run on the leader only and move with leadership', async (t) => {
  const f = await Fixture.create(t);
  const agents = await f.three({
    controllers: [
      {
        name: 'test.v1.where',
        managedType: ARTIST,
        managedScope: 'namespace',
        async reconcile(key, ctx) {
          const r = ctx.cache(ARTIST).get(key);
          if (r === undefined) return;
          await writeStatus(ctx, r, [{ type: 'Seen', state: 'TRUE', reason: 'Ok', message: '' }]);
        },
      },
    ],
  });
  // The leader all three agree on in one term: a deposed leader may still call itself leader
  // (and still run the controllers) for a moment after an election.
  const leaderOf = (): Agent | undefined => agreedLeader(agents);
  const first = await until('a leader running the controllers', 20_000, () => {
    const l = leaderOf();
    return l !== undefined && l.controllerManager()?.synced === true ? l : undefined;
  });
  t.same(
    agents.filter((a) => a.controllerManager() !== undefined).map((a) => a.nodeId),
    [first.nodeId],
    'only the leader runs them',
  );
  const c = f.client(agents.map((a) => a.grpcAddress));
  await c.write({ type: ARTIST, name: 'before', tenancy: { namespace: 'lead' } }, { data: { name: 'B' } });
  const seen = async (name: string): Promise<true | undefined> => {
    const r = (await c.read({ type: ARTIST, name, tenancy: { namespace: 'lead' } })).resource;
    return r.status['test.v1.where']?.observed_generation === r.generation ? true : undefined;
  };
  await until('"before" to get its status', 20_000, () => seen('before'));

  await first.coordinator()?.transferLeadership('', 10_000);
  const second = await until('a new leader running the controllers', 20_000, () => {
    const l = leaderOf();
    return l !== undefined && l !== first && l.controllerManager()?.synced === true ? l : undefined;
  });
  await until('the old leader to stop them', 20_000, () => (first.controllerManager() === undefined ? true : undefined));
  t.same(
    agents.filter((a) => a.controllerManager() !== undefined).map((a) => a.nodeId),
    [second.nodeId],
    'they moved to the new leader',
  );
  await c.write({ type: ARTIST, name: 'after', tenancy: { namespace: 'lead' } }, { data: { name: 'A' } });
  await until('"after" to get its status from the new leader', 20_000, () => seen('after'));
  t.pass('converged on a write made after the leadership change');
  t.equal(loopbackAddress('0.0.0.0:7500'), '127.0.0.1:7500');
  t.equal(loopbackAddress('[::]:7500'), '[::1]:7500');
  t.equal(loopbackAddress(':::7500'), '[::1]:7500');
  t.equal(loopbackAddress('10.1.2.3:7500'), '10.1.2.3:7500');
});

t.test('runWithLock over a real agent: cairn.v1.Lease is built in; one holder; a stop hands over at once', async (t) => {
  const f = await Fixture.create(t);
  const agent = await f.dev({ dev: false, demoTypes: false });
  // A 30 s lease against a 200 ms look: "at the next look" and "after the lease ran out" stay far
  // apart on a loaded machine (a 3 s lease left a stalled test ~2.8 s of margin); a take-over that
  // waited for the lease would miss the 20 s wait below and the bound after it.
  const timings = { leaseDurationMs: 30_000, renewDeadlineMs: 20_000, retryPeriodMs: 200, clock: systemClock, timers: systemTimers };
  const active = new Set<string>();
  let overlap = false;
  const run = (id: string) => (signal: AbortSignal) => {
    if (active.size > 0) overlap = true;
    active.add(id);
    signal.addEventListener('abort', () => active.delete(id), { once: true });
  };
  const a = f.lock(runWithLock(f.client([agent.grpcAddress]), 'ctl-lock', 'proc-a', run('a'), timings));
  await until('a to hold the lock', 20_000, () => (a.isHolder() ? true : undefined));
  const b = f.lock(runWithLock(f.client([agent.grpcAddress]), 'ctl-lock', 'proc-b', run('b'), timings));
  const c = f.client([agent.grpcAddress]);
  const lease = async (): Promise<Resource<LeaseData>> => (await c.read<LeaseData>({ type: LEASE_TYPE, name: 'ctl-lock' })).resource;
  const v1 = (await lease()).version;
  await until('a renewal', 20_000, async () => ((await lease()).version !== v1 ? true : undefined));
  t.equal((await lease()).data.holder, 'proc-a');
  t.equal(b.isHolder(), false, 'b waits');
  const stoppedAt = Date.now();
  await a.stop();
  await until('b to take over', 20_000, () => (b.isHolder() ? true : undefined));
  const tookMs = Date.now() - stoppedAt;
  t.ok(tookMs < timings.leaseDurationMs, `b took over ${tookMs} ms after a released it (well before the ${timings.leaseDurationMs} ms lease)`);
  t.equal((await lease()).data.holder, 'proc-b');
  t.equal((await lease()).data.transitions, 1);
  t.notOk(overlap, 'never two holders at once');
});
