// `cairn lease ...` and `cairn resource write --lease` against a dev agent started in this
// process (src/cli/testing.ts), through runCli with an in-memory io.
import t from 'tap';
import { CairnClient } from '../client/index.js';
import type { AgentDeps } from './agent.js';
import { ExitCode } from './errors.js';
import { runCli } from './program.js';
import { memoryIo, startCliTestAgent } from './testing.js';

const noAgent = (): Promise<AgentDeps> => Promise.reject(new Error('no agent in this test'));
const { agent, dir } = await startCliTestAgent(t, 'cairn-cli-lease-');
const client = new CairnClient({ endpoints: [agent.grpcAddress] });
t.teardown(() => client.close());

async function cairn(...args: string[]): Promise<{ code: number; out: string; err: string }> {
  const io = memoryIo({}, dir);
  const code = await runCli([...args, '--endpoint', agent.grpcAddress], io, noAgent);
  return { code, out: io.out(), err: io.err() };
}

t.test('grant, attach, ttl, list, revoke', async (t) => {
  const g = await cairn('lease', 'grant', '60', '--id', 'cli-1');
  t.same(g, { code: 0, out: 'lease cli-1 granted with TTL 60s\n', err: '' });
  const j = await cairn('lease', 'grant', '1', '--json');
  t.equal(j.code, 0);
  const chosen = JSON.parse(j.out) as { id: string; ttl_seconds: number };
  t.equal(chosen.ttl_seconds, 2, 'raised to the minimum');
  const w = await cairn('resource', 'write', 'demo.v1.Artist', 'svc', '--data', '{"name":"svc"}', '--lease', 'cli-1');
  t.equal(w.code, 0, w.err);
  t.equal((await client.read({ type: 'demo.v1.Artist', name: 'svc' })).resource.lease, 'cli-1');
  t.match((await cairn('resource', 'read', 'demo.v1.Artist', 'svc')).out, /\nlease: +cli-1\n/, 'read shows the lease');
  const missing = await cairn('resource', 'write', 'demo.v1.Artist', 'x', '--data', '{"name":"x"}', '--lease', 'nope');
  t.equal(missing.code, ExitCode.NOT_FOUND);
  t.match(missing.err, /lease nope does not exist/);
  const ttl = await cairn('lease', 'ttl', 'cli-1', '--attached');
  t.equal(ttl.code, 0);
  t.match(ttl.out, /^lease cli-1: granted TTL 60s, remaining (59|60)s\n  demo\.v1\.Artist default\/default\/svc\n$/);
  const list = await cairn('lease', 'list', '--json');
  t.same((JSON.parse(list.out) as { leases: Array<{ id: string }> }).leases.map((l) => l.id).sort(), [chosen.id, 'cli-1'].sort());
  t.match((await cairn('lease', 'list')).out, /cli-1\s+60s/);
  const r = await cairn('lease', 'revoke', 'cli-1');
  t.match(r.out, /^lease cli-1 revoked: 1 resource\(s\) deleted at revision \d+\n$/);
  t.equal((await cairn('resource', 'read', 'demo.v1.Artist', 'svc')).code, ExitCode.NOT_FOUND, 'the attached resource went with it');
  t.equal((await cairn('lease', 'revoke', 'cli-1')).code, ExitCode.NOT_FOUND);
  t.equal((await cairn('lease', 'ttl', 'cli-1')).code, ExitCode.NOT_FOUND);
});

t.test('keepalive renews until the lease is lost, then exits 3', async (t) => {
  await cairn('lease', 'grant', '2', '--id', 'kept');
  const io = memoryIo({}, dir);
  const running = runCli(['lease', 'keepalive', 'kept', '--endpoint', agent.grpcAddress], io, noAgent);
  const deadline = performance.now() + 10_000;
  while (io.out().split('\n').length < 4 && performance.now() < deadline) await new Promise((r) => setImmediate(r));
  t.match(io.out(), /^lease kept kept alive with TTL 2s\nlease kept kept alive with TTL 2s\n/, 'renewals are reported');
  await client.leases.revoke('kept');
  t.equal(await running, ExitCode.NOT_FOUND);
  t.match(io.err(), /lease kept lost \(gone\)/);
});

t.test('bad arguments are usage errors; nothing is granted', async (t) => {
  for (const ttl of ['0', '-1', '1.5', 'x', '99999999999']) t.equal((await cairn('lease', 'grant', ttl)).code, ExitCode.USAGE, `ttl ${ttl}`);
  const bad = await cairn('lease', 'grant', '10', '--id', 'Bad Id');
  t.equal(bad.code, ExitCode.INVALID);
  t.match(bad.err, /not a lowercase DNS label/);
  t.same(await client.leases.list(), []);
});
