// The `cairn` executable as a user runs it: `node bin/cairn ...` in a child process, against a
// fake agent HTTP API in this process. Exit codes and output are the contract (README.md).
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { AGENT_FLAGS } from '../server/index.js';
import { closedPort, fakeAgent } from './testing.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const BIN = path.join(ROOT, 'bin', 'cairn');

interface Run {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/**
 * Runs `node bin/cairn` as a user would: no CAIRN_* variables but `env`, and without the test
 * runner's loader hooks. tap's process-info plugin puts them into every child's NODE_OPTIONS,
 * and under its require hook the extensionless ESM bin/cairn fails to load
 * (ERR_REQUIRE_CYCLE_MODULE), so `env -u` drops the variable after tap has set it. Async: the
 * fake server is in this process.
 */
function cairn(args: readonly string[], env: Record<string, string> = {}): Promise<Run> {
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('CAIRN_')));
  const child = spawn('env', ['-u', 'NODE_OPTIONS', process.execPath, BIN, ...args], {
    env: { ...base, ...env },
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (b: Buffer) => (stdout += b.toString()));
  child.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
  return new Promise((resolve) => child.on('close', (code) => resolve({ code, stdout, stderr })));
}

const CONFIGURATION = {
  index: 42,
  servers: [
    { id: 'n2', address: '10.0.0.2:7500', suffrage: 'voter', leader: false },
    { id: 'n1', address: '10.0.0.1:7500', suffrage: 'voter', leader: true },
    { id: 'n10', address: '10.0.0.10:7500', suffrage: 'learner', leader: false },
  ],
};

t.test('operator raft list-peers prints a table, leader first', async (t) => {
  const agent = await fakeAgent(() => ({ status: 200, body: CONFIGURATION }));
  t.teardown(() => agent.close());
  const r = await cairn(['operator', 'raft', 'list-peers', '--endpoint', agent.endpoint]);
  t.equal(r.code, 0, r.stderr);
  t.equal(
    r.stdout,
    [
      'ID    ADDRESS          SUFFRAGE   LEADER',
      'n1    10.0.0.1:7500    voter      yes',
      'n10   10.0.0.10:7500   learner    no',
      'n2    10.0.0.2:7500    voter      no',
      '',
    ].join('\n'),
  );
  t.equal(r.stderr, '');
  t.equal(agent.requests[0]?.method, 'GET');
  t.equal(agent.requests[0]?.url, '/v1/operator/raft/configuration');
});

t.test('--json prints the response itself', async (t) => {
  const agent = await fakeAgent(() => ({ status: 200, body: CONFIGURATION }));
  t.teardown(() => agent.close());
  const r = await cairn(['operator', 'raft', 'list-peers', '--json'], { CAIRN_HTTP_ADDR: agent.endpoint });
  t.equal(r.code, 0, r.stderr);
  t.same(JSON.parse(r.stdout), CONFIGURATION, 'and CAIRN_HTTP_ADDR supplies the endpoint');
});

t.test('a 404 error body: the code and message, exit 3', async (t) => {
  const agent = await fakeAgent(() => ({ status: 404, body: { error: { code: 'NOT_FOUND', message: 'no route for GET /v1/operator/raft/configuration' } } }));
  t.teardown(() => agent.close());
  const r = await cairn(['operator', 'raft', 'list-peers', '--endpoint', agent.endpoint]);
  t.equal(r.code, 3);
  t.equal(r.stdout, '');
  t.equal(r.stderr, 'cairn: NOT_FOUND: no route for GET /v1/operator/raft/configuration\n');
});

t.test('a 503 (no leader): exit 5', async (t) => {
  const agent = await fakeAgent(() => ({
    status: 503,
    headers: { 'retry-after': '1' },
    body: { error: { code: 'UNAVAILABLE', message: 'no leader is known right now' } },
  }));
  t.teardown(() => agent.close());
  const r = await cairn(['operator', 'raft', 'list-peers', '--endpoint', agent.endpoint]);
  t.equal(r.code, 5);
  t.equal(r.stderr, 'cairn: UNAVAILABLE: no leader is known right now\n');
});

t.test('connection refused: exit 5 with a message that says nothing listens there', async (t) => {
  const port = await closedPort();
  const r = await cairn(['operator', 'raft', 'list-peers', '--endpoint', `127.0.0.1:${port}`]);
  t.equal(r.code, 5);
  t.equal(
    r.stderr,
    `cairn: UNAVAILABLE: cannot connect to http://127.0.0.1:${port} (connection refused); is a cairn agent's HTTP API listening there? Set --endpoint or CAIRN_HTTP_ADDR\n`,
  );
  const write = await cairn(['operator', 'raft', 'remove-peer', 'n3', '--endpoint', `127.0.0.1:${port}`]);
  t.equal(write.code, 5);
  t.match(write.stderr, /; nothing was sent\n$/, 'a write that never connected certainly did not happen');
});

t.test('cairn agent with a bad flag: one line, exit 2, no agent started', async (t) => {
  const r = await cairn(['agent', '--tick-ms', 'abc', '--dev']);
  t.equal(r.code, 2);
  t.equal(r.stderr, "cairn: --tick-ms must be a positive integer, got 'abc' (from the command line)\n");
  const env = await cairn(['agent', '--dev'], { CAIRN_TICK_MS: 'abc' });
  t.equal(env.code, 2);
  t.equal(env.stderr, "cairn: --tick-ms must be a positive integer, got 'abc' (from CAIRN_TICK_MS)\n");
  const required = await cairn(['agent', '--node-id', 'n1']);
  t.equal(required.code, 2);
  t.equal(required.stderr, 'cairn: --data-dir is required (or --dev)\n');
});

t.test('cairn --help lists the commands; usage errors exit 2', async (t) => {
  const r = await cairn(['--help']);
  t.equal(r.code, 0);
  for (const command of ['agent', 'operator', 'snapshot']) t.match(r.stdout, new RegExp(`^  ${command}\\b`, 'm'), command);
  const raft = await cairn(['operator', 'raft', '--help']);
  for (const command of ['list-peers', 'add-peer', 'remove-peer', 'transfer-leader']) t.match(raft.stdout, new RegExp(`^  ${command}\\b`, 'm'), command);
  const agent = await cairn(['agent', '--help']);
  t.equal(agent.code, 0);
  for (const flag of AGENT_FLAGS) t.match(agent.stdout, new RegExp(`^  ${flag}\\b`, 'm'), `agent help lists ${flag}`);
  const none = await cairn([]);
  t.equal(none.code, 2, 'no command: help on stderr, exit 2');
  t.match(none.stderr, /Usage: cairn/);
  const unknown = await cairn(['nope']);
  t.equal(unknown.code, 2);
  t.match(unknown.stderr, /^cairn: unknown command 'nope'/);
  const missing = await cairn(['operator', 'raft', 'add-peer', 'n4']);
  t.equal(missing.code, 2);
  t.match(missing.stderr, /^cairn: missing required argument 'address'/);
  const helpAgent = await cairn(['help', 'agent']);
  t.equal(helpAgent.code, 0, 'cairn help <command> is asked-for help');
  t.match(helpAgent.stdout, /^Usage: cairn agent/);
  const version = await cairn(['--version']);
  t.equal(version.code, 0);
  t.match(version.stdout, /^\d+\.\d+\.\d+/);
});
