/**
 * Benchmark reporting: the machine, progress lines with elapsed time, medians and
 * percentiles, and a plain-text table.
 */
import { statfs } from 'node:fs/promises';
import os from 'node:os';
import { performance } from 'node:perf_hooks';

export interface Machine {
  readonly cpus: number;
  readonly cpuModel: string;
  readonly memoryGiB: number;
  readonly node: string;
  readonly platform: string;
  readonly kernel: string;
  readonly disk: { readonly path: string; readonly filesystem: string };
  readonly heapLimitMiB: number;
}

const FS_TYPES = new Map<number, string>([
  [0xef53, 'ext2/3/4'],
  [0x58465342, 'xfs'],
  [0x9123683e, 'btrfs'],
  [0x01021994, 'tmpfs'],
  [0x794c7630, 'overlayfs'],
  [0x6969, 'nfs'],
  [0x2fc12fc1, 'zfs'],
]);

export async function describeMachine(diskPath: string, heapLimitBytes: number): Promise<Machine> {
  const cpus = os.cpus();
  let filesystem = 'unknown';
  try {
    const s = await statfs(diskPath);
    filesystem = FS_TYPES.get(s.type) ?? `type 0x${s.type.toString(16)}`;
  } catch {
    // statfs is not available everywhere; the path is still reported.
  }
  return {
    cpus: cpus.length,
    cpuModel: cpus[0]?.model.trim() ?? 'unknown',
    memoryGiB: Math.round((os.totalmem() / 2 ** 30) * 10) / 10,
    node: process.version,
    platform: `${process.platform}-${process.arch}`,
    kernel: os.release(),
    disk: { path: diskPath, filesystem },
    heapLimitMiB: Math.round(heapLimitBytes / 2 ** 20),
  };
}

/** Prints one line when a phase starts and one when it ends, each with the time since the run began. */
export class Progress {
  private readonly began = performance.now();

  private stamp(): string {
    return `[${((performance.now() - this.began) / 1000).toFixed(1).padStart(6)} s]`;
  }

  line(text: string): void {
    process.stdout.write(`${this.stamp()} ${text}\n`);
  }

  async phase<T>(name: string, fn: () => Promise<T> | T): Promise<T> {
    this.line(`${name} ...`);
    const started = performance.now();
    const out = await fn();
    this.line(`${name}: done in ${((performance.now() - started) / 1000).toFixed(2)} s`);
    return out;
  }
}

export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  if (s.length === 0) return Number.NaN;
  const mid = Math.floor(s.length / 2);
  return s.length % 2 === 1 ? (s[mid] ?? Number.NaN) : ((s[mid - 1] ?? 0) + (s[mid] ?? 0)) / 2;
}

/** Nearest-rank percentile of an already sorted array (p in 0..100). */
export function percentileSorted(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.min(sorted.length, Math.max(1, Math.ceil((p / 100) * sorted.length)));
  return sorted[rank - 1] ?? Number.NaN;
}

export interface Row {
  readonly measure: string;
  readonly value: string;
  readonly notes: string;
}

export function formatTable(rows: readonly Row[]): string {
  const head: Row = { measure: 'measure', value: 'value', notes: 'notes' };
  const all = [head, ...rows];
  const w1 = Math.max(...all.map((r) => r.measure.length));
  const w2 = Math.max(...all.map((r) => r.value.length));
  const line = (r: Row): string => `| ${r.measure.padEnd(w1)} | ${r.value.padStart(w2)} | ${r.notes} |`;
  const rule = `|${'-'.repeat(w1 + 2)}|${'-'.repeat(w2 + 1)}:|---|`;
  return [line(head), rule, ...rows.map(line)].join('\n');
}

/** 1234567 -> "1,234,567"; fractions to `digits` places. */
export function num(n: number, digits = 0): string {
  return n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

export function mib(bytes: number): string {
  return `${(bytes / 2 ** 20).toFixed(1)} MiB`;
}

/** A Markdown table with any columns; `right` marks the right-aligned (numeric) ones. */
export function formatColumns(headers: readonly string[], rows: readonly (readonly string[])[], right: readonly boolean[] = []): string {
  const widths = headers.map((h, c) => Math.max(h.length, ...rows.map((r) => (r[c] ?? '').length)));
  const cell = (s: string, c: number): string => (right[c] === true ? s.padStart(widths[c] ?? 0) : s.padEnd(widths[c] ?? 0));
  const line = (r: readonly string[]): string => `| ${headers.map((_, c) => cell(r[c] ?? '', c)).join(' | ')} |`;
  const rule = `|${widths.map((w, c) => `${'-'.repeat(w + 1)}${right[c] === true ? ':' : '-'}`).join('|')}|`;
  return [line(headers), rule, ...rows.map(line)].join('\n');
}

/** A plain-text table with a header row; the first column and those listed in `leftAligned` are left-aligned, the rest right-aligned. */
export function formatAligned(head: readonly string[], rows: readonly (readonly string[])[], leftAligned: readonly number[] = [0]): string {
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const left = (i: number): boolean => leftAligned.includes(i);
  const line = (r: readonly string[]): string => `| ${widths.map((w, i) => (left(i) ? (r[i] ?? '').padEnd(w) : (r[i] ?? '').padStart(w))).join(' | ')} |`;
  const rule = `|${widths.map((w, i) => (left(i) ? '-'.repeat(w + 2) : `${'-'.repeat(w + 1)}:`)).join('|')}|`;
  return [line(head), rule, ...rows.map(line)].join('\n');
}
