import t from 'tap';
import type { LogIndex } from '../../base/index.js';
import { describeEntries, entries, hardState, logStoreContract } from './log-store-contract.js';
import { MemoryLogStore } from './memory-log-store.js';

const z = 0 as LogIndex;

t.test('MemoryLogStore meets the LogStore contract', async (t) => {
  logStoreContract(t, async () => {
    let store: MemoryLogStore | undefined;
    return {
      open: async () => (store = store === undefined ? new MemoryLogStore() : store.reopen()),
      dispose: async () => undefined,
    };
  });
});

t.test('power loss drops writes no synced append covered', async (t) => {
  let s = new MemoryLogStore();
  await s.append({ entries: entries(1, 3, 1), hardState: hardState(1, 1), sync: true });
  await s.append({ entries: entries(4, 5, 1), hardState: hardState(1, 3), sync: false });
  await s.compact(2 as LogIndex);
  t.equal(s.unsyncedWrites, 2);
  s = s.crash();
  t.same(describeEntries((await s.load(z)).entries), describeEntries(entries(1, 3, 1)), 'the unsynced append and compaction are gone');
  t.same((await s.load(z)).hardState, hardState(1, 1));
});

t.test('a synced append makes earlier unsynced writes durable (group commit)', async (t) => {
  let s = new MemoryLogStore();
  await s.append({ entries: entries(1, 3, 1), hardState: hardState(1, 0), sync: false });
  await s.append({ entries: entries(4, 4, 1), hardState: undefined, sync: true });
  s = s.crash();
  t.same(describeEntries((await s.load(z)).entries), describeEntries(entries(1, 4, 1)));
  t.same(s.stats(), { batches: 2, syncedBatches: 1, compactions: 0 });
});

t.test('a crash may keep a prefix of the unsynced writes', async (t) => {
  let s = new MemoryLogStore();
  await s.append({ entries: entries(1, 1, 1), hardState: hardState(1, 0), sync: true });
  await s.append({ entries: entries(2, 2, 1), hardState: undefined, sync: false });
  await s.append({ entries: entries(3, 3, 1), hardState: undefined, sync: false });
  s = s.crash(1);
  t.same(describeEntries((await s.load(z)).entries), describeEntries(entries(1, 2, 1)));
});

t.test('loseUnsyncedOnCrash: false keeps everything (a process crash, not power loss)', async (t) => {
  let s = new MemoryLogStore({ loseUnsyncedOnCrash: false });
  await s.append({ entries: entries(1, 2, 1), hardState: hardState(1, 0), sync: false });
  s = s.crash();
  t.same(describeEntries((await s.load(z)).entries), describeEntries(entries(1, 2, 1)));
});

t.test('a crashed or closed handle refuses work', async (t) => {
  const s = new MemoryLogStore();
  s.crash();
  await t.rejects(s.load(z), /closed \(or crashed\)/);
});

t.test('a damaged entry above the commit index is cut back and reported', async (t) => {
  let s = new MemoryLogStore();
  await s.append({ entries: entries(1, 10, 1), hardState: hardState(1, 6), sync: true });
  s.corruptEntry(8);
  const loaded = await s.load(z);
  t.same(describeEntries(loaded.entries), describeEntries(entries(1, 7, 1)));
  t.equal(loaded.truncatedTail, 3);
  s = s.crash();
  t.same(describeEntries((await s.load(z)).entries), describeEntries(entries(1, 7, 1)), 'the cut is durable');
});

t.test('a damaged entry at or below the commit index refuses to start', async (t) => {
  const s = new MemoryLogStore();
  await s.append({ entries: entries(1, 10, 1), hardState: hardState(1, 6), sync: true });
  s.corruptEntry(6);
  await t.rejects(s.load(z), { name: 'CorruptLogError', message: /log entry 6 fails its checksum at or below the commit index 6/ });
});

t.test('failWrites makes appends reject without writing (a full disk)', async (t) => {
  const s = new MemoryLogStore();
  await s.append({ entries: entries(1, 1, 1), hardState: hardState(1, 0), sync: true });
  s.failWrites(new Error('ENOSPC: no space left on device'));
  await t.rejects(s.append({ entries: entries(2, 2, 1), hardState: undefined, sync: true }), /ENOSPC/);
  s.failWrites(undefined);
  t.same(describeEntries((await s.load(z)).entries), describeEntries(entries(1, 1, 1)));
});
