import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import * as net from 'node:net';
import { fileURLToPath } from 'node:url';

/**
 * Real agents for the conformance and fuzz tests, started as `bin/cairn agent` child processes.
 *
 * Why processes and not `startAgent` in-process: `api` must not import `server` (the layering
 * table of scripts/check-architecture.mjs), and a separate process is also the honest target for
 * a fuzzer: a crash or an unhandled rejection ends the process, which the test sees, instead of
 * ending the test runner.
 */

/** The repository's `bin/cairn`, from dist/src/api/conformance/. */
const CAIRN_BIN = fileURLToPath(new URL('../../../../bin/cairn', import.meta.url));

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
  });
}

export interface AgentProcessOptions {
  readonly nodeId: string;
  readonly dataDir: string;
  readonly grpcPort: number;
  readonly httpPort: number;
  readonly bootstrap?: boolean;
  readonly bootstrapExpect?: number;
  readonly join?: readonly string[];
  /** Milliseconds per Raft tick. Default 20 (elections in well under a second). */
  readonly tickMs?: number;
  /** Election timeout in ticks (--election-ticks). Default: the agent's (10). */
  readonly electionTicks?: number;
  /** pino level of the agent. Default warn. */
  readonly logLevel?: string;
}

export interface AgentProcess {
  readonly nodeId: string;
  readonly pid: number;
  readonly grpcAddress: string;
  readonly httpAddress: string;
  /** The agent's stdout and stderr so far (the last 1 MB). */
  output(): string;
  /** Log lines the agent wrote at level error or fatal. */
  errorLines(): string[];
  /** undefined while running; the exit code (or signal) once it has exited. */
  exitStatus(): string | undefined;
  /** SIGTERM, then SIGKILL after `graceMs`; resolves once the process has exited. */
  stop(graceMs?: number): Promise<void>;
}

const OUTPUT_LIMIT = 1024 * 1024;

export function startAgentProcess(o: AgentProcessOptions): AgentProcess {
  if (!existsSync(CAIRN_BIN)) throw new Error(`cannot start an agent: ${CAIRN_BIN} does not exist`);
  const grpcAddress = `127.0.0.1:${o.grpcPort}`;
  const httpAddress = `127.0.0.1:${o.httpPort}`;
  const args = [
    // tap's process-info plugin adds its loader hooks to every child's NODE_OPTIONS (even when
    // `env` leaves it out), and under them the extensionless ESM bin/cairn fails to load;
    // `env -u` drops the variable after tap has set it (as src/cli/cli.test.ts does). `env`
    // execs node, so the pid is the agent's.
    '-u',
    'NODE_OPTIONS',
    process.execPath,
    CAIRN_BIN,
    'agent',
    '--node-id',
    o.nodeId,
    '--data-dir',
    o.dataDir,
    '--grpc-addr',
    grpcAddress,
    '--http-addr',
    httpAddress,
    '--demo-types',
    '--tick-ms',
    String(o.tickMs ?? 20),
    ...(o.electionTicks !== undefined ? ['--election-ticks', String(o.electionTicks)] : []),
    '--log-level',
    o.logLevel ?? 'warn',
    ...(o.bootstrap === true ? ['--bootstrap'] : []),
    ...(o.bootstrapExpect !== undefined ? ['--bootstrap-expect', String(o.bootstrapExpect)] : []),
    ...(o.join !== undefined && o.join.length > 0 ? ['--join', o.join.join(',')] : []),
  ];
  // The agent reads CAIRN_* variables: keep the test's own environment out of its config.
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('CAIRN_')) env[k] = v;
  const child: ChildProcess = spawn('env', args, { stdio: ['ignore', 'pipe', 'pipe'], env });
  let out = '';
  const errors: string[] = [];
  let partial = '';
  const onData = (b: Buffer): void => {
    const s = b.toString('utf8');
    out = (out + s).slice(-OUTPUT_LIMIT);
    const lines = (partial + s).split('\n');
    partial = lines.pop() ?? '';
    for (const line of lines) if (/"level":"(error|fatal)"/.test(line)) errors.push(line);
  };
  child.stdout?.on('data', onData);
  child.stderr?.on('data', onData);
  let exit: string | undefined;
  const exited = new Promise<void>((resolve) => {
    child.once('exit', (code, signal) => {
      exit = signal !== null ? `signal ${signal}` : `code ${String(code)}`;
      resolve();
    });
  });
  if (child.pid === undefined) throw new Error(`cannot start an agent: spawn gave no pid`);
  const pid = child.pid;
  return {
    nodeId: o.nodeId,
    pid,
    grpcAddress,
    httpAddress,
    output: () => out,
    errorLines: () => [...errors],
    exitStatus: () => exit,
    stop: async (graceMs = 10_000) => {
      if (exit !== undefined) return;
      child.kill('SIGTERM');
      const t = setTimeout(() => {
        if (exit === undefined) child.kill('SIGKILL');
      }, graceMs);
      await exited;
      clearTimeout(t);
    },
  };
}

async function getJson(url: string): Promise<{ status: number; json: unknown }> {
  const res = await fetch(url, { signal: AbortSignal.timeout(2000) });
  const text = await res.text();
  try {
    return { status: res.status, json: JSON.parse(text) as unknown };
  } catch {
    return { status: res.status, json: undefined };
  }
}

/** Polls GET /readyz until 200, failing early if the process exits. */
export async function waitReady(a: AgentProcess, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const exit = a.exitStatus();
    if (exit !== undefined) throw new Error(`agent ${a.nodeId} exited (${exit}) before it was ready:\n${a.output().slice(-4000)}`);
    try {
      if ((await getJson(`http://${a.httpAddress}/readyz`)).status === 200) return;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) throw new Error(`agent ${a.nodeId} not ready after ${timeoutMs} ms:\n${a.output().slice(-4000)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** GET /v1/agent/self: the node's Raft role as it reports it. */
export async function roleOf(a: AgentProcess): Promise<string> {
  const r = await getJson(`http://${a.httpAddress}/v1/agent/self`);
  const role = (r.json as { role?: unknown } | undefined)?.role;
  return typeof role === 'string' ? role : `unknown (HTTP ${r.status})`;
}

/** One agent that bootstraps a one-node cluster, registers the demo types, and is ready. */
export async function startSingleAgent(dataDir: string, nodeId = 'n1'): Promise<AgentProcess> {
  const a = startAgentProcess({ nodeId, dataDir, grpcPort: await freePort(), httpPort: await freePort(), bootstrap: true });
  try {
    await waitReady(a);
  } catch (e) {
    await a.stop();
    throw e;
  }
  return a;
}

/** `n` agents forming a cluster with --bootstrap-expect n, all ready (each knows a leader). */
export async function startCluster(dir: string, n: number, opts: Pick<AgentProcessOptions, 'electionTicks'> = {}): Promise<AgentProcess[]> {
  const ports: Array<{ grpc: number; http: number }> = [];
  for (let i = 0; i < n; i++) ports.push({ grpc: await freePort(), http: await freePort() });
  const addrs = ports.map((p) => `127.0.0.1:${p.grpc}`);
  const agents = ports.map((p, i) =>
    startAgentProcess({
      nodeId: `n${i + 1}`,
      dataDir: `${dir}/n${i + 1}`,
      grpcPort: p.grpc,
      httpPort: p.http,
      bootstrapExpect: n,
      join: addrs.filter((_, k) => k !== i),
      ...opts,
    }),
  );
  try {
    await Promise.all(agents.map((a) => waitReady(a, 60_000)));
  } catch (e) {
    await Promise.all(agents.map((a) => a.stop()));
    throw e;
  }
  return agents;
}
