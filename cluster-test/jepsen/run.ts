/**
 * The fault-harness runner (README.md):
 *
 *   node dist/cluster-test/jepsen/run.js --nodes 3 --time 30 --nemesis partition,kill,pause,netem \
 *     --workload register,set --seed S
 *
 * Builds the hosts (network namespaces, bridge), starts the agents, runs the workloads while the
 * nemesis follows the seeded schedule, heals everything, checks the histories and writes
 * results/<run>/{history.jsonl, set.jsonl, report.json, report.txt, timeline.svg, nodes/*.log}.
 * Exit code 0 when every checker says valid, 1 when one finds an anomaly, 2 on a harness error.
 */
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { checkHistory, formatAnomaly } from '../checker/linearizability.js';
import { checkSet } from '../checker/set-checker.js';
import { cleanupLeftovers, Hosts } from './hosts.js';
import { findLeader, Nemesis, type AppliedFault } from './nemesis.js';
import { countStatuses, renderSvg } from './report.js';
import { describeFault, makeSchedule, parseNemeses } from './schedule.js';
import { RegisterWorkload, SetWorkload } from './workloads.js';

export interface RunOptions {
  readonly nodes: number;
  readonly timeS: number;
  readonly nemesis: string;
  readonly workload: string;
  readonly seed: number;
  /** Defaults to cluster-test/jepsen/results under the checkout. */
  readonly resultsDir?: string;
  readonly log?: (line: string) => void;
}

export interface RunResult {
  readonly valid: boolean | 'unknown';
  readonly dir: string;
  readonly report: Record<string, unknown>;
}

async function until(what: string, ms: number, probe: () => Promise<boolean>): Promise<void> {
  const deadline = performance.now() + ms;
  while (!(await probe())) {
    if (performance.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

async function ready(hosts: Hosts): Promise<boolean> {
  const rs = await Promise.all(hosts.hosts.map((h) => fetch(`${h.url}/readyz`, { signal: AbortSignal.timeout(1000) }).then((r) => r.status === 200, () => false)));
  return rs.every(Boolean);
}

export async function runJepsen(o: RunOptions): Promise<RunResult> {
  const log = o.log ?? ((l: string) => process.stdout.write(`${l}\n`));
  const nemeses = parseNemeses(o.nemesis);
  const workloads = o.workload.split(',').map((w) => w.trim()).filter((w) => w !== '');
  for (const w of workloads) if (w !== 'register' && w !== 'set') throw new Error(`unknown workload '${w}' (known: register, set)`);
  if (o.nodes !== 3 && o.nodes !== 5) throw new Error(`--nodes must be 3 or 5, got ${o.nodes}`);
  const timeMs = o.timeS * 1000;
  const schedule = makeSchedule({ seed: o.seed, nodes: o.nodes, nemeses, timeMs });
  const stamp = new Date().toISOString().replace(/[:.]/g, '-').slice(0, 19);
  const dir = path.join(o.resultsDir ?? path.join(path.dirname(new URL(import.meta.url).pathname), '../../../cluster-test/jepsen/results'), `${stamp}-seed${o.seed}`);
  const nodesDir = path.join(dir, 'nodes');
  mkdirSync(nodesDir, { recursive: true });
  log(`cluster-test: seed ${o.seed} (replay with --seed ${o.seed}), ${o.nodes} nodes, ${o.timeS} s, nemesis ${nemeses.join(',') || 'none'}, workload ${workloads.join(',')}`);
  for (const s of schedule) log(`  schedule ${(s.startMs / 1000).toFixed(1)}-${(s.endMs / 1000).toFixed(1)} s: ${describeFault(s.fault)}`);

  const hosts = Hosts.create({ nodes: o.nodes, dir: nodesDir });
  try {
    log(`cluster-test: hosts ${hosts.hosts.map((h) => `${h.id}=${h.ns}@${h.ip}`).join(' ')}, bridge ${hosts.bridge}@${hosts.bridgeIp}`);
    hosts.startAll();
    await until('every node ready', 60_000, () => ready(hosts));
    const t0 = performance.now();
    const now = (): number => Math.round((performance.now() - t0) * 1000) / 1000;
    const endpoints = hosts.hosts.map((h) => h.grpcAddr);
    const register = workloads.includes('register') ? new RegisterWorkload({ endpoints, seed: o.seed, now }) : undefined;
    const set = workloads.includes('set') ? new SetWorkload({ endpoints, seed: o.seed + 1, now, workers: 2 }) : undefined;
    register?.start();
    set?.start();
    const nemesis = new Nemesis(hosts, now);
    const applied: AppliedFault[] = [];
    const errors: string[] = [];
    for (const s of schedule) {
      if (now() >= s.endMs) {
        // An earlier heal ran past this fault's window (a membership heal waits for the node's
        // promotion): skip it rather than squeeze it in late, so the run keeps its length.
        log(`  ${(now() / 1000).toFixed(1)} s: skipped ${describeFault(s.fault)}: its window passed during an earlier heal`);
        continue;
      }
      await sleepUntil(now, s.startMs);
      try {
        const a = await nemesis.start(s.fault);
        applied.push(a);
        log(`  ${(now() / 1000).toFixed(1)} s: ${describeFault(s.fault)}: ${a.note}`);
        await sleepUntil(now, s.endMs);
        await nemesis.heal(a);
        log(`  ${(now() / 1000).toFixed(1)} s: healed`);
      } catch (e) {
        errors.push(`${describeFault(s.fault)}: ${e instanceof Error ? e.message : String(e)}`);
        log(`  nemesis error: ${errors[errors.length - 1] ?? ''}`);
        await nemesis.healAll();
      }
    }
    await sleepUntil(now, timeMs);
    await nemesis.healAll();
    await register?.stop();
    await set?.stop();
    const runEnd = now();
    log(`cluster-test: workload done at ${(runEnd / 1000).toFixed(1)} s; waiting for every node to be ready`);
    await until('every node ready after healing', 60_000, () => ready(hosts));
    const leader = await findLeader(hosts);

    const report: Record<string, unknown> = { seed: o.seed, nodes: o.nodes, timeS: o.timeS, nemesis: nemeses, workload: workloads, leaderAtEnd: leader?.id ?? null };
    let valid: boolean | 'unknown' = true;
    const text: string[] = [`seed ${o.seed}: ${o.nodes} nodes, ${o.timeS} s, nemesis ${nemeses.join(',') || 'none'}, workload ${workloads.join(',')}`];
    if (register !== undefined) {
      writeFileSync(path.join(dir, 'history.jsonl'), register.history.toJsonLines());
      const result = checkHistory(register.history.events);
      const counts = countStatuses(register.samples);
      report['register'] = { valid: result.valid, ...counts, keys: result.keys, checkSteps: result.steps, unknownKeys: result.unknownKeys, errors: Object.fromEntries(register.errors), anomalies: result.anomalies.map(formatAnomaly) };
      if (result.valid !== true) valid = result.valid === false ? false : 'unknown';
      text.push(`register: ${result.valid === true ? 'valid' : result.valid === false ? 'NOT LINEARIZABLE' : 'unknown (search budget spent)'}; ${counts.ops} ops: ${counts.ok} ok, ${counts.fail} fail, ${counts.info} info; ${result.keys} keys`);
      for (const a of result.anomalies) text.push(formatAnomaly(a));
    }
    if (set !== undefined) {
      const finalRead = await set.finalRead();
      writeFileSync(path.join(dir, 'set.jsonl'), set.adds.map((a) => JSON.stringify(a)).join('\n') + '\n' + JSON.stringify({ finalRead }) + '\n');
      const result = checkSet(set.adds, finalRead);
      const counts = countStatuses(set.adds);
      report['set'] = { ...result, ...counts, errors: Object.fromEntries(set.errors) };
      if (!result.valid) valid = false;
      text.push(`set: ${result.valid ? 'valid' : 'INVALID'}; ${counts.ops} adds: ${counts.ok} ok, ${counts.fail} fail, ${counts.info} info; final read ${finalRead.length} (${result.recovered.length} info adds present); lost ${result.lost.length}, unexpected ${result.unexpected.length}, failed-but-present ${result.failedButPresent.length}, duplicated ${result.duplicated.length}`);
    }
    const faults = applied.map((a) => ({ nemesis: a.fault.nemesis, label: `${describeFault(a.fault)} (${a.note})`, start: a.startedAt, end: a.endedAt ?? runEnd }));
    report['faults'] = faults;
    report['nemesisErrors'] = errors;
    report['valid'] = valid;
    text.splice(1, 0, `verdict: ${valid === true ? 'VALID' : valid === false ? 'INVALID' : 'UNKNOWN'}`, `faults injected: ${faults.length}${errors.length > 0 ? ` (${errors.length} nemesis errors)` : ''}`);
    for (const f of faults) text.push(`  ${(f.start / 1000).toFixed(1)}-${(f.end / 1000).toFixed(1)} s: ${f.label}`);
    writeFileSync(path.join(dir, 'report.json'), JSON.stringify(report, null, 2) + '\n');
    writeFileSync(path.join(dir, 'report.txt'), text.join('\n') + '\n');
    writeFileSync(path.join(dir, 'timeline.svg'), renderSvg([...(register?.samples ?? []), ...(set?.samples ?? [])], faults, runEnd, `seed ${o.seed}: ${nemeses.join(',')} / ${workloads.join(',')}`));
    register?.close();
    set?.close();
    for (const l of text) log(l);
    log(`cluster-test: results in ${dir}`);
    return { valid, dir, report };
  } finally {
    hosts.closeSync();
    // Data dirs are big and useless after the check; the logs stay.
    for (const h of hosts.hosts) rmSync(path.join(nodesDir, h.id), { recursive: true, force: true });
  }
}

/** Waits until `now()` reaches `t` (the schedule's clock), in one timer. */
async function sleepUntil(now: () => number, t: number): Promise<void> {
  const d = t - now();
  if (d > 0) await new Promise((r) => setTimeout(r, d));
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      nodes: { type: 'string', default: '3' },
      time: { type: 'string', default: '30' },
      nemesis: { type: 'string', default: 'partition,kill,pause,netem' },
      workload: { type: 'string', default: 'register,set' },
      seed: { type: 'string' },
      results: { type: 'string' },
      cleanup: { type: 'boolean', default: false },
    },
  });
  if (values.cleanup === true) {
    // Only remove what earlier runs left behind (after a crash of the harness), then stop.
    const removed = cleanupLeftovers();
    process.stdout.write(removed.length === 0 ? 'cluster-test: nothing left over\n' : `cluster-test: removed ${removed.join('; ')}\n`);
    return;
  }
  const seed = values.seed !== undefined ? Number(values.seed) : Math.floor(Math.random() * 2 ** 31);
  if (!Number.isSafeInteger(seed) || seed < 0) throw new Error(`--seed must be a non-negative integer, got ${String(values.seed)}`);
  const r = await runJepsen({
    nodes: Number(values.nodes),
    timeS: Number(values.time),
    nemesis: values.nemesis ?? '',
    workload: values.workload ?? '',
    seed,
    ...(values.results !== undefined ? { resultsDir: values.results } : {}),
  });
  process.exitCode = r.valid === true ? 0 : 1;
}

if (process.argv[1] !== undefined && path.resolve(process.argv[1]) === new URL(import.meta.url).pathname) {
  main().catch((e: unknown) => {
    process.stderr.write(`cluster-test: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
    process.exitCode = 2;
  });
}
