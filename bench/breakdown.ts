/**
 * Where a Cairn CAS spends its time (issue 17, item 5), from the servers' own metrics: each
 * node's /metrics is scraped when the measured window opens and when it closes, and the
 * histograms' growth over the window (sum / count) gives the mean time of each step in it. The
 * event-loop delay gauges (prom-client's monitorEventLoopDelay, reset at every scrape) read at
 * the closing scrape cover the window. Pure functions, tested in compare.test.ts.
 */
import { metricValue } from './fanout/proc.js';
import { spreadOf, spreadText, type Spread } from './spread.js';

/** Count and total seconds of one histogram series (one label set) in the window. */
export interface HistogramTotal {
  readonly count: number;
  readonly seconds: number;
}

/** One node's metrics over a measured window. */
export interface NodeWindowMetrics {
  /** Growth in the window, keyed `name` or `name{k="v",...}` (labels sorted). */
  readonly histograms: Readonly<Record<string, HistogramTotal>>;
  /** Gauges read at the closing scrape. */
  readonly gauges: Readonly<Record<string, number>>;
}

/** The histograms a Cairn node exports for the breakdown (src/api/metrics.ts). */
export const CAIRN_TIMING_HISTOGRAMS = [
  'cairn_read_index_seconds',
  'cairn_proposal_seconds',
  'cairn_raft_round_trip_seconds',
  'cairn_apply_seconds',
  'cairn_log_append_seconds',
  'cairn_log_fsync_seconds',
  'cairn_grpc_request_seconds',
] as const;

/** prom-client's event-loop delay gauges under Cairn's prefix: one window's figures, reset at each scrape. */
export const CAIRN_WINDOW_GAUGES = ['cairn_process_nodejs_eventloop_lag_mean_seconds', 'cairn_process_nodejs_eventloop_lag_p99_seconds'] as const;

/** etcd's counterparts, kept in the JSON for comparison (not in the breakdown table). */
export const ETCD_TIMING_HISTOGRAMS = ['etcd_disk_wal_fsync_duration_seconds', 'etcd_disk_backend_commit_duration_seconds', 'etcd_network_peer_round_trip_time_seconds'] as const;

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)/;

/** `{b="2",a="1"}` -> `{a="1",b="2"}`; '' for no labels. */
function normalizeLabels(raw: string | undefined): string {
  if (raw === undefined || raw === '{}') return '';
  const parts = raw
    .slice(1, -1)
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '')
    .sort();
  return parts.length === 0 ? '' : `{${parts.join(',')}}`;
}

/** `<name>_sum` and `<name>_count` of each listed histogram, per label set, from Prometheus text. */
export function histogramTotals(text: string, names: readonly string[]): Map<string, HistogramTotal> {
  const want = new Set(names);
  const sums = new Map<string, number>();
  const counts = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const m = SAMPLE.exec(line);
    if (!m) continue;
    const name = m[1] as string;
    const value = Number(m[3]);
    if (!Number.isFinite(value)) continue;
    for (const [suffix, into] of [
      ['_sum', sums],
      ['_count', counts],
    ] as const) {
      if (!name.endsWith(suffix)) continue;
      const base = name.slice(0, -suffix.length);
      if (want.has(base)) into.set(`${base}${normalizeLabels(m[2])}`, value);
    }
  }
  const out = new Map<string, HistogramTotal>();
  for (const [key, count] of counts) {
    const seconds = sums.get(key);
    if (seconds !== undefined) out.set(key, { count, seconds });
  }
  return out;
}

/**
 * One node's window from its two scrapes: the growth of each histogram and the gauges of the
 * closing scrape. A series absent from the opening scrape counts from zero (a labelled series
 * appears with its first sample); one that went down (a restart) is left out.
 */
export function windowMetrics(before: string | undefined, after: string | undefined, histograms: readonly string[], gauges: readonly string[]): NodeWindowMetrics | undefined {
  if (before === undefined || after === undefined) return undefined;
  const h0 = histogramTotals(before, histograms);
  const h1 = histogramTotals(after, histograms);
  const hs: Record<string, HistogramTotal> = {};
  for (const [key, b] of h1) {
    const a = h0.get(key) ?? { count: 0, seconds: 0 };
    if (b.count < a.count) continue;
    hs[key] = { count: b.count - a.count, seconds: b.seconds - a.seconds };
  }
  const gs: Record<string, number> = {};
  for (const g of gauges) {
    const v = metricValue(after, g);
    if (v !== undefined) gs[g] = v;
  }
  return { histograms: hs, gauges: gs };
}

/** Count and total ms of one histogram series over the given nodes together. */
export function pooled(nodes: readonly (NodeWindowMetrics | undefined)[], key: string): { readonly count: number; readonly ms: number } {
  let count = 0;
  let seconds = 0;
  for (const n of nodes) {
    const h = n?.histograms[key];
    if (h === undefined) continue;
    count += h.count;
    seconds += h.seconds;
  }
  return { count, ms: seconds * 1000 };
}

/** Mean ms of one histogram series over the given nodes together (NaN when none had a sample). */
export function meanMs(nodes: readonly (NodeWindowMetrics | undefined)[], key: string): number {
  const p = pooled(nodes, key);
  return p.count > 0 ? p.ms / p.count : Number.NaN;
}

function gaugeMs(nodes: readonly (NodeWindowMetrics | undefined)[], name: string): number {
  const vs = nodes.map((n) => n?.gauges[name]).filter((v): v is number => v !== undefined && Number.isFinite(v));
  return vs.length === 0 ? Number.NaN : Math.max(...vs) * 1000;
}

/** What one run of a phase gives the breakdown. */
export interface BreakdownInput {
  /** The client's mean round (for CAS: the read plus the write), ms. */
  readonly roundMeanMs: number;
  /**
   * Rounds the client completed in the window (for CAS: attempts, applied or not). Used only
   * when the servers did not count their Read calls: the servers' count covers exactly the
   * interval between the scrapes, which the histograms cover too.
   */
  readonly rounds: number;
  readonly leaderIndex: number;
  /** Per node, in node order; undefined where a scrape failed. */
  readonly nodes: readonly (NodeWindowMetrics | undefined)[];
  /** The load generator's own event-loop delay in the window, ms (mean, p99). */
  readonly loadgenEventLoopDelayMs: { readonly mean: number; readonly p99: number };
}

/**
 * A step's figures in one run. `perCasMs`: the step's total time in the window over the rounds
 * (its time per CAS, however often a CAS meets it; NaN for steps that many CAS share, like a log
 * batch, or that overlap, like the round trips to two followers). `perCas`: how often a CAS met
 * it (occurrences over rounds). `eachMs`: the mean of one occurrence.
 */
export interface StepFigures {
  readonly perCasMs: number;
  readonly perCas: number;
  readonly eachMs: number;
}

/** The breakdown's rows, in order; `per`: whether the step's time is a share of each CAS ('cas') or a wait it meets ('each'). */
export const BREAKDOWN_ROWS = [
  { id: 'round', label: 'CAS round at the client (read + write)', where: 'load generator', per: 'cas' },
  { id: 'readCall', label: 'read: the Read call, arrival to status', where: 'serving node', per: 'cas' },
  { id: 'readIndex', label: '  read-index wait (every linearizable read of the round)', where: 'serving node', per: 'cas' },
  { id: 'heartbeatRtt', label: '  heartbeat round trip (network both ways + follower turn)', where: 'leader', per: 'each' },
  { id: 'writeCall', label: 'write: the Write call, arrival to status', where: 'serving node', per: 'cas' },
  { id: 'proposal', label: '  proposal until committed and applied', where: 'leader', per: 'cas' },
  { id: 'leaderAppend', label: '  log write, one batch until durable (queueing included)', where: 'leader', per: 'each' },
  { id: 'leaderFsync', label: '    of which fdatasync', where: 'leader', per: 'each' },
  { id: 'appendRtt', label: '  append round trip (sent until acknowledged)', where: 'leader', per: 'each' },
  { id: 'followerAppend', label: '    follower log write, one batch', where: 'followers', per: 'each' },
  { id: 'apply', label: '  apply, one entry', where: 'leader', per: 'cas' },
  { id: 'serverRest', label: 'in the calls, outside read index and proposal (decode, checks, forward, encode)', where: 'derived', per: 'cas' },
  { id: 'clientRest', label: 'outside the calls (load generator, network, gRPC framing, queueing for the loop)', where: 'derived', per: 'cas' },
  { id: 'loopLeader', label: 'event-loop delay, per wait', where: 'leader', per: 'each' },
  { id: 'loopFollowers', label: 'event-loop delay, per wait (the worse follower)', where: 'followers', per: 'each' },
  { id: 'loopLoadgen', label: 'event-loop delay, per wait', where: 'load generator', per: 'each' },
] as const;

export type BreakdownId = (typeof BREAKDOWN_ROWS)[number]['id'];

const NONE: StepFigures = { perCasMs: Number.NaN, perCas: Number.NaN, eachMs: Number.NaN };

/** Each step of one run of a CAS phase (NaN where not measured). */
export function casBreakdown(input: BreakdownInput): Record<BreakdownId, StepFigures> {
  const all = input.nodes;
  const leader = [all[input.leaderIndex]];
  const followers = all.filter((_, i) => i !== input.leaderIndex);
  // Each CAS round makes one Read call: the calls the nodes counted between the two scrapes
  // are the rounds of the interval their histograms cover (the client's count covers only
  // rounds that began and ended inside its window, fewer when a round is long against the
  // window). With a node's scrape missing, nothing pooled over nodes is whole: no per-CAS figures.
  const complete = all.length > 0 && all.every((n) => n !== undefined);
  const readCalls = pooled(all, 'cairn_grpc_request_seconds{method="Read"}').count;
  const rounds = !complete ? Number.NaN : readCalls > 0 ? readCalls : input.rounds;
  /** A step every CAS goes through: its total over the rounds. */
  const perCas = (nodes: readonly (NodeWindowMetrics | undefined)[], key: string): StepFigures => {
    const p = pooled(nodes, key);
    if (p.count === 0) return NONE;
    return rounds > 0 ? { perCasMs: p.ms / rounds, perCas: p.count / rounds, eachMs: p.ms / p.count } : { ...NONE, eachMs: p.ms / p.count };
  };
  /** A wait many CAS share or that overlaps others: only how often and how long each. */
  const each = (nodes: readonly (NodeWindowMetrics | undefined)[], key: string): StepFigures => {
    const p = pooled(nodes, key);
    if (p.count === 0) return NONE;
    return { perCasMs: Number.NaN, perCas: rounds > 0 ? p.count / rounds : Number.NaN, eachMs: p.ms / p.count };
  };
  const wait = (ms: number): StepFigures => ({ perCasMs: Number.NaN, perCas: Number.NaN, eachMs: ms });
  const derived = (ms: number): StepFigures => ({ perCasMs: ms, perCas: Number.NaN, eachMs: Number.NaN });
  const readCall = perCas(all, 'cairn_grpc_request_seconds{method="Read"}');
  const writeCall = perCas(all, 'cairn_grpc_request_seconds{method="Write"}');
  const readIndex = perCas(all, 'cairn_read_index_seconds');
  const proposal = perCas(leader, 'cairn_proposal_seconds');
  return {
    round: { perCasMs: input.roundMeanMs, perCas: 1, eachMs: input.roundMeanMs },
    readCall,
    readIndex,
    heartbeatRtt: each(leader, 'cairn_raft_round_trip_seconds{kind="heartbeat"}'),
    writeCall,
    proposal,
    leaderAppend: each(leader, 'cairn_log_append_seconds'),
    leaderFsync: each(leader, 'cairn_log_fsync_seconds'),
    appendRtt: each(leader, 'cairn_raft_round_trip_seconds{kind="append"}'),
    followerAppend: each(followers, 'cairn_log_append_seconds'),
    apply: perCas(leader, 'cairn_apply_seconds'),
    serverRest: derived(readCall.perCasMs + writeCall.perCasMs - readIndex.perCasMs - proposal.perCasMs),
    clientRest: derived(input.roundMeanMs - readCall.perCasMs - writeCall.perCasMs),
    loopLeader: wait(gaugeMs(leader, 'cairn_process_nodejs_eventloop_lag_mean_seconds')),
    loopFollowers: wait(gaugeMs(followers, 'cairn_process_nodejs_eventloop_lag_mean_seconds')),
    loopLoadgen: wait(input.loadgenEventLoopDelayMs.mean),
  };
}

/**
 * The breakdown table of one phase over its runs, medians of the runs: per step its ms per CAS
 * (with the range) and its share of the median round, how often a CAS met it, and the mean of
 * one occurrence. Steps nest and overlap (the leader's log write runs beside the append round
 * trip; waits for the event loop are inside every step), so the shares do not add up to 100%.
 */
export function breakdownRows(runs: readonly Record<BreakdownId, StepFigures>[]): string[][] {
  const round = spreadOf(runs.map((r) => r.round.perCasMs)).median;
  return BREAKDOWN_ROWS.map((row) => {
    const perCasMs: Spread = spreadOf(runs.map((r) => r[row.id].perCasMs));
    const perCas = spreadOf(runs.map((r) => r[row.id].perCas)).median;
    const eachMs: Spread = spreadOf(runs.map((r) => r[row.id].eachMs));
    const share = Number.isFinite(perCasMs.median) && round > 0 ? `${((perCasMs.median / round) * 100).toFixed(0)}%` : '-';
    return [row.label, row.where, spreadText(perCasMs, msText), share, Number.isFinite(perCas) ? perCas.toFixed(2) : '-', spreadText(eachMs, msText)];
  });
}

export const BREAKDOWN_HEADERS = ['step', 'measured on', 'ms per CAS (range of runs)', 'share of the round', 'times per CAS', 'ms each (range)'];

export function msText(x: number): string {
  if (!Number.isFinite(x)) return '-';
  const a = Math.abs(x);
  return a < 1 ? x.toFixed(3) : a < 10 ? x.toFixed(2) : a < 100 ? x.toFixed(1) : x.toFixed(0);
}
