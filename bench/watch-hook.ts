/**
 * The seam for the watch fan-out phase (100, 1,000 and 10,000 watchers at 200 writes/s), which
 * is written separately in bench/watch-fanout.ts. When that module exists and exports
 * `watchFanout` of this type, bench/compare.ts runs it for each system after the KV phases and
 * puts its rows in the table; otherwise the table says it was not run.
 */
import type { Progress } from './report.js';
import type { KvSystem } from './systems.js';

export interface WatchFanoutContext {
  readonly system: KvSystem;
  /** Index of the leader in system.nodeNames when the phase starts. */
  readonly leaderIndex: number;
  readonly quick: boolean;
  readonly progress: Progress;
}

export interface WatchFanoutResult {
  readonly watchers: number;
  /** The write rate asked for and the one achieved. */
  readonly targetWritesPerSec: number;
  readonly writesPerSec: number;
  /** Whether every watcher got every event at that rate. */
  readonly rateHeld: boolean;
  readonly deliveryP50Ms: number;
  readonly deliveryP99Ms: number;
  readonly serverRssMiB: readonly number[];
  readonly notes?: string;
}

export type WatchFanout = (ctx: WatchFanoutContext) => Promise<readonly WatchFanoutResult[]>;

/** The phase from bench/watch-fanout.ts, or undefined while that module does not exist. */
export async function loadWatchFanout(): Promise<WatchFanout | undefined> {
  // A specifier in a variable: the module is optional, so neither tsc nor the import checker
  // should resolve it.
  const spec = './watch-fanout.js';
  try {
    const mod = (await import(spec)) as { watchFanout?: unknown };
    return typeof mod.watchFanout === 'function' ? (mod.watchFanout as WatchFanout) : undefined;
  } catch (e) {
    if ((e as { code?: unknown }).code === 'ERR_MODULE_NOT_FOUND') return undefined;
    throw e;
  }
}
