import t from 'tap';
import { MemorySnapshotStore } from './memory-snapshot-store.js';
import { describeSnapshot, snapshot, snapshotStoreContract } from './snapshot-store-contract.js';

t.test('MemorySnapshotStore meets the SnapshotStore contract', async (t) => {
  snapshotStoreContract(t, async () => {
    let store: MemorySnapshotStore | undefined;
    return {
      open: async () => (store = store === undefined ? new MemorySnapshotStore() : store.reopen()),
      dispose: async () => undefined,
    };
  });
});

t.test('keeps the newest two; a damaged newest falls back to the older one', async (t) => {
  const s = new MemorySnapshotStore();
  await s.save(snapshot(10, 1));
  await s.save(snapshot(20, 1));
  await s.save(snapshot(30, 2));
  t.same(s.indexes(), [30, 20]);
  s.corrupt(30);
  const loaded = await s.loadNewest();
  t.same(describeSnapshot(loaded.snapshot), describeSnapshot(snapshot(20, 1)));
  t.same(loaded.skippedCorrupt, ['memory:snap-00000000000000000030-2']);
  s.corrupt(20);
  t.same(await s.loadNewest(), { snapshot: undefined, skippedCorrupt: ['memory:snap-00000000000000000020-1'] });
});

t.test('the returned snapshot is a copy', async (t) => {
  const s = new MemorySnapshotStore();
  await s.save(snapshot(1, 1, 'abc'));
  const a = await s.loadNewest();
  a.snapshot?.data.fill(0);
  t.same(describeSnapshot((await s.loadNewest()).snapshot), describeSnapshot(snapshot(1, 1, 'abc')));
});
