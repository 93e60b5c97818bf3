/**
 * The nemesis: a seeded schedule of faults and cluster events for the fault phase of a run.
 * Partitions (symmetric, one-way, bridge, isolating a node or the leader, the leader with one
 * follower), loss and duplication spikes, crashes (of a random node or the leader) with later
 * restarts, membership changes, leadership transfers, spurious campaigns and compactions. Some
 * actions are armed strikes that fire at the worst moment the driver reports: a node crashing
 * before its fsync returns, a leader cut off right after its election or right after it
 * commits entries of an earlier term (Figure 8 of the Raft paper), a leader's disk stalling
 * while its own log write is in flight (mostly ending in power loss). Every fault it starts it
 * also undoes after a while, and `stop` undoes them all for the quiet phase.
 */
import { isCairnError, learners, voters, type Message, type NodeId, type SeededRandom } from './raft.js';
import type { SimNode } from './node.js';
import type { EventLog } from './event-log.js';
import type { Scheduler } from './scheduler.js';
import type { SimNetwork } from './network.js';

export const FaultAction = [
  'partition',
  'one-way',
  'bridge',
  'isolate',
  'isolate-leader',
  'heal',
  'loss-spike',
  'dup-spike',
  'crash',
  'crash-leader',
  'membership',
  'transfer',
  'compact',
  'strike-on-commit',
  'strike-on-elected',
  'leader-with-one',
  'crash-before-sync',
  'campaign',
  // Appended last: a profile that gives it no weight draws exactly as before it existed.
  'disk-stall',
] as const;
export type FaultAction = (typeof FaultAction)[number];

export interface FaultProfile {
  readonly name: string;
  /** Gap between two fault actions, ms, uniform in [lo, hi]. */
  readonly intervalMs: readonly [number, number];
  /** Relative weight of each action (0 = never). */
  readonly weights: Readonly<Record<FaultAction, number>>;
  /** How long a partition lasts before it heals on its own, ms. */
  readonly partitionMs: readonly [number, number];
  /** How long a crashed node stays down, ms. */
  readonly downMs: readonly [number, number];
  /** How long a loss or duplication spike lasts, ms. */
  readonly spikeMs: readonly [number, number];
  /** Loss (or duplication) probability during a spike. */
  readonly spikeProbability: readonly [number, number];
  /** How long a disk stall lasts (`disk-stall`: no fsync of that node completes meanwhile), ms. */
  readonly stallMs: readonly [number, number];
  /** At most this many nodes down at once (a minority keeps the cluster live during faults). */
  readonly maxDown: 'minority' | 'any';
  /** Run parameters this profile fixes instead of drawing them from the seed. */
  readonly overrides?: ProfileOverrides;
}

export interface ProfileOverrides {
  readonly nodes?: number;
  readonly maxAppendBytes?: number;
  readonly maxInflightMsgs?: number;
  readonly keys?: number;
  readonly clients?: number;
  readonly readRatio?: number;
  /** Of the non-CAS writes, the share that are two-register transactions (default 0.3). */
  readonly txnRatio?: number;
  readonly thinkMaxMs?: number;
  readonly maxDelayMs?: number;
  readonly fsyncMaxMs?: number;
  /** ReplicaOptions.writeStallMs: a leader whose write hangs this long hands leadership over. */
  readonly writeStallMs?: number;
}

const BASE: Omit<FaultProfile, 'name' | 'weights'> = {
  intervalMs: [100, 600],
  partitionMs: [200, 1500],
  downMs: [100, 1500],
  spikeMs: [200, 1000],
  spikeProbability: [0.1, 0.4],
  // About the time a follower takes to acknowledge a few appends (a network round trip and its
  // fsync: 5-60 ms here), up to a couple of election timeouts (100-200 ms).
  stallMs: [40, 250],
  maxDown: 'minority',
};

const w = (x: Partial<Record<FaultAction, number>>): Record<FaultAction, number> => {
  const out = {} as Record<FaultAction, number>;
  for (const a of FaultAction) out[a] = x[a] ?? 0;
  return out;
};

export const FAULT_PROFILES: Readonly<Record<string, FaultProfile>> = {
  /** Everything, in proportions that keep the cluster mostly available. */
  default: {
    ...BASE,
    name: 'default',
    weights: w({
      partition: 3, 'one-way': 2, bridge: 2, isolate: 2, 'isolate-leader': 3, heal: 2, 'loss-spike': 2, 'dup-spike': 1,
      crash: 3, 'crash-leader': 2, membership: 3, transfer: 2, compact: 2, campaign: 1, 'crash-before-sync': 1,
    }),
  },
  /** No faults at all: the happy path (clients and snapshots only). */
  none: { ...BASE, name: 'none', intervalMs: [1000, 1000], weights: w({}) },
  /** Network faults only. */
  partitions: {
    ...BASE,
    name: 'partitions',
    weights: w({ partition: 3, 'one-way': 3, bridge: 3, isolate: 2, 'isolate-leader': 4, heal: 1, 'loss-spike': 1, 'dup-spike': 1 }),
  },
  /** Crashes and restarts with lost unsynced writes (also at the end of a leader's disk stall), plus leader churn. */
  crashes: {
    ...BASE,
    name: 'crashes',
    weights: w({ crash: 3, 'crash-leader': 3, 'crash-before-sync': 4, 'strike-on-commit': 1, transfer: 2, compact: 1, heal: 1, 'disk-stall': 4 }),
    maxDown: 'any',
  },
  /**
   * Disk stalls of leaders with their own log write in flight, most ending in power loss, and
   * nothing else (the strike alone, for the planted `countOwnWriteEarly`; not in the mix).
   */
  'slow-disk': { ...BASE, name: 'slow-disk', weights: w({ 'disk-stall': 1 }) },
  /**
   * Hung disks: the same strike held 200-1,500 ms (several election timeouts), with the
   * replicas handing leadership over after 250 ms of a hung write (ReplicaOptions.writeStallMs,
   * src/replica/README.md "A hung disk"), among crashes, isolations and transfers. Not in the mix.
   */
  'hung-disk': {
    ...BASE,
    name: 'hung-disk',
    intervalMs: [100, 500],
    stallMs: [200, 1500],
    weights: w({ 'disk-stall': 6, 'crash-leader': 1, crash: 1, isolate: 1, heal: 1, transfer: 1, 'crash-before-sync': 1 }),
    overrides: { writeStallMs: 250 },
  },
  /** Membership changes, transfers and compactions on a mostly healthy network. */
  membership: { ...BASE, name: 'membership', weights: w({ membership: 5, transfer: 3, compact: 2, crash: 1, isolate: 1, heal: 1, campaign: 1 }) },
  /** Many faults, fast, more than a minority down at times. */
  chaos: {
    ...BASE,
    name: 'chaos',
    intervalMs: [30, 250],
    maxDown: 'any',
    weights: w({
      partition: 3, 'one-way': 3, bridge: 2, isolate: 2, 'isolate-leader': 3, heal: 1, 'loss-spike': 2, 'dup-spike': 2,
      crash: 3, 'crash-leader': 3, membership: 3, transfer: 3, compact: 2, campaign: 2, 'crash-before-sync': 2,
      'strike-on-commit': 1, 'strike-on-elected': 1, 'leader-with-one': 1,
    }),
  },
  /** Stale leaders: the leader is cut off often and reads are sent everywhere (for read-index bugs). */
  'stale-leader': {
    ...BASE,
    name: 'stale-leader',
    intervalMs: [150, 500],
    partitionMs: [300, 1200],
    weights: w({ 'isolate-leader': 6, 'one-way': 2, partition: 2, heal: 1, transfer: 1 }),
    overrides: { keys: 2, clients: 8, readRatio: 0.6, thinkMaxMs: 10, maxDelayMs: 4, fsyncMaxMs: 2 },
  },
  /**
   * Figure 8 of the Raft paper: leaders crash with entries on a minority, and entries travel
   * one per message, so a leader holds old-term entries that reach a majority before its own
   * no-op does (for commit-rule bugs).
   */
  figure8: {
    ...BASE,
    name: 'figure8',
    intervalMs: [50, 300],
    downMs: [50, 600],
    partitionMs: [100, 600],
    maxDown: 'minority',
    weights: w({
      'crash-leader': 2, 'isolate-leader': 2, 'leader-with-one': 3, 'strike-on-commit': 4, 'strike-on-elected': 3, partition: 1, heal: 1,
    }),
    overrides: { nodes: 5, maxAppendBytes: 1, maxInflightMsgs: 1, thinkMaxMs: 5, clients: 8 },
  },
};

/** The profile a run uses when none is named: one drawn from the seed, with these weights. */
export const DEFAULT_FAULTS = 'mixed';
const MIXED: readonly (readonly [string, number])[] = [
  ['default', 4],
  ['chaos', 2],
  ['partitions', 1],
  ['crashes', 1],
  ['membership', 2],
  ['figure8', 1],
  ['stale-leader', 1],
];

/** Resolves a profile name; 'mixed' picks one of the fault profiles with `random`. */
export function resolveProfile(name: string, random: SeededRandom): FaultProfile {
  const total = MIXED.reduce((s, [, n]) => s + n, 0);
  let x = random.int(total);
  if (name !== DEFAULT_FAULTS) return faultProfile(name);
  for (const [p, n] of MIXED) {
    x -= n;
    if (x < 0) return faultProfile(p);
  }
  return faultProfile('default');
}

export function faultProfile(name: string): FaultProfile {
  const p = FAULT_PROFILES[name];
  if (p === undefined) {
    throw new TypeError(`unknown fault profile ${JSON.stringify(name)}; known: ${[DEFAULT_FAULTS, ...Object.keys(FAULT_PROFILES)].join(', ')}`);
  }
  return p;
}

/** The share of disk stalls that end in power loss (the rest end with the stalled fsyncs completing). */
const STALL_CRASH_PROBABILITY = 0.7;

/** What the nemesis needs from the simulation. */
export interface NemesisHost {
  readonly scheduler: Scheduler;
  readonly log: EventLog;
  readonly network: SimNetwork<Message>;
  /** Every replica ever started (up, down or removed). */
  nodes(): readonly SimNode[];
  /** The node currently acting as leader with the highest term, if any. */
  leader(): SimNode | undefined;
  crash(node: SimNode): void;
  restart(node: SimNode): void;
  /** Creates and starts a brand-new node from RawNode.emptyState(). */
  createNode(): SimNode | undefined;
  /** No fsync of `node`'s disk completes before `untilMs` (simulated time); ends at its crash. */
  stallDisk(node: SimNode, untilMs: number): void;
  /** An unexpected error in a callback, reported to the run. */
  violation(e: unknown): void;
}

export interface NemesisStats {
  actions: number;
  partitions: number;
  crashes: number;
  spikes: number;
  membershipChanges: number;
  transfers: number;
  compactions: number;
  diskStalls: number;
}

export class Nemesis {
  readonly stats: NemesisStats = { actions: 0, partitions: 0, crashes: 0, spikes: 0, membershipChanges: 0, transfers: 0, compactions: 0, diskStalls: 0 };
  private running = false;
  private partitionGen = 0;
  private spikeGen = 0;
  private readonly weightsTotal: number;
  private strikeArmed = false;
  private electedArmed = false;
  private syncArmed = false;
  private stallArmed = false;

  constructor(
    private readonly profile: FaultProfile,
    private readonly random: SeededRandom,
    private readonly host: NemesisHost,
  ) {
    this.weightsTotal = FaultAction.reduce((s, a) => s + profile.weights[a], 0);
  }

  start(): void {
    this.running = true;
    this.scheduleNext();
  }

  /** Ends the fault phase: heal the network, restore rates, restart every crashed node. */
  stop(): void {
    this.running = false;
    this.partitionGen++;
    this.spikeGen++;
    this.host.network.links.heal();
    this.host.network.resetRates();
    this.say('quiet: heal all, reset loss/dup, restart crashed nodes');
    for (const n of this.host.nodes()) if (!n.isUp) this.host.restart(n);
  }

  private say(what: string): void {
    this.host.log.add('nem', what);
  }

  private scheduleNext(): void {
    if (this.weightsTotal === 0) return;
    const [lo, hi] = this.profile.intervalMs;
    this.host.scheduler.after(this.random.range(lo, hi), () => {
      if (!this.running) return;
      this.act(this.pickAction());
      this.scheduleNext();
    });
  }

  private pickAction(): FaultAction {
    let x = this.random.int(this.weightsTotal);
    for (const a of FaultAction) {
      x -= this.profile.weights[a];
      if (x < 0) return a;
    }
    return 'heal';
  }

  private ids(): string[] {
    return this.host.nodes().map((n) => n.id);
  }

  private shuffled<T>(xs: readonly T[]): T[] {
    const out = [...xs];
    for (let i = out.length - 1; i > 0; i--) {
      const j = this.random.int(i + 1);
      const t = out[i] as T;
      out[i] = out[j] as T;
      out[j] = t;
    }
    return out;
  }

  /** Heals the current partition after a random while, unless another replaced it first. */
  private healLater(): void {
    const gen = ++this.partitionGen;
    this.stats.partitions++;
    const [lo, hi] = this.profile.partitionMs;
    this.host.scheduler.after(this.random.range(lo, hi), () => {
      if (!this.running || gen !== this.partitionGen) return;
      this.host.network.links.heal();
      this.say('heal (partition expired)');
    });
  }

  act(action: FaultAction): void {
    this.stats.actions++;
    const net = this.host.network;
    const ids = this.ids();
    switch (action) {
      case 'partition': {
        const order = this.shuffled(ids);
        const cut = this.random.range(1, Math.max(1, order.length - 1));
        const groups = [order.slice(0, cut).sort(), order.slice(cut).sort()];
        net.links.partition(groups);
        this.say(`partition ${groups.map((g) => `{${g.join(',')}}`).join('|')}`);
        this.healLater();
        return;
      }
      case 'one-way': {
        const order = this.shuffled(ids);
        const from = order[0] as string;
        const to = order[1] as string;
        net.links.heal();
        net.links.blockOneWay(from, to);
        if (this.random.chance(0.5)) {
          // Cut one node's outgoing links to a random subset: it hears others but is not heard.
          for (const other of order.slice(2)) if (this.random.chance(0.5)) net.links.blockOneWay(from, other);
          this.say(`one-way from ${from} (to ${to} and some others)`);
        } else this.say(`one-way ${from}->${to}`);
        this.healLater();
        return;
      }
      case 'bridge': {
        if (ids.length < 3) return;
        const order = this.shuffled(ids);
        const via = order[0] as string;
        const rest = order.slice(1);
        const cut = this.random.range(1, rest.length - 1);
        const left = rest.slice(0, cut).sort();
        const right = rest.slice(cut).sort();
        net.links.bridge(left, right, via);
        this.say(`bridge {${left.join(',')}}|{${right.join(',')}} via ${via}`);
        this.healLater();
        return;
      }
      case 'isolate':
      case 'isolate-leader': {
        const leader = this.host.leader();
        const node = action === 'isolate-leader' && leader !== undefined ? leader.id : this.random.pick(ids);
        net.links.isolate(node, ids);
        this.say(`isolate ${node}${action === 'isolate-leader' ? ' (leader)' : ''}`);
        this.healLater();
        return;
      }
      case 'heal':
        this.partitionGen++;
        net.links.heal();
        this.say('heal');
        return;
      case 'loss-spike':
      case 'dup-spike': {
        const [lo, hi] = this.profile.spikeProbability;
        const p = lo + (hi - lo) * this.random.next();
        const rates = net.rates;
        if (action === 'loss-spike') net.setRates(p, rates.dup);
        else net.setRates(rates.loss, p);
        this.stats.spikes++;
        this.say(`${action} ${p.toFixed(2)}`);
        const gen = ++this.spikeGen;
        const [slo, shi] = this.profile.spikeMs;
        this.host.scheduler.after(this.random.range(slo, shi), () => {
          if (!this.running || gen !== this.spikeGen) return;
          net.resetRates();
          this.say('spike over');
        });
        return;
      }
      case 'crash':
      case 'crash-leader': {
        const up = this.host.nodes().filter((n) => n.isUp);
        if (!this.canCrashAnother() || up.length === 0) return;
        const leader = this.host.leader();
        const node = action === 'crash-leader' && leader !== undefined ? leader : this.random.pick(up);
        this.say(`crash ${node.id}${node === leader ? ' (leader)' : ''}`);
        this.host.crash(node);
        this.stats.crashes++;
        const [lo, hi] = this.profile.downMs;
        this.host.scheduler.after(this.random.range(lo, hi), () => {
          if (this.running && !node.isUp) this.host.restart(node);
        });
        return;
      }
      case 'membership':
        this.changeMembership();
        return;
      case 'campaign': {
        // A spurious election timeout: a random node campaigns now (pre-vote first).
        const up = this.host.nodes().filter((n) => n.isUp);
        if (up.length === 0) return;
        const node = this.random.pick(up);
        this.say(`campaign ${node.id}`);
        node.campaign();
        return;
      }
      case 'transfer': {
        const leader = this.host.leader();
        const s = leader?.status();
        if (leader === undefined || s === undefined) return;
        const targets = voters(s.config).filter((id) => id !== leader.id);
        if (targets.length === 0) return;
        const target = this.random.pick(targets);
        this.say(`transfer leadership ${leader.id} -> ${target}`);
        this.stats.transfers++;
        this.tryCore(() => leader.transferLeadership(target));
        return;
      }
      case 'strike-on-commit':
        // Armed now, fired from onLeaderApplied: the leader is cut off or crashes right after
        // it commits, before its new commit index (or its next entries) reach the followers.
        this.strikeArmed = true;
        this.say('strike armed: the next leader to commit an earlier-term entry is cut off at once');
        return;
      case 'crash-before-sync':
        this.syncArmed = true;
        this.say('strike armed: the next node to issue a synced write crashes before the fsync returns');
        return;
      case 'strike-on-elected':
        this.electedArmed = true;
        this.say('strike armed: the next new leader is cut off soon after its election');
        return;
      case 'leader-with-one': {
        // The leader keeps one follower: its new entries reach only that one (a minority).
        const leader = this.host.leader();
        if (leader === undefined) return;
        const others = ids.filter((id) => id !== leader.id);
        const buddy = this.random.pick(others);
        const groups = [[leader.id, buddy].sort(), others.filter((id) => id !== buddy)];
        net.links.partition(groups);
        this.say(`partition ${groups.map((g) => `{${g.join(',')}}`).join('|')} (leader ${leader.id} keeps ${buddy})`);
        this.healLater();
        return;
      }
      case 'disk-stall':
        this.stallArmed = true;
        this.say('strike armed: the next leader to issue a log write has its disk stall');
        return;
      case 'compact': {
        const up = this.host.nodes().filter((n) => n.isUp);
        if (up.length === 0) return;
        const node = this.random.pick(up);
        if (node.snapshotNow()) this.stats.compactions++;
        return;
      }
    }
  }

  /** Whether one more node may go down under the profile's `maxDown` (minority: the rest keep a quorum). */
  private canCrashAnother(): boolean {
    const all = this.host.nodes().length;
    const down = this.host.nodes().filter((n) => !n.isUp).length;
    const limit = this.profile.maxDown === 'any' ? all - 1 : Math.floor((all - 1) / 2);
    return down < limit;
  }

  /**
   * Fires an armed disk stall on a leader that has just issued a log write: for a while no
   * fsync of its disk completes (writes still land in the page cache, visible to the node), as
   * when a device or a cloud volume stops acknowledging flushes. The leader keeps replicating:
   * its appends go before its own write (thesis §10.2.1), so the followers acknowledge entries
   * the leader's disk does not hold yet. A correct leader commits them on the followers' disks
   * alone and applies only what its own disk holds. Most stalls end in power loss while the
   * leader's write is still unsynced (it loses its unsynced tail, entries the followers
   * committed among them); the others end with the stalled fsyncs completing.
   *
   * This is the moment the planted driver bug `countOwnWriteEarly` is about: a leader that
   * counts its own write durable when it hands it off commits with the followers' disks only,
   * applies and answers entries its own disk does not hold (`apply-before-commit` or
   * `answer-before-commit` when only a minority's disks hold them), and the crash at the end of
   * the stall un-applies them (`lost-applied-entry`).
   */
  private stallDisk(node: SimNode): void {
    const [lo, hi] = this.profile.stallMs;
    const ms = this.random.range(lo, hi);
    const crash = this.random.chance(STALL_CRASH_PROBABILITY);
    const until = this.host.scheduler.now() + ms;
    const incarnation = node.incarnationNumber;
    this.host.stallDisk(node, until);
    this.stats.diskStalls++;
    this.say(`strike: disk stall ${node.id} (leader, a log write in flight) for ${ms} ms${crash ? ', then power loss' : ''}`);
    if (!crash) return;
    // Scheduled now, so it runs before the stalled fsyncs that complete at the same moment.
    this.host.scheduler.at(until, () => {
      if (!this.running || !node.isUp || node.incarnationNumber !== incarnation || !this.canCrashAnother()) return;
      this.say(`strike: crash ${node.id} at the end of its disk stall (${node.disk.unsyncedWrites} unsynced writes)`);
      this.host.crash(node);
      this.stats.crashes++;
      const [dlo, dhi] = this.profile.downMs;
      this.host.scheduler.after(this.random.range(dlo, dhi), () => {
        if (this.running && !node.isUp) this.host.restart(node);
      });
    });
  }

  /** Fires an armed fsync strike (or disk stall, on a leader): the node loses power while its write is not yet durable. */
  onSyncedWriteIssued(node: SimNode): void {
    if (this.running && this.stallArmed && node.role === 'leader' && node.isUp) {
      this.stallArmed = false;
      this.stallDisk(node);
      return;
    }
    if (!this.running || !this.syncArmed) return;
    if (!this.canCrashAnother()) return;
    this.syncArmed = false;
    // At +0 ms: after the current step, before any fsync (which takes at least 1 ms) returns.
    this.host.scheduler.after(0, () => {
      if (!this.running || !node.isUp) return;
      this.say(`strike: crash ${node.id} before its fsync returns`);
      this.host.crash(node);
      this.stats.crashes++;
      // A short power blip: the node is back while the messages of the moment are in flight.
      this.host.scheduler.after(this.random.range(1, 30), () => {
        if (this.running && !node.isUp) this.host.restart(node);
      });
    });
  }

  /** Fires an armed election strike: the new leader is isolated after a short reign. */
  onNewLeader(leader: SimNode): void {
    if (!this.running || !this.electedArmed) return;
    this.electedArmed = false;
    this.host.scheduler.after(this.random.range(0, 40), () => {
      if (!this.running || !leader.isUp || leader.role !== 'leader') return;
      this.host.network.links.isolate(leader.id, this.ids());
      this.say(`strike: isolate ${leader.id} (new leader)`);
      this.healLater();
    });
  }

  /**
   * Fires an armed strike: isolate (or crash) a leader that has just committed entries of an
   * earlier term, the moment Figure 8 of the Raft paper is about.
   */
  onLeaderApplied(leader: SimNode, oldTerm: boolean): void {
    if (!this.running || !this.strikeArmed || !oldTerm) return;
    this.strikeArmed = false;
    if (this.random.chance(0.5)) {
      this.host.network.links.isolate(leader.id, this.ids());
      this.say(`strike: isolate ${leader.id} (leader, just committed)`);
      this.healLater();
    } else if (this.canCrashAnother()) {
      this.say(`strike: crash ${leader.id} (leader, just committed)`);
      this.host.crash(leader);
      this.stats.crashes++;
      const [lo, hi] = this.profile.downMs;
      this.host.scheduler.after(this.random.range(lo, hi), () => {
        if (this.running && !leader.isUp) this.host.restart(leader);
      });
    }
  }

  /**
   * One step of a membership walk that keeps 3 to 5 voters: promote a caught-up learner;
   * otherwise remove a voter (when more than 3) or add a learner (a removed node coming back,
   * or a brand-new node starting from an empty state).
   */
  private changeMembership(): void {
    const leader = this.host.leader();
    const s = leader?.status();
    if (leader === undefined || s === undefined) return;
    const vs = voters(s.config);
    const ls = learners(s.config);
    const propose = (what: string, change: Parameters<SimNode['proposeConfigChange']>[0]): void => {
      this.say(`membership ${what} (on leader ${leader.id}, voters ${vs.join(',')}${ls.length ? `, learners ${ls.join(',')}` : ''})`);
      leader.proposeConfigChange(change).then(
        () => {
          this.stats.membershipChanges++;
          this.say(`membership ${what}: committed`);
        },
        (e: unknown) => {
          if (isCairnError(e)) this.say(`membership ${what}: refused: ${e.code}: ${e.message}`);
          else this.host.violation(e);
        },
      );
    };
    const learner = ls[0];
    if (learner !== undefined) {
      const match = s.progress?.get(learner)?.match ?? 0;
      if (vs.length < 5 && match >= s.commit) propose(`promote ${learner}`, { type: 'promote', id: learner });
      else if (vs.length >= 5 || this.random.chance(0.3)) propose(`remove learner ${learner}`, { type: 'remove', id: learner });
      return;
    }
    const canRemove = vs.length > 3;
    const canAdd = vs.length < 5;
    if (canRemove && (!canAdd || this.random.chance(0.5))) {
      // Mostly a follower; sometimes the leader itself (it steps down once the change commits).
      const followers = vs.filter((id) => id !== leader.id);
      const target = this.random.chance(0.15) || followers.length === 0 ? leader.id : this.random.pick(followers);
      propose(`remove ${target}`, { type: 'remove', id: target });
      return;
    }
    if (!canAdd) return;
    const members = new Set<string>(s.config.members.map((m) => m.id));
    const outside = this.host.nodes().filter((n) => !members.has(n.id));
    let node: SimNode | undefined;
    if (outside.length > 0 && this.random.chance(0.6)) node = this.random.pick(outside);
    const fresh = node === undefined;
    if (fresh) node = this.host.createNode();
    if (node === undefined) return;
    const id: NodeId = node.id;
    // Usually as a learner first (promoted once caught up); sometimes straight in as a voter,
    // which single-server changes also allow (thesis §4.1), lagging log and all.
    const type = this.random.chance(0.2) ? 'add-voter' : 'add-learner';
    propose(`${type} ${id}${fresh ? ' (new, empty)' : ' (returning)'}`, { type, id, address: `sim://${id}` });
    if (!node.isUp) this.host.restart(node);
  }

  /** Runs a core call that may refuse with a typed error; logs the refusal. */
  private tryCore(call: () => unknown): boolean {
    try {
      call();
      return true;
    } catch (e) {
      if (isCairnError(e)) {
        this.say(`refused: ${e.code}: ${e.message}`);
        return false;
      }
      throw e;
    }
  }
}
