/**
 * Starting is not failing (issue 14, item 7): a request that reaches a node while it starts
 * waits for it instead of being refused, and a node that is its own quorum takes writes at once
 * (it needs no election timeout). The nodes here run with the real `--dev` timing (100 ms ticks,
 * an election timeout of 1-2 s), which is what a node without the immediate campaign would wait.
 */
import t, { type Test } from 'tap';
import { mkdtemp, rm } from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { createLogger } from '../platform/index.js';
import { AGENT_DEFAULTS, type AgentConfig } from './config.js';
import { startAgent, type Agent } from './agent.js';
import { devConfig } from './testing/index.js';

/** The bound on listening -> first acknowledged write. The target is 300 ms; the bound leaves room for a loaded 2-core CI machine, and stays well under the 1 s minimum election timeout a node without the fix waits. */
const FIRST_WRITE_BOUND_MS = 600;

async function start(t: Test, overrides: Partial<AgentConfig> = {}): Promise<Agent> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'cairn-start-'));
  const agent = await startAgent(devConfig(dir, { tickMs: AGENT_DEFAULTS.tickMs, electionTicks: AGENT_DEFAULTS.electionTicks, ...overrides }), {
    logger: createLogger({ level: 'warn', nodeId: 'dev' }),
  });
  t.teardown(async () => {
    await agent.close();
    await rm(dir, { recursive: true, force: true });
  });
  return agent;
}

function put(agent: Agent, name: string): Promise<Response> {
  return fetch(`http://${agent.httpAddress}/v1/resource/demo.v1.Artist/${name}`, {
    method: 'PUT',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ data: { name } }),
  });
}

t.test('a write that arrives while a --dev node starts waits for it and succeeds (not 503 "still starting")', async (t) => {
  const agent = await start(t);
  // startAgent returns as soon as the HTTP port listens; the node is still forming its cluster.
  t.equal(agent.node.state, 'starting', 'the write below reaches a node that is still starting');
  t.equal(agent.coordinator(), undefined);
  const healthz = fetch(`http://${agent.httpAddress}/healthz`);
  const readyz = await fetch(`http://${agent.httpAddress}/readyz`);
  const res = await put(agent, 'korn');
  t.equal(res.status, 200, `the write succeeded: ${res.status} ${await res.clone().text()}`);
  t.match(await res.json(), { data: { name: 'korn' }, id: { name: 'korn' } });
  t.equal((await healthz).status, 200, '/healthz: the process is alive while it starts');
  t.ok(readyz.status === 503 || readyz.status === 200, '/readyz reports without waiting');
  t.equal(agent.node.state, 'running');
  const read = await fetch(`http://${agent.httpAddress}/v1/resource/demo.v1.Artist/korn`);
  t.equal(read.status, 200, 'and reads back');
});

t.test('a single bootstrapped node takes its first write within the bound of listening (it campaigns at once)', async (t) => {
  const agent = await start(t);
  const listeningAt = performance.now();
  const deadline = listeningAt + 5_000;
  let attempts = 0;
  let last = '';
  // A deadline loop, no sleeps: a refused write is retried at once.
  for (;;) {
    attempts++;
    const res = await put(agent, `first-${attempts}`);
    if (res.status === 200) break;
    last = `${res.status} ${await res.text()}`;
    if (performance.now() > deadline) break;
  }
  const tookMs = performance.now() - listeningAt;
  t.comment(`listening -> first acknowledged write: ${tookMs.toFixed(1)} ms (${attempts} attempt(s)${last ? `; last refusal: ${last}` : ''}); target 300 ms`);
  t.ok(tookMs < FIRST_WRITE_BOUND_MS, `first write ${tookMs.toFixed(1)} ms after listening, under ${FIRST_WRITE_BOUND_MS} ms`);
  t.equal(attempts, 1, 'the first attempt itself succeeded (it waited for the node rather than failing)');
  t.equal(agent.coordinator()?.status().role, 'leader');
});

t.test('a request waits no longer than its deadline for a node that cannot start yet', async (t) => {
  // A node told to join a cluster nobody answers for stays starting: a gRPC-free HTTP read with
  // the default wait would take 10 s, so ask the service directly with a short deadline.
  const dir = await mkdtemp(path.join(os.tmpdir(), 'cairn-start-'));
  const agent = await startAgent(devConfig(dir, { bootstrap: false, dev: false, demoTypes: true, join: ['127.0.0.1:1'] }), {
    logger: createLogger({ level: 'error', nodeId: 'dev' }),
  });
  t.teardown(async () => {
    await agent.close();
    await rm(dir, { recursive: true, force: true });
  });
  const begun = performance.now();
  const err = await agent.resources.read({ type: 'demo.v1.Artist', name: 'korn' }, { timeoutMs: 200 }).then(
    () => undefined,
    (e: unknown) => e,
  );
  const waitedMs = performance.now() - begun;
  t.match(err, { code: 'UNAVAILABLE', message: /still starting after 200 ms/ }, 'UNAVAILABLE, naming why');
  t.ok(waitedMs >= 190 && waitedMs < 2_000, `waited ${waitedMs.toFixed(0)} ms for a 200 ms deadline`);
  t.equal(agent.node.state, 'starting');
  const readyz = await fetch(`http://${agent.httpAddress}/readyz`);
  t.same([readyz.status, await readyz.json()], [503, { ready: false, reason: 'starting' }], '/readyz says so at once');
});

t.test('a watch opened while a --dev node starts waits for it: initial state, tail, then the live write', async (t) => {
  const agent = await start(t);
  t.equal(agent.node.state, 'starting', 'the watch below reaches a node that is still starting');
  const abort = new AbortController();
  t.teardown(() => abort.abort());
  const res = await fetch(`http://${agent.httpAddress}/v1/watch`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify([{ type: 'demo.v1.Artist' }]),
    signal: abort.signal,
  });
  t.equal(res.status, 200, 'the stream opened (not 503)');
  const written = await put(agent, 'tool');
  t.equal(written.status, 200);
  const lines: Array<{ type: string; value?: { id: { name: string } } }> = [];
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  const decoder = new TextDecoder();
  let text = '';
  while (!lines.some((l) => l.type === 'change' && l.value?.id.name === 'tool')) {
    const { value, done } = await reader.read();
    if (done) break;
    text += decoder.decode(value, { stream: true });
    const parts = text.split('\n');
    text = parts.pop() ?? '';
    for (const p of parts) if (p !== '') lines.push(JSON.parse(p) as { type: string });
  }
  t.same(lines.map((l) => l.type), ['tail', 'change'], 'an empty initial state, its tail, then the write');
});
