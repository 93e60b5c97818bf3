/**
 * The hot spots of a V8 CPU profile (`node --cpu-prof` writes *.cpuprofile): self time per
 * function and per file, as a share of the busy samples (everything but "(idle)").
 *
 *   node dist/bench/cpuprofile-top.js FILE.cpuprofile [--top 25] [--from S] [--to S]
 *
 * --from/--to keep the samples taken between S seconds after the profile began (the process
 * start) and --to seconds: the measured window without start-up and shutdown.
 * Used on a Cairn leader under load (bench/README.md, "Profiling the leader").
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import type { CpuProfile } from './cpuprofile.js';


const argv = process.argv.slice(2);
const file = argv.find((a) => !a.startsWith('--'));
const topIdx = argv.indexOf('--top');
const TOP = topIdx >= 0 ? Number(argv[topIdx + 1]) : 25;
const secondsFlag = (name: string, dflt: number): number => {
  const i = argv.indexOf(name);
  return i >= 0 ? Number(argv[i + 1]) : dflt;
};
const FROM_S = secondsFlag('--from', 0);
const TO_S = secondsFlag('--to', Number.POSITIVE_INFINITY);
if (file === undefined) {
  process.stderr.write('usage: node dist/bench/cpuprofile-top.js FILE.cpuprofile [--top N]\n');
  process.exit(2);
}

const profile = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;
const hits = new Map<number, number>();
let tUs = 0;
let firstUs = Number.POSITIVE_INFINITY;
let lastUs = 0;
for (const [i, id] of profile.samples.entries()) {
  tUs += profile.timeDeltas[i] ?? 0;
  if (tUs < FROM_S * 1e6 || tUs > TO_S * 1e6) continue;
  firstUs = Math.min(firstUs, tUs);
  lastUs = tUs;
  hits.set(id, (hits.get(id) ?? 0) + 1);
}

/** Where a frame's code lives, short: the package for node_modules, else the path under the checkout. */
function where(url: string): string {
  if (url === '') return '';
  const p = url.replace(/^file:\/\//, '');
  const nm = p.lastIndexOf('node_modules/');
  if (nm >= 0) return p.slice(nm + 'node_modules/'.length);
  const dist = p.lastIndexOf('/dist/');
  if (dist >= 0) return p.slice(dist + '/dist/'.length);
  return p.startsWith('node:') ? p : path.basename(p);
}

/** `@grpc/grpc-js/build/src/x.js` -> `@grpc/grpc-js (package)`. */
function packageOf(loc: string): string {
  const parts = loc.split('/');
  return `${(loc.startsWith('@') ? parts.slice(0, 2) : parts.slice(0, 1)).join('/')} (package)`;
}

const byFunction = new Map<string, number>();
const byFile = new Map<string, number>();
let total = 0;
let idle = 0;
for (const n of profile.nodes) {
  const h = hits.get(n.id) ?? 0;
  if (h === 0) continue;
  total += h;
  const f = n.callFrame;
  if (f.functionName === '(idle)') {
    idle += h;
    continue;
  }
  const loc = where(f.url);
  const key = `${f.functionName || '(anonymous)'} ${loc !== '' ? `${loc}:${(f.lineNumber ?? 0) + 1}` : ''}`.trim();
  byFunction.set(key, (byFunction.get(key) ?? 0) + h);
  const fileKey = loc === '' ? f.functionName : f.url.includes('node_modules/') ? packageOf(loc) : loc;
  byFile.set(fileKey, (byFile.get(fileKey) ?? 0) + h);
}
const busy = total - idle;
const seconds = Number.isFinite(firstUs) ? (lastUs - firstUs) / 1e6 : 0;
const pct = (h: number): string => `${((h / Math.max(1, busy)) * 100).toFixed(1).padStart(5)}%`;
const out: string[] = [
  `${file}: ${seconds.toFixed(1)} s of ${((profile.endTime - profile.startTime) / 1e6).toFixed(1)} s (from ${FROM_S} s), ${total} samples, busy ${((busy / Math.max(1, total)) * 100).toFixed(1)}% (the rest idle)`,
  '',
  `top ${TOP} functions by self time (% of busy samples):`,
  ...[...byFunction].sort((a, b) => b[1] - a[1]).slice(0, TOP).map(([k, h]) => `  ${pct(h)}  ${k}`),
  '',
  `top ${TOP} files / packages by self time:`,
  ...[...byFile].sort((a, b) => b[1] - a[1]).slice(0, TOP).map(([k, h]) => `  ${pct(h)}  ${k}`),
  '',
];
process.stdout.write(out.join('\n'));
