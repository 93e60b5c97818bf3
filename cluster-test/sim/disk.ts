/**
 * The simulated disk of one node. Writes land in an unsynced queue; an fsync makes every write
 * issued before it durable. A crash keeps the durable state plus, with some probability, a
 * prefix of the unsynced writes (both are legal outcomes of a crash before fsync returned:
 * the data may or may not have reached the platter), and loses the rest.
 *
 * Each write is one Ready's persistence work, applied atomically (snapshot, then entries, then
 * hard state), as the driver contract requires.
 */
import type { Entry, HardState, LogIndex, PersistedState, SeededRandom, Snapshot } from './raft.js';
import { SimViolation } from './violation.js';

export interface DiskBatch {
  readonly snapshot: Snapshot | undefined;
  readonly entries: readonly Entry[];
  readonly hardState: HardState | undefined;
}

/** A log as stored: an optional snapshot, the contiguous entries after it, and the hard state. */
export class LogView {
  constructor(
    public hardState: HardState,
    public snapshot: Snapshot | undefined,
    public entries: Entry[],
  ) {}

  static from(state: PersistedState): LogView {
    return new LogView(state.hardState, state.snapshot, [...state.entries]);
  }

  clone(): LogView {
    return new LogView(this.hardState, this.snapshot, this.entries.slice());
  }

  get snapshotIndex(): number {
    return this.snapshot?.meta.index ?? 0;
  }

  get lastIndex(): number {
    return this.snapshotIndex + this.entries.length;
  }

  /** The entry at `index`, if stored (not compacted, not beyond the end). */
  entryAt(index: number): Entry | undefined {
    return this.entries[index - this.snapshotIndex - 1];
  }

  /** The term at `index`: from an entry, from the snapshot at exactly that index, 0 at index 0. */
  termAt(index: number): number | undefined {
    if (index === 0) return 0;
    if (index === this.snapshotIndex) return this.snapshot?.meta.term;
    return this.entryAt(index)?.term;
  }

  apply(batch: DiskBatch, node: string): void {
    if (batch.snapshot !== undefined) this.installSnapshot(batch.snapshot);
    if (batch.entries.length > 0) this.appendEntries(batch.entries, node);
    if (batch.hardState !== undefined) this.hardState = batch.hardState;
  }

  /**
   * Replaces the log up to the snapshot's index. Entries after it survive only if the log
   * holds the snapshot's own (index, term): then they extend a prefix the snapshot covers
   * (log matching, Raft §5.3); otherwise the whole log is discarded (Raft §7).
   */
  installSnapshot(snap: Snapshot): void {
    const index = snap.meta.index as number;
    if (index <= this.snapshotIndex) return;
    const keep = this.termAt(index) === snap.meta.term ? this.entries.slice(index - this.snapshotIndex) : [];
    this.snapshot = snap;
    this.entries = keep;
  }

  private appendEntries(entries: readonly Entry[], node: string): void {
    const first = entries[0] as Entry;
    for (let k = 1; k < entries.length; k++) {
      const e = entries[k] as Entry;
      if (e.index !== first.index + k) {
        throw new SimViolation('ready-contract', `${node}: Ready.entries are not contiguous (${first.index}.. then ${e.index} at position ${k})`);
      }
    }
    if (first.index <= this.snapshotIndex) {
      throw new SimViolation('ready-contract', `${node}: Ready.entries start at ${first.index}, at or below the snapshot index ${this.snapshotIndex}`);
    }
    if (first.index > this.lastIndex + 1) {
      throw new SimViolation('ready-contract', `${node}: Ready.entries start at ${first.index} but the log ends at ${this.lastIndex} (gap)`);
    }
    // An entry at index i replaces any existing entry >= i: truncate the suffix, then append.
    this.entries.length = first.index - this.snapshotIndex - 1;
    for (const e of entries) this.entries.push(e);
  }

  toPersisted(): PersistedState {
    return structuredClone({ hardState: this.hardState, snapshot: this.snapshot, entries: this.entries });
  }
}

export interface CrashOutcome {
  /** Unsynced writes that reached the disk anyway. */
  readonly kept: number;
  /** Unsynced writes lost. */
  readonly lost: number;
}

export class SimDisk {
  /** What survives a crash. */
  private durableView: LogView;
  /** Everything written, synced or not: what the running node sees. */
  private latestView: LogView;
  private unsynced: { seq: number; batch: DiskBatch }[] = [];
  private nextSeq = 1;

  constructor(
    readonly node: string,
    initial: PersistedState,
  ) {
    this.durableView = LogView.from(initial);
    this.latestView = this.durableView.clone();
  }

  get durable(): LogView {
    return this.durableView;
  }

  get latest(): LogView {
    return this.latestView;
  }

  get unsyncedWrites(): number {
    return this.unsynced.length;
  }

  /** Issues a write; it is visible to the node at once and durable after a `sync` covering it. */
  write(batch: DiskBatch): number {
    this.latestView.apply(batch, this.node);
    const seq = this.nextSeq++;
    this.unsynced.push({ seq, batch });
    return seq;
  }

  /** An fsync issued after write `seq` returned: every write up to `seq` is now durable. */
  sync(seq: number): void {
    while (this.unsynced.length > 0 && (this.unsynced[0]?.seq ?? Infinity) <= seq) {
      const w = this.unsynced.shift();
      if (w !== undefined) this.durableView.apply(w.batch, this.node);
    }
  }

  /**
   * The application took a snapshot at an applied index and compacted the log behind it.
   * Written and synced on its own (snapshot file, then log truncation), as etcd's storage does.
   * The durable commit index is raised to the snapshot index: those entries are committed, and
   * a restart must not find a commit index behind its own snapshot.
   */
  compact(snap: Snapshot): void {
    for (const view of [this.durableView, this.latestView]) {
      view.installSnapshot(snap);
      if (view.hardState.commit < snap.meta.index) {
        view.hardState = { ...view.hardState, commit: snap.meta.index as LogIndex };
      }
    }
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
      if (w !== undefined) this.durableView.apply(w.batch, this.node);
    }
    this.unsynced = [];
    this.latestView = this.durableView.clone();
    return { kept, lost: n - kept };
  }

  /** What a restarting node reads back. */
  recover(): PersistedState {
    return this.durableView.toPersisted();
  }
}
