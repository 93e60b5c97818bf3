/**
 * The rows of the side-by-side table (bench/compare.ts), from each phase's runs aggregated
 * (aggregate.ts): medians with their range, ratios of medians, the targets judged on
 * medians, and the client-bound mark. Pure functions, tested in compare.test.ts.
 */
import { clientBoundNote, spreadText, type PhaseAggregate } from './aggregate.js';
import { num } from './report.js';
import type { PhaseSpec } from './workload.js';

export function ms(x: number): string {
  if (!Number.isFinite(x)) return '-';
  return x < 10 ? x.toFixed(2) : x < 100 ? x.toFixed(1) : x.toFixed(0);
}

export function ratio(a: number | undefined, b: number | undefined): number {
  return a !== undefined && b !== undefined && Number.isFinite(a) && Number.isFinite(b) && b > 0 ? a / b : Number.NaN;
}

export const x = (r: number): string => (Number.isFinite(r) ? `${r.toFixed(2)}x` : '-');

export const metText = (m: boolean | undefined): string => (m === undefined ? '-' : m ? 'met' : 'NOT met');

export interface Target {
  readonly text: string;
  /** Judged on the medians of the runs; undefined: not measured. */
  readonly met: (c: PhaseAggregate | undefined, e: PhaseAggregate | undefined) => boolean | undefined;
}

/** Issue 17: throughput at least etcd's, with p99 no worse than etcd's. */
const atLeastEtcd: Target = {
  text: 'tput >= 1.0x, p99 <= 1x',
  met: (c, e) => {
    const t = ratio(c?.opsPerSec.median, e?.opsPerSec.median);
    const p = ratio(c?.p99Ms.median, e?.p99Ms.median);
    return Number.isFinite(t) && Number.isFinite(p) ? t >= 1 && p <= 1 : undefined;
  },
};

/** Issue 17's targets ("Targets"), by phase id. */
export const TARGETS: Readonly<Record<string, Target>> = {
  'cas-leader-1': {
    text: 'p50 <= 1x',
    met: (c, e) => {
      const p = ratio(c?.p50Ms.median, e?.p50Ms.median);
      return Number.isFinite(p) ? p <= 1 : undefined;
    },
  },
  'cas-leader-16': atLeastEtcd,
  'cas-leader-64': atLeastEtcd,
  'cas-spread-16': atLeastEtcd,
  'cas-spread-64': atLeastEtcd,
  'put-leader-16': atLeastEtcd,
  'put-leader-64': atLeastEtcd,
  'read-leader-16': atLeastEtcd,
  'read-leader-64': atLeastEtcd,
};

/** Issue 17: server CPU per CAS (three nodes summed) no more than etcd's, on this phase. */
export const CPU_PER_CAS_PHASE = 'cas-leader-64';

export const HEADERS = [
  'measure',
  'Cairn ops/s',
  'etcd ops/s',
  'Cairn/etcd',
  'Cairn p50 / p99 ms',
  'etcd p50 / p99 ms',
  'p99 Cairn/etcd',
  'Cairn CPU gen/srv, fsyncs',
  'etcd CPU gen/srv, fsyncs',
  'target',
  'met',
];
export const RIGHT = [false, true, true, true, true, true, true, true, true, false, false];

export function phaseLabel(p: Pick<PhaseSpec, 'kind' | 'clients' | 'target' | 'keys'>): string {
  const who = p.clients === 1 ? '1 client' : `${p.clients} clients`;
  switch (p.kind) {
    case 'cas':
      return `CAS, ${p.target === 'leader' ? 'to the leader' : 'spread'}, ${who}`;
    case 'cas-contended':
      return `CAS contended (${p.keys} keys), ${who}`;
    case 'put':
      return `unconditional writes, ${who}`;
    case 'read':
      return `linearizable reads, ${who}`;
  }
}

/** "1,615/s (1,580-1,650)" with conflicts, errors and the client-bound mark. */
export function valueText(a: PhaseAggregate | undefined): string {
  if (!a) return '-';
  const conflicts = a.kind === 'cas-contended' ? ` (${(a.conflictRate.median * 100).toFixed(0)}% conflicts)` : '';
  const errs = a.errors > 0 ? ` [${a.errors} errors]` : '';
  return `${spreadText(a.opsPerSec, num)}/s${conflicts}${errs}${clientBoundNote(a)}`;
}

export function latencyText(a: PhaseAggregate | undefined): string {
  return a ? `${spreadText(a.p50Ms, ms)} / ${spreadText(a.p99Ms, ms)}` : '-';
}

/** Medians: load generator CPU / the three servers' CPU (% of a core), the leader's fsyncs per second @ mean ms. */
export function cpuText(a: PhaseAggregate | undefined): string {
  if (!a) return '-';
  const fs = a.leaderFsyncsPerSec.median;
  const fm = a.leaderFsyncMeanMs.median;
  const fsync = !Number.isFinite(fs) ? '-' : fs < 0.5 ? '0/s' : `${fs.toFixed(0)}/s @${fm.toFixed(1)}`;
  return `${a.loadgenCpuPct.median.toFixed(0)}%/${a.serverCpuPctTotal.median.toFixed(0)}%, ${fsync}`;
}

/** One table row of a KV phase: Cairn and etcd side by side, ratios of the medians. */
export function kvRow(label: string, c: PhaseAggregate | undefined, e: PhaseAggregate | undefined, target: Target | undefined): string[] {
  return [
    label,
    valueText(c),
    valueText(e),
    x(ratio(c?.opsPerSec.median, e?.opsPerSec.median)),
    latencyText(c),
    latencyText(e),
    x(ratio(c?.p99Ms.median, e?.p99Ms.median)),
    cpuText(c),
    cpuText(e),
    target?.text ?? '',
    target ? metText(target.met(c, e)) : '',
  ];
}

/** The row "server CPU per operation" of a phase: µs of the three servers' CPU per successful operation. */
export function cpuPerOpRow(label: string, c: PhaseAggregate | undefined, e: PhaseAggregate | undefined): string[] {
  const us = (a: PhaseAggregate | undefined): string => (a ? `${spreadText(a.serverCpuUsPerOp, (v) => num(v))} µs` : '-');
  const r = ratio(c?.serverCpuUsPerOp.median, e?.serverCpuUsPerOp.median);
  return [label, us(c), us(e), x(r), '', '', '', '', '', 'Cairn/etcd <= 1x', metText(Number.isFinite(r) ? r <= 1 : undefined)];
}
