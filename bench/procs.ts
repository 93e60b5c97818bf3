/**
 * Server processes for the side-by-side benchmark: spawned, tracked, killed. Every child this
 * program starts is SIGKILLed when it exits, on an error, and on SIGINT/SIGTERM/SIGHUP
 * (Ctrl-C), so no etcd or Cairn node outlives a run; temporary directories registered here are
 * deleted on the way out too.
 *
 * Also: free loopback ports, polling with a deadline (no sleeps to "let things settle"), and
 * the CPU time a process has used (from /proc, for the server CPU of each phase).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, openSync, readFileSync, rmSync } from 'node:fs';
import { freePorts } from '../src/server/testing/index.js';
import { performance } from 'node:perf_hooks';
import { cleanupNetCut, spawnPrefix } from './netcut.js';

const live = new Set<ChildProcess>();
const tempDirs = new Set<string>();

function cleanupSync(): void {
  for (const c of live) {
    try {
      c.kill('SIGKILL');
    } catch {
      // already gone
    }
  }
  live.clear();
  // After the kills: the drop table goes, and the servers' cgroups once they are reaped.
  cleanupNetCut();
  if (process.env['BENCH_KEEP'] !== '1') {
    for (const d of tempDirs) rmSync(d, { recursive: true, force: true });
    tempDirs.clear();
  }
}

process.on('exit', cleanupSync);
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
  process.once(sig, () => {
    process.stderr.write(`\nbench: ${sig}: stopping every server this run started\n`);
    cleanupSync();
    process.kill(process.pid, sig);
  });
}

/** Deleted when the program exits (unless BENCH_KEEP=1). */
export function registerTempDir(dir: string): void {
  tempDirs.add(dir);
}

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
export const now = (): number => performance.now();

/** `n` distinct free TCP ports on 127.0.0.1 (shared with the agent tests). */
export { freePorts };

/** Polls `probe` every `everyMs` until it returns a value (not undefined) or the deadline passes. */
export async function until<T>(what: string, timeoutMs: number, probe: () => Promise<T | undefined>, lastSeen: () => string = () => '', everyMs = 50): Promise<T> {
  const deadline = now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (now() > deadline) {
      const seen = lastSeen();
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${seen !== '' ? `; last seen: ${seen}` : ''}`);
    }
    await sleep(everyMs);
  }
}

const CLOCK_TICKS_PER_SEC = 100; // USER_HZ on Linux

/** CPU seconds (user + system) process `pid` has used, from /proc; undefined where /proc is not available. */
export function cpuSeconds(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name (which may hold spaces) in parentheses: utime is field 14, stime 15.
    const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const utime = Number(rest[11]);
    const stime = Number(rest[12]);
    return Number.isFinite(utime) && Number.isFinite(stime) ? (utime + stime) / CLOCK_TICKS_PER_SEC : undefined;
  } catch {
    return undefined;
  }
}

/** CPU seconds the whole machine spent busy (all CPUs: everything but idle and iowait), from /proc/stat. */
export function machineBusySeconds(): number | undefined {
  try {
    const line = readFileSync('/proc/stat', 'utf8').split('\n')[0] ?? '';
    const f = line.trim().split(/\s+/).slice(1).map(Number);
    // user nice system idle iowait irq softirq steal (guest time is already in user)
    const busy = (f[0] ?? 0) + (f[1] ?? 0) + (f[2] ?? 0) + (f[5] ?? 0) + (f[6] ?? 0) + (f[7] ?? 0);
    return line.startsWith('cpu ') ? busy / CLOCK_TICKS_PER_SEC : undefined;
  } catch {
    return undefined;
  }
}

/** Resident memory of `pid` in MiB (VmRSS), undefined where /proc is not available. */
export function rssMiB(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined;
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) / 1024 : undefined;
  } catch {
    return undefined;
  }
}

export function tail(text: string, lines: number): string {
  return text.trimEnd().split('\n').slice(-lines).join('\n');
}

export interface ExitInfo {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
}

/** One server process, restartable with the same command line; output appended to `logFile`. */
export class ServerProcess {
  private child: ChildProcess | undefined;
  private exited: Promise<ExitInfo> | undefined;
  private exitInfo: ExitInfo | undefined;
  private wanted = false;

  constructor(
    readonly name: string,
    private readonly command: string,
    private readonly args: readonly string[],
    readonly logFile: string,
    private readonly env: NodeJS.ProcessEnv = process.env,
    private readonly cwd: string = process.cwd(),
  ) {
    // Every server starts in a cgroup of its own where the machine allows it, so a failover
    // trial can cut it off the network (netcut.ts); the pid stays the server's.
    this.prefix = spawnPrefix(name);
  }

  private readonly prefix: { readonly command: string; readonly args: readonly string[] } | undefined;
  /** SIGSTOPped and not yet SIGCONTinued. */
  private stopped = false;

  get pid(): number | undefined {
    return this.running() ? this.child?.pid : undefined;
  }

  running(): boolean {
    return this.child !== undefined && this.exitInfo === undefined;
  }

  start(): void {
    if (this.running()) throw new Error(`${this.name} is already running (pid ${String(this.child?.pid)})`);
    const fd = openSync(this.logFile, 'a');
    let child: ChildProcess;
    try {
      const [command, args] = this.prefix !== undefined ? [this.prefix.command, [...this.prefix.args, this.command, ...this.args]] : [this.command, [...this.args]];
      child = spawn(command, args, { cwd: this.cwd, env: this.env, stdio: ['ignore', fd, fd] });
    } finally {
      closeSync(fd); // the child has its own copy
    }
    live.add(child);
    this.child = child;
    this.wanted = true;
    this.stopped = false;
    this.exitInfo = undefined;
    this.exited = new Promise<ExitInfo>((resolve) => {
      child.once('error', () => {
        live.delete(child);
        this.exitInfo = { code: null, signal: null };
        resolve(this.exitInfo);
      });
      child.once('exit', (code, signal) => {
        live.delete(child);
        this.exitInfo = { code, signal };
        resolve(this.exitInfo);
      });
    });
  }

  /** SIGKILL; resolves once the process is gone. */
  async kill9(): Promise<void> {
    this.wanted = false;
    if (!this.child || !this.exited || this.exitInfo) return;
    this.child.kill('SIGKILL');
    await this.exited;
  }

  /** SIGSTOP: the process stays, with its connections open, and does nothing until `cont`. */
  pause(): void {
    if (!this.child || !this.running()) throw new Error(`${this.name} is not running: cannot SIGSTOP it`);
    this.child.kill('SIGSTOP');
    this.stopped = true;
  }

  /** SIGCONT after `pause`. */
  cont(): void {
    if (!this.child || !this.running()) throw new Error(`${this.name} is not running: cannot SIGCONT it`);
    this.child.kill('SIGCONT');
    this.stopped = false;
  }

  get paused(): boolean {
    return this.stopped;
  }

  /** SIGTERM (lets a node write its CPU profile, close its files), SIGKILL after `graceMs`. */
  async term(graceMs = 15_000): Promise<void> {
    this.wanted = false;
    const child = this.child;
    if (!child || !this.exited || this.exitInfo) return;
    if (this.stopped) child.kill('SIGCONT'); // a stopped process would not see the SIGTERM until then
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
    await this.exited.finally(() => clearTimeout(timer));
  }

  /** Throws, with the log's last lines, if the process exited though it is meant to run. */
  assertAlive(): void {
    if (this.wanted && this.exitInfo !== undefined) {
      throw new Error(`${this.name} exited (code ${String(this.exitInfo.code)}, signal ${String(this.exitInfo.signal)}); last log lines:\n${tail(this.log(), 15)}`);
    }
  }

  log(): string {
    return existsSync(this.logFile) ? readFileSync(this.logFile, 'utf8') : '';
  }
}
