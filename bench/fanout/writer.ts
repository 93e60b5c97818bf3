/**
 * The writer: a child process of its own (writer-main.ts) that writes over gRPC, paced
 * open-loop, and records each write's send time, ack time and revision. A process of its own
 * so its pacing and its timestamps do not wait behind thousands of watchers' events, and so
 * its CPU is counted apart from theirs. It writes to one of:
 *
 * - `cairn-artist` (make bench-watch): demo.v1.Artist resources in the default namespace with
 *   the Cairn client, `data` of ~`dataBytes` of JSON (artistData);
 * - `cairn-album` (make bench's fan-out phase): the side-by-side data set, demo.v1.Album
 *   `key-000000`.. in namespace `bench`, the 256-byte value as the title (bench/kv-data.ts);
 * - `etcd` (the same phase): Put of the 256-byte value to `/bench/key-000000`.. with
 *   bench/etcd-client.ts.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { WriteRecord } from './stats.js';

export type WriteTarget = { readonly system: 'cairn-artist' | 'cairn-album' | 'etcd'; readonly endpoint: string };

/** Connects to `target` (a new client when it changed) and writes keys 0..keys-1 once (none: connect only). */
export interface SeedCommand {
  readonly type: 'seed';
  readonly target: WriteTarget;
  readonly keys: number;
  readonly dataBytes: number;
  readonly concurrency: number;
}

export interface RunCommand {
  readonly type: 'run';
  /** Monotonic ms (clock.ts) at which the first write is due. */
  readonly startAtMs: number;
  readonly durationMs: number;
  readonly ratePerSec: number;
  /** At most this many writes wait for their answer at once; the schedule slips beyond it. */
  readonly maxInFlight: number;
  readonly keys: number;
  readonly dataBytes: number;
}

export type WriterCommand = SeedCommand | RunCommand | { readonly type: 'exit' };

export interface SeedReply {
  readonly type: 'seeded';
  readonly revision: number;
  readonly ms: number;
}

export interface RunReply {
  readonly type: 'ran';
  /** Parallel arrays, one entry per acknowledged write. */
  readonly revision: number[];
  readonly sentMs: number[];
  readonly ackedMs: number[];
  /** Writes the schedule called for, writes sent, writes that failed. */
  readonly scheduled: number;
  readonly sent: number;
  readonly failed: number;
  readonly firstError: string | undefined;
  /** The writer process's CPU over the run (ms) and the run's wall time (ms). */
  readonly cpuMs: number;
  readonly wallMs: number;
  readonly maxInFlightSeen: number;
}

export type WriterReply = SeedReply | RunReply | { readonly type: 'error'; readonly message: string };

/** The data of a write: `{name, genre}` padded to `bytes` of JSON, different for every write. */
export function artistData(key: number, write: number, bytes: number): { name: string; genre: string } {
  const base = { name: `artist-${String(key).padStart(5, '0')} write ${write} `, genre: 'rock' };
  const pad = Math.max(0, bytes - JSON.stringify(base).length);
  return { ...base, name: base.name + 'x'.repeat(pad) };
}

export function artistName(key: number): string {
  return `artist-${String(key).padStart(5, '0')}`;
}

/** The parent's side: forks writer-main.js and exchanges one command and one reply at a time. */
export class WriterProcess {
  private readonly child: ChildProcess;
  private pending: { resolve: (r: WriterReply) => void; reject: (e: Error) => void } | undefined;
  private exited = false;

  constructor() {
    const main = fileURLToPath(new URL('./writer-main.js', import.meta.url));
    const env: Record<string, string> = {};
    for (const [k, v] of Object.entries(process.env)) if (v !== undefined && k !== 'NODE_OPTIONS') env[k] = v;
    this.child = fork(main, [], { env, execArgv: [], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    this.child.on('message', (m: WriterReply) => {
      const p = this.pending;
      this.pending = undefined;
      if (!p) return;
      if (m.type === 'error') p.reject(new Error(`writer: ${m.message}`));
      else p.resolve(m);
    });
    this.child.once('exit', (code, signal) => {
      this.exited = true;
      this.pending?.reject(new Error(`the writer process exited (code ${code}, signal ${signal})`));
      this.pending = undefined;
    });
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  private ask(cmd: WriterCommand): Promise<WriterReply> {
    if (this.exited) return Promise.reject(new Error('the writer process has exited'));
    if (this.pending) return Promise.reject(new Error('the writer is busy with another command'));
    return new Promise((resolve, reject) => {
      this.pending = { resolve, reject };
      this.child.send(cmd);
    });
  }

  async seed(cmd: Omit<SeedCommand, 'type'>): Promise<SeedReply> {
    const r = await this.ask({ type: 'seed', ...cmd });
    if (r.type !== 'seeded') throw new Error(`writer: expected a seed reply, got ${r.type}`);
    return r;
  }

  async run(cmd: Omit<RunCommand, 'type'>): Promise<RunReply> {
    const r = await this.ask({ type: 'run', ...cmd });
    if (r.type !== 'ran') throw new Error(`writer: expected a run reply, got ${r.type}`);
    return r;
  }

  /** Asks the writer to exit; kills it if it has not after 5 s. */
  async close(): Promise<void> {
    if (this.exited) return;
    const gone = new Promise<void>((resolve) => this.child.once('exit', () => resolve()));
    this.child.send({ type: 'exit' });
    const t = setTimeout(() => this.child.kill('SIGKILL'), 5_000);
    await gone;
    clearTimeout(t);
  }

  killNow(): void {
    if (!this.exited) this.child.kill('SIGKILL');
  }
}

/** The records of a run reply as WriteRecords. */
export function writeRecords(r: RunReply): WriteRecord[] {
  return r.revision.map((revision, i) => ({ revision, sentMs: r.sentMs[i] as number, ackedMs: r.ackedMs[i] as number }));
}
