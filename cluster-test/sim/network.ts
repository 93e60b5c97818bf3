/**
 * The simulated network: per-message random delay (so reordering falls out), loss,
 * duplication, and partitions of every shape the fault schedule needs. Messages are deep-copied
 * on send (`structuredClone`) so a sender and a receiver never share memory, as on a real wire.
 *
 * A link is checked twice: when a message is sent and when it arrives. A partition that forms
 * while a message is in flight therefore loses it, like a cable pulled mid-transfer.
 */
import type { SeededRandom } from '../../src/base/index.js';
import type { Scheduler } from './scheduler.js';

export interface NetworkOptions {
  /** Lower bound of the one-way delay of a message, in simulated ms. */
  readonly minDelayMs: number;
  /** Upper bound of the one-way delay of a message, in simulated ms. */
  readonly maxDelayMs: number;
  /** Probability that a message is lost. */
  readonly lossProbability: number;
  /** Probability that a message is delivered twice (each copy with its own delay). */
  readonly duplicateProbability: number;
}

export interface Addressed {
  readonly from: string;
  readonly to: string;
}

export type DropReason = 'loss' | 'partition';

export interface NetworkStats {
  sent: number;
  delivered: number;
  dropped: number;
  duplicated: number;
  /** The most messages ever in flight at once (sent, not yet delivered or lost). */
  maxInFlight: number;
}

/** Which directed links are cut. Pure bookkeeping, no time: unit-testable on its own. */
export class Links {
  private readonly blocked = new Set<string>();

  private static key(from: string, to: string): string {
    return `${from}>${to}`;
  }

  canSend(from: string, to: string): boolean {
    return !this.blocked.has(Links.key(from, to));
  }

  get isHealed(): boolean {
    return this.blocked.size === 0;
  }

  /** Cuts the one-way link from -> to (asymmetric partition: to still reaches from). */
  blockOneWay(from: string, to: string): void {
    if (from !== to) this.blocked.add(Links.key(from, to));
  }

  blockBothWays(a: string, b: string): void {
    this.blockOneWay(a, b);
    this.blockOneWay(b, a);
  }

  /** Symmetric partition: nodes talk only inside their own group. Replaces earlier cuts. */
  partition(groups: readonly (readonly string[])[]): void {
    this.heal();
    for (let i = 0; i < groups.length; i++) {
      for (let j = i + 1; j < groups.length; j++) {
        for (const a of groups[i] ?? []) for (const b of groups[j] ?? []) this.blockBothWays(a, b);
      }
    }
  }

  /** Two halves that reach each other only through `via`, which talks to everyone. */
  bridge(left: readonly string[], right: readonly string[], via: string): void {
    this.heal();
    for (const a of left) for (const b of right) if (a !== via && b !== via) this.blockBothWays(a, b);
  }

  /** Cuts `node` off from every other node, both ways. */
  isolate(node: string, all: readonly string[]): void {
    this.heal();
    for (const other of all) this.blockBothWays(node, other);
  }

  heal(): void {
    this.blocked.clear();
  }
}

export class SimNetwork<M extends Addressed> {
  readonly links = new Links();
  readonly stats: NetworkStats = { sent: 0, delivered: 0, dropped: 0, duplicated: 0, maxInFlight: 0 };
  private inFlightCount = 0;
  private lossProbability: number;
  private duplicateProbability: number;

  constructor(
    private readonly options: NetworkOptions,
    private readonly random: SeededRandom,
    private readonly scheduler: Scheduler,
    /** Called at delivery time with a private copy of the message. */
    private readonly deliver: (m: M) => void,
    /** Called when a message is lost (at send or at arrival). */
    private readonly onDrop: (m: M, reason: DropReason) => void = () => {},
  ) {
    this.lossProbability = options.lossProbability;
    this.duplicateProbability = options.duplicateProbability;
  }

  /** Temporarily raises (or lowers) loss and duplication; `resetRates` restores the options. */
  setRates(lossProbability: number, duplicateProbability: number): void {
    this.lossProbability = lossProbability;
    this.duplicateProbability = duplicateProbability;
  }

  resetRates(): void {
    this.lossProbability = this.options.lossProbability;
    this.duplicateProbability = this.options.duplicateProbability;
  }

  /** Messages sent and not yet delivered or lost. */
  get inFlight(): number {
    return this.inFlightCount;
  }

  get rates(): { loss: number; dup: number } {
    return { loss: this.lossProbability, dup: this.duplicateProbability };
  }

  send(m: M): void {
    this.stats.sent++;
    if (!this.links.canSend(m.from, m.to)) {
      this.drop(m, 'partition');
      return;
    }
    if (this.random.chance(this.lossProbability)) {
      this.drop(m, 'loss');
      return;
    }
    const copies = this.random.chance(this.duplicateProbability) ? 2 : 1;
    if (copies === 2) this.stats.duplicated++;
    for (let c = 0; c < copies; c++) {
      const copy = structuredClone(m);
      const delay = this.random.range(this.options.minDelayMs, this.options.maxDelayMs);
      this.inFlightCount++;
      if (this.inFlightCount > this.stats.maxInFlight) this.stats.maxInFlight = this.inFlightCount;
      this.scheduler.after(delay, () => {
        this.inFlightCount--;
        if (!this.links.canSend(copy.from, copy.to)) {
          this.drop(copy, 'partition');
          return;
        }
        this.stats.delivered++;
        this.deliver(copy);
      });
    }
  }

  private drop(m: M, reason: DropReason): void {
    this.stats.dropped++;
    this.onDrop(m, reason);
  }
}
