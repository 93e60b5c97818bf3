/**
 * One fan-out measurement, shared by `make bench-watch` (bench/watch-fanout.ts: one Cairn node
 * per phase) and `make bench`'s fan-out phase (bench/fanout/cluster-phase.ts: the 3-node etcd
 * and Cairn clusters): N watchers on one server, an open-loop writer at a fixed rate, a warm-up,
 * a measured window, a drain, and what the watchers received joined to what the writer sent.
 *
 * The caller owns the servers and says how to read them (a `FanoutProbe`); this module owns the
 * order of events and the arithmetic:
 *
 * 1. the servers' memory; N watchers connect (until the probe says the server holds them all);
 *    the memory again;
 * 2. the writer starts at a time fixed in advance on the shared clock (clock.ts), so the
 *    window's edges are known without asking it; warm-up, then the measured window, over which
 *    the serving node's CPU and run-queue wait (/proc), every server's CPU, this process's CPU
 *    and event-loop utilization and the events the serving node handed to streams are taken;
 * 3. the writer's last answers; a drain until every open stream has the last write (or a
 *    deadline); the streams close; the memory once the server has let them go.
 *
 * Delivery latency is per expected delivery (watchers x writes sent in the window): receive
 * time minus the write's send time (and minus its ack time). A delivery that never came by the
 * end of the drain counts as slower than every one that did.
 */
import { performance, type EventLoopUtilization } from 'node:perf_hooks';
import { monoMs } from './clock.js';
import { readProcCpu, readSchedStat, readSchedStatAllThreads, type SchedStat } from './proc.js';
import { cpuPercent, DeliveryLog, joinLatencies, percentiles, verdictOf, type Percentiles } from './stats.js';
import type { WatcherPool, WatcherTotals } from './watchers.js';
import { writeRecords, type RunReply, type WriterProcess } from './writer.js';

/** A phase keeps up only if p99 delivery latency (from send) stays under this. */
export const KEEP_UP_P99_MS = 1_000;

export const pause = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));

export type ProgressFn = (fields: Record<string, unknown>, msg: string) => void;

/** Polls until `probe` returns true or the deadline passes (then throws, saying what was last seen); returns the time it took. */
export async function until(what: string, timeoutMs: number, probe: () => Promise<boolean> | boolean, describe: () => string | Promise<string>, everyMs: number, progress: ProgressFn): Promise<number> {
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

export interface FanoutTiming {
  readonly warmupMs: number;
  readonly measureMs: number;
  /** After the last answer: how long the watchers may take to catch up before what is missing counts as undelivered. */
  readonly drainTimeoutMs: number;
  /** How long N watchers may take to be registered on the server. */
  readonly connectTimeoutMs: number;
  /** How long the server may take to let the streams go after they are closed (then no memory figure after close). */
  readonly closeTimeoutMs: number;
}

export interface FanoutWrites {
  readonly ratePerSec: number;
  /** Writes waiting for answers, at most: a slow server faces the offered rate rather than a writer that stops. */
  readonly maxInFlight: number;
  readonly keys: number;
  readonly dataBytes: number;
}

/** How to read the servers (the caller's). `M` is what one memory sample holds. */
export interface FanoutProbe<M> {
  /** The process serving the watchers: its CPU and run-queue wait are measured over the window. */
  readonly servingPid: number;
  /**
   * Whose run-queue wait counts for the serving process: its main thread (a Node server's
   * JavaScript thread, the one that does the fan-out), or all its threads summed (a Go server
   * such as etcd, whose work is spread over many). Default: the main thread.
   */
  readonly waitOf?: 'main-thread' | 'all-threads';
  /** Cores the serving process can keep busy (for the verdict): 1 for a Node server, every core for a Go one. Default 1. */
  readonly servingCores?: number;
  /** Every server process (the serving one included): each one's CPU over the window. */
  readonly serverPids: readonly number[];
  sampleMemory(): Promise<M>;
  /** Watch streams (or watchers) the serving node holds now, from its metrics; undefined when it did not answer. */
  serverStreams(): Promise<number | undefined>;
  /** Events the serving node has handed to watch streams so far (a counter); undefined when unknown. */
  eventsSent(): Promise<number | undefined>;
}

export interface FanoutRun<M> {
  readonly label: string;
  readonly watchers: number;
  /** Not yet opened; opened and closed here. */
  readonly pool: WatcherPool;
  readonly deliveries: DeliveryLog;
  /** Connected (seeded) to the system under test. */
  readonly writer: Pick<WriterProcess, 'run'>;
  readonly writes: FanoutWrites;
  readonly timing: FanoutTiming;
  readonly probe: FanoutProbe<M>;
  /** Revisions up to this one were made before the run (the writer's must all be higher). */
  readonly seedRevision: number;
  /** /proc's clock ticks per second (proc.ts clockTicksPerSecond). */
  readonly clkTck: number;
  readonly progress: ProgressFn;
}

export interface FanoutMeasurement<M> {
  readonly watchers: number;
  readonly connectMs: number;
  /** Before the watchers connect, once they have, at the end of the window, and once the server let them go (absent if it did not in time). */
  readonly memory: { readonly before: M; readonly connected: M; readonly underLoad: M; readonly afterClose?: M };
  readonly window: { readonly ms: number; readonly writesSent: number; readonly writesAcked: number };
  readonly targetRatePerSec: number;
  /** Writes answered within the window, per second. */
  readonly achievedRatePerSec: number;
  /** The write rate held: at least 98% of the target answered in the window, and no write failed. */
  readonly rateHeld: boolean;
  readonly writer: { readonly scheduled: number; readonly sent: number; readonly failed: number; readonly firstError: string | undefined; readonly maxInFlight: number; readonly cpuPercent: number; readonly ackLatencyMs: Percentiles };
  readonly measuredWrites: number;
  /** Deliveries of the window's writes over (watchers x window's writes). */
  readonly deliveredFraction: number;
  readonly latencyFromAckMs: Percentiles;
  readonly latencyFromSendMs: Percentiles;
  /** When some deliveries never came, their latency is at least this (ms): from the window's end to the end of the drain. */
  readonly undeliveredOlderThanMs: number;
  /** From the writer's last answer until every open stream had the last revision (or the deadline). */
  readonly drainMs: number;
  readonly drained: boolean;
  /**
   * The serving node's CPU over the window (% of one core, all its threads) and its run-queue
   * wait (FanoutProbe.waitOf): the share of the window it was runnable but waiting for a CPU.
   */
  readonly serverCpuPercent: number;
  readonly serverCpuWaitPercent: number;
  /** Every server's CPU over the window, in `probe.serverPids` order. */
  readonly serversCpuPercent: readonly number[];
  /** Events the node handed to watch streams per second during the window (its events-sent metric). */
  readonly serverEventsPerSec: number;
  /** Change events all watchers received per second during the window (N x the write rate if they kept up). */
  readonly receivedEventsPerSec: number;
  readonly loadGenerator: { readonly cpuPercent: number; readonly cpuWaitPercent: number; readonly eventLoopUtilization: number; readonly rssBytes: number; readonly heapUsedBytes: number };
  readonly watcherTotals: WatcherTotals;
  /** Streams that missed a write between the first and last change they received (must be 0: API.md "Watch"). */
  readonly streamsWithGap: number;
  /** Mean bytes of a change event as received (message + gRPC prefix, or NDJSON line). */
  readonly meanEventBytes: number;
  /** What the watchers received of the window's writes, per write. */
  readonly deliveredBytesPerChange: number;
  /**
   * Every watcher got every event at the offered rate: the write rate held, every expected
   * delivery came by the end of the drain, p99 from send within KEEP_UP_P99_MS, and no stream
   * was ended by the server. A backlog shows as seconds of latency long before anything is
   * lost, so latency is part of the test, not only delivery.
   */
  readonly keepsUp: boolean;
  readonly verdict: string;
  /** From closing the streams until the server held none of them (NaN if it did not in time). */
  readonly closeMs: number;
}

/** Run-queue wait between two samples as a percentage of `wallMs` (NaN without /proc schedstat). */
function waitPercent(a: SchedStat | undefined, b: SchedStat | undefined, wallMs: number): number {
  return a === undefined || b === undefined ? Number.NaN : cpuPercent((b.waitNs - a.waitNs) / 1e6, wallMs);
}

async function cpuTicks(pids: readonly number[]): Promise<number[]> {
  return Promise.all(pids.map(async (pid) => (await readProcCpu(pid).catch(() => undefined))?.ticks ?? Number.NaN));
}

export async function measureFanout<M>(run: FanoutRun<M>): Promise<FanoutMeasurement<M>> {
  const { writer, pool, probe, timing, writes, progress, deliveries } = run;
  const name = run.label;
  const before = await probe.sampleMemory();
  const baseStreams = (await probe.serverStreams()) ?? 0;
  let result: Omit<FanoutMeasurement<M>, 'closeMs'>;
  try {
    pool.open();
    const connectMs = await until(
      `${run.watchers.toLocaleString('en-US')} watch streams open on the server`,
      timing.connectTimeoutMs,
      async () => {
        // Every stream ended before the server held them all: waiting longer cannot help.
        if (pool.openStreams() === 0) throw new Error(`every watch stream was ended while connecting: ${JSON.stringify(pool.totals().ended)}`);
        return (await probe.serverStreams()) === baseStreams + run.watchers;
      },
      async () => `server streams ${String(await probe.serverStreams())} (baseline ${baseStreams}), client streams open ${pool.openStreams()}, confirmed ${pool.confirmed()}, ended ${JSON.stringify(pool.totals().ended)}`,
      250,
      progress,
    );
    const connected = await probe.sampleMemory();
    progress({ phase: name, connectMs: Math.round(connectMs) }, 'watchers connected');

    const startAtMs = monoMs() + 200;
    const windowStart = startAtMs + timing.warmupMs;
    const windowEnd = windowStart + timing.measureMs;
    const ran: Promise<RunReply> = writer.run({ startAtMs, durationMs: timing.warmupMs + timing.measureMs, ratePerSec: writes.ratePerSec, maxInFlight: writes.maxInFlight, keys: writes.keys, dataBytes: writes.dataBytes });
    // Awaited below; if this phase fails first, its rejection must not be the one reported.
    ran.catch(() => undefined);
    await pause(windowStart - monoMs());
    // The window's edges are taken from local reads only (/proc, this process): a scrape of a
    // saturated node can take seconds. The node's event counter is scraped beside them and its
    // rate is taken between the two answers' arrival times.
    const scrapeSent = async (): Promise<{ value: number; atMs: number }> => ({ value: (await probe.eventsSent()) ?? Number.NaN, atMs: monoMs() });
    const t0 = monoMs();
    const servingWait = (): Promise<SchedStat | undefined> => (probe.waitOf === 'all-threads' ? readSchedStatAllThreads(probe.servingPid) : readSchedStat(probe.servingPid));
    const [cpu0, wait0, selfWait0] = await Promise.all([cpuTicks(probe.serverPids), servingWait(), readSchedStat('self')]);
    const servingCpu0 = await readProcCpu(probe.servingPid);
    const lg0 = process.cpuUsage();
    const elu0: EventLoopUtilization = performance.eventLoopUtilization();
    const received0 = pool.totals().changes;
    const sent0 = scrapeSent();
    progress({ phase: name, windowS: timing.measureMs / 1000 }, 'measured window start');
    const ticker = setInterval(() => progress({ phase: name, deliveries: deliveries.size, openStreams: pool.openStreams(), slowestStreamRevision: pool.minLastRevision() }, 'measuring'), 5_000);
    await pause(windowEnd - monoMs());
    clearInterval(ticker);
    const t1 = monoMs();
    const [cpu1, wait1, selfWait1] = await Promise.all([cpuTicks(probe.serverPids), servingWait(), readSchedStat('self')]);
    const servingCpu1 = await readProcCpu(probe.servingPid);
    const lgCpu = process.cpuUsage(lg0);
    const elu = performance.eventLoopUtilization(elu0);
    const received1 = pool.totals().changes;
    const [s0, s1] = await Promise.all([sent0, scrapeSent()]);
    const lgMem = process.memoryUsage();
    const underLoad = await probe.sampleMemory();
    const wallMs = t1 - t0;

    const reply = await ran;
    const lastAckMs = monoMs();
    const records = writeRecords(reply);
    const lastRevision = Math.max(0, ...records.map((r) => r.revision));
    // A write that changes nothing sends no event; the writer makes every write differ, and
    // this checks it did.
    const firstRevision = Math.min(...records.map((r) => r.revision));
    if (new Set(records.map((r) => r.revision)).size !== records.length || firstRevision <= run.seedRevision) {
      throw new Error(`the run's ${records.length} writes did not each make a new revision (lowest ${firstRevision}, before the run ${run.seedRevision}): the deliveries would not match the writes`);
    }
    let drained = true;
    let drainMs = 0;
    try {
      drainMs = await until(
        'every open stream to receive the last write',
        timing.drainTimeoutMs,
        () => pool.openStreams() === 0 || pool.minLastRevision() >= lastRevision,
        () => `slowest open stream at revision ${pool.minLastRevision()}, last write ${lastRevision}, open streams ${pool.openStreams()}`,
        50,
        progress,
      );
    } catch {
      drained = false;
      drainMs = monoMs() - lastAckMs;
    }
    progress({ phase: name, drainMs: Math.round(drainMs), drained }, 'drained');

    const measured = records.filter((r) => r.sentMs >= windowStart && r.sentMs < windowEnd);
    const acked = records.filter((r) => r.ackedMs >= windowStart && r.ackedMs < windowEnd).length;
    const join = joinLatencies(deliveries, measured);
    const expected = measured.length * run.watchers;
    const deliveredFraction = expected === 0 ? Number.NaN : join.delivered / expected;
    // Deliveries that never came count as slower than every one that did.
    const undelivered = Math.max(0, expected - join.delivered);
    const achievedRatePerSec = (acked * 1000) / timing.measureMs;
    const rateHeld = achievedRatePerSec >= writes.ratePerSec * 0.98 && reply.failed === 0;
    const serverCpuPercent = cpuPercent(((servingCpu1.ticks - servingCpu0.ticks) * 1000) / run.clkTck, wallMs);
    const serverCpuWaitPercent = waitPercent(wait0, wait1, wallMs);
    const totals = pool.totals();
    const streamsWithGap = pool.gaps(records.map((r) => r.revision).sort((a, b) => a - b));
    const latencyFromSendMs = percentiles(join.fromSendMs, undelivered);
    const keepsUp = rateHeld && drained && measured.length > 0 && undelivered === 0 && latencyFromSendMs.p99 <= KEEP_UP_P99_MS && Object.keys(totals.ended).length === 0 && streamsWithGap === 0;
    result = {
      watchers: run.watchers,
      connectMs,
      memory: { before, connected, underLoad },
      window: { ms: wallMs, writesSent: measured.length, writesAcked: acked },
      targetRatePerSec: writes.ratePerSec,
      achievedRatePerSec,
      rateHeld,
      writer: {
        scheduled: reply.scheduled,
        sent: reply.sent,
        failed: reply.failed,
        firstError: reply.firstError,
        maxInFlight: reply.maxInFlightSeen,
        cpuPercent: cpuPercent(reply.cpuMs, reply.wallMs),
        ackLatencyMs: percentiles(Float64Array.from(records.map((r) => r.ackedMs - r.sentMs)).sort()),
      },
      measuredWrites: measured.length,
      deliveredFraction,
      latencyFromAckMs: percentiles(join.fromAckMs, undelivered),
      latencyFromSendMs,
      undeliveredOlderThanMs: monoMs() - windowEnd,
      drainMs,
      drained,
      serverCpuPercent,
      serverCpuWaitPercent,
      serversCpuPercent: cpu1.map((c, i) => cpuPercent(((c - (cpu0[i] ?? Number.NaN)) * 1000) / run.clkTck, wallMs)),
      serverEventsPerSec: ((s1.value - s0.value) * 1000) / (s1.atMs - s0.atMs),
      receivedEventsPerSec: ((received1 - received0) * 1000) / wallMs,
      loadGenerator: { cpuPercent: cpuPercent((lgCpu.user + lgCpu.system) / 1000, wallMs), cpuWaitPercent: waitPercent(selfWait0, selfWait1, wallMs), eventLoopUtilization: elu.utilization, rssBytes: lgMem.rss, heapUsedBytes: lgMem.heapUsed },
      watcherTotals: totals,
      streamsWithGap,
      meanEventBytes: totals.changes > 0 ? totals.changeBytes / totals.changes : Number.NaN,
      deliveredBytesPerChange: measured.length > 0 ? join.deliveredBytes / measured.length : Number.NaN,
      keepsUp,
      verdict: verdictOf({ keepsUp, serverCpuPercent, serverCpuWaitPercent, elu: elu.utilization, ...(probe.servingCores !== undefined ? { serverCores: probe.servingCores } : {}) }),
    };
    progress(
      {
        phase: name,
        achievedRatePerSec: +achievedRatePerSec.toFixed(1),
        deliveredPct: +(deliveredFraction * 100).toFixed(2),
        fromSendP50Ms: +result.latencyFromSendMs.p50.toFixed(2),
        fromSendP99Ms: +result.latencyFromSendMs.p99.toFixed(2),
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
  // Every stream closed: what the server still holds (garbage not yet collected, or retained).
  // Best effort: a server that stays swamped costs the figure, not the run.
  let closeMs: number;
  try {
    closeMs = await until(
      'the server to close the watch streams',
      timing.closeTimeoutMs,
      async () => ((await probe.serverStreams()) ?? Number.POSITIVE_INFINITY) <= baseStreams,
      async () => `server streams ${String(await probe.serverStreams())} (baseline ${baseStreams})`,
      250,
      progress,
    );
  } catch (e) {
    progress({ phase: name, err: e instanceof Error ? e.message : String(e) }, 'the server did not close the streams in time; no memory figure after close');
    return { ...result, closeMs: Number.NaN };
  }
  const afterClose = await probe.sampleMemory();
  return { ...result, memory: { ...result.memory, afterClose }, closeMs };
}
