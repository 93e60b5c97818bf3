/**
 * Test helpers for the CLI: a fake agent HTTP API with canned responses, and an in-memory
 * `CliIo`. Used only by the tests beside this file.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import type { Test } from 'tap';
import { AGENT_DEFAULTS, startAgent, type Agent, type AgentConfig } from '../server/index.js';
import type { CliIo } from './context.js';

export interface Recorded {
  readonly method: string;
  readonly url: string;
  readonly headers: IncomingHttpHeaders;
  readonly body: Buffer;
}

export interface Canned {
  readonly status: number;
  /** A string or object body (objects are sent as JSON), or raw bytes. */
  readonly body?: string | Buffer | object;
  readonly headers?: Readonly<Record<string, string>>;
}

export interface FakeAgent {
  /** host:port */
  readonly endpoint: string;
  readonly requests: Recorded[];
  close(): Promise<void>;
}

/** An HTTP server on 127.0.0.1:0 answering every request with `respond` ('hang' never answers). */
export async function fakeAgent(respond: (req: Recorded) => Canned | 'hang'): Promise<FakeAgent> {
  const requests: Recorded[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const recorded: Recorded = { method: req.method ?? '', url: req.url ?? '', headers: req.headers, body: Buffer.concat(chunks) };
      requests.push(recorded);
      const answer = respond(recorded);
      if (answer === 'hang') return;
      const isBytes = Buffer.isBuffer(answer.body);
      const body = answer.body === undefined ? '' : typeof answer.body === 'string' || Buffer.isBuffer(answer.body) ? answer.body : JSON.stringify(answer.body);
      res.writeHead(answer.status, {
        'content-type': isBytes ? 'application/octet-stream' : 'application/json',
        ...answer.headers,
      });
      res.end(body);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    endpoint: `127.0.0.1:${port}`,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** A port nothing listens on (bound, then released). */
export async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

export interface MemoryIo extends CliIo {
  readonly out: () => string;
  readonly err: () => string;
}

export function memoryIo(env: Record<string, string | undefined> = {}, cwd = '/'): MemoryIo {
  let out = '';
  let err = '';
  return {
    stdout: (s) => {
      out += s;
    },
    stderr: (s) => {
      err += s;
    },
    stderrIsTTY: false,
    env,
    cwd,
    out: () => out,
    err: () => err,
  };
}

/**
 * A dev agent started in this process for the CLI's tests against a real node: demo types,
 * free loopback ports, its own temp dir (`dir`, for the test's files too), waited for until it
 * leads; closed and removed when `t` ends.
 */
export async function startCliTestAgent(t: Test, prefix: string, overrides: Partial<AgentConfig> = {}): Promise<{ agent: Agent; dir: string }> {
  const dir = await mkdtemp(path.join(os.tmpdir(), prefix));
  const agent = await startAgent({
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
    ...overrides,
  });
  t.teardown(async () => {
    await agent.close();
    await rm(dir, { recursive: true, force: true });
  });
  await agent.ready;
  for (const end = Date.now() + 10_000; agent.coordinator()?.status().role !== 'leader'; ) {
    if (Date.now() > end) throw new Error('the dev agent did not become leader within 10 s');
    await new Promise((r) => setTimeout(r, 10));
  }
  return { agent, dir };
}
