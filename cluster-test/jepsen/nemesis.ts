/**
 * Applies and heals the faults of a schedule on real hosts: nftables partitions inside the
 * namespaces (halves, the leader isolated, majorities ring, bridge, one-way drops), kill -9 and
 * restart, SIGSTOP/SIGCONT, tc netem on a node's veth, Raft membership changes (remove a node,
 * add it back) and leader-transfer storms through the operator API.
 */
import type { Host, Hosts } from './hosts.js';
import { cutPlan, cutRules, healLossRules, healRules, lossRules } from './nft.js';
import { addPeer, codeOf, findLeader, removePeer, transferLeader, waitFullMembership } from './operator.js';
import { bridgeCuts, describeCuts, halvesCuts, onewayCuts, ringCuts, type Cut } from './partitions.js';
import { nthOther, type Fault, type MembershipMode, type Target, type TransferStep } from './schedule.js';

export { findLeader } from './operator.js';

/** What a fault did, once resolved against the cluster (the leader named, for instance). */
export interface AppliedFault {
  readonly fault: Fault;
  /** The hosts the fault acted on (for a partition: the minority side; for other cuts: every node that drops something). */
  readonly hosts: readonly string[];
  readonly startedAt: number;
  endedAt?: number;
  /** What happened; the heal may add to it (a transfer storm's tally). */
  note: string;
}

/** How long a membership change may take before the nemesis gives up (ms): through elections and pending changes. */
const REMOVE_MS = 15_000;
/** How long the heal of a membership fault may take: a restart, a join, catching up, promotion. */
const READD_MS = 45_000;

/** A transfer storm running in the background until its fault is healed. */
interface Storm {
  stopped: boolean;
  done: Promise<void>;
  readonly tally: { requested: number; ok: number; noLeader: number; errors: Map<string, number>; leaders: string[] };
}

export class Nemesis {
  /** Nodes this nemesis removed from the configuration and has not yet added back, with how. */
  private readonly removed = new Map<string, MembershipMode>();
  private readonly storms = new Map<AppliedFault, Storm>();

  constructor(
    private readonly hosts: Hosts,
    private readonly now: () => number,
  ) {}

  private async target(t: Target): Promise<Host> {
    if (t.kind === 'node') {
      const h = this.hosts.hosts[t.node % this.hosts.hosts.length];
      if (h === undefined) throw new Error('no hosts');
      return h;
    }
    if (t.kind === 'all') throw new Error('a fault on every node has no single target');
    // No leader known (an election in progress): fall back to the first host.
    return (await findLeader(this.hosts)) ?? (this.hosts.hosts[0] as Host);
  }

  private async targets(t: Target): Promise<Host[]> {
    return t.kind === 'all' ? [...this.hosts.hosts] : [await this.target(t)];
  }

  private byId(id: string): Host {
    const h = this.hosts.hosts.find((x) => x.id === id);
    if (h === undefined) throw new Error(`no host ${id}`);
    return h;
  }

  private names = (i: number): string => this.hosts.hosts[i]?.id ?? `#${i}`;

  /** Installs `cuts` (node indexes) as each node's nftables partition table; returns the nodes that drop something. */
  private async cut(cuts: readonly Cut[]): Promise<string[]> {
    const plan = cutPlan(this.hosts.hosts.map((h) => h.ip), cuts);
    const acting = this.hosts.hosts.filter((h) => {
      const c = plan.get(h.ip);
      return c !== undefined && c.from.length + c.to.length > 0;
    });
    await Promise.all(acting.map((h) => h.exec('nft', ['-f', '-'], cutRules(plan.get(h.ip) ?? { from: [], to: [] }))));
    return acting.map((h) => h.id);
  }

  /** Starts `fault`; returns what it did so `heal` can undo it. */
  async start(fault: Fault): Promise<AppliedFault> {
    const startedAt = this.now();
    const n = this.hosts.hosts.length;
    switch (fault.nemesis) {
      case 'partition': {
        const side = fault.mode === 'isolate-leader' ? [await this.target({ kind: 'leader' })] : fault.side.map((i) => this.hosts.hosts[i % n] as Host);
        await this.cut(halvesCuts(n, side.map((h) => h.index)));
        return { fault, hosts: side.map((h) => h.id), startedAt, note: `{${side.map((h) => h.id).join(',')}} | {${this.hosts.hosts.filter((h) => !side.includes(h)).map((h) => h.id).join(',')}}` };
      }
      case 'ring':
      case 'bridge':
      case 'oneway': {
        let cuts: Cut[];
        if (fault.nemesis === 'ring') cuts = ringCuts(n, fault.order);
        else if (fault.nemesis === 'bridge') cuts = bridgeCuts(n, fault.order);
        else {
          const t = (await this.target(fault.target)).index;
          const peers = fault.peer === 'all' ? [...Array(n).keys()].filter((i) => i !== t) : [nthOther(t, fault.peer % Math.max(1, n - 1))];
          cuts = onewayCuts(n, t, fault.direction, peers);
        }
        const acting = await this.cut(cuts);
        // A ring's or a bridge's cuts are in the fault's description already; a one-way drop's
        // depend on who leads, so the note names them.
        return { fault, hosts: acting, startedAt, note: fault.nemesis === 'oneway' ? describeCuts(cuts, this.names) : `rules on ${acting.join(',')}` };
      }
      case 'kill': {
        // Every target at once (kill -9 of all nodes: none may write anything after another died).
        const hs = await this.targets(fault.target);
        const infos = await Promise.all(hs.map((h) => h.kill9()));
        return { fault, hosts: hs.map((h) => h.id), startedAt, note: `killed ${hs.map((h, i) => `${h.id} (${String(infos[i]?.signal ?? infos[i]?.code)})`).join(', ')}` };
      }
      case 'pause': {
        const hs = await this.targets(fault.target);
        for (const h of hs) {
          h.signal('SIGSTOP');
          h.paused = true;
        }
        return { fault, hosts: hs.map((h) => h.id), startedAt, note: `paused ${hs.map((h) => h.id).join(',')}` };
      }
      case 'netem': {
        if (fault.target.kind === 'all') throw new Error('netem on every node is not supported');
        const h = await this.target(fault.target);
        try {
          await h.exec('tc', ['qdisc', 'replace', 'dev', 'eth0', 'root', 'netem', 'delay', `${fault.delayMs}ms`, `${fault.jitterMs}ms`, 'loss', `${fault.lossPercent}%`]);
          return { fault, hosts: [h.id], startedAt, note: `netem on ${h.id}` };
        } catch (e) {
          // Some kernels (this project's CI VMs) are built without sch_netem: keep the loss,
          // through nftables, and say the delay could not be applied.
          if (!/qdisc kind is unknown/i.test(e instanceof Error ? e.message : String(e))) throw e;
          await h.exec('nft', ['-f', '-'], lossRules('eth0', fault.lossPercent));
          return { fault, hosts: [h.id], startedAt, note: `no netem qdisc in this kernel: ${fault.lossPercent}% loss on ${h.id} via nftables, no delay` };
        }
      }
      case 'membership': {
        const h = await this.target(fault.target);
        // Recorded before the call: if the removal's answer is lost, the heal still adds it back.
        this.removed.set(h.id, fault.mode);
        const index = await removePeer(this.hosts, h, REMOVE_MS);
        let note = `removed ${h.id}${index !== undefined ? ` (committed by index ${index})` : ''}`;
        if (fault.mode !== 'running') {
          const info = await h.kill9();
          note += `, killed it (${String(info?.signal ?? info?.code)})`;
          if (fault.mode === 'wiped') {
            h.wipe();
            note += ', wiped its data dir';
          }
        }
        return { fault, hosts: [h.id], startedAt, note };
      }
      case 'transfer': {
        const applied: AppliedFault = { fault, hosts: this.hosts.hosts.map((h) => h.id), startedAt, note: `${fault.steps.length} transfers planned` };
        this.storms.set(applied, this.storm(fault.steps));
        return applied;
      }
      default: {
        const never: never = fault;
        throw new Error(`unknown fault ${JSON.stringify(never)}`);
      }
    }
  }

  /**
   * Transfers leadership after each step's gap, to the step's pick among the nodes other than
   * the leader of the moment, until stopped. Failures (no leader during an election, a transfer
   * already under way) are counted, not thrown: a storm is meant to hit those states.
   */
  private storm(steps: readonly TransferStep[]): Storm {
    const s: Storm = { stopped: false, done: Promise.resolve(), tally: { requested: 0, ok: 0, noLeader: 0, errors: new Map(), leaders: [] } };
    s.done = (async () => {
      for (const step of steps) {
        await new Promise((r) => setTimeout(r, step.afterMs));
        if (s.stopped) return;
        const leader = await findLeader(this.hosts);
        if (leader === undefined) {
          s.tally.noLeader++;
          continue;
        }
        if (s.tally.leaders[s.tally.leaders.length - 1] !== leader.id) s.tally.leaders.push(leader.id);
        const others = this.hosts.hosts.filter((h) => h !== leader);
        const to = others[step.pick % others.length] as Host;
        s.tally.requested++;
        const a = await transferLeader(leader, to);
        if (a.status === 200) s.tally.ok++;
        else s.tally.errors.set(codeOf(a), (s.tally.errors.get(codeOf(a)) ?? 0) + 1);
      }
    })();
    return s;
  }

  /** Puts a node removed by a membership fault back: running, then a voter again. */
  private async readd(id: string, mode: MembershipMode): Promise<void> {
    const h = this.byId(id);
    if (!h.running()) this.hosts.start(h);
    // Restarted with --join, a node that is not a member asks the leader to add it by itself
    // (src/server/agent.ts joinCluster), with its data or without. A node that kept running
    // does not: the operator adds it back.
    if (mode === 'running') await addPeer(this.hosts, h, READD_MS);
    await waitFullMembership(this.hosts, READD_MS);
    this.removed.delete(id);
  }

  /** Undoes `applied`: removes rules and qdiscs, restarts a killed node, continues a paused one, restores membership, ends a storm. */
  async heal(applied: AppliedFault): Promise<void> {
    switch (applied.fault.nemesis) {
      case 'partition':
      case 'ring':
      case 'bridge':
      case 'oneway':
        await Promise.all(this.hosts.hosts.map((h) => h.exec('nft', ['-f', '-'], healRules())));
        break;
      case 'kill':
        for (const id of applied.hosts) if (!this.byId(id).running()) this.hosts.start(this.byId(id));
        break;
      case 'pause':
        for (const id of applied.hosts) {
          this.byId(id).signal('SIGCONT');
          this.byId(id).paused = false;
        }
        break;
      case 'netem':
        for (const id of applied.hosts) {
          await this.byId(id).exec('tc', ['qdisc', 'del', 'dev', 'eth0', 'root']).catch(() => '');
          await this.byId(id).exec('nft', ['-f', '-'], healLossRules());
        }
        break;
      case 'membership':
        for (const id of applied.hosts) await this.readd(id, applied.fault.mode);
        applied.note += '; back as a voter';
        break;
      case 'transfer': {
        const s = this.storms.get(applied);
        if (s !== undefined) {
          s.stopped = true;
          await s.done;
          this.storms.delete(applied);
          const t = s.tally;
          const errs = [...t.errors].map(([code, k]) => `${k} ${code}`).join(', ');
          applied.note = `${t.requested} transfers requested, ${t.ok} accepted${errs !== '' ? `, refused: ${errs}` : ''}${t.noLeader > 0 ? `, ${t.noLeader} times no leader` : ''}; leaders seen ${t.leaders.join(' -> ')}`;
        }
        break;
      }
      default: {
        const never: never = applied.fault;
        throw new Error(`unknown fault ${JSON.stringify(never)}`);
      }
    }
    applied.endedAt = this.now();
  }

  /** Heals everything regardless of what is applied (end of run, or after a nemesis error). */
  async healAll(): Promise<void> {
    for (const s of this.storms.values()) s.stopped = true;
    await Promise.all([...this.storms.values()].map((s) => s.done));
    this.storms.clear();
    for (const h of this.hosts.hosts) {
      h.signal('SIGCONT');
      h.paused = false;
      await h.exec('nft', ['-f', '-'], healRules()).catch(() => '');
      await h.exec('tc', ['qdisc', 'del', 'dev', 'eth0', 'root']).catch(() => '');
      await h.exec('nft', ['-f', '-'], healLossRules()).catch(() => '');
      if (!h.running()) this.hosts.start(h);
    }
    // Last, with every node up and the network whole: a removed node that is not back yet is
    // added through the API whatever its mode (a self-join that is under way makes that a no-op).
    for (const [id] of [...this.removed]) {
      await addPeer(this.hosts, this.byId(id), READD_MS);
      this.removed.delete(id);
    }
    if (this.hosts.hosts.some((h) => h.running())) await waitFullMembership(this.hosts, READD_MS);
  }
}
