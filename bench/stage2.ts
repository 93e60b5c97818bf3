/**
 * Stage 2 benchmark: the state machine and one durable node, on this machine's disk.
 *
 *   node dist/bench/stage2.js [--quick] [--dir PATH]
 *
 * 1. FSM apply throughput: pre-encoded ResourceWrite entries applied to a fresh Fsm (creates
 *    of new resources, and updates of 10,000 existing ones); median of several trials.
 * 2. One durable node (LevelLogStore + FileSnapshotStore in a temp dir, every entry batch
 *    fsynced, default snapshot settings): proposals/s and p50/p99 latency with 1, 16 and 256
 *    concurrent proposers, and entries per fsync (group commit). Plus the disk's own cost: a
 *    one-entry synced append to the log store.
 * 3. Snapshot of 1,000,000 resources: Fsm.snapshot() (copy-on-write, should be O(1)), the
 *    chunked serialization, joining the chunks (as the driver does) and FileSnapshotStore.save.
 * 4. Restart with 1,000,000 resources: the snapshot above plus 10,000 committed log entries
 *    after it; Replica.open through to applied == commit, with its parts timed.
 *
 * --quick: 100,000 resources instead of 1,000,000, fewer FSM entries, 2 s per concurrency
 * level instead of 5 s. Results go to bench/results/stage2.json (stage2-quick.json with
 * --quick). The temp dir is under the OS temp dir unless --dir is given; it is removed at the end.
 *
 * The program re-runs itself once with a larger V8 heap and --expose-gc (room for a million
 * resources, their serialized snapshot and a restored copy beside them; gc() between trials
 * keeps one trial's garbage out of the next).
 */
import { spawnSync } from 'node:child_process';
import { mkdir, mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import v8 from 'node:v8';
import { monotonicFactory } from 'ulid';
import { SeededRandom, nodeId, silentLogger, type Logger, type LogIndex, type Term } from '../src/base/index.js';
import { Fsm, CommandType, encodeEnvelope, type ApplyResult, type WriteCommand } from '../src/fsm/index.js';
import { FileSnapshotStore, LevelLogStore, systemClock, systemTimers } from '../src/platform/index.js';
import { encodeConfigEntry, makeConfig, type Entry, type SnapshotMeta } from '../src/raft/index.js';
import { Coordinator, Replica, type LoadedLog, type LogStore, type SnapshotStore, type StateMachine, type Transport } from '../src/replica/index.js';
import type { Resource } from '../src/store/index.js';
import { describeMachine, formatTable, median, mib, num, percentileSorted, Progress, type Machine, type Row } from './report.js';

const CHILD_ENV = 'CAIRN_BENCH_CHILD';

if (process.env[CHILD_ENV] !== '1') {
  // Re-run with room for a million resources and with gc() available.
  const heapMiB = Math.min(8192, Math.floor((os.totalmem() / 2 ** 20) * 0.7));
  const r = spawnSync(process.execPath, [`--max-old-space-size=${heapMiB}`, '--expose-gc', fileURLToPath(import.meta.url), ...process.argv.slice(2)], {
    stdio: 'inherit',
    env: { ...process.env, [CHILD_ENV]: '1' },
  });
  process.exit(r.status ?? 1);
}

// ---- Settings ----------------------------------------------------------------------------

const argv = process.argv.slice(2);
const QUICK = argv.includes('--quick');
const dirFlag = argv.indexOf('--dir');
const BASE_DIR = dirFlag >= 0 ? argv[dirFlag + 1] : undefined;
const S = {
  fsmEntries: QUICK ? 50_000 : 200_000,
  fsmTrials: QUICK ? 3 : 5,
  updateKeys: 10_000,
  durationMs: QUICK ? 2_000 : 5_000,
  warmupMs: QUICK ? 300 : 1_000,
  concurrency: [1, 16, 256],
  fsyncSamples: QUICK ? 100 : 300,
  resources: QUICK ? 100_000 : 1_000_000,
  replayEntries: 10_000,
  restartTrials: 3,
} as const;

const N1 = nodeId('n1');
const CONFIG = makeConfig([{ id: N1, suffrage: 'voter', address: '127.0.0.1:7500' }]);
const ARTIST = { group: 'demo', groupVersion: 'v1', kind: 'Artist' } as const;
const FIXED_TIME = '2026-11-21T10:00:00.000Z';
const gc = (globalThis as { gc?: () => void }).gc ?? (() => undefined);
const progress = new Progress();

// ---- Commands ------------------------------------------------------------------------------

// ulid's monotonic factory: ~1 µs a call here, against ~46 µs for the plain ulid(), which
// draws fresh crypto randomness for every character and would dominate what is measured.
const ulid = monotonicFactory();

function writeCommand(name: string, n: number, time: string): WriteCommand {
  return {
    time,
    uid: ulid(),
    generation: ulid(),
    id: { type: ARTIST, tenancy: { partition: 'default', namespace: `ns${n % 100}` }, name },
    data: { name, n, genre: 'metal', members: n % 7 },
  };
}

function entry(index: number, data: Uint8Array): Entry {
  return { index: index as LogIndex, term: 1 as Term, data };
}

const writeEntry = (index: number, name: string, n: number): Entry => entry(index, encodeEnvelope(CommandType.ResourceWrite, writeCommand(name, n, FIXED_TIME)));
const artistName = (i: number): string => `artist-${String(i).padStart(7, '0')}`;

function applyAll(fsm: Fsm, entries: readonly Entry[]): number {
  let failures = 0;
  for (const e of entries) if (!fsm.apply(e).result.ok) failures++;
  return failures;
}

function assertNoFailures(failures: number, what: string): void {
  if (failures > 0) throw new Error(`${what}: ${failures} commands were refused by the FSM; the benchmark would measure the wrong thing`);
}

// ---- 1. FSM apply ----------------------------------------------------------------------------

interface FsmResult {
  readonly entries: number;
  readonly trials: number;
  readonly createPerSec: number[];
  readonly updatePerSec: number[];
}

async function benchFsm(): Promise<FsmResult> {
  const creates: Entry[] = [];
  for (let i = 0; i < S.fsmEntries; i++) creates.push(writeEntry(i + 1, artistName(i), i));
  const seed: Entry[] = creates.slice(0, S.updateKeys);
  const updates: Entry[] = [];
  for (let i = 0; i < S.fsmEntries; i++) updates.push(writeEntry(S.updateKeys + i + 1, artistName(i % S.updateKeys), i));
  const createPerSec: number[] = [];
  const updatePerSec: number[] = [];
  for (let trial = 0; trial < S.fsmTrials; trial++) {
    gc();
    let fsm = new Fsm();
    let t0 = performance.now();
    assertNoFailures(applyAll(fsm, creates), 'FSM creates');
    createPerSec.push(creates.length / ((performance.now() - t0) / 1000));
    gc();
    fsm = new Fsm();
    assertNoFailures(applyAll(fsm, seed), 'FSM seed');
    t0 = performance.now();
    assertNoFailures(applyAll(fsm, updates), 'FSM updates');
    updatePerSec.push(updates.length / ((performance.now() - t0) / 1000));
    progress.line(`  trial ${trial + 1}/${S.fsmTrials}: create ${num(createPerSec[trial] ?? 0)}/s, update ${num(updatePerSec[trial] ?? 0)}/s`);
  }
  return { entries: S.fsmEntries, trials: S.fsmTrials, createPerSec, updatePerSec };
}

// ---- 2. One durable node ---------------------------------------------------------------------

const noPeers: Transport = { send: () => {}, onMessage: () => {}, close: async () => {} };

/** Counts the snapshots the replica reports taking. */
function countingLogger(counter: { snapshots: number }): Logger {
  return {
    ...silentLogger,
    info: (_obj, msg) => {
      if (msg === 'took snapshot') counter.snapshots++;
    },
  };
}

interface FsyncResult {
  readonly samples: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
}

/** The disk's floor: one 200-byte entry appended and fsynced, many times over. */
async function benchFsync(base: string): Promise<FsyncResult> {
  const dir = await mkdtemp(path.join(base, 'fsync-'));
  const store = await LevelLogStore.open({ dataDir: dir });
  const data = encodeEnvelope(CommandType.ResourceWrite, writeCommand('fsync-probe', 0, FIXED_TIME));
  const ms: number[] = [];
  for (let i = 1; i <= S.fsyncSamples; i++) {
    const t0 = performance.now();
    await store.append({ entries: [entry(i, data)], hardState: { term: 1 as Term, vote: N1, commit: i as LogIndex }, sync: true });
    ms.push(performance.now() - t0);
  }
  await store.close();
  await rm(dir, { recursive: true, force: true });
  ms.sort((a, b) => a - b);
  return { samples: ms.length, p50Ms: percentileSorted(ms, 50), p99Ms: percentileSorted(ms, 99) };
}

interface WriteResult {
  readonly concurrency: number;
  readonly seconds: number;
  readonly completed: number;
  readonly perSec: number;
  /** Median over the full one-second windows of the run. */
  readonly perSecWindowMedian: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly maxMs: number;
  readonly fsyncs: number;
  readonly batches: number;
  readonly entriesPerFsync: number;
  readonly snapshotsTaken: number;
  readonly failed: number;
}

async function benchWrites(base: string, concurrency: number): Promise<WriteResult> {
  const dir = await mkdtemp(path.join(base, `node-c${concurrency}-`));
  const counter = { snapshots: 0 };
  const logger = countingLogger(counter);
  const logStore = await LevelLogStore.open({ dataDir: dir, logger });
  const snapshotStore = await FileSnapshotStore.open({ dataDir: dir, logger });
  const fsm = new Fsm();
  const replica = await Replica.open<ApplyResult, Resource>({
    id: N1,
    random: new SeededRandom(concurrency),
    clock: systemClock,
    timers: systemTimers,
    logStore,
    snapshotStore,
    transport: noPeers,
    stateMachine: fsm,
    logger,
    bootstrap: CONFIG,
  });
  const coordinator = new Coordinator(replica, fsm);
  replica.campaign(); // a one-voter cluster: lead now rather than after an election timeout
  while (replica.status().role !== 'leader') await new Promise<void>((resolve) => setImmediate(resolve));

  let stop = false;
  let measureStart = Number.POSITIVE_INFINITY;
  let measureEnd = Number.POSITIVE_INFINITY;
  const latencies: number[] = [];
  const completions: number[] = [];
  let failed = 0;
  const worker = async (w: number): Promise<void> => {
    for (let k = 0; !stop; k++) {
      const cmd = writeCommand(`c${concurrency}-w${w}-${k}`, k, new Date().toISOString());
      const t0 = performance.now();
      let ok = false;
      try {
        ok = (await coordinator.propose(CommandType.ResourceWrite, cmd)).ok;
      } catch {
        ok = false;
      }
      const t1 = performance.now();
      if (!ok) {
        failed++;
        continue;
      }
      if (t0 >= measureStart && t1 <= measureEnd) {
        latencies.push(t1 - t0);
        completions.push(t1);
      }
    }
  };
  const workers = Array.from({ length: concurrency }, (_, w) => worker(w));
  await new Promise<void>((resolve) => setTimeout(resolve, S.warmupMs));
  const statsBefore = logStore.stats();
  const snapshotsBefore = counter.snapshots;
  measureStart = performance.now();
  await new Promise<void>((resolve) => setTimeout(resolve, S.durationMs));
  measureEnd = performance.now();
  const statsAfter = logStore.stats();
  const snapshotsTaken = counter.snapshots - snapshotsBefore;
  stop = true;
  await Promise.all(workers);
  await replica.close();
  await rm(dir, { recursive: true, force: true });

  const seconds = (measureEnd - measureStart) / 1000;
  const windows: number[] = [];
  for (let s = 0; s + 1 <= seconds; s++) {
    const lo = measureStart + s * 1000;
    windows.push(completions.filter((c) => c >= lo && c < lo + 1000).length);
  }
  latencies.sort((a, b) => a - b);
  const fsyncs = statsAfter.syncedBatches - statsBefore.syncedBatches;
  return {
    concurrency,
    seconds,
    completed: latencies.length,
    perSec: latencies.length / seconds,
    perSecWindowMedian: median(windows),
    p50Ms: percentileSorted(latencies, 50),
    p99Ms: percentileSorted(latencies, 99),
    maxMs: latencies[latencies.length - 1] ?? Number.NaN,
    fsyncs,
    batches: statsAfter.batches - statsBefore.batches,
    // Proposals completed in the window per fsync in the window (the edges differ by at most a batch).
    entriesPerFsync: latencies.length / Math.max(1, fsyncs),
    snapshotsTaken,
    failed,
  };
}

// ---- 3. Snapshot of a big store ------------------------------------------------------------

interface SnapshotResult {
  readonly resources: number;
  readonly buildSeconds: number;
  readonly heapUsedMiB: number;
  readonly snapshotCallUs: number[];
  readonly serializeMs: number;
  readonly chunks: number;
  readonly bytes: number;
  readonly joinMs: number;
  readonly saveMs: number;
  readonly fileBytes: number;
}

/** Applies the bootstrap config entry and `n` creates (entries 2..n+1) to a fresh Fsm. */
function buildBigFsm(n: number): Fsm {
  const fsm = new Fsm();
  fsm.apply(entry(1, encodeConfigEntry({ change: { type: 'bootstrap' }, config: CONFIG })));
  const step = Math.max(1, Math.floor(n / 4));
  for (let i = 0; i < n; i++) {
    const r = fsm.apply(writeEntry(i + 2, artistName(i), i));
    if (!r.result.ok) throw new Error(`building the store: write ${i} was refused: ${r.result.error.message}`);
    if ((i + 1) % step === 0 && i + 1 < n) progress.line(`  ${num(i + 1)} of ${num(n)} applied`);
  }
  return fsm;
}

async function benchSnapshot(fsm: Fsm, dataDir: string, buildSeconds: number): Promise<{ result: SnapshotResult; meta: SnapshotMeta }> {
  gc();
  const heapUsedMiB = process.memoryUsage().heapUsed / 2 ** 20;
  const snapshotCallUs: number[] = [];
  for (let i = 0; i < 5; i++) {
    const t0 = performance.now();
    fsm.snapshot();
    snapshotCallUs.push((performance.now() - t0) * 1000);
  }
  const view = fsm.snapshot();
  let t0 = performance.now();
  const parts: Uint8Array[] = [];
  let bytes = 0;
  for (const c of view.chunks()) {
    parts.push(c);
    bytes += c.length;
  }
  const serializeMs = performance.now() - t0;
  t0 = performance.now();
  const data = new Uint8Array(bytes);
  let pos = 0;
  for (const p of parts) {
    data.set(p, pos);
    pos += p.length;
  }
  const joinMs = performance.now() - t0;
  const chunks = parts.length;
  parts.length = 0;
  const meta: SnapshotMeta = { index: view.index, term: 1 as Term, config: CONFIG };
  const store = await FileSnapshotStore.open({ dataDir });
  t0 = performance.now();
  await store.save({ meta, data });
  const saveMs = performance.now() - t0;
  const [name] = await store.list();
  await store.close();
  const fileBytes = name === undefined ? 0 : (await stat(path.join(store.dir, name))).size;
  return {
    meta,
    result: { resources: fsm.store.size, buildSeconds, heapUsedMiB, snapshotCallUs, serializeMs, chunks, bytes, joinMs, saveMs, fileBytes },
  };
}

async function phase3(dataDir: string): Promise<{ result: SnapshotResult; meta: SnapshotMeta }> {
  let buildSeconds = 0;
  const fsm = await progress.phase(`3. build a store of ${num(S.resources)} resources`, () => {
    const t0 = performance.now();
    const built = buildBigFsm(S.resources);
    buildSeconds = (performance.now() - t0) / 1000;
    return built;
  });
  return progress.phase('3. snapshot, serialize, save', () => benchSnapshot(fsm, dataDir, buildSeconds));
}

// ---- 4. Restart ------------------------------------------------------------------------------

interface RestartTrial {
  readonly totalMs: number;
  readonly openLogDbMs: number;
  readonly loadSnapshotMs: number;
  readonly restoreMs: number;
  readonly loadLogMs: number;
  readonly replayMs: number;
}

interface RestartResult {
  readonly resources: number;
  readonly snapshotIndex: number;
  readonly replayEntries: number;
  readonly trials: RestartTrial[];
}

/** Appends `count` committed updates after the snapshot, in synced batches of 500. */
async function writeLogAfter(dataDir: string, snapshotIndex: number, count: number, resources: number): Promise<number> {
  const store = await LevelLogStore.open({ dataDir });
  let index = snapshotIndex;
  while (index < snapshotIndex + count) {
    const batch: Entry[] = [];
    for (let k = 0; k < 500 && index < snapshotIndex + count; k++) {
      index++;
      const i = (index * 7919) % resources;
      batch.push(writeEntry(index, artistName(i), index));
    }
    await store.append({ entries: batch, hardState: { term: 1 as Term, vote: N1, commit: index as LogIndex }, sync: true });
  }
  await store.close();
  return index;
}

async function restartOnce(dataDir: string, commit: number): Promise<RestartTrial> {
  gc();
  const marks = { loadSnapshot: 0, restore: 0, loadLog: 0, logLoaded: 0 };
  const t0 = performance.now();
  const logStore = await LevelLogStore.open({ dataDir });
  const openLogDbMs = performance.now() - t0;
  const snapshotStore = await FileSnapshotStore.open({ dataDir });
  const fsm = new Fsm();
  // Delegating wrappers that time each part of Replica.open.
  const timedSnapshots: SnapshotStore = {
    save: (s) => snapshotStore.save(s),
    close: () => snapshotStore.close(),
    loadNewest: async () => {
      const s = performance.now();
      const out = await snapshotStore.loadNewest();
      marks.loadSnapshot = performance.now() - s;
      return out;
    },
  };
  const timedLog: LogStore = {
    append: (b) => logStore.append(b),
    compact: (i) => logStore.compact(i),
    close: () => logStore.close(),
    load: async (after): Promise<LoadedLog> => {
      const s = performance.now();
      const out = await logStore.load(after);
      marks.logLoaded = performance.now();
      marks.loadLog = marks.logLoaded - s;
      return out;
    },
  };
  const timedFsm: StateMachine<ApplyResult> = {
    apply: (e) => fsm.apply(e),
    snapshot: () => fsm.snapshot(),
    restore: (meta, data) => {
      const s = performance.now();
      fsm.restore(meta, data);
      marks.restore = performance.now() - s;
    },
    get appliedIndex() {
      return fsm.appliedIndex;
    },
  };
  const replica = await Replica.open<ApplyResult, Resource>({
    id: N1,
    random: new SeededRandom(1),
    clock: systemClock,
    timers: systemTimers,
    logStore: timedLog,
    snapshotStore: timedSnapshots,
    transport: noPeers,
    stateMachine: timedFsm,
    // No snapshot after the replay: every trial starts from the same files.
    snapshotEveryEntries: Number.MAX_SAFE_INTEGER,
  });
  while (fsm.appliedIndex < commit) {
    const failed = replica.status().failed;
    if (failed !== undefined) throw new Error(`the restarted node stopped: ${failed}`);
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
  const done = performance.now();
  await replica.close();
  return {
    totalMs: done - t0,
    openLogDbMs,
    loadSnapshotMs: marks.loadSnapshot,
    restoreMs: marks.restore,
    loadLogMs: marks.loadLog,
    replayMs: done - marks.logLoaded,
  };
}

// ---- Main ------------------------------------------------------------------------------------

interface Results {
  readonly benchmark: 'stage2';
  readonly mode: 'full' | 'quick';
  readonly startedAt: string;
  readonly machine: Machine;
  readonly settings: typeof S;
  readonly fsm: FsmResult;
  readonly fsync: FsyncResult;
  readonly writes: WriteResult[];
  readonly snapshot: SnapshotResult;
  readonly restart: RestartResult;
  /** 1-minute load averages when the run began and ended: other work on the machine skews every number. */
  readonly loadAverage: { readonly start: number; readonly end: number };
  readonly table: Row[];
}

function buildTable(r: Omit<Results, 'table' | 'loadAverage'>): Row[] {
  const ms = (x: number, d = 1): string => `${num(x, d)} ms`;
  const rows: Row[] = [
    {
      measure: '1. FSM apply, creates',
      value: `${num(median(r.fsm.createPerSec))}/s`,
      notes: `median of ${r.fsm.trials} trials of ${num(r.fsm.entries)} pre-encoded ResourceWrite entries into a fresh Fsm (${num(1e6 / median(r.fsm.createPerSec), 2)} µs each; range ${num(Math.min(...r.fsm.createPerSec))}..${num(Math.max(...r.fsm.createPerSec))})`,
    },
    {
      measure: '1. FSM apply, updates',
      value: `${num(median(r.fsm.updatePerSec))}/s`,
      notes: `same, updating ${num(S.updateKeys)} existing resources (${num(1e6 / median(r.fsm.updatePerSec), 2)} µs each)`,
    },
    {
      measure: '2. disk: 1-entry append + fsync',
      value: ms(r.fsync.p50Ms, 2),
      notes: `p50 of ${r.fsync.samples} LevelLogStore.append(sync) calls; p99 ${ms(r.fsync.p99Ms, 2)}: the floor under one write's latency`,
    },
  ];
  for (const w of r.writes) {
    rows.push({
      measure: `2. durable node, ${w.concurrency} proposer${w.concurrency === 1 ? '' : 's'}`,
      value: `${num(w.perSec)}/s`,
      notes:
        `latency p50 ${ms(w.p50Ms, 2)}, p99 ${ms(w.p99Ms, 2)}; ${num(w.entriesPerFsync, 1)} entries per fsync (${num(w.fsyncs)} fsyncs); ` +
        `median 1-s window ${num(w.perSecWindowMedian)}/s; snapshots taken meanwhile: ${w.snapshotsTaken}`,
    });
  }
  const s = r.snapshot;
  rows.push(
    { measure: `3. build ${num(s.resources)} resources`, value: `${num(s.buildSeconds, 1)} s`, notes: `encode + apply one ResourceWrite each; heap in use afterwards ${num(s.heapUsedMiB)} MiB` },
    { measure: '3. Fsm.snapshot()', value: `${num(median(s.snapshotCallUs), 1)} µs`, notes: 'median of 5 calls: the copy-on-write view the driver takes before serializing' },
    { measure: '3. serialize (chunks)', value: ms(s.serializeMs, 0), notes: `${mib(s.bytes)} in ${num(s.chunks)} chunks, ${num(s.bytes / 2 ** 20 / (s.serializeMs / 1000), 0)} MiB/s` },
    { measure: '3. join chunks', value: ms(s.joinMs, 0), notes: 'one buffer, as Replica.takeSnapshot does before save' },
    { measure: '3. FileSnapshotStore.save', value: ms(s.saveMs, 0), notes: `write, checksum, fsync, rename, fsync dir: ${mib(s.fileBytes)} file` },
  );
  const t = r.restart.trials;
  const m = (f: (x: RestartTrial) => number): number => median(t.map(f));
  rows.push(
    {
      measure: `4. restart, ${num(r.restart.resources)} resources`,
      value: ms(m((x) => x.totalMs), 0),
      notes: `median of ${t.length}: open the log DB to applied == commit, snapshot at ${num(r.restart.snapshotIndex)} + ${num(r.restart.replayEntries)} log entries`,
    },
    { measure: '4.  open LevelDB', value: ms(m((x) => x.openLogDbMs), 0), notes: 'LevelLogStore.open' },
    { measure: '4.  load snapshot file', value: ms(m((x) => x.loadSnapshotMs), 0), notes: 'read + verify checksums (FileSnapshotStore.loadNewest)' },
    { measure: '4.  restore', value: ms(m((x) => x.restoreMs), 0), notes: 'Fsm.restore: decode and rebuild the store and its indexes' },
    { measure: '4.  load log', value: ms(m((x) => x.loadLogMs), 0), notes: `LevelLogStore.load of ${num(r.restart.replayEntries)} entries (checksums verified)` },
    {
      measure: '4.  replay',
      value: ms(m((x) => x.replayMs), 0),
      notes: `apply ${num(r.restart.replayEntries)} committed entries (${num(r.restart.replayEntries / (m((x) => x.replayMs) / 1000))}/s)`,
    },
  );
  return rows;
}

/** A warning when other work competes for the CPUs. */
function busy(load: number, cpus: number): string {
  return load > cpus * 0.5 ? ` -- WARNING: the machine is busy with other work (${cpus} CPUs); these numbers are skewed` : '';
}

async function main(): Promise<void> {
  const startedAt = new Date().toISOString();
  const base = BASE_DIR ?? os.tmpdir();
  await mkdir(base, { recursive: true });
  const work = await mkdtemp(path.join(base, 'cairn-bench-'));
  const machine = await describeMachine(work, v8.getHeapStatistics().heap_size_limit);
  const loadStart = os.loadavg()[0] ?? 0;
  process.stdout.write(
    `cairn stage 2 benchmark (${QUICK ? 'quick' : 'full'}), ${startedAt}\n` +
      `machine: ${machine.cpus} x ${machine.cpuModel}, ${machine.memoryGiB} GiB RAM, node ${machine.node}, ${machine.platform} (kernel ${machine.kernel})\n` +
      `disk: ${machine.disk.path} (${machine.disk.filesystem}); V8 heap limit ${machine.heapLimitMiB} MiB\n` +
      `load average (1 min): ${loadStart.toFixed(2)}${busy(loadStart, machine.cpus)}\n\n`,
  );
  try {
    const fsm = await progress.phase(`1. FSM apply: ${num(S.fsmEntries)} entries x ${S.fsmTrials} trials`, benchFsm);
    const fsync = await progress.phase(`2. disk: ${S.fsyncSamples} synced one-entry appends`, () => benchFsync(work));
    const writes: WriteResult[] = [];
    for (const c of S.concurrency) {
      writes.push(
        await progress.phase(`2. durable node, ${c} concurrent proposers, ${S.durationMs / 1000} s (+${S.warmupMs / 1000} s warm-up)`, async () => {
          const w = await benchWrites(work, c);
          progress.line(`  ${num(w.perSec)}/s, p50 ${w.p50Ms.toFixed(2)} ms, p99 ${w.p99Ms.toFixed(2)} ms, ${w.entriesPerFsync.toFixed(1)} entries/fsync`);
          return w;
        }),
      );
    }
    const bigDir = await mkdtemp(path.join(work, 'big-'));
    // In its own function, so the big store is garbage once its snapshot is on disk.
    const { result: snapshot, meta } = await phase3(bigDir);
    const commit = await progress.phase(`4. write ${num(S.replayEntries)} log entries after the snapshot`, () => writeLogAfter(bigDir, meta.index, S.replayEntries, S.resources));
    const trials: RestartTrial[] = [];
    for (let i = 0; i < S.restartTrials; i++) {
      const trial = await progress.phase(`4. restart ${i + 1}/${S.restartTrials}`, () => restartOnce(bigDir, commit));
      progress.line(
        `  total ${trial.totalMs.toFixed(0)} ms: open db ${trial.openLogDbMs.toFixed(0)}, snapshot file ${trial.loadSnapshotMs.toFixed(0)}, restore ${trial.restoreMs.toFixed(0)}, log ${trial.loadLogMs.toFixed(0)}, replay ${trial.replayMs.toFixed(0)}`,
      );
      trials.push(trial);
    }
    const restart: RestartResult = { resources: S.resources, snapshotIndex: meta.index, replayEntries: S.replayEntries, trials };
    const partial = { benchmark: 'stage2' as const, mode: QUICK ? ('quick' as const) : ('full' as const), startedAt, machine, settings: S, fsm, fsync, writes, snapshot, restart };
    const table = buildTable(partial);
    const loadEnd = os.loadavg()[0] ?? 0;
    process.stdout.write(`\n${formatTable(table)}\n\nload average (1 min) at the start ${loadStart.toFixed(2)}, at the end ${loadEnd.toFixed(2)}${busy(Math.max(loadStart, loadEnd), machine.cpus)}\n`);
    const resultsDir = fileURLToPath(new URL('../../bench/results/', import.meta.url));
    await mkdir(resultsDir, { recursive: true });
    const file = path.join(resultsDir, QUICK ? 'stage2-quick.json' : 'stage2.json');
    const results: Results = { ...partial, loadAverage: { start: loadStart, end: loadEnd }, table };
    await writeFile(file, `${JSON.stringify(results, null, 2)}\n`);
    process.stdout.write(`\nwrote ${path.relative(process.cwd(), file) || file}\n`);
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

await main();
