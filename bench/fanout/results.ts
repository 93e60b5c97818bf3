/**
 * The fan-out benchmark's results: their shape (what bench/results/watch-fanout-*.json holds),
 * the tables printed at the end and the SVG chart, both also rebuilt from a saved file
 * (`node dist/bench/watch-fanout.js --render FILE.json`).
 */
import { lineChartSvg, type ChartPoint, type ChartSeries } from './line-chart.js';
import { formatAligned, mib, num, type Machine } from '../report.js';
import type { FanoutMeasurement } from './measure.js';
import type { ByteComparison } from './stats.js';
import type { Transport } from './watchers.js';

export interface ServerMemory {
  readonly rssBytes: number;
  readonly heapUsedBytes: number;
  /** V8's old space: what survived two scavenges, less jumpy than the whole heap. */
  readonly oldSpaceUsedBytes: number;
  readonly streams: number;
  /** Largest minus smallest heap-used sample: how much the heap moved while it was measured. */
  readonly heapSpreadBytes: number;
}

export interface PhaseSpec {
  readonly transport: Transport;
  readonly watchers: number;
}

/** The measurement's own figures a phase keeps (their meaning: measure.ts, FanoutMeasurement). */
export const MEASURED_FIELDS = [
  'connectMs',
  'memory',
  'window',
  'targetRatePerSec',
  'achievedRatePerSec',
  'rateHeld',
  'writer',
  'measuredWrites',
  'deliveredFraction',
  'latencyFromAckMs',
  'latencyFromSendMs',
  'undeliveredOlderThanMs',
  'drainMs',
  'drained',
  'serverCpuPercent',
  'serverCpuWaitPercent',
  'serverEventsPerSec',
  'receivedEventsPerSec',
  'loadGenerator',
  'watcherTotals',
  'verdict',
] as const satisfies readonly (keyof FanoutMeasurement<ServerMemory>)[];

/**
 * One phase of `make bench-watch`: the measurement's figures for the node's memory samples
 * (percentiles that fall on undelivered events are +Infinity, null in the JSON), plus what
 * follows from them per watcher and in bytes.
 */
export interface PhaseResult extends PhaseSpec, Pick<FanoutMeasurement<ServerMemory>, (typeof MEASURED_FIELDS)[number]> {
  readonly rssPerWatcherBytes: number;
  readonly heapPerWatcherBytes: number;
  /**
   * The heap's own movement while it was sampled (both spreads over N): a lower bound on the
   * heap figure's error (a scavenge between the two measurements moves it by megabytes).
   */
  readonly heapPerWatcherNoiseBytes: number;
  readonly bytes: ByteComparison & { readonly listResponseBytes: number; readonly meanEventBytes: number; readonly deliveredBytesPerChange: number };
}

export interface Results {
  readonly benchmark: 'watch-fanout';
  readonly mode: 'full' | 'quick';
  readonly startedAt: string;
  readonly machine: Machine;
  readonly settings: Readonly<Record<string, number | readonly number[]>>;
  readonly loadAverage: { readonly start: number; readonly end: number };
  readonly phases: readonly PhaseResult[];
  readonly table: string;
}

// ---- Report -------------------------------------------------------------------------------------

const ms = (x: number): string => (Number.isFinite(x) ? `${x.toFixed(Math.abs(x) < 10 ? 2 : Math.abs(x) < 100 ? 1 : 0)} ms` : '-');
/** A latency percentile; one that falls on undelivered events shows as "> age of the undelivered". */
const lat = (x: number, p: PhaseResult): string => (x === Number.POSITIVE_INFINITY ? `> ${(p.undeliveredOlderThanMs / 1000).toFixed(1)} s` : ms(x));
const pct = (x: number, d = 0): string => (Number.isFinite(x) ? `${x.toFixed(d)}%` : '-');
const kib = (b: number): string => (Number.isFinite(b) ? `${(b / 1024).toFixed(b < 10_240 ? 2 : 1)} KiB` : '-');

export function tables(phases: readonly PhaseResult[]): string {
  const label = (p: PhaseResult): string => `${p.transport} x ${num(p.watchers)}`;
  const latency = formatAligned(
    ['watchers', 'writes/s', 'delivered', 'ack-to-recv p50', 'p99', 'send-to-recv p50', 'p99', 'write ack p50', 'drain', 'verdict'],
    phases.map((p) => [
      label(p),
      `${num(p.achievedRatePerSec, 1)}${p.rateHeld ? '' : ' (missed)'}${p.writer.failed > 0 ? `, ${num(p.writer.failed)} failed` : ''}`,
      // No write sent in the window was answered: nothing to join deliveries to.
      p.measuredWrites === 0 ? 'no write answered' : pct(p.deliveredFraction * 100, 2),
      lat(p.latencyFromAckMs.p50, p),
      lat(p.latencyFromAckMs.p99, p),
      lat(p.latencyFromSendMs.p50, p),
      lat(p.latencyFromSendMs.p99, p),
      ms(p.writer.ackLatencyMs.p50),
      `${p.drained ? '' : '> '}${ms(p.drainMs)}`,
      p.verdict,
    ]),
    [0, 9],
  );
  const resources = formatAligned(
    ['watchers', 'node CPU', 'node CPU wait', 'node events/s', 'received/s', 'watchers CPU', 'watchers CPU wait', 'watchers ELU', 'writer CPU', 'RSS/watcher', 'heap/watcher', 'RSS connected', 'RSS, heap under load', 'ended early'],
    phases.map((p) => [
      label(p),
      pct(p.serverCpuPercent),
      pct(p.serverCpuWaitPercent),
      num(p.serverEventsPerSec),
      num(p.receivedEventsPerSec),
      pct(p.loadGenerator.cpuPercent),
      pct(p.loadGenerator.cpuWaitPercent),
      p.loadGenerator.eventLoopUtilization.toFixed(2),
      pct(p.writer.cpuPercent),
      kib(p.rssPerWatcherBytes),
      kib(p.heapPerWatcherBytes),
      mib(p.memory.connected.rssBytes),
      `${mib(p.memory.underLoad.rssBytes)}, ${mib(p.memory.underLoad.heapUsedBytes)}`,
      Object.entries(p.watcherTotals.ended)
        .map(([k, v]) => `${k} ${v}`)
        .join(', ') || '0',
    ]),
  );
  const bytes = formatAligned(
    ['watchers', 'bytes/event', 'watch bytes/change', 'List response', 'poll bytes/change', 'poll / watch'],
    phases.map((p) => [label(p), num(p.bytes.meanEventBytes), num(p.bytes.watchBytesPerChange), num(p.bytes.listResponseBytes), num(p.bytes.pollBytesPerChange), `${num(p.bytes.pollOverWatch, 1)}x`]),
  );
  return `${latency}\n\n${resources}\n\n${bytes}`;
}

export function chart(phases: readonly PhaseResult[], subtitle: string): string {
  const series: ChartSeries[] = [];
  const grpc = phases.filter((p) => p.transport === 'grpc').sort((a, b) => a.watchers - b.watchers);
  const http = phases.filter((p) => p.transport === 'http').sort((a, b) => a.watchers - b.watchers);
  // A percentile that falls on undelivered events is drawn at its lower bound, hollow.
  const pts = (ps: readonly PhaseResult[], f: (p: PhaseResult) => number): ChartPoint[] =>
    ps.map((p) => {
      const y = f(p);
      return y === Number.POSITIVE_INFINITY ? { x: p.watchers, y: p.undeliveredOlderThanMs, lowerBound: true } : { x: p.watchers, y };
    });
  series.push({ name: 'gRPC p99 (from send)', points: pts(grpc, (p) => p.latencyFromSendMs.p99), color: '#d62728' });
  series.push({ name: 'gRPC p50 (from send)', points: pts(grpc, (p) => p.latencyFromSendMs.p50), color: '#d62728', dashed: true });
  series.push({ name: 'gRPC p99 (from ack)', points: pts(grpc, (p) => p.latencyFromAckMs.p99), color: '#1f77b4' });
  series.push({ name: 'gRPC p50 (from ack)', points: pts(grpc, (p) => p.latencyFromAckMs.p50), color: '#1f77b4', dashed: true });
  if (http.length > 0) {
    series.push({ name: 'HTTP p99 (from send)', points: pts(http, (p) => p.latencyFromSendMs.p99), color: '#2ca02c' });
    series.push({ name: 'HTTP p50 (from send)', points: pts(http, (p) => p.latencyFromSendMs.p50), color: '#2ca02c', dashed: true });
  }
  const notes = phases.filter((p) => p.measuredWrites === 0).flatMap((p) => [`${p.transport} x ${num(p.watchers)}: no point,`, 'no write of its window answered']);
  return lineChartSvg({ title: 'Cairn watch delivery latency vs watchers (200 writes/s, one node)', subtitle, xLabel: 'watchers', yLabel: 'latency (ms)', xLog: true, yLog: true, series, notes });
}


/**
 * A results file read back. JSON has no NaN or Infinity (both are saved as null): in a
 * percentiles object a null is +Infinity when some deliveries were missing (it fell on them)
 * and NaN when there was nothing to rank; any other null is NaN.
 */
export function parseResults(text: string): Results {
  const P_KEYS = ['p50', 'p90', 'p99', 'max'];
  return JSON.parse(text, (_k: string, v: unknown) => {
    if (v === null) return Number.NaN;
    if (typeof v === 'object' && !Array.isArray(v) && 'missing' in v && 'p50' in v) {
      const o = v as Record<string, unknown>;
      const missing = typeof o['missing'] === 'number' ? o['missing'] : 0;
      for (const k of P_KEYS) if (Number.isNaN(o[k]) && missing > 0) o[k] = Number.POSITIVE_INFINITY;
    }
    return v;
  }) as Results;
}
