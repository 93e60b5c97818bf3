/**
 * Starting is not failing (issue 14, item 7): a request that reaches a node while it starts
 * waits for it instead of being refused, and a node that is its own quorum takes writes at once
 * (it needs no election timeout). The nodes here run with the real `--dev` tick (40 ms) and an
 * election timeout far above the bound (below), which a node without the immediate campaign would wait.
 */
import t, { type Test } from 'tap';
import { mkdtemp, rm } from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { createLogger, DEFAULT_SEGMENT_BYTES, WalLogStore } from '../platform/index.js';
import { AGENT_DEFAULTS, type AgentConfig } from './config.js';
import { startAgent, type Agent } from './agent.js';
import { devConfig } from './testing/index.js';

/**
 * Speed is measured, not timed in tests (the 300 ms target is measured on a real process by
 * scripts/measure-start-up.mjs; src/server/README.md has the figures). What these tests check
 * is the mechanism, with a margin no loaded machine eats: the nodes here run with an election
 * timeout of 60-120 s (ELECTION_TICKS), so a node that waited for it instead of campaigning at
 * once could not take a write within FIRST_WRITE_BOUND_MS. Each test prints the time it saw.
 */
const ELECTION_TICKS = 600;
const FIRST_WRITE_BOUND_MS = 20_000;

async function start(t: Test, overrides: Partial<AgentConfig> = {}, dataDir?: string): Promise<Agent> {
  const dir = dataDir ?? (await mkdtemp(path.join(os.tmpdir(), 'cairn-start-')));
  const agent = await startAgent(devConfig(dir, { tickMs: AGENT_DEFAULTS.tickMs, electionTicks: ELECTION_TICKS, ...overrides }), {
    logger: createLogger({ level: 'warn', nodeId: 'dev' }),
  });
  t.teardown(async () => {
    await agent.close();
    await rm(dir, { recursive: true, force: true });
  });
  return agent;
}

/** Sends writes from the moment `agent` listens until one is acknowledged; how long that took. */
async function firstWrite(t: Test, agent: Agent): Promise<{ tookMs: number; attempts: number }> {
  const listeningAt = performance.now();
  const deadline = listeningAt + FIRST_WRITE_BOUND_MS + 5_000;
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
  return { tookMs, attempts };
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

t.test('a single bootstrapped node takes its first write long before any election timeout (it campaigns at once)', async (t) => {
  const agent = await start(t);
  const { tookMs, attempts } = await firstWrite(t, agent);
  t.ok(tookMs < FIRST_WRITE_BOUND_MS, `first write ${tookMs.toFixed(1)} ms after listening, under ${FIRST_WRITE_BOUND_MS} ms (election timeout ${ELECTION_TICKS / 10} s)`);
  t.equal(attempts, 1, 'the first attempt itself succeeded (it waited for the node rather than failing)');
  t.equal(agent.coordinator()?.status().role, 'leader');
});

// The tests above run on the small test segments (testing/agents.ts); a real `--dev` node uses
// the default 64 MiB ones. Its start-up cost is the log: making a new one, reading an old one.
t.test('with the default 64 MiB log segments, a new --dev node takes its first write at once (its first segment is small)', async (t) => {
  t.equal(AGENT_DEFAULTS.walSegmentBytes, DEFAULT_SEGMENT_BYTES);
  const agent = await start(t, { walSegmentBytes: AGENT_DEFAULTS.walSegmentBytes });
  const { tookMs, attempts } = await firstWrite(t, agent);
  t.ok(tookMs < FIRST_WRITE_BOUND_MS, `first write ${tookMs.toFixed(1)} ms after listening, under ${FIRST_WRITE_BOUND_MS} ms (election timeout ${ELECTION_TICKS / 10} s)`);
  t.equal(attempts, 1);
});

t.test('with the default 64 MiB log segments, a --dev node restarting on a full-size segment takes its first write at once', async (t) => {
  // A data dir whose log segment is a whole 64 MiB, as an older build made the first one, and
  // as every segment after the first is: reading it is the start-up cost.
  const dir = await mkdtemp(path.join(os.tmpdir(), 'cairn-start-'));
  await (await WalLogStore.open({ dataDir: dir, segmentBytes: DEFAULT_SEGMENT_BYTES, firstSegmentBytes: DEFAULT_SEGMENT_BYTES })).close();
  const config = devConfig(dir, { tickMs: AGENT_DEFAULTS.tickMs, electionTicks: ELECTION_TICKS, walSegmentBytes: AGENT_DEFAULTS.walSegmentBytes });
  const before = await startAgent(config, { logger: createLogger({ level: 'warn', nodeId: 'dev' }) });
  t.equal((await put(before, 'seed')).status, 200);
  await before.close();
  const agent = await start(t, { walSegmentBytes: AGENT_DEFAULTS.walSegmentBytes }, dir);
  const { tookMs, attempts } = await firstWrite(t, agent);
  t.ok(tookMs < FIRST_WRITE_BOUND_MS, `first write ${tookMs.toFixed(1)} ms after listening, under ${FIRST_WRITE_BOUND_MS} ms (election timeout ${ELECTION_TICKS / 10} s)`);
  t.equal(attempts, 1);
  const read = await fetch(`http://${agent.httpAddress}/v1/resource/demo.v1.Artist/seed`);
  t.equal(read.status, 200, 'the write made before the restart is there');
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
