/**
 * The run's report: a text summary and an SVG of throughput and latency over time with the
 * fault intervals shaded. Pure functions of the run's records.
 */
import type { Sample } from './workloads.js';

export interface FaultInterval {
  readonly start: number;
  readonly end: number;
  readonly label: string;
  readonly nemesis: string;
}

const COLORS: Record<string, string> = { partition: '#f4a3a3', kill: '#f7d08a', pause: '#b9d7f0', netem: '#c8e6c0' };
const esc = (s: string): string => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

/**
 * Two panels over the same time axis: completed operations per second (ok, and fail+info),
 * and each operation's latency as a dot (grey ok, red info) on a log scale. Faults shaded.
 */
export function renderSvg(samples: readonly Sample[], faults: readonly FaultInterval[], durationMs: number, title: string): string {
  const W = 960;
  const H = 520;
  const L = 60;
  const R = 20;
  const panelH = 190;
  const top1 = 40;
  const top2 = top1 + panelH + 50;
  const end = Math.max(durationMs, ...samples.map((s) => s.end), 1);
  const x = (t: number): number => L + ((W - L - R) * t) / end;
  const buckets = Math.max(1, Math.ceil(end / 1000));
  const okPer = new Array<number>(buckets).fill(0);
  const badPer = new Array<number>(buckets).fill(0);
  for (const s of samples) {
    const b = Math.min(buckets - 1, Math.floor(s.end / 1000));
    if (s.status === 'ok') okPer[b] = (okPer[b] ?? 0) + 1;
    else badPer[b] = (badPer[b] ?? 0) + 1;
  }
  const maxRate = Math.max(1, ...okPer, ...badPer);
  const yRate = (v: number): number => top1 + panelH - (panelH * v) / maxRate;
  const lats = samples.map((s) => Math.max(1, s.end - s.start));
  const maxLat = Math.max(10, ...lats);
  const yLat = (ms: number): number => top2 + panelH - (panelH * Math.log10(Math.max(1, ms))) / Math.log10(maxLat);
  const out: string[] = [];
  out.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="11">`);
  out.push(`<rect width="${W}" height="${H}" fill="white"/>`);
  out.push(`<text x="${L}" y="20" font-size="14">${esc(title)}</text>`);
  for (const f of faults) {
    const x0 = x(f.start);
    const x1 = x(Math.min(f.end, end));
    for (const top of [top1, top2]) {
      out.push(`<rect x="${x0.toFixed(1)}" y="${top}" width="${Math.max(1, x1 - x0).toFixed(1)}" height="${panelH}" fill="${COLORS[f.nemesis] ?? '#ddd'}" opacity="0.6"><title>${esc(f.label)}</title></rect>`);
    }
    out.push(`<text x="${(x0 + 2).toFixed(1)}" y="${top1 + 10}" font-size="9">${esc(f.nemesis)}</text>`);
  }
  const line = (vals: readonly number[], color: string): string =>
    `<polyline fill="none" stroke="${color}" stroke-width="1.5" points="${vals.map((v, i) => `${x(i * 1000 + 500).toFixed(1)},${yRate(v).toFixed(1)}`).join(' ')}"/>`;
  out.push(line(okPer, '#1f5fa8'), line(badPer, '#c0392b'));
  for (let i = 0; i < samples.length; i++) {
    const s = samples[i] as Sample;
    out.push(`<circle cx="${x(s.end).toFixed(1)}" cy="${yLat(lats[i] as number).toFixed(1)}" r="1.3" fill="${s.status === 'ok' ? '#555' : s.status === 'info' ? '#c0392b' : '#e67e22'}"/>`);
  }
  for (const [top, label] of [[top1, `ops/s (blue ok, red fail+info; max ${maxRate})`], [top2, `latency ms, log scale (max ${Math.round(maxLat)}); grey ok, orange fail, red info`]] as const) {
    out.push(`<rect x="${L}" y="${top}" width="${W - L - R}" height="${panelH}" fill="none" stroke="#333"/>`);
    out.push(`<text x="${L}" y="${top - 4}">${esc(label)}</text>`);
  }
  for (let s = 0; s <= end / 1000; s += Math.max(1, Math.ceil(end / 1000 / 15))) {
    out.push(`<text x="${x(s * 1000).toFixed(1)}" y="${top2 + panelH + 14}" text-anchor="middle">${s}s</text>`);
  }
  for (const ms of [1, 10, 100, 1000, 10000]) {
    if (ms > maxLat) break;
    out.push(`<text x="${L - 4}" y="${yLat(ms).toFixed(1)}" text-anchor="end">${ms}</text>`);
  }
  out.push(`<text x="${L - 4}" y="${yRate(maxRate) + 4}" text-anchor="end">${maxRate}</text><text x="${L - 4}" y="${top1 + panelH}" text-anchor="end">0</text>`);
  out.push('</svg>');
  return out.join('\n');
}

/** ok / fail / info counts of a list of samples. */
export function countStatuses(samples: readonly { readonly status: string }[]): { ops: number; ok: number; fail: number; info: number } {
  const c = { ops: samples.length, ok: 0, fail: 0, info: 0 };
  for (const s of samples) if (s.status === 'ok' || s.status === 'fail' || s.status === 'info') c[s.status]++;
  return c;
}
