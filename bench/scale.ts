/**
 * The scale of the data (`make bench-scale`; issue 18, item 3).
 *
 *   node dist/bench/scale.js [--quick] [--scales 10000,100000,1000000] [--systems cairn,etcd]
 *                            [--dir PATH] [--keep] [--in-flight 256] [--etcd-batch 1]
 *
 * For each scale N (default 10k, 100k and 1M; --quick 10k and 100k) and each system (Cairn, then
 * etcd; never both at once), on a fresh 3-node cluster on loopback (bench/systems.ts: default
 * timing, fsync on, data dirs under --dir):
 *
 * 1. load N resources of 256-byte values to the leader as fast as it takes them (Cairn: one
 *    Write per resource, --in-flight in flight; etcd: one Put per resource, or Txns of
 *    --etcd-batch Puts, --in-flight in flight), with a progress line (rate, ETA) every 5 s;
 * 2. memory per resource: each node's RSS (and Cairn's used V8 heap) once every node has
 *    applied the load, minus the same before it, over N, averaged over the 3 nodes;
 * 3. a snapshot of the leader: time and size (Cairn GET /v1/snapshot, etcd `etcdctl snapshot save`);
 * 4. restart to ready: one follower SIGTERMed and started again, timed until ready (Cairn
 *    /readyz 200, etcd /health);
 * 5. a fresh, empty 4th member added, timed from its start until it has applied the leader's
 *    index (Cairn: through InstallSnapshot once the leader holds a snapshot; the output says
 *    which path was taken).
 *
 * Prints a table per measure (Cairn, etcd, Cairn/etcd per scale) and the targets at 1M,
 * writes bench/results/scale-<date>-<HHMM>[-quick].json and .svg (a small chart per measure),
 * both again after every run so a run stopped part way keeps what it measured.
 * The data dirs are removed at the end unless --keep.
 *
 * BENCH_CAIRN_NODE_FLAGS adds `node` flags to every Cairn agent (e.g. "--cpu-prof
 * --cpu-prof-dir=/tmp/p"), BENCH_CAIRN_AGENT_FLAGS adds agent flags (e.g. "--snapshot-entries
 * 10000" to compare snapshot triggers), both as for compare.js.
 */
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import v8 from 'node:v8';
import { describeMachine, num } from './report.js';
import { registerTempDir } from './procs.js';
import { CairnSystem, EtcdSystem } from './systems.js';
import { addMember, dataBytes, loadAvg, loadKeys, nodeMemory, restartFollower, saveSnapshot, sender, type ScaleCluster } from './scale/measures.js';
import { parseScaleArgs, renderReport, renderScaleSvg, resultsBaseName, type NodeMemory, type ScaleResults, type ScaleRun, type ScaleSystem } from './scale/report.js';

const RESULTS_DIR = fileURLToPath(new URL('../../bench/results/', import.meta.url));

const say = (text: string): void => {
  process.stdout.write(`${new Date().toISOString().slice(11, 19)} ${text}\n`);
};

/**
 * Cairn's data quota for these runs: etcd's default backend quota (2 GiB). Cairn's own default,
 * an eighth of the V8 heap limit (518 MiB with Node 20's 4,144 MiB), is below 1M resources of
 * 256 bytes (about 650 bytes each as cairn_store_data_bytes counts them: ~620 MiB), which would
 * end the load with NO_SPACE at about 830,000.
 */
export const CAIRN_QUOTA_BYTES = 2 * 2 ** 30;

const NODE_FLAGS = (process.env['BENCH_CAIRN_NODE_FLAGS'] ?? '').split(/\s+/).filter((f) => f !== '');
const AGENT_FLAGS = (process.env['BENCH_CAIRN_AGENT_FLAGS'] ?? '').split(/\s+/).filter((f) => f !== '');

const message = (e: unknown): string => (e instanceof Error ? e.message : String(e));
const NO_MEMORY: NodeMemory = { rssBytes: [], heapBytes: [] };

async function oneRun(system: ScaleSystem, n: number, base: string, inFlight: number, etcdBatch: number, keep: boolean): Promise<ScaleRun> {
  const dir = path.join(base, `${system.toLowerCase()}-${n}`);
  await mkdir(dir, { recursive: true });
  const loadAvgBefore = loadAvg();
  const errors: string[] = [];
  const label = `${system} ${num(n)}`;
  say(`${label}: starting a fresh 3-node cluster in ${dir}`);
  const c: ScaleCluster = system === 'Cairn' ? { kind: 'Cairn', sys: await CairnSystem.start(dir, { nodeFlags: NODE_FLAGS, agentFlags: ['--quota-bytes', String(CAIRN_QUOTA_BYTES), ...AGENT_FLAGS] }) } : { kind: 'etcd', sys: await EtcdSystem.start(dir) };
  let version = c.sys.version;
  let load = { ms: Number.NaN, perSecond: Number.NaN, requests: 0 };
  let memoryBefore = NO_MEMORY;
  let memoryAfter = NO_MEMORY;
  let data = Number.NaN;
  let snapshot = { ms: Number.NaN, bytes: Number.NaN, how: '-' };
  let restart = { node: '-', stopMs: Number.NaN, ms: Number.NaN, how: '-' };
  let catchUp = { ms: Number.NaN, targetIndex: Number.NaN, path: 'unknown' as const as ScaleRun['catchUp']['path'], note: '' };
  try {
    let leader = await c.sys.waitHealthy(60_000);
    version = c.sys.version;
    memoryBefore = await nodeMemory(c);
    const s = sender(c, leader);
    try {
      load = await loadKeys(label, n, inFlight, system === 'Cairn' ? 1 : etcdBatch, s.send);
    } finally {
      s.close();
    }
    say(`${label}: loaded in ${(load.ms / 1000).toFixed(1)} s (${num(load.perSecond)}/s); waiting for every node to apply it`);
    leader = await c.sys.waitHealthy(600_000);
    memoryAfter = await nodeMemory(c);
    data = await dataBytes(c, leader);
    const step = async (name: string, fn: () => Promise<void>): Promise<void> => {
      try {
        await fn();
      } catch (e) {
        errors.push(`${name}: ${message(e)}`);
        say(`${label}: ${name} failed: ${message(e)}`);
      }
    };
    await step('snapshot', async () => {
      snapshot = await saveSnapshot(c, leader, dir);
      say(`${label}: snapshot ${(snapshot.bytes / 2 ** 20).toFixed(1)} MiB in ${(snapshot.ms / 1000).toFixed(2)} s`);
    });
    await step('restart', async () => {
      restart = await restartFollower(c, (leader + 1) % c.sys.nodeNames.length);
      say(`${label}: ${restart.node} stopped in ${(restart.stopMs / 1000).toFixed(2)} s, ready ${(restart.ms / 1000).toFixed(2)} s after its start`);
      leader = await c.sys.waitHealthy(600_000);
    });
    await step('catch-up', async () => {
      catchUp = await addMember(c, leader, dir);
      say(`${label}: a new member caught up in ${(catchUp.ms / 1000).toFixed(2)} s through ${catchUp.path === 'snapshot' ? 'a snapshot' : catchUp.path === 'log' ? 'the log' : 'an unknown path'} (${catchUp.note})`);
    });
  } catch (e) {
    errors.push(message(e));
    say(`${label}: failed: ${message(e)}`);
  } finally {
    await c.sys.stop();
    if (!keep) await rm(dir, { recursive: true, force: true });
  }
  return { system, version, resources: n, load, memoryBefore, memoryAfter, dataBytes: data, snapshot, restart, catchUp, loadAvgBefore, loadAvgAfter: loadAvg(), errors };
}

async function main(): Promise<void> {
  const args = parseScaleArgs(process.argv.slice(2));
  if (args.keep) process.env['BENCH_KEEP'] = '1';
  const base = args.dir ?? (await mkdtemp(path.join(os.tmpdir(), 'cairn-scale-')));
  await mkdir(base, { recursive: true });
  if (args.dir === undefined && !args.keep) registerTempDir(base);
  const startedAt = new Date();
  say(`bench-scale: scales ${args.scales.map((n) => num(n)).join(', ')}; systems ${args.systems.join(', ')}; data under ${base}; load average ${loadAvg().join(' ')}` + (NODE_FLAGS.length > 0 ? `; Cairn node flags ${NODE_FLAGS.join(' ')}` : '') + (AGENT_FLAGS.length > 0 ? `; Cairn agent flags ${AGENT_FLAGS.join(' ')}` : ''));
  const runs: ScaleRun[] = [];
  const machine = await describeMachine(base, v8.getHeapStatistics().heap_size_limit);
  await mkdir(RESULTS_DIR, { recursive: true });
  const out = path.join(RESULTS_DIR, resultsBaseName(startedAt, args.quick));
  // Written again after every run, so a long run stopped part way (Ctrl-C) keeps what it measured.
  const save = async (): Promise<ScaleResults> => {
    const results: ScaleResults = { kind: 'bench-scale', startedAt: startedAt.toISOString(), args, machine, runs };
    await writeFile(`${out}.json`, `${JSON.stringify(results, null, 2)}\n`);
    await writeFile(`${out}.svg`, renderScaleSvg(results, `${startedAt.toISOString().slice(0, 16)}Z, ${machine.cpus} CPUs, load average ${runs[0]?.loadAvgBefore.join(' ') ?? '?'} at the start`));
    return results;
  };
  for (const n of args.scales) {
    for (const system of args.systems) {
      runs.push(await oneRun(system, n, base, args.inFlight, args.etcdBatch, args.keep));
      await save();
    }
  }
  process.stdout.write(`\n${renderReport(await save())}`);
  say(`wrote ${out}.json and ${out}.svg`);
  if (args.keep) say(`kept the data dirs and logs under ${base}`);
}

main().then(
  () => process.exit(0),
  (e: unknown) => {
    process.stderr.write(`bench-scale: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
    process.exit(1);
  },
);
