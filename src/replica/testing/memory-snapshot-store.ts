import type { Snapshot, SnapshotMeta } from '../../raft/index.js';
import type { SnapshotStore } from '../ports.js';

/**
 * The in-memory reference `SnapshotStore`, with the semantics of platform's
 * FileSnapshotStore: a save is atomic and durable when it resolves, the newest `retain` are
 * kept, `loadNewest` falls back past damaged snapshots (reporting and discarding them).
 * `corrupt(index)` damages a stored snapshot; `reopen()` is a process restart.
 */

export interface MemorySnapshotStoreOptions {
  /** How many snapshots to keep, newest first. Default 2. */
  readonly retain?: number;
}

interface Stored {
  readonly snapshot: Snapshot;
  corrupt: boolean;
}

/** The shelf several handles (before and after a restart) share. */
class Shelf {
  snapshots: Stored[] = []; // newest first
  saves = 0;
  /** Successful `readBody` calls (a leader sending a snapshot it no longer holds in memory). */
  bodyReads = 0;
  /** Every save, oldest first: its index and data size (for tests of the snapshot trigger). */
  readonly history: { readonly index: number; readonly bytes: number }[] = [];
}

function nameOf(s: Snapshot): string {
  return `memory:snap-${String(s.meta.index).padStart(20, '0')}-${s.meta.term}`;
}

function copy(s: Snapshot): Snapshot {
  return { meta: structuredClone(s.meta), data: s.data.slice() };
}

export class MemorySnapshotStore implements SnapshotStore {
  private shelf = new Shelf();
  private closed = false;
  private readonly retain: number;

  constructor(private readonly options: MemorySnapshotStoreOptions = {}) {
    const retain = options.retain ?? 2;
    if (!Number.isSafeInteger(retain) || retain < 1) {
      throw new TypeError(`MemorySnapshotStore option retain must be an integer of at least 1, got ${String(retain)}`);
    }
    this.retain = retain;
  }

  async save(snapshot: Snapshot): Promise<void> {
    this.checkOpen('save');
    const stored: Stored = { snapshot: copy(snapshot), corrupt: false };
    const rest = this.shelf.snapshots.filter((s) => s.snapshot.meta.index !== snapshot.meta.index || s.snapshot.meta.term !== snapshot.meta.term);
    rest.push(stored);
    rest.sort((a, b) => b.snapshot.meta.index - a.snapshot.meta.index || b.snapshot.meta.term - a.snapshot.meta.term);
    this.shelf.snapshots = rest.filter((s, k) => k < this.retain || s === stored);
    this.shelf.saves++;
    this.shelf.history.push({ index: snapshot.meta.index, bytes: snapshot.data.length });
  }

  async loadNewest(): Promise<{ snapshot: Snapshot | undefined; skippedCorrupt: readonly string[] }> {
    this.checkOpen('loadNewest');
    const skippedCorrupt: string[] = [];
    for (const s of [...this.shelf.snapshots]) {
      if (!s.corrupt) return { snapshot: copy(s.snapshot), skippedCorrupt };
      skippedCorrupt.push(nameOf(s.snapshot));
      this.shelf.snapshots = this.shelf.snapshots.filter((x) => x !== s);
    }
    return { snapshot: undefined, skippedCorrupt };
  }

  async readBody(meta: SnapshotMeta, offset: number, length: number): Promise<Uint8Array> {
    this.checkOpen('readBody');
    const s = this.shelf.snapshots.find((x) => x.snapshot.meta.index === meta.index && x.snapshot.meta.term === meta.term);
    if (s === undefined) throw new Error(`snapshot ${meta.index} (term ${meta.term}) is no longer stored`);
    if (offset < 0 || length < 0 || offset + length > s.snapshot.data.length) throw new Error(`bytes ${offset}..${offset + length} are outside snapshot ${meta.index}`);
    this.shelf.bodyReads++;
    return s.snapshot.data.slice(offset, offset + length);
  }

  async close(): Promise<void> {
    this.closed = true;
  }

  /** A process restart: this handle closes, the snapshots stay. */
  reopen(): MemorySnapshotStore {
    this.closed = true;
    const next = new MemorySnapshotStore(this.options);
    next.shelf = this.shelf;
    return next;
  }

  /** Damages the stored snapshot(s) at `index`; `loadNewest` will skip them. */
  corrupt(index: number): void {
    for (const s of this.shelf.snapshots) if (s.snapshot.meta.index === index) s.corrupt = true;
  }

  /** Indexes of the stored snapshots, newest first. */
  indexes(): number[] {
    return this.shelf.snapshots.map((s) => s.snapshot.meta.index);
  }

  get saves(): number {
    return this.shelf.saves;
  }

  get bodyReads(): number {
    return this.shelf.bodyReads;
  }

  /** Every save so far, oldest first: index and data bytes. */
  get history(): readonly { readonly index: number; readonly bytes: number }[] {
    return this.shelf.history;
  }

  private checkOpen(operation: string): void {
    if (this.closed) throw new Error(`${operation} on a closed MemorySnapshotStore handle`);
  }
}
