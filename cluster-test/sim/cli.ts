/**
 * The simulator's command line.
 *
 *   node dist/cluster-test/sim/cli.js swarm --seeds N [--start S] [--duration-ms M] [--faults P]
 *        [--nodes 3|5] [--planted-bug B] [--driver-bug B] [--fsm-bug B] [--jobs J]
 *   node dist/cluster-test/sim/cli.js replay --seed S [--verbose] [same run flags]
 *   node dist/cluster-test/sim/cli.js demo [--seed S] [--duration-ms M]
 *
 * `swarm` runs many seeds (in worker threads with --jobs), prints progress and a summary, and
 * exits 1 if any seed found a violation, printing each one's replay command. `replay` reruns one
 * seed and prints its event log (every line with --verbose; without it, ticks, deliveries and
 * disk syncs are left out). `demo` narrates one run.
 */
import { availableParallelism } from 'node:os';
import { fileURLToPath } from 'node:url';
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import { DEFAULT_FAULTS, FAULT_PROFILES } from './faults.js';
import { Narrator } from './narrate.js';
import type { PlantedBugs } from './raft.js';
import type { FsmPlantedBugs, ReplicaPlantedBugs } from './raft.js';
import {
  DEFAULT_DURATION_MS,
  replayCommand,
  runSimulation,
  totals,
  type SimulationOptions,
  type SimulationResult,
  type SimulationStats,
  type Violation,
} from './simulation.js';

const PLANTED_BUGS = ['doubleVote', 'commitOldTermByCount', 'readIndexWithoutHeartbeat'] as const;
const DRIVER_BUGS = ['answerBeforeCommit', 'applyBeforeCommit', 'voteBeforeDurable', 'ackBeforeDurable', 'countOwnWriteEarly', 'syncOnlyEntries', 'answerAheadOfWrites'] as const satisfies readonly (keyof ReplicaPlantedBugs)[];

const FSM_BUGS = ['txnDropsLastOp'] as const satisfies readonly (keyof FsmPlantedBugs)[];

class UsageError extends Error {}

interface Args {
  readonly command: string;
  readonly flags: Map<string, string>;
}

const BOOLEAN_FLAGS = new Set(['verbose']);

function parseArgs(argv: readonly string[]): Args {
  const command = argv[0] ?? 'help';
  const flags = new Map<string, string>();
  for (let i = 1; i < argv.length; i++) {
    const a = argv[i] ?? '';
    if (!a.startsWith('--')) throw new UsageError(`unexpected argument ${JSON.stringify(a)}`);
    const eq = a.indexOf('=');
    const name = eq >= 0 ? a.slice(2, eq) : a.slice(2);
    if (eq >= 0) flags.set(name, a.slice(eq + 1));
    else if (BOOLEAN_FLAGS.has(name)) flags.set(name, 'true');
    else {
      const v = argv[i + 1];
      if (v === undefined) throw new UsageError(`option --${name} needs a value`);
      flags.set(name, v);
      i++;
    }
  }
  return { command, flags };
}

function intFlag(args: Args, name: string, dflt: number | undefined, min = 0): number | undefined {
  const v = args.flags.get(name);
  if (v === undefined) return dflt;
  const n = Number(v);
  if (!Number.isSafeInteger(n) || n < min) throw new UsageError(`option --${name} must be an integer >= ${min}, got ${JSON.stringify(v)}`);
  return n;
}

/** The run options shared by swarm and replay (everything but the seed). */
function runFlags(args: Args): Omit<SimulationOptions, 'seed'> {
  const durationMs = intFlag(args, 'duration-ms', undefined, 1);
  const steps = intFlag(args, 'steps', undefined, 1);
  const nodes = intFlag(args, 'nodes', undefined, 1);
  const livenessBudgetMs = intFlag(args, 'liveness-budget-ms', undefined, 1);
  const snapshotChunkBytes = intFlag(args, 'snapshot-chunk-bytes', undefined, 1);
  const quotaBytes = intFlag(args, 'quota-bytes', undefined, 1);
  if (nodes !== undefined && nodes !== 3 && nodes !== 5) throw new UsageError(`option --nodes must be 3 or 5, got ${nodes}`);
  const faults = args.flags.get('faults');
  const bug = args.flags.get('planted-bug');
  let plantedBugs: PlantedBugs | undefined;
  if (bug !== undefined) {
    if (!(PLANTED_BUGS as readonly string[]).includes(bug)) {
      throw new UsageError(`option --planted-bug must be one of ${PLANTED_BUGS.join(', ')}, got ${JSON.stringify(bug)}`);
    }
    plantedBugs = { [bug]: true };
  }
  const driverBug = args.flags.get('driver-bug');
  if (driverBug !== undefined && !(DRIVER_BUGS as readonly string[]).includes(driverBug)) {
    throw new UsageError(`option --driver-bug must be one of ${DRIVER_BUGS.join(', ')}, got ${JSON.stringify(driverBug)}`);
  }
  const fsmBug = args.flags.get('fsm-bug');
  if (fsmBug !== undefined && !(FSM_BUGS as readonly string[]).includes(fsmBug)) {
    throw new UsageError(`option --fsm-bug must be one of ${FSM_BUGS.join(', ')}, got ${JSON.stringify(fsmBug)}`);
  }
  return {
    ...(driverBug !== undefined ? { driverBugs: { [driverBug]: true } } : {}),
    ...(fsmBug !== undefined ? { fsmBugs: { [fsmBug]: true } } : {}),
    ...(durationMs !== undefined ? { durationMs } : {}),
    ...(steps !== undefined ? { steps } : {}),
    ...(nodes !== undefined ? { nodes } : {}),
    ...(faults !== undefined ? { faults } : {}),
    ...(plantedBugs !== undefined ? { plantedBugs } : {}),
    ...(livenessBudgetMs !== undefined ? { livenessBudgetMs } : {}),
    ...(snapshotChunkBytes !== undefined ? { snapshotChunkBytes } : {}),
    ...(quotaBytes !== undefined ? { quotaBytes } : {}),
  };
}

function fmt(n: number): string {
  return n.toLocaleString('en-US');
}

function printViolation(print: (s: string) => void, seed: number, profile: string, v: Violation, replay: string, recentLines = 25): void {
  print(`FAILED seed ${seed} (faults ${profile}): ${v.kind} at step ${fmt(v.step)}, t=${fmt(v.time)}ms`);
  for (const line of v.message.split('\n')) print(`  ${line}`);
  if (recentLines > 0) {
    print(`  last ${Math.min(recentLines, v.recent.length)} event-log lines:`);
    for (const line of v.recent.slice(-recentLines)) print(`    ${line}`);
  }
  print(`  replay: ${replay}`);
}

// ---- swarm --------------------------------------------------------------------------------------

/** What a worker sends back per seed: the result without the (large) event log. */
interface SeedReport {
  readonly seed: number;
  readonly ok: boolean;
  readonly profile: string;
  readonly violation?: Violation;
  readonly stats: SimulationStats;
}

interface WorkerJob {
  readonly seeds: readonly number[];
  readonly options: Omit<SimulationOptions, 'seed'>;
}

async function runSeed(seed: number, options: Omit<SimulationOptions, 'seed'>): Promise<SeedReport> {
  const r: SimulationResult = await runSimulation({ ...options, seed });
  return { seed, ok: r.ok, profile: r.profile, ...(r.violation !== undefined ? { violation: r.violation } : {}), stats: r.stats };
}

async function workerMain(job: WorkerJob): Promise<void> {
  for (const seed of job.seeds) parentPort?.postMessage(await runSeed(seed, job.options));
}

async function swarm(args: Args): Promise<number> {
  const count = intFlag(args, 'seeds', undefined, 1);
  if (count === undefined) throw new UsageError('swarm needs --seeds N');
  const start = intFlag(args, 'start', 1, 0) ?? 1;
  const jobs = Math.min(intFlag(args, 'jobs', Math.min(availableParallelism(), 4), 1) ?? 1, count);
  const options = runFlags(args);
  const seeds = Array.from({ length: count }, (_, i) => start + i);
  const t0 = performance.now();
  console.log(
    `sim swarm: seeds ${start}..${start + count - 1} (${fmt(count)}), faults ${options.faults ?? DEFAULT_FAULTS}, ` +
      `fault phase ${fmt(options.durationMs ?? DEFAULT_DURATION_MS)}ms simulated per seed, ${jobs} job(s)`,
  );
  const reports: SeedReport[] = [];
  let failed = 0;
  let nextPct = 5;
  const onReport = (r: SeedReport): void => {
    reports.push(r);
    if (!r.ok) {
      failed++;
      console.log(`  seed ${r.seed} FAILED: ${r.violation?.kind ?? '?'}: ${(r.violation?.message ?? '').split('\n')[0] ?? ''}`);
    }
    const pct = (reports.length / count) * 100;
    if (pct >= nextPct || reports.length === count) {
      while (nextPct <= pct) nextPct += 5;
      const secs = (performance.now() - t0) / 1000;
      console.log(`  ${pct.toFixed(0).padStart(3)}%  ${fmt(reports.length)}/${fmt(count)} seeds, ${failed} failed, ${secs.toFixed(1)}s`);
    }
  };
  if (jobs <= 1) {
    for (const seed of seeds) onReport(await runSeed(seed, options));
  } else {
    const self = fileURLToPath(import.meta.url);
    await Promise.all(
      Array.from({ length: jobs }, (_, k) => {
        const job: WorkerJob = { seeds: seeds.filter((_, i) => i % jobs === k), options };
        return new Promise<void>((resolve, reject) => {
          const w = new Worker(self, { workerData: job });
          w.on('message', (r: SeedReport) => onReport(r));
          w.on('error', reject);
          w.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`swarm worker ${k} exited with code ${code}`))));
        });
      }),
    );
  }
  const secs = (performance.now() - t0) / 1000;
  printSummary(reports, secs);
  const failures = reports.filter((r) => !r.ok).sort((a, b) => a.seed - b.seed);
  for (const r of failures) {
    if (r.violation !== undefined) printViolation((s) => console.log(s), r.seed, r.profile, r.violation, replayCommand({ ...options, seed: r.seed }), 10);
  }
  console.log(failures.length === 0 ? `OK: ${fmt(count)} seeds, no violations` : `FAILED: ${failures.length} of ${fmt(count)} seeds found violations`);
  return failures.length === 0 ? 0 : 1;
}

function printSummary(reports: readonly SeedReport[], secs: number): void {
  const t = totals(reports.map((r) => r.stats));
  const g = (k: string): string => fmt(t[k] ?? 0);
  const profiles = new Map<string, number>();
  for (const r of reports) profiles.set(r.profile, (profiles.get(r.profile) ?? 0) + 1);
  const unknown = reports.filter((r) => r.stats.linearizable === 'unknown').length;
  console.log(`swarm done: ${fmt(reports.length)} seeds in ${secs.toFixed(1)}s (${(reports.length / Math.max(secs, 1e-9)).toFixed(1)} seeds/s)`);
  console.log(`  profiles: ${[...profiles].sort().map(([p, n]) => `${p} ${n}`).join(', ')}`);
  const maxInFlight = Math.max(0, ...reports.filter((r) => r.ok).map((r) => r.stats.maxInFlight));
  console.log(
    `  simulated ${fmt(Math.round((t['simTimeMs'] ?? 0) / 1000))}s in ${g('steps')} steps; messages ${g('messages')} ` +
      `(dropped ${g('dropped')}, duplicated ${g('duplicated')}; at most ${fmt(maxInFlight)} in flight in a passing run)`,
  );
  console.log(
    `  faults injected ${g('faults')}: partitions ${g('partitions')}, crashes ${g('crashes')}, loss/dup spikes ${g('spikes')}, disk stalls ${g('diskStalls')}, ` +
      `membership changes ${g('membershipChanges')}, leader transfers ${g('transfers')}`,
  );
  console.log(
    `  raft: elections ${g('elections')}, leaders ${g('leaders')}, entries committed ${g('commits')}, ` +
      `snapshots taken ${g('snapshotsTaken')}, sent ${g('snapshotsSent')} (${g('snapshotChunks')} chunks, ${g('snapshotChunksRead')} read back from disk)`,
  );
  console.log(
    `  clients: ${g('ops')} ops: ${g('okOps')} ok, ${g('infoOps')} info, ${g('failOps')} fail; ` +
      `CAS ${g('casOk')} ok, ${g('casMismatch')} refused at the read, ${g('casConflict')} refused by the version CAS; transactions ${g('txnApplied')} applied, ${g('txnNotApplied')} not (comparison); ${g('noSpace')} refused with NO_SPACE; ` +
      `linearizability unknown (search budget) on ${unknown} seed(s)`,
  );
  console.log(`  watches: ${g('watchEvents')} events checked on the nodes' event streams, ${g('watchRestarts')} subscriptions (starts, resumes, re-lists)`);
}

// ---- replay and demo ----------------------------------------------------------------------------

const QUIET_PREFIXES = ['tick', 'deliver ', 'fsync ', 'drop '];

async function replay(args: Args): Promise<number> {
  const seed = intFlag(args, 'seed', undefined, 0);
  if (seed === undefined) throw new UsageError('replay needs --seed S');
  const verbose = args.flags.get('verbose') === 'true';
  const options = runFlags(args);
  const r = await runSimulation({
    ...options,
    seed,
    onLine: (line) => {
      if (verbose) {
        console.log(line);
        return;
      }
      const what = line.slice(12);
      if (!QUIET_PREFIXES.some((p) => what.startsWith(p))) console.log(line);
    },
  });
  console.log(`event log sha256 ${r.eventLogDigest}`);
  console.log(`stats ${JSON.stringify(r.stats)}`);
  if (r.violation !== undefined) {
    printViolation((s) => console.log(s), seed, r.profile, r.violation, replayCommand({ ...options, seed }), 0);
    return 1;
  }
  console.log(`OK: seed ${seed}, no violations`);
  return 0;
}

async function demo(args: Args): Promise<number> {
  // Seed 8 of the default profile shows elections, partitions, crashes, membership changes,
  // leader transfers and snapshot installs in five simulated seconds.
  const options: SimulationOptions = {
    seed: intFlag(args, 'seed', 8, 0) ?? 8,
    durationMs: intFlag(args, 'duration-ms', 5000, 1) ?? 5000,
    faults: args.flags.get('faults') ?? 'default',
  };
  const seed = options.seed;
  const narrator = new Narrator();
  console.log('Cairn deterministic simulation: the shipped replica (Raft core, driver, FSM, store, event stream), simulated network, disks, clients and faults.');
  console.log(`One seed reproduces the whole run: ${replayCommand(options)}\n`);
  const r = await runSimulation({ ...options, onLine: (line) => narrator.line(line).forEach((s) => console.log(s)) });
  const s = r.stats;
  console.log(
    `\nsummary: ${fmt(s.steps)} steps, ${fmt(s.messages)} messages (${fmt(s.dropped)} dropped), ${s.faults} faults, ` +
      `${s.crashes} crashes, ${s.leaders} leaders, ${fmt(s.commits)} entries committed, ${s.snapshotsSent} snapshots sent; ` +
      `clients ${fmt(s.okOps)} ok / ${fmt(s.infoOps)} info / ${fmt(s.failOps)} fail; linearizable: ${String(s.linearizable)}`,
  );
  if (r.violation !== undefined) {
    printViolation((x) => console.log(x), seed, r.profile, r.violation, replayCommand(options), 0);
    return 1;
  }
  return 0;
}

/**
 * Every planted bug under every fault profile: the share of seeds whose run catches it, and
 * the kinds of violation that caught it (the closing notes' "which profile catches what").
 */
async function planted(args: Args): Promise<number> {
  const seeds = intFlag(args, 'seeds', 30, 1) ?? 30;
  const start = intFlag(args, 'start', 1, 0) ?? 1;
  const durationMs = intFlag(args, 'duration-ms', undefined, 1);
  const profiles = Object.keys(FAULT_PROFILES).filter((p) => p !== 'none');
  // --planted-bug B / --driver-bug B: only that bug (checked as in swarm and replay).
  const only = runFlags(args);
  const onlyCore = Object.keys(only.plantedBugs ?? {});
  const onlyDriver = Object.keys(only.driverBugs ?? {});
  const onlyFsm = Object.keys(only.fsmBugs ?? {});
  const filtered = onlyCore.length + onlyDriver.length + onlyFsm.length > 0;
  const bugs: { name: string; options: Omit<SimulationOptions, 'seed'> }[] = [
    ...PLANTED_BUGS.filter((b) => !filtered || onlyCore.includes(b)).map((b) => ({ name: `${b} (core)`, options: { plantedBugs: { [b]: true } } })),
    ...DRIVER_BUGS.filter((b) => !filtered || onlyDriver.includes(b)).map((b) => ({ name: `${b} (driver)`, options: { driverBugs: { [b]: true } } })),
    ...FSM_BUGS.filter((b) => !filtered || onlyFsm.includes(b)).map((b) => ({ name: `${b} (fsm)`, options: { fsmBugs: { [b]: true } } })),
  ];
  console.log(`sim planted: ${bugs.length} planted bugs x ${profiles.length} fault profiles, seeds ${start}..${start + seeds - 1} each${durationMs !== undefined ? `, ${durationMs} ms of faults` : ''}`);
  console.log(`| bug | ${profiles.join(' | ')} |`);
  console.log(`|---|${profiles.map(() => '---:').join('|')}|`);
  let missed = 0;
  for (const bug of bugs) {
    const cells: string[] = [];
    const kinds = new Map<string, number>();
    for (const faults of profiles) {
      let caught = 0;
      for (let seed = start; seed < start + seeds; seed++) {
        const r = await runSimulation({ ...bug.options, faults, seed, ...(durationMs !== undefined ? { durationMs } : {}) });
        if (r.violation !== undefined) {
          caught++;
          kinds.set(r.violation.kind, (kinds.get(r.violation.kind) ?? 0) + 1);
        }
      }
      cells.push(`${Math.round((caught / seeds) * 100)}%`);
    }
    if (cells.every((c) => c === '0%')) missed++;
    console.log(`| ${bug.name} | ${cells.join(' | ')} |`);
    console.log(`|   caught as | ${[...kinds].sort((a, b) => b[1] - a[1]).map(([k, n]) => `${k} ${n}`).join(', ') || '-'} |`);
  }
  return missed === 0 ? 0 : 1;
}

const USAGE = `usage:
  node dist/cluster-test/sim/cli.js swarm --seeds N [--start S] [--duration-ms M] [--faults P] [--nodes 3|5] [--snapshot-chunk-bytes B] [--quota-bytes Q] [--planted-bug B] [--driver-bug B] [--fsm-bug B] [--jobs J]
  node dist/cluster-test/sim/cli.js replay --seed S [--verbose] [--duration-ms M] [--faults P] [--nodes 3|5] [--snapshot-chunk-bytes B] [--quota-bytes Q] [--planted-bug B] [--driver-bug B] [--fsm-bug B]
  node dist/cluster-test/sim/cli.js demo [--seed S] [--duration-ms M] [--faults P]
fault profiles: mixed (default: drawn from the seed), default, none, partitions, crashes, slow-disk, membership, chaos, stale-leader, figure8, hung-disk
  node dist/cluster-test/sim/cli.js planted [--seeds N] [--start S] [--duration-ms M] [--planted-bug B | --driver-bug B | --fsm-bug B]   (every planted bug, or the one named, x every profile: share of seeds caught)
planted bugs: ${PLANTED_BUGS.join(', ')} (--planted-bug, in the core), ${DRIVER_BUGS.join(', ')} (--driver-bug, in the shipped driver, src/replica), ${FSM_BUGS.join(', ')} (--fsm-bug, in the state machine, src/fsm)`;

async function main(argv: readonly string[]): Promise<number> {
  const args = parseArgs(argv);
  switch (args.command) {
    case 'swarm':
      return swarm(args);
    case 'replay':
      return replay(args);
    case 'demo':
      return demo(args);
    case 'planted':
      return planted(args);
    case 'help':
    case '--help':
      console.log(USAGE);
      return 0;
    default:
      throw new UsageError(`unknown command ${JSON.stringify(args.command)}`);
  }
}

if (!isMainThread) {
  void workerMain(workerData as WorkerJob);
} else if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) {
  main(process.argv.slice(2)).then(
    (code) => {
      process.exitCode = code;
    },
    (e: unknown) => {
      if (e instanceof UsageError || e instanceof TypeError) {
        console.error(`sim: ${e.message}\n${USAGE}`);
        process.exitCode = 2;
      } else {
        console.error(e);
        process.exitCode = 1;
      }
    },
  );
}
