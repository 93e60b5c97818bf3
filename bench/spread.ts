/** The median and range of a measure over repeated runs (aggregate.ts, breakdown.ts). */

/** The median and the range of one measure over several runs; `values` in run order (NaN kept). */
export interface Spread {
  readonly median: number;
  readonly min: number;
  readonly max: number;
  readonly values: readonly number[];
}

/** Median (the mean of the middle two for an even count) and range of the finite values. */
export function spreadOf(values: readonly number[]): Spread {
  const finite = values.filter((v) => Number.isFinite(v)).sort((a, b) => a - b);
  if (finite.length === 0) return { median: Number.NaN, min: Number.NaN, max: Number.NaN, values: [...values] };
  const mid = Math.floor(finite.length / 2);
  const median = finite.length % 2 === 1 ? (finite[mid] as number) : ((finite[mid - 1] as number) + (finite[mid] as number)) / 2;
  return { median, min: finite[0] as number, max: finite[finite.length - 1] as number, values: [...values] };
}

/** "median (min-max)", or the median alone for one run or when every run agrees to the format. */
export function spreadText(s: Spread, fmt: (n: number) => string): string {
  if (!Number.isFinite(s.median)) return '-';
  const lo = fmt(s.min);
  const hi = fmt(s.max);
  return lo === hi ? fmt(s.median) : `${fmt(s.median)} (${lo}-${hi})`;
}
