// The commands run in this process (runCli with an in-memory io) against a fake agent API:
// request shapes, output, and the exit code for every kind of failure (README.md "Exit codes").
import { mkdtempSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { AGENT_DEFAULTS, ConfigError, heapGrowingFlag, loadAgentConfig, type AgentConfig } from '../server/index.js';
import { runAgent, type AgentDeps, type RunningAgent, type StopSignal } from './agent.js';
import { CliError, ExitCode, exitCodeFor } from './errors.js';
import { parseEndpoint } from './http.js';
import { runCli } from './program.js';
import { formatFields, formatTable } from './table.js';
import { closedPort, fakeAgent, memoryIo, type Canned } from './testing.js';

const noAgent = (): Promise<AgentDeps> => Promise.reject(new Error('no agent in this test'));

async function run(args: readonly string[], respond: Canned | ((url: string) => Canned | 'hang'), env: Record<string, string> = {}) {
  const agent = await fakeAgent((req) => (typeof respond === 'function' ? respond(req.url) : respond));
  try {
    const io = memoryIo(env, tmp);
    const code = await runCli([...args, '--endpoint', agent.endpoint], io, noAgent);
    return { code, out: io.out(), err: io.err(), requests: agent.requests };
  } finally {
    await agent.close();
  }
}

const tmp = mkdtempSync(path.join(os.tmpdir(), 'cairn-cli-'));
const error = (status: number, code: string, message: string, extra: object = {}): Canned => ({ status, body: { error: { code, message, ...extra } } });

t.test('add-peer posts {id, address, voter}; --learner sends voter: false', async (t) => {
  const reply = { status: 200, body: { index: 7, id: 'n4', address: '10.0.0.4:7500', suffrage: 'learner', promote_when_caught_up: true } };
  const voter = await run(['operator', 'raft', 'add-peer', 'n4', '10.0.0.4:7500'], reply);
  t.equal(voter.code, 0, voter.err);
  t.equal(voter.requests[0]?.method, 'POST');
  t.equal(voter.requests[0]?.url, '/v1/operator/raft/peers');
  t.equal(voter.requests[0]?.headers['content-type'], 'application/json');
  t.same(JSON.parse(voter.requests[0]?.body.toString() ?? ''), { id: 'n4', address: '10.0.0.4:7500', voter: true });
  t.equal(voter.out, 'added n4 (10.0.0.4:7500) as a learner; it becomes a voter once it has caught up (configuration index 7)\n');
  const learner = await run(['operator', 'raft', 'add-peer', 'n4', '10.0.0.4:7500', '--learner'], { status: 200, body: { index: 8, promote_when_caught_up: false } });
  t.same(JSON.parse(learner.requests[0]?.body.toString() ?? ''), { id: 'n4', address: '10.0.0.4:7500', voter: false });
  t.equal(learner.out, 'added n4 (10.0.0.4:7500) as a learner (configuration index 8)\n');
  const json = await run(['operator', 'raft', 'add-peer', 'n4', '10.0.0.4:7500', '--json'], reply);
  t.same(JSON.parse(json.out), reply.body);
});

t.test('remove-peer deletes /v1/operator/raft/peers/{id}; transfer-leader posts {id?}', async (t) => {
  const removed = await run(['operator', 'raft', 'remove-peer', 'n3'], { status: 200, body: { index: 9, removed: 'n3' } });
  t.equal(removed.code, 0);
  t.equal(removed.requests[0]?.method, 'DELETE');
  t.equal(removed.requests[0]?.url, '/v1/operator/raft/peers/n3');
  t.equal(removed.out, 'removed n3 (configuration index 9)\n');
  const to = await run(['operator', 'raft', 'transfer-leader', 'n2'], { status: 200, body: { requested: 'n2' } });
  t.equal(to.requests[0]?.url, '/v1/operator/raft/transfer-leader');
  t.same(JSON.parse(to.requests[0]?.body.toString() ?? ''), { id: 'n2' });
  t.equal(to.out, 'leadership transfer to n2 requested\n');
  const any = await run(['operator', 'raft', 'transfer-leader'], { status: 200, body: { requested: 'most up-to-date voter' } });
  t.same(JSON.parse(any.requests[0]?.body.toString() ?? ''), {});
  t.equal(any.out, 'leadership transfer to most up-to-date voter requested\n');
});

t.test('every error kind has its exit code', async (t) => {
  const cases: [Canned, number, string][] = [
    [error(400, 'INVALID_ARGUMENT', 'address must be host:port'), ExitCode.INVALID, 'cairn: INVALID_ARGUMENT: address must be host:port\n'],
    [error(401, 'UNAUTHENTICATED', 'no token'), ExitCode.AUTH, 'cairn: UNAUTHENTICATED: no token; no token was sent: set CAIRN_TOKEN or --token (or --token-file)\n'],
    [error(403, 'PERMISSION_DENIED', 'nope'), ExitCode.AUTH, 'cairn: PERMISSION_DENIED: nope; no token was sent, so the request ran as anonymous: set CAIRN_TOKEN or --token (or --token-file)\n'],
    [error(429, 'RATE_LIMITED', 'over the rate'), ExitCode.UNAVAILABLE, 'cairn: RATE_LIMITED: over the rate; retry later\n'],
    [error(507, 'NO_SPACE', 'the data quota is reached'), ExitCode.CONFLICT, 'cairn: NO_SPACE: the data quota is reached\n'],
    [error(404, 'NOT_FOUND', 'n9 is not a member'), ExitCode.NOT_FOUND, 'cairn: NOT_FOUND: n9 is not a member\n'],
    [error(409, 'CAS_FAILED', 'version 3, not 2'), ExitCode.CONFLICT, 'cairn: CAS_FAILED: version 3, not 2\n'],
    [error(409, 'UID_MISMATCH', 'other uid'), ExitCode.CONFLICT, 'cairn: UID_MISMATCH: other uid\n'],
    [error(409, 'INVALID_CONFIG_CHANGE', 'a change is pending'), ExitCode.CONFLICT, 'cairn: INVALID_CONFIG_CHANGE: a change is pending\n'],
    [error(413, 'TOO_LARGE', 'body over 1 MiB'), ExitCode.INVALID, 'cairn: TOO_LARGE: body over 1 MiB\n'],
    [error(503, 'UNAVAILABLE', 'not the leader', { leader: 'n2' }), ExitCode.UNAVAILABLE, 'cairn: UNAVAILABLE: not the leader (leader: n2)\n'],
    [error(500, 'INTERNAL', 'a bug'), ExitCode.GENERIC, 'cairn: INTERNAL: a bug\n'],
    [{ status: 502, body: '<html>bad gateway</html>' }, ExitCode.UNAVAILABLE, ''],
    [{ status: 418, body: '' }, ExitCode.GENERIC, ''],
  ];
  for (const [reply, code, stderr] of cases) {
    const r = await run(['operator', 'raft', 'list-peers'], reply);
    t.equal(r.code, code, `${reply.status}: ${r.err}`);
    if (stderr !== '') t.equal(r.err, stderr);
    t.equal(r.out, '');
  }
  const bare = await run(['operator', 'raft', 'list-peers'], { status: 502, body: '<html>bad gateway</html>' });
  t.match(bare.err, /^cairn: HTTP_502: HTTP 502 Bad Gateway from GET http:\/\/127\.0\.0\.1:\d+\/v1\/operator\/raft\/configuration: <html>bad gateway<\/html>\n$/);
});

t.test('a write whose outcome is unknown says so: server TIMEOUT, client deadline', async (t) => {
  const server = await run(['operator', 'raft', 'remove-peer', 'n3'], error(504, 'TIMEOUT', 'not committed within 5000 ms'));
  t.equal(server.code, ExitCode.UNAVAILABLE);
  t.equal(server.err, 'cairn: TIMEOUT: not committed within 5000 ms; the outcome is unknown: the change may or may not have been applied\n');
  const read = await run(['operator', 'raft', 'list-peers'], error(504, 'TIMEOUT', 'read not confirmed'));
  t.equal(read.err, 'cairn: TIMEOUT: read not confirmed\n', 'a read has no outcome to doubt');
  const hung = await run(['operator', 'raft', 'transfer-leader', '--timeout', '100'], () => 'hang');
  t.equal(hung.code, ExitCode.UNAVAILABLE);
  t.match(hung.err, /^cairn: TIMEOUT: no response from http:\/\/127\.0\.0\.1:\d+ within 100 ms \(--timeout\); the outcome is unknown: the change may or may not have been applied\n$/);
  const hungRead = await run(['operator', 'raft', 'list-peers', '--timeout', '100'], () => 'hang');
  t.match(hungRead.err, /within 100 ms \(--timeout\)\n$/);
});

t.test('a response of the wrong shape is an internal error, not a table of garbage', async (t) => {
  const r = await run(['operator', 'raft', 'list-peers'], { status: 200, body: { index: 1, servers: [{ id: 'n1' }] } });
  t.equal(r.code, ExitCode.GENERIC);
  t.match(r.err, /^cairn: INTERNAL: unexpected response to GET .*: servers\[0\] is not \{id, address, suffrage: "voter"\|"learner", leader\}/);
  const text = await run(['operator', 'raft', 'list-peers'], { status: 200, body: 'hello' });
  t.match(text.err, /its body is not JSON: hello/);
});

t.test('usage errors exit 2 before anything is sent', async (t) => {
  for (const args of [
    ['operator', 'raft', 'list-peers', '--timeout', 'soon'],
    ['operator', 'raft', 'list-peers', '--timeout', '0'],
    ['operator', 'raft', 'list-peers', '--endpoint', 'no-port'],
    ['operator', 'raft', 'list-peers', '--endpoint', 'ftp://h:1'],
    ['operator', 'raft', 'list-peers', '--bogus'],
    ['operator', 'raft'],
    ['snapshot', 'save'],
  ]) {
    const io = memoryIo();
    t.equal(await runCli(args, io, noAgent), ExitCode.USAGE, args.join(' '));
    t.match(io.err(), /cairn: |Usage:/);
  }
  const io = memoryIo({ CAIRN_HTTP_ADDR: 'nonsense' });
  t.equal(await runCli(['operator', 'raft', 'list-peers'], io, noAgent), ExitCode.USAGE);
  t.equal(io.err(), "cairn: --endpoint (from CAIRN_HTTP_ADDR) must be host:port or an http(s) URL, got 'nonsense'\n");
});

t.test('endpoints: host:port, [v6]:port or a URL', async (t) => {
  t.equal(parseEndpoint('127.0.0.1:7501', 'e'), 'http://127.0.0.1:7501');
  t.equal(parseEndpoint('[::1]:7501', 'e'), 'http://[::1]:7501');
  t.equal(parseEndpoint('node-1.example.com:80', 'e'), 'http://node-1.example.com', 'the default port is implied');
  t.equal(parseEndpoint('https://cairn.example.com/', 'e'), 'https://cairn.example.com');
  t.equal(parseEndpoint('http://proxy:8080/cairn/', 'e'), 'http://proxy:8080/cairn');
  for (const bad of ['localhost', ':80', 'h:80/x', 'http://h:1?q=1', 'ftp://h:21']) t.throws(() => parseEndpoint(bad, 'e'), CliError, bad);
});

t.test('connection refused', async (t) => {
  const port = await closedPort();
  const io = memoryIo();
  t.equal(await runCli(['snapshot', 'save', path.join(tmp, 'never.snap'), '--endpoint', `127.0.0.1:${port}`], io, noAgent), ExitCode.UNAVAILABLE);
  t.match(io.err(), /connection refused/);
  t.notOk(readdirSync(tmp).some((f) => f.startsWith('never.snap')), 'no file, not even a partial one');
});

t.test('snapshot save streams the body to the file; restore PUTs the file', async (t) => {
  const bytes = Buffer.from(Array.from({ length: 300_000 }, (_, i) => i % 251));
  const file = path.join(tmp, 'backup.snap');
  writeFileSync(file, 'an older snapshot');
  const saved = await run(['snapshot', 'save', 'backup.snap'], { status: 200, body: bytes });
  t.equal(saved.code, 0, saved.err);
  t.equal(saved.requests[0]?.method, 'GET');
  t.equal(saved.requests[0]?.url, '/v1/snapshot');
  t.same(readFileSync(file), bytes, 'relative to cwd, replacing the old file');
  t.equal(saved.out, `saved snapshot to ${file} (300000 bytes)\n`);
  t.same(readdirSync(tmp).filter((f) => f.includes('.partial-')), [], 'no partial file left behind');

  const json = await run(['snapshot', 'save', file, '--json'], { status: 200, body: bytes });
  t.same(JSON.parse(json.out), { file, bytes: 300000 });

  const failed = await run(['snapshot', 'save', file], error(503, 'UNAVAILABLE', 'starting'));
  t.equal(failed.code, ExitCode.UNAVAILABLE);
  t.same(readFileSync(file), bytes, 'a failed save leaves the previous file alone');

  const restored = await run(['snapshot', 'restore', file], { status: 200, body: { index: 1234 } });
  t.equal(restored.code, 0, restored.err);
  t.equal(restored.requests[0]?.method, 'PUT');
  t.equal(restored.requests[0]?.url, '/v1/snapshot');
  t.equal(restored.requests[0]?.headers['content-type'], 'application/octet-stream');
  t.same(restored.requests[0]?.body, bytes);
  t.equal(restored.out, `restored snapshot from ${file} (300000 bytes)\nindex:  1234\n`);

  const missing = await run(['snapshot', 'restore', 'missing.snap'], { status: 200 });
  t.equal(missing.code, ExitCode.USAGE);
  t.match(missing.err, /^cairn: cannot read snapshot file .*missing\.snap: ENOENT/);
  t.equal(missing.requests.length, 0);
});

t.test('tables', async (t) => {
  const cols = [
    { header: 'name', cell: (r: [string, number]) => r[0] },
    { header: 'n', cell: (r: [string, number]) => String(r[1]), align: 'right' as const },
    { header: 'note', cell: () => 'a\nb' },
  ];
  t.equal(
    formatTable(cols, [
      ['a', 1],
      ['longer', 100],
    ]),
    'NAME       N   NOTE\na          1   a b\nlonger   100   a b\n',
  );
  t.equal(formatTable(cols, []), 'NAME   N   NOTE\n', 'an empty table is its header');
  t.equal(formatFields([['index', '7'], ['leader', 'n1']]), 'index:   7\nleader:  n1\n');
});

t.test('exit codes fall back to the HTTP status for unknown codes', async (t) => {
  t.equal(exitCodeFor('SOMETHING_NEW', 404), ExitCode.NOT_FOUND);
  t.equal(exitCodeFor(undefined, 409), ExitCode.CONFLICT);
  t.equal(exitCodeFor(undefined, 504), ExitCode.UNAVAILABLE);
  t.equal(exitCodeFor('NOT_LEADER', 503), ExitCode.UNAVAILABLE);
  t.equal(exitCodeFor('COMPACTED', 410), ExitCode.NOT_FOUND);
  t.equal(exitCodeFor(undefined, 429), ExitCode.UNAVAILABLE, 'a bare 429: try later');
});

// ---- cairn agent, with a fake agent and fake signals ---------------------------------------

interface FakeProcess {
  readonly deps: AgentDeps;
  signal(s: StopSignal): void;
  readonly exits: number[];
  readonly started: AgentConfig[];
  readonly closes: () => number;
  /** The configurations `tuneProcess` was called with, in order, and what started after each. */
  readonly tuned: Array<{ config: AgentConfig; startedBefore: number }>;
}

function fakeProcess(agent: Partial<RunningAgent> & { startDelay?: Promise<void>; startError?: unknown } = {}): FakeProcess {
  let handler: ((s: StopSignal) => void) | undefined;
  const exits: number[] = [];
  const started: AgentConfig[] = [];
  const tuned: Array<{ config: AgentConfig; startedBefore: number }> = [];
  let closes = 0;
  const deps: AgentDeps = {
    loadAgentConfig,
    hostname: 'host-1',
    tuneProcess: (config) => void tuned.push({ config, startedBefore: started.length }),
    startAgent: async (config) => {
      started.push(config);
      await agent.startDelay;
      if (agent.startError !== undefined) throw agent.startError;
      return {
        ready: agent.ready ?? Promise.resolve(),
        close:
          agent.close ??
          (async () => {
            closes++;
          }),
      };
    },
    onSignal: (h) => {
      handler = h;
      return () => {
        handler = undefined;
      };
    },
    exit: (code) => void exits.push(code),
  };
  return { deps, exits, started, tuned, closes: () => closes, signal: (s) => handler?.(s) };
}

const tick = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

t.test('cairn agent: loads the config, runs until a signal, closes once, exits 0', async (t) => {
  const p = fakeProcess();
  const io = memoryIo({ CAIRN_TICK_MS: '50' }, '/srv');
  const done = runAgent(['--dev'], io, p.deps);
  await tick();
  t.equal(p.started.length, 1);
  t.equal(p.started[0]?.tickMs, 50, 'env is read');
  t.equal(p.started[0]?.dataDir, '/srv/cairn-data', 'cwd is used');
  p.signal('SIGTERM');
  t.equal(await done, 0);
  t.equal(p.closes(), 1);
  t.same(p.exits, []);
  t.match(io.err(), /^cairn: SIGTERM received; closing the agent/);
  p.signal('SIGINT');
  t.same(p.exits, [], 'handlers are removed once closed');
});

t.test('cairn agent: the process is tuned from the config before the agent starts', async (t) => {
  const p = fakeProcess();
  const done = runAgent(['--dev', '--heap-growing-percent', '120'], memoryIo(), p.deps);
  await tick();
  t.equal(p.tuned.length, 1, 'once');
  t.equal(p.tuned[0]?.startedBefore, 0, 'before startAgent');
  t.equal(p.tuned[0]?.config.heapGrowingPercent, 120, 'with the configured growing factor');
  p.signal('SIGTERM');
  t.equal(await done, 0);
});

t.test('the V8 flag the agent process sets for --heap-growing-percent', async (t) => {
  t.equal(heapGrowingFlag(50, []), '--heap-growing-percent=50');
  t.equal(heapGrowingFlag(0, []), undefined, "0: V8's own heuristic, nothing set");
  t.equal(heapGrowingFlag(50, ['--heap-growing-percent=80']), undefined, 'node started with the flag: it wins');
  t.equal(heapGrowingFlag(50, ['--heap_growing_percent', '80']), undefined, 'in either spelling');
  t.equal(heapGrowingFlag(50, ['--heap-growing-percentage=1']), '--heap-growing-percent=50', 'another flag is not it');
  t.equal(AGENT_DEFAULTS.heapGrowingPercent, 100, 'the default (docs/performance.md)');
});

t.test('cairn agent: a second signal exits 130 at once', async (t) => {
  let finishClose: () => void = () => undefined;
  const p = fakeProcess({ close: () => new Promise<void>((resolve) => (finishClose = resolve)) });
  const io = memoryIo();
  const done = runAgent(['--dev'], io, p.deps);
  await tick();
  p.signal('SIGINT');
  await tick();
  p.signal('SIGINT');
  t.same(p.exits, [ExitCode.INTERRUPTED]);
  t.match(io.err(), /SIGINT again; exiting without waiting/);
  finishClose();
  t.equal(await done, 0);
});

t.test('cairn agent: a signal during a slow start closes the agent once it is up', async (t) => {
  let started: () => void = () => undefined;
  const p = fakeProcess({ startDelay: new Promise<void>((resolve) => (started = resolve)) });
  const done = runAgent(['--dev'], memoryIo(), p.deps);
  await tick();
  p.signal('SIGINT');
  started();
  t.equal(await done, 0);
  t.equal(p.closes(), 1);
});

t.test('cairn agent: failures', async (t) => {
  await t.rejects(runAgent(['--tick-ms', 'abc', '--dev'], memoryIo(), fakeProcess().deps), {
    exitCode: ExitCode.USAGE,
    message: "--tick-ms must be a positive integer, got 'abc' (from the command line)",
  });
  const start = fakeProcess({ startError: new Error('data dir /x is locked by pid 7') });
  await t.rejects(runAgent(['--dev'], memoryIo(), start.deps), { exitCode: ExitCode.GENERIC, message: 'cannot start the agent: data dir /x is locked by pid 7' });
  const invalid = fakeProcess({ startError: Object.assign(new Error('unknown planted bug "x"'), { code: 'INVALID_ARGUMENT' }) });
  await t.rejects(runAgent(['--dev'], memoryIo(), invalid.deps), { exitCode: ExitCode.USAGE, message: 'cannot start the agent: INVALID_ARGUMENT: unknown planted bug "x"' });
  const config = fakeProcess({ startError: new ConfigError(['bad']) });
  await t.rejects(runAgent(['--dev'], memoryIo(), config.deps), { exitCode: ExitCode.USAGE, message: 'cannot start the agent: bad' });

  const notReady = fakeProcess({ ready: Promise.reject(new Error('no peers answered')) });
  const io = memoryIo();
  t.equal(await runAgent(['--dev'], io, notReady.deps), ExitCode.GENERIC, 'failing to come up closes the agent and exits 1');
  t.equal(notReady.closes(), 1);
  t.match(io.err(), /the agent failed to come up: no peers answered; closing it/);

  const closeFails = fakeProcess({ close: () => Promise.reject(new Error('fsync failed')) });
  const running = runAgent(['--dev'], memoryIo(), closeFails.deps);
  await tick();
  closeFails.signal('SIGTERM');
  await t.rejects(running, { exitCode: ExitCode.GENERIC, message: 'closing the agent failed: fsync failed' });
});

t.test('cairn agent through runCli: config errors print one line and exit 2', async (t) => {
  const io = memoryIo();
  const code = await runCli(['agent', '--dev', '--join', 'n2:7500'], io, () => Promise.resolve(fakeProcess().deps));
  t.equal(code, ExitCode.USAGE);
  t.equal(io.err(), 'cairn: --dev is a single node; it cannot be combined with --join/--bootstrap-expect (got --dev from the command line, --join (from the command line))\n');
});

t.test('info shows the node status, the data size against the quota, and a raised alarm first', async (t) => {
  const self = { id: 'n1', role: 'leader', term: 3, leader: 'n1', commit_index: 120, applied_index: 120, last_index: 120, snapshot_index: 0, last_leader_contact_ms: 0, failed: null, tls: true, insecure: false };
  const calm = await run(['info'], { status: 200, body: { ...self, alarms: [], data_bytes: 1048576, quota_bytes: 4194304 } });
  t.equal(calm.code, 0, calm.err);
  t.equal(calm.requests[0]?.url, '/v1/agent/self');
  t.notMatch(calm.out, /ALARM/);
  t.match(calm.out, /^id: +n1$/m);
  t.match(calm.out, /^data: +1\.0 MiB \(1048576 bytes\) \(25\.0% of the quota\)$/m);
  t.match(calm.out, /^quota: +4\.0 MiB \(4194304 bytes\)$/m);
  t.match(calm.out, /^alarms: +none$/m);
  const full = await run(['info'], { status: 200, body: { ...self, alarms: ['NO_SPACE'], data_bytes: 4190000, quota_bytes: 4194304 } });
  t.equal(full.code, 0, full.err);
  t.match(full.out, /^ALARM NO_SPACE: the data quota is reached; writes that grow the data are refused/, 'the alarm comes first');
  t.match(full.out, /^alarms: +NO_SPACE$/m);
  const old = await run(['info'], { status: 200, body: self });
  t.equal(old.code, 0, 'an older agent without quota fields');
  t.notMatch(old.out, /quota|ALARM/);
  const json = await run(['info', '--json'], { status: 200, body: { ...self, alarms: ['NO_SPACE'] } });
  t.same(JSON.parse(json.out).alarms, ['NO_SPACE']);
  const bad = await run(['info'], { status: 200, body: { ...self, alarms: 'NO_SPACE' } });
  t.equal(bad.code, ExitCode.GENERIC);
  t.match(bad.err, /expected 'alarms' to be a list of strings/);
});
