import { randomBytes } from 'node:crypto';
import { access, readdir, stat, truncate } from 'node:fs/promises';
import path from 'node:path';
import { Level } from 'level';
import t, { type Test } from 'tap';
import type { LogIndex, Term } from '../base/index.js';
import type { Entry } from '../raft/index.js';
import { CorruptLogError } from '../replica/index.js';
import { describeEntries, entry, hardState } from '../replica/testing/index.js';
import { LevelLogStore, RAFT_LOG_DIR, RECOVERY_DATA_LOSS_MARKER } from './level-log-store.js';
import { encodeEntry, entryKey, HARD_STATE_KEY } from './log-codec.js';
import { flipByte, logStoreDamageContract, newestLevelDbLog, tempDir } from './testing/index.js';

const z = 0 as LogIndex;
type RawDb = Level<Uint8Array, Uint8Array>;

/** A store in a fresh temp dir holding entries 1..last (term 1), each its own synced batch, commit `commit`. */
async function written(t: Test, last: number, commit: number, dataBytes = 200): Promise<{ dir: string; written: Entry[] }> {
  const { dir, remove } = await tempDir('log-corrupt');
  t.teardown(remove);
  const s = await LevelLogStore.open({ dataDir: dir });
  const all: Entry[] = [];
  for (let i = 1; i <= last; i++) {
    const e = entry(i, 1, `${i}:`.padEnd(dataBytes, 'x'));
    all.push(e);
    await s.append({ entries: [e], hardState: hardState(1, Math.min(i, commit)), sync: true });
  }
  await s.close();
  return { dir, written: all };
}

/** Opens the raw LevelDB database under a store, bypassing it, to plant damage. */
async function withRaw(dir: string, fn: (db: RawDb) => Promise<void>): Promise<void> {
  const db: RawDb = new Level<Uint8Array, Uint8Array>(path.join(dir, RAFT_LOG_DIR), { keyEncoding: 'view', valueEncoding: 'view' });
  await db.open();
  try {
    await fn(db);
  } finally {
    await db.close();
  }
}

async function loadFresh(t: Test, dir: string, options: { onRecoveryDataLoss?: 'warn' | 'refuse' } = {}): Promise<{ store: LevelLogStore; loaded: Awaited<ReturnType<LevelLogStore['load']>> }> {
  const store = await LevelLogStore.open({ dataDir: dir, ...options });
  t.teardown(() => store.close());
  return { store, loaded: await store.load(z) };
}

/** Every loaded entry is exactly one that was written, in order from 1: a prefix, never damaged data. */
function assertIntactPrefix(t: Test, loaded: readonly Entry[], all: readonly Entry[], what: string): void {
  t.same(describeEntries(loaded), describeEntries(all.slice(0, loaded.length)), `${what}: the loaded log is an intact prefix (${loaded.length} of ${all.length})`);
}

t.test('torn tail: the LevelDB write-ahead log cut short by various amounts', async (t) => {
  for (const cut of [1, 17, 150, 600, 2500]) {
    await t.test(`cut by ${cut} bytes`, async (t) => {
      const { dir, written: all } = await written(t, 40, 30);
      const wal = await newestLevelDbLog(path.join(dir, RAFT_LOG_DIR));
      await truncate(wal.file, wal.size - cut);
      const { loaded } = await loadFresh(t, dir);
      assertIntactPrefix(t, loaded.entries, all, `cut ${cut}`);
      t.ok(loaded.entries.length < all.length, 'the cut removed the newest records');
      t.ok(loaded.hardState.commit <= loaded.entries.length, 'the commit index reverted with the entries (same batch)');
      t.ok(loaded.entries.length >= 30 || cut > 600, 'nothing below the commit index was lost for small cuts');
    });
  }
});

t.test('torn tail: a byte flipped near the end of the write-ahead log', async (t) => {
  for (const back of [1, 40, 230, 900]) {
    await t.test(`flip ${back} bytes before the end`, async (t) => {
      const { dir, written: all } = await written(t, 40, 30);
      const wal = await newestLevelDbLog(path.join(dir, RAFT_LOG_DIR));
      await flipByte(wal.file, wal.size - back);
      const { store, loaded } = await loadFresh(t, dir);
      assertIntactPrefix(t, loaded.entries, all, `flip at -${back}`);
      t.ok(loaded.entries.length < all.length, 'LevelDB dropped the damaged record and everything after it in its block');
      t.ok(store.recovery.droppedBytes > 0, `LevelDB's report was picked up: ${store.recovery.messages.join('; ')}`);
      t.match(store.recovery.messages[0], /dropping \d+ bytes; Corruption: checksum mismatch/);
    });
  }
});

t.test("onRecoveryDataLoss 'refuse': LevelDB dropping log data stops the node, and keeps stopping it", async (t) => {
  const { dir } = await written(t, 20, 10);
  const wal = await newestLevelDbLog(path.join(dir, RAFT_LOG_DIR));
  await flipByte(wal.file, wal.size - 100);
  await t.rejects(LevelLogStore.open({ dataDir: dir, onRecoveryDataLoss: 'refuse' }), {
    name: 'CorruptLogError',
    message: /LevelDB dropped \d+ bytes of damaged write-ahead log .* refusing to start because acknowledged writes may be lost/,
  });
  await access(path.join(dir, RAFT_LOG_DIR, RECOVERY_DATA_LOSS_MARKER));
  // LevelDB has already rewritten its files: only the marker remembers.
  await t.rejects(LevelLogStore.open({ dataDir: dir, onRecoveryDataLoss: 'refuse' }), { name: 'CorruptLogError', message: /an earlier start found/ });
  const s = await LevelLogStore.open({ dataDir: dir, onRecoveryDataLoss: 'warn' });
  t.equal(s.recovery.messages.length, 0, 'the second recovery itself was clean');
  await s.close();
});

logStoreDamageContract(t, {
  open: (dataDir) => LevelLogStore.open({ dataDir }),
  damageEntry: (dataDir, index) =>
    withRaw(dataDir, async (db) => {
      const v = await db.get(entryKey(index));
      if (v === undefined) throw new Error(`entry ${index} missing`);
      const damaged = Uint8Array.from(v);
      damaged[damaged.length - 1] = (damaged[damaged.length - 1] ?? 0) ^ 0x01;
      await db.put(entryKey(index), damaged);
    }),
});

t.test('a missing entry (gap) above the commit index is cut back; at or below it refuses', async (t) => {
  const above = await written(t, 10, 5);
  await withRaw(above.dir, (db) => db.del(entryKey(8)));
  const { loaded } = await loadFresh(t, above.dir);
  t.same(describeEntries(loaded.entries), describeEntries(above.written.slice(0, 7)));
  t.equal(loaded.truncatedTail, 2, 'entries 9 and 10 after the gap were cut');

  const below = await written(t, 10, 5);
  await withRaw(below.dir, (db) => db.del(entryKey(3)));
  const s = await LevelLogStore.open({ dataDir: below.dir });
  t.teardown(() => s.close());
  await t.rejects(s.load(z), { name: 'CorruptLogError', message: /log entry 3 is missing \(the next stored entry is 4\) at or below the commit index 5/ });
  t.same(describeEntries((await s.load(3 as LogIndex)).entries), describeEntries(below.written.slice(3)), 'from a snapshot at 3 the log is whole: the gap is compacted history');
});

t.test('entries whose term goes down, or stored under the wrong index, count as damage', async (t) => {
  const terms = await written(t, 10, 5);
  await withRaw(terms.dir, (db) => db.put(entryKey(9), encodeEntry({ index: 9 as LogIndex, term: 0 as Term, data: Uint8Array.of(1) })));
  const a = await loadFresh(t, terms.dir);
  t.equal(a.loaded.entries.length, 8);
  t.equal(a.loaded.truncatedTail, 2);

  const misplaced = await written(t, 10, 5);
  await withRaw(misplaced.dir, async (db) => {
    const v = await db.get(entryKey(7));
    if (v === undefined) throw new Error('entry 7 missing');
    await db.put(entryKey(9), v);
  });
  const b = await loadFresh(t, misplaced.dir);
  t.equal(b.loaded.entries.length, 8, 'entry 9 holds entry 7: cut from 9');
  t.equal(b.loaded.truncatedTail, 2);
});

t.test('a damaged hard state refuses to start (a forgotten vote could elect two leaders in a term)', async (t) => {
  const { dir } = await written(t, 3, 1);
  await withRaw(dir, async (db) => {
    const v = await db.get(HARD_STATE_KEY);
    if (v === undefined) throw new Error('no hard state');
    const damaged = Uint8Array.from(v);
    damaged[10] = (damaged[10] ?? 0) ^ 0x04;
    await db.put(HARD_STATE_KEY, damaged);
  });
  const s = await LevelLogStore.open({ dataDir: dir });
  t.teardown(() => s.close());
  await t.rejects(s.load(z), { name: 'CorruptLogError', message: /hard state .* fails its checksum/ });
});

t.test('damage inside LevelDB table files is found and refused, never served', async (t) => {
  // Large, incompressible entries and a reopen push everything into a .ldb table file. Every
  // entry is committed, so any damage must stop the node.
  for (const where of ['data block', 'index block', 'footer'] as const) {
    await t.test(where, async (t) => {
      const { dir, remove } = await tempDir('log-sst');
      t.teardown(remove);
      const s = await LevelLogStore.open({ dataDir: dir });
      const all: Entry[] = [];
      for (let i = 1; i <= 30; i++) all.push({ index: i as LogIndex, term: 1 as Term, data: Uint8Array.from(randomBytes(1000)) });
      await s.append({ entries: all, hardState: hardState(1, 30), sync: true });
      await s.close();
      await (await LevelLogStore.open({ dataDir: dir })).close(); // recovery writes the log into a table
      const dbDir = path.join(dir, RAFT_LOG_DIR);
      const tables = (await readdir(dbDir)).filter((n) => n.endsWith('.ldb'));
      t.equal(tables.length, 1, `one table file: ${tables.join(', ')}`);
      const table = path.join(dbDir, tables[0] ?? '');
      const size = (await stat(table)).size;
      t.ok(size > 30_000, `the table holds the data uncompressed (${size} bytes)`);
      await flipByte(table, where === 'data block' ? 5000 : where === 'index block' ? size - 100 : size - 3);
      let outcome: string;
      try {
        const { loaded } = await loadFresh(t, dir);
        assertIntactPrefix(t, loaded.entries, all, 'after table damage');
        outcome = `loaded ${loaded.entries.length} intact entries`;
      } catch (e) {
        t.ok(e instanceof CorruptLogError, `refused with CorruptLogError: ${(e as Error).message}`);
        outcome = 'refused';
      }
      t.equal(outcome, 'refused', 'the store refuses to start');
    });
  }
});
