/**
 * The watch fan-out rows of `make bench`'s table (bench/compare.ts's columns) and the fan-out
 * table printed under it, from each system's WatchFanoutOutcome. Pure, so a test can check
 * what "met" means and what a row says when a count was not run.
 */
import { formatColumns, num } from '../report.js';
import { FANOUT_COUNTS, FANOUT_RATE_PER_SEC, type WatchFanoutOutcome, type WatchFanoutResult } from '../watch-hook.js';

/** Issue 9's target for the 10,000-watcher row. */
export const FANOUT_TARGET = { watchers: 10_000, p99Ms: 250, text: 'rate holds, p99 <= 250 ms' } as const;

/** met / NOT met / undefined (not measured): every watcher got every event at 200 writes/s and p99 send-to-receive was within 250 ms. */
export function fanoutTargetMet(r: WatchFanoutResult | undefined): boolean | undefined {
  if (r === undefined) return undefined;
  return r.rateHeld && r.deliveryP99Ms <= FANOUT_TARGET.p99Ms;
}

export function latencyText(x: number, olderThanMs: number): string {
  if (x === Number.POSITIVE_INFINITY) return `>${(olderThanMs / 1000).toFixed(0)} s`;
  if (!Number.isFinite(x)) return '-';
  return x < 10 ? x.toFixed(2) : x < 100 ? x.toFixed(1) : x.toFixed(0);
}

function find(o: WatchFanoutOutcome | undefined, n: number): WatchFanoutResult | undefined {
  return o?.results.find((r) => r.watchers === n);
}

function valueCell(o: WatchFanoutOutcome | undefined, n: number): string {
  const r = find(o, n);
  if (!r) return 'not run';
  const rate = `${num(r.writesPerSec)}/${r.targetWritesPerSec} w/s`;
  return r.rateHeld ? `${rate}, held` : `${rate}, NOT held (${(r.deliveredFraction * 100).toFixed(0)}% dlvd)`;
}

function latencyCell(r: WatchFanoutResult | undefined): string {
  return r ? `${latencyText(r.deliveryP50Ms, r.undeliveredOlderThanMs)} / ${latencyText(r.deliveryP99Ms, r.undeliveredOlderThanMs)} / -` : '-';
}

/** The CPU column for a fan-out row: load generator (watchers' process + writer) / the three servers, and the serving node's RSS. */
function cpuCell(r: WatchFanoutResult | undefined): string {
  if (!r) return '-';
  const gen = r.loadgenCpuPct.watchers + r.loadgenCpuPct.writer;
  const srv = r.serverCpuPct.reduce((a, b) => a + b, 0);
  const rss = r.serverRssMiB[r.servingIndex] ?? Number.NaN;
  return `${gen.toFixed(0)}%/${srv.toFixed(0)}%, RSS ${Number.isFinite(rss) ? rss.toFixed(0) : '-'} MiB`;
}

function ratio(a: number | undefined, b: number | undefined): string {
  if (a === undefined || b === undefined || !Number.isFinite(a) || !Number.isFinite(b) || b <= 0) return '-';
  return `${(a / b).toFixed(2)}x`;
}

/**
 * One row per watcher count (the issue's three, and any other a run measured), in
 * bench/compare.ts's columns (measure, Cairn, etcd, ratio, latencies, p99 ratio, CPU, CPU,
 * target, met).
 */
export function fanoutRows(cairn: WatchFanoutOutcome | undefined, etcd: WatchFanoutOutcome | undefined): string[][] {
  const counts = [...new Set([...FANOUT_COUNTS, ...(cairn?.counts ?? []), ...(etcd?.counts ?? [])])].sort((a, b) => a - b);
  return counts.map((n) => {
    const c = find(cairn, n);
    const e = find(etcd, n);
    const isTarget = n === FANOUT_TARGET.watchers;
    const met = fanoutTargetMet(c);
    return [
      `watch fan-out, ${num(n)} watchers @ ${FANOUT_RATE_PER_SEC} w/s`,
      valueCell(cairn, n),
      valueCell(etcd, n),
      ratio(c?.writesPerSec, e?.writesPerSec),
      latencyCell(c),
      latencyCell(e),
      ratio(c?.deliveryP99Ms, e?.deliveryP99Ms),
      cpuCell(c),
      cpuCell(e),
      isTarget ? FANOUT_TARGET.text : '',
      isTarget ? (met === undefined ? 'not run' : met ? 'met' : 'NOT met') : '',
    ];
  });
}

const pct = (x: number): string => (Number.isFinite(x) ? `${x.toFixed(0)}%` : '-');

/** The fan-out table under the main one: per system and count, everything the rows summarize. */
export function fanoutTable(outcomes: readonly { readonly name: string; readonly outcome: WatchFanoutOutcome | undefined }[]): string {
  const headers = ['system', 'watchers', 'writes/s', 'every event', 'delivered', 'send-to-recv p50 / p99 ms', 'write ack p50 ms', 'events/s: node sent / received / needed', 'serving node CPU + wait', 'servers CPU', 'RSS per node MiB: connected -> under load', 'gen CPU: watchers (ELU) + writer', 'verdict'];
  const rows: string[][] = [];
  for (const { name, outcome } of outcomes) {
    if (!outcome) continue;
    for (const r of outcome.results) {
      const d = r.detail;
      const rss = (xs: readonly number[]): string => xs.map((x) => (Number.isFinite(x) ? x.toFixed(0) : '-')).join('/');
      rows.push([
        name,
        `${num(r.watchers)} on ${r.servingNode}`,
        `${num(r.writesPerSec, 1)} of ${r.targetWritesPerSec}${r.writeRateHeld ? '' : ' (missed)'}${d.writer.failed > 0 ? `, ${num(d.writer.failed)} failed` : ''}`,
        r.rateHeld ? 'held' : 'NOT held',
        `${(r.deliveredFraction * 100).toFixed(2)}%`,
        `${latencyText(r.deliveryP50Ms, r.undeliveredOlderThanMs)} / ${latencyText(r.deliveryP99Ms, r.undeliveredOlderThanMs)}`,
        latencyText(d.writer.ackLatencyMs.p50, Number.NaN),
        `${Number.isFinite(d.serverEventsPerSec) ? num(d.serverEventsPerSec) : '-'} / ${num(d.receivedEventsPerSec)} / ${num(r.watchers * r.targetWritesPerSec)}`,
        `${pct(d.serverCpuPercent)} + ${pct(d.serverCpuWaitPercent)}`,
        r.serverCpuPct.map(pct).join(' '),
        `${rss(d.memory.connected.rssMiB)} -> ${rss(d.memory.underLoad.rssMiB)}`,
        `${pct(r.loadgenCpuPct.watchers)} (${r.loadgenCpuPct.watchersElu.toFixed(2)}) + ${pct(r.loadgenCpuPct.writer)}`,
        r.verdict,
      ]);
    }
  }
  return formatColumns(headers, rows, [false, true, true, false, true, true, true, true, true, true, true, true, false]);
}
