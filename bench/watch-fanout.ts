/**
 * Watch fan-out benchmark (Stage 5): one real node, a steady 200 writes/s, and 100, 1,000 and
 * 10,000 watchers of the written type (method and results: bench/README.md).
 *
 *   node dist/bench/watch-fanout.js [--quick] [--watchers 100,1000,10000] [--http 100] [--dir PATH]
 *   node dist/bench/watch-fanout.js --render bench/results/watch-fanout-<date>.json
 *   make bench-watch            (QUICK=1 make bench-watch: short phases, under 2 minutes)
 *
 * Processes: the node (`bin/cairn agent`, one-node cluster, fsync on, a temp data dir and free
 * ports, a fresh one per phase); a writer (writer-main.ts: the Cairn client, open-loop paced
 * writes of demo.v1.Artist with ~256-byte data over 1,000 keys, recording send time, ack time
 * and revision); and this process, which holds every watcher (gRPC WatchList streams, 500 per
 * connection, or HTTP `POST /v1/watch` streams, one connection each) and records, per change
 * received, its revision, its arrival time and its bytes. All three share one clock
 * (CLOCK_MONOTONIC, clock.ts).
 *
 * Per phase (one watcher count, one transport): the node's memory before the watchers connect
 * and once they have (RSS from /proc/<pid>/status, V8 heap from /metrics), the writer's
 * warm-up, a measured window (the node's CPU and run-queue wait from /proc, this process's CPU
 * and event-loop utilization, events the node handed to streams), the writer's last answers,
 * a drain until every open stream has the last revision (or a deadline), and the memory once
 * the streams are closed.
 *
 * Reported per phase: delivery latency of the window's writes, arrival time minus ack time and
 * minus send time (p50/p99 over every expected delivery); the achieved write rate; memory per
 * watcher; CPU of the node, the watcher process and the writer, and which one was the limit;
 * bytes per change to all watchers against the same clients polling List once a second.
 * Output: tables on stdout, structured progress (pino JSON lines) on stderr,
 * bench/results/watch-fanout-<date>[-quick].json and an SVG chart of latency against watchers.
 */
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import v8 from 'node:v8';
import { createLogger } from '../src/platform/index.js';
import { AgentProcess } from './fanout/agent.js';
import { KEEP_UP_P99_MS, measureFanout, pause } from './fanout/measure.js';
import { clockTicksPerSecond, metricValue, readProcMemory } from './fanout/proc.js';
import { chart, MEASURED_FIELDS, parseResults, tables, type PhaseResult, type PhaseSpec, type Results, type ServerMemory } from './fanout/results.js';
import { compareBytes, DeliveryLog } from './fanout/stats.js';
import { ARTIST, cairnWatchProtocol, GrpcWatcherPool, HttpWatcherPool, listResponseBytes, type WatcherPool } from './fanout/watchers.js';
import { WriterProcess } from './fanout/writer.js';
import { describeMachine, median, num } from './report.js';

// ---- Settings ----------------------------------------------------------------------------

const argv = process.argv.slice(2);
const flag = (name: string): string | undefined => {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : undefined;
};
const QUICK = argv.includes('--quick') || process.env['QUICK'] === '1';
const WATCHERS = (flag('--watchers') ?? '100,1000,10000').split(',').map(Number);
const HTTP_WATCHERS = Number(flag('--http') ?? '100');
for (const n of [...WATCHERS, HTTP_WATCHERS]) if (!Number.isInteger(n) || n < 0) throw new Error(`--watchers and --http take whole numbers, got ${JSON.stringify(n)}`);

const S = {
  ratePerSec: 200,
  keys: 1_000,
  dataBytes: 256,
  watchersPerConnection: 500,
  warmupMs: QUICK ? 1_500 : 3_000,
  measureMs: QUICK ? 6_000 : 20_000,
  /** After the last answer: how long the watchers may take to catch up before what is missing counts as undelivered. */
  drainTimeoutMs: QUICK ? 5_000 : 15_000,
  connectTimeoutMs: 180_000,
  closeTimeoutMs: 60_000,
  /** Writes waiting for answers, at most: 20 s of the schedule, so a slow node faces the offered rate rather than a writer that stops. */
  maxInFlight: 4_000,
  pollIntervalS: 1,
  seedConcurrency: 32,
} as const;

const log = createLogger({ nodeId: 'watch-fanout', destination: 2, level: 'info' });
const began = performance.now();
const elapsedS = (): number => Math.round((performance.now() - began) / 100) / 10;
const progress = (fields: Record<string, unknown>, msg: string): void => log.info({ elapsedS: elapsedS(), ...fields }, msg);

// ---- The node's memory ----------------------------------------------------------------------

/** The node's memory: the median of three samples 300 ms apart (the heap moves with every scavenge). */
async function sampleMemory(agent: AgentProcess): Promise<ServerMemory> {
  const samples: ServerMemory[] = [];
  for (let i = 0; i < 3; i++) {
    if (i > 0) await pause(300);
    const [mem, text = ''] = await Promise.all([readProcMemory(agent.pid), agent.metrics()]);
    samples.push({
      rssBytes: mem.rssBytes,
      heapUsedBytes: metricValue(text, 'cairn_process_nodejs_heap_size_used_bytes') ?? Number.NaN,
      oldSpaceUsedBytes: metricValue(text, 'cairn_process_nodejs_heap_space_size_used_bytes', { space: 'old' }) ?? Number.NaN,
      streams: metricValue(text, 'cairn_watch_streams') ?? Number.NaN,
      heapSpreadBytes: 0,
    });
  }
  // Scrapes the node did not answer are left out (NaN when none was answered).
  const m = (f: (s: ServerMemory) => number): number => median(samples.map(f).filter((x) => !Number.isNaN(x)));
  const heaps = samples.map((s) => s.heapUsedBytes).filter((x) => !Number.isNaN(x));
  return {
    rssBytes: m((s) => s.rssBytes),
    heapUsedBytes: m((s) => s.heapUsedBytes),
    oldSpaceUsedBytes: m((s) => s.oldSpaceUsedBytes),
    streams: m((s) => s.streams),
    heapSpreadBytes: heaps.length > 0 ? Math.max(...heaps) - Math.min(...heaps) : Number.NaN,
  };
}

// ---- One phase --------------------------------------------------------------------------------

interface RunContext {
  readonly writer: WriterProcess;
  readonly clkTck: number;
  /** Where each phase's node gets its data dir. */
  readonly workDir: string;
  /** The phase's node, for the exit handler. */
  agent: AgentProcess | undefined;
}

function makePool(agent: AgentProcess, spec: PhaseSpec, deliveries: DeliveryLog): WatcherPool {
  return spec.transport === 'grpc' ? new GrpcWatcherPool(agent.grpcAddr, spec.watchers, deliveries, cairnWatchProtocol(ARTIST, 'default'), S.watchersPerConnection) : new HttpWatcherPool(agent.httpUrl, spec.watchers, deliveries);
}

/**
 * One phase on a node of its own (fresh data dir, seeded with the data set): memory baselines
 * are clean, and what a saturated phase leaves behind (backlogs, garbage) cannot slow the next.
 */
async function runPhase(ctx: RunContext, spec: PhaseSpec, index: number): Promise<PhaseResult> {
  const name = `${spec.transport} x ${num(spec.watchers)}`;
  progress({ phase: name }, 'phase start');
  const dir = path.join(ctx.workDir, `phase-${index}`);
  await mkdir(dir);
  const agent = await AgentProcess.start(dir);
  ctx.agent = agent;
  try {
    progress({ phase: name, pid: agent.pid, grpc: agent.grpcAddr, http: agent.httpUrl }, 'node ready');
    const seeded = await ctx.writer.seed({ target: { system: 'cairn-artist', endpoint: agent.grpcAddr }, keys: S.keys, dataBytes: S.dataBytes, concurrency: S.seedConcurrency });
    const list = await listResponseBytes(spec.transport, agent.grpcAddr, agent.httpUrl);
    if (list.resources !== S.keys) throw new Error(`List returned ${list.resources} resources, expected ${S.keys}`);
    progress({ phase: name, keys: S.keys, seedMs: Math.round(seeded.ms), revision: seeded.revision, listResponseBytes: list.bytes }, 'seeded');
    const result = await measure(ctx, agent, spec, name, seeded.revision, list.bytes);
    if (!agent.running) throw new Error(`the node exited during the phase; its log ends:\n${agent.logTail()}`);
    return result;
  } catch (e) {
    process.stderr.write(`\nphase ${name} failed; the node ${agent.running ? 'is still running' : 'has exited'}; its log ends:\n${agent.logTail(40)}\n\n`);
    throw e;
  } finally {
    await agent.stop();
    ctx.agent = undefined;
  }
}

async function measure(ctx: RunContext, agent: AgentProcess, spec: PhaseSpec, name: string, seedRevision: number, listBytes: number): Promise<PhaseResult> {
  const deliveries = new DeliveryLog();
  const m = await measureFanout<ServerMemory>({
    label: name,
    watchers: spec.watchers,
    pool: makePool(agent, spec, deliveries),
    deliveries,
    writer: ctx.writer,
    writes: { ratePerSec: S.ratePerSec, maxInFlight: S.maxInFlight, keys: S.keys, dataBytes: S.dataBytes },
    timing: S,
    probe: {
      servingPid: agent.pid,
      serverPids: [agent.pid],
      sampleMemory: () => sampleMemory(agent),
      serverStreams: () => agent.metric('cairn_watch_streams'),
      eventsSent: () => agent.metric('cairn_watch_events_sent_total'),
    },
    seedRevision,
    clkTck: ctx.clkTck,
    progress,
  });
  const { before, connected } = m.memory;
  // Every watcher matches every change, so one change costs N events: N x the mean bytes of
  // the change events received (all of them, so a phase that falls behind still has a figure).
  const bytes = {
    // Per change at the offered rate: a phase that cannot keep up must not make polling look
    // dearer by dividing the same List traffic among fewer changes.
    ...compareBytes({ watchBytes: m.meanEventBytes * spec.watchers, changes: 1, listResponseBytes: listBytes, clients: spec.watchers, pollIntervalS: S.pollIntervalS, changesPerSec: S.ratePerSec }),
    listResponseBytes: listBytes,
    meanEventBytes: m.meanEventBytes,
    /** What the watchers actually received of the window's writes, per write (equal to the above when all were delivered). */
    deliveredBytesPerChange: m.deliveredBytesPerChange,
  };
  const measured = Object.fromEntries(MEASURED_FIELDS.map((k) => [k, m[k]])) as Pick<typeof m, (typeof MEASURED_FIELDS)[number]>;
  return {
    ...spec,
    ...measured,
    rssPerWatcherBytes: (connected.rssBytes - before.rssBytes) / spec.watchers,
    heapPerWatcherBytes: (connected.heapUsedBytes - before.heapUsedBytes) / spec.watchers,
    heapPerWatcherNoiseBytes: (connected.heapSpreadBytes + before.heapSpreadBytes) / spec.watchers,
    bytes,
  };
}

// ---- Main -----------------------------------------------------------------------------------------

function chartSubtitle(r: Results): string {
  return `${r.startedAt.slice(0, 10)}, ${r.machine.cpus} x ${r.machine.cpuModel}, load average ${r.loadAverage.start.toFixed(1)}-${r.loadAverage.end.toFixed(1)}${r.mode === 'quick' ? ', quick mode' : ''}`;
}

function busy(load: number, cpus: number): string {
  return load > cpus * 0.5 ? ` -- WARNING: other work is using the CPUs (${cpus} CPUs); every number is skewed` : '';
}

async function main(): Promise<void> {
  const startedAt = new Date().toISOString();
  const base = flag('--dir') ?? os.tmpdir();
  await mkdir(base, { recursive: true });
  const work = await mkdtemp(path.join(base, 'cairn-fanout-'));
  const machine = await describeMachine(work, v8.getHeapStatistics().heap_size_limit);
  const loadStart = os.loadavg()[0] ?? 0;
  const specs: PhaseSpec[] = [];
  for (const n of WATCHERS) {
    if (n > 0) specs.push({ transport: 'grpc', watchers: n });
    if (n === 100 && HTTP_WATCHERS > 0) specs.push({ transport: 'http', watchers: HTTP_WATCHERS });
  }
  if (HTTP_WATCHERS > 0 && !WATCHERS.includes(100)) specs.push({ transport: 'http', watchers: HTTP_WATCHERS });
  process.stdout.write(
    `cairn watch fan-out benchmark (${QUICK ? 'quick' : 'full'}), ${startedAt}\n` +
      `machine: ${machine.cpus} x ${machine.cpuModel}, ${machine.memoryGiB} GiB RAM, node ${machine.node}, ${machine.platform} (kernel ${machine.kernel})\n` +
      `node data dir: ${machine.disk.path} (${machine.disk.filesystem}); fsync on\n` +
      `phases: ${specs.map((s) => `${s.transport} x ${num(s.watchers)}`).join(', ')}; ${S.ratePerSec} writes/s over ${num(S.keys)} keys (~${S.dataBytes}-byte data), ` +
      `${S.warmupMs / 1000} s warm-up + ${S.measureMs / 1000} s measured each\n` +
      `load average (1 min): ${loadStart.toFixed(2)}${busy(loadStart, machine.cpus)}\n\n`,
  );

  const writer = new WriterProcess();
  const ctx: RunContext = { writer, clkTck: clockTicksPerSecond(), workDir: work, agent: undefined };
  const killAll = (): void => {
    ctx.agent?.killNow();
    writer.killNow();
  };
  process.on('exit', killAll);
  for (const sig of ['SIGINT', 'SIGTERM'] as const) {
    process.once(sig, () => {
      killAll();
      process.exit(130);
    });
  }
  try {
    const phases: PhaseResult[] = [];
    for (const [i, spec] of specs.entries()) phases.push(await runPhase(ctx, spec, i));
    const loadEnd = os.loadavg()[0] ?? 0;
    const table = tables(phases);
    process.stdout.write(
      `${table}\n\n` +
        "ack-to-recv: watcher receive time minus the time the writer got the write's answer (negative: the event beat the answer); " +
        "send-to-recv: minus the time the writer sent it. Percentiles over every expected delivery of the measured window's writes; " +
        '"> X s": the percentile falls on events not delivered by the end of the drain.\n' +
        `load average (1 min) at the start ${loadStart.toFixed(2)}, at the end ${loadEnd.toFixed(2)}${busy(Math.max(loadStart, loadEnd), machine.cpus)}\n`,
    );
    const resultsDir = fileURLToPath(new URL('../../bench/results/', import.meta.url));
    await mkdir(resultsDir, { recursive: true });
    // Other watcher counts than the default go to a file of their own, beside the standard run's.
    const custom = flag('--watchers') !== undefined || flag('--http') !== undefined ? `-${specs.map((p) => `${p.transport}${p.watchers}`).join('-')}` : '';
    const stem = `watch-fanout-${startedAt.slice(0, 10)}${QUICK ? '-quick' : ''}${custom}`;
    const results: Results = {
      benchmark: 'watch-fanout',
      mode: QUICK ? 'quick' : 'full',
      startedAt,
      machine,
      settings: { ...S, watchers: WATCHERS, httpWatchers: HTTP_WATCHERS, keepUpP99Ms: KEEP_UP_P99_MS },
      loadAverage: { start: loadStart, end: loadEnd },
      phases,
      table,
    };
    await writeFile(path.join(resultsDir, `${stem}.json`), `${JSON.stringify(results, null, 2)}\n`);
    await writeFile(path.join(resultsDir, `${stem}.svg`), chart(phases, chartSubtitle(results)));
    process.stdout.write(`\nwrote bench/results/${stem}.json and bench/results/${stem}.svg\n`);
  } finally {
    await writer.close();
    await rm(work, { recursive: true, force: true });
  }
}

/** --render FILE.json: the tables and the chart again from a saved run (after a change to how they are drawn). */
async function render(file: string): Promise<void> {
  const r = parseResults(await readFile(file, 'utf8'));
  process.stdout.write(`${tables(r.phases)}\n`);
  const svg = file.replace(/\.json$/, '.svg');
  await writeFile(svg, chart(r.phases, chartSubtitle(r)));
  process.stdout.write(`\nwrote ${svg}\n`);
}

const renderFile = flag('--render');
if (renderFile !== undefined) await render(renderFile);
else await main();
