import { AssertionError, NO_NODE, type LogIndex, type Term } from '../../base/index.js';
import type { Entry, HardState } from '../../raft/index.js';
import { CorruptLogError, type LoadedLog, type LogStore } from '../ports.js';

/**
 * The in-memory reference `LogStore`, with the semantics of platform's LevelLogStore:
 * one atomic batch per `append`, conflict truncation (an entry at index i replaces everything
 * at or after i), `load` verifying contiguity and term order, cutting a damaged tail above the
 * commit index and refusing damage at or below it.
 *
 * It also models the disk: writes with `sync: false` (and compactions, which are not fsynced
 * either) stay pending until a later synced append; `crash()` is power loss and drops them
 * (or keeps a prefix); `reopen()` is a clean process restart. `corruptEntry` damages a stored
 * entry the way a failed checksum would look, and `failWrites` makes writes fail (a full disk).
 */

export interface MemoryLogStoreOptions {
  /** Whether `crash()` loses writes not yet covered by a synced append. Default true. */
  readonly loseUnsyncedOnCrash?: boolean;
}

export interface MemoryLogStoreStats {
  /** `append` calls that wrote something (one batch each). */
  readonly batches: number;
  readonly syncedBatches: number;
  readonly compactions: number;
}

type Op =
  | { readonly kind: 'append'; readonly entries: readonly Entry[]; readonly hardState: HardState | undefined; readonly installedSnapshot: boolean }
  | { readonly kind: 'compact'; readonly index: number }
  | { readonly kind: 'cut'; readonly after: number };

interface StoredEntry {
  readonly entry: Entry;
  readonly corrupt: boolean;
}

class LogImage {
  constructor(
    public hardState: HardState | undefined = undefined,
    public readonly entries = new Map<number, StoredEntry>(),
  ) {}

  clone(): LogImage {
    return new LogImage(this.hardState, new Map(this.entries));
  }

  apply(op: Op): void {
    switch (op.kind) {
      case 'append': {
        // An installed snapshot replaces the whole log, atomically with what follows it.
        if (op.installedSnapshot) this.entries.clear();
        const first = op.entries[0];
        if (first !== undefined) {
          for (const i of [...this.entries.keys()]) if (i >= first.index) this.entries.delete(i);
          for (const e of op.entries) this.entries.set(e.index, { entry: e, corrupt: false });
        }
        if (op.hardState !== undefined) this.hardState = op.hardState;
        return;
      }
      case 'compact':
        for (const i of [...this.entries.keys()]) if (i <= op.index) this.entries.delete(i);
        return;
      case 'cut':
        for (const i of [...this.entries.keys()]) if (i > op.after) this.entries.delete(i);
        return;
      default: {
        const never: never = op;
        throw new AssertionError(`unknown log op ${JSON.stringify(never)}`);
      }
    }
  }
}

/** The simulated disk several store handles (before and after a restart) share. */
class MemoryLogDisk {
  durable = new LogImage();
  latest = new LogImage();
  pending: Op[] = [];
  writeFailure: Error | undefined;
  batches = 0;
  syncedBatches = 0;
  compactions = 0;

  write(op: Op, sync: boolean): void {
    this.latest.apply(op);
    this.pending.push(op);
    if (sync) this.sync();
  }

  sync(): void {
    for (const op of this.pending) this.durable.apply(op);
    this.pending = [];
  }
}

const EMPTY_HARD_STATE: HardState = { term: 0 as Term, vote: NO_NODE, commit: 0 as LogIndex };

function copyEntry(e: Entry): Entry {
  return { index: e.index, term: e.term, data: e.data.slice() };
}

export class MemoryLogStore implements LogStore {
  private disk = new MemoryLogDisk();
  private closed = false;

  constructor(private readonly options: MemoryLogStoreOptions = {}) {}

  async load(afterIndex: LogIndex): Promise<LoadedLog> {
    this.checkOpen('load');
    const image = this.disk.latest;
    const hardState = image.hardState ?? EMPTY_HARD_STATE;
    const commit = hardState.commit;
    const indexes = [...image.entries.keys()].filter((i) => i > afterIndex).sort((a, b) => a - b);
    const entries: Entry[] = [];
    let expected = afterIndex + 1;
    let prevTerm = 0;
    let damage: { problem: string; cut: number } | undefined;
    for (const index of indexes) {
      const stored = image.entries.get(index);
      if (stored === undefined) continue;
      let problem: string;
      let at = expected;
      if (index !== expected) {
        problem = `log entry ${expected} is missing (the next stored entry is ${index})`;
      } else if (stored.corrupt) {
        problem = `log entry ${index} fails its checksum`;
        at = index;
      } else if (stored.entry.term < prevTerm) {
        problem = `log entry ${index} has term ${stored.entry.term}, below the term ${prevTerm} of the entry before it`;
        at = index;
      } else {
        entries.push(copyEntry(stored.entry));
        prevTerm = stored.entry.term;
        expected++;
        continue;
      }
      if (at <= commit) throw corrupt(`${problem} at or below the commit index ${commit}`);
      damage = { problem, cut: indexes.length - entries.length };
      break;
    }
    const lastLoaded = expected - 1;
    if (lastLoaded < commit) {
      throw corrupt(`the raft log ends at index ${lastLoaded} but the commit index is ${commit}: committed entries are missing`);
    }
    if (damage !== undefined) this.disk.write({ kind: 'cut', after: lastLoaded }, true);
    // The entry at afterIndex is not part of what is loaded (nor checked): only its term is
    // reported, and only when it reads back intact.
    const at = afterIndex > 0 ? image.entries.get(afterIndex) : undefined;
    const afterIndexTerm = at !== undefined && !at.corrupt ? at.entry.term : undefined;
    return { hardState, entries, afterIndexTerm, truncatedTail: damage?.cut ?? 0 };
  }

  async append(batch: {
    readonly entries: readonly Entry[];
    readonly hardState: HardState | undefined;
    readonly sync: boolean;
    readonly installedSnapshot?: LogIndex;
  }): Promise<void> {
    this.checkOpen('append');
    const first = batch.entries[0];
    if (first !== undefined) {
      if (first.index < 1) throw new AssertionError(`append: entry index ${first.index} is below 1`);
      batch.entries.forEach((e, k) => {
        if (e.index !== first.index + k) {
          throw new AssertionError(`append: entries are not contiguous (${first.index}.. then ${e.index} at position ${k})`);
        }
      });
    }
    if (this.disk.writeFailure !== undefined) throw this.disk.writeFailure;
    if (batch.entries.length === 0 && batch.hardState === undefined && batch.installedSnapshot === undefined) {
      if (batch.sync) this.disk.sync();
      return;
    }
    this.disk.batches++;
    if (batch.sync) this.disk.syncedBatches++;
    this.disk.write(
      { kind: 'append', entries: batch.entries.map(copyEntry), hardState: batch.hardState, installedSnapshot: batch.installedSnapshot !== undefined },
      batch.sync,
    );
  }

  async compact(index: LogIndex): Promise<void> {
    this.checkOpen('compact');
    if (this.disk.writeFailure !== undefined) throw this.disk.writeFailure;
    this.disk.compactions++;
    this.disk.write({ kind: 'compact', index }, false);
  }

  async close(): Promise<void> {
    this.closed = true;
  }

  /** A clean process restart: this handle closes; everything written stays (synced or not). */
  reopen(): MemoryLogStore {
    this.closed = true;
    const next = new MemoryLogStore(this.options);
    next.disk = this.disk;
    return next;
  }

  /**
   * Power loss: this handle dies. Unsynced writes are lost, except the first `keepUnsynced`
   * of them (the disk may have written some before the power went), unless the store was
   * made with `loseUnsyncedOnCrash: false`.
   */
  crash(keepUnsynced = 0): MemoryLogStore {
    const disk = this.disk;
    const keep = this.options.loseUnsyncedOnCrash === false ? disk.pending.length : Math.min(keepUnsynced, disk.pending.length);
    for (const op of disk.pending.slice(0, keep)) disk.durable.apply(op);
    disk.pending = [];
    disk.latest = disk.durable.clone();
    return this.reopen();
  }

  /** Damages the stored entry at `index` (as a failed checksum would show on load). */
  corruptEntry(index: number): void {
    for (const image of [this.disk.latest, this.disk.durable]) {
      const stored = image.entries.get(index);
      if (stored !== undefined) image.entries.set(index, { entry: stored.entry, corrupt: true });
    }
  }

  /** While set, `append` and `compact` reject with this error and write nothing (a full disk). */
  failWrites(error: Error | undefined): void {
    this.disk.writeFailure = error;
  }

  /** Writes not yet made durable by a synced append. */
  get unsyncedWrites(): number {
    return this.disk.pending.length;
  }

  stats(): MemoryLogStoreStats {
    return { batches: this.disk.batches, syncedBatches: this.disk.syncedBatches, compactions: this.disk.compactions };
  }

  private checkOpen(operation: string): void {
    if (this.closed) throw new Error(`${operation} on a closed (or crashed) MemoryLogStore handle`);
  }
}

function corrupt(problem: string): CorruptLogError {
  return new CorruptLogError(
    `${problem} (memory log); refusing to start rather than serve wrong data; restore this node from a snapshot or wipe its data dir to rejoin the cluster`,
  );
}
