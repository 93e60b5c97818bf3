/**
 * The load generator's phases, the same code for both systems (bench/systems.ts KvSystem):
 * closed-loop workers (each sends its next request when the previous one is answered) for a
 * warm-up and then a measured window, and the leader-failover trials.
 */
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { windowMetrics, type NodeWindowMetrics } from './breakdown.js';
import { makeValue, serverCpu, serverRss, KEY_COUNT, type KvOps, type KvSystem } from './systems.js';
import { machineBusySeconds, now, sleep } from './procs.js';
import { percentileSorted } from './report.js';

export type PhaseKind = 'cas' | 'cas-contended' | 'put' | 'read';

export interface PhaseSpec {
  /** Stable id, the same for both systems: `cas-leader-64`. */
  readonly id: string;
  readonly kind: PhaseKind;
  readonly clients: number;
  /** Every client talks to the leader, or client w to node w mod 3. */
  readonly target: 'leader' | 'spread';
  /** Keys the phase touches (1,000, or 10 for the contended variant). */
  readonly keys: number;
}

export interface LatencySummary {
  readonly count: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly p999Ms: number;
  readonly maxMs: number;
  readonly meanMs: number;
}

export interface PhaseResult {
  readonly id: string;
  readonly kind: PhaseKind;
  readonly clients: number;
  readonly target: 'leader' | 'spread';
  readonly keys: number;
  readonly leader: string;
  readonly leaderIndex: number;
  readonly seconds: number;
  /** Successful operations in the window: CAS rounds that applied, writes, reads. */
  readonly ops: number;
  readonly opsPerSec: number;
  /** Latency of every operation in the window: for CAS, the read plus the CAS write. */
  readonly latency: LatencySummary;
  /** For CAS: the compare-and-set write alone. */
  readonly writeLatency: LatencySummary | undefined;
  /** CAS rounds tried in the window, and how many found the version changed. */
  readonly attempts: number;
  readonly conflicts: number;
  readonly conflictRate: number;
  readonly errors: number;
  readonly errorSamples: Record<string, number>;
  /** The load generator's CPU in the window, % of one core (user + system, all its threads). */
  readonly loadgenCpuPct: number;
  /** Each server node's CPU in the window, % of one core, and their sum. */
  readonly serverCpuPct: readonly number[];
  readonly serverCpuPctTotal: number;
  readonly serverRssMiB: readonly number[];
  /** Each node's log fsyncs per second in the window and their mean duration (ms), from its metrics (NaN if unavailable). */
  readonly fsyncsPerSec: readonly number[];
  readonly fsyncMeanMs: readonly number[];
  /**
   * CPU the rest of the machine used in the window (% of one core): everything busy minus the
   * servers and the load generator. Other work on a shared machine; it skews the phase.
   */
  readonly otherCpuPct: number;
  /** The load generator was above 80% of a core in the window (CLIENT_BOUND_CPU_PCT): it, not the servers, was the limit. */
  readonly clientBound: boolean;
  /** Each node's timing histograms (growth over the window) and window gauges (bench/breakdown.ts); undefined where a scrape failed. */
  readonly nodeMetrics: readonly (NodeWindowMetrics | undefined)[];
  /** The load generator's own event-loop delay in the window (monitorEventLoopDelay, 10 ms resolution), ms. */
  readonly loadgenEventLoopDelayMs: { readonly mean: number; readonly p99: number };
  /**
   * Leader changes any node saw from the phase's start (before its warm-up) to its end, the
   * most of any node (NaN if no node's metrics answered). Nothing is failed in a throughput
   * phase, so anything above 0 is a needless election.
   */
  readonly leaderChanges: number;
}

function leaderChangesAll(sys: KvSystem): Promise<(number | undefined)[]> {
  return Promise.all(sys.nodeNames.map((_, i) => sys.leaderChanges(i)));
}

/** Every node's /metrics text (undefined where it did not answer), all at once. */
function scrapeAll(sys: KvSystem): Promise<(string | undefined)[]> {
  return Promise.all(sys.nodeNames.map((_, i) => sys.metricsText(i)));
}

function summarize(xs: number[]): LatencySummary {
  xs.sort((a, b) => a - b);
  let sum = 0;
  for (const x of xs) sum += x;
  return {
    count: xs.length,
    p50Ms: percentileSorted(xs, 50),
    p99Ms: percentileSorted(xs, 99),
    p999Ms: percentileSorted(xs, 99.9),
    maxMs: xs[xs.length - 1] ?? Number.NaN,
    meanMs: xs.length > 0 ? sum / xs.length : Number.NaN,
  };
}

/**
 * A phase is client-bound when the load generator (this process, all its threads) used more
 * than this share of one core during the measured window: it is then the limit, not the server.
 */
export const CLIENT_BOUND_CPU_PCT = 80;

export function isClientBound(loadgenCpuPct: number): boolean {
  return Number.isFinite(loadgenCpuPct) && loadgenCpuPct > CLIENT_BOUND_CPU_PCT;
}

function errorText(e: unknown): string {
  const m = e instanceof Error ? e.message : String(e);
  return m.length > 120 ? `${m.slice(0, 120)}...` : m;
}

/**
 * Runs one phase: `spec.clients` workers for `warmupMs`, then a measured window of `durationMs`
 * (an operation counts when it started and ended inside it), then waits for the requests in
 * flight. Which key a worker uses: uncontended phases give worker w its own keys (k = w, w + C,
 * w + 2C, ... below 1,000, in turn), so CAS never conflicts between workers; reads pick keys at
 * random; the contended variant picks one of the first 10 keys at random.
 */
export async function runPhase(sys: KvSystem, spec: PhaseSpec, leaderIndex: number, timing: { readonly warmupMs: number; readonly durationMs: number }): Promise<PhaseResult> {
  const nodes = sys.nodeNames.length;
  const ops: KvOps[] = sys.nodeNames.map((_, i) => sys.ops(i));
  let stop = false;
  let measureStart = Number.POSITIVE_INFINITY;
  let measureEnd = Number.POSITIVE_INFINITY;
  const latencies: number[] = [];
  const writeLatencies: number[] = [];
  let okOps = 0;
  let attempts = 0;
  let conflicts = 0;
  let errors = 0;
  const errorSamples: Record<string, number> = {};
  const inWindow = (t0: number, t1: number): boolean => t0 >= measureStart && t1 <= measureEnd;

  const worker = async (w: number): Promise<void> => {
    const node = ops[spec.target === 'leader' ? leaderIndex : w % nodes] as KvOps;
    const ownKeys: number[] = [];
    for (let k = w % spec.keys; k < spec.keys; k += spec.clients) ownKeys.push(k);
    for (let seq = 0; !stop; seq++) {
      const key =
        spec.kind === 'read' || spec.kind === 'cas-contended' || ownKeys.length === 0 ? Math.floor(Math.random() * spec.keys) : (ownKeys[seq % ownKeys.length] as number);
      const t0 = now();
      try {
        switch (spec.kind) {
          case 'read': {
            await node.read(key);
            const t1 = now();
            if (inWindow(t0, t1)) {
              okOps++;
              latencies.push(t1 - t0);
            }
            break;
          }
          case 'put': {
            await node.put(key, makeValue(w, seq));
            const t1 = now();
            if (inWindow(t0, t1)) {
              okOps++;
              latencies.push(t1 - t0);
            }
            break;
          }
          case 'cas':
          case 'cas-contended': {
            const version = await node.read(key);
            const tw = now();
            const applied = await node.cas(key, version, makeValue(w, seq));
            const t1 = now();
            if (inWindow(t0, t1)) {
              attempts++;
              latencies.push(t1 - t0);
              writeLatencies.push(t1 - tw);
              if (applied) okOps++;
              else conflicts++;
            }
            break;
          }
        }
      } catch (e) {
        errors++;
        const m = errorText(e);
        errorSamples[m] = (errorSamples[m] ?? 0) + 1;
        // A failing node would otherwise be hammered in a tight loop.
        await sleep(10);
      }
    }
  };

  const lc0 = await leaderChangesAll(sys);
  const workers = Array.from({ length: spec.clients }, (_, w) => worker(w));
  await sleep(timing.warmupMs);
  // One scrape per node at each end of the window: prom-client resets its event-loop delay
  // histogram at every scrape, so the closing scrape's gauges cover exactly the window.
  const m0 = await scrapeAll(sys);
  const loop = monitorEventLoopDelay({ resolution: 10 });
  loop.enable();
  const cpu0 = process.cpuUsage();
  const srv0 = serverCpu(sys);
  const machine0 = machineBusySeconds() ?? Number.NaN;
  measureStart = now();
  await sleep(timing.durationMs);
  measureEnd = now();
  const cpu1 = process.cpuUsage(cpu0);
  const srv1 = serverCpu(sys);
  const machine1 = machineBusySeconds() ?? Number.NaN;
  loop.disable();
  const rss = serverRss(sys);
  const m1 = await scrapeAll(sys);
  stop = true;
  await Promise.all(workers);
  const lc1 = await leaderChangesAll(sys);
  const changes = lc1.map((c, i) => (c !== undefined && lc0[i] !== undefined ? c - (lc0[i] as number) : Number.NaN)).filter((c) => Number.isFinite(c));

  const seconds = (measureEnd - measureStart) / 1000;
  const nodeMetrics = sys.nodeNames.map((_, i) => windowMetrics(m0[i], m1[i], sys.timingHistograms, sys.windowGauges));
  const fsync = nodeMetrics.map((m) => m?.histograms[sys.fsyncHistogram]);
  const fsyncCount = fsync.map((f) => f?.count ?? Number.NaN);
  const fsyncSeconds = fsync.map((f) => f?.seconds ?? Number.NaN);
  const serverCpuPct = srv1.map((s, i) => ((s - (srv0[i] ?? Number.NaN)) / seconds) * 100);
  const loadgenCpuPct = ((cpu1.user + cpu1.system) / 1e6 / seconds) * 100;
  const serverCpuPctTotal = serverCpuPct.reduce((a, b) => a + b, 0);
  return {
    id: spec.id,
    kind: spec.kind,
    clients: spec.clients,
    target: spec.target,
    keys: spec.keys,
    leader: sys.nodeNames[leaderIndex] ?? '?',
    leaderIndex,
    seconds,
    ops: okOps,
    opsPerSec: okOps / seconds,
    latency: summarize(latencies),
    writeLatency: spec.kind === 'cas' || spec.kind === 'cas-contended' ? summarize(writeLatencies) : undefined,
    attempts,
    conflicts,
    conflictRate: attempts > 0 ? conflicts / attempts : 0,
    errors,
    errorSamples,
    loadgenCpuPct,
    serverCpuPct,
    serverCpuPctTotal,
    otherCpuPct: Math.max(0, ((machine1 - machine0) / seconds) * 100 - loadgenCpuPct - serverCpuPctTotal),
    serverRssMiB: rss,
    fsyncsPerSec: fsyncCount.map((c) => c / seconds),
    fsyncMeanMs: fsyncCount.map((c, i) => ((fsyncSeconds[i] ?? Number.NaN) / c) * 1000),
    clientBound: isClientBound(loadgenCpuPct),
    nodeMetrics,
    loadgenEventLoopDelayMs: loop.count > 0 ? { mean: loop.mean / 1e6, p99: loop.percentile(99) / 1e6 } : { mean: Number.NaN, p99: Number.NaN },
    leaderChanges: changes.length > 0 ? Math.max(...changes) : Number.NaN,
  };
}

/** Writes every key once (64 at a time), so reads and CAS rounds find them. */
export async function preload(sys: KvSystem, leaderIndex: number): Promise<void> {
  const node = sys.ops(leaderIndex);
  let next = 0;
  const worker = async (): Promise<void> => {
    for (let k = next++; k < KEY_COUNT; k = next++) await node.put(k, makeValue(0, k));
  };
  await Promise.all(Array.from({ length: 64 }, () => worker()));
}

// ---- Failover ------------------------------------------------------------------------------

/**
 * How the leader is failed in a trial:
 * - `kill9`: SIGKILL. On one machine the kernel resets its TCP connections at once, so the
 *   followers see them break (the fast path of a crashed process, not of a crashed host);
 * - `sigstop`: SIGSTOP, SIGCONT after the trial. The process is silent, its connections stay
 *   open: what a hung host, a long stall or a VM pause looks like to the others;
 * - `drop`: every packet it sends or is sent is dropped (bench/netcut.ts), the table removed
 *   after the trial: what a cut network or a crashed host looks like (no reset, no answer).
 */
export type FailoverFault = 'kill9' | 'sigstop' | 'drop';

export const FAILOVER_FAULTS: Readonly<Record<FailoverFault, { readonly phase: string; readonly row: string; readonly verb: string }>> = {
  kill9: { phase: 'failover', row: 'failover: kill -9 leader -> next ack', verb: 'kill -9 the leader' },
  sigstop: { phase: 'failover-sigstop', row: 'failover: SIGSTOP leader -> next ack', verb: 'SIGSTOP the leader' },
  drop: { phase: 'failover-drop', row: "failover: leader's traffic dropped -> next ack", verb: "drop the leader's traffic" },
};

export interface FailoverTrial {
  readonly fault: FailoverFault;
  readonly killed: string;
  /** From the fault (SIGKILL, SIGSTOP, the drop rule in place) to the first acknowledged write sent after it. */
  readonly ms: number;
  readonly newLeader: string;
  /**
   * From the fault to the first time a survivor said it leads (its health, polled every
   * probeEveryMs): the election's share of `ms`; the rest is the first commit (and the probes
   * held during the outage, which reach the new leader all at once). NaN if never seen.
   */
  readonly electedMs: number;
  /** Probe writes sent after the kill, and how many of those failed. */
  readonly probesSent: number;
  readonly probesFailed: number;
}

export interface FailoverOptions {
  /** A probe write goes to every surviving node this often. */
  readonly probeEveryMs: number;
  /** Deadline of one probe write. */
  readonly probeTimeoutMs: number;
  /** Give up on a trial after this long without an acknowledged write. */
  readonly giveUpMs: number;
}

/**
 * One failover trial: probe writes (unconditional) go to every surviving node every
 * `probeEveryMs`; once they are being acknowledged the leader is failed (`fault`: SIGKILLed,
 * SIGSTOPped or cut off the network), and the trial measures the time from the fault to the
 * first acknowledgement of a probe sent after it. The same probing for both systems, each
 * survivor over a channel of its own, so no probe is ever sent to the failed leader and
 * neither's client retry policy is measured, only how soon the cluster can acknowledge a
 * write again. Then the fault is undone (the killed node restarted, the stopped one
 * SIGCONTinued, the drop rule removed; also when the trial fails) and the cluster waited on
 * until every node agrees on the leader and has caught up.
 *
 * No two probes in flight write the same key. Probes pile up while there is no leader (up to
 * probeTimeoutMs / probeEveryMs per survivor), and on one key they would all contend the
 * moment a leader is back: in Cairn an unconditional write is a compare-and-swap on the
 * version the server read, retried when another write came first, so a hundred writes to one
 * key go through one at a time, and the first acknowledgement would measure that hot key,
 * not the failover.
 */
/** Failover probe keys, reused once free: more than can be in flight (survivors x probeTimeoutMs / probeEveryMs). */
const PROBE_KEYS = 1000;

export async function failoverTrial(sys: KvSystem, opts: FailoverOptions, fault: FailoverFault = 'kill9'): Promise<FailoverTrial> {
  const leader = await sys.waitHealthy(60_000);
  const survivors = sys.nodeNames.map((_, i) => i).filter((i) => i !== leader);
  let seq = 0;
  const keysInFlight = new Set<number>();
  let nextKey = 0;
  const freeKey = (): number => {
    if (keysInFlight.size >= PROBE_KEYS) throw new Error(`more than ${PROBE_KEYS} probe writes in flight`);
    while (keysInFlight.has(nextKey)) nextKey = (nextKey + 1) % PROBE_KEYS;
    const k = nextKey;
    nextKey = (nextKey + 1) % PROBE_KEYS;
    keysInFlight.add(k);
    return k;
  };
  let killAt = Number.POSITIVE_INFINITY;
  let firstAck = Number.POSITIVE_INFINITY;
  let electedAt = Number.POSITIVE_INFINITY;
  let acksBeforeKill = 0;
  let sent = 0;
  let failed = 0;
  const inflight = new Set<Promise<void>>();
  const probe = (i: number): void => {
    const sentAt = now();
    const afterKill = sentAt >= killAt;
    if (afterKill) sent++;
    const key = freeKey();
    const p = sys
      .ops(i)
      .probe(key, makeValue(i, seq++), opts.probeTimeoutMs)
      .then(
        () => {
          if (afterKill) firstAck = Math.min(firstAck, now());
          else acksBeforeKill++;
        },
        () => {
          if (afterKill) failed++;
        },
      )
      .finally(() => {
        inflight.delete(p);
        keysInFlight.delete(key);
      });
    inflight.add(p);
  };
  let probing = true;
  const prober = (async (): Promise<void> => {
    while (probing) {
      for (const i of survivors) probe(i);
      await sleep(opts.probeEveryMs);
    }
  })();
  let faulted = false;
  const undo = async (): Promise<void> => {
    if (!faulted) return;
    faulted = false;
    if (fault === 'kill9') sys.restart(leader);
    else if (fault === 'sigstop') sys.resume(leader);
    else sys.reconnect();
  };
  let newLeader = '?';
  try {
    try {
      // Writes are being acknowledged through the survivors before the fault.
      const ready = now() + 10_000;
      while (acksBeforeKill < survivors.length && now() < ready) await sleep(opts.probeEveryMs);
      if (acksBeforeKill === 0) throw new Error(`${sys.name}: no probe write was acknowledged before the fault`);
      killAt = now();
      faulted = true;
      if (fault === 'kill9') await sys.kill9(leader);
      else if (fault === 'sigstop') sys.pause(leader);
      else sys.cutOff(leader);
      const deadline = killAt + opts.giveUpMs;
      // Poll the survivors for a leader while waiting for the first acknowledgement.
      const watcher = (async (): Promise<void> => {
        while (electedAt === Number.POSITIVE_INFINITY && now() < deadline) {
          const hs = await Promise.all(survivors.map((i) => sys.health(i).catch(() => undefined)));
          if (hs.some((h) => h?.isLeader === true)) electedAt = now();
          else if (firstAck !== Number.POSITIVE_INFINITY) break; // acknowledged, yet no survivor says it leads (cannot last)
          else await sleep(opts.probeEveryMs);
        }
      })();
      while (firstAck === Number.POSITIVE_INFINITY && now() < deadline) await sleep(5);
      await watcher;
      if (firstAck === Number.POSITIVE_INFINITY) throw new Error(`${sys.name}: no write acknowledged within ${opts.giveUpMs} ms of the fault (${FAILOVER_FAULTS[fault].verb}, ${sys.nodeNames[leader] ?? '?'})`);
    } finally {
      probing = false;
      await prober;
      await Promise.all(inflight);
    }
    // The survivors' view of the new leader, while the old one is still failed.
    const hs = await Promise.all(survivors.map((i) => sys.health(i)));
    newLeader = hs.find((h) => h.isLeader)?.name ?? hs[0]?.leader ?? '?';
  } finally {
    // Bring the failed node back, also when the trial failed (a stopped process or a drop
    // rule must never outlive it).
    await undo();
  }
  const killed = sys.nodeNames[leader] ?? '?';
  sys.resetClients();
  await sys.waitHealthy(120_000);
  return { fault, killed, ms: firstAck - killAt, newLeader, electedMs: Number.isFinite(electedAt) ? electedAt - killAt : Number.NaN, probesSent: sent, probesFailed: failed };
}
