import { assert, AssertionError, type LogIndex, type Term } from '../base/index.js';
import { decodeConfigEntry } from './config.js';
import { EntryType, heldSnapshot, type Config, type Entry, type HeldSnapshot, type Snapshot } from './types.js';

/**
 * The in-memory Raft log (etcd raft_log.go + unstable.go folded together): the entries after
 * the last compaction point, which of them are durable (`stabled`), the commit and apply
 * positions, the latest snapshot, and the configuration history (thesis §4.1: a server uses
 * the latest configuration in its log, committed or not, so a truncated suffix must revert it).
 *
 * Positions: entries[k].index === prevIndex + 1 + k. prevIndex/prevTerm name the entry just
 * before the first one held (the snapshot point or the compaction point).
 */
export class RaftLog {
  private entries: Entry[] = [];
  prevIndex: LogIndex;
  prevTerm: Term;
  committed: LogIndex;
  applied: LogIndex;
  /** Last index known durable on this node's disk. */
  stabled: LogIndex;
  /**
   * Last index handed to the driver for writing (`RawNode.accept`), durable or not: the next
   * Ready's entries start after it. `stabled <= inProgress <= lastIndex()`. The driver may write
   * several Readies' entries before the first is durable (a pipelined write path, etcd's
   * asynchronous storage writes); a truncated suffix is handed out again.
   */
  inProgress: LogIndex;
  /** The newest snapshot (durable, or incoming and not yet persisted); its bytes until released. */
  snapshot: HeldSnapshot | undefined;
  /** An incoming snapshot the driver has not persisted and installed yet. */
  pendingSnapshot: Snapshot | undefined = undefined;
  /** Config entries at or after prevIndex; the first element is the base (snapshot) config. */
  private configs: Array<{ index: LogIndex; config: Config }>;

  constructor(baseConfig: Config, snapshot: Snapshot | undefined, entries: readonly Entry[], commit: LogIndex) {
    this.snapshot = snapshot ? heldSnapshot(snapshot) : undefined;
    this.prevIndex = snapshot ? snapshot.meta.index : (0 as LogIndex);
    this.prevTerm = snapshot ? snapshot.meta.term : (0 as Term);
    this.configs = [{ index: this.prevIndex, config: snapshot ? snapshot.meta.config : baseConfig }];
    let expect = this.prevIndex + 1;
    for (const e of entries) {
      if (e.index <= this.prevIndex) continue; // covered by the snapshot
      if (e.index !== expect) {
        throw new AssertionError(`persisted log is not contiguous: expected index ${expect}, found ${e.index}`);
      }
      this.entries.push(e);
      this.noteConfig(e);
      expect++;
    }
    this.stabled = this.lastIndex();
    this.inProgress = this.stabled;
    if (commit > this.lastIndex()) {
      throw new AssertionError(`persisted commit index ${commit} is beyond the last log index ${this.lastIndex()}`);
    }
    this.committed = Math.max(commit, this.prevIndex) as LogIndex;
    this.applied = this.prevIndex;
  }

  firstIndex(): LogIndex {
    return (this.prevIndex + 1) as LogIndex;
  }

  lastIndex(): LogIndex {
    return (this.prevIndex + this.entries.length) as LogIndex;
  }

  lastTerm(): Term {
    return this.term(this.lastIndex()) as Term;
  }

  /** The term at index i, or undefined when i is compacted away or beyond the end. */
  term(i: number): Term | undefined {
    if (i === this.prevIndex) return this.prevTerm;
    if (i < this.prevIndex || i > this.lastIndex()) return undefined;
    return this.entries[i - this.prevIndex - 1]?.term;
  }

  entry(i: number): Entry | undefined {
    if (i <= this.prevIndex) return undefined;
    return this.entries[i - this.prevIndex - 1];
  }

  matchTerm(i: number, t: number): boolean {
    const have = this.term(i);
    return have !== undefined && have === t;
  }

  /** Raft §5.4.1: is a candidate's log at least as up-to-date as ours? */
  isUpToDate(lastIndex: number, lastTerm: number): boolean {
    const myTerm = this.lastTerm();
    return lastTerm > myTerm || (lastTerm === myTerm && lastIndex >= this.lastIndex());
  }

  config(): Config {
    return (this.configs[this.configs.length - 1] as { config: Config }).config;
  }

  /** Index of the latest config entry in the log (prevIndex if it came from the snapshot). */
  configIndex(): LogIndex {
    return (this.configs[this.configs.length - 1] as { index: LogIndex }).index;
  }

  configAt(i: number): Config {
    for (let k = this.configs.length - 1; k >= 0; k--) {
      const c = this.configs[k] as { index: LogIndex; config: Config };
      if (c.index <= i) return c.config;
    }
    throw new AssertionError(`no configuration known at index ${i} (first index ${this.firstIndex()})`);
  }

  /** Entries in [lo, hi), at most maxBytes of data (always at least one entry). */
  slice(lo: number, hi: number, maxBytes: number): Entry[] {
    assert(lo > this.prevIndex, () => `slice(${lo}) below the compaction point ${this.prevIndex}`);
    const end = Math.min(hi, this.lastIndex() + 1);
    const out: Entry[] = [];
    let bytes = 0;
    for (let i = lo; i < end; i++) {
      const e = this.entries[i - this.prevIndex - 1] as Entry;
      bytes += e.data.length;
      if (out.length > 0 && bytes > maxBytes) break;
      out.push(e);
    }
    return out;
  }

  /** Appends entries that follow on or overwrite a suffix (truncating it). */
  append(ents: readonly Entry[]): void {
    const first = ents[0];
    if (!first) return;
    assert(first.index > this.committed, () => `append at ${first.index} would overwrite committed entry (commit ${this.committed})`);
    assert(first.index <= this.lastIndex() + 1, () => `append at ${first.index} leaves a gap after ${this.lastIndex()}`);
    if (first.index <= this.lastIndex()) this.truncateFrom(first.index);
    for (const e of ents) {
      this.entries.push(e);
      this.noteConfig(e);
    }
  }

  private truncateFrom(i: LogIndex): void {
    this.entries.length = i - this.prevIndex - 1;
    if (this.stabled >= i) this.stabled = (i - 1) as LogIndex;
    if (this.inProgress >= i) this.inProgress = (i - 1) as LogIndex;
    while (this.configs.length > 1 && (this.configs[this.configs.length - 1] as { index: number }).index >= i) this.configs.pop();
  }

  private noteConfig(e: Entry): void {
    if (e.data[0] === EntryType.Config) this.configs.push({ index: e.index, config: decodeConfigEntry(e.data).config });
  }

  /**
   * The follower side of AppendEntries (Raft §5.3): if our log has (prevIndex, prevTerm),
   * append what is new, truncating the first conflicting suffix, and return the last index
   * now known to match the leader; otherwise undefined.
   */
  maybeAppend(prevIndex: LogIndex, prevTerm: Term, commit: LogIndex, ents: readonly Entry[]): LogIndex | undefined {
    if (!this.matchTerm(prevIndex, prevTerm)) return undefined;
    const lastNew = (prevIndex + ents.length) as LogIndex;
    const conflict = this.findConflict(ents);
    if (conflict !== 0) {
      assert(conflict > this.committed, () => `entry ${conflict} conflicts with committed entry (commit ${this.committed})`);
      this.append(ents.slice(conflict - (prevIndex + 1)));
    }
    this.commitTo(Math.min(commit, lastNew) as LogIndex);
    return lastNew;
  }

  /** The first entry of ents whose term differs from ours (or that we lack); 0 if none. */
  private findConflict(ents: readonly Entry[]): number {
    for (const e of ents) {
      if (!this.matchTerm(e.index, e.term)) return e.index;
    }
    return 0;
  }

  /**
   * Fast backtracking: the largest index <= index whose term is <= term, with its term
   * (etcd findConflictByTerm). Lets a leader skip a whole conflicting term per round trip.
   */
  findConflictByTerm(index: number, t: number): { index: LogIndex; term: Term } {
    let i = Math.min(index, this.lastIndex());
    for (; i > this.prevIndex; i--) {
      const ti = this.term(i) as number;
      if (ti <= t) return { index: i as LogIndex, term: ti as Term };
    }
    return { index: this.prevIndex, term: this.prevTerm };
  }

  commitTo(i: LogIndex): boolean {
    if (i <= this.committed) return false;
    assert(i <= this.lastIndex(), () => `commit ${i} is beyond the last index ${this.lastIndex()}`);
    this.committed = i;
    return true;
  }

  /** Entries not yet handed to the driver for writing (neither durable nor in progress). */
  unstableEntries(): Entry[] {
    if (this.inProgress >= this.lastIndex()) return [];
    return this.entries.slice(this.inProgress - this.prevIndex);
  }

  /** The driver took entries up to (i, t) for writing. Ignored if that entry was since replaced. */
  inProgressTo(i: LogIndex, t: Term): void {
    if (this.matchTerm(i, t) && i > this.inProgress) this.inProgress = i;
  }

  /** Committed, durable, not yet applied entries (none while a snapshot awaits install). */
  nextCommittedEntries(): Entry[] {
    if (this.pendingSnapshot) return [];
    const hi = Math.min(this.committed, this.stabled);
    if (hi <= this.applied) return [];
    return this.entries.slice(this.applied - this.prevIndex, hi - this.prevIndex);
  }

  hasNextCommittedEntries(): boolean {
    return !this.pendingSnapshot && Math.min(this.committed, this.stabled) > this.applied;
  }

  /** The driver made entries up to (i, t) durable. Ignored if that entry was since replaced. */
  stableTo(i: LogIndex, t: Term): void {
    if (this.matchTerm(i, t) && i > this.stabled) this.stabled = i;
    if (this.inProgress < this.stabled) this.inProgress = this.stabled;
  }

  /** The driver persisted and installed the pending snapshot. */
  snapshotInstalled(index: LogIndex): void {
    if (this.pendingSnapshot && this.pendingSnapshot.meta.index === index) this.pendingSnapshot = undefined;
    if (this.stabled < index) this.stabled = index;
    if (this.inProgress < index) this.inProgress = index;
    if (this.applied < index) this.applied = index;
  }

  appliedTo(i: LogIndex): void {
    assert(i <= this.committed && i >= this.applied, () => `applied ${i} outside [${this.applied}, ${this.committed}]`);
    this.applied = i;
  }

  /** Replace the whole log with an incoming snapshot (Raft §7). */
  restore(snapshot: Snapshot): void {
    this.entries = [];
    this.prevIndex = snapshot.meta.index;
    this.prevTerm = snapshot.meta.term;
    this.committed = snapshot.meta.index;
    // Nothing below the snapshot remains; the snapshot itself is durable once the driver
    // persists ready.snapshot, and nothing is applied from the log until it is installed.
    this.stabled = snapshot.meta.index;
    this.inProgress = snapshot.meta.index;
    this.snapshot = heldSnapshot(snapshot);
    this.pendingSnapshot = snapshot;
    this.configs = [{ index: snapshot.meta.index, config: snapshot.meta.config }];
  }

  /**
   * The application snapshotted its state at `index` (<= applied and durable): keep that
   * snapshot to send to followers too far behind, and drop the entries it covers except the
   * last `retain` of them, so followers slightly behind still catch up from the log. The
   * retained entries are also bounded by their bytes (`retainBytes`, entry data): the newest
   * entries up to `index` whose sizes add up to at most that many bytes are kept.
   */
  compact(index: LogIndex, data: Uint8Array, retain = 0, retainBytes = Number.POSITIVE_INFINITY): Snapshot {
    assert(index <= this.applied, () => `compact(${index}) beyond the applied index ${this.applied}`);
    assert(index <= this.stabled, () => `compact(${index}) beyond the durable index ${this.stabled}`);
    assert(index > this.prevIndex, () => `compact(${index}) is not after the current compaction point ${this.prevIndex}`);
    const t = this.term(index) as Term;
    const snapshot: Snapshot = { meta: { index, term: t, config: this.configAt(index) }, data };
    let cut = Math.max(this.prevIndex, index - Math.max(0, retain)) as LogIndex;
    if (retainBytes < Number.POSITIVE_INFINITY) {
      // Walk back from `index`: keep entries while their bytes fit the budget.
      let bytes = 0;
      let keepFrom = index + 1;
      while (keepFrom - 1 > cut) {
        const e = this.entry(keepFrom - 1);
        if (e === undefined || bytes + e.data.length > retainBytes) break;
        bytes += e.data.length;
        keepFrom--;
      }
      cut = (keepFrom - 1) as LogIndex;
    }
    if (cut > this.prevIndex) {
      const cutTerm = this.term(cut) as Term;
      // Keep the config in force at the new compaction point as the base.
      const base = { index: cut, config: this.configAt(cut) };
      this.entries = this.entries.slice(cut - this.prevIndex);
      this.configs = [base, ...this.configs.filter((c) => c.index > cut)];
      this.prevIndex = cut;
      this.prevTerm = cutTerm;
    }
    this.snapshot = heldSnapshot(snapshot);
    return snapshot;
  }

  /**
   * The driver has the snapshot at `index` in its store: forget its bytes, keep their count.
   * Answers the released snapshot, or undefined if the log holds another one (or none), or
   * still needs these bytes (an incoming snapshot not yet installed).
   */
  releaseSnapshotData(index: LogIndex): HeldSnapshot | undefined {
    const s = this.snapshot;
    if (s === undefined || s.meta.index !== index || s.data === undefined) return undefined;
    if (this.pendingSnapshot !== undefined && this.pendingSnapshot.meta.index === index) return undefined;
    this.snapshot = { meta: s.meta, size: s.size, data: undefined };
    return this.snapshot;
  }
}
