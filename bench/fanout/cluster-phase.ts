/**
 * `make bench`'s watch fan-out phase (issue 9: 100, 1,000 and 10,000 watchers at 200 writes/s),
 * the same for etcd and Cairn, on the benchmark's 3-node cluster:
 *
 * - the writer (writer-main.ts, a process of its own) writes 200 times a second, open loop, to
 *   the leader: the data set's 1,000 keys in turn, a new 256-byte value each time (etcd: Put;
 *   Cairn: Write of the demo.v1.Album's title);
 * - N watchers, all on one follower (the one after the leader in node order), each its own gRPC
 *   stream watching the whole data set, live changes only, 500 streams per HTTP/2 connection:
 *   etcd's Watch (one watcher per stream; prefix `/bench/key-`), Cairn's WatchList (one watch per
 *   stream; demo.v1.Album in namespace `bench`, `at_tail`). All held by this process.
 *
 * One follower serves them all so the fan-out's CPU and memory are one process's, apart from
 * the leader's write path; a write's delivery then includes the follower learning the commit.
 * The measurement is bench/fanout/measure.ts, the one `make bench-watch` uses.
 */
import os from 'node:os';
import { clockTicksPerSecond } from './proc.js';
import { measureFanout, type FanoutMeasurement, type FanoutTiming } from './measure.js';
import { DeliveryLog } from './stats.js';
import { GrpcWatcherPool } from './watchers.js';
import { WriterProcess } from './writer.js';
import { KEY_COUNT, VALUE_BYTES } from '../kv-data.js';
import { rssMiB } from '../procs.js';
import { num } from '../report.js';
import { FANOUT_COUNTS, FANOUT_RATE_PER_SEC, type NodesRss, type WatchFanoutContext, type WatchFanoutOutcome, type WatchFanoutResult } from '../watch-hook.js';
const WATCHERS_PER_CONNECTION = 500;

export function fanoutTiming(quick: boolean): FanoutTiming {
  return {
    warmupMs: quick ? 500 : 2_000,
    measureMs: quick ? 2_500 : 10_000,
    drainTimeoutMs: quick ? 2_000 : 5_000,
    connectTimeoutMs: 120_000,
    closeTimeoutMs: quick ? 10_000 : 30_000,
  };
}

function nodesRss(ctx: WatchFanoutContext): NodesRss {
  const sys = ctx.system;
  return { rssMiB: sys.nodeNames.map((_, i) => rssMiB(sys.pid(i)) ?? Number.NaN) };
}

function summarize(m: FanoutMeasurement<NodesRss>, servingNode: string, servingIndex: number, leader: string): WatchFanoutResult {
  return {
    watchers: m.watchers,
    servingNode,
    servingIndex,
    leader,
    targetWritesPerSec: m.targetRatePerSec,
    writesPerSec: m.achievedRatePerSec,
    writeRateHeld: m.rateHeld,
    rateHeld: m.keepsUp,
    deliveredFraction: m.deliveredFraction,
    deliveryP50Ms: m.latencyFromSendMs.p50,
    deliveryP99Ms: m.latencyFromSendMs.p99,
    undeliveredOlderThanMs: m.undeliveredOlderThanMs,
    serverRssMiB: m.memory.underLoad.rssMiB,
    serverCpuPct: m.serversCpuPercent,
    loadgenCpuPct: { watchers: m.loadGenerator.cpuPercent, writer: m.writer.cpuPercent, watchersElu: m.loadGenerator.eventLoopUtilization },
    verdict: m.verdict,
    detail: m,
  };
}

export async function watchFanout(ctx: WatchFanoutContext): Promise<WatchFanoutOutcome> {
  const sys = ctx.system;
  const timing = fanoutTiming(ctx.quick);
  // Every count, in quick mode too: shorter windows keep make bench QUICK=1 under 3 minutes.
  const counts = ctx.counts ?? FANOUT_COUNTS;
  const clkTck = clockTicksPerSecond();
  const writer = new WriterProcess();
  const results: WatchFanoutResult[] = [];
  try {
    for (const n of counts) {
      const leader = await sys.waitHealthy();
      const serving = (leader + 1) % sys.nodeNames.length;
      const servingName = sys.nodeNames[serving] ?? '?';
      const leaderName = sys.nodeNames[leader] ?? '?';
      const servingPid = sys.pid(serving);
      if (servingPid === undefined) throw new Error(`${sys.name}: node ${servingName} is not running`);
      // Connects the writer to the leader (a new client if the leader moved); writes nothing.
      await writer.seed({ target: sys.writeTarget(leader), keys: 0, dataBytes: VALUE_BYTES, concurrency: 1 });
      const target = sys.watchTarget(serving);
      const deliveries = new DeliveryLog();
      const label = `${sys.name} fan-out x ${num(n)}`;
      const m = await ctx.progress.phase(
        `${sys.name}: watch fan-out, ${num(n)} watchers on ${servingName} (a follower), ${FANOUT_RATE_PER_SEC} writes/s to ${leaderName} (${timing.measureMs / 1000} s + ${timing.warmupMs / 1000} s warm-up)`,
        () =>
          measureFanout<NodesRss>({
            label,
            watchers: n,
            pool: new GrpcWatcherPool(target.address, n, deliveries, target.protocol, WATCHERS_PER_CONNECTION),
            deliveries,
            writer,
            writes: { ratePerSec: FANOUT_RATE_PER_SEC, maxInFlight: 4_000, keys: KEY_COUNT, dataBytes: VALUE_BYTES },
            timing,
            probe: {
              servingPid,
              // etcd is Go: its work runs on many threads, so their waits are summed; Cairn's
              // fan-out runs on the JavaScript thread.
              waitOf: sys.name === 'etcd' ? 'all-threads' : 'main-thread',
              servingCores: sys.name === 'etcd' ? os.cpus().length : 1,
              serverPids: sys.nodeNames.map((_, i) => sys.pid(i) ?? -1),
              sampleMemory: async () => nodesRss(ctx),
              serverStreams: async () => (await sys.watchMetrics(serving))?.streams,
              eventsSent: async () => (await sys.watchMetrics(serving))?.eventsSent,
            },
            seedRevision: 0,
            clkTck,
            progress: (fields, msg) => {
              // The measurement's own events, compact: waits and the periodic "measuring" line.
              if (msg === 'phase done' || msg === 'measured window start') return;
              const { phase: _phase, ...rest } = fields;
              ctx.progress.line(`  ${msg}: ${JSON.stringify(rest)}`);
            },
          }),
      );
      const r = summarize(m, servingName, serving, leaderName);
      ctx.progress.line(describeResult(r));
      results.push(r);
    }
  } finally {
    await writer.close();
  }
  return {
    counts,
    settings: { ratePerSec: FANOUT_RATE_PER_SEC, watchersPerConnection: WATCHERS_PER_CONNECTION, ...timing, placement: 'every watcher on one follower, writes to the leader' },
    results,
  };
}

const fmtMs = (x: number, older: number): string => (x === Number.POSITIVE_INFINITY ? `> ${(older / 1000).toFixed(1)} s (not delivered)` : Number.isFinite(x) ? `${x < 10 ? x.toFixed(2) : x < 100 ? x.toFixed(1) : x.toFixed(0)} ms` : '-');

export function describeResult(r: WatchFanoutResult): string {
  const d = r.detail;
  const ended = Object.entries(d.watcherTotals.ended)
    .map(([k, v]) => `${k} ${v}`)
    .join(', ');
  return (
    `  ${num(r.writesPerSec, 1)}/${r.targetWritesPerSec} writes/s${r.writeRateHeld ? '' : ' (rate missed)'}${d.writer.failed > 0 ? `, ${num(d.writer.failed)} failed` : ''}; ` +
    `${(r.deliveredFraction * 100).toFixed(2)}% delivered; send-to-recv p50 ${fmtMs(r.deliveryP50Ms, r.undeliveredOlderThanMs)}, p99 ${fmtMs(r.deliveryP99Ms, r.undeliveredOlderThanMs)}; ` +
    `${r.rateHeld ? 'every watcher got every event' : 'NOT every event to every watcher at this rate'}; ` +
    `streams with a gap ${num(d.streamsWithGap ?? 0)}, order violations ${num(d.watcherTotals.orderViolations)}; ` +
    `CPU: servers ${r.serverCpuPct.map((c) => c.toFixed(0)).join('+')}%, watchers' process ${r.loadgenCpuPct.watchers.toFixed(0)}% (ELU ${r.loadgenCpuPct.watchersElu.toFixed(2)}), writer ${r.loadgenCpuPct.writer.toFixed(0)}%; ` +
    `RSS ${r.serverRssMiB.map((x) => x.toFixed(0)).join('/')} MiB; connect ${(d.connectMs / 1000).toFixed(1)} s${ended !== '' ? `; streams ended by the server: ${ended}` : ''}; ${r.verdict}`
  );
}
