/**
 * Applies and heals the faults of a schedule on real hosts: nftables partitions inside the
 * namespaces, kill -9 and restart, SIGSTOP/SIGCONT, tc netem on a node's veth.
 */
import type { Host, Hosts } from './hosts.js';
import { healLossRules, healRules, lossRules, partitionPlan, partitionRules } from './nft.js';
import type { Fault, Target } from './schedule.js';

/** What a fault did, once resolved against the cluster (the leader named, for instance). */
export interface AppliedFault {
  readonly fault: Fault;
  /** The hosts the fault acted on (for a partition: the minority side). */
  readonly hosts: readonly string[];
  readonly startedAt: number;
  endedAt?: number;
  readonly note: string;
}

/** The current leader as some reachable node reports it, or undefined. */
export async function findLeader(hosts: Hosts): Promise<Host | undefined> {
  const answers = await Promise.all(
    hosts.hosts.map(async (h) => {
      if (!h.running() || h.paused) return undefined;
      try {
        const r = await fetch(`${h.url}/v1/agent/self`, { signal: AbortSignal.timeout(1000) });
        const b = (await r.json()) as { role?: unknown; leader?: unknown; term?: unknown };
        return b.role === 'leader' ? { id: h.id, term: Number(b.term) } : undefined;
      } catch {
        return undefined;
      }
    }),
  );
  // Two nodes may both think they lead for a moment after a partition: the higher term is real.
  const best = answers.filter((a) => a !== undefined).sort((a, b) => b.term - a.term)[0];
  return best === undefined ? undefined : hosts.hosts.find((h) => h.id === best.id);
}

export class Nemesis {
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

  /** Starts `fault`; returns what it did so `heal` can undo it. */
  async start(fault: Fault): Promise<AppliedFault> {
    const startedAt = this.now();
    switch (fault.nemesis) {
      case 'partition': {
        const side = fault.mode === 'isolate-leader' ? [await this.target({ kind: 'leader' })] : fault.side.map((i) => this.hosts.hosts[i % this.hosts.hosts.length] as Host);
        const plan = partitionPlan(this.hosts.hosts.map((h) => h.ip), side.map((h) => h.ip));
        await Promise.all(this.hosts.hosts.map((h) => h.exec('nft', ['-f', '-'], partitionRules(plan.get(h.ip) ?? []))));
        return { fault, hosts: side.map((h) => h.id), startedAt, note: `{${side.map((h) => h.id).join(',')}} | {${this.hosts.hosts.filter((h) => !side.includes(h)).map((h) => h.id).join(',')}}` };
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
      default: {
        const never: never = fault;
        throw new Error(`unknown fault ${JSON.stringify(never)}`);
      }
    }
  }

  /** Undoes `applied`: removes rules and qdiscs, restarts a killed node, continues a paused one. */
  async heal(applied: AppliedFault): Promise<void> {
    const byId = (id: string): Host => this.hosts.hosts.find((h) => h.id === id) as Host;
    switch (applied.fault.nemesis) {
      case 'partition':
        await Promise.all(this.hosts.hosts.map((h) => h.exec('nft', ['-f', '-'], healRules())));
        break;
      case 'kill':
        for (const id of applied.hosts) if (!byId(id).running()) this.hosts.start(byId(id));
        break;
      case 'pause':
        for (const id of applied.hosts) {
          byId(id).signal('SIGCONT');
          byId(id).paused = false;
        }
        break;
      case 'netem':
        for (const id of applied.hosts) {
          await byId(id).exec('tc', ['qdisc', 'del', 'dev', 'eth0', 'root']).catch(() => '');
          await byId(id).exec('nft', ['-f', '-'], healLossRules());
        }
        break;
      default: {
        const never: never = applied.fault;
        throw new Error(`unknown fault ${JSON.stringify(never)}`);
      }
    }
    applied.endedAt = this.now();
  }

  /** Heals everything regardless of what is applied (end of run). */
  async healAll(): Promise<void> {
    for (const h of this.hosts.hosts) {
      h.signal('SIGCONT');
      h.paused = false;
      await h.exec('nft', ['-f', '-'], healRules()).catch(() => '');
      await h.exec('tc', ['qdisc', 'del', 'dev', 'eth0', 'root']).catch(() => '');
      await h.exec('nft', ['-f', '-'], healLossRules()).catch(() => '');
      if (!h.running()) this.hosts.start(h);
    }
  }
}
