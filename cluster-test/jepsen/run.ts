/**
 * The fault-harness runner (README.md):
 *
 *   node dist/cluster-test/jepsen/run.js --nodes 3 --time 30 --nemesis partition,kill,pause,netem \
 *     --workload register,set,watch --seed S                 one run
 *   node dist/cluster-test/jepsen/run.js --suite --time 120 --nemesis all --workload all --seed S
 *                                                             a suite: one run per nemesis, then all together
 *
 * A run builds the hosts (network namespaces, bridge), starts the agents, runs the workloads
 * while the nemesis follows the seeded schedule, heals everything, checks the histories and
 * writes results/<run>/{history.jsonl, set.jsonl, report.json, report.txt, timeline.svg,
 * nodes/*.log}. A suite runs one fresh cluster per entry of its plan (suite.ts) and writes
 * results/<suite>/{suite.txt, suite.json, suite.html, <NN-label-seedS>/...}.
 * Exit code 0 when every checker says valid, 1 when one finds an anomaly (or cannot decide),
 * 2 on a harness error.
 */
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { PLANTED_BUG_NAMES } from '../../src/server/index.js';
import { checkHistory, formatAnomaly } from '../checker/linearizability.js';
import { checkSet } from '../checker/set-checker.js';
import { checkWatchRun, formatWatchRun } from '../checker/watch-history.js';
import { parseWatchLog } from '../checker/watch-log.js';
import { cleanupLeftovers, Hosts, REPO_ROOT, type Host } from './hosts.js';
import { findLeader, Nemesis, type AppliedFault } from './nemesis.js';
import { countStatuses, renderSvg } from './report.js';
import { describeFault, makeSchedule, parseNemeses } from './schedule.js';
import { planSuite, renderSuiteHtml, renderSuiteText, suiteExitCode, suiteVerdict, type RunTotals, type RunVerdict, type SuiteRunSummary, type SuiteSummary } from './suite.js';
import { RegisterWorkload, SetWorkload } from './workloads.js';
import { WatchWorkload } from './watch-workload.js';

/** Every workload the harness has (`--workload all`). */
export const WORKLOADS = ['register', 'set', 'watch'] as const;
export type WorkloadName = (typeof WORKLOADS)[number];

/** Parses `--workload register,set` (or `all`). */
export function parseWorkloads(s: string): WorkloadName[] {
  if (s.trim() === 'all') return [...WORKLOADS];
  const ws = s.split(',').map((w) => w.trim()).filter((w) => w !== '');
  if (ws.length === 0) throw new Error(`--workload names no workload (known: ${WORKLOADS.join(', ')}, all)`);
  return ws.map((w) => {
    if (!(WORKLOADS as readonly string[]).includes(w)) throw new Error(`unknown workload '${w}' (known: ${WORKLOADS.join(', ')}, all)`);
    return w as WorkloadName;
  });
}

/** Parses `--planted-bugs a,b` against the agent's list, so a typo fails here and not in every agent. */
export function parsePlantedBugs(s: string): string[] {
  const bugs = s.split(',').map((b) => b.trim()).filter((b) => b !== '');
  for (const b of bugs) if (!PLANTED_BUG_NAMES.includes(b)) throw new Error(`unknown planted bug '${b}' (known: ${PLANTED_BUG_NAMES.join(', ')})`);
  return bugs;
}

/** A suite's total workload time when --time is not given (s). */
export const DEFAULT_SUITE_TIME_S = 120;

export const DEFAULT_RESULTS_DIR = path.join(REPO_ROOT, 'cluster-test', 'jepsen', 'results');

export interface RunOptions {
  readonly nodes: number;
  readonly timeS: number;
  readonly nemesis: string;
  readonly workload: string;
  readonly seed: number;
  /** Defaults to cluster-test/jepsen/results under the checkout. */
  readonly resultsDir?: string;
  /** The run's directory under `resultsDir`; default `<UTC time>-seed<S>`. */
  readonly name?: string;
  /** `cairn agent --planted-bugs` for every agent (tests only: makes the cluster unsafe on purpose). */
  readonly plantedBugs?: readonly string[];
  /** Each worker talks to one node only (workloads.ts `pinned`). Default false. */
  readonly pinClients?: boolean;
  /** Each client call's deadline, fail-over included (ms). Default 5000. */
  readonly clientTimeoutMs?: number;
  readonly log?: (line: string) => void;
}


export interface RunResult {
  readonly valid: boolean | 'unknown';
  readonly dir: string;
  readonly report: Record<string, unknown>;
  readonly totals: RunTotals;
}

/** The command line that repeats a run alone (the same schedule, the same workload seeds). */
export function replayCommand(o: RunOptions): string {
  const args = ['node dist/cluster-test/jepsen/run.js', `--nodes ${o.nodes}`, `--time ${o.timeS}`, `--nemesis ${parseNemeses(o.nemesis).join(',') || 'none'}`, `--workload ${parseWorkloads(o.workload).join(',')}`, `--seed ${o.seed}`];
  if ((o.plantedBugs ?? []).length > 0) args.push(`--planted-bugs ${(o.plantedBugs ?? []).join(',')}`);
  if (o.pinClients === true) args.push('--pin-clients');
  if (o.clientTimeoutMs !== undefined) args.push(`--client-timeout-ms ${o.clientTimeoutMs}`);
  return args.join(' ');
}

/** At most this many anomaly lines per kind of set anomaly (the counts are in the report). */
const SET_ANOMALIES_SHOWN = 10;

async function until(what: string, ms: number, probe: () => Promise<boolean>): Promise<void> {
  const deadline = performance.now() + ms;
  while (!(await probe())) {
    if (performance.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/**
 * Every node answers /readyz and accepts the run's management token (GET /v1/acl/token/self:
 * the leader made the token from --acl-initial-management-token-file and the node applied it).
 */
async function ready(hosts: Hosts): Promise<boolean> {
  const ok = (h: Host, route: string): Promise<boolean> => h.fetch(route, { signal: AbortSignal.timeout(1000) }).then((r) => r.status === 200, () => false);
  const rs = await Promise.all(hosts.hosts.map(async (h) => (await ok(h, '/readyz')) && (await ok(h, '/v1/acl/token/self'))));
  return rs.every(Boolean);
}

export async function runJepsen(o: RunOptions): Promise<RunResult> {
  const log = o.log ?? ((l: string) => process.stdout.write(`${l}\n`));
  const nemeses = parseNemeses(o.nemesis);
  const workloads = parseWorkloads(o.workload);
  const bugs = o.plantedBugs ?? [];
  if (o.nodes !== 3 && o.nodes !== 5) throw new Error(`--nodes must be 3 or 5, got ${o.nodes}`);
  const timeMs = o.timeS * 1000;
  const schedule = makeSchedule({ seed: o.seed, nodes: o.nodes, nemeses, timeMs });
  const stamp = new Date().toISOString().replace(/[:.]/g, '-').slice(0, 19);
  const dir = path.join(o.resultsDir ?? DEFAULT_RESULTS_DIR, o.name ?? `${stamp}-seed${o.seed}`);
  const nodesDir = path.join(dir, 'nodes');
  mkdirSync(nodesDir, { recursive: true });
  log(`cluster-test: seed ${o.seed} (replay: ${replayCommand(o)}), ${o.nodes} nodes, ${o.timeS} s, nemesis ${nemeses.join(',') || 'none'}, workload ${workloads.join(',')}`);
  if (bugs.length > 0) log(`cluster-test: PLANTED BUGS ${bugs.join(',')} on every agent: the cluster is unsafe on purpose`);
  for (const s of schedule) log(`  schedule ${(s.startMs / 1000).toFixed(1)}-${(s.endMs / 1000).toFixed(1)} s: ${describeFault(s.fault)}`);

  const hosts = await Hosts.create({ nodes: o.nodes, dir: nodesDir, agentArgs: bugs.length > 0 ? ['--planted-bugs', bugs.join(',')] : [] });
  try {
    log(`cluster-test: hosts ${hosts.hosts.map((h) => `${h.id}=${h.ns}@${h.ip}`).join(' ')}, bridge ${hosts.bridge}@${hosts.bridgeIp}`);
    hosts.startAll();
    await until('every node ready and accepting the management token', 60_000, () => ready(hosts));
    const t0 = performance.now();
    const now = (): number => Math.round((performance.now() - t0) * 1000) / 1000;
    const endpoints = hosts.hosts.map((h) => h.grpcAddr);
    const tls = hosts.clientTls;
    const token = hosts.token;
    const client = { endpoints, now, tls, ...(token !== undefined ? { token } : {}), ...(o.pinClients === true ? { pinned: true } : {}), ...(o.clientTimeoutMs !== undefined ? { timeoutMs: o.clientTimeoutMs } : {}) };
    const register = workloads.includes('register') ? new RegisterWorkload({ ...client, seed: o.seed }) : undefined;
    const set = workloads.includes('set') ? new SetWorkload({ ...client, seed: o.seed + 1, workers: 2 }) : undefined;
    // Half the watchers start in the middle of the run; the others get their initial state before any write.
    const watch = workloads.includes('watch') ? new WatchWorkload({ endpoints, tls, ...(token !== undefined ? { token } : {}), nodeNames: hosts.hosts.map((h) => h.id), seed: o.seed + 2, now, lateStartWithinMs: [timeMs * 0.15, timeMs * 0.6] }) : undefined;
    await watch?.start();
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
    await watch?.stop();
    const runEnd = now();
    log(`cluster-test: workload done at ${(runEnd / 1000).toFixed(1)} s; waiting for every node to be ready`);
    await until('every node ready after healing', 60_000, () => ready(hosts));
    const leader = await findLeader(hosts);

    const report: Record<string, unknown> = { seed: o.seed, nodes: o.nodes, timeS: o.timeS, nemesis: nemeses, workload: workloads, plantedBugs: bugs, replay: replayCommand(o), runId: hosts.runId, leaderAtEnd: leader?.id ?? null };
    let valid: boolean | 'unknown' = true;
    const text: string[] = [`seed ${o.seed}: ${o.nodes} nodes, ${o.timeS} s, nemesis ${nemeses.join(',') || 'none'}, workload ${workloads.join(',')}${bugs.length > 0 ? `, PLANTED BUGS ${bugs.join(',')}` : ''}`];
    // Each workload adds its counts and its anomalies here, for the totals a suite tabulates.
    const sections: { counts: ReturnType<typeof countStatuses>; anomalies: readonly string[] }[] = [];
    if (register !== undefined) {
      writeFileSync(path.join(dir, 'history.jsonl'), register.history.toJsonLines());
      const result = checkHistory(register.history.events);
      const counts = countStatuses(register.samples);
      // An unconditional write never fails for contention (docs/api.md "Unconditional writes").
      const refused = register.blindWritesRefusedForContention.map((w) => `unconditional write refused for contention (CAS_FAILED): ${w}`);
      const anomalies = [...result.anomalies.map(formatAnomaly), ...refused];
      if (refused.length > 0) valid = false;
      report['register'] = { valid: result.valid, ...counts, keys: result.keys, checkSteps: result.steps, unknownKeys: result.unknownKeys, errors: Object.fromEntries(register.errors), anomalies };
      sections.push({ counts, anomalies });
      if (result.valid !== true) valid = result.valid === false ? false : 'unknown';
      text.push(`register: ${result.valid === true ? 'valid' : result.valid === false ? 'NOT LINEARIZABLE' : 'unknown (search budget spent)'}; ${counts.ops} ops: ${counts.ok} ok, ${counts.fail} fail, ${counts.info} info; ${result.keys} keys`);
      text.push(...anomalies);
    }
    if (set !== undefined) {
      const finalRead = await set.finalRead();
      writeFileSync(path.join(dir, 'set.jsonl'), set.adds.map((a) => JSON.stringify(a)).join('\n') + '\n' + JSON.stringify({ finalRead }) + '\n');
      const result = checkSet(set.adds, finalRead);
      const counts = countStatuses(set.adds);
      // A set anomaly's smallest failing sub-history is the add itself and the final read.
      const byElement = new Map(set.adds.map((a) => [a.element, a]));
      const show = (what: string, els: readonly (string | number)[]): string[] =>
        els.length === 0
          ? []
          : [
              `set: ${els.length} ${what}: ${[...els]
                .sort((a, b) => (byElement.get(String(a))?.start ?? 0) - (byElement.get(String(b))?.start ?? 0))
                .slice(0, SET_ANOMALIES_SHOWN)
                .map((e) => {
                  const a = byElement.get(String(e));
                  return a === undefined ? String(e) : `${String(e)} (add ${a.status} ${(a.start / 1000).toFixed(3)}-${(a.end / 1000).toFixed(3)} s)`;
                })
                .join(', ')}${els.length > SET_ANOMALIES_SHOWN ? ', ...' : ''}; final read at ${(runEnd / 1000).toFixed(1)} s has ${finalRead.length} elements`,
            ];
      const anomalies = [
        ...show('acknowledged adds lost', result.lost),
        ...show('elements never added', result.unexpected),
        ...show('failed adds present', result.failedButPresent),
        ...show('elements read twice', result.duplicated),
      ];
      report['set'] = { ...result, ...counts, errors: Object.fromEntries(set.errors), anomalies };
      sections.push({ counts, anomalies });
      if (!result.valid) valid = false;
      text.push(`set: ${result.valid ? 'valid' : 'INVALID'}; ${counts.ops} adds: ${counts.ok} ok, ${counts.fail} fail, ${counts.info} info; final read ${finalRead.length} (${result.recovered.length} info adds present); lost ${result.lost.length}, unexpected ${result.unexpected.length}, failed-but-present ${result.failedButPresent.length}, duplicated ${result.duplicated.length}`);
      text.push(...anomalies);
    }
    if (watch !== undefined) {
      // After every workload stopped: the final List, then every watcher up to its revision.
      const behind = await watch.finish();
      const logText = watch.toJsonLines();
      writeFileSync(path.join(dir, 'watch.jsonl'), logText);
      // Checked from what was written, so the file is enough to check the run again.
      const parsed = parseWatchLog(logText);
      const result = checkWatchRun(parsed.input);
      const counts = countStatuses(watch.samples);
      const writes = parsed.input.writes;
      const ws = watch.watcherStats();
      const d = result.derived;
      report['watch'] = {
        valid: result.valid,
        ...counts,
        writes: writes.length,
        unknownWrites: d.unknownWrites,
        unknownApplied: d.unknownApplied,
        watchers: ws,
        eventsChecked: result.watchers.eventsChecked,
        initialStates: result.watchers.connections,
        resets: result.resets,
        droppedBookmarks: parsed.droppedBookmarks,
        uncertain: result.watchers.uncertain,
        history: { changes: d.changes, acknowledged: d.acknowledged, watched: d.watched, listed: d.listed, completeThrough: d.history.completeThrough, coverageRanges: d.history.coverage?.length ?? 0 },
        finalList: { revision: parsed.input.finalList.revision, resources: parsed.input.finalList.resources.length },
        behindAtEnd: behind,
        errors: Object.fromEntries(watch.errors),
        problems: d.problems,
        anomalies: result.watchers.anomalies,
      };
      const anomalies = formatWatchRun(result).map((l) => `watch: ${l}`);
      sections.push({ counts, anomalies });
      if (!result.valid) valid = false;
      const lost = Object.entries(ws.lostBy).map(([k, v]) => `${k} x${v}`).join(', ') || 'none';
      text.push(
        `watch: ${result.valid ? 'valid' : 'INVALID'}; ${counts.ops} writes: ${counts.ok} ok, ${counts.fail} fail, ${counts.info} info (${d.unknownApplied} of the unknown upserts seen applied); ` +
          `${ws.started} of ${ws.watchers} watchers started, ${result.watchers.eventsChecked} events checked, ${ws.resumes} resumes (lost streams: ${lost}), ${ws.resets} resets; ` +
          `history ${d.changes} changes (${d.acknowledged} acknowledged, ${d.watched} watched, ${d.listed} in the final List at ${parsed.input.finalList.revision}), ${result.watchers.uncertain} uncertain comparisons skipped; ` +
          `${d.problems.length} history problems, ${result.watchers.anomalies.length} watcher anomalies${behind.length > 0 ? `; behind at the end: ${behind.join(', ')}` : ''}`,
      );
      for (const l of anomalies) text.push(`  ${l}`);
    }
    const faults = applied.map((a) => ({ nemesis: a.fault.nemesis, label: `${describeFault(a.fault)} (${a.note})`, start: a.startedAt, end: a.endedAt ?? runEnd }));
    const sum = (k: 'ops' | 'ok' | 'fail' | 'info'): number => sections.reduce((n, x) => n + x.counts[k], 0);
    const totals: RunTotals = { ops: sum('ops'), ok: sum('ok'), fail: sum('fail'), info: sum('info'), faults: faults.length, nemesisErrors: errors.length, anomalies: sections.flatMap((x) => x.anomalies) };
    report['faults'] = faults;
    report['nemesisErrors'] = errors;
    report['totals'] = totals;
    report['valid'] = valid;
    text.splice(
      1,
      0,
      `verdict: ${valid === true ? 'VALID' : valid === false ? 'INVALID' : 'UNKNOWN'}`,
      `operations: ${totals.ops} (${totals.ok} ok, ${totals.fail} fail, ${totals.info} unknown outcome); faults injected: ${faults.length}${errors.length > 0 ? ` (${errors.length} nemesis errors)` : ''}`,
    );
    for (const f of faults) text.push(`  ${(f.start / 1000).toFixed(1)}-${(f.end / 1000).toFixed(1)} s: ${f.label}`);
    for (const e of errors) text.push(`  nemesis error: ${e}`);
    writeFileSync(path.join(dir, 'report.json'), JSON.stringify(report, null, 2) + '\n');
    writeFileSync(path.join(dir, 'report.txt'), text.join('\n') + '\n');
    writeFileSync(path.join(dir, 'timeline.svg'), renderSvg([...(register?.samples ?? []), ...(set?.samples ?? []), ...(watch?.samples ?? [])], faults, runEnd, `seed ${o.seed}: ${nemeses.join(',')} / ${workloads.join(',')}`));
    register?.close();
    set?.close();
    watch?.close();
    for (const l of text) log(l);
    log(`cluster-test: results in ${dir}`);
    return { valid, dir, report, totals };
  } finally {
    hosts.closeSync();
    // Data dirs are big and useless after the check; the logs stay.
    for (const h of hosts.hosts) rmSync(path.join(nodesDir, h.id), { recursive: true, force: true });
  }
}

export interface SuiteOptions {
  readonly nodes: number;
  /** The suite's total workload time (s), split over its runs (suite.ts planSuite). */
  readonly timeS: number;
  /** Each run's length instead (s). */
  readonly runTimeS?: number;
  readonly nemesis: string;
  readonly workload: string;
  readonly seed: number;
  /** The run with every nemesis together (default: with two or more nemeses). */
  readonly mixed?: boolean;
  readonly resultsDir?: string;
  readonly plantedBugs?: readonly string[];
  readonly log?: (line: string) => void;
}

export interface SuiteResult {
  readonly dir: string;
  readonly summary: SuiteSummary;
}

/** What a suite runs each run with, and how it removes leftovers first (tests replace both). */
export interface SuiteDeps {
  readonly run: (o: RunOptions) => Promise<RunResult>;
  readonly cleanup: () => string[];
}

/** The command line that repeats a suite. */
export function suiteReplayCommand(o: SuiteOptions): string {
  const args = ['node dist/cluster-test/jepsen/run.js --suite', `--nodes ${o.nodes}`, o.runTimeS !== undefined ? `--run-time ${o.runTimeS}` : `--time ${o.timeS}`, `--nemesis ${parseNemeses(o.nemesis).join(',')}`, `--workload ${parseWorkloads(o.workload).join(',')}`, `--seed ${o.seed}`];
  if (o.mixed === false) args.push('--no-mixed');
  if ((o.plantedBugs ?? []).length > 0) args.push(`--planted-bugs ${(o.plantedBugs ?? []).join(',')}`);
  return args.join(' ');
}

/**
 * Runs a suite (suite.ts): one fresh cluster per run, one after the other; a run that fails
 * with a harness error is recorded (verdict `error`) and the suite goes on. Progress lines go
 * to `log`; suite.txt, suite.json and suite.html are rewritten after every run, so an
 * interrupted suite still leaves its summary so far.
 */
export async function runSuite(o: SuiteOptions, deps: SuiteDeps = { run: runJepsen, cleanup: cleanupLeftovers }): Promise<SuiteResult> {
  const log = o.log ?? ((l: string) => process.stdout.write(`${l}\n`));
  const nemeses = parseNemeses(o.nemesis);
  const workloads = parseWorkloads(o.workload);
  const plan = planSuite({ seed: o.seed, nemeses, timeS: o.timeS, ...(o.runTimeS !== undefined ? { runTimeS: o.runTimeS } : {}), ...(o.mixed !== undefined ? { mixed: o.mixed } : {}) });
  const stamp = new Date().toISOString().replace(/[:.]/g, '-').slice(0, 19);
  const dir = path.join(o.resultsDir ?? DEFAULT_RESULTS_DIR, `${stamp}-suite-seed${o.seed}`);
  mkdirSync(dir, { recursive: true });
  const replay = suiteReplayCommand(o);
  const removed = deps.cleanup();
  if (removed.length > 0) log(`suite: removed leftovers of an earlier run: ${removed.join('; ')}`);
  const total = plan.runs.reduce((n, r) => n + r.timeS, 0);
  log(`suite: seed ${o.seed} (replay: ${replay}); ${plan.runs.length} runs on ${o.nodes} fresh nodes each, ${total} s of workload, workloads ${workloads.join(',')}`);
  if (plan.note !== undefined) log(`suite: note: ${plan.note}`);
  for (const [i, r] of plan.runs.entries()) log(`  ${i + 1}. ${r.label}: ${r.timeS} s, seed ${r.seed}`);
  const t0 = performance.now();
  const runs: SuiteRunSummary[] = [];
  const summary = (): SuiteSummary => ({
    seed: o.seed,
    nodes: o.nodes,
    workloads,
    plantedBugs: o.plantedBugs ?? [],
    verdict: suiteVerdict(runs),
    durationS: (performance.now() - t0) / 1000,
    replay,
    ...(plan.note !== undefined ? { note: plan.note } : {}),
    runs,
  });
  const write = (): SuiteSummary => {
    const s = summary();
    writeFileSync(path.join(dir, 'suite.json'), JSON.stringify(s, null, 2) + '\n');
    writeFileSync(path.join(dir, 'suite.txt'), renderSuiteText(s));
    writeFileSync(path.join(dir, 'suite.html'), renderSuiteHtml(s));
    return s;
  };
  for (const [i, r] of plan.runs.entries()) {
    const name = `${String(i + 1).padStart(2, '0')}-${r.label}-seed${r.seed}`;
    const ro: RunOptions = {
      nodes: o.nodes,
      timeS: r.timeS,
      nemesis: r.nemeses.join(','),
      workload: workloads.join(','),
      seed: r.seed,
      resultsDir: dir,
      name,
      ...(o.plantedBugs !== undefined ? { plantedBugs: o.plantedBugs } : {}),
      log: (l) => log(`  [${r.label}] ${l}`),
    };
    const elapsed = (performance.now() - t0) / 1000;
    log(`suite [${i + 1}/${plan.runs.length}] ${r.label}: seed ${r.seed}, ${r.timeS} s (${elapsed.toFixed(0)} s into the suite)`);
    const started = performance.now();
    let entry: SuiteRunSummary;
    const base = { label: r.label, nemeses: r.nemeses, seed: r.seed, timeS: r.timeS, dir: name, replay: replayCommand(ro) };
    try {
      const res = await deps.run(ro);
      const verdict: RunVerdict = res.valid === true ? 'valid' : res.valid === false ? 'invalid' : 'unknown';
      entry = { ...base, verdict, ...res.totals, durationS: (performance.now() - started) / 1000 };
    } catch (e) {
      const error = e instanceof Error ? e.message : String(e);
      entry = { ...base, verdict: 'error', ops: 0, ok: 0, fail: 0, info: 0, faults: 0, nemesisErrors: 0, anomalies: [], error, durationS: (performance.now() - started) / 1000 };
    }
    runs.push(entry);
    write();
    const left = plan.runs.slice(i + 1).reduce((n, x) => n + x.timeS, 0);
    log(
      `suite [${i + 1}/${plan.runs.length}] ${r.label}: ${entry.verdict.toUpperCase()}${entry.error !== undefined ? ` (${entry.error})` : ''} in ${entry.durationS.toFixed(0)} s; ${entry.ops} ops (${entry.ok} ok, ${entry.fail} fail, ${entry.info} unknown), ${entry.faults} faults, ${entry.anomalies.length} anomalies${left > 0 ? `; ${plan.runs.length - i - 1} runs (${left} s of workload) to go` : ''}`,
    );
  }
  const s = write();
  for (const l of renderSuiteText(s).trimEnd().split('\n')) log(l);
  log(`suite: results in ${dir} (suite.txt, suite.json, suite.html)`);
  return { dir, summary: s };
}

/** Waits until `now()` reaches `t` (the schedule's clock), in one timer. */
async function sleepUntil(now: () => number, t: number): Promise<void> {
  const d = t - now();
  if (d > 0) await new Promise((r) => setTimeout(r, d));
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      suite: { type: 'boolean', default: false },
      nodes: { type: 'string', default: '3' },
      time: { type: 'string' },
      'run-time': { type: 'string' },
      'no-mixed': { type: 'boolean', default: false },
      nemesis: { type: 'string' },
      workload: { type: 'string' },
      seed: { type: 'string' },
      results: { type: 'string' },
      'planted-bugs': { type: 'string' },
      'pin-clients': { type: 'boolean', default: false },
      'client-timeout-ms': { type: 'string' },
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
  const number = (name: string, v: string | undefined): number | undefined => {
    if (v === undefined) return undefined;
    const n = Number(v);
    if (!Number.isFinite(n) || n <= 0) throw new Error(`--${name} must be a positive number, got ${v}`);
    return n;
  };
  const plantedBugs = parsePlantedBugs(values['planted-bugs'] ?? '');
  const common = {
    nodes: Number(values.nodes),
    // A single run's length, or a suite's total (split over its runs).
    timeS: number('time', values.time) ?? (values.suite === true ? DEFAULT_SUITE_TIME_S : 30),
    workload: values.workload ?? 'all',
    seed,
    ...(values.results !== undefined ? { resultsDir: values.results } : {}),
    ...(plantedBugs.length > 0 ? { plantedBugs } : {}),
  };
  if (values.suite === true) {
    if (values['pin-clients'] === true || values['client-timeout-ms'] !== undefined) throw new Error('--pin-clients and --client-timeout-ms are options of a single run, not of --suite');
    const runTimeS = number('run-time', values['run-time']);
    const r = await runSuite({ ...common, nemesis: values.nemesis ?? 'all', ...(runTimeS !== undefined ? { runTimeS } : {}), ...(values['no-mixed'] === true ? { mixed: false } : {}) });
    process.exitCode = suiteExitCode(r.summary.verdict);
    return;
  }
  if (values['run-time'] !== undefined || values['no-mixed'] === true) throw new Error('--run-time and --no-mixed are options of --suite');
  const clientTimeoutMs = number('client-timeout-ms', values['client-timeout-ms']);
  const r = await runJepsen({
    ...common,
    nemesis: values.nemesis ?? 'all',
    ...(values['pin-clients'] === true ? { pinClients: true } : {}),
    ...(clientTimeoutMs !== undefined ? { clientTimeoutMs } : {}),
  });
  process.exitCode = r.valid === true ? 0 : 1;
}

if (process.argv[1] !== undefined && path.resolve(process.argv[1]) === new URL(import.meta.url).pathname) {
  main().catch((e: unknown) => {
    process.stderr.write(`cluster-test: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
    process.exitCode = 2;
  });
}
