/**
 * Where a Cairn node's memory goes (issue 18, item 1; bench/README.md "mem-load and
 * heap-summary"): a 3-node cluster of real agents, idle, then under CAS at 64 clients to the
 * leader, with every node's memory read at each step and a heap snapshot of every node at the
 * end.
 *
 *   node dist/bench/mem-load.js [--seconds 60] [--clients 64] [--dir PATH] [--no-snapshots]
 *   node dist/bench/mem-load.js --idle [--dir PATH]
 *
 * BENCH_CAIRN_NODE_FLAGS adds `node` flags to the agents, as for compare.js.
 *
 * --idle: one agent started as `make run` starts it (`--dev --controllers`), read after 30 s
 * and snapshotted, instead of the cluster.
 *
 * Each agent runs with `--heapsnapshot-signal=SIGUSR2` and the bench/mem-probe.ts preload
 * (process.memoryUsage() and the V8 heap spaces, every second). Memory is read: once the
 * cluster is up and idle for 5 s; after the 1,000-key preload; at the end of the load; then
 * each node gets SIGUSR2 in turn (heap snapshots are taken after every figure is read: writing
 * one grows the process's RSS by about the snapshot's size, and that growth stays). Prints a
 * table, with the resident memory of each kind of mapping (/proc/<pid>/smaps: the node binary
 * and other files, the main malloc heap, anonymous mappings: V8's heap pages, large
 * ArrayBuffers, the thread pool's malloc arenas), and a timeline every 10 s of the load, and
 * writes <dir>/mem-load.json; the snapshots stay in <dir>/heap/ for
 * `node dist/bench/heap-summary.js`. The data dirs are kept.
 */
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { mkdir, mkdtemp, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { flagValue } from './args.js';
import { freePorts, sleep, until } from './procs.js';
import { CairnSystem, KEY_COUNT } from './systems.js';
import { preload, runPhase } from './workload.js';

function positive(name: string, raw: string | undefined, fallback: number): number {
  if (raw === undefined) return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n <= 0) throw new Error(`${name} takes a positive whole number, got ${JSON.stringify(raw)}`);
  return n;
}

const argv = process.argv.slice(2);
const SECONDS = positive('--seconds', flagValue(argv, '--seconds'), 60);
const CLIENTS = positive('--clients', flagValue(argv, '--clients'), 64);
const SNAPSHOTS = !argv.includes('--no-snapshots');
const IDLE = argv.includes('--idle');
/** More `node` flags for the agents, as in compare.ts (e.g. "--max-semi-space-size=4"). */
const NODE_FLAGS = (process.env['BENCH_CAIRN_NODE_FLAGS'] ?? '').split(/\s+/).filter((f) => f !== '');
const MIB = 1024 * 1024;

interface ProbeSample {
  readonly atMs: number;
  readonly memoryUsage: NodeJS.MemoryUsage;
  readonly spaces: readonly { readonly space: string; readonly size: number; readonly used: number }[];
}

interface NodeMemory {
  readonly node: string;
  readonly pid: number;
  /** /proc/<pid>/status, kB. */
  readonly vmRssKb: number;
  readonly rssAnonKb: number;
  readonly rssFileKb: number;
  readonly threads: number;
  readonly probe: ProbeSample | undefined;
  readonly smaps: SmapsBreakdown;
}

function statusField(text: string, field: string): number {
  const m = new RegExp(`^${field}:\\s+(\\d+)`, 'm').exec(text);
  return m ? Number(m[1]) : Number.NaN;
}

/** Resident kB of each kind of mapping in /proc/<pid>/smaps, and the largest anonymous ones. */
export interface SmapsBreakdown {
  readonly binaryKb: number;
  readonly otherFilesKb: number;
  readonly brkHeapKb: number;
  readonly stacksKb: number;
  readonly anonKb: number;
  readonly anonMappings: number;
  /** The largest anonymous mappings by resident size: `rss of size kB`. */
  readonly largestAnon: readonly string[];
}

export function smapsBreakdown(text: string, binary: string): SmapsBreakdown {
  let binaryKb = 0;
  let otherFilesKb = 0;
  let brkHeapKb = 0;
  let stacksKb = 0;
  let anonKb = 0;
  let anonMappings = 0;
  const anon: { rss: number; size: number }[] = [];
  let kind = '';
  let size = 0;
  for (const line of text.split('\n')) {
    const header = /^[0-9a-f]+-[0-9a-f]+\s+\S+\s+\S+\s+\S+\s+\d+\s*(.*)$/.exec(line);
    if (header) {
      const p = (header[1] ?? '').trim();
      kind = p === '' ? 'anon' : p === '[heap]' ? 'brk' : p.startsWith('[stack') ? 'stack' : p === binary ? 'binary' : p.startsWith('/') ? 'file' : 'other';
      continue;
    }
    const sz = /^Size:\s+(\d+) kB/.exec(line);
    if (sz) size = Number(sz[1]);
    const m = /^Rss:\s+(\d+) kB/.exec(line);
    if (!m) continue;
    const rss = Number(m[1]);
    if (kind === 'anon') {
      anonKb += rss;
      anonMappings++;
      anon.push({ rss, size });
    } else if (kind === 'brk') brkHeapKb += rss;
    else if (kind === 'stack') stacksKb += rss;
    else if (kind === 'binary') binaryKb += rss;
    else if (kind === 'file') otherFilesKb += rss;
  }
  anon.sort((a, b) => b.rss - a.rss);
  return { binaryKb, otherFilesKb, brkHeapKb, stacksKb, anonKb, anonMappings, largestAnon: anon.slice(0, 8).map((a) => `${a.rss} of ${a.size} kB`) };
}

function readProbe(probeDir: string, pid: number): ProbeSample | undefined {
  const f = path.join(probeDir, `${pid}.json`);
  return existsSync(f) ? (JSON.parse(readFileSync(f, 'utf8')) as ProbeSample) : undefined;
}

function readNode(sys: { pid(i: number): number | undefined; readonly nodeNames: readonly string[] }, i: number, probeDir: string): NodeMemory {
  const pid = sys.pid(i);
  if (pid === undefined) throw new Error(`node ${sys.nodeNames[i] ?? i} has no process to measure`);
  const smaps = smapsBreakdown(readFileSync(`/proc/${pid}/smaps`, 'utf8'), process.execPath);
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  return {
    node: sys.nodeNames[i] as string,
    pid,
    vmRssKb: statusField(status, 'VmRSS'),
    rssAnonKb: statusField(status, 'RssAnon'),
    rssFileKb: statusField(status, 'RssFile'),
    threads: statusField(status, 'Threads'),
    probe: readProbe(probeDir, pid),
    smaps,
  };
}

/** Waits for the probe's next write (at most 1 s old data would mix phases). */
async function readAll(sys: { pid(i: number): number | undefined; readonly nodeNames: readonly string[] }, probeDir: string): Promise<NodeMemory[]> {
  const t = Date.now();
  await until('every node writes a fresh memory sample', 10_000, async () =>
    sys.nodeNames.every((_, i) => (readProbe(probeDir, sys.pid(i) ?? -1)?.atMs ?? 0) > t) ? true : undefined,
  );
  return sys.nodeNames.map((_, i) => readNode(sys, i, probeDir));
}

const mib = (b: number | undefined): string => (b === undefined || !Number.isFinite(b) ? '-' : (b / MIB).toFixed(1));

function table(label: string, rows: readonly NodeMemory[], leader: number): string {
  const out = [`${label}:`, '  node        RSS  anon  file  heapTotal  heapUsed  new(used/size)  old(used/size)  code  LO  external  arrayBuffers  threads   (MiB)'];
  rows.forEach((r, i) => {
    const u = r.probe?.memoryUsage;
    const sp = (name: string): string => {
      const s = r.probe?.spaces.find((x) => x.space === name);
      return s ? `${mib(s.used)}/${mib(s.size)}` : '-';
    };
    const lo = r.probe?.spaces.find((x) => x.space === 'large_object_space')?.used;
    out.push(
      `  ${(r.node + (i === leader ? '*' : '')).padEnd(6)} ${mib(r.vmRssKb * 1024).padStart(7)} ${mib(r.rssAnonKb * 1024).padStart(5)} ${mib(r.rssFileKb * 1024).padStart(5)} ${mib(u?.heapTotal).padStart(10)} ${mib(u?.heapUsed).padStart(9)} ${sp('new_space').padStart(15)} ${sp('old_space').padStart(15)} ${mib(r.probe?.spaces.find((x) => x.space === 'code_space')?.used).padStart(5)} ${mib(lo).padStart(4)} ${mib(u?.external).padStart(9)} ${mib(u?.arrayBuffers).padStart(13)} ${String(r.threads).padStart(8)}`,
    );
  });
  out.push('  resident by mapping (MiB): node binary / other files / malloc brk heap / stacks / anonymous (mappings); largest anonymous, kB');
  rows.forEach((r) => {
    const k = r.smaps;
    out.push(`  ${r.node.padEnd(6)} ${mib(k.binaryKb * 1024)} / ${mib(k.otherFilesKb * 1024)} / ${mib(k.brkHeapKb * 1024)} / ${mib(k.stacksKb * 1024)} / ${mib(k.anonKb * 1024)} (${k.anonMappings}); ${k.largestAnon.join(', ')}`);
  });
  return out.join('\n');
}

async function snapshot(sys: { pid(i: number): number | undefined; readonly nodeNames: readonly string[] }, i: number, heapDir: string): Promise<string> {
  const pid = sys.pid(i) as number;
  const before = new Set(readdirSync(heapDir));
  process.kill(pid, 'SIGUSR2');
  // The file appears at once and grows while V8 writes it; done when its size holds for 1 s.
  let last = -1;
  return until(`node ${sys.nodeNames[i] ?? i} writes its heap snapshot`, 120_000, async () => {
    const f = readdirSync(heapDir).find((n) => !before.has(n) && n.includes(`.${pid}.`) && n.endsWith('.heapsnapshot'));
    if (f === undefined) return undefined;
    const size = statSync(path.join(heapDir, f)).size;
    if (size > 0 && size === last) return path.join(heapDir, f);
    last = size;
    return undefined;
  }, () => `size ${last}`, 1_000);
}

/** One agent as `make run` starts it, on free ports, read after 30 s idle, then snapshotted. */
async function idleMain(dir: string, heapDir: string, probeDir: string, probe: string): Promise<void> {
  const [grpcPort, httpPort] = await freePorts(2);
  const bin = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'bin', 'cairn');
  const args = [...NODE_FLAGS, `--import=${probe}`, '--heapsnapshot-signal=SIGUSR2', `--diagnostic-dir=${heapDir}`, bin, 'agent', '--dev', '--controllers', '--data-dir', path.join(dir, 'data'), '--grpc-addr', `127.0.0.1:${String(grpcPort)}`, '--http-addr', `127.0.0.1:${String(httpPort)}`, '--log-level', 'warn'];
  const child = spawn(process.execPath, args, { stdio: ['ignore', 'ignore', 'inherit'], env: { ...process.env, MEM_PROBE_DIR: probeDir } });
  const one = { nodeNames: ['cairn1'], pid: () => child.pid };
  try {
    await until('the agent answers /readyz', 30_000, async () => {
      try {
        return (await fetch(`http://127.0.0.1:${String(httpPort)}/readyz`)).ok ? true : undefined;
      } catch {
        return undefined;
      }
    });
    await sleep(30_000);
    const idle = await readAll(one, probeDir);
    console.log(table('one idle agent (--dev --controllers, as make run), 30 s after it was ready', idle, 0));
    const file = await snapshot(one, 0, heapDir);
    const after = await readAll(one, probeDir);
    console.log(table('after its heap snapshot', after, 0));
    console.log(`  ${file}`);
    await writeFile(path.join(dir, 'mem-load.json'), JSON.stringify({ dir, idle, snapshot: file, afterSnapshot: after }, null, 2));
  } finally {
    child.kill('SIGTERM');
  }
}

async function main(): Promise<void> {
  const base = flagValue(argv, '--dir') ?? os.tmpdir();
  await mkdir(base, { recursive: true });
  const dir = await mkdtemp(path.join(base, 'cairn-mem-'));
  const heapDir = path.join(dir, 'heap');
  const probeDir = path.join(dir, 'probe');
  await mkdir(heapDir, { recursive: true });
  process.env['MEM_PROBE_DIR'] = probeDir;
  const probe = path.join(path.dirname(fileURLToPath(import.meta.url)), 'mem-probe.js');
  if (IDLE) {
    console.log(`mem-load --idle: one Cairn agent (node ${process.version}, ${os.cpus().length} cores, load average ${os.loadavg().map((l) => l.toFixed(1)).join(' ')}); node flags ${NODE_FLAGS.join(' ') || 'none'}; data in ${dir}`);
    await idleMain(dir, heapDir, probeDir, probe);
    return;
  }
  const nodeFlags = [...NODE_FLAGS, `--import=${probe}`, ...(SNAPSHOTS ? ['--heapsnapshot-signal=SIGUSR2', `--diagnostic-dir=${heapDir}`] : [])];
  console.log(`mem-load: 3 Cairn agents (node ${process.version}, ${os.cpus().length} cores, load average ${os.loadavg().map((l) => l.toFixed(1)).join(' ')}), CAS at ${CLIENTS} clients for ${SECONDS} s; node flags ${NODE_FLAGS.join(' ') || 'none'}; data in ${dir}`);
  const sys = await CairnSystem.start(dir, { nodeFlags });
  const result: Record<string, unknown> = { dir, seconds: SECONDS, clients: CLIENTS, loadAverageStart: os.loadavg() };
  try {
    const leader = await sys.waitHealthy();
    console.log(`leader ${sys.nodeNames[leader] ?? '?'}; pids ${sys.nodeNames.map((n, i) => `${n}=${String(sys.pid(i))}`).join(' ')}`);
    await sleep(5_000);
    const idle = await readAll(sys, probeDir);
    console.log(table('idle, 5 s after the cluster formed (* = leader)', idle, leader));
    await preload(sys, leader);
    const preloaded = await readAll(sys, probeDir);
    console.log(table(`after the preload (${KEY_COUNT} keys)`, preloaded, leader));
    const timeline: { readonly atS: number; readonly nodes: readonly { readonly rssMiB: number; readonly heapUsedMiB: number; readonly arrayBuffersMiB: number }[] }[] = [];
    const t0 = Date.now();
    const sampler = setInterval(() => {
      const nodes = sys.nodeNames.map((_, i) => {
        const r = readNode(sys, i, probeDir);
        return { rssMiB: r.vmRssKb / 1024, heapUsedMiB: (r.probe?.memoryUsage.heapUsed ?? Number.NaN) / MIB, arrayBuffersMiB: (r.probe?.memoryUsage.arrayBuffers ?? Number.NaN) / MIB };
      });
      const atS = Math.round((Date.now() - t0) / 1000);
      timeline.push({ atS, nodes });
      console.log(`  t=${String(atS).padStart(4)} s  RSS / heapUsed / arrayBuffers MiB: ${nodes.map((x, i) => `${sys.nodeNames[i] ?? i}${i === leader ? '*' : ''} ${x.rssMiB.toFixed(0)} / ${x.heapUsedMiB.toFixed(0)} / ${x.arrayBuffersMiB.toFixed(0)}`).join('   ')}`);
    }, 10_000);
    const phase = await runPhase(sys, { id: `cas-leader-${CLIENTS}`, kind: 'cas', clients: CLIENTS, target: 'leader', keys: KEY_COUNT }, leader, { warmupMs: 2_000, durationMs: SECONDS * 1000 });
    clearInterval(sampler);
    const loaded = await readAll(sys, probeDir);
    console.log(`load: ${phase.opsPerSec.toFixed(0)} CAS/s, p50 ${phase.latency.p50Ms.toFixed(1)} ms, p99 ${phase.latency.p99Ms.toFixed(1)} ms, errors ${phase.errors}`);
    console.log(table(`after ${SECONDS} s of CAS at ${CLIENTS} clients`, loaded, leader));
    Object.assign(result, { leader: sys.nodeNames[leader], idle, preloaded, loaded, timeline, opsPerSec: phase.opsPerSec, errors: phase.errors, loadAverageEnd: os.loadavg() });
    if (SNAPSHOTS) {
      const files: string[] = [];
      for (let i = 0; i < sys.nodeNames.length; i++) files.push(await snapshot(sys, i, heapDir));
      const after = await readAll(sys, probeDir);
      console.log(table('after the heap snapshots (their own cost is in RSS now)', after, leader));
      for (const f of files) console.log(`  ${f}`);
      Object.assign(result, { snapshots: files, afterSnapshots: after });
    }
  } finally {
    await writeFile(path.join(dir, 'mem-load.json'), JSON.stringify(result, null, 2));
    await sys.stop();
  }
  console.log(`wrote ${path.join(dir, 'mem-load.json')}`);
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) {
  main().catch((e: unknown) => {
    console.error(e);
    process.exitCode = 1;
  });
}
