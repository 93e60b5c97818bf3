/**
 * The Raft log stores side by side on one disk: LevelLogStore (LevelDB) and WalLogStore
 * (segment files; `wal` syncs a round with one O_DSYNC write, `wal-fdatasync` with a write and
 * an fdatasync), appending batches of 1, 16 and 64 entries of about 400 bytes, each batch
 * with a hard state and fsynced, one at a time (as the replica's Ready loop does).
 *
 *   make build && node dist/bench/log-store.js [--dir PATH] [--batches N] [--rounds R]
 *       [--stores level,wal,wal-fdatasync] [--busy-us U]
 *
 * --busy-us U keeps the event loop busy meanwhile, as a node's driver does: a background task
 * spins for U µs, yields with setImmediate, and again, so every completion waits for the loop
 * (up to U µs) before it runs; a store that needs two round trips per append pays it twice.
 *
 * Per store and batch size: the median and p99 time of one append (write + fsync), entries
 * per second, and for the WAL the mean time of the fdatasync itself (its `onSync`). The two
 * stores run in alternating order, R rounds (default 4) of N/R batches each (N default 1,000
 * for 1-entry batches, 600 for 16, 300 for 64; after 20 warm-up batches), so both
 * see the same background load; each store is opened once per batch size and warmed up before
 * any timing. Entry data is random bytes (LevelDB compresses; random bytes keep it honest).
 * The WAL uses its default 64 MiB segments; preparing them is not timed (it happens at open,
 * and in the background before a segment is needed). The temp dirs are under the OS temp dir
 * unless --dir is given, and removed at the end.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import v8 from 'node:v8';
import type { LogIndex, NodeId, Term } from '../src/base/index.js';
import { DEFAULT_SEGMENT_BYTES, LevelLogStore, WalLogStore } from '../src/platform/index.js';
import type { Entry } from '../src/raft/index.js';
import type { LogStore } from '../src/replica/index.js';
import { describeMachine, formatColumns, median, num, percentileSorted, Progress } from './report.js';

const argv = process.argv.slice(2);
const flag = (name: string): string | undefined => {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : undefined;
};
const BASE_DIR = flag('--dir');
const ROUNDS = Number(flag('--rounds') ?? 4);
const BATCHES_FLAG = flag('--batches');
const SIZES = [1, 16, 64] as const;
const DEFAULT_BATCHES: Record<(typeof SIZES)[number], number> = { 1: 1000, 16: 600, 64: 300 };
const ENTRY_BYTES = 400;
const WARMUP_BATCHES = 20;
const ALL_STORES = ['level', 'wal', 'wal-fdatasync'] as const;
type StoreKind = (typeof ALL_STORES)[number];
const STORES: readonly StoreKind[] = (flag('--stores') ?? ALL_STORES.join(',')).split(',').map((k) => {
  if (!(ALL_STORES as readonly string[]).includes(k)) throw new Error(`--stores: unknown store ${JSON.stringify(k)} (known: ${ALL_STORES.join(', ')})`);
  return k as StoreKind;
});
const BUSY_US = Number(flag('--busy-us') ?? 0);
if (!Number.isFinite(BUSY_US) || BUSY_US < 0) throw new Error(`--busy-us must be a number of microseconds >= 0, got ${flag('--busy-us')}`);

/** Keeps the event loop busy in slices of `us` µs until stopped (see --busy-us). */
function busyLoop(us: number): () => void {
  let running = us > 0;
  const spin = (): void => {
    if (!running) return;
    const until = performance.now() + us / 1000;
    while (performance.now() < until) {
      // spinning: the loop is busy, as a driver applying and sending would be
    }
    setImmediate(spin);
  };
  if (running) setImmediate(spin);
  return () => {
    running = false;
  };
}

interface Samples {
  readonly size: number;
  readonly latenciesMs: number[];
  entries: number;
  totalMs: number;
  syncSeconds: number[];
}

/** A store in its own fresh dir, appending batches of `size` entries from index 1 on. */
class Subject {
  private index = 1;

  private constructor(
    readonly kind: StoreKind,
    private readonly store: LogStore,
    private readonly size: number,
    /** The WAL's fdatasync durations (seconds), as its onSync reports them. */
    readonly syncs: number[],
  ) {}

  static async open(kind: StoreKind, work: string, size: number): Promise<Subject> {
    const dir = await mkdtemp(path.join(work, `${kind}-${size}-`));
    const syncs: number[] = [];
    // A full-size first segment (a new log's is 1 MiB by default): the appends measured here
    // run on a steady segment, not through an early roll-over and the background preparation
    // of the next 64 MiB segment.
    const store =
      kind === 'level'
        ? await LevelLogStore.open({ dataDir: dir })
        : await WalLogStore.open({ dataDir: dir, firstSegmentBytes: DEFAULT_SEGMENT_BYTES, onSync: (s) => syncs.push(s), syncMethod: kind === 'wal' ? 'dsync' : 'fdatasync' });
    return new Subject(kind, store, size, syncs);
  }

  /** Appends one batch (entries, a hard state, fsynced); returns its time in ms. */
  async append(): Promise<number> {
    const entries: Entry[] = [];
    for (let k = 0; k < this.size; k++, this.index++) entries.push({ index: this.index as LogIndex, term: 1 as Term, data: Uint8Array.from(randomBytes(ENTRY_BYTES)) });
    const commit = Math.max(0, this.index - 2 * this.size) as LogIndex;
    const t0 = performance.now();
    await this.store.append({ entries, hardState: { term: 1 as Term, vote: 'n1' as NodeId, commit }, sync: true });
    return performance.now() - t0;
  }

  close(): Promise<void> {
    return this.store.close();
  }
}

/** One round of `batches` timed appends on `subject`. */
async function round(subject: Subject, batches: number, into: Samples): Promise<void> {
  subject.syncs.length = 0;
  const stopBusy = busyLoop(BUSY_US);
  const started = performance.now();
  try {
    for (let i = 0; i < batches; i++) into.latenciesMs.push(await subject.append());
  } finally {
    stopBusy();
  }
  into.totalMs += performance.now() - started;
  into.entries += batches * into.size;
  into.syncSeconds.push(...subject.syncs);
}

async function main(): Promise<void> {
  const progress = new Progress();
  const base = BASE_DIR ?? os.tmpdir();
  await mkdir(base, { recursive: true });
  const work = await mkdtemp(path.join(base, 'cairn-log-bench-'));
  const machine = await describeMachine(work, v8.getHeapStatistics().heap_size_limit);
  const loads: number[] = [os.loadavg()[0] ?? 0];
  process.stdout.write(
    `cairn log store benchmark, ${new Date().toISOString()}\n` +
      `machine: ${machine.cpus} x ${machine.cpuModel}, ${machine.memoryGiB} GiB RAM, node ${machine.node}, ${machine.platform} (kernel ${machine.kernel})\n` +
      `disk: ${machine.disk.path} (${machine.disk.filesystem}); batches of ${SIZES.join(', ')} entries of ${ENTRY_BYTES} random bytes, each with a hard state, fsynced, one at a time\n` +
      `stores: ${STORES.join(', ')}; event loop kept busy in slices of ${BUSY_US} µs${BUSY_US === 0 ? ' (idle)' : ''}\n` +
      `load average (1 min) at the start: ${loads[0]?.toFixed(2)}\n\n`,
  );
  const results = new Map<string, Samples>();
  try {
    for (const size of SIZES) {
      const total = BATCHES_FLAG !== undefined ? Number(BATCHES_FLAG) : DEFAULT_BATCHES[size];
      const perRound = Math.max(1, Math.round(total / ROUNDS));
      // One store of each kind per batch size, opened (and warmed up) before any timing, then
      // alternating rounds, so both see the same background load.
      const subjects = new Map<StoreKind, Subject>();
      for (const kind of STORES) {
        const subject = await Subject.open(kind, work, size);
        subjects.set(kind, subject);
        for (let i = 0; i < WARMUP_BATCHES; i++) await subject.append();
      }
      try {
        for (let r = 0; r < ROUNDS; r++) {
          // Each store first in turn, alternating direction, so none always runs first.
          const order: readonly StoreKind[] = r % 2 === 0 ? [...STORES.slice(r % STORES.length), ...STORES.slice(0, r % STORES.length)] : [...STORES].reverse();
          for (const kind of order) {
            const key = `${kind}:${size}`;
            const s = results.get(key) ?? { size, latenciesMs: [], entries: 0, totalMs: 0, syncSeconds: [] };
            results.set(key, s);
            await progress.phase(`${kind}, ${size}-entry batches, round ${r + 1}/${ROUNDS}: ${perRound} batches`, () => round(subjects.get(kind) as Subject, perRound, s));
            loads.push(os.loadavg()[0] ?? 0);
          }
        }
      } finally {
        for (const subject of subjects.values()) await subject.close();
      }
    }
  } finally {
    await rm(work, { recursive: true, force: true });
  }
  const rows: string[][] = [];
  for (const size of SIZES) {
    const level = results.get(`level:${size}`);
    for (const kind of STORES) {
      const s = results.get(`${kind}:${size}`);
      if (s === undefined) continue;
      const sorted = [...s.latenciesMs].sort((a, b) => a - b);
      const perSec = s.entries / (s.totalMs / 1000);
      const levelPerSec = level !== undefined ? level.entries / (level.totalMs / 1000) : Number.NaN;
      const syncMean = s.syncSeconds.length > 0 ? (s.syncSeconds.reduce((a, b) => a + b, 0) / s.syncSeconds.length) * 1000 : Number.NaN;
      rows.push([
        `${size}`,
        kind,
        num(sorted.length),
        median(sorted).toFixed(2),
        percentileSorted(sorted, 90).toFixed(2),
        percentileSorted(sorted, 99).toFixed(2),
        (sorted.reduce((a, b) => a + b, 0) / sorted.length).toFixed(2),
        num(perSec),
        kind === 'level' ? '1.00x' : Number.isNaN(levelPerSec) ? '-' : `${(perSec / levelPerSec).toFixed(2)}x`,
        Number.isNaN(syncMean) ? '(inside LevelDB)' : syncMean.toFixed(2),
      ]);
    }
  }
  process.stdout.write(
    `\n${formatColumns(['entries/batch', 'store', 'batches', 'append p50 ms', 'p90 ms', 'p99 ms', 'mean ms', 'entries/s', 'vs level', 'sync mean ms'], rows, [true, false, true, true, true, true, true, true, true, true])}\n\n` +
      `load average (1 min) during the run: min ${Math.min(...loads).toFixed(2)}, max ${Math.max(...loads).toFixed(2)} (${machine.cpus} CPUs; the machine may be shared: compare the stores within this run, not across runs)\n`,
  );
}

await main();
