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
import { performance, type EventLoopUtilization } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import v8 from 'node:v8';
import { createLogger } from '../src/platform/index.js';
import { AgentProcess } from './fanout/agent.js';
import { monoMs } from './fanout/clock.js';
import { clockTicksPerSecond, metricValue, readProcCpu, readProcMemory, readSchedStat, type SchedStat } from './fanout/proc.js';
import { chart, parseResults, tables, type PhaseResult, type PhaseSpec, type Results, type ServerMemory } from './fanout/results.js';
import { compareBytes, cpuPercent, DeliveryLog, joinLatencies, percentiles, verdictOf } from './fanout/stats.js';
import { GrpcWatcherPool, HttpWatcherPool, listResponseBytes, type WatcherPool } from './fanout/watchers.js';
import { WriterProcess, writeRecords } from './fanout/writer.js';
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
  /** Writes waiting for answers, at most: 20 s of the schedule, so a slow node faces the offered rate rather than a writer that stops. */
  maxInFlight: 4_000,
  pollIntervalS: 1,
  seedConcurrency: 32,
} as const;

/** A phase keeps up only if p99 delivery latency (from send) stays under this. */
const KEEP_UP_P99_MS = 1_000;

const log = createLogger({ nodeId: 'watch-fanout', destination: 2, level: 'info' });
const began = performance.now();
const elapsedS = (): number => Math.round((performance.now() - began) / 100) / 10;
const progress = (fields: Record<string, unknown>, msg: string): void => log.info({ elapsedS: elapsedS(), ...fields }, msg);
const pause = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

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

/** Polls until `probe` returns true or the deadline passes; `describe` says what was last seen. */
async function until(what: string, timeoutMs: number, probe: () => Promise<boolean> | boolean, describe: () => string | Promise<string>, everyMs = 100): Promise<number> {
  const t0 = performance.now();
  let lastReport = t0;
  for (;;) {
    if (await probe()) return performance.now() - t0;
    const now = performance.now();
    if (now - t0 > timeoutMs) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}; last seen: ${await describe()}`);
    if (now - lastReport > 5_000) {
      lastReport = now;
      progress({ waitingFor: what, seen: await describe() }, 'waiting');
    }
    await pause(everyMs);
  }
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

/** Run-queue wait between two samples as a percentage of `wallMs` (NaN without /proc schedstat). */
function waitPercent(a: SchedStat | undefined, b: SchedStat | undefined, wallMs: number): number {
  return a === undefined || b === undefined ? Number.NaN : cpuPercent((b.waitNs - a.waitNs) / 1e6, wallMs);
}

function makePool(agent: AgentProcess, spec: PhaseSpec, deliveries: DeliveryLog): WatcherPool {
  return spec.transport === 'grpc' ? new GrpcWatcherPool(agent.grpcAddr, spec.watchers, deliveries, S.watchersPerConnection) : new HttpWatcherPool(agent.httpUrl, spec.watchers, deliveries);
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
    const seeded = await ctx.writer.seed({ endpoint: agent.grpcAddr, keys: S.keys, dataBytes: S.dataBytes, concurrency: S.seedConcurrency });
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
  const { writer } = ctx;
  const before = await sampleMemory(agent);
  const deliveries = new DeliveryLog();
  const pool = makePool(agent, spec, deliveries);
  let result: PhaseResult;
  try {
    pool.open();
    const connectMs = await until(
      `${num(spec.watchers)} ${spec.transport} watch streams open on the node`,
      S.connectTimeoutMs,
      async () => (await agent.metric('cairn_watch_streams')) === before.streams + spec.watchers,
      async () => `cairn_watch_streams ${await agent.metric('cairn_watch_streams')} (baseline ${before.streams}), client streams open ${pool.openStreams()}, ended ${JSON.stringify(pool.totals().ended)}`,
      250,
    );
    const connected = await sampleMemory(agent);
    progress({ phase: name, connectMs: Math.round(connectMs), rssMiB: +(connected.rssBytes / 2 ** 20).toFixed(1), heapMiB: +(connected.heapUsedBytes / 2 ** 20).toFixed(1) }, 'watchers connected');

    // The writer's schedule is fixed in advance on the shared clock, so the window's edges are
    // known here without asking it.
    const startAtMs = monoMs() + 200;
    const windowStart = startAtMs + S.warmupMs;
    const windowEnd = windowStart + S.measureMs;
    const ran = writer.run({ startAtMs, durationMs: S.warmupMs + S.measureMs, ratePerSec: S.ratePerSec, maxInFlight: S.maxInFlight, keys: S.keys, dataBytes: S.dataBytes });
    // Awaited below; if this phase fails first, its rejection must not be the one reported.
    ran.catch(() => undefined);
    await pause(windowStart - monoMs());
    // The window's edges are taken from local reads only (/proc, this process): a scrape of a
    // saturated node can take seconds. The node's event counter is scraped beside them and its
    // rate is taken between the two answers' arrival times.
    const scrapeSent = async (): Promise<{ value: number; atMs: number }> => ({ value: (await agent.metric('cairn_watch_events_sent_total')) ?? Number.NaN, atMs: monoMs() });
    const t0 = monoMs();
    const [cpu0, wait0, selfWait0] = await Promise.all([readProcCpu(agent.pid), readSchedStat(agent.pid), readSchedStat('self')]);
    const lg0 = process.cpuUsage();
    const elu0: EventLoopUtilization = performance.eventLoopUtilization();
    const received0 = pool.totals().changes;
    const sent0 = scrapeSent();
    progress({ phase: name, windowS: S.measureMs / 1000 }, 'measured window start');
    // Progress every 5 s of the window: deliveries so far and how far behind the slowest stream is.
    const ticker = setInterval(() => progress({ phase: name, deliveries: deliveries.size, openStreams: pool.openStreams(), slowestStreamRevision: pool.minLastRevision() }, 'measuring'), 5_000);
    await pause(windowEnd - monoMs());
    clearInterval(ticker);
    const t1 = monoMs();
    const [cpu1, wait1, selfWait1] = await Promise.all([readProcCpu(agent.pid), readSchedStat(agent.pid), readSchedStat('self')]);
    const lgCpu = process.cpuUsage(lg0);
    const elu = performance.eventLoopUtilization(elu0);
    const received1 = pool.totals().changes;
    const [s0, s1] = await Promise.all([sent0, scrapeSent()]);
    const lgMem = process.memoryUsage();
    const underLoad = await sampleMemory(agent);
    const wallMs = t1 - t0;

    const run = await ran;
    const lastAckMs = monoMs();
    const records = writeRecords(run);
    const lastRevision = Math.max(0, ...records.map((r) => r.revision));
    // A write whose data equals the stored data changes nothing and sends no event; the writer
    // makes every write differ, and this checks it did.
    const firstRevision = Math.min(...records.map((r) => r.revision));
    if (new Set(records.map((r) => r.revision)).size !== records.length || firstRevision <= seedRevision) {
      throw new Error(`the run's ${records.length} writes did not each make a new revision (lowest ${firstRevision}, the seed's highest ${seedRevision}): the deliveries would not match the writes`);
    }
    let drained = true;
    let drainMs = 0;
    try {
      drainMs = await until(
        'every open stream to receive the last write',
        S.drainTimeoutMs,
        () => pool.openStreams() === 0 || pool.minLastRevision() >= lastRevision,
        () => `slowest open stream at revision ${pool.minLastRevision()}, last write ${lastRevision}, open streams ${pool.openStreams()}`,
        50,
      );
    } catch {
      drained = false;
      drainMs = monoMs() - lastAckMs;
    }
    progress({ phase: name, drainMs: Math.round(drainMs), drained }, 'drained');

    const measured = records.filter((r) => r.sentMs >= windowStart && r.sentMs < windowEnd);
    const acked = records.filter((r) => r.ackedMs >= windowStart && r.ackedMs < windowEnd).length;
    const join = joinLatencies(deliveries, measured);
    const expected = measured.length * spec.watchers;
    const deliveredFraction = expected === 0 ? Number.NaN : join.delivered / expected;
    // Deliveries that never came count as slower than every one that did.
    const undelivered = Math.max(0, expected - join.delivered);
    const achievedRatePerSec = (acked * 1000) / S.measureMs;
    const rateHeld = achievedRatePerSec >= S.ratePerSec * 0.98 && run.failed === 0;
    const serverCpuPercent = cpuPercent(((cpu1.ticks - cpu0.ticks) * 1000) / ctx.clkTck, wallMs);
    const serverCpuWaitPercent = waitPercent(wait0, wait1, wallMs);
    const ackLatency = Float64Array.from(records.map((r) => r.ackedMs - r.sentMs)).sort();
    // Every watcher matches every change, so one change costs N events: N x the mean bytes of
    // the change events received (all of them, so a phase that falls behind still has a figure).
    const totals = pool.totals();
    const meanEventBytes = totals.changes > 0 ? totals.changeBytes / totals.changes : Number.NaN;
    const bytes = {
      // Per change at the offered rate: a phase that cannot keep up must not make polling look
      // dearer by dividing the same List traffic among fewer changes.
      ...compareBytes({ watchBytes: meanEventBytes * spec.watchers, changes: 1, listResponseBytes: listBytes, clients: spec.watchers, pollIntervalS: S.pollIntervalS, changesPerSec: S.ratePerSec }),
      listResponseBytes: listBytes,
      meanEventBytes,
      /** What the watchers actually received of the window's writes, per write (equal to the above when all were delivered). */
      deliveredBytesPerChange: measured.length > 0 ? join.deliveredBytes / measured.length : Number.NaN,
    };
    const latencyFromSendMs = percentiles(join.fromSendMs, undelivered);
    // Keeping up: the write rate held, every event came, none later than KEEP_UP_P99_MS after
    // its write was sent, and no stream was ended. A backlog shows as seconds of latency long
    // before anything is lost, so latency is part of the test, not only delivery.
    const keepsUp = rateHeld && drained && deliveredFraction >= 0.999 && latencyFromSendMs.p99 <= KEEP_UP_P99_MS && Object.keys(totals.ended).length === 0;
    result = {
      ...spec,
      connectMs,
      memory: { before, connected, underLoad },
      rssPerWatcherBytes: (connected.rssBytes - before.rssBytes) / spec.watchers,
      heapPerWatcherBytes: (connected.heapUsedBytes - before.heapUsedBytes) / spec.watchers,
      heapPerWatcherNoiseBytes: (connected.heapSpreadBytes + before.heapSpreadBytes) / spec.watchers,
      window: { ms: wallMs, writesSent: measured.length, writesAcked: acked },
      targetRatePerSec: S.ratePerSec,
      achievedRatePerSec,
      rateHeld,
      writer: { scheduled: run.scheduled, sent: run.sent, failed: run.failed, firstError: run.firstError, maxInFlight: run.maxInFlightSeen, cpuPercent: cpuPercent(run.cpuMs, run.wallMs), ackLatencyMs: percentiles(ackLatency) },
      measuredWrites: measured.length,
      deliveredFraction,
      latencyFromAckMs: percentiles(join.fromAckMs, undelivered),
      latencyFromSendMs,
      undeliveredOlderThanMs: monoMs() - windowEnd,
      drainMs,
      drained,
      serverCpuPercent,
      serverCpuWaitPercent,
      serverEventsPerSec: ((s1.value - s0.value) * 1000) / (s1.atMs - s0.atMs),
      receivedEventsPerSec: ((received1 - received0) * 1000) / wallMs,
      loadGenerator: { cpuPercent: cpuPercent((lgCpu.user + lgCpu.system) / 1000, wallMs), cpuWaitPercent: waitPercent(selfWait0, selfWait1, wallMs), eventLoopUtilization: elu.utilization, rssBytes: lgMem.rss, heapUsedBytes: lgMem.heapUsed },
      watcherTotals: totals,
      bytes,
      verdict: verdictOf({ keepsUp, serverCpuPercent, serverCpuWaitPercent, elu: elu.utilization }),
    };
    progress(
      {
        phase: name,
        achievedRatePerSec: +achievedRatePerSec.toFixed(1),
        deliveredPct: +(deliveredFraction * 100).toFixed(2),
        fromAckP50Ms: +result.latencyFromAckMs.p50.toFixed(2),
        fromAckP99Ms: +result.latencyFromAckMs.p99.toFixed(2),
        serverCpuPct: Math.round(serverCpuPercent),
        serverCpuWaitPct: Math.round(serverCpuWaitPercent),
        loadGenCpuPct: Math.round(result.loadGenerator.cpuPercent),
        loadGenElu: +elu.utilization.toFixed(2),
        verdict: result.verdict,
      },
      'phase done',
    );
  } finally {
    pool.close();
  }
  // Every stream closed: what the node still holds (garbage not yet collected, or retained).
  // Best effort: the node is this phase's alone, so one that stays swamped is only stopped.
  const base = before.streams;
  try {
    await until(
      'the node to close the watch streams',
      60_000,
      async () => ((await agent.metric('cairn_watch_streams')) ?? Number.POSITIVE_INFINITY) <= base,
      async () => `cairn_watch_streams ${await agent.metric('cairn_watch_streams')} (baseline ${base})`,
      250,
    );
  } catch (e) {
    progress({ phase: name, err: e instanceof Error ? e.message : String(e) }, 'the node did not close the streams; no memory figure after close');
    return result;
  }
  const afterClose = await sampleMemory(agent);
  return { ...result, memory: { ...result.memory, afterClose } };
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
