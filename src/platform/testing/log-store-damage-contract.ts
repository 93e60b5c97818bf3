import type { Test } from 'tap';
import type { LogIndex } from '../../base/index.js';
import type { Entry } from '../../raft/index.js';
import { CorruptLogError, type LogStore } from '../../replica/index.js';
import { describeEntries, describeLoaded, entries, entry, hardState } from '../../replica/testing/index.js';
import { tempDir } from './fs-faults.js';

/**
 * Damage every durable `LogStore` must handle the same way (the port's rules in
 * src/replica/ports.ts), run against LevelLogStore and WalLogStore. How damage is planted is
 * each store's own: `damageEntry` flips bits in the stored form of one entry.
 */
export interface DamageHarness {
  open(dataDir: string): Promise<LogStore>;
  /** Makes the stored entry `index` fail its checksum (the store is closed). */
  damageEntry(dataDir: string, index: number): Promise<void>;
}

const z = 0 as LogIndex;

/** A store in a fresh temp dir holding entries 1..last (term 1), each its own synced batch with commit min(i, commit). */
async function written(t: Test, h: DamageHarness, last: number, commit: number): Promise<{ dir: string; written: Entry[] }> {
  const { dir, remove } = await tempDir('log-damage');
  t.teardown(remove);
  const s = await h.open(dir);
  const all: Entry[] = [];
  for (let i = 1; i <= last; i++) {
    const e = entry(i, 1, `${i}:`.padEnd(200, 'x'));
    all.push(e);
    await s.append({ entries: [e], hardState: hardState(1, Math.min(i, commit)), sync: true });
  }
  await s.close();
  return { dir, written: all };
}

export function logStoreDamageContract(t: Test, h: DamageHarness): void {
  const loadFresh = async (t: Test, dir: string): Promise<Awaited<ReturnType<LogStore['load']>>> => {
    const s = await h.open(dir);
    t.teardown(() => s.close());
    return s.load(z);
  };

  t.test('a bad checksum above the commit index: the tail is cut back, durably, and reported', async (t) => {
    const { dir, written: all } = await written(t, h, 10, 5);
    await h.damageEntry(dir, 8);
    const first = await h.open(dir);
    const loaded = await first.load(z);
    t.same(describeEntries(loaded.entries), describeEntries(all.slice(0, 7)), 'entries 1..7');
    t.equal(loaded.truncatedTail, 3, 'entries 8, 9, 10 cut');
    t.same(loaded.hardState, hardState(1, 5), 'the hard state is kept');
    // The cut log accepts new entries from 8 on.
    await first.append({ entries: entries(8, 9, 2), hardState: hardState(2, 5), sync: true });
    await first.close();
    t.same(
      describeLoaded(await loadFresh(t, dir)),
      { hardState: hardState(2, 5), entries: [...describeEntries(all.slice(0, 7)), ...describeEntries(entries(8, 9, 2))], truncatedTail: 0 },
      'the cut was durable and the log went on',
    );
  });

  t.test('loading after a snapshot index: the same cut, and the term of the intact entry at that index', async (t) => {
    const { dir, written: all } = await written(t, h, 10, 5);
    await h.damageEntry(dir, 8);
    const s = await h.open(dir);
    t.teardown(() => s.close());
    const loaded = await s.load(6 as LogIndex);
    t.same(
      { entries: describeEntries(loaded.entries), truncatedTail: loaded.truncatedTail, afterIndexTerm: loaded.afterIndexTerm },
      { entries: describeEntries(all.slice(6, 7)), truncatedTail: 3, afterIndexTerm: 1 },
      'entry 7, then 8..10 cut as when loading from 0; entry 6 reported, not loaded',
    );
    const again = await s.load(6 as LogIndex);
    t.same({ entries: again.entries.length, truncatedTail: again.truncatedTail, afterIndexTerm: again.afterIndexTerm }, { entries: 1, truncatedTail: 0, afterIndexTerm: 1 }, 'the cut kept entry 6');
  });

  t.test('a bad checksum at or below the commit index refuses to start, and cuts nothing', async (t) => {
    const { dir } = await written(t, h, 10, 5);
    await h.damageEntry(dir, 4);
    const s = await h.open(dir);
    t.teardown(() => s.close());
    const err = await s.load(z).then(
      () => undefined,
      (e: unknown) => e,
    );
    t.ok(err instanceof CorruptLogError, `CorruptLogError: ${String(err)}`);
    t.match((err as Error).message, /at or below the commit index 5 .*refusing to start rather than serve wrong data; restore this node from a snapshot or wipe its data dir to rejoin/);
    await t.rejects(s.load(z), CorruptLogError, 'nothing was cut: it refuses again');
    await s.close();
    await t.rejects(loadFresh(t, dir), CorruptLogError, 'and again after a restart');
  });

  t.test('an entry past a gap above the commit index is cut back', async (t) => {
    const { dir, written: all } = await written(t, h, 10, 5);
    const s = await h.open(dir);
    await s.append({ entries: [entry(12, 1)], hardState: undefined, sync: true });
    const loaded = await s.load(z);
    t.same(describeEntries(loaded.entries), describeEntries(all), 'entries 1..10');
    t.equal(loaded.truncatedTail, 1, 'entry 12 cut');
    await s.close();
    t.same(describeEntries((await loadFresh(t, dir)).entries), describeEntries(all), 'the cut was durable');
  });

  t.test('an entry whose term goes down above the commit index is cut back', async (t) => {
    const { dir, written: all } = await written(t, h, 10, 5);
    const s = await h.open(dir);
    await s.append({ entries: [entry(9, 0)], hardState: undefined, sync: true });
    const loaded = await s.load(z);
    t.same(describeEntries(loaded.entries), describeEntries(all.slice(0, 8)), 'entries 1..8 (10 was replaced by the bad 9)');
    t.equal(loaded.truncatedTail, 1);
    await s.close();
    const again = await loadFresh(t, dir);
    t.same(describeLoaded(again), { hardState: hardState(1, 5), entries: describeEntries(all.slice(0, 8)), truncatedTail: 0 }, 'the cut was durable');
  });
}
