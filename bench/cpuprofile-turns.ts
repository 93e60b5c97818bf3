/**
 * When processes run, from their V8 CPU profiles (`node --cpu-prof` writes *.cpuprofile): the
 * busy stretches of each process's main thread (consecutive samples that are not "(idle)"),
 * how long they last, what code fills the long ones, and, for two or more profiles of the same
 * run, how much of the time they were busy together: whether a load generator and a leader
 * overlap or take turns (docs/performance.md, "Why the rest is not met").
 *
 *   node dist/bench/cpuprofile-turns.js A.cpuprofile [B.cpuprofile ...] [--from S] [--to S] [--long MS]
 *
 * --from/--to: seconds after the earliest profile's start (V8 stamps profiles with the
 * monotonic clock, the same for every process on the machine, so the profiles line up).
 * --long: a busy stretch at least this long (ms, default 5) counts as a long turn.
 * Take the profiles with a short sampling interval (`--cpu-prof-interval 200`, in µs):
 * a stretch is only as precise as one interval.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import type { CallFrame, CpuProfile } from './cpuprofile.js';


/** What a sample's own frame belongs to: a package, a part of Node, a module of ours, or V8. */
export function categorize(frame: CallFrame): string {
  const { functionName, url } = frame;
  if (functionName === '(idle)') return '';
  if (functionName === '(garbage collector)') return 'garbage collector';
  if (functionName === '(program)') return 'native (program)';
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (pkg) return pkg[1] as string;
  const node = /^node:internal\/([a-z0-9_]+)/.exec(url);
  if (node) return `node:${node[1] as string}`;
  if (url.startsWith('node:')) return url;
  const ours = /\/(src|bench)\/([a-z0-9-]+)\//.exec(url);
  if (ours) return `${ours[1] as string}/${ours[2] as string}`;
  return url === '' ? functionName || '(anonymous native)' : path.basename(url);
}

/** One sample: the interval it stands for (µs, the profile's clock) and what ran ('' when idle). */
export interface Sample {
  readonly startUs: number;
  readonly us: number;
  readonly category: string;
}

export function samplesOf(profile: CpuProfile): Sample[] {
  const byId = new Map(profile.nodes.map((n) => [n.id, categorize(n.callFrame)]));
  const out: Sample[] = [];
  let us = profile.startTime;
  for (const [i, id] of profile.samples.entries()) {
    const startUs = us;
    us += profile.timeDeltas[i] ?? 0;
    out.push({ startUs, us, category: byId.get(id) ?? '?' });
  }
  return out;
}

/** A busy stretch: from its first busy sample's interval to its last one's end. */
export interface Stretch {
  readonly fromUs: number;
  readonly toUs: number;
  readonly categories: ReadonlyMap<string, number>;
}

export function stretchesOf(samples: readonly Sample[], fromUs: number, toUs: number): Stretch[] {
  const out: Stretch[] = [];
  let start: number | undefined;
  let end = 0;
  let cats = new Map<string, number>();
  for (const s of samples) {
    if (s.us <= fromUs) continue;
    if (s.startUs >= toUs) break;
    if (s.category === '') {
      if (start !== undefined) out.push({ fromUs: start, toUs: end, categories: cats });
      start = undefined;
      cats = new Map();
      continue;
    }
    if (start === undefined) start = Math.max(s.startUs, fromUs);
    end = Math.min(s.us, toUs);
    cats.set(s.category, (cats.get(s.category) ?? 0) + (s.us - s.startUs));
  }
  if (start !== undefined) out.push({ fromUs: start, toUs: end, categories: cats });
  return out;
}

/** Microseconds in [fromUs, toUs] during which every one of the given stretch lists is busy. */
export function busyTogetherUs(lists: readonly (readonly Stretch[])[], fromUs: number, toUs: number, stepUs = 50): number {
  let together = 0;
  const idx = lists.map(() => 0);
  for (let t = fromUs; t < toUs; t += stepUs) {
    let all = true;
    for (const [k, list] of lists.entries()) {
      let i = idx[k] as number;
      while (i < list.length && (list[i] as Stretch).toUs <= t) i++;
      idx[k] = i;
      const st = list[i];
      if (st === undefined || st.fromUs > t) all = false;
    }
    if (all) together += stepUs;
  }
  return together;
}

function quantile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] as number;
}

function main(): void {
  const argv = process.argv.slice(2);
  const flag = (name: string, dflt: number): number => {
    const i = argv.indexOf(name);
    return i >= 0 ? Number(argv[i + 1]) : dflt;
  };
  const files = argv.filter((a, i) => !a.startsWith('--') && !(i > 0 && (argv[i - 1] ?? '').startsWith('--')));
  if (files.length === 0) {
    process.stderr.write('usage: node dist/bench/cpuprofile-turns.js A.cpuprofile [B.cpuprofile ...] [--from S] [--to S] [--long MS]\n');
    process.exit(2);
  }
  const longUs = flag('--long', 5) * 1000;
  const profiles = files.map((f) => ({ file: f, profile: JSON.parse(readFileSync(f, 'utf8')) as CpuProfile }));
  const t0 = Math.min(...profiles.map((p) => p.profile.startTime));
  const fromUs = t0 + flag('--from', 0) * 1e6;
  const toUs = Math.min(t0 + flag('--to', Number.POSITIVE_INFINITY) * 1e6, ...profiles.map((p) => p.profile.endTime));
  const windowMs = (toUs - fromUs) / 1000;
  process.stdout.write(`window: ${windowMs.toFixed(0)} ms (from ${((fromUs - t0) / 1e6).toFixed(2)} s after the earliest profile began)\n\n`);
  const all: Stretch[][] = [];
  for (const { file, profile } of profiles) {
    const stretches = stretchesOf(samplesOf(profile), fromUs, toUs);
    all.push(stretches);
    const lens = stretches.map((s) => (s.toUs - s.fromUs) / 1000).sort((a, b) => a - b);
    const busyMs = lens.reduce((a, b) => a + b, 0);
    const long = stretches.filter((s) => s.toUs - s.fromUs >= longUs);
    const longMs = long.reduce((a, s) => a + (s.toUs - s.fromUs) / 1000, 0);
    process.stdout.write(`${path.basename(file)}: busy ${((100 * busyMs) / windowMs).toFixed(1)}% of the window in ${stretches.length} stretches; `);
    process.stdout.write(`length p50 ${quantile(lens, 0.5).toFixed(2)} p90 ${quantile(lens, 0.9).toFixed(2)} p99 ${quantile(lens, 0.99).toFixed(2)} max ${(lens[lens.length - 1] ?? 0).toFixed(2)} ms; `);
    process.stdout.write(`stretches of ${longUs / 1000} ms or more: ${long.length}, ${busyMs > 0 ? ((100 * longMs) / busyMs).toFixed(0) : '0'}% of the busy time\n`);
    const share = (list: readonly Stretch[]): Map<string, number> => {
      const m = new Map<string, number>();
      for (const s of list) for (const [c, us] of s.categories) m.set(c, (m.get(c) ?? 0) + us);
      return m;
    };
    const inLong = share(long);
    const inAll = share(stretches);
    const total = (m: Map<string, number>): number => [...m.values()].reduce((a, b) => a + b, 0) || 1;
    const top = [...inAll.entries()].sort((a, b) => b[1] - a[1]).slice(0, 12);
    process.stdout.write('  what runs (share of busy time: all stretches / long ones)\n');
    for (const [c, us] of top) {
      process.stdout.write(`    ${((100 * us) / total(inAll)).toFixed(1).padStart(5)}% / ${((100 * (inLong.get(c) ?? 0)) / total(inLong)).toFixed(1).padStart(5)}%  ${c}\n`);
    }
  }
  if (all.length >= 2) {
    process.stdout.write('\nbusy together (share of the window):\n');
    for (let a = 0; a < all.length; a++) {
      for (let b = a + 1; b < all.length; b++) {
        const both = busyTogetherUs([all[a] as Stretch[], all[b] as Stretch[]], fromUs, toUs) / 1000;
        process.stdout.write(`  ${path.basename(files[a] as string)} + ${path.basename(files[b] as string)}: ${((100 * both) / windowMs).toFixed(1)}%\n`);
      }
    }
  }
}

if (import.meta.url === `file://${process.argv[1] ?? ''}`) main();
