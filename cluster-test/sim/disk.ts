/**
 * The simulated disk of one node, as the shipped replica's ports see it (src/replica/ports.ts):
 * a Raft log (hard state and entries, possibly compacted at the front) and snapshot files.
 *
 * - Log writes land in an unsynced queue and are visible to the running node at once; an fsync
 *   makes every write issued before it durable. A crash keeps the durable log plus, with some
 *   probability, a prefix of the unsynced writes (both legal outcomes of power loss before the
 *   fsync returned) and loses the rest. Each write is one `LogStore.append` batch, applied
 *   atomically, as the port promises.
 * - A snapshot file is durable once its save completes (temp file, fsync, rename); a crash
 *   during the save loses it. The newest few are kept.
 * - Compaction (dropping entries a snapshot covers) takes effect at once on both views.
 */
import type { Entry, HardState, LogIndex, PersistedState, SeededRandom, Snapshot, Term } from './raft.js';
import { SimViolation } from './violation.js';

/** One `LogStore.append` batch. */
export interface LogBatch {
  readonly entries: readonly Entry[];
  readonly hardState: HardState | undefined;
  /** The batch follows an installed snapshot at this index: every stored entry is dropped first. */
  readonly installedSnapshot?: LogIndex | undefined;
}

/** A stored log: the hard state and contiguous entries from `first` (entries before it were compacted). */
export class LogView {
  constructor(
    public hardState: HardState,
    /** The index of `entries[0]` (or where the next entry goes when there are none). */
    public first: number,
    public entries: Entry[],
  ) {}

  clone(): LogView {
    return new LogView(this.hardState, this.first, this.entries.slice());
  }

  get lastIndex(): number {
    return this.first + this.entries.length - 1;
  }

  /** The entry at `index`, if stored (not compacted, not beyond the end). */
  entryAt(index: number): Entry | undefined {
    return index < this.first ? undefined : this.entries[index - this.first];
  }

  apply(batch: LogBatch, node: string): void {
    if (batch.installedSnapshot !== undefined) {
      this.entries = [];
      this.first = batch.installedSnapshot + 1;
    }
    if (batch.entries.length > 0) this.appendEntries(batch.entries, node);
    if (batch.hardState !== undefined) this.hardState = batch.hardState;
  }

  /** Drops the entries at or below `index`. */
  compact(index: number): void {
    if (index < this.first) return;
    this.entries = this.entries.slice(Math.min(this.entries.length, index - this.first + 1));
    this.first = index + 1;
  }

  private appendEntries(entries: readonly Entry[], node: string): void {
    const head = entries[0] as Entry;
    for (let k = 1; k < entries.length; k++) {
      const e = entries[k] as Entry;
      if (e.index !== head.index + k) {
        throw new SimViolation('ready-contract', `${node}: a log write's entries are not contiguous (${head.index}.. then ${e.index} at position ${k})`);
      }
    }
    if (head.index < this.first) {
      throw new SimViolation('ready-contract', `${node}: a log write starts at ${head.index}, below the compacted log's first index ${this.first}`);
    }
    if (head.index > this.lastIndex + 1) {
      // A gap, as after a snapshot install whose log batch was lost in a crash. The real stores
      // accept the write and skip what lies before it on load (which starts after the snapshot);
      // here the entries before the gap are dropped, which is what a load can see of them.
      this.entries = [];
      this.first = head.index;
    }
    // An entry at index i replaces any existing entry >= i: truncate the suffix, then append.
    this.entries.length = head.index - this.first;
    for (const e of entries) this.entries.push(e);
  }
}

export interface CrashOutcome {
  /** Unsynced writes that reached the disk anyway. */
  readonly kept: number;
  /** Unsynced writes lost. */
  readonly lost: number;
}

/** Snapshot files kept (the newest); the replica compacts its log only behind the one before the newest. */
const SNAPSHOTS_KEPT = 3;

export class SimDisk {
  /** What survives a crash. */
  private durableLog: LogView;
  /** Everything written, synced or not: what the running node sees. */
  private latestLog: LogView;
  private unsynced: { seq: number; batch: LogBatch }[] = [];
  private nextSeq = 1;
  /** Durable snapshot files, oldest first. */
  private snaps: Snapshot[] = [];
  /** Set by a load that handed back a stale suffix behind the newest snapshot (see `load`). */
  private staleSuffix: string | undefined;
  private staleSuffixAt = 0;

  constructor(
    readonly node: string,
    initial: PersistedState,
  ) {
    const snapIndex = initial.snapshot?.meta.index ?? 0;
    this.durableLog = new LogView(initial.hardState, snapIndex + 1, structuredClone([...initial.entries]));
    if (initial.snapshot !== undefined) this.snaps.push(initial.snapshot);
    this.latestLog = this.durableLog.clone();
  }

  get durable(): LogView {
    return this.durableLog;
  }

  get latest(): LogView {
    return this.latestLog;
  }

  get unsyncedWrites(): number {
    return this.unsynced.length;
  }

  /** The newest durable snapshot file. */
  get newestSnapshot(): Snapshot | undefined {
    return this.snaps[this.snaps.length - 1];
  }

  /** Issues a log write; it is visible to the node at once and durable after a `sync` covering it. */
  write(batch: LogBatch): number {
    this.checkStaleSuffix('write to its log', batch);
    this.latestLog.apply(batch, this.node);
    const seq = this.nextSeq++;
    this.unsynced.push({ seq, batch });
    return seq;
  }

  /** An fsync issued after write `seq` returned: every write up to `seq` is now durable. */
  sync(seq: number): void {
    while (this.unsynced.length > 0 && (this.unsynced[0]?.seq ?? Infinity) <= seq) {
      const w = this.unsynced.shift();
      if (w !== undefined) this.durableLog.apply(w.batch, this.node);
    }
  }

  /** The newest sequence number issued (an fsync now covers every write so far). */
  get lastSeq(): number {
    return this.nextSeq - 1;
  }

  /** A snapshot file's save completed: durable from now on. */
  saveSnapshot(snap: Snapshot): void {
    this.snaps.push(structuredClone(snap));
    this.snaps.sort((a, b) => a.meta.index - b.meta.index);
    while (this.snaps.length > SNAPSHOTS_KEPT) this.snaps.shift();
  }

  /** Drops log entries at or below `index` (behind a durable snapshot), in both views. */
  compact(index: number): void {
    const newest = this.newestSnapshot?.meta.index ?? 0;
    this.checkStaleSuffix(`compact its log to ${index}`, undefined);
    if (index > newest) throw new SimViolation('ready-contract', `${this.node}: compacts its log to ${index}, beyond its newest durable snapshot ${newest}`);
    this.durableLog.compact(index);
    this.latestLog.compact(index);
  }

  /**
   * Whether the entry (index, term) survives a crash now: in the durable log, or covered by a
   * durable snapshot (which holds only committed state).
   */
  holdsDurably(index: number, term: number): boolean {
    if ((this.newestSnapshot?.meta.index ?? 0) >= index) return true;
    return this.durableLog.entryAt(index)?.term === term;
  }

  /**
   * Power loss. With probability `keepProbability` a random non-empty prefix of the unsynced
   * writes made it to disk anyway; the rest is gone.
   */
  crash(random: SeededRandom, keepProbability: number): CrashOutcome {
    const n = this.unsynced.length;
    const kept = n > 0 && random.chance(keepProbability) ? random.range(1, n) : 0;
    for (let k = 0; k < kept; k++) {
      const w = this.unsynced[k];
      if (w !== undefined) this.durableLog.apply(w.batch, this.node);
    }
    this.unsynced = [];
    this.latestLog = this.durableLog.clone();
    this.staleSuffix = undefined;
    return { kept, lost: n - kept };
  }

  /**
   * What `LogStore.load(afterIndex)` reads back: the hard state, the entries after `afterIndex`
   * and the term of the entry at `afterIndex` if the log holds one (`afterIndexTerm`).
   *
   * Loading after the newest snapshot, the entries must continue the snapshot's log: a suffix
   * of another history (the log holds the snapshot's index in another term: an install whose
   * log batch a crash lost) would come back behind the snapshot as if it followed it, a log no
   * node ever had. The port hands it back, with `afterIndexTerm` saying so, and the node must
   * not go on with it: its next log write (or compaction) must be the install's batch at that
   * index (Replica.open writes it again), or `write` reports a violation.
   */
  load(afterIndex: number): { hardState: HardState; entries: Entry[]; afterIndexTerm: Term | undefined } {
    const log = this.latestLog;
    const entries = log.entries.filter((e) => e.index > afterIndex);
    const snap = this.newestSnapshot;
    const at = afterIndex > 0 ? log.entryAt(afterIndex) : undefined;
    this.staleSuffix = undefined;
    if (snap !== undefined && snap.meta.index === afterIndex && entries.length > 0 && at !== undefined && at.term !== snap.meta.term) {
      this.staleSuffix = `its log holds entry ${afterIndex} of term ${at.term} and ${entries.length} after it, behind its newest snapshot ${afterIndex}/${snap.meta.term}`;
      this.staleSuffixAt = afterIndex;
    }
    const head = entries[0];
    if (head !== undefined && head.index !== afterIndex + 1) {
      throw new SimViolation('ready-contract', `${this.node}: its log starts at ${head.index} after its newest snapshot ${afterIndex} (a gap on disk)`);
    }
    return structuredClone({ hardState: log.hardState, entries, afterIndexTerm: at?.term });
  }

  /** A stale suffix was loaded: the write or compaction `what` must be the install's batch. */
  private checkStaleSuffix(what: string, batch: LogBatch | undefined): void {
    if (this.staleSuffix === undefined) return;
    const message = this.staleSuffix;
    const index = this.staleSuffixAt;
    this.staleSuffix = undefined;
    if (batch?.installedSnapshot === index) return;
    throw new SimViolation(
      'ready-contract',
      `${this.node}: ${message}, loaded as if it followed the snapshot: the node went on to ${what} instead of completing the install (dropping the stale suffix)`,
    );
  }
}
