import t, { type Test } from 'tap';
import { mkdtemp, rm } from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { CairnClient, isCairnClientError, isOutcomeUnknown, type Resource } from '../client/index.js';
import { createLogger } from '../platform/index.js';
import { startAgent, type Agent } from './agent.js';
import { clusterConfigs, devConfig, waitForAgreedLeader, waitUntil } from './testing/index.js';

/**
 * The client library against real agents in this process: the public gRPC API as the agent
 * wires it on its cluster port, CRUD, concurrent read-modify-write on one node and on three,
 * and leader loss in the middle of a stream of increments. (Here rather than in src/client:
 * `client` may not import `server`.)
 */

interface Counter {
  name: string;
  members: number;
}
const counterId = { type: 'demo.v2.Artist', name: 'counter' };

/** Agents and clients of one test, closed together at its end: clients first, then agents (in parallel), then the data. */
class Fixture {
  readonly agents: Agent[] = [];
  private readonly clients: CairnClient[] = [];

  private constructor(readonly dir: string) {}

  static async create(t: Test): Promise<Fixture> {
    const f = new Fixture(await mkdtemp(path.join(os.tmpdir(), 'cairn-client-')));
    t.teardown(async () => {
      for (const c of f.clients) c.close();
      await Promise.all(f.agents.map((a) => a.close()));
      await rm(f.dir, { recursive: true, force: true });
    });
    return f;
  }

  /** A client of the given endpoints whose first choice is `first` (the client starts on a random one). */
  client(endpoints: string[], first = endpoints[0]): CairnClient {
    for (;;) {
      const c = new CairnClient({ endpoints, timeoutMs: 10_000 });
      if (c.endpoint === first) {
        this.clients.push(c);
        return c;
      }
      c.close();
    }
  }
}

/** A single node like `cairn agent --dev`, on ports the OS picks. */
async function devAgent(f: Fixture): Promise<Agent> {
  const cfg = devConfig(f.dir);
  const agent = await startAgent(cfg, { logger: createLogger({ level: 'error', nodeId: cfg.nodeId }) });
  f.agents.push(agent);
  await agent.ready;
  await waitUntil(() => agent.coordinator()?.status().role === 'leader', 10_000, 'the dev node to lead');
  return agent;
}

/** Three nodes forming a cluster with --bootstrap-expect 3; resolves with the leader once all agree on one. */
async function threeAgents(f: Fixture): Promise<Agent> {
  for (const cfg of await clusterConfigs(f.dir, 3)) {
    f.agents.push(await startAgent(cfg, { logger: createLogger({ level: 'error', nodeId: cfg.nodeId }) }));
  }
  await Promise.all(f.agents.map((a) => a.ready));
  // The leader all three agree on in one term, not the first node to call itself leader (a
  // deposed one may for a while after an election).
  return waitForAgreedLeader(f.agents, 10_000);
}

const increment = (cur: Resource<Counter> | null): { data: Counter } => ({ data: { name: 'Counter', members: (cur?.data.members ?? 0) + 1 } });

t.test('CRUD through the client on a dev agent', async (t) => {
  const f = await Fixture.create(t);
  const agent = await devAgent(f);
  const c = f.client([agent.grpcAddress]);
  const korn = { type: 'demo.v1.Artist', name: 'korn' };

  const created = await c.write(korn, { data: { name: 'Korn' }, metadata: { team: 'a' }, version: '0' });
  t.same(created.data, { name: 'Korn', genre: 'unknown' }, 'the mutate hook filled the default');
  t.same([created.id.tenancy, created.owner, created.deletion_timestamp], [{ partition: 'default', namespace: 'default' }, null, null]);
  t.match(created.id.uid, /^[0-9A-Z]{26}$/);

  const read = await c.read(korn);
  t.same(read.resource, created);
  t.equal(read.revision, created.version);
  t.equal(read.lastLeaderContactMs, 0, 'the dev node is the leader');
  const stale = await c.read(korn, { consistency: 'stale' });
  t.same(stale.resource, created, 'a stale read');

  const cas = await c.write(korn, { data: { name: 'Korn', genre: 'metal' }, version: created.version });
  t.same(cas.data, { name: 'Korn', genre: 'metal' });
  const lost = await c.write(korn, { data: { name: 'Korn' }, version: created.version }).catch((e: unknown) => e);
  t.match(lost, { code: 'CAS_FAILED', outcomeUnknown: false }, 'a CAS against an old version fails');
  const gv = await c.read({ type: 'demo.v2.Artist', name: 'korn' }).catch((e: unknown) => e);
  t.match(gv, { code: 'GROUP_VERSION_MISMATCH', details: { stored_type: 'demo.v1.Artist', requested_type: 'demo.v2.Artist' } });

  const album = await c.write({ type: 'demo.v1.Album', name: 'issues' }, { data: { title: 'Issues', year: 1999 }, owner: created.id });
  t.equal(album.owner?.uid, created.id.uid);
  t.same((await c.listByOwner(created.id)).resources.map((r) => r.id.name), ['issues']);
  const listed = await c.list('demo.Artist', { namespace: '*' });
  t.same(listed.resources.map((r) => r.id.name), ['korn']);
  t.ok(Number(listed.revision) >= Number(album.version), 'the list revision covers every write before it');

  const st = await c.writeStatus(cas.id, 'demo.v1.artist-controller', { observed_generation: cas.generation, conditions: [{ type: 'Accepted', state: 'TRUE', reason: 'Ok', message: '' }] });
  t.equal(st.generation, cas.generation);
  t.equal(st.status['demo.v1.artist-controller']?.conditions[0]?.state, 'TRUE');

  const del = await c.delete(korn, { version: st.version });
  t.same([del.deleted, del.resource?.id.name], [true, 'korn']);
  const gone = await c.read({ type: 'demo.v1.Album', name: 'issues' }).catch((e: unknown) => e);
  t.ok(isCairnClientError(gone, 'NOT_FOUND'), 'deleting the owner deleted the album');
  t.same(await c.delete(korn), { deleted: false, resource: null });
});

async function twentyConcurrentIncrements(t: Test, c: CairnClient): Promise<void> {
  await c.write(counterId, { data: { name: 'Counter', members: 0 } });
  const rounds = Array.from({ length: 20 }, () => 0);
  const started = Date.now();
  const results = await Promise.allSettled(
    rounds.map((_, i) =>
      c.update<Counter>(counterId, (cur) => {
        rounds[i] = (rounds[i] ?? 0) + 1;
        return increment(cur);
      }),
    ),
  );
  const total = rounds.reduce((a, b) => a + b, 0);
  t.comment(`20 update() calls took ${total} read-modify-write rounds (at most ${Math.max(...rounds)} for one) in ${Date.now() - started} ms`);
  const failed = results.filter((r) => r.status === 'rejected');
  t.same(failed, [], 'every update() succeeded');
  const members = results.map((r) => (r.status === 'fulfilled' ? r.value?.data.members : undefined)).sort((a, b) => (a ?? 0) - (b ?? 0));
  t.same(
    members,
    Array.from({ length: 20 }, (_, i) => i + 1),
    'each update() saw its own value: 1..20, once each',
  );
  t.equal((await c.read<Counter>(counterId)).resource.data.members, 20, 'exactly 20 increments');
}

t.test('20 concurrent update() calls incrementing one counter yield exactly 20 increments: one dev agent', async (t) => {
  const f = await Fixture.create(t);
  const agent = await devAgent(f);
  await twentyConcurrentIncrements(t, f.client([agent.grpcAddress]));
});

t.test('20 concurrent update() calls incrementing one counter yield exactly 20 increments: three nodes', async (t) => {
  const f = await Fixture.create(t);
  await threeAgents(f);
  await twentyConcurrentIncrements(
    t,
    f.client(f.agents.map((a) => a.grpcAddress)),
  );
});

t.test('leader loss during concurrent increments: no acknowledged increment is lost or doubled', async (t) => {
  const f = await Fixture.create(t);
  const leader = await threeAgents(f);
  // The client talks to the leader when it stops, so the client itself has to fail over.
  const c = f.client(
    f.agents.map((a) => a.grpcAddress),
    leader.grpcAddress,
  );
  await c.write(counterId, { data: { name: 'Counter', members: 0 } });
  let acked = 0;
  let unknown = 0;
  let refused = 0;
  let stop = false;
  const errors: string[] = [];
  // Half the workers (on a second client) give each read and write only 150 ms: around the
  // leader change some of their writes time out on the client and are committed anyway, so
  // the final count can exceed the acknowledged one and the upper bound below has something
  // to check.
  const hasty = f.client(
    f.agents.map((a) => a.grpcAddress),
    leader.grpcAddress,
  );
  const worker = async (client: CairnClient, timeoutMs: number): Promise<void> => {
    while (!stop) {
      try {
        await client.update<Counter>(counterId, increment, { timeoutMs });
        acked++;
      } catch (e) {
        if (isOutcomeUnknown(e)) unknown++;
        else {
          // A definite failure did not take effect (CAS_FAILED after maxAttempts, UNAVAILABLE).
          refused++;
          errors.push(e instanceof Error ? e.message : String(e));
        }
      }
    }
  };
  const workers = Array.from({ length: 8 }, (_, i) => (i % 2 === 0 ? worker(c, 10_000) : worker(hasty, 150)));
  let closed = leader;
  try {
    await waitUntil(() => acked >= 20, 20_000, '20 acknowledged increments before the leader stops');
    // Normally still the first leader, and the client still on it; under heavy load an
    // election may have intervened, so close whoever leads now.
    closed = await waitForAgreedLeader(f.agents, 10_000);
    const ackedBefore = acked;
    t.comment(`closing leader ${closed.nodeId} after ${ackedBefore} acknowledged increments; the client is ${c.endpoint === closed.grpcAddress ? '' : 'not '}on it`);
    await closed.close();
    const rest = f.agents.filter((a) => a !== closed);
    await waitUntil(() => rest.some((a) => a.coordinator()?.status().role === 'leader'), 10_000, 'a new leader');
    await waitUntil(() => acked >= ackedBefore + 20, 20_000, '20 more acknowledged increments after the leader stopped');
  } finally {
    stop = true;
    await Promise.all(workers);
  }
  t.not(c.endpoint, closed.grpcAddress, 'the client is on a node that still runs');
  const final = (await c.read<Counter>(counterId)).resource.data.members;
  t.comment(`acknowledged ${acked}, outcome unknown ${unknown}, refused ${refused}, final counter ${final}`);
  if (errors.length > 0) t.comment(`refusals: ${[...new Set(errors)].slice(0, 5).join(' | ')}`);
  t.ok(final >= acked, `no acknowledged increment was lost (final ${final} >= acknowledged ${acked})`);
  t.ok(final <= acked + unknown, `none was applied twice (final ${final} <= acknowledged ${acked} + unknown ${unknown})`);
});
