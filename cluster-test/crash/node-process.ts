/**
 * Runs durable-node.js as a child process and reads its stdout protocol (see durable-node.ts):
 * a writer that can be SIGKILLed once it has acknowledged enough writes, and a one-shot verify.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import type { VerifyReport } from './durable-node.js';

export const DURABLE_NODE = fileURLToPath(new URL('./durable-node.js', import.meta.url));

export interface Ack {
  readonly name: string;
  readonly version: number;
}

export interface WriterReady {
  readonly openMs: number;
  readonly leadMs: number;
  readonly snapshotIndex: number;
  readonly diskCommit: number;
  readonly lastIndex: number;
}

const live = new Set<ChildProcess>();

/** SIGKILLs every child still running (for teardown after a failed assertion). */
export function killAll(): void {
  for (const c of live) c.kill('SIGKILL');
}

function launch(args: readonly string[]): { child: ChildProcess; exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }> } {
  const child = spawn(process.execPath, [DURABLE_NODE, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  live.add(child);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve, reject) => {
    child.once('error', reject);
    // 'close' (not 'exit'): stdout and stderr are drained, so every line the child wrote is in.
    child.once('close', (code, signal) => {
      live.delete(child);
      resolve({ code, signal });
    });
  });
  return { child, exited };
}

/** A writer process: `write --data-dir DIR --round R`. */
export class Writer {
  readonly acks: Ack[] = [];
  readonly other: string[] = [];
  ready: WriterReady | undefined;
  stderr = '';
  readonly startedMs = performance.now();
  /** When the SIGKILL was sent, ms after start; and how many acks had been read by then. */
  killedAtMs: number | undefined;
  acksAtKill: number | undefined;
  private readonly child: ChildProcess;
  private readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  private exitedNow = false;
  private partial = '';
  private readonly waiters = new Set<() => void>();

  constructor(dataDir: string, round: number, extraArgs: readonly string[] = []) {
    const { child, exited } = launch(['write', '--data-dir', dataDir, '--round', String(round), ...extraArgs]);
    this.child = child;
    this.exited = exited.finally(() => {
      this.exitedNow = true;
      this.wake();
    });
    child.stdout?.setEncoding('utf8');
    child.stdout?.on('data', (chunk: string) => this.onStdout(chunk));
    child.stderr?.setEncoding('utf8');
    child.stderr?.on('data', (chunk: string) => {
      this.stderr += chunk;
    });
  }

  private onStdout(chunk: string): void {
    const lines = (this.partial + chunk).split('\n');
    this.partial = lines.pop() ?? '';
    for (const line of lines) {
      const ack = /^ack (\S+) (\d+)$/.exec(line);
      if (ack !== null) this.acks.push({ name: ack[1] ?? '', version: Number(ack[2]) });
      else if (line.startsWith('ready ')) this.ready = JSON.parse(line.slice('ready '.length)) as WriterReady;
      else this.other.push(line);
    }
    this.wake();
  }

  private wake(): void {
    for (const w of this.waiters) w();
  }

  /**
   * Resolves once `n` acks were read. Checked on every stdout event (no sleeps); fails at the
   * deadline, or if the writer exits first, with what it printed.
   */
  waitForAcks(n: number, timeoutMs: number): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const done = (err?: Error): void => {
        clearTimeout(timer);
        this.waiters.delete(check);
        if (err) reject(err);
        else resolve();
      };
      const check = (): void => {
        if (this.acks.length >= n) done();
        else if (this.exitedNow) done(new Error(`the writer exited after ${this.acks.length} of ${n} acks: ${this.describe()}`));
      };
      const timer = setTimeout(() => done(new Error(`timed out after ${timeoutMs} ms waiting for ${n} acks (have ${this.acks.length}): ${this.describe()}`)), timeoutMs);
      this.waiters.add(check);
      check();
    });
  }

  /** SIGKILL, then wait until the process is gone and its output drained. */
  async kill(): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
    this.killedAtMs = performance.now() - this.startedMs;
    this.acksAtKill = this.acks.length;
    this.child.kill('SIGKILL');
    return this.exited;
  }

  /** How many snapshots the node logged taking (pino lines on stderr). */
  snapshotsTaken(): number {
    return (this.stderr.match(/"msg":"took snapshot"/g) ?? []).length;
  }

  describe(): string {
    return `stdout (non-ack): ${JSON.stringify(this.other.slice(-5))}; stderr tail: ${this.stderr.slice(-1500)}`;
  }
}

export type VerifyOutcome =
  | { readonly kind: 'ok'; readonly report: VerifyReport; readonly ms: number; readonly stderr: string }
  | { readonly kind: 'error'; readonly exitCode: number | null; readonly line: string; readonly ms: number; readonly stderr: string };

/** Runs `verify --data-dir DIR` to completion. */
export async function verify(dataDir: string, timeoutMs = 60_000): Promise<VerifyOutcome> {
  const started = performance.now();
  const { child, exited } = launch(['verify', '--data-dir', dataDir]);
  let stdout = '';
  let stderr = '';
  child.stdout?.setEncoding('utf8');
  child.stdout?.on('data', (c: string) => {
    stdout += c;
  });
  child.stderr?.setEncoding('utf8');
  child.stderr?.on('data', (c: string) => {
    stderr += c;
  });
  const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
  const { code, signal } = await exited.finally(() => clearTimeout(timer));
  const ms = performance.now() - started;
  const line = stdout.trim().split('\n').pop() ?? '';
  if (code === 0 && line.startsWith('{')) return { kind: 'ok', report: JSON.parse(line) as VerifyReport, ms, stderr };
  const shown = line.length > 600 ? `...${line.slice(-600)}` : line;
  return { kind: 'error', exitCode: code, line: shown || `(no output; signal ${String(signal)})`, ms, stderr };
}
