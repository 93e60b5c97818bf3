/**
 * The node under test: a real `bin/cairn agent` process, started the way a user starts one
 * (one-node cluster, fsync on every log batch as always, the demo types), on free loopback
 * ports with its own temporary data dir.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, openSync, readFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import { createServer } from 'node:net';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { metricValue } from './proc.js';

/** The checkout: dist/bench/fanout/agent.js -> ../../../ */
export const REPO_ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const CAIRN_BIN = path.join(REPO_ROOT, 'bin', 'cairn');

/** A free TCP port on 127.0.0.1 (the OS picks it; it is free again by the time it is returned). */
async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((resolve, reject) => {
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => resolve());
  });
  const a = s.address();
  await new Promise<void>((resolve) => s.close(() => resolve()));
  if (a === null || typeof a === 'string') throw new Error('no port assigned');
  return a.port;
}

const pause = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * GET on a connection of its own. Not fetch: its pooled keep-alive connections race the
 * server closing them when idle, which a loaded node (timers late) makes likely, and a scrape
 * would then fail with "other side closed".
 */
export function httpGet(url: string, timeoutMs: number, ca?: string, token?: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    // https:// (a node serving TLS): checked against `ca`, the cluster CA; `token` (access control
    // is on with TLS) is sent as `authorization: Bearer <token>`.
    const get = url.startsWith('https:') ? https.get : http.get;
    const req = get(url, { agent: false, timeout: timeoutMs, ...(ca !== undefined ? { ca } : {}), ...(token !== undefined ? { headers: { authorization: `Bearer ${token}` } } : {}) }, (res) => {
      const parts: Buffer[] = [];
      res.on('data', (c: Buffer) => parts.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(parts).toString('utf8') }));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error(`GET ${url}: no answer in ${timeoutMs} ms`)));
    req.on('error', reject);
  });
}

export class AgentProcess {
  private exited: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  private readonly exitPromise: Promise<void>;

  private constructor(
    private readonly child: ChildProcess,
    readonly pid: number,
    readonly grpcAddr: string,
    readonly httpUrl: string,
    readonly logFile: string,
  ) {
    this.exitPromise = new Promise((resolve) => {
      child.once('exit', (code, signal) => {
        this.exited = { code, signal };
        resolve();
      });
    });
  }

  /** Starts a one-node cluster in `dataDir` and waits (up to `readyTimeoutMs`) until it answers /readyz. */
  static async start(dataDir: string, readyTimeoutMs = 60_000): Promise<AgentProcess> {
    const grpcPort = await freePort();
    let httpPort = await freePort();
    while (httpPort === grpcPort) httpPort = await freePort();
    const grpcAddr = `127.0.0.1:${grpcPort}`;
    const logFile = path.join(dataDir, 'agent.log');
    const args = [CAIRN_BIN, 'agent', '--node-id', 'bench1', '--data-dir', path.join(dataDir, 'data'), '--grpc-addr', grpcAddr, '--http-addr', `127.0.0.1:${httpPort}`, '--bootstrap', '--demo-types', '--log-level', 'warn'];
    // Only the command line says what runs: no CAIRN_* settings of the caller, and no
    // NODE_OPTIONS (a test runner's loader cannot load the extensionless bin/cairn).
    const env: Record<string, string> = {};
    for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith('CAIRN_') && k !== 'NODE_OPTIONS') env[k] = v;
    const fd = openSync(logFile, 'a');
    let child: ChildProcess;
    try {
      child = spawn(process.execPath, args, { cwd: REPO_ROOT, env, stdio: ['ignore', fd, fd] });
    } finally {
      closeSync(fd);
    }
    if (child.pid === undefined) throw new Error(`could not start ${args.join(' ')}`);
    const agent = new AgentProcess(child, child.pid, grpcAddr, `http://127.0.0.1:${httpPort}`, logFile);
    const deadline = performance.now() + readyTimeoutMs;
    let last = 'no answer yet';
    for (;;) {
      if (agent.exited) throw new Error(`the agent exited while starting (${JSON.stringify(agent.exited)}); its log ends:\n${agent.logTail()}`);
      try {
        const r = await httpGet(`${agent.httpUrl}/readyz`, 2_000);
        last = `${r.status} ${r.body.slice(0, 200)}`;
        if (r.status === 200) return agent;
      } catch (e) {
        last = e instanceof Error ? e.message : String(e);
      }
      if (performance.now() > deadline) {
        await agent.stop();
        throw new Error(`the agent was not ready after ${readyTimeoutMs} ms (last /readyz: ${last}); its log ends:\n${agent.logTail()}`);
      }
      await pause(100);
    }
  }

  get running(): boolean {
    return this.exited === undefined;
  }

  /** The last lines of the agent's log, for error messages. */
  logTail(lines = 20): string {
    try {
      return readFileSync(this.logFile, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
    } catch {
      return '(no log)';
    }
  }

  /**
   * A scrape of /metrics, or undefined when the node does not answer in `timeoutMs`: a node
   * saturated by watchers can leave its HTTP port unanswered for many seconds, and that must
   * cost the benchmark a figure, not the run.
   */
  async metrics(timeoutMs = 10_000): Promise<string | undefined> {
    try {
      const r = await httpGet(`${this.httpUrl}/metrics`, timeoutMs);
      return r.status === 200 ? r.body : undefined;
    } catch {
      return undefined;
    }
  }

  /** One sample of /metrics (undefined when absent or when the node did not answer). */
  async metric(name: string, labels: Readonly<Record<string, string>> = {}): Promise<number | undefined> {
    const text = await this.metrics();
    return text === undefined ? undefined : metricValue(text, name, labels);
  }

  /** SIGTERM, then SIGKILL if it has not exited after `graceMs`. */
  async stop(graceMs = 15_000): Promise<void> {
    if (this.exited) return;
    this.child.kill('SIGTERM');
    const timer = setTimeout(() => this.child.kill('SIGKILL'), graceMs);
    await this.exitPromise;
    clearTimeout(timer);
  }

  /** For exit handlers: SIGKILL now, without waiting. */
  killNow(): void {
    if (!this.exited) this.child.kill('SIGKILL');
  }
}
