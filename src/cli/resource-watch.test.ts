// `cairn resource watch` against a real dev agent started in this process: the command runs as
// a user runs it (`node bin/cairn` in a child process, interrupted with a real SIGINT), and its
// failures through runCli with an in-memory io. The watch's resume rules are the client
// library's (src/client/watch.test.ts, src/server/agent-watch.test.ts).
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t, { type Test } from 'tap';
import { CairnClient, type Resource, type WatchEvent } from '../client/index.js';
import { AGENT_DEFAULTS, startAgent, type Agent, type AgentConfig } from '../server/index.js';
import type { AgentDeps } from './agent.js';
import { ExitCode } from './errors.js';
import { runCli } from './program.js';
import { formatWatchEvent, formatWatchHeader, watchEventJson, watchSpecOf } from './resource-watch.js';
import { closedPort, memoryIo } from './testing.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const BIN = path.join(ROOT, 'bin', 'cairn');
const noAgent = (): Promise<AgentDeps> => Promise.reject(new Error('no agent in this test'));

const dir = await mkdtemp(path.join(os.tmpdir(), 'cairn-cli-watch-'));
const config: AgentConfig = {
  ...AGENT_DEFAULTS,
  nodeId: 'dev',
  dataDir: path.join(dir, 'data'),
  grpcAddr: '127.0.0.1:0',
  advertiseAddr: '127.0.0.1:0',
  httpAddr: '127.0.0.1:0',
  bootstrap: true,
  demoTypes: true,
  logLevel: 'silent',
  tickMs: 20,
  watchBookmarkMs: 300,
};
const agent: Agent = await startAgent(config);
const client = new CairnClient({ endpoints: [agent.grpcAddress] });
t.teardown(async () => {
  client.close();
  await agent.close();
  await rm(dir, { recursive: true, force: true });
});
await agent.ready;
for (const end = Date.now() + 10_000; agent.coordinator()?.status().role !== 'leader'; ) {
  if (Date.now() > end) throw new Error('the dev agent did not become leader within 10 s');
  await new Promise((r) => setTimeout(r, 10));
}

interface Running {
  readonly child: ChildProcessWithoutNullStreams;
  out(): string;
  err(): string;
  /** Waits until stdout satisfies `cond` (fails with what it has after 60 s: a loaded CI machine starts processes slowly). */
  until(cond: (out: string) => boolean, what: string): Promise<void>;
  exited: Promise<number | null>;
}

/** `node bin/cairn <args>` as a user runs it (no CAIRN_* variables, no tap loader in NODE_OPTIONS). */
function spawnCairn(t: Test, args: readonly string[]): Running {
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('CAIRN_')));
  const child = spawn('env', ['-u', 'NODE_OPTIONS', process.execPath, BIN, ...args], { env: base, cwd: dir, stdio: ['pipe', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout.on('data', (b: Buffer) => (out += b.toString()));
  child.stderr.on('data', (b: Buffer) => (err += b.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
  t.teardown(() => {
    if (child.exitCode === null) child.kill('SIGKILL');
  });
  return {
    child,
    out: () => out,
    err: () => err,
    exited,
    async until(cond, what) {
      for (const end = Date.now() + 60_000; !cond(out); ) {
        if (Date.now() > end || child.exitCode !== null) throw new Error(`waiting for ${what}: stdout ${JSON.stringify(out)}, stderr ${JSON.stringify(err)}`);
        await new Promise((r) => setTimeout(r, 20));
      }
    },
  };
}

async function cairn(args: readonly string[]): Promise<{ code: number; out: string; err: string }> {
  const io = memoryIo({}, dir);
  const code = await runCli(args, io, noAgent);
  return { code, out: io.out(), err: io.err() };
}

const lines = (text: string): Array<Record<string, unknown>> =>
  text
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as Record<string, unknown>);

t.test('--json: NDJSON of the initial state, the tail and live events; Ctrl-C exits 0', async (t) => {
  const korn = await client.write({ type: 'demo.v1.Artist', name: 'korn', tenancy: { namespace: 'cli' } }, { data: { name: 'Korn' } });
  const w = spawnCairn(t, ['resource', 'watch', 'demo.v1.Artist', '-n', 'cli', '--json', '--endpoint', agent.grpcAddress]);
  await w.until((o) => o.includes('"type":"tail"'), 'the tail');
  const tool = await client.write({ type: 'demo.v1.Artist', name: 'tool', tenancy: { namespace: 'cli' } }, { data: { name: 'Tool' } });
  await client.delete(korn.id);
  await w.until((o) => o.includes('"type":"delete"') && o.includes('"type":"bookmark"'), 'the live events and a bookmark');
  w.child.kill('SIGINT');
  t.equal(await w.exited, 0, 'SIGINT ends the watch cleanly');
  t.equal(w.err(), '');
  const evs = lines(w.out());
  const value = (e: Record<string, unknown>): Resource => e['value'] as Resource;
  t.match(evs[0], { type: 'change', watch: 0, revision: korn.version, value: { id: { name: 'korn' }, data: { name: 'Korn' } } });
  t.match(evs[1], { type: 'tail', watch: 0 });
  t.match(evs[2], { type: 'change', revision: tool.version, value: { id: { name: 'tool' }, version: tool.version } });
  t.match(evs[3], { type: 'delete', value: { id: { name: 'korn' }, version: korn.version } });
  t.ok(BigInt(evs[3]?.['revision'] as string) > BigInt(tool.version), 'the delete at its own revision');
  t.same(value(evs[2] as Record<string, unknown>).data, { name: 'Tool', genre: 'unknown' });
  t.ok(evs.slice(4).every((e) => e['type'] === 'bookmark'), 'then bookmarks while quiet');
});

t.test('table output with --gt-revision: the missed changes, the tail, live changes; SIGTERM exits 0', async (t) => {
  const a = await client.write({ type: 'demo.v1.Artist', name: 'a', tenancy: { namespace: 'cli2' } }, { data: { name: 'A' } });
  const b = await client.write({ type: 'demo.v1.Artist', name: 'b', tenancy: { namespace: 'cli2' } }, { data: { name: 'B' } });
  const w = spawnCairn(t, ['resource', 'watch', 'demo.v1.Artist', '--namespace', 'cli2', '--gt-revision', a.version, '--endpoint', agent.grpcAddress]);
  await w.until((o) => o.includes(' tail '), 'the tail');
  const c = await client.write({ type: 'demo.v1.Artist', name: 'c', tenancy: { namespace: 'cli2' } }, { data: { name: 'C' } });
  await w.until((o) => o.includes('cli2/c'), 'the live change');
  w.child.kill('SIGTERM');
  t.equal(await w.exited, 0);
  const out = w.out().split('\n');
  t.match(out[0], /^REVISION\s+EVENT\s+NAME\s+VERSION$/);
  t.match(out[1], new RegExp(`^\\s+${b.version}  change  default/cli2/b\\s+${b.version}$`), 'only what came after --gt-revision');
  t.match(out[2], /^\s+\d+  tail\s+\(caught up: live changes follow\)$/);
  t.match(out[3], new RegExp(`^\\s+${c.version}  change  default/cli2/c\\s+${c.version}$`));
});

t.test('--gt-revision with --at-tail: the changes after it and live changes, no tail line', async (t) => {
  const a = await client.write({ type: 'demo.v1.Artist', name: 'a', tenancy: { namespace: 'cli3' } }, { data: { name: 'A' } });
  const b = await client.write({ type: 'demo.v1.Artist', name: 'b', tenancy: { namespace: 'cli3' } }, { data: { name: 'B' } });
  const w = spawnCairn(t, ['resource', 'watch', 'demo.v1.Artist', '--namespace', 'cli3', '--gt-revision', a.version, '--at-tail', '--endpoint', agent.grpcAddress]);
  await w.until((o) => o.includes('cli3/b'), 'the missed change');
  const c = await client.write({ type: 'demo.v1.Artist', name: 'c', tenancy: { namespace: 'cli3' } }, { data: { name: 'C' } });
  await w.until((o) => o.includes('cli3/c'), 'the live change');
  w.child.kill('SIGTERM');
  t.equal(await w.exited, 0);
  const out = w.out().split('\n').filter((l) => l !== '');
  t.match(out[0], /^REVISION\s+EVENT\s+NAME\s+VERSION$/);
  t.match(out[1], new RegExp(`^\\s+${b.version}  change  default/cli3/b\\s+${b.version}$`), 'only what came after --gt-revision');
  t.match(out[2], new RegExp(`^\\s+${c.version}  change  default/cli3/c\\s+${c.version}$`), 'then the live change, with no tail line between');
  t.equal(out.length, 3);
});

t.test('failures: usage errors exit 2, what the server refuses exits 6, nothing listening exits 5 after --timeout', async (t) => {
  const usage = await cairn(['resource', 'watch', 'demo.v1.Artist', '--gt-revision', 'x', '--endpoint', agent.grpcAddress]);
  t.equal(usage.code, ExitCode.USAGE);
  t.match(usage.err, /--gt-revision must be a revision/);
  const unknown = await cairn(['resource', 'watch', 'demo.v1.Nope', '--endpoint', agent.grpcAddress]);
  t.equal(unknown.code, ExitCode.INVALID, unknown.err);
  t.match(unknown.err, /^cairn: INVALID_ARGUMENT: /);
  const port = await closedPort();
  const started = Date.now();
  // 1.5 s: under a busy CI machine a refused connection was not reported within 500 ms, and the
  // watch then ended on its own outage timer ("no node served the watch"), not "cannot connect".
  const down = await cairn(['resource', 'watch', 'demo.v1.Artist', '--timeout', '1500', '--endpoint', `127.0.0.1:${port}`]);
  t.equal(down.code, ExitCode.UNAVAILABLE, down.err);
  t.match(down.err, new RegExp(`^cairn: UNAVAILABLE: cannot connect to 127\\.0\\.0\\.1:${port} within 1500 ms`));
  t.ok(Date.now() - started >= 1450, 'it kept trying until --timeout');
  const help = await cairn(['resource', 'watch', '--help']);
  t.match(help.out, /--gt-revision <n>/);
  t.match(help.out, /Ctrl-C exits 0/);
});

t.test('formatting', async (t) => {
  const r = { id: { type: 'demo.v1.Artist', tenancy: { partition: 'default', namespace: 'ns' }, name: 'korn', uid: 'U' }, version: '7', deletion_timestamp: null } as unknown as Resource;
  const exec = { ...r, id: { type: 'demo.v1.Executive', tenancy: { partition: '', namespace: '' }, name: 'boss', uid: 'V' } } as unknown as Resource;
  const evs: WatchEvent[] = [
    { type: 'change', watch: 0, revision: '7', resource: r },
    { type: 'delete', watch: 0, revision: '9', resource: exec },
    { type: 'tail', watch: 0, revision: '9' },
    { type: 'bookmark', revision: '12' },
    { type: 'reset', watch: 0, reason: 'COMPACTED', message: 'gone' },
  ];
  t.equal(formatWatchHeader(), 'REVISION  EVENT   NAME                              VERSION\n');
  t.same(evs.map(formatWatchEvent), [
    '       7  change  default/ns/korn                   7\n',
    '       9  delete  boss                              7\n',
    '       9  tail    (caught up: live changes follow)\n',
    '',
    '       -  reset   (COMPACTED: gone; the current state follows)\n',
  ]);
  t.same(lines(evs.map(watchEventJson).join('')).map((e) => e['type']), ['change', 'delete', 'tail', 'bookmark', 'reset']);
  t.same(watchSpecOf('demo.Artist', { namespace: '*', prefix: 'k', atTail: true }), { type: 'demo.Artist', namespace: '*', namePrefix: 'k', atTail: true });
  t.throws(() => watchSpecOf('demo.Artist', { prefix: 'a', namePrefix: 'b' }), /same option/);
});
