/**
 * The side-by-side chart: CAS throughput (left) and p99 latency (right, log scale) by number of
 * concurrent clients, one line per system and placement (to the leader, spread over all nodes):
 * the line joins the medians of the runs, and a bar at each point spans the lowest to the
 * highest run. Plain SVG, no dependencies.
 */

export interface Series {
  readonly label: string;
  readonly color: string;
  readonly dashed: boolean;
  /** [clients, value]: the median of the runs. */
  readonly points: readonly (readonly [number, number])[];
  /** [clients, lowest run, highest run]: drawn as a bar through the point. */
  readonly ranges?: readonly (readonly [number, number, number])[];
}

const W = 460;
const H = 300;
const M = { left: 64, right: 26, top: 34, bottom: 46 };

const esc = (s: string): string => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
const fmt = (n: number): string => (n >= 1000 ? `${Math.round(n / 100) / 10}k` : n >= 10 ? String(Math.round(n)) : String(Math.round(n * 10) / 10));

function panel(x0: number, title: string, yLabel: string, clients: readonly number[], series: readonly Series[], log: boolean): string {
  const values = series.flatMap((s) => [...s.points.map((p) => p[1]), ...(s.ranges ?? []).flatMap((r) => [r[1], r[2]])]).filter((v) => Number.isFinite(v) && v > 0);
  const pw = W - M.left - M.right;
  const ph = H - M.top - M.bottom;
  let lo: number;
  let hi: number;
  let ticks: number[];
  if (log) {
    lo = 10 ** Math.floor(Math.log10(Math.min(...values, 1)));
    hi = 10 ** Math.ceil(Math.log10(Math.max(...values, 10)));
    ticks = [];
    for (let t = lo; t <= hi * 1.0001; t *= 10) ticks.push(t);
  } else {
    lo = 0;
    const max = Math.max(...values, 1);
    const step = 10 ** Math.floor(Math.log10(max));
    const unit = max / step > 5 ? step * 2 : max / step > 2 ? step : step / 2;
    hi = Math.ceil(max / unit) * unit;
    ticks = [];
    for (let t = 0; t <= hi * 1.0001; t += unit) ticks.push(t);
  }
  const y = (v: number): number => {
    const f = log ? (Math.log10(v) - Math.log10(lo)) / (Math.log10(hi) - Math.log10(lo)) : (v - lo) / (hi - lo);
    return M.top + ph * (1 - f);
  };
  const x = (c: number): number => {
    const i = clients.indexOf(c);
    return M.left + (clients.length <= 1 ? pw / 2 : (pw * i) / (clients.length - 1));
  };
  const out: string[] = [`<g transform="translate(${x0},0)">`];
  out.push(`<text x="${M.left + pw / 2}" y="20" text-anchor="middle" font-weight="bold">${esc(title)}</text>`);
  for (const t of ticks) {
    out.push(`<line x1="${M.left}" x2="${M.left + pw}" y1="${y(t)}" y2="${y(t)}" stroke="#ddd"/>`);
    out.push(`<text x="${M.left - 6}" y="${y(t) + 4}" text-anchor="end">${fmt(t)}</text>`);
  }
  for (const c of clients) out.push(`<text x="${x(c)}" y="${M.top + ph + 16}" text-anchor="middle">${c}</text>`);
  out.push(`<text x="${M.left + pw / 2}" y="${H - 10}" text-anchor="middle">concurrent clients</text>`);
  out.push(`<text transform="translate(14,${M.top + ph / 2}) rotate(-90)" text-anchor="middle">${esc(yLabel)}</text>`);
  out.push(`<rect x="${M.left}" y="${M.top}" width="${pw}" height="${ph}" fill="none" stroke="#999"/>`);
  for (const s of series) {
    const pts = s.points.filter((p) => Number.isFinite(p[1]) && p[1] > 0 && clients.includes(p[0]));
    if (pts.length === 0) continue;
    const d = pts.map((p, i) => `${i === 0 ? 'M' : 'L'}${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(' ');
    out.push(`<path d="${d}" fill="none" stroke="${s.color}" stroke-width="2"${s.dashed ? ' stroke-dasharray="6,4"' : ''}/>`);
    for (const p of pts) out.push(`<circle cx="${x(p[0]).toFixed(1)}" cy="${y(p[1]).toFixed(1)}" r="3" fill="${s.color}"/>`);
    // The spread of the runs: a vertical bar with caps, nudged aside so two systems' bars do not overlap.
    const nudge = s.dashed ? 4 : -4;
    for (const [c, lo, hi] of s.ranges ?? []) {
      if (!clients.includes(c) || !Number.isFinite(lo) || !Number.isFinite(hi) || lo <= 0 || hi <= 0 || hi <= lo) continue;
      const cx = (x(c) + nudge).toFixed(1);
      const y0 = y(lo).toFixed(1);
      const y1 = y(hi).toFixed(1);
      out.push(
        `<path class="range" d="M${cx},${y0} L${cx},${y1} M${(x(c) + nudge - 3).toFixed(1)},${y0} L${(x(c) + nudge + 3).toFixed(1)},${y0} M${(x(c) + nudge - 3).toFixed(1)},${y1} L${(x(c) + nudge + 3).toFixed(1)},${y1}" stroke="${s.color}" stroke-width="1.2" opacity="0.7"/>`,
      );
    }
  }
  out.push('</g>');
  return out.join('\n');
}

export function renderChart(opts: { readonly title: string; readonly clients: readonly number[]; readonly throughput: readonly Series[]; readonly p99: readonly Series[] }): string {
  const legendY = H + 8;
  const legend = opts.throughput
    .map((s, i) => {
      const lx = 70 + i * 210;
      return (
        `<line x1="${lx}" x2="${lx + 28}" y1="${legendY + 10}" y2="${legendY + 10}" stroke="${s.color}" stroke-width="2"${s.dashed ? ' stroke-dasharray="6,4"' : ''}/>` +
        `<text x="${lx + 34}" y="${legendY + 14}">${esc(s.label)}</text>`
      );
    })
    .join('\n');
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${2 * W}" height="${H + 60}" font-family="sans-serif" font-size="12">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="${W}" y="${H + 50}" text-anchor="middle" fill="#555">${esc(opts.title)} (lines: medians of the runs; bars: lowest to highest run)</text>`,
    panel(0, 'CAS writes: throughput (ops/s)', 'ops/s', opts.clients, opts.throughput, false),
    panel(W, 'CAS writes: p99 latency (ms, log scale)', 'ms', opts.clients, opts.p99, true),
    legend,
    '</svg>',
    '',
  ].join('\n');
}
