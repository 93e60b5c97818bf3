import fc from 'fast-check';
import type { Test } from 'tap';
import type { LogIndex, NodeId, Term } from '../../base/index.js';
import type { Entry, HardState } from '../../raft/index.js';
import type { LoadedLog, LogStore } from '../ports.js';

/**
 * The behaviour every `LogStore` must have, run against each implementation (the in-memory
 * reference and platform's LevelLogStore), so the simulator and the real node store the same
 * way. Restarts here are clean (close, then open over the same storage): crash behaviour is
 * implementation-specific and tested beside each implementation.
 */
export interface LogStoreHarness {
  /** Opens a store over this harness's storage (empty the first time). Close the previous one first. */
  open(): Promise<LogStore>;
  /** Removes the storage. */
  dispose(): Promise<void>;
}

export interface LogStoreContractOptions {
  /** Runs of the model-based property test. Default 40. */
  readonly propertyRuns?: number;
  /** Bytes of data per entry in the model-based test (larger ones make file stores roll over segments). Default: a few. */
  readonly modelEntryBytes?: number;
}

const N1 = 'n1' as NodeId;

export function entry(index: number, term: number, text = `e${index}t${term}`): Entry {
  return { index: index as LogIndex, term: term as Term, data: new TextEncoder().encode(text) };
}

export function entries(from: number, to: number, term: number): Entry[] {
  const out: Entry[] = [];
  for (let i = from; i <= to; i++) out.push(entry(i, term));
  return out;
}

export function hardState(term: number, commit: number, vote: NodeId = N1): HardState {
  return { term: term as Term, vote, commit: commit as LogIndex };
}

/** Entries as plain comparable values: `index:term:hex`. */
export function describeEntries(es: readonly Entry[]): string[] {
  return es.map((e) => `${e.index}:${e.term}:${Buffer.from(e.data).toString('hex')}`);
}

export function describeLoaded(l: LoadedLog): { hardState: HardState; entries: string[]; truncatedTail: number } {
  return { hardState: { term: l.hardState.term, vote: l.hardState.vote, commit: l.hardState.commit }, entries: describeEntries(l.entries), truncatedTail: l.truncatedTail };
}

export function logStoreContract(t: Test, makeHarness: () => Promise<LogStoreHarness>, options: LogStoreContractOptions = {}): void {
  const withStore = (name: string, body: (t: Test, h: LogStoreHarness, s: LogStore) => Promise<void>): void => {
    t.test(name, async (t) => {
      const h = await makeHarness();
      const s = await h.open();
      try {
        await body(t, h, s);
      } finally {
        await s.close().catch(() => undefined);
        await h.dispose();
      }
    });
  };
  const reopen = async (h: LogStoreHarness, s: LogStore): Promise<LogStore> => {
    await s.close();
    return h.open();
  };
  const z = 0 as LogIndex;

  withStore('a fresh store loads an empty log and term 0', async (t, _h, s) => {
    t.same(describeLoaded(await s.load(z)), { hardState: { term: 0, vote: '', commit: 0 }, entries: [], truncatedTail: 0 });
  });

  withStore('entries and hard state round-trip, also across a restart', async (t, h, s) => {
    await s.append({ entries: entries(1, 5, 1), hardState: hardState(1, 3), sync: true });
    const want = { hardState: hardState(1, 3), entries: describeEntries(entries(1, 5, 1)), truncatedTail: 0 };
    t.same(describeLoaded(await s.load(z)), want);
    const s2 = await reopen(h, s);
    try {
      t.same(describeLoaded(await s2.load(z)), want, 'same after close and reopen');
    } finally {
      await s2.close();
    }
  });

  withStore('binary data, empty-ish data and large batches round-trip', async (t, _h, s) => {
    const bin = new Uint8Array(256).map((_, i) => i);
    const big = new Uint8Array(1 << 20).fill(7);
    const es: Entry[] = [{ index: 1 as LogIndex, term: 1 as Term, data: bin }, { index: 2 as LogIndex, term: 1 as Term, data: Uint8Array.of(1) }, { index: 3 as LogIndex, term: 1 as Term, data: big }];
    es.push(...entries(4, 2000, 1));
    await s.append({ entries: es, hardState: hardState(1, 0), sync: true });
    const loaded = await s.load(z);
    t.same(describeEntries(loaded.entries), describeEntries(es));
  });

  withStore('installing a snapshot drops every stored entry, also those after it (they are stale)', async (t, h, s) => {
    await s.append({ entries: entries(1, 12, 2), hardState: hardState(2, 4), sync: true });
    // A leader's snapshot at 8 (term 3) arrives: the log it replaces includes 9..12 of term 2.
    await s.append({ entries: [], hardState: hardState(3, 8), sync: true, installedSnapshot: 8 as LogIndex });
    t.same(describeLoaded(await s.load(8 as LogIndex)), { hardState: hardState(3, 8), entries: [], truncatedTail: 0 });
    await s.append({ entries: entries(9, 10, 3), hardState: hardState(3, 9), sync: true });
    const s2 = await reopen(h, s);
    try {
      t.same(describeEntries((await s2.load(8 as LogIndex)).entries), describeEntries(entries(9, 10, 3)), 'only what followed the snapshot, after a restart');
    } finally {
      await s2.close();
    }
  });

  withStore('a snapshot install and the entries that follow it are one batch', async (t, _h, s) => {
    await s.append({ entries: entries(1, 12, 2), hardState: hardState(2, 4), sync: true });
    await s.append({ entries: entries(9, 9, 3), hardState: hardState(3, 9), sync: true, installedSnapshot: 8 as LogIndex });
    t.same(describeEntries((await s.load(8 as LogIndex)).entries), describeEntries(entries(9, 9, 3)));
  });

  withStore('an entry at index i replaces everything at or after i (conflict truncation, Raft §5.3)', async (t, h, s) => {
    await s.append({ entries: entries(1, 10, 1), hardState: hardState(1, 3), sync: true });
    await s.append({ entries: entries(6, 7, 2), hardState: hardState(2, 3), sync: true });
    // truncatedTail must stay 0: a store that left stale entries behind would have load cut
    // them (their term goes down), which hides the bug in the entries but not in the count.
    const want = { hardState: hardState(2, 3), entries: [...describeEntries(entries(1, 5, 1)), ...describeEntries(entries(6, 7, 2))], truncatedTail: 0 };
    t.same(describeLoaded(await s.load(z)), want, 'load gives 1..7, 6..7 from term 2');
    const s2 = await reopen(h, s);
    try {
      t.same(describeLoaded(await s2.load(z)), want, 'the truncation survives a restart');
      await s2.append({ entries: entries(8, 8, 2), hardState: undefined, sync: true });
      t.same(describeLoaded(await s2.load(z)), { ...want, entries: [...want.entries, ...describeEntries(entries(8, 8, 2))] }, 'appending after the truncation');
      await s2.append({ entries: entries(4, 4, 3), hardState: hardState(3, 3), sync: false });
      t.same(
        describeLoaded(await s2.load(z)),
        { hardState: hardState(3, 3), entries: [...describeEntries(entries(1, 3, 1)), ...describeEntries(entries(4, 4, 3))], truncatedTail: 0 },
        'a one-entry conflict cuts the rest',
      );
    } finally {
      await s2.close();
    }
  });

  withStore('a hard-state-only batch and an empty batch', async (t, _h, s) => {
    await s.append({ entries: entries(1, 2, 1), hardState: hardState(1, 0), sync: true });
    await s.append({ entries: [], hardState: hardState(5, 2), sync: true });
    await s.append({ entries: [], hardState: undefined, sync: true });
    await s.append({ entries: [], hardState: undefined, sync: false });
    const loaded = await s.load(z);
    t.same(describeLoaded(loaded), { hardState: hardState(5, 2), entries: describeEntries(entries(1, 2, 1)), truncatedTail: 0 });
  });

  withStore('compaction deletes entries at or below the index; load skips entries at or below afterIndex', async (t, h, s) => {
    await s.append({ entries: entries(1, 10, 1), hardState: hardState(1, 8), sync: true });
    await s.compact(4 as LogIndex);
    t.same(describeEntries((await s.load(4 as LogIndex)).entries), describeEntries(entries(5, 10, 1)));
    t.same(describeEntries((await s.load(6 as LogIndex)).entries), describeEntries(entries(7, 10, 1)), 'afterIndex above the compaction point');
    const s2 = await reopen(h, s);
    try {
      t.same(describeEntries((await s2.load(4 as LogIndex)).entries), describeEntries(entries(5, 10, 1)), 'same after a restart');
      await t.rejects(s2.load(z), { name: 'CorruptLogError' }, 'reading from 0 finds committed entries 1..4 missing');
    } finally {
      await s2.close();
    }
  });

  withStore('after a snapshot install the log continues past a gap the snapshot covers', async (t, h, s) => {
    await s.append({ entries: entries(1, 5, 1), hardState: hardState(1, 3), sync: true });
    // The driver saved a snapshot at 20 (term 2) and compacts through it, then appends after it.
    await s.compact(20 as LogIndex);
    await s.append({ entries: entries(21, 23, 2), hardState: hardState(2, 20), sync: true });
    t.same(describeEntries((await s.load(20 as LogIndex)).entries), describeEntries(entries(21, 23, 2)));
    const s2 = await reopen(h, s);
    try {
      t.same(describeEntries((await s2.load(20 as LogIndex)).entries), describeEntries(entries(21, 23, 2)), 'same after a restart');
    } finally {
      await s2.close();
    }
  });

  withStore('afterIndexTerm: the term of the stored entry at afterIndex, or none (not loaded itself)', async (t, h, s) => {
    t.equal((await s.load(z)).afterIndexTerm, undefined, 'a fresh store: none at 0');
    await s.append({ entries: [...entries(1, 5, 1), ...entries(6, 10, 2)], hardState: hardState(2, 3), sync: true });
    t.equal((await s.load(z)).afterIndexTerm, undefined, 'never any at 0');
    const at5 = await s.load(5 as LogIndex);
    t.equal(at5.afterIndexTerm, 1, 'entry 5 is of term 1');
    t.same(describeEntries(at5.entries), describeEntries(entries(6, 10, 2)), 'and it is not among the entries loaded');
    t.equal((await s.load(6 as LogIndex)).afterIndexTerm, 2);
    const at10 = await s.load(10 as LogIndex);
    t.same({ term: at10.afterIndexTerm, entries: at10.entries.length }, { term: 2, entries: 0 }, 'the last entry');
    t.equal((await s.load(14 as LogIndex)).afterIndexTerm, undefined, 'beyond the end of the log (a snapshot ahead of it)');
    await s.append({ entries: entries(8, 9, 3), hardState: hardState(3, 3), sync: true });
    t.equal((await s.load(8 as LogIndex)).afterIndexTerm, 3, 'a replaced entry reports its new term');
    t.equal((await s.load(10 as LogIndex)).afterIndexTerm, undefined, 'a truncated entry is none');
    await s.compact(4 as LogIndex);
    t.equal((await s.load(4 as LogIndex)).afterIndexTerm, undefined, 'a compacted entry is none');
    const s2 = await reopen(h, s);
    try {
      const again = await s2.load(5 as LogIndex);
      t.same(
        { term: again.afterIndexTerm, entries: describeEntries(again.entries), truncatedTail: again.truncatedTail },
        { term: 1, entries: describeEntries([...entries(6, 7, 2), ...entries(8, 9, 3)]), truncatedTail: 0 },
        'the same after a restart',
      );
    } finally {
      await s2.close();
    }
  });

  withStore('afterIndexTerm after an installed snapshot: none at its index, also once entries follow it', async (t, h, s) => {
    await s.append({ entries: entries(1, 12, 2), hardState: hardState(2, 4), sync: true });
    await s.append({ entries: [], hardState: hardState(3, 8), sync: true, installedSnapshot: 8 as LogIndex });
    t.equal((await s.load(8 as LogIndex)).afterIndexTerm, undefined, 'the install dropped entry 8');
    await s.append({ entries: entries(9, 10, 3), hardState: hardState(3, 9), sync: true });
    const s2 = await reopen(h, s);
    try {
      const loaded = await s2.load(8 as LogIndex);
      t.same({ term: loaded.afterIndexTerm, entries: describeEntries(loaded.entries) }, { term: undefined, entries: describeEntries(entries(9, 10, 3)) }, 'the log resumes at 9, nothing at 8');
    } finally {
      await s2.close();
    }
  });

  withStore('the log an install whose batch was lost leaves: entry S of the old term and the stale entries after it are reported', async (t, _h, s) => {
    // The snapshot file at 8 (term 3) was saved; the crash lost the batch that would drop the old log.
    await s.append({ entries: entries(1, 12, 2), hardState: hardState(2, 4), sync: true });
    const loaded = await s.load(8 as LogIndex);
    t.same(
      { term: loaded.afterIndexTerm, entries: describeEntries(loaded.entries), truncatedTail: loaded.truncatedTail },
      { term: 2, entries: describeEntries(entries(9, 12, 2)), truncatedTail: 0 },
      'the store reports what it holds; the driver (Replica.open) decides that 9..12 are stale',
    );
    // The old log ended before the snapshot: nothing at 8 and nothing after it.
    await s.append({ entries: entries(6, 6, 2), hardState: undefined, sync: true });
    const short = await s.load(8 as LogIndex);
    t.same({ term: short.afterIndexTerm, entries: short.entries.length }, { term: undefined, entries: 0 });
  });

  withStore('a batch whose entries are not contiguous is refused and writes nothing', async (t, _h, s) => {
    await s.append({ entries: entries(1, 2, 1), hardState: hardState(1, 0), sync: true });
    await t.rejects(s.append({ entries: [entry(3, 1), entry(5, 1)], hardState: hardState(1, 1), sync: true }), /not contiguous/);
    t.same(describeLoaded(await s.load(z)), { hardState: hardState(1, 0), entries: describeEntries(entries(1, 2, 1)), truncatedTail: 0 });
  });

  withStore('a log shorter than the commit index is refused (committed entries missing)', async (t, _h, s) => {
    await s.append({ entries: entries(1, 3, 1), hardState: hardState(1, 5), sync: true });
    await t.rejects(s.load(z), { name: 'CorruptLogError', message: /ends at index 3 but the commit index is 5/ });
  });

  t.test('model-based: random appends, truncations, compactions and restarts match a naive log', async (t) => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.record({ kind: fc.nat(9), a: fc.nat(1000), b: fc.nat(1000), c: fc.nat(1000), sync: fc.boolean() }), { maxLength: 30 }),
        async (steps) => {
          const h = await makeHarness();
          let s = await h.open();
          try {
            // The model: every entry ever kept, from index 1; the snapshot index (load's afterIndex).
            let log: Entry[] = [];
            let hs = hardState(0, 0, '' as NodeId);
            let snap = 0;
            let compacted = 0;
            const check = async (): Promise<void> => {
              const loaded = await s.load(snap as LogIndex);
              const want = { hardState: { term: hs.term, vote: hs.vote, commit: hs.commit }, entries: describeEntries(log.slice(snap)), truncatedTail: 0 };
              if (JSON.stringify(describeLoaded(loaded)) !== JSON.stringify(want)) {
                throw new Error(`loaded ${JSON.stringify(describeLoaded(loaded))}, model says ${JSON.stringify(want)}`);
              }
              // The entry at the snapshot index is kept unless compaction reached it.
              const wantTerm = snap > compacted ? log[snap - 1]?.term : undefined;
              if (loaded.afterIndexTerm !== wantTerm) {
                throw new Error(`load(${snap}) says the entry there is of term ${String(loaded.afterIndexTerm)}, model says ${String(wantTerm)} (compacted through ${compacted})`);
              }
            };
            for (const step of steps) {
              const last = log.length;
              if (step.kind <= 5) {
                // Append from an index above the commit and snapshot indexes, up to last + 1.
                const low = Math.max(hs.commit, snap) + 1;
                const first = low + (step.a % (last + 2 - low));
                const count = step.b % 5;
                const prevTerm = first >= 2 ? (log[first - 2]?.term ?? 0) : 0;
                const termNow = Math.max(prevTerm, hs.term) + (step.c % 2);
                const batch: Entry[] = [];
                for (let i = 0; i < count; i++) batch.push(entry(first + i, termNow, `x${step.c}:${first + i}`.padEnd(options.modelEntryBytes ?? 0, '.')));
                const newLast = count > 0 ? first + count - 1 : last;
                const commit = Math.min(newLast, hs.commit + (step.c % 3));
                const newHs = step.a % 4 === 0 ? undefined : hardState(termNow, Math.max(hs.commit, commit));
                await s.append({ entries: batch, hardState: newHs, sync: step.sync });
                if (count > 0) log = [...log.slice(0, first - 1), ...batch];
                if (newHs !== undefined) hs = newHs;
              } else if (step.kind <= 7) {
                // A snapshot at or below the commit index, then compaction a little behind it.
                if (hs.commit <= snap) continue;
                snap = snap + 1 + (step.a % (hs.commit - snap));
                compacted = Math.max(compacted, snap - (step.b % 3));
                await s.compact(compacted as LogIndex);
              } else if (step.kind === 8) {
                await s.close();
                s = await h.open();
              } else {
                await check();
              }
            }
            await check();
          } finally {
            await s.close().catch(() => undefined);
            await h.dispose();
          }
        },
      ),
      { numRuns: options.propertyRuns ?? 40 },
    );
    t.pass('every run matched the model');
  });
}
