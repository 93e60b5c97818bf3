/**
 * The watch fan-out phase of `make bench` as bench/compare.ts sees it: what it is given and
 * what it reports per watcher count. The phase itself is bench/fanout/cluster-phase.ts, built
 * on the measurement `make bench-watch` uses (bench/fanout/measure.ts).
 */
import type { FanoutMeasurement } from './fanout/measure.js';
import type { Progress } from './report.js';
import type { WatchableSystem } from './systems.js';

/** Issue 9's watcher counts, and the write rate each is measured at. */
export const FANOUT_COUNTS: readonly number[] = [100, 1_000, 10_000];
export const FANOUT_RATE_PER_SEC = 200;

export interface WatchFanoutContext {
  readonly system: WatchableSystem;
  /** Index of the leader in system.nodeNames when the phase starts. */
  readonly leaderIndex: number;
  readonly quick: boolean;
  readonly progress: Progress;
  /** Watcher counts to measure instead of FANOUT_COUNTS (compare.ts --watchers). */
  readonly counts?: readonly number[];
}

/** Each node's resident memory (MiB), in nodeNames order. */
export interface NodesRss {
  readonly rssMiB: readonly number[];
}

export interface WatchFanoutResult {
  readonly watchers: number;
  /** The node every watcher is connected to (a follower), and the leader the writer writes to. */
  readonly servingNode: string;
  /** Its index in nodeNames (serverRssMiB, serverCpuPct). */
  readonly servingIndex: number;
  readonly leader: string;
  /** The write rate asked for and the one achieved (writes answered within the window, per second). */
  readonly targetWritesPerSec: number;
  readonly writesPerSec: number;
  /** The writes kept the offered rate (at least 98% of it answered in the window, none failed). */
  readonly writeRateHeld: boolean;
  /**
   * Every watcher got every event at that rate: the write rate held, every expected delivery of
   * the window's writes came by the end of the drain, p99 send-to-receive within 1 s, and no
   * stream was ended by the server (bench/fanout/measure.ts `keepsUp`).
   */
  readonly rateHeld: boolean;
  /** Deliveries of the window's writes over watchers x writes. */
  readonly deliveredFraction: number;
  /** Send-to-receive, over every expected delivery; +Infinity (null in the JSON) when the percentile falls on undelivered events. */
  readonly deliveryP50Ms: number;
  readonly deliveryP99Ms: number;
  /** Undelivered events are at least this old (ms) when the drain ended. */
  readonly undeliveredOlderThanMs: number;
  /** Each node's RSS at the end of the measured window (MiB). */
  readonly serverRssMiB: readonly number[];
  /** Each node's CPU over the window (% of one core). */
  readonly serverCpuPct: readonly number[];
  /** The load generator: the watchers' process (this one) and the writer's, % of one core; the watchers' event-loop utilization. */
  readonly loadgenCpuPct: { readonly watchers: number; readonly writer: number; readonly watchersElu: number };
  readonly verdict: string;
  /** Everything measured (bench/fanout/measure.ts), memory per node. */
  readonly detail: FanoutMeasurement<NodesRss>;
}

export interface WatchFanoutOutcome {
  /** Watcher counts run (all of FANOUT_COUNTS unless compare.ts --watchers asked for others). */
  readonly counts: readonly number[];
  readonly settings: Readonly<Record<string, number | string>>;
  readonly results: readonly WatchFanoutResult[];
}
