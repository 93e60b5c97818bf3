/**
 * A small SVG line chart for benchmark results: a few series over a shared x axis, log or
 * linear scales, no dependencies. The output is a standalone file a browser or a Markdown
 * viewer shows as it is.
 */

export interface ChartPoint {
  readonly x: number;
  readonly y: number;
  /** The true value is at least y (drawn hollow, labelled ">="). */
  readonly lowerBound?: boolean;
}

export interface ChartSeries {
  readonly name: string;
  readonly points: readonly ChartPoint[];
  /** A CSS colour; default from a fixed palette. */
  readonly color?: string;
  /** Dashed line (e.g. p50 beside a solid p99). */
  readonly dashed?: boolean;
}

export interface ChartOptions {
  readonly title: string;
  readonly subtitle?: string;
  readonly xLabel: string;
  readonly yLabel: string;
  readonly xLog?: boolean;
  readonly yLog?: boolean;
  readonly series: readonly ChartSeries[];
  /** Short lines printed under the legend (what the points cannot show). */
  readonly notes?: readonly string[];
  /** Pixels. Default 720 x 420. */
  readonly width?: number;
  readonly height?: number;
}

const PALETTE = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b'];

const esc = (s: string): string => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

/** Tick values: 1-2-5 steps per decade on a log axis, about six round steps on a linear one. */
export function ticks(lo: number, hi: number, log: boolean): number[] {
  if (log) {
    const out: number[] = [];
    for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) {
      // 1-2-5 steps; only powers of ten over more than three decades, where they would crowd.
      for (const m of hi / lo > 1e3 ? [1] : [1, 2, 5]) {
        const v = m * 10 ** e;
        if (v >= lo * 0.999 && v <= hi * 1.001) out.push(v);
      }
    }
    return out;
  }
  const span = hi - lo || 1;
  const raw = span / 6;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = ([1, 2, 5, 10].find((m) => m * mag >= raw) ?? 10) * mag;
  const out: number[] = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)));
  return out;
}

function label(v: number): string {
  if (v !== 0 && (Math.abs(v) >= 1e6 || Math.abs(v) < 1e-3)) return v.toExponential(0);
  return v.toLocaleString('en-US', { maximumFractionDigits: 3 });
}

/** Bounds padded to whole decades (log) or by 5% (linear), covering every finite point. */
function bounds(vals: readonly number[], log: boolean): [number, number] {
  const ok = vals.filter((v) => Number.isFinite(v) && (!log || v > 0));
  if (ok.length === 0) return log ? [1, 10] : [0, 1];
  let lo = Math.min(...ok);
  let hi = Math.max(...ok);
  if (log) return [10 ** Math.floor(Math.log10(lo)), 10 ** Math.ceil(Math.log10(hi) + (hi === lo ? 1 : 0))];
  if (lo > 0 && lo < hi * 0.5) lo = 0;
  const pad = (hi - lo || Math.abs(hi) || 1) * 0.05;
  lo = lo === 0 ? 0 : lo - pad;
  hi += pad;
  return [lo, hi];
}

/** The chart as an SVG document. Points that are not finite (or not positive on a log axis) are left out. */
export function lineChartSvg(o: ChartOptions): string {
  const W = o.width ?? 820;
  const H = o.height ?? 420;
  const m = { left: 72, right: 230, top: o.subtitle !== undefined ? 56 : 40, bottom: 52 };
  const pw = W - m.left - m.right;
  const ph = H - m.top - m.bottom;
  const xLog = o.xLog === true;
  const yLog = o.yLog === true;
  const all = o.series.flatMap((s) => s.points);
  const [x0, x1] = bounds(
    all.map((p) => p.x),
    xLog,
  );
  const [y0, y1] = bounds(
    all.map((p) => p.y),
    yLog,
  );
  const f = (v: number, lo: number, hi: number, log: boolean): number => (log ? (Math.log10(v) - Math.log10(lo)) / (Math.log10(hi) - Math.log10(lo)) : (v - lo) / (hi - lo || 1));
  const px = (x: number): number => m.left + f(x, x0, x1, xLog) * pw;
  const py = (y: number): number => m.top + ph - f(y, y0, y1, yLog) * ph;
  const usable = (p: ChartPoint): boolean => Number.isFinite(p.x) && Number.isFinite(p.y) && (!xLog || p.x > 0) && (!yLog || p.y > 0);
  const r = (n: number): string => n.toFixed(1);

  const out: string[] = [];
  out.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`);
  out.push(`<rect width="${W}" height="${H}" fill="white"/>`);
  out.push(`<text x="${m.left}" y="22" font-size="15" font-weight="bold">${esc(o.title)}</text>`);
  if (o.subtitle !== undefined) out.push(`<text x="${m.left}" y="40" fill="#555">${esc(o.subtitle)}</text>`);
  // Grid and tick labels.
  for (const t of ticks(x0, x1, xLog)) {
    const x = px(t);
    out.push(`<line x1="${r(x)}" y1="${m.top}" x2="${r(x)}" y2="${m.top + ph}" stroke="#e5e5e5"/>`);
    out.push(`<text x="${r(x)}" y="${m.top + ph + 16}" text-anchor="middle">${esc(label(t))}</text>`);
  }
  for (const t of ticks(y0, y1, yLog)) {
    const y = py(t);
    out.push(`<line x1="${m.left}" y1="${r(y)}" x2="${m.left + pw}" y2="${r(y)}" stroke="#e5e5e5"/>`);
    out.push(`<text x="${m.left - 6}" y="${r(y + 4)}" text-anchor="end">${esc(label(t))}</text>`);
  }
  out.push(`<rect x="${m.left}" y="${m.top}" width="${pw}" height="${ph}" fill="none" stroke="#333"/>`);
  out.push(`<text x="${m.left + pw / 2}" y="${H - 12}" text-anchor="middle">${esc(o.xLabel)}${xLog ? ' (log scale)' : ''}</text>`);
  out.push(`<text transform="translate(16 ${m.top + ph / 2}) rotate(-90)" text-anchor="middle">${esc(o.yLabel)}${yLog ? ' (log scale)' : ''}</text>`);
  // Series and legend.
  o.series.forEach((s, i) => {
    const color = s.color ?? PALETTE[i % PALETTE.length] ?? '#000';
    const pts = s.points.filter(usable);
    const dash = s.dashed === true ? ' stroke-dasharray="6 4"' : '';
    if (pts.length > 1) out.push(`<polyline fill="none" stroke="${color}" stroke-width="2"${dash} points="${pts.map((p) => `${r(px(p.x))},${r(py(p.y))}`).join(' ')}"/>`);
    for (const p of pts) {
      const fill = p.lowerBound === true ? `white" stroke="${color}" stroke-width="2` : color;
      out.push(`<circle cx="${r(px(p.x))}" cy="${r(py(p.y))}" r="${p.lowerBound === true ? 5 : 3.5}" fill="${fill}"><title>${esc(`${s.name}: ${label(p.x)} -> ${p.lowerBound === true ? '>= ' : ''}${label(p.y)}`)}</title></circle>`);
    }
    const ly = m.top + 8 + i * 20;
    const lx = m.left + pw + 14;
    out.push(`<line x1="${lx}" y1="${ly}" x2="${lx + 24}" y2="${ly}" stroke="${color}" stroke-width="2"${dash}/>`);
    out.push(`<text x="${lx + 30}" y="${ly + 4}">${esc(s.name)}</text>`);
  });
  const notes = [...(all.some((p) => p.lowerBound === true) ? ['hollow: at least this', '(not all delivered)'] : []), ...(o.notes ?? [])];
  notes.forEach((n, i) => out.push(`<text x="${m.left + pw + 14}" y="${m.top + 16 + o.series.length * 20 + i * 15}" fill="#555">${esc(n)}</text>`));
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}
