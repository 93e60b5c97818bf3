/**
 * The fault schedule: a pure function of a seed, so a printed seed replays the same faults.
 * Every choice that does not depend on the cluster's state at run time (which nemesis, which
 * node, which halves, how much delay) is drawn here; "the leader" is resolved when the fault
 * starts, since no seed can know who will lead.
 */

import { bridgeCuts, bridgeSides, describeCuts, ringCuts } from './partitions.js';

/** A small, fast PRNG (mulberry32): deterministic across platforms and Node versions. */
export class Rng {
  private state: number;
  constructor(seed: number) {
    this.state = seed >>> 0;
  }
  /** Uniform in [0, 1). */
  next(): number {
    this.state = (this.state + 0x6d2b79f5) >>> 0;
    let t = this.state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  /** Uniform integer in [0, n). */
  int(n: number): number {
    return Math.floor(this.next() * n);
  }
  pick<T>(xs: readonly T[]): T {
    if (xs.length === 0) throw new Error('pick from an empty list');
    return xs[this.int(xs.length)] as T;
  }
  /** A shuffled copy (Fisher-Yates). */
  shuffle<T>(xs: readonly T[]): T[] {
    const out = [...xs];
    for (let i = out.length - 1; i > 0; i--) {
      const j = this.int(i + 1);
      [out[i], out[j]] = [out[j] as T, out[i] as T];
    }
    return out;
  }
}

export const NEMESES = ['partition', 'ring', 'bridge', 'oneway', 'kill', 'pause', 'netem', 'membership', 'transfer'] as const;
export type NemesisName = (typeof NEMESES)[number];

/**
 * Node indexes are 0-based positions in the host list. `all` is drawn only for kills: killing
 * every node at once is the one fault that loses what no node has on disk (an acknowledged
 * write whose fsync was skipped or delayed; one killed node is repaired from the others).
 */
export type Target = { readonly kind: 'node'; readonly node: number } | { readonly kind: 'leader' } | { readonly kind: 'all' };

export type Fault =
  | { readonly nemesis: 'partition'; readonly mode: 'halves'; readonly side: readonly number[] }
  | { readonly nemesis: 'partition'; readonly mode: 'isolate-leader' }
  /** Majorities ring over the nodes in `order` (partitions.ts `ringCuts`). */
  | { readonly nemesis: 'ring'; readonly order: readonly number[] }
  /** Two halves and a bridge node between them, from `order` (partitions.ts `bridgeSides`). */
  | { readonly nemesis: 'bridge'; readonly order: readonly number[] }
  /**
   * One-way drops. `in`: the target drops packets from its peers; `out`: its peers drop the
   * target's packets. `peer`: every other node, or the `peer`-th (0-based) of the nodes other
   * than the target in host order (resolved when the fault starts, since the target may be
   * the leader).
   */
  | { readonly nemesis: 'oneway'; readonly target: Target; readonly direction: 'in' | 'out'; readonly peer: number | 'all' }
  /**
   * Remove the target from the Raft configuration, then add it back at heal. `running`: it
   * keeps running with its data and is added back through the API. `stopped`: kill -9 once
   * removed, restarted with its data at heal (it asks to join again by itself). `wiped`: kill
   * -9 once removed and its data dir deleted; restarted empty at heal, it joins as a new node.
   */
  | { readonly nemesis: 'membership'; readonly target: Target; readonly mode: MembershipMode }
  /**
   * Leadership transfers during the fault: after each step's `afterMs`, to the `pick`-th
   * (0-based) of the nodes other than the leader at that moment, in host order.
   */
  | { readonly nemesis: 'transfer'; readonly steps: readonly TransferStep[] }
  | { readonly nemesis: 'kill'; readonly target: Target }
  | { readonly nemesis: 'pause'; readonly target: Target }
  | { readonly nemesis: 'netem'; readonly target: Target; readonly delayMs: number; readonly jitterMs: number; readonly lossPercent: number };

export const MEMBERSHIP_MODES = ['running', 'stopped', 'wiped'] as const;
export type MembershipMode = (typeof MEMBERSHIP_MODES)[number];

export interface TransferStep {
  /** Milliseconds after the previous transfer (the first: after the fault starts). */
  readonly afterMs: number;
  readonly pick: number;
}

/** The gap between two transfers of a storm (ms). */
export const TRANSFER_GAP_MS: readonly [number, number] = [200, 600];

export interface ScheduledFault {
  /** Milliseconds after the workload starts. */
  readonly startMs: number;
  /** When the fault is healed (killed nodes restarted, paused ones continued, rules removed). */
  readonly endMs: number;
  readonly fault: Fault;
}

export interface ScheduleOptions {
  readonly seed: number;
  readonly nodes: number;
  readonly nemeses: readonly NemesisName[];
  /** The workload's length; the last fault is healed by then. */
  readonly timeMs: number;
  /** Quiet time at the start, before the first fault. Default 2 s. */
  readonly leadInMs?: number;
  /** A fault lasts between these (ms). Default 3 s .. 6 s. */
  readonly faultMs?: readonly [number, number];
  /** The healed gap after each fault (ms). Default 2 s .. 4 s: long enough to elect and catch up. */
  readonly healMs?: readonly [number, number];
}

/** Alternating fault and heal intervals from `seed`; the same options give the same schedule. */
export function makeSchedule(o: ScheduleOptions): ScheduledFault[] {
  if (o.nemeses.length === 0) return [];
  if (!Number.isInteger(o.nodes) || o.nodes < 1) throw new Error(`nodes must be a positive integer, got ${String(o.nodes)}`);
  const rng = new Rng(o.seed);
  const [fMin, fMax] = o.faultMs ?? [3000, 6000];
  const [hMin, hMax] = o.healMs ?? [2000, 4000];
  const between = (lo: number, hi: number): number => lo + rng.int(Math.max(1, hi - lo + 1));
  const out: ScheduledFault[] = [];
  let t = o.leadInMs ?? 2000;
  for (;;) {
    const len = between(fMin, fMax);
    if (t + len > o.timeMs) break;
    out.push({ startMs: t, endMs: t + len, fault: drawFault(rng, rng.pick(o.nemeses), o.nodes, len) });
    t += len + between(hMin, hMax);
  }
  return out;
}

/** The share of kills that kill every node at once (Jepsen's kill nemesis also targets all). */
export const KILL_ALL_SHARE = 0.2;

/** The `pick`-th (0-based) node other than `node`, in host order. */
export function nthOther(node: number, pick: number): number {
  return pick >= node ? pick + 1 : pick;
}

function drawTarget(rng: Rng, nodes: number): Target {
  return rng.next() < 0.5 ? { kind: 'leader' } : { kind: 'node', node: rng.int(nodes) };
}

function drawFault(rng: Rng, nemesis: NemesisName, nodes: number, lenMs: number): Fault {
  switch (nemesis) {
    case 'partition': {
      if (rng.next() < 0.5) return { nemesis, mode: 'isolate-leader' };
      // A minority side (at least one node): the other side keeps a majority.
      const size = 1 + rng.int(Math.max(1, Math.floor((nodes - 1) / 2)));
      return { nemesis, mode: 'halves', side: rng.shuffle([...Array(nodes).keys()]).slice(0, size).sort((a, b) => a - b) };
    }
    case 'ring':
    case 'bridge':
      return { nemesis, order: rng.shuffle([...Array(nodes).keys()]) };
    case 'oneway':
      return { nemesis, target: drawTarget(rng, nodes), direction: rng.pick(['in', 'out'] as const), peer: rng.next() < 0.5 || nodes < 2 ? 'all' : rng.int(nodes - 1) };
    case 'membership':
      return { nemesis, target: drawTarget(rng, nodes), mode: rng.pick(MEMBERSHIP_MODES) };
    case 'transfer': {
      const steps: TransferStep[] = [];
      const [lo, hi] = TRANSFER_GAP_MS;
      for (let at = 0; ; ) {
        const afterMs = lo + rng.int(hi - lo + 1);
        if ((at += afterMs) >= lenMs) break;
        steps.push({ afterMs, pick: rng.int(Math.max(1, nodes - 1)) });
      }
      return { nemesis, steps };
    }
    case 'kill':
      return { nemesis, target: rng.next() < KILL_ALL_SHARE ? { kind: 'all' } : drawTarget(rng, nodes) };
    case 'pause':
      return { nemesis, target: drawTarget(rng, nodes) };
    case 'netem':
      return { nemesis, target: drawTarget(rng, nodes), delayMs: 50 + rng.int(200), jitterMs: 10 + rng.int(50), lossPercent: 5 + rng.int(20) };
    default: {
      const never: never = nemesis;
      throw new Error(`unknown nemesis ${String(never)}`);
    }
  }
}

/** One line per fault, for the log and the report. */
export function describeFault(f: Fault, names: (node: number) => string = (n) => `n${n + 1}`): string {
  const target = (t: Target): string => (t.kind === 'leader' ? 'the leader' : t.kind === 'all' ? 'every node' : names(t.node));
  switch (f.nemesis) {
    case 'partition':
      return f.mode === 'isolate-leader' ? 'partition: isolate the leader' : `partition: {${f.side.map(names).join(',')}} from the rest`;
    case 'ring':
      return `ring ${f.order.map(names).join('-')}: ${describeCuts(ringCuts(f.order.length, f.order), names)}`;
    case 'bridge': {
      const { left, bridge, right } = bridgeSides(f.order.length, f.order);
      return `bridge {${left.map(names).join(',')}} - ${names(bridge)} - {${right.map(names).join(',')}}: ${describeCuts(bridgeCuts(f.order.length, f.order), names)}`;
    }
    case 'oneway': {
      const who = f.peer === 'all' ? 'every other node' : f.target.kind === 'node' ? names(nthOther(f.target.node, f.peer)) : `the other node #${f.peer + 1} (host order, the leader left out)`;
      const [dropper, sender] = f.direction === 'in' ? [target(f.target), who] : [who, target(f.target)];
      return `one-way: ${dropper} ${f.direction === 'out' && f.peer === 'all' ? 'drop' : 'drops'} packets from ${sender}; the other direction still flows`;
    }
    case 'membership': {
      const how = { running: 'it keeps running; added back through the API at heal', stopped: 'then kill -9; restarted with its data at heal, it rejoins by itself', wiped: 'then kill -9 and its data dir deleted; restarted empty at heal, it joins as a new node' }[f.mode];
      return `membership: remove ${target(f.target)} from the Raft configuration, ${how}`;
    }
    case 'transfer':
      return `leader-transfer storm: ${f.steps.length} transfers ${TRANSFER_GAP_MS[0]}-${TRANSFER_GAP_MS[1]} ms apart, each to a random node other than the leader`;
    case 'kill':
      return `kill -9 ${target(f.target)}, restart at heal`;
    case 'pause':
      return `SIGSTOP ${target(f.target)}, SIGCONT at heal`;
    case 'netem':
      return `netem on ${target(f.target)}: delay ${f.delayMs}ms ±${f.jitterMs}ms, loss ${f.lossPercent}%`;
    default: {
      const never: never = f;
      return String(never);
    }
  }
}

/** Parses `--nemesis partition,kill` (or `all`). */
export function parseNemeses(s: string): NemesisName[] {
  if (s === 'all') return [...NEMESES];
  if (s === '' || s === 'none') return [];
  return s.split(',').map((x) => {
    const n = x.trim();
    if (!(NEMESES as readonly string[]).includes(n)) throw new Error(`unknown nemesis '${n}' (known: ${NEMESES.join(', ')}, all, none)`);
    return n as NemesisName;
  });
}
