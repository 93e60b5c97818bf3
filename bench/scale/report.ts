/**
 * `make bench-scale`'s pure half (bench/scale.ts runs the clusters): its flags, the shape of its
 * results, one table per measure with Cairn, etcd and their ratio per scale, the issue's targets
 * judged from the numbers, and the SVG with one small chart per curve. No processes, no clocks:
 * bench/scale/scale.test.ts checks all of it from fixed numbers.
 */
import { CairnError, ErrorCode } from '../../src/base/index.js';
import { flagValue } from '../args.js';
import { lineChartSvg, type ChartSeries } from '../fanout/line-chart.js';
import { formatColumns, num } from '../report.js';

export type ScaleSystem = 'Cairn' | 'etcd';

export const DEFAULT_SCALES: readonly number[] = [10_000, 100_000, 1_000_000];
export const QUICK_SCALES: readonly number[] = [10_000, 100_000];
/** Largest scale accepted: etcd's keys are /bench/key-NNNNNN, six digits (bench/kv-data.ts). */
export const MAX_SCALE = 1_000_000;

export interface ScaleArgs {
  readonly scales: readonly number[];
  readonly systems: readonly ScaleSystem[];
  /** Where the data dirs go; undefined: a new temporary directory. */
  readonly dir: string | undefined;
  /** Keep the data dirs and logs (else removed at the end). */
  readonly keep: boolean;
  readonly quick: boolean;
  /** Requests in flight while loading (Cairn: writes; etcd: Txns of `etcdBatch` puts). */
  readonly inFlight: number;
  /**
   * Puts per etcd Txn while loading (etcd's --max-txn-ops default is 128). Default 1: one
   * resource, one Raft entry, as in Cairn; batches make etcd's in-memory Raft log hold fewer,
   * bigger entries and skip its snapshots (one every 100,000 entries), which changes what
   * memory per key and the catch-up measure.
   */
  readonly etcdBatch: number;
}

const KNOWN_FLAGS = new Set(['--scales', '--systems', '--dir', '--keep', '--quick', '--in-flight', '--etcd-batch']);
const VALUED_FLAGS = new Set(['--scales', '--systems', '--dir', '--in-flight', '--etcd-batch']);

const bad = (message: string): CairnError => new CairnError(ErrorCode.INVALID_ARGUMENT, `bench-scale: ${message}`);

function wholeNumber(flag: string, text: string, min: number, max: number): number {
  const t = text.trim().replace(/_/g, '');
  const n = /^\d+$/.test(t) ? Number(t) : /^\d+(\.\d+)?[kKmM]$/.test(t) ? Number(t.slice(0, -1)) * (/[kK]$/.test(t) ? 1e3 : 1e6) : Number.NaN;
  if (!Number.isInteger(n) || n < min || n > max) throw bad(`${flag} takes whole numbers from ${num(min)} to ${num(max)}, got ${JSON.stringify(text)}`);
  return n;
}

/** Parses the command line; anything unknown or out of range is an INVALID_ARGUMENT naming the flag. */
export function parseScaleArgs(argv: readonly string[]): ScaleArgs {
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i] as string;
    if (!KNOWN_FLAGS.has(a)) throw bad(`unknown argument ${JSON.stringify(a)}; flags: ${[...KNOWN_FLAGS].join(' ')}`);
    if (VALUED_FLAGS.has(a)) i++;
  }
  const value = (name: string): string | undefined => {
    try {
      return flagValue(argv, name);
    } catch (e) {
      throw bad(e instanceof Error ? e.message : String(e));
    }
  };
  const quick = argv.includes('--quick');
  const scalesText = value('--scales');
  const scales = scalesText === undefined ? (quick ? QUICK_SCALES : DEFAULT_SCALES) : scalesText.split(',').map((s) => wholeNumber('--scales', s, 1, MAX_SCALE));
  if (new Set(scales).size !== scales.length) throw bad(`--scales lists a scale twice: ${JSON.stringify(scalesText)}`);
  const systems = (value('--systems') ?? 'cairn,etcd').split(',').map((s): ScaleSystem => {
    const v = s.trim().toLowerCase();
    if (v === 'cairn') return 'Cairn';
    if (v === 'etcd') return 'etcd';
    throw bad(`--systems: unknown system ${JSON.stringify(s)} (cairn, etcd)`);
  });
  if (new Set(systems).size !== systems.length) throw bad('--systems lists a system twice');
  const inFlightText = value('--in-flight');
  const batchText = value('--etcd-batch');
  return {
    scales: [...scales].sort((a, b) => a - b),
    systems,
    dir: value('--dir'),
    keep: argv.includes('--keep'),
    quick,
    inFlight: inFlightText === undefined ? 256 : wholeNumber('--in-flight', inFlightText, 1, 4096),
    etcdBatch: batchText === undefined ? 1 : wholeNumber('--etcd-batch', batchText, 1, 128),
  };
}

// ---- Results ---------------------------------------------------------------------------------

/** Each node's numbers, in node order (NaN where a node did not answer). */
export interface NodeMemory {
  readonly rssBytes: readonly number[];
  /** Cairn: V8's used heap (cairn_process_nodejs_heap_size_used_bytes); etcd: none. */
  readonly heapBytes: readonly number[];
}

/** How a new member got the data: a snapshot from the leader, or the log from its start. */
export type CatchUpPath = 'snapshot' | 'log' | 'unknown';

/** One system at one scale: a fresh 3-node cluster, loaded with `resources` values, then measured. */
export interface ScaleRun {
  readonly system: ScaleSystem;
  readonly version: string;
  readonly resources: number;
  readonly load: { readonly ms: number; readonly perSecond: number; readonly requests: number };
  /** After the cluster was healthy, before the load; and after every node had applied it. */
  readonly memoryBefore: NodeMemory;
  readonly memoryAfter: NodeMemory;
  /** etcd: its db size (etcd_mvcc_db_total_size_in_bytes) on the leader; Cairn: cairn_store_data_bytes. */
  readonly dataBytes: number;
  readonly snapshot: { readonly ms: number; readonly bytes: number; readonly how: string };
  /** One follower: SIGTERM, then started again; `ms` from the start until ready. */
  readonly restart: { readonly node: string; readonly stopMs: number; readonly ms: number; readonly how: string };
  /** A fresh 4th member: `ms` from its start until it had applied the leader's index. */
  readonly catchUp: { readonly ms: number; readonly targetIndex: number; readonly path: CatchUpPath; readonly note: string };
  /** Load averages (1, 5, 15 min) at the start and the end of this run: how busy the machine was. */
  readonly loadAvgBefore: readonly number[];
  readonly loadAvgAfter: readonly number[];
  /** A measure that failed: its name and the error (the run goes on with the others). */
  readonly errors: readonly string[];
}

export interface ScaleResults {
  readonly kind: 'bench-scale';
  readonly startedAt: string;
  readonly args: ScaleArgs;
  readonly machine: unknown;
  readonly runs: readonly ScaleRun[];
}

const mean = (xs: readonly number[]): number => {
  const ok = xs.filter(Number.isFinite);
  return ok.length === 0 ? Number.NaN : ok.reduce((a, b) => a + b, 0) / ok.length;
};

/** Bytes per resource, RSS: each node's growth (after load minus before), averaged over the nodes, over N. */
export function rssPerResource(r: ScaleRun): number {
  return mean(r.memoryAfter.rssBytes.map((a, i) => a - (r.memoryBefore.rssBytes[i] ?? Number.NaN))) / r.resources;
}

/** The same for the V8 heap (Cairn only; NaN for etcd). */
export function heapPerResource(r: ScaleRun): number {
  return mean(r.memoryAfter.heapBytes.map((a, i) => a - (r.memoryBefore.heapBytes[i] ?? Number.NaN))) / r.resources;
}

/** One measure: how to read it from a run, its unit and how to print it. */
export interface Measure {
  readonly id: string;
  readonly title: string;
  readonly unit: string;
  read(r: ScaleRun): number;
  format(v: number): string;
}

const fixed = (digits: number) => (v: number): string => (Number.isFinite(v) ? num(v, digits) : '-');

export const MEASURES: readonly Measure[] = [
  { id: 'load-rate', title: 'Load rate', unit: 'resources/s', read: (r) => r.load.perSecond, format: fixed(0) },
  { id: 'rss-per-resource', title: 'Memory per resource (RSS growth, mean of 3 nodes)', unit: 'bytes', read: rssPerResource, format: fixed(0) },
  { id: 'heap-per-resource', title: 'V8 heap per resource (Cairn; mean of 3 nodes)', unit: 'bytes', read: heapPerResource, format: fixed(0) },
  { id: 'rss-after', title: 'RSS per node after the load (mean of 3 nodes)', unit: 'MiB', read: (r) => mean(r.memoryAfter.rssBytes) / 2 ** 20, format: fixed(0) },
  { id: 'data-bytes', title: 'Data size (etcd: db file; Cairn: cairn_store_data_bytes)', unit: 'MiB', read: (r) => r.dataBytes / 2 ** 20, format: fixed(1) },
  { id: 'snapshot-time', title: 'Snapshot save time', unit: 's', read: (r) => r.snapshot.ms / 1000, format: fixed(2) },
  { id: 'snapshot-size', title: 'Snapshot size', unit: 'MiB', read: (r) => r.snapshot.bytes / 2 ** 20, format: fixed(1) },
  { id: 'restart', title: 'Follower restart to ready', unit: 's', read: (r) => r.restart.ms / 1000, format: fixed(2) },
  { id: 'catch-up', title: 'New member caught up', unit: 's', read: (r) => r.catchUp.ms / 1000, format: fixed(2) },
];

function runOf(runs: readonly ScaleRun[], system: ScaleSystem, n: number): ScaleRun | undefined {
  return runs.find((r) => r.system === system && r.resources === n);
}

const scalesOf = (runs: readonly ScaleRun[]): number[] => [...new Set(runs.map((r) => r.resources))].sort((a, b) => a - b);

/** "Cairn / etcd", e.g. "2.41x"; "-" when either is missing or etcd's is 0. */
export function ratioText(cairn: number, etcd: number): string {
  return Number.isFinite(cairn) && Number.isFinite(etcd) && etcd !== 0 ? `${(cairn / etcd).toFixed(2)}x` : '-';
}

/** One measure's table: a row per scale with Cairn, etcd and Cairn/etcd. */
export function measureTable(m: Measure, runs: readonly ScaleRun[]): string {
  const rows = scalesOf(runs).map((n) => {
    const c = runOf(runs, 'Cairn', n);
    const e = runOf(runs, 'etcd', n);
    const cv = c === undefined ? Number.NaN : m.read(c);
    const ev = e === undefined ? Number.NaN : m.read(e);
    return [num(n), m.format(cv), m.format(ev), ratioText(cv, ev)];
  });
  return `${m.title} (${m.unit})\n${formatColumns(['resources', 'Cairn', 'etcd', 'Cairn/etcd'], rows, [true, true, true, true])}`;
}

/** The targets at 1,000,000 resources (issue 18). */
export const TARGET_SCALE = 1_000_000;
export const TARGETS = { restartMs: 5_000, rssPerResourceRatio: 2, catchUpMs: 30_000 } as const;

export interface TargetVerdict {
  readonly target: string;
  /** undefined: not measured at 1M (or etcd's side is missing). */
  readonly met: boolean | undefined;
  readonly detail: string;
}

/** Judges the three targets on the 1M runs; a target without its numbers is "not measured". */
export function judgeTargets(runs: readonly ScaleRun[]): TargetVerdict[] {
  const c = runOf(runs, 'Cairn', TARGET_SCALE);
  const e = runOf(runs, 'etcd', TARGET_SCALE);
  const notMeasured = (target: string): TargetVerdict => ({ target, met: undefined, detail: `not measured: no ${num(TARGET_SCALE)}-resource run` });
  const out: TargetVerdict[] = [];
  const restartT = `restart to ready < ${TARGETS.restartMs / 1000} s`;
  out.push(c === undefined || !Number.isFinite(c.restart.ms) ? notMeasured(restartT) : { target: restartT, met: c.restart.ms < TARGETS.restartMs, detail: `${(c.restart.ms / 1000).toFixed(2)} s` });
  const memT = `memory per resource <= ${TARGETS.rssPerResourceRatio}x etcd's per key`;
  if (c === undefined || e === undefined) out.push(notMeasured(memT));
  else {
    const cv = rssPerResource(c);
    const ev = rssPerResource(e);
    out.push(Number.isFinite(cv) && Number.isFinite(ev) && ev > 0 ? { target: memT, met: cv <= TARGETS.rssPerResourceRatio * ev, detail: `${num(cv)} B vs ${num(ev)} B = ${ratioText(cv, ev)}` } : notMeasured(memT));
  }
  const catchT = `new member caught up < ${TARGETS.catchUpMs / 1000} s`;
  out.push(c === undefined || !Number.isFinite(c.catchUp.ms) ? notMeasured(catchT) : { target: catchT, met: c.catchUp.ms < TARGETS.catchUpMs, detail: `${(c.catchUp.ms / 1000).toFixed(2)} s (${c.catchUp.path})` });
  return out;
}

/** Everything printed at the end: a table per measure, the catch-up paths, the targets, errors. */
export function renderReport(results: ScaleResults): string {
  const runs = results.runs;
  const parts = MEASURES.map((m) => measureTable(m, runs));
  const paths = runs.map((r) => [r.system, num(r.resources), r.catchUp.path, r.snapshot.how, r.restart.how, r.loadAvgBefore.map((v) => v.toFixed(2)).join(' '), r.loadAvgAfter.map((v) => v.toFixed(2)).join(' ')]);
  parts.push(`How each was measured, and the machine's load average (1/5/15 min) around each run\n${formatColumns(['system', 'resources', 'catch-up path', 'snapshot', 'restart', 'load before', 'load after'], paths, [false, true])}`);
  const verdicts = judgeTargets(runs).map((v) => [v.target, v.met === undefined ? 'not measured' : v.met ? 'met' : 'NOT met', v.detail]);
  parts.push(`Targets at ${num(TARGET_SCALE)} resources (issue 18)\n${formatColumns(['target', 'verdict', 'measured'], verdicts)}`);
  const errors = runs.flatMap((r) => r.errors.map((e) => `- ${r.system} ${num(r.resources)}: ${e}`));
  if (errors.length > 0) parts.push(`Measures that failed\n${errors.join('\n')}`);
  return `${parts.join('\n\n')}\n`;
}

// ---- The SVG -----------------------------------------------------------------------------------

const COLORS: Record<ScaleSystem, string> = { Cairn: '#1f77b4', etcd: '#d62728' };
const CHART_W = 560;
const CHART_H = 300;
const COLUMNS = 2;

/** One small chart per measure (x: resources, log scale; y: the measure; a line per system), laid out two by row in one SVG. */
export function renderScaleSvg(results: ScaleResults, subtitle: string): string {
  const systems = [...new Set(results.runs.map((r) => r.system))];
  const charts = MEASURES.map((m) => {
    const series: ChartSeries[] = systems.map((s) => ({
      name: s,
      color: COLORS[s],
      points: results.runs.filter((r) => r.system === s).sort((a, b) => a.resources - b.resources).map((r) => ({ x: r.resources, y: m.read(r) })),
    }));
    return lineChartSvg({ title: m.title, subtitle, xLabel: 'resources', yLabel: m.unit, xLog: true, series, width: CHART_W, height: CHART_H });
  });
  const rows = Math.ceil(charts.length / COLUMNS);
  const W = CHART_W * COLUMNS;
  const H = CHART_H * rows;
  const body = charts.map((svg, i) => svg.trimEnd().replace(/^<svg /, `<svg x="${(i % COLUMNS) * CHART_W}" y="${Math.floor(i / COLUMNS) * CHART_H}" `));
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}">\n<rect width="${W}" height="${H}" fill="white"/>\n${body.join('\n')}\n</svg>\n`;
}

/** bench/results/scale-<date>-<HHMM>[-quick] (UTC), without the extension. */
export function resultsBaseName(startedAt: Date, quick: boolean): string {
  const iso = startedAt.toISOString();
  return `scale-${iso.slice(0, 10)}-${iso.slice(11, 13)}${iso.slice(14, 16)}${quick ? '-quick' : ''}`;
}

/** Reads a results file back (for re-rendering); throws INVALID_ARGUMENT on anything else. */
export function parseScaleResults(text: string): ScaleResults {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (e) {
    throw bad(`not JSON: ${e instanceof Error ? e.message : String(e)}`);
  }
  if (typeof v !== 'object' || v === null || (v as { kind?: unknown }).kind !== 'bench-scale' || !Array.isArray((v as { runs?: unknown }).runs)) throw bad('not a bench-scale results file (kind "bench-scale" with runs)');
  return v as ScaleResults;
}
