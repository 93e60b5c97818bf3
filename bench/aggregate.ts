/**
 * Repeated runs of the side-by-side benchmark (issue 17, item 5): the order the systems run in,
 * the median and spread of each row over the runs, and which runs were limited by the load
 * generator rather than the servers. Pure functions, tested in compare.test.ts.
 */
import { isClientBound, type PhaseResult } from './workload.js';

import { spreadOf, type Spread } from './spread.js';

export { CLIENT_BOUND_CPU_PCT, isClientBound } from './workload.js';
export { spreadOf, spreadText, type Spread } from './spread.js';

/**
 * Which system runs when, repetition by repetition: each repetition runs every system once, and
 * the first system of repetition r is `systems[r mod n]`, so with two systems the order is
 * A B, B A, A B, ... Over an even number of repetitions each system runs first equally often;
 * over an odd number the first system runs first once more (and last once less).
 */
export function runOrder<T>(systems: readonly T[], repeat: number): T[][] {
  if (!Number.isInteger(repeat) || repeat < 1) throw new Error(`runOrder: repeat must be a positive whole number, got ${String(repeat)}`);
  const n = systems.length;
  return Array.from({ length: repeat }, (_, r) => systems.map((_, i) => systems[(i + r) % n] as T));
}

/** One row of the table: a phase's measures over every run of one system. */
export interface PhaseAggregate {
  readonly id: string;
  readonly kind: PhaseResult['kind'];
  readonly clients: number;
  readonly target: PhaseResult['target'];
  readonly keys: number;
  readonly runs: number;
  readonly opsPerSec: Spread;
  readonly p50Ms: Spread;
  readonly p99Ms: Spread;
  readonly p999Ms: Spread;
  readonly conflictRate: Spread;
  readonly loadgenCpuPct: Spread;
  readonly serverCpuPctTotal: Spread;
  /** The three servers' CPU per successful operation, microseconds (issue 17: "server CPU per CAS"). */
  readonly serverCpuUsPerOp: Spread;
  /** The leader's log fsyncs per second and their mean duration, ms. */
  readonly leaderFsyncsPerSec: Spread;
  readonly leaderFsyncMeanMs: Spread;
  /** Errors summed over the runs. */
  readonly errors: number;
  /** Runs in which the load generator was above CLIENT_BOUND_CPU_PCT of a core. */
  readonly clientBoundRuns: number;
}

/** Aggregates the runs of one phase (one system); throws when they are not the same phase. */
export function aggregatePhase(runs: readonly PhaseResult[]): PhaseAggregate {
  const first = runs[0];
  if (first === undefined) throw new Error('aggregatePhase: no runs');
  for (const r of runs) if (r.id !== first.id) throw new Error(`aggregatePhase: runs of ${first.id} and ${r.id} mixed`);
  const s = (pick: (r: PhaseResult) => number): Spread => spreadOf(runs.map(pick));
  return {
    id: first.id,
    kind: first.kind,
    clients: first.clients,
    target: first.target,
    keys: first.keys,
    runs: runs.length,
    opsPerSec: s((r) => r.opsPerSec),
    p50Ms: s((r) => r.latency.p50Ms),
    p99Ms: s((r) => r.latency.p99Ms),
    p999Ms: s((r) => r.latency.p999Ms),
    conflictRate: s((r) => r.conflictRate),
    loadgenCpuPct: s((r) => r.loadgenCpuPct),
    serverCpuPctTotal: s((r) => r.serverCpuPctTotal),
    serverCpuUsPerOp: s((r) => (r.opsPerSec > 0 ? ((r.serverCpuPctTotal / 100) * 1e6) / r.opsPerSec : Number.NaN)),
    leaderFsyncsPerSec: s((r) => r.fsyncsPerSec[r.leaderIndex] ?? Number.NaN),
    leaderFsyncMeanMs: s((r) => r.fsyncMeanMs[r.leaderIndex] ?? Number.NaN),
    errors: runs.reduce((a, r) => a + r.errors, 0),
    clientBoundRuns: runs.filter((r) => isClientBound(r.loadgenCpuPct)).length,
  };
}

/** Groups phase results by id (in first-seen order) and aggregates each group. */
export function aggregatePhases(results: readonly PhaseResult[]): Map<string, PhaseAggregate> {
  const groups = new Map<string, PhaseResult[]>();
  for (const r of results) {
    const g = groups.get(r.id);
    if (g) g.push(r);
    else groups.set(r.id, [r]);
  }
  return new Map([...groups].map(([id, rs]) => [id, aggregatePhase(rs)]));
}

/** " [client-bound 2/3]" when the load generator limited any run of the row; '' otherwise. */
export function clientBoundNote(a: PhaseAggregate | undefined): string {
  return a !== undefined && a.clientBoundRuns > 0 ? ` [client-bound ${a.clientBoundRuns}/${a.runs}]` : '';
}
