import path from 'node:path';
import { Level } from 'level';
import t from 'tap';
import type { LogIndex, Term } from '../base/index.js';
import { describeEntries, describeLoaded, entries, entry, hardState, logStoreContract } from '../replica/testing/index.js';
import { LevelLogStore, RAFT_LOG_DIR } from './level-log-store.js';
import { encodeEntry, entryKey, HARD_STATE_KEY, META_KEY } from './log-codec.js';
import { tempDir } from './testing/fs-faults.js';

const z = 0 as LogIndex;

t.test('LevelLogStore meets the LogStore contract', async (t) => {
  logStoreContract(
    t,
    async () => {
      const { dir, remove } = await tempDir('log-contract');
      return { open: () => LevelLogStore.open({ dataDir: dir }), dispose: remove };
    },
    { propertyRuns: 25 },
  );
});

t.test('group commit: one LevelDB batch (and one fsync) per append call', async (t) => {
  const { dir, remove } = await tempDir('log-group');
  t.teardown(remove);
  const s = await LevelLogStore.open({ dataDir: dir });
  t.teardown(() => s.close());
  await s.append({ entries: entries(1, 500, 1), hardState: hardState(1, 0), sync: true });
  t.same(s.stats(), { batches: 1, syncedBatches: 1 }, '500 entries and the hard state: one synced batch');
  await s.append({ entries: entries(501, 510, 1), hardState: undefined, sync: false });
  await s.append({ entries: entries(300, 320, 2), hardState: hardState(2, 0), sync: true });
  t.same(s.stats(), { batches: 3, syncedBatches: 2 }, 'a truncating append (190 deletes, 21 puts) is still one batch');
  await s.append({ entries: [], hardState: undefined, sync: true });
  t.same(s.stats(), { batches: 3, syncedBatches: 2 }, 'nothing to write and nothing unsynced: no batch');
  await s.append({ entries: entries(321, 321, 2), hardState: undefined, sync: false });
  await s.append({ entries: [], hardState: undefined, sync: true });
  t.same(s.stats(), { batches: 5, syncedBatches: 3 }, 'an empty synced append after an unsynced one still fsyncs');
  t.equal(s.lastIndex, 321);
});

t.test('restart: close and reopen gives the same state, including the last index used for truncation', async (t) => {
  const { dir, remove } = await tempDir('log-restart');
  t.teardown(remove);
  let s = await LevelLogStore.open({ dataDir: dir });
  await s.append({ entries: entries(1, 20, 1), hardState: hardState(1, 5), sync: true });
  await s.close();
  s = await LevelLogStore.open({ dataDir: dir });
  t.equal(s.lastIndex, 20, 'the last index is read back on open');
  // Without loading first: a conflicting append must still delete 11..20.
  await s.append({ entries: entries(10, 10, 2), hardState: hardState(2, 5), sync: true });
  await s.close();
  s = await LevelLogStore.open({ dataDir: dir });
  t.teardown(() => s.close());
  t.same(describeLoaded(await s.load(z)), {
    hardState: hardState(2, 5),
    entries: [...describeEntries(entries(1, 9, 1)), ...describeEntries(entries(10, 10, 2))],
    truncatedTail: 0,
  });
});

t.test('a closed store refuses work with a clear error', async (t) => {
  const { dir, remove } = await tempDir('log-closed');
  t.teardown(remove);
  const s = await LevelLogStore.open({ dataDir: dir });
  await s.close();
  await s.close(); // idempotent
  await t.rejects(s.append({ entries: entries(1, 1, 1), hardState: undefined, sync: true }), { name: 'StorageError', message: /append .* failed: the raft log store is closed/ });
});

t.test('the database is in <dataDir>/raft-log with the documented keys and checksummed values', async (t) => {
  const { dir, remove } = await tempDir('log-format');
  t.teardown(remove);
  const s = await LevelLogStore.open({ dataDir: dir });
  await s.append({ entries: [entry(1, 7, 'hello')], hardState: hardState(7, 1), sync: true });
  await s.close();
  const raw = new Level<Uint8Array, Uint8Array>(path.join(dir, RAFT_LOG_DIR), { keyEncoding: 'view', valueEncoding: 'view' });
  await raw.open();
  t.teardown(() => raw.close());
  const keys = (await raw.keys().all()).map((k) => Buffer.from(k).toString('hex'));
  t.same(keys, ['650000000000000001', '68', '6d'], "'e' + u64 index, 'h', 'm'");
  const value = await raw.get(entryKey(1));
  t.same(Buffer.from(value ?? new Uint8Array()).toString('hex'), Buffer.from(encodeEntry(entry(1, 7, 'hello'))).toString('hex'));
  t.equal(Buffer.from(value ?? new Uint8Array()).subarray(4).toString('hex'), '0000000000000001' + '0000000000000007' + Buffer.from('hello').toString('hex'), 'crc, index, term, data');
  t.ok(await raw.get(HARD_STATE_KEY));
  t.ok(await raw.get(META_KEY));
});

t.test('a database with a newer format version is refused', async (t) => {
  const { dir, remove } = await tempDir('log-version');
  t.teardown(remove);
  await (await LevelLogStore.open({ dataDir: dir })).close();
  const raw = new Level<Uint8Array, Uint8Array>(path.join(dir, RAFT_LOG_DIR), { keyEncoding: 'view', valueEncoding: 'view' });
  const { encodeMeta } = await import('./log-codec.js');
  await raw.put(META_KEY, encodeMeta(2));
  await raw.close();
  await t.rejects(LevelLogStore.open({ dataDir: dir }), { name: 'UnsupportedFormatError', message: /format version 2; this build reads only version 1/ });
});

t.test('term order: terms never decrease along the log', async (t) => {
  const { dir, remove } = await tempDir('log-terms');
  t.teardown(remove);
  const s = await LevelLogStore.open({ dataDir: dir });
  t.teardown(() => s.close());
  await s.append({ entries: [entry(1, 1), entry(2, 3), entry(3, 3)], hardState: hardState(3, 1), sync: true });
  const loaded = await s.load(z);
  t.same(
    loaded.entries.map((e) => e.term),
    [1, 3, 3].map((n) => n as Term),
  );
});

t.test('an install batch drops the entry at the snapshot index itself, not only in the range clear after it', async (t) => {
  // The entries below the snapshot go in a range clear after the batch, which a crash can cut
  // off. Entry S must be gone with the batch: a stale entry S of another term, behind new
  // entries written after the install, would make Replica.open drop those as a stale suffix.
  const { dir, remove } = await tempDir('log-install');
  t.teardown(remove);
  let s = await LevelLogStore.open({ dataDir: dir });
  await s.append({ entries: entries(1, 12, 2), hardState: hardState(2, 4), sync: true });
  // The crash comes right after the batch: the range clear never runs.
  const db = (s as unknown as { db: { clear: (range: unknown) => Promise<void> } }).db;
  db.clear = () => Promise.reject(new Error('crashed before the range clear'));
  await t.rejects(s.append({ entries: entries(9, 10, 3), hardState: hardState(3, 8), sync: true, installedSnapshot: 8 as LogIndex }), /clear the raft log below the installed snapshot at 8/);
  await s.close();
  s = await LevelLogStore.open({ dataDir: dir });
  t.teardown(() => s.close());
  const loaded = await s.load(8 as LogIndex);
  t.same({ afterIndexTerm: loaded.afterIndexTerm, entries: describeEntries(loaded.entries) }, { afterIndexTerm: undefined, entries: describeEntries(entries(9, 10, 3)) }, 'nothing at 8, then the new entries');
});
