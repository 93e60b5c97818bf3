import { CairnError, ErrorCode, type LogIndex } from '../base/index.js';
import type { PlantedBugs } from '../raft/index.js';
import type { LoadedLog, LogStore } from '../replica/index.js';
import type { ChangeRecord } from '../store/index.js';

/**
 * Deliberately planted bugs (`--planted-bugs`), for proving that the checkers catch what they
 * are meant to catch (cluster-test/jepsen/README.md, "Prove the checkers"): a checker that has
 * never failed proves nothing. Every one is off by default and makes the node unsafe; the
 * agent logs a warning when any is on. Never use them outside tests.
 */

/** The Raft core's bugs (src/raft PlantedBugs), by flag name. */
const RAFT_BUGS: Record<string, keyof PlantedBugs> = {
  'double-vote': 'doubleVote',
  'commit-old-term': 'commitOldTermByCount',
  'read-index-without-heartbeat': 'readIndexWithoutHeartbeat',
};

/** The agent's own bugs, by flag name, with what each breaks. */
export const AGENT_BUGS = {
  /** Linearizable reads answer from the local state without a ReadIndex round (a partitioned or lagging node serves stale reads). */
  'stale-follower-read': 'staleFollowerRead',
  /** Log appends are acknowledged at once and written later (held in memory): kill -9 loses acknowledged writes. */
  'ack-before-fsync': 'ackBeforeFsync',
  /** The watch streams of this node never get the WATCH_SKIP_NTH-th change this node applies. */
  'watch-skip-event': 'watchSkipEvent',
} as const;

export interface AgentPlantedBugs {
  readonly raft: PlantedBugs;
  readonly staleFollowerRead: boolean;
  readonly ackBeforeFsync: boolean;
  readonly watchSkipEvent: boolean;
}

/** Every planted bug's flag name. */
export const PLANTED_BUG_NAMES: readonly string[] = [...Object.keys(RAFT_BUGS), ...Object.keys(AGENT_BUGS)];

export function parsePlantedBugs(names: readonly string[]): AgentPlantedBugs {
  const raft: { -readonly [K in keyof PlantedBugs]?: boolean } = {};
  const agent = { staleFollowerRead: false, ackBeforeFsync: false, watchSkipEvent: false };
  for (const n of names) {
    const r = RAFT_BUGS[n];
    const a = (AGENT_BUGS as Record<string, keyof typeof agent | undefined>)[n];
    if (r) raft[r] = true;
    else if (a) agent[a] = true;
    else throw new CairnError(ErrorCode.INVALID_ARGUMENT, `unknown planted bug ${JSON.stringify(n)}; known: ${PLANTED_BUG_NAMES.join(', ')}`);
  }
  return { raft, ...agent };
}

/** Which applied change `watch-skip-event` drops (counting change records from the node's start, from 1). */
export const WATCH_SKIP_NTH = 10;

/**
 * `watch-skip-event`: returns a filter for each applied entry's change records that drops the
 * WATCH_SKIP_NTH-th record this node applies, once. Deterministic, so a test knows which.
 */
export function skipNthChange<R>(nth: number = WATCH_SKIP_NTH): (records: readonly ChangeRecord<R>[]) => readonly ChangeRecord<R>[] {
  let seen = 0;
  return (records) => {
    const before = seen;
    seen += records.length;
    if (nth <= before || nth > seen) return records;
    return records.filter((_, i) => before + i + 1 !== nth);
  };
}

/** How long `ack-before-fsync` holds an acknowledged batch in memory before writing it. */
export const ACK_BEFORE_FSYNC_DELAY_MS = 2000;

/**
 * `ack-before-fsync`: acknowledges each batch at once and writes it to the real store only
 * ACK_BEFORE_FSYNC_DELAY_MS later (in order). Skipping the fsync alone would not lose anything
 * on `kill -9`: the written data sits in the OS page cache, which outlives the process. Holding
 * the batch in the process's memory is what a process kill (and a power cut) loses, so Raft
 * counts this node's vote for entries that are not on its disk: a single node loses
 * acknowledged writes, and so does a cluster whose majority is killed at once.
 */
export class AckBeforeFsyncLogStore implements LogStore {
  /** The writes so far, in order: each batch and compaction waits for the one before. */
  private chain: Promise<void> = Promise.resolve();
  /** Each held batch's release: its timer and how to release it at once. */
  private readonly held = new Map<NodeJS.Timeout, () => void>();
  private closed = false;

  constructor(
    private readonly inner: LogStore,
    private readonly delayMs: number = ACK_BEFORE_FSYNC_DELAY_MS,
  ) {}

  load(afterIndex: LogIndex): Promise<LoadedLog> {
    return this.inner.load(afterIndex);
  }

  append(batch: Parameters<LogStore['append']>[0]): Promise<void> {
    const due = new Promise<void>((resolve) => {
      if (this.closed) return resolve();
      const timer = setTimeout(() => {
        this.held.delete(timer);
        resolve();
      }, this.delayMs);
      this.held.set(timer, resolve);
    });
    this.enqueue(async () => {
      await due;
      await this.inner.append(batch);
    });
    return Promise.resolve();
  }

  compact(index: LogIndex): Promise<void> {
    return this.enqueue(() => this.inner.compact(index));
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    // A clean stop writes what is held: only a kill loses it.
    for (const [timer, release] of this.held) {
      clearTimeout(timer);
      release();
    }
    this.held.clear();
    await this.chain;
    await this.inner.close();
  }

  private enqueue(op: () => Promise<void>): Promise<void> {
    const next = this.chain.then(op);
    this.chain = next.catch(() => undefined);
    return next;
  }
}
