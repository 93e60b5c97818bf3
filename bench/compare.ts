/**
 * Stage 8: Cairn side by side with etcd (`make bench`; issue 9).
 *
 *   node dist/bench/compare.js [--quick] [--repeat N] [--dir PATH] [--systems etcd,cairn] [--only ID,...]
 *
 * Starts a 3-node etcd cluster, measures it, stops it; then a 3-node Cairn cluster, the same
 * way (never both at once); N times each (--repeat, default 3, quick 2), alternating which
 * system goes first, a fresh cluster each time. The table gives each row's median over the runs
 * with the lowest and highest run, ratios of medians, and marks a row client-bound when the load
 * generator was above 80% of a core; under it, where a Cairn CAS spent its time, from the nodes'
 * own metrics (bench/breakdown.ts). The JSON keeps every run.
 *
 * Both on loopback, with free ports, data dirs in one temporary directory (the same disk),
 * default timing and fsync on. One load generator (this process)
 * drives both over gRPC with the same payloads: 1,000 keys, 256-byte values. Measures:
 *
 * - CAS writes (read the version, then compare-and-set) at 1, 16 and 64 concurrent clients to
 *   the leader, 16 and 64 spread over all nodes (256 clients and spread with 1 only with
 *   --only); a contended variant (64 clients, 10 keys) with its conflict rate;
 * - unconditional writes and linearizable reads, 16 and 64 clients, to the leader;
 * - watch fan-out: 100, 1,000 and 10,000 watchers on one follower at 200 writes/s to the
 *   leader (bench/fanout/cluster-phase.ts, the measurement of `make bench-watch`);
 * - leader failover: SIGKILL of the leader, time to the next acknowledged write, median of 5;
 *   the same with the leader SIGSTOPped (`failover-sigstop`) and with its traffic dropped by
 *   nftables (`failover-drop`, bench/netcut.ts: root, nft and cgroup v2 needed, else skipped);
 * - the cost of TLS: after its plaintext phases, each system is started again with TLS on every
 *   port (client and peer; the load generator trusts the CA and presents a client certificate)
 *   and measured on CAS to the leader with 64 clients (`cas-leader-64-tls`), so the table has a
 *   TLS pair of rows beside the plaintext ones and each system's TLS / plaintext ratio.
 *
 * Each phase reports throughput, p50/p99/p99.9 latency, the load generator's CPU and each
 * server's. Prints one table with the Cairn/etcd ratios and the issue's targets, writes
 * bench/results/bench-<date>-<HHMM>[-quick].json and .svg. --quick: shorter windows, 3 failover trials
 * (about 6 minutes). --only runs the named phases only (ids as in the JSON: cas-leader-64,
 * watch-fanout, failover, ...), e.g. to profile one; --watchers 1000 gives the fan-out phase
 * other watcher counts. BENCH_CAIRN_NODE_FLAGS adds `node` flags to every Cairn
 * agent (e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof"), BENCH_CAIRN_AGENT_FLAGS `cairn agent` flags
 * (e.g. "--log-store level"); BENCH_KEEP=1 keeps the data dirs and logs.
 */
import { readFileSync } from 'node:fs';
import { mkdir, mkdtemp, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import v8 from 'node:v8';
import { renderChart, type Series } from './chart.js';
import { registerTempDir, tail } from './procs.js';
import { aggregatePhases, CLIENT_BOUND_CPU_PCT, runOrder, type PhaseAggregate, type Spread } from './aggregate.js';
import { BREAKDOWN_HEADERS, breakdownRows, casBreakdown } from './breakdown.js';
import { CPU_PER_CAS_PHASE, cpuPerOpRow, HEADERS, kvRow, metText, ms, phaseLabel, ratio, RIGHT, TARGETS, x } from './compare-table.js';
import { describeMachine, formatColumns, median, num, Progress, type Machine } from './report.js';
import { watchFanout } from './fanout/cluster-phase.js';
import { fanoutRows, fanoutTable } from './fanout/cluster-report.js';
import { CairnSystem, EtcdSystem, KEY_COUNT, makeBenchTls, VALUE_BYTES, type SystemName, type WatchableSystem } from './systems.js';
import type { WatchFanoutOutcome } from './watch-hook.js';
import { netCutSupport } from './netcut.js';
import { flagValue } from './args.js';
import { FAILOVER_FAULTS, failoverTrial, preload, runPhase, type FailoverFault, type FailoverTrial, type PhaseResult, type PhaseSpec } from './workload.js';

// ---- Settings ----------------------------------------------------------------------------

const argv = process.argv.slice(2);
const QUICK = argv.includes('--quick');
const BASE_DIR = flagValue(argv, '--dir');
const SYSTEMS = (flagValue(argv, '--systems') ?? 'etcd,cairn').split(',').map((s) => s.trim().toLowerCase());
for (const s of SYSTEMS) if (s !== 'etcd' && s !== 'cairn') throw new Error(`--systems: unknown system ${JSON.stringify(s)} (etcd, cairn)`);
const ONLY = flagValue(argv, '--only')?.split(',').map((s) => s.trim());
/** --watchers 1000: the fan-out phase measures these counts only (e.g. to profile one). */
const FANOUT_WATCHERS = flagValue(argv, '--watchers')?.split(',').map((s) => Number(s.trim()));
for (const n of FANOUT_WATCHERS ?? []) if (!Number.isInteger(n) || n <= 0) throw new Error(`--watchers takes positive whole numbers, got ${JSON.stringify(n)}`);
const NODE_FLAGS = (process.env['BENCH_CAIRN_NODE_FLAGS'] ?? '').split(/\s+/).filter((s) => s !== '');
const AGENT_FLAGS = (process.env['BENCH_CAIRN_AGENT_FLAGS'] ?? '').split(/\s+/).filter((s) => s !== '');

/** --repeat N: each system's cluster is started N times, alternating which system goes first. */
const REPEAT_FLAG = flagValue(argv, '--repeat');
const REPEAT = REPEAT_FLAG === undefined ? (QUICK ? 2 : 3) : Number(REPEAT_FLAG);
if (!Number.isInteger(REPEAT) || REPEAT < 1 || REPEAT > 20) throw new Error(`--repeat takes a whole number from 1 to 20, got ${JSON.stringify(REPEAT_FLAG)}`);

const S = {
  warmupMs: QUICK ? 500 : 2_000,
  durationMs: QUICK ? 2_500 : 10_000,
  repeat: REPEAT,
  casClients: [1, 16, 64, 256],
  contendedKeys: 10,
  contendedClients: 64,
  putClients: 64,
  readClients: 64,
  failoverTrials: QUICK ? 3 : 5,
  failover: { probeEveryMs: 20, probeTimeoutMs: 2_000, giveUpMs: 30_000 },
  keys: KEY_COUNT,
  valueBytes: VALUE_BYTES,
} as const;

/** Every KV phase, in table order; the ones in OPTIONAL_PHASES run only when --only names them. */
const ALL_PHASES: PhaseSpec[] = [
  ...S.casClients.map((c): PhaseSpec => ({ id: `cas-leader-${c}`, kind: 'cas', clients: c, target: 'leader', keys: S.keys })),
  ...S.casClients.map((c): PhaseSpec => ({ id: `cas-spread-${c}`, kind: 'cas', clients: c, target: 'spread', keys: S.keys })),
  { id: `cas-contended-${S.contendedClients}`, kind: 'cas-contended', clients: S.contendedClients, target: 'leader', keys: S.contendedKeys },
  { id: 'put-leader-16', kind: 'put', clients: 16, target: 'leader', keys: S.keys },
  { id: `put-leader-${S.putClients}`, kind: 'put', clients: S.putClients, target: 'leader', keys: S.keys },
  { id: 'read-leader-16', kind: 'read', clients: 16, target: 'leader', keys: S.keys },
  { id: `read-leader-${S.readClients}`, kind: 'read', clients: S.readClients, target: 'leader', keys: S.keys },
];
/**
 * Left out of the default run to keep three alternating repetitions near 20 minutes on two
 * cores (bench/README.md): the 256-client rows (the issue's targets are at 1, 16 and 64) and
 * CAS spread with one client (the same single round as to the leader, plus a forward).
 */
const OPTIONAL_PHASES = new Set(['cas-leader-256', 'cas-spread-256', 'cas-spread-1']);
const PHASES = ALL_PHASES.filter((p) => !OPTIONAL_PHASES.has(p.id) || (flagValue(argv, '--only')?.split(',').map((x) => x.trim()).includes(p.id) ?? false));
/** The TLS pair: the same phase as cas-leader-64, on clusters started with TLS everywhere. */
const TLS_PHASE: PhaseSpec = { id: `cas-leader-${S.putClients}-tls`, kind: 'cas', clients: S.putClients, target: 'leader', keys: S.keys };
/** The plaintext phase TLS_PHASE is compared with. */
const TLS_BASELINE = `cas-leader-${S.putClients}`;
const wanted = (id: string): boolean => ONLY === undefined || ONLY.includes(id);
if (ONLY !== undefined) {
  const known = new Set([...ALL_PHASES.map((p) => p.id), 'watch-fanout', ...Object.values(FAILOVER_FAULTS).map((f) => f.phase), TLS_PHASE.id]);
  for (const id of ONLY) if (!known.has(id)) throw new Error(`--only: unknown phase ${JSON.stringify(id)}; known: ${[...known].join(', ')}`);
}

const progress = new Progress();

// ---- One system ----------------------------------------------------------------------------

/** One cluster's life: started fresh, preloaded, measured, stopped. The JSON keeps every one. */
interface SystemResults {
  readonly name: SystemName;
  /** Started with TLS on every port (the run of TLS_PHASE only). */
  readonly tls: boolean;
  /** Which repetition (1..--repeat) and where in its order (1: this system ran first). */
  readonly repetition: number;
  readonly position: number;
  readonly version: string;
  readonly startupMs: number;
  readonly messageSizes: Record<string, number>;
  readonly phases: PhaseResult[];
  readonly watchFanout: WatchFanoutOutcome | undefined;
  /** kill -9 trials (kept under these names for the earlier results' readers). */
  readonly failover: FailoverTrial[];
  readonly failoverMedianMs: number;
  /** Every failover mode that ran (kill9, sigstop, drop): its trials and median, or why it was skipped. */
  readonly failovers: Partial<Record<FailoverFault, FailoverMode>>;
  /** 1-minute load average when this system's part began and ended. */
  readonly loadAverage: { readonly start: number; readonly end: number };
}

interface FailoverMode {
  readonly trials: FailoverTrial[];
  readonly medianMs: number;
  /** Why the mode did not run (e.g. no nftables). */
  readonly skipped?: string;
}

/** The failover modes in table order. */
const FAULT_ORDER: readonly FailoverFault[] = ['kill9', 'sigstop', 'drop'];

function describePhase(r: PhaseResult): string {
  const l = r.latency;
  const extra = r.kind === 'cas-contended' ? `, ${(r.conflictRate * 100).toFixed(1)}% conflicts` : r.conflicts > 0 ? `, ${r.conflicts} conflicts` : '';
  const errs = r.errors > 0 ? `, ${r.errors} ERRORS (${Object.keys(r.errorSamples).slice(0, 2).join('; ')})` : '';
  const bound = r.clientBound ? ' CLIENT-BOUND (load generator above 80% of a core);' : '';
  return `  ${bound}${num(r.opsPerSec)}/s, p50 ${ms(l.p50Ms)} p99 ${ms(l.p99Ms)} p99.9 ${ms(l.p999Ms)} ms${extra}${errs}; CPU: load generator ${r.loadgenCpuPct.toFixed(0)}%, servers ${r.serverCpuPct.map((c) => c.toFixed(0)).join('+')}%; fsyncs/s ${r.fsyncsPerSec.map((c) => c.toFixed(0)).join('+')} (mean ${r.fsyncMeanMs.map((c) => c.toFixed(1)).join('/')} ms); leader ${r.leader}; leader changes ${Number.isFinite(r.leaderChanges) ? r.leaderChanges : '?'}; other work on the machine ${r.otherCpuPct.toFixed(0)}%`;
}

interface RunPlace {
  readonly repetition: number;
  readonly position: number;
  /** Run the watch fan-out and failover phases too (once per system: in the last repetition). */
  readonly once: boolean;
}

async function runSystem(name: SystemName, work: string, withTls: boolean, place: RunPlace): Promise<SystemResults> {
  const dir = await mkdtemp(path.join(work, `${name.toLowerCase()}${withTls ? '-tls' : ''}-${place.repetition}-`));
  const loadStart = os.loadavg()[0] ?? 0;
  const label = `${name}${withTls ? ' with TLS' : ''} (run ${place.repetition}/${S.repeat})`;
  const tls = withTls ? await makeBenchTls(path.join(dir, 'pki'), name === 'etcd' ? ['e1', 'e2', 'e3'] : ['n1', 'n2', 'n3']) : undefined;
  const t0 = performance.now();
  const sys = await progress.phase(`${label}: start 3 nodes and wait for a leader`, (): Promise<WatchableSystem> =>
    name === 'etcd' ? EtcdSystem.start(dir, tls !== undefined ? { tls } : {}) : CairnSystem.start(dir, { nodeFlags: NODE_FLAGS, agentFlags: AGENT_FLAGS, ...(tls !== undefined ? { tls } : {}) }),
  );
  const startupMs = performance.now() - t0;
  try {
    let leader = await sys.waitHealthy();
    progress.line(`  ${label} ${sys.version}: leader ${sys.nodeNames[leader] ?? '?'}; pids ${sys.nodeNames.map((n, i) => `${n}=${String(sys.pid(i))}`).join(' ')}; data in ${dir}`);
    await progress.phase(`${label}: preload ${num(S.keys)} keys of ${S.valueBytes} bytes`, () => preload(sys, leader));
    const phases: PhaseResult[] = [];
    for (const spec of withTls ? [TLS_PHASE] : PHASES) {
      if (!wanted(spec.id)) continue;
      leader = await sys.waitHealthy();
      const r = await progress.phase(`${label}: ${spec.id} (${spec.clients} client${spec.clients === 1 ? '' : 's'}, ${S.durationMs / 1000} s + ${S.warmupMs / 1000} s warm-up)`, () =>
        runPhase(sys, spec, leader, S),
      );
      progress.line(describePhase(r));
      phases.push(r);
    }
    let fanout: WatchFanoutOutcome | undefined;
    if (!withTls && place.once && wanted('watch-fanout')) {
      leader = await sys.waitHealthy();
      fanout = await progress.phase(`${name}: watch fan-out`, () => watchFanout({ system: sys, leaderIndex: leader, quick: QUICK, progress, ...(FANOUT_WATCHERS !== undefined ? { counts: FANOUT_WATCHERS } : {}) }));
    }
    const failovers: Partial<Record<FailoverFault, FailoverMode>> = {};
    for (const fault of FAULT_ORDER) {
      const f = FAILOVER_FAULTS[fault];
      if (withTls || !place.once || !wanted(f.phase)) continue;
      if (fault === 'drop' && !netCutSupport().ok) {
        const reason = netCutSupport().reason;
        progress.line(`  ${name}: ${f.phase} skipped: ${reason}`);
        failovers[fault] = { trials: [], medianMs: Number.NaN, skipped: reason };
        continue;
      }
      const trials: FailoverTrial[] = [];
      for (let i = 0; i < S.failoverTrials; i++) {
        const t = await progress.phase(`${name}: ${f.phase} trial ${i + 1}/${S.failoverTrials} (${f.verb})`, () => failoverTrial(sys, S.failover, fault));
        progress.line(`  ${f.verb} (${t.killed}); next write acknowledged after ${t.ms.toFixed(0)} ms; new leader ${t.newLeader} seen after ${Number.isFinite(t.electedMs) ? t.electedMs.toFixed(0) : '?'} ms; ${t.probesSent} probes sent after the fault, ${t.probesFailed} failed`);
        trials.push(t);
      }
      failovers[fault] = { trials, medianMs: median(trials.map((t) => t.ms)) };
    }
    const failover = failovers.kill9?.trials ?? [];
    return {
      name,
      tls: withTls,
      repetition: place.repetition,
      position: place.position,
      version: sys.version,
      startupMs,
      messageSizes: sys.messageSizes(),
      phases,
      watchFanout: fanout,
      failover,
      failoverMedianMs: failover.length > 0 ? median(failover.map((t) => t.ms)) : Number.NaN,
      failovers,
      loadAverage: { start: loadStart, end: os.loadavg()[0] ?? 0 },
    };
  } catch (e) {
    for (const [i, n] of sys.nodeNames.entries()) {
      const log = path.join(dir, `${n}.log`);
      process.stderr.write(`---- ${label} ${n} (pid ${String(sys.pid(i))}), last lines of ${log}:\n`);
      try {
        process.stderr.write(`${tail(readFileSync(log, 'utf8'), 20)}\n`);
      } catch {
        process.stderr.write('(no log)\n');
      }
    }
    throw e;
  } finally {
    await progress.phase(`${label}: stop`, () => sys.stop());
  }
}

// ---- The table ------------------------------------------------------------------------------

/** Every run's phases of one system (plaintext or TLS), aggregated per phase id. */
function aggregatesOf(results: readonly SystemResults[], name: SystemName, tls: boolean): Map<string, PhaseAggregate> {
  return aggregatePhases(results.filter((r) => r.name === name && r.tls === tls).flatMap((r) => r.phases));
}

/** The run of `name` that carried the once-per-system phases (watch fan-out, failover). */
function onceRun(results: readonly SystemResults[], name: SystemName): SystemResults | undefined {
  return results.find((r) => r.name === name && !r.tls && (r.failover.length > 0 || r.watchFanout !== undefined));
}

function tableRows(results: readonly SystemResults[]): { rows: string[][]; met: number; targets: number } {
  const rows: string[][] = [];
  let met = 0;
  let targets = 0;
  const judge = (m: string): void => {
    if (m === 'met' || m === 'NOT met') targets++;
    if (m === 'met') met++;
  };
  const cairn = aggregatesOf(results, 'Cairn', false);
  const etcd = aggregatesOf(results, 'etcd', false);
  const cairnTls = aggregatesOf(results, 'Cairn', true);
  const etcdTls = aggregatesOf(results, 'etcd', true);
  const pairs = [...PHASES.map((p) => ({ p, tls: false })), { p: TLS_PHASE, tls: true }];
  for (const { p, tls } of pairs) {
    const c = (tls ? cairnTls : cairn).get(p.id);
    const e = (tls ? etcdTls : etcd).get(p.id);
    if (!c && !e) continue;
    const row = kvRow(`${phaseLabel(p)}${tls ? ', TLS' : ''}`, c, e, tls ? undefined : TARGETS[p.id]);
    judge(row[10] ?? '');
    rows.push(row);
    if (!tls && p.id === CPU_PER_CAS_PHASE) {
      const cpuRow = cpuPerOpRow(`server CPU per CAS (3 nodes), ${phaseLabel(p)}`, c, e);
      judge(cpuRow[10] ?? '');
      rows.push(cpuRow);
    }
  }
  // The cost of TLS, per system: its TLS row against its plaintext row (same phase), medians.
  const plainC = cairn.get(TLS_BASELINE);
  const plainE = etcd.get(TLS_BASELINE);
  const tlsC = cairnTls.get(TLS_PHASE.id);
  const tlsE = etcdTls.get(TLS_PHASE.id);
  if ((plainC && tlsC) || (plainE && tlsE)) {
    const tputCost = (t: PhaseAggregate | undefined, pl: PhaseAggregate | undefined): number => ratio(t?.opsPerSec.median, pl?.opsPerSec.median);
    const p99Cost = (t: PhaseAggregate | undefined, pl: PhaseAggregate | undefined): number => ratio(t?.p99Ms.median, pl?.p99Ms.median);
    const cpuCost = (t: PhaseAggregate | undefined, pl: PhaseAggregate | undefined): string =>
      t && pl ? `srv CPU ${x(ratio(t.serverCpuPctTotal.median, pl.serverCpuPctTotal.median))}, gen ${x(ratio(t.loadgenCpuPct.median, pl.loadgenCpuPct.median))}` : '-';
    const tc = tputCost(tlsC, plainC);
    const te = tputCost(tlsE, plainE);
    rows.push([
      `TLS cost: ${phaseLabel(TLS_PHASE)}, TLS / plaintext`,
      `${x(tc)} tput`,
      `${x(te)} tput`,
      x(ratio(tc, te)),
      `p99 ${x(p99Cost(tlsC, plainC))}`,
      `p99 ${x(p99Cost(tlsE, plainE))}`,
      '',
      cpuCost(tlsC, plainC),
      cpuCost(tlsE, plainE),
      '',
      '',
    ]);
  }
  // Watch fan-out (bench/fanout/cluster-report.ts): only when the phase was asked for; one run per system.
  const onceC = onceRun(results, 'Cairn');
  const onceE = onceRun(results, 'etcd');
  if (wanted('watch-fanout')) {
    const fr = fanoutRows(onceC?.watchFanout, onceE?.watchFanout);
    for (const r of fr) judge(r[10] ?? '');
    rows.push(...fr);
  }
  // Needless elections: nothing is failed during the throughput phases of any run.
  const plainRuns = (n: SystemName): SystemResults[] => results.filter((sr) => sr.name === n && !sr.tls && sr.phases.length > 0);
  const changes = (runs: readonly SystemResults[]): number => runs.reduce((a, sr) => a + sr.phases.reduce((b, p) => b + (Number.isFinite(p.leaderChanges) ? p.leaderChanges : 0), 0), 0);
  const perRun = (runs: readonly SystemResults[]): string => (runs.length > 0 ? runs.map((sr) => sr.phases.map((p) => (Number.isFinite(p.leaderChanges) ? String(p.leaderChanges) : '?')).join(' ')).join(' | ') : '-');
  const cRuns = plainRuns('Cairn');
  const eRuns = plainRuns('etcd');
  if (cRuns.length > 0 || eRuns.length > 0) {
    const cc = changes(cRuns);
    const m = metText(cRuns.length > 0 ? cc === 0 : undefined);
    judge(m);
    rows.push([
      `leader changes during the throughput phases of every run (${cRuns.length} Cairn, ${eRuns.length} etcd; nothing failed)`,
      cRuns.length > 0 ? String(cc) : '-',
      eRuns.length > 0 ? String(changes(eRuns)) : '-',
      '',
      perRun(cRuns),
      perRun(eRuns),
      '',
      '-',
      '-',
      'none (no needless election)',
      m,
    ]);
  }
  for (const fault of FAULT_ORDER) {
    const mc = onceC?.failovers[fault];
    const me = onceE?.failovers[fault];
    if (mc === undefined && me === undefined) continue;
    const skipped = mc?.skipped ?? me?.skipped;
    if (skipped !== undefined) {
      rows.push([`${FAILOVER_FAULTS[fault].row}: skipped (${skipped})`, '-', '-', '-', '-', '-', '', '-', '-', 'median <= 0.5x', '']);
      continue;
    }
    const medianText = (mm: FailoverMode | undefined): string => (mm && mm.trials.length > 0 ? `${num(mm.medianMs)} ms` : '-');
    const fr = ratio(mc?.medianMs, me?.medianMs);
    const m = metText(Number.isFinite(fr) ? fr <= 0.5 : undefined);
    judge(m);
    rows.push([
      `${FAILOVER_FAULTS[fault].row}, median of ${Math.max(mc?.trials.length ?? 0, me?.trials.length ?? 0)}`,
      medianText(mc),
      medianText(me),
      x(fr),
      mc ? mc.trials.map((t) => t.ms.toFixed(0)).join(', ') : '-',
      me ? me.trials.map((t) => t.ms.toFixed(0)).join(', ') : '-',
      '',
      '-',
      '-',
      'median <= 0.5x',
      m,
    ]);
  }
  return { rows, met, targets };
}

/** Where a Cairn CAS spends its time, one small table per CAS phase, medians over the runs (bench/breakdown.ts). */
function breakdownTables(results: readonly SystemResults[]): string {
  const runs = results.filter((r) => r.name === 'Cairn' && !r.tls).flatMap((r) => r.phases);
  const out: string[] = [];
  for (const p of PHASES) {
    if (p.kind !== 'cas' && p.kind !== 'cas-contended') continue;
    const rs = runs.filter((r) => r.id === p.id);
    if (rs.length === 0) continue;
    const steps = rs.map((r) => casBreakdown({ roundMeanMs: r.latency.meanMs, rounds: r.attempts, leaderIndex: r.leaderIndex, nodes: r.nodeMetrics ?? [], loadgenEventLoopDelayMs: r.loadgenEventLoopDelayMs }));
    out.push(`Cairn, ${phaseLabel(p)}: where a CAS spends its time (${rs.length} run${rs.length === 1 ? '' : 's'})\n${formatColumns(BREAKDOWN_HEADERS, breakdownRows(steps), [false, false, true, true, true, true])}`);
  }
  return out.join('\n\n');
}

/** Medians with their range: a line per system and placement, and a band from the lowest to the highest run. */
function chart(results: readonly SystemResults[], title: string): string {
  const colors: Record<SystemName, string> = { Cairn: '#1f77b4', etcd: '#d62728' };
  const names = [...new Set(results.filter((r) => !r.tls).map((r) => r.name))];
  const clients = [...new Set(PHASES.filter((p) => p.kind === 'cas').map((p) => p.clients))].sort((a, b) => a - b);
  const series = (pick: (a: PhaseAggregate) => Spread): Series[] =>
    names.flatMap((name) => {
      const aggs = [...aggregatesOf(results, name, false).values()];
      return (['leader', 'spread'] as const).map((target) => ({
        label: `${name}, ${target === 'leader' ? 'to the leader' : 'spread over all nodes'}`,
        color: colors[name],
        dashed: target === 'spread',
        points: aggs.filter((a) => a.kind === 'cas' && a.target === target).map((a) => [a.clients, pick(a).median] as const),
        ranges: aggs.filter((a) => a.kind === 'cas' && a.target === target).map((a) => [a.clients, pick(a).min, pick(a).max] as const),
      }));
    });
  return renderChart({ title, clients, throughput: series((a) => a.opsPerSec), p99: series((a) => a.p99Ms) });
}

// ---- Main ------------------------------------------------------------------------------------

const FANOUT_NOTE =
  'N watchers on one follower (each its own gRPC stream of the whole data set, 500 streams per connection: etcd Watch, Cairn WatchListBatched), ' +
  'an open-loop writer process at 200 writes/s to the leader; send-to-recv = arrival at a watcher minus the time the write was sent, ' +
  'over every expected delivery (">N s": the percentile falls on events not delivered by the end of the drain). ' +
  '"held": every watcher got every event at that rate (writes at >= 98% of 200/s, all delivered, p99 <= 1 s, no stream ended). ' +
  'CPU column for these rows: load generator (watchers process + writer) / the three servers, and the serving node\'s RSS under load.';

function busy(load: number, cpus: number): string {
  return load > cpus * 0.5 ? ` -- WARNING: the machine is busy with other work (${cpus} CPUs); these numbers are skewed` : '';
}

interface Results {
  readonly benchmark: 'etcd-side-by-side';
  readonly mode: 'full' | 'quick';
  readonly startedAt: string;
  readonly machine: Machine;
  readonly settings: typeof S;
  readonly loadgen: { readonly node: string; readonly cairnClient: string; readonly etcdClient: string };
  readonly cairnNodeFlags: readonly string[];
  readonly systems: readonly SystemResults[];
  readonly loadAverage: { readonly start: number; readonly end: number };
  /** Which system ran when: one list per repetition. */
  readonly order: readonly (readonly SystemName[])[];
  readonly table: { readonly headers: readonly string[]; readonly rows: readonly string[][]; readonly fanout?: string; readonly breakdown?: string };
}

async function main(): Promise<void> {
  const startedAt = new Date().toISOString();
  const base = BASE_DIR ?? os.tmpdir();
  await mkdir(base, { recursive: true });
  const work = await mkdtemp(path.join(base, 'cairn-etcd-bench-'));
  registerTempDir(work);
  const machine = await describeMachine(work, v8.getHeapStatistics().heap_size_limit);
  const loadStart = os.loadavg()[0] ?? 0;
  process.stdout.write(
    `Cairn vs etcd, side by side (${QUICK ? 'quick' : 'full'}), ${startedAt}\n` +
      `machine: ${machine.cpus} x ${machine.cpuModel}, ${machine.memoryGiB} GiB RAM, node ${machine.node}, ${machine.platform} (kernel ${machine.kernel})\n` +
      `data dirs: ${machine.disk.path} (${machine.disk.filesystem}); one load generator (this process)\n` +
      `load average (1 min): ${loadStart.toFixed(2)}${busy(loadStart, machine.cpus)}\n` +
      (NODE_FLAGS.length > 0 ? `Cairn agents run with node flags: ${NODE_FLAGS.join(' ')}\n` : '') +
      '\n',
  );
  const results: SystemResults[] = [];
  const plainWanted = ONLY === undefined || ONLY.some((id) => id !== TLS_PHASE.id);
  const names: SystemName[] = SYSTEMS.map((s) => (s === 'etcd' ? 'etcd' : 'Cairn'));
  const order = runOrder(names, S.repeat);
  progress.line(`order: ${order.map((rep) => rep.join(' ')).join(' | ')} (each a fresh cluster; the watch fan-out and failover phases run once per system, in the last repetition)`);
  for (const [r, rep] of order.entries()) {
    for (const [pos, name] of rep.entries()) {
      const place = { repetition: r + 1, position: pos + 1, once: r === order.length - 1 };
      if (plainWanted) results.push(await runSystem(name, work, false, place));
      if (wanted(TLS_PHASE.id)) results.push(await runSystem(name, work, true, place));
    }
  }
  const { rows, met, targets } = tableRows(results);
  const loadEnd = os.loadavg()[0] ?? 0;
  const others = results
    .map((r) => {
      const o = r.phases.map((p) => p.otherCpuPct).filter((v) => Number.isFinite(v));
      return `${r.name}${r.tls ? ' with TLS' : ''} run ${r.repetition} at load ${r.loadAverage.start.toFixed(1)} -> ${r.loadAverage.end.toFixed(1)}, other work ${o.length > 0 ? `${median(o).toFixed(0)}% of a core (median over its phases; max ${Math.max(...o).toFixed(0)}%)` : 'unknown'}`;
    })
    .join('; ');
  const plainResults = results.filter((r) => !r.tls);
  const onceResults = names.map((n) => onceRun(results, n)).filter((r): r is SystemResults => r !== undefined);
  const fanoutText = onceResults.some((r) => r.watchFanout !== undefined)
    ? `\nWatch fan-out: ${FANOUT_NOTE}\n\n${fanoutTable(onceResults.map((r) => ({ name: r.name, outcome: r.watchFanout })))}\n`
    : '';
  const breakdown = breakdownTables(results);
  const bound = results.flatMap((r) => r.phases.filter((p) => p.clientBound).map((p) => `${r.name}${r.tls ? ' TLS' : ''} run ${r.repetition} ${p.id} (${p.loadgenCpuPct.toFixed(0)}%)`));
  const sizes = [...new Map(plainResults.map((r) => [r.name, r])).values()].map((r) => `${r.name} ${r.version}: read request ${r.messageSizes['readRequest'] ?? '?'} B, CAS request ${r.messageSizes['casRequest'] ?? '?'} B`).join('; ');
  process.stdout.write(
    `\n${formatColumns(HEADERS, rows, RIGHT)}\n\n` +
      (targets > 0 ? `Targets met (issue 17, judged on medians): ${met} of ${targets}.\n` : '') +
      `Each system ran ${S.repeat} time${S.repeat === 1 ? '' : 's'}, a fresh cluster each time, alternating which went first (${order.map((rep) => rep.join(' ')).join(' | ')}): ` +
      'every cell is the median of the runs with the lowest and highest run in brackets; ratios are ratios of medians; targets are judged on medians. ' +
      `[client-bound k/n]: in k of the n runs the load generator used more than ${CLIENT_BOUND_CPU_PCT}% of a core in the window, so it, not the server, may have been the limit` +
      `${bound.length > 0 ? ` (${bound.join(', ')})` : ' (no run was)'}.\n` +
      `Throughput: successful operations per second in a ${S.durationMs / 1000} s window after ${S.warmupMs / 1000} s of warm-up, closed loop. ` +
      'A CAS operation is a linearizable read plus a compare-and-set write; its latency covers both. ' +
      'CPU: % of one core over the window; gen = the load generator (this process), srv = the three servers together; ' +
      "fsyncs: the leader's log fsyncs per second and their mean ms (its own metrics: etcd_disk_wal_fsync_duration_seconds, cairn_log_fsync_seconds).\n" +
      `TLS rows: each system started again with TLS on every port (client: server certificate checked against the cluster CA, and a client certificate, etcd --client-cert-auth; peers: mutual TLS, etcd --peer-client-cert-auth, Cairn's node certificates), certificates from Cairn's src/auth (ECDSA P-256), measured on ${TLS_BASELINE}; "TLS cost" is each system's TLS row over its plaintext row (tput below 1x and p99 above 1x are the cost).\n` +
      `Encoded protobuf messages (no gRPC framing): ${sizes}. 256-byte values; Cairn's value is the title of a demo.v1.Album ({"title":"..."} as JSON text).\n` +
      `load average (1 min) at the start ${loadStart.toFixed(2)}, at the end ${loadEnd.toFixed(2)}${busy(Math.max(loadStart, loadEnd), machine.cpus)}\n` +
      `${others}. Other work skews a ratio when it differs between the two parts.\n` +
      fanoutText +
      (breakdown !== ''
        ? `\nWhere a Cairn CAS spends its time, from the nodes' own metrics scraped when each window opened and closed (medians of the runs). ` +
          '"ms per CAS": the step\'s total time in the window over the CAS rounds (for steps every CAS goes through); "times per CAS": how often a CAS met the step; "ms each": one occurrence (for shared waits: a log batch serves many CAS, a heartbeat round many reads). ' +
          'Steps nest and overlap: the leader\'s log write runs beside the append round trip, and event-loop waits are inside every step, so the shares do not add up to 100%. ' +
          'Event-loop delay: how late a 10 ms timer fired, mean (prom-client monitorEventLoopDelay, reset at each scrape); a round waits for a loop turn several times on each node it crosses.\n\n' +
          `${breakdown}\n`
        : ''),
  );
  const resultsDir = fileURLToPath(new URL('../../bench/results/', import.meta.url));
  await mkdir(resultsDir, { recursive: true });
  // The start time in the name (UTC, to the minute): runs of one day do not overwrite each other.
  const stem = `bench-${startedAt.slice(0, 10)}-${startedAt.slice(11, 13)}${startedAt.slice(14, 16)}${QUICK ? '-quick' : ''}${ONLY !== undefined || SYSTEMS.length < 2 || FANOUT_WATCHERS !== undefined ? '-partial' : ''}`;
  const out: Results = {
    benchmark: 'etcd-side-by-side',
    mode: QUICK ? 'quick' : 'full',
    startedAt,
    machine,
    settings: S,
    loadgen: { node: process.version, cairnClient: 'CairnClient (src/client), one single-endpoint client per node, request ids from a monotonic ULID factory', etcdClient: 'bench/etcd-client.ts (grpc-js + protobufjs from bench/etcd/rpc.proto)' },
    cairnNodeFlags: NODE_FLAGS,
    systems: results,
    loadAverage: { start: loadStart, end: loadEnd },
    order: order.map((rep) => [...rep]),
    table: { headers: HEADERS, rows, ...(fanoutText !== '' ? { fanout: fanoutText.trim() } : {}), ...(breakdown !== '' ? { breakdown } : {}) },
  };
  await writeFile(path.join(resultsDir, `${stem}.json`), `${JSON.stringify(out, null, 2)}\n`);
  await writeFile(path.join(resultsDir, `${stem}.svg`), chart(plainResults, `${QUICK ? 'quick' : 'full'} run ${startedAt.slice(0, 16)}Z, ${machine.cpus} x ${machine.cpuModel}; load average ${loadStart.toFixed(2)} -> ${loadEnd.toFixed(2)}`));
  process.stdout.write(`\nwrote bench/results/${stem}.json and bench/results/${stem}.svg\n`);
}

await main();
