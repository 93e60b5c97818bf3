import t, { type Test } from 'tap';
import { mkdtemp, rm } from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import {
  CairnClient,
  MaterializedView,
  keyOf,
  type CairnClientError,
  type WatchEvent,
  type WatchOptions,
  type WatchSpec,
  type WatchStream,
} from '../client/index.js';
import { createLogger } from '../platform/index.js';
import type { AgentConfig } from './config.js';
import { startAgent, type Agent } from './agent.js';
import { clusterConfigs, devConfig, waitForAgreedLeader, waitUntil } from './testing/index.js';

/**
 * Client watches, materialized views and informers against real agents in this process
 * (gRPC WatchList as the agent serves it): initial state, tail and live events; deletes with
 * their last state; several watches on one stream; a resume after the server ended a slow
 * consumer; COMPACTED and RESET answered with a reset and a re-list; a node shutting down; the
 * view's atomic swap; informer notifications; one stream for a shared informer factory. (Here
 * rather than in src/client: `client` may not import `server`.)
 */

interface Artist {
  name: string;
  genre?: string;
}
const ARTIST = 'demo.v1.Artist';
const ALBUM = 'demo.v1.Album';

class Fixture {
  readonly agents: Agent[] = [];
  private readonly clients: CairnClient[] = [];

  private constructor(readonly dir: string) {}

  static async create(t: Test): Promise<Fixture> {
    const f = new Fixture(await mkdtemp(path.join(os.tmpdir(), 'cairn-watch-')));
    t.teardown(async () => {
      for (const c of f.clients) c.close();
      await Promise.all(f.agents.map((a) => a.close()));
      await rm(f.dir, { recursive: true, force: true });
    });
    return f;
  }

  client(endpoints: string[]): CairnClient {
    const c = new CairnClient({ endpoints, endpointOrder: 'listed', timeoutMs: 15_000 });
    this.clients.push(c);
    return c;
  }
}

/** A single node like `cairn agent --dev`, with watch settings of the test's choosing. */
async function devAgent(f: Fixture, watch: Partial<Pick<AgentConfig, 'watchWindowEvents' | 'watchBufferEvents' | 'watchBookmarkMs'>> = {}): Promise<Agent> {
  const cfg = devConfig(path.join(f.dir, `dev${f.agents.length}`), watch);
  const agent = await startAgent(cfg, { logger: createLogger({ level: 'error', nodeId: cfg.nodeId }) });
  f.agents.push(agent);
  await agent.ready;
  await waitUntil(() => agent.coordinator()?.status().role === 'leader', 10_000, 'the dev node to lead');
  return agent;
}

/** Three nodes forming a cluster; resolves once all agree on a leader. */
async function threeAgents(f: Fixture): Promise<void> {
  for (const cfg of await clusterConfigs(f.dir, 3)) {
    f.agents.push(await startAgent(cfg, { logger: createLogger({ level: 'error', nodeId: cfg.nodeId }) }));
  }
  await Promise.all(f.agents.map((a) => a.ready));
  // All three agree on one leader in one term (a deposed leader may still call itself leader).
  await waitForAgreedLeader(f.agents, 10_000);
}

/** Events from `w` until `done` says so (or the deadline, which fails with what was seen). */
async function collect<D>(w: WatchStream<D>, done: (seen: ReadonlyArray<WatchEvent<D>>) => boolean, ms = 30_000): Promise<Array<WatchEvent<D>>> {
  const seen: Array<WatchEvent<D>> = [];
  const deadline = Date.now() + ms;
  while (!done(seen)) {
    const left = deadline - Date.now();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const r = await Promise.race([w.next(), new Promise<'timeout'>((resolve) => (timer = setTimeout(() => resolve('timeout'), Math.max(0, left))))]);
    clearTimeout(timer);
    if (r === 'timeout') throw new Error(`timed out after ${ms} ms; saw ${seen.length} events, the last: ${seen.slice(-3).map(show).join('; ')}`);
    if (r.done) throw new Error(`the watch ended after ${seen.length} events`);
    seen.push(r.value);
  }
  return seen;
}

function show(e: WatchEvent<unknown>): string {
  switch (e.type) {
    case 'change':
    case 'delete':
      return `${e.type} w${e.watch} ${e.revision} ${e.resource.id.tenancy.namespace}/${e.resource.id.name}`;
    case 'tail':
      return `tail w${e.watch} ${e.revision}`;
    case 'bookmark':
      return `bookmark ${e.revision}`;
    case 'reset':
      return `reset w${e.watch} ${e.reason}`;
  }
}

const tails = (w: number) => (seen: ReadonlyArray<WatchEvent<unknown>>) => seen.some((e) => e.type === 'tail' && e.watch === w);
const names = (evs: ReadonlyArray<WatchEvent<unknown>>): string[] => evs.flatMap((e) => (e.type === 'change' || e.type === 'delete' ? [`${e.type} ${e.resource.id.name}`] : []));

/** Revisions of the change/delete events after the first tail (watch 0) strictly increase. */
function liveRevisionsIncrease(evs: ReadonlyArray<WatchEvent<unknown>>): boolean {
  let last = -1n;
  for (const e of evs) {
    if (e.type !== 'change' && e.type !== 'delete') continue;
    const r = BigInt(e.revision);
    if (r <= last) return false;
    last = r;
  }
  return true;
}

/** Writes `n` new artists `<prefix>-<i>` (at most `parallel` at once), returning the acks in commit order. */
async function writeMany(c: CairnClient, prefix: string, n: number, opts: { namespace?: string; padBytes?: number; parallel?: number } = {}): Promise<Array<{ name: string; version: string }>> {
  const acks: Array<{ name: string; version: string }> = [];
  const pad = 'x'.repeat(opts.padBytes ?? 0);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < n) {
      const i = next++;
      const name = `${prefix}-${i}`;
      const r = await c.write<Artist>({ type: ARTIST, name, tenancy: { namespace: opts.namespace ?? 'default' } }, { data: { name: `${name}${pad}` } });
      acks.push({ name, version: r.version });
    }
  };
  await Promise.all(Array.from({ length: opts.parallel ?? 8 }, worker));
  return acks.sort((a, b) => Number(a.version) - Number(b.version));
}

t.test('a watch: the initial state, the tail, then live changes in commit order; a delete carries the last stored state', async (t) => {
  const f = await Fixture.create(t);
  const agent = await devAgent(f);
  const c = f.client([agent.grpcAddress]);
  const a = await c.write<Artist>({ type: ARTIST, name: 'a' }, { data: { name: 'A' } });
  const b = await c.write<Artist>({ type: ARTIST, name: 'b' }, { data: { name: 'B', genre: 'rock' } });
  await c.write<Artist>({ type: ARTIST, name: 'elsewhere', tenancy: { namespace: 'other' } }, { data: { name: 'E' } });

  const w = c.watch<Artist>({ type: ARTIST });
  const initial = await collect(w, tails(0));
  const tail = initial[initial.length - 1] as Extract<WatchEvent, { type: 'tail' }>;
  t.same(names(initial).sort(), ['change a', 'change b'], 'one change per existing resource of the namespace');
  for (const e of initial) if (e.type === 'change') t.equal(e.revision, e.resource.version, `${e.resource.id.name}: an initial change is at its version`);
  t.ok(BigInt(tail.revision) >= BigInt(b.version), `tail ${tail.revision} covers every write before the watch`);
  t.equal(initial.filter((e) => e.type === 'tail').length, 1);

  const a2 = await c.write<Artist>(a.id, { data: { name: 'A', genre: 'jazz' }, version: a.version });
  const d = await c.write<Artist>({ type: ARTIST, name: 'd' }, { data: { name: 'D' } });
  await c.write<Artist>({ type: ARTIST, name: 'ignored', tenancy: { namespace: 'other' } }, { data: { name: 'I' } });
  const b2 = await c.write<Artist>(b.id, { data: { name: 'B', genre: 'metal' } });
  const del = await c.delete<Artist>(b.id);
  const live = await collect(w, (s) => s.some((e) => e.type === 'delete'));
  t.same(
    live.map((e) => (e.type === 'change' || e.type === 'delete' ? `${e.type} ${e.resource.id.name} ${e.resource.version}` : e.type)),
    [`change a ${a2.version}`, `change d ${d.version}`, `change b ${b2.version}`, `delete b ${b2.version}`],
    'every live change of the namespace, in commit order, each at the version its write returned',
  );
  const delEv = live[3] as Extract<WatchEvent<Artist>, { type: 'delete' }>;
  t.same(delEv.resource.data, { name: 'B', genre: 'metal' }, 'the delete carries the last stored state');
  t.same(delEv.resource, del.resource, 'the same state the delete call returned');
  t.ok(BigInt(delEv.revision) > BigInt(b2.version), 'at the revision of the delete');
  t.ok(liveRevisionsIncrease(live));
  t.equal(w.stats.streams, 1, 'one stream all along');
  w.close();
});

t.test('several watches on one stream: each its own initial state and tail, live events in revision order, bookmarks when quiet', async (t) => {
  const f = await Fixture.create(t);
  const agent = await devAgent(f, { watchBookmarkMs: 200 });
  const c = f.client([agent.grpcAddress]);
  const korn = await c.write<Artist>({ type: ARTIST, name: 'korn' }, { data: { name: 'Korn' } });
  await c.write({ type: ALBUM, name: 'issues', tenancy: { namespace: 'n1' } }, { data: { title: 'Issues' } });
  const specs: WatchSpec[] = [{ type: ARTIST }, { type: ALBUM, namespace: '*' }, { type: ARTIST, namespace: 'live', atTail: true }];
  const w = c.watch(specs);
  const initial = await collect(w, (s) => tails(0)(s) && tails(1)(s));
  t.same(initial.filter((e) => e.type === 'change').map((e) => `${(e as { watch: number }).watch} ${names([e])[0]}`).sort(), ['0 change korn', '1 change issues']);
  t.notOk(initial.some((e) => 'watch' in e && e.watch === 2), 'the atTail watch has no initial state and no tail');
  const x = await c.write({ type: ALBUM, name: 'life', tenancy: { namespace: 'n2' } }, { data: { title: 'Life' } });
  const y = await c.write<Artist>({ type: ARTIST, name: 'tool', tenancy: { namespace: 'live' } }, { data: { name: 'Tool' } });
  const z = await c.write<Artist>(korn.id, { data: { name: 'Korn', genre: 'metal' } });
  const live = await collect(w, (s) => s.some((e) => e.type === 'bookmark' && BigInt(e.revision) >= BigInt(z.version)));
  const changes = live.filter((e) => e.type === 'change');
  t.same(
    changes.map((e) => `${(e as { watch: number }).watch} ${names([e])[0]} ${e.type === 'change' ? e.revision : ''}`),
    [`1 change life ${x.version}`, `2 change tool ${y.version}`, `0 change korn ${z.version}`],
    'routed to their watch, in commit order across watches',
  );
  t.pass(`a quiet stream got a bookmark: ${show(live[live.length - 1] as WatchEvent)}`);
  w.close();
});

t.test('a consumer that stops reading is ended with SLOW_CONSUMER by the node and resumed by the client: no gap, no duplicate', async (t) => {
  const f = await Fixture.create(t);
  const agent = await devAgent(f, { watchBufferEvents: 20 });
  const c = f.client([agent.grpcAddress]);
  const w = c.watch<Artist>({ type: ARTIST, namespace: 'slow' }, { maxBufferedEvents: 8 });
  await collect(w, tails(0));
  // The consumer pauses: 300 writes of ~2 KB each overflow the client's buffer, gRPC flow
  // control and the node's 20-event queue for this watcher.
  const acks = await writeMany(c, 's', 300, { namespace: 'slow', padBytes: 2000 });
  const events = await collect(w, (s) => s.length >= acks.length && s.some((e) => e.type === 'change' && e.revision === acks[acks.length - 1]?.version));
  t.same(w.stats.lostBy['SLOW_CONSUMER'] !== undefined && w.stats.lostBy['SLOW_CONSUMER'] >= 1, true, `the node ended the stream as a slow consumer (${JSON.stringify(w.stats.lostBy)}, ${w.stats.streams} streams)`);
  t.same(
    events.map((e) => (e.type === 'change' ? `${e.resource.id.name}@${e.revision}` : e.type)),
    acks.map((a) => `${a.name}@${a.version}`),
    'exactly the acknowledged writes, once each, in commit order',
  );
  t.comment(`slow consumer: ${w.stats.streams} streams, ${w.stats.duplicatesDropped} repeated events dropped`);
  w.close();
});

t.test('COMPACTED: a resume older than the window gets a reset and a fresh initial state', async (t) => {
  const f = await Fixture.create(t);
  const agent = await devAgent(f, { watchWindowEvents: 10, watchBufferEvents: 20 });
  const c = f.client([agent.grpcAddress]);
  const first = await writeMany(c, 'old', 30, { parallel: 4 });

  // A resume point of the caller's that the node no longer retains.
  const w1 = c.watch<Artist>({ type: ARTIST, gtRevision: first[0]?.version as string });
  const seen = await collect(w1, tails(0));
  t.match(seen[0], { type: 'reset', watch: 0, reason: 'COMPACTED' }, 'told to drop what it knew');
  t.same(names(seen.slice(1)).sort(), first.map((a) => `change ${a.name}`).sort(), 'then the whole current state');
  w1.close();

  // A stream lost while live (a slow consumer) whose resume point falls out of the window meanwhile.
  const w2 = c.watch<Artist>({ type: ARTIST }, { maxBufferedEvents: 4 });
  const cache = new Map<string, string>();
  const apply = (evs: ReadonlyArray<WatchEvent<Artist>>): void => {
    for (const e of evs) {
      if (e.type === 'reset') cache.clear();
      else if (e.type === 'change') cache.set(e.resource.id.name, e.resource.version);
      else if (e.type === 'delete') cache.delete(e.resource.id.name);
    }
  };
  apply(await collect(w2, tails(0)));
  const more = await writeMany(c, 'new', 200, { padBytes: 2000 });
  const last = more[more.length - 1]?.version as string;
  const after = await collect(w2, (s) => {
    const r = s.findIndex((e) => e.type === 'reset');
    return r >= 0 && s.slice(r).some((e) => e.type === 'tail' && BigInt(e.revision) >= BigInt(last));
  });
  apply(after);
  t.ok(after.some((e) => e.type === 'reset' && e.reason === 'COMPACTED'), `reset after COMPACTED (lost by ${JSON.stringify(w2.stats.lostBy)})`);
  const tailAfterReset = after.findIndex((e, i) => e.type === 'tail' && after.slice(0, i).some((x) => x.type === 'reset'));
  t.ok(tailAfterReset > 0, 'the re-list ends with a tail');
  const listed = await c.list<Artist>(ARTIST);
  t.same(Object.fromEntries([...cache].sort()), Object.fromEntries(listed.resources.map((r) => [r.id.name, r.version]).sort()), 'what the consumer built equals a fresh list');
  w2.close();
});

t.test('a node shutting down: the watch moves to another node and resumes without gap or duplicate', async (t) => {
  const f = await Fixture.create(t);
  await threeAgents(f);
  const [x, ...others] = f.agents as [Agent, Agent, Agent];
  const watcher = f.client([x.grpcAddress, ...others.map((a) => a.grpcAddress)]);
  const writer = f.client(others.map((a) => a.grpcAddress));
  const w = watcher.watch<Artist>({ type: ARTIST, namespace: 'fo' }, { reconnectBaseMs: 20 });
  await collect(w, tails(0));
  t.equal(w.endpoint, x.grpcAddress, 'watching through the first endpoint');
  const before = await writeMany(writer, 'before', 20, { namespace: 'fo', parallel: 2 });
  const changes = (s: ReadonlyArray<WatchEvent<unknown>>): number => s.filter((e) => e.type === 'change').length;
  await collect(w, (s) => changes(s) >= before.length);
  const closing = x.close();
  const during = await writeMany(writer, 'during', 30, { namespace: 'fo', parallel: 2 });
  await closing;
  const after = await writeMany(writer, 'after', 20, { namespace: 'fo', parallel: 2 });
  const all = [...before, ...during, ...after];
  const last = all[all.length - 1]?.version as string;
  const rest = await collect(w, (s) => s.some((e) => e.type === 'change' && e.revision === last));
  t.not(w.endpoint, x.grpcAddress, `moved to ${w.endpoint}`);
  t.ok((w.stats.lostBy['UNAVAILABLE'] ?? 0) + (w.stats.lostBy['CANCELLED'] ?? 0) >= 1, `the node said it is going away (${JSON.stringify(w.stats.lostBy)})`);
  const seen = rest.filter((e) => e.type === 'change').map((e) => (e.type === 'change' ? `${e.resource.id.name}@${e.revision}` : ''));
  t.same(seen, [...during, ...after].map((a) => `${a.name}@${a.version}`), 'every acknowledged write once, in order');
  t.equal(w.stats.resets, 0, 'no reset was needed');
  w.close();
});

t.test('errors retrying cannot fix end the iteration', async (t) => {
  const f = await Fixture.create(t);
  const agent = await devAgent(f);
  const c = f.client([agent.grpcAddress]);
  const unknown = await c.watch({ type: 'demo.v1.Nope' }).next().catch((e: unknown) => e as CairnClientError);
  t.match(unknown, { name: 'CairnClientError' });
  t.ok(['NOT_FOUND', 'INVALID_ARGUMENT'].includes((unknown as CairnClientError).code), `an unknown type: ${(unknown as CairnClientError).code}`);
  const scope = await c.watch({ type: 'demo.v1.Executive', namespace: 'x' }).next().catch((e: unknown) => e as CairnClientError);
  t.match(scope, { code: 'INVALID_ARGUMENT', message: /watch 0: .*namespace/ });
});

async function saveSnapshot(agent: Agent): Promise<Buffer> {
  const r = await fetch(`http://${agent.httpAddress}/v1/snapshot`);
  if (r.status !== 200) throw new Error(`snapshot save: ${r.status}`);
  return Buffer.from(await r.arrayBuffer());
}

async function restoreSnapshot(agent: Agent, body: Buffer): Promise<void> {
  const r = await fetch(`http://${agent.httpAddress}/v1/snapshot`, { method: 'PUT', body, headers: { 'content-type': 'application/octet-stream' } });
  if (r.status !== 200) throw new Error(`snapshot restore: ${r.status} ${await r.text()}`);
}

t.test('a materialized view: waitForRevision, and a restore swapped in whole (readers never see it half-built)', async (t) => {
  const f = await Fixture.create(t);
  const agent = await devAgent(f);
  const c = f.client([agent.grpcAddress]);
  const names0 = ['a', 'b', 'c', 'd', 'e'];
  for (const n of names0) await c.write<Artist>({ type: ARTIST, name: n }, { data: { name: n } });
  const saved = await saveSnapshot(agent);

  const states: string[] = [];
  const view: MaterializedView<Artist> = new MaterializedView<Artist>(
    {
      // Record the view between every two events it applies.
      watch: <D>(specs: WatchSpec | readonly WatchSpec[], opts?: WatchOptions) => {
        const s = c.watch<D>(specs, opts);
        const next = s.next.bind(s);
        s.next = () => {
          const now = view.keys().map((k) => k.split('/')[2]).join(',');
          if (states[states.length - 1] !== now) states.push(now);
          return next();
        };
        return s;
      },
    },
    { type: ARTIST },
  );
  view.start();
  await view.waitForSync({ timeoutMs: 10_000 });
  t.same(view.keys(), names0.map((n) => `default/default/${n}`));
  t.equal(view.get('default/default/c')?.data.name, 'c');

  const f1 = await c.write<Artist>({ type: ARTIST, name: 'f' }, { data: { name: 'f' } });
  await c.delete({ type: ARTIST, name: 'a' });
  const b2 = await c.write<Artist>({ type: ARTIST, name: 'b' }, { data: { name: 'b', genre: 'rock' } });
  t.equal(await view.waitForRevision(b2.version, { timeoutMs: 10_000 }), b2.version, 'waitForRevision resolves at the revision of a write');
  t.equal(view.get(keyOf(b2))?.version, b2.version, 'and the view has that write');
  t.ok(view.has(keyOf(f1)) && !view.has('default/default/a'));
  const late = await view.waitForRevision(BigInt(b2.version) + 1000n, { timeoutMs: 200 }).catch((e: unknown) => e);
  t.match(late, { code: 'TIMEOUT' }, 'a revision that does not come times out');

  const revBefore = BigInt(view.revision);
  await restoreSnapshot(agent, saved);
  await waitUntil(() => view.has('default/default/a') && !view.has(keyOf(f1)), 10_000, 'the restored state in the view');
  t.same(view.keys(), names0.map((n) => `default/default/${n}`), 'the restored state');
  t.ok(BigInt(view.revision) >= revBefore, 'the revision never goes back');
  const seenStates = states.filter((s) => s !== '');
  t.same(
    seenStates,
    ['a,b,c,d,e', 'a,b,c,d,e,f', 'b,c,d,e,f', 'a,b,c,d,e'],
    'every state readers could see was whole: the initial one, each live change, then the restored one',
  );
  const after = await c.write<Artist>({ type: ARTIST, name: 'g' }, { data: { name: 'g' } });
  await view.waitForRevision(after.version, { timeoutMs: 10_000 });
  t.ok(view.has(keyOf(after)), 'and it goes on live');
  view.close();
  t.match(await view.waitForRevision(BigInt(after.version) + 10n).catch((e: unknown) => e), { code: 'CANCELLED' }, 'waits on a closed view are refused');
});

t.test('an informer: adds on sync, live add/update/delete, a re-list diffed into notifications', async (t) => {
  const f = await Fixture.create(t);
  const agent = await devAgent(f);
  const c = f.client([agent.grpcAddress]);
  const a = await c.write<Artist>({ type: ARTIST, name: 'a' }, { data: { name: 'a' } });
  await c.write<Artist>({ type: ARTIST, name: 'b' }, { data: { name: 'b' } });
  const saved = await saveSnapshot(agent);

  const log: string[] = [];
  const inf = c.informer<Artist>({ type: ARTIST });
  inf.addEventHandler({
    onAdd: (o) => log.push(`add ${o.id.name}`),
    onUpdate: (o, n) => log.push(`update ${n.id.name} ${o.data.genre ?? '-'}->${n.data.genre ?? '-'}`),
    onDelete: (o, info) => log.push(`delete ${o.id.name}${info.finalStateUnknown ? ' (final state unknown)' : ''}`),
  });
  inf.on('add', () => {
    throw new Error('a broken handler');
  });
  t.notOk(inf.hasSynced());
  inf.start();
  await inf.waitForSync({ timeoutMs: 10_000 });
  t.ok(inf.hasSynced());
  t.same(log.sort(), ['add a', 'add b'], 'an add per object of the first list (a throwing handler disturbs nothing)');
  log.length = 0;

  await c.write<Artist>(a.id, { data: { name: 'a', genre: 'pop' } });
  await c.write<Artist>({ type: ARTIST, name: 'c' }, { data: { name: 'c' } });
  const gone = await c.delete({ type: ARTIST, name: 'b' });
  await waitUntil(() => log.length >= 3, 10_000, 'three notifications');
  t.same(log, ['update a unknown->pop', 'add c', 'delete b'], 'live, in commit order');
  t.same(inf.list().map((r) => r.id.name), ['a', 'c']);
  t.ok(gone.deleted);

  const late: string[] = [];
  inf.on('add', (o) => late.push(o.id.name));
  t.same(late, ['a', 'c'], 'a handler added after the sync is told about what is cached');

  log.length = 0;
  await restoreSnapshot(agent, saved);
  await waitUntil(() => log.length >= 3, 10_000, 'the restore diffed into notifications');
  t.same(log.sort(), ['add b', 'delete c (final state unknown)', 'update a pop->unknown'], 'what changed across the re-list, once each');
  t.same(inf.list().map((r) => r.id.name), ['a', 'b']);
  inf.close();
});

t.test('a shared informer factory serves several types from one stream, each with its own cache', async (t) => {
  const f = await Fixture.create(t);
  const agent = await devAgent(f);
  const c = f.client([agent.grpcAddress]);
  const korn = await c.write<Artist>({ type: ARTIST, name: 'korn' }, { data: { name: 'Korn' } });
  await c.write({ type: ALBUM, name: 'issues' }, { data: { title: 'Issues' }, owner: korn.id });

  const factory = c.sharedInformers();
  const artists = factory.informer<Artist>({ type: ARTIST, namespace: '*' });
  const albums = factory.informer<{ title: string }>({ type: ALBUM, namespace: '*' });
  t.equal(factory.informer({ type: ARTIST, namespace: '*' }), artists, 'the same spec gives the same informer');
  const adds: string[] = [];
  artists.on('add', (o) => adds.push(`artist ${o.id.name}`));
  albums.on('add', (o) => adds.push(`album ${o.id.name}`));
  t.notOk(factory.hasSynced());
  factory.start();
  await factory.waitForSync({ timeoutMs: 10_000 });
  t.ok(factory.hasSynced());
  t.equal(agent.watches.activeSessions, 1, 'one watch stream on the node for both types');
  t.equal(factory.stats?.streams, 1);
  t.same(artists.keys(), ['default/default/korn']);
  t.same(albums.keys(), ['default/default/issues']);
  t.throws(() => factory.informer({ type: 'demo.v1.RecordLabel' }), { code: 'INVALID_ARGUMENT', message: /before start/ });
  t.throws(() => artists.start(), { message: /SharedInformerFactory/ });

  const tool = await c.write<Artist>({ type: ARTIST, name: 'tool', tenancy: { namespace: 'n2' } }, { data: { name: 'Tool' } });
  const lat = await c.write({ type: ALBUM, name: 'lateralus', tenancy: { namespace: 'n2' } }, { data: { title: 'Lateralus' }, owner: tool.id });
  await albums.waitForRevision(lat.version, { timeoutMs: 10_000 });
  t.same(adds.sort(), ['album issues', 'album lateralus', 'artist korn', 'artist tool']);
  t.ok(artists.has('default/n2/tool'));
  t.notOk(artists.has('default/n2/lateralus'), 'each type its own cache');
  factory.close();
  await waitUntil(() => agent.watches.activeSessions === 0, 10_000, 'the stream to close on the node');
  t.pass('closing the factory closed its stream');
});
