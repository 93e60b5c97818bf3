import { randomBytes } from 'node:crypto';
import { readdir, readFile, rename, stat, truncate, writeFile, appendFile } from 'node:fs/promises';
import path from 'node:path';
import t, { type Test } from 'tap';
import type { LogIndex, Term } from '../base/index.js';
import { describeSnapshot, snapshot, snapshotStoreContract } from '../replica/testing/index.js';
import { FileSnapshotStore, SNAPSHOTS_DIR } from './file-snapshot-store.js';
import { SNAPSHOT_FIXED_HEADER_BYTES, snapshotFileName } from './snapshot-format.js';
import { flipByte, tempDir } from './testing/fs-faults.js';

async function fresh(t: Test): Promise<{ dataDir: string; dir: string; store: FileSnapshotStore }> {
  const { dir: dataDir, remove } = await tempDir('snap');
  t.teardown(remove);
  const store = await FileSnapshotStore.open({ dataDir });
  t.teardown(() => store.close());
  return { dataDir, dir: path.join(dataDir, SNAPSHOTS_DIR), store };
}

t.test('FileSnapshotStore meets the SnapshotStore contract', async (t) => {
  snapshotStoreContract(t, async () => {
    const { dir, remove } = await tempDir('snap-contract');
    return { open: () => FileSnapshotStore.open({ dataDir: dir }), dispose: remove };
  });
});

t.test('file names and header: snap-<20-digit index>-<term>.snap starting with CAIRNSNP', async (t) => {
  const { dir, store } = await fresh(t);
  await store.save(snapshot(1234, 7, 'body'));
  t.same(await readdir(dir), ['snap-00000000000000001234-7.snap']);
  const bytes = await readFile(path.join(dir, 'snap-00000000000000001234-7.snap'));
  t.equal(bytes.subarray(0, 8).toString('latin1'), 'CAIRNSNP');
  t.equal(bytes.readUInt32BE(8), 1, 'format version');
  const headerLength = bytes.readUInt32BE(12);
  t.equal(bytes.readUInt32BE(16) * 2 ** 32 + bytes.readUInt32BE(20), 4, 'body length');
  t.equal(bytes.length, headerLength + 4);
  t.equal(bytes.subarray(headerLength).toString(), 'body', 'the body follows the header');
});

t.test('keeps the newest two snapshots', async (t) => {
  const { dir, store } = await fresh(t);
  for (const i of [10, 20, 30, 40]) await store.save(snapshot(i, 1));
  t.same((await readdir(dir)).sort(), [snapshotFileName(30, 1), snapshotFileName(40, 1)]);
  t.same(await store.list(), [snapshotFileName(40, 1), snapshotFileName(30, 1)], 'newest first');
});

t.test('a byte flipped in the newest body: falls back to the older one and reports the corrupt one', async (t) => {
  const { dir, store } = await fresh(t);
  await store.save(snapshot(10, 1, 'older'));
  await store.save(snapshot(20, 2, randomBytes(50_000)));
  const newest = path.join(dir, snapshotFileName(20, 2));
  await flipByte(newest, (await stat(newest)).size - 1000, 0x10);
  const loaded = await store.loadNewest();
  t.same(describeSnapshot(loaded.snapshot), describeSnapshot(snapshot(10, 1, 'older')));
  t.same(loaded.skippedCorrupt, [newest]);
  t.same((await readdir(dir)).sort(), [snapshotFileName(10, 1), `${snapshotFileName(20, 2)}.corrupt`], 'quarantined as .corrupt');
  const again = await store.loadNewest();
  t.same(again.skippedCorrupt, [], 'a quarantined file is not read again');
  await store.save(snapshot(30, 2));
  t.same((await readdir(dir)).sort(), [snapshotFileName(10, 1), snapshotFileName(30, 2)], 'the next save deletes the quarantined file');
});

t.test('a truncated newest snapshot: falls back', async (t) => {
  for (const cut of [1, 5000, 'into the header'] as const) {
    await t.test(`cut ${cut}`, async (t) => {
      const { dir, store } = await fresh(t);
      await store.save(snapshot(10, 1, 'older'));
      await store.save(snapshot(20, 2, randomBytes(20_000)));
      const newest = path.join(dir, snapshotFileName(20, 2));
      const size = (await stat(newest)).size;
      await truncate(newest, cut === 'into the header' ? SNAPSHOT_FIXED_HEADER_BYTES + 3 : size - cut);
      const loaded = await store.loadNewest();
      t.equal(loaded.snapshot?.meta.index, 10);
      t.same(loaded.skippedCorrupt, [newest]);
    });
  }
});

t.test('damage in the header (metadata, lengths, magic) and trailing bytes are caught', async (t) => {
  const cases: [string, (file: string) => Promise<void>][] = [
    ['metadata byte', (f) => flipByte(f, SNAPSHOT_FIXED_HEADER_BYTES + 2, 0x01)],
    ['body length', (f) => flipByte(f, 23, 0x01)],
    ['magic', (f) => flipByte(f, 0, 0x20)],
    ['trailing bytes', (f) => appendFile(f, 'extra')],
    ['empty file', (f) => truncate(f, 0)],
  ];
  for (const [what, damage] of cases) {
    await t.test(what, async (t) => {
      const { dir, store } = await fresh(t);
      await store.save(snapshot(10, 1));
      await store.save(snapshot(20, 1));
      const newest = path.join(dir, snapshotFileName(20, 1));
      await damage(newest);
      const loaded = await store.loadNewest();
      t.equal(loaded.snapshot?.meta.index, 10);
      t.same(loaded.skippedCorrupt, [newest]);
    });
  }
});

t.test('a file whose name disagrees with its metadata is not trusted', async (t) => {
  const { dir, store } = await fresh(t);
  await store.save(snapshot(10, 1));
  await rename(path.join(dir, snapshotFileName(10, 1)), path.join(dir, snapshotFileName(99, 1)));
  const loaded = await store.loadNewest();
  t.equal(loaded.snapshot, undefined);
  t.same(loaded.skippedCorrupt, [path.join(dir, snapshotFileName(99, 1))]);
});

t.test('both snapshots corrupt: no snapshot, both reported', async (t) => {
  const { dir, store } = await fresh(t);
  await store.save(snapshot(10, 1, randomBytes(3000)));
  await store.save(snapshot(20, 1, randomBytes(3000)));
  for (const name of [snapshotFileName(10, 1), snapshotFileName(20, 1)]) await flipByte(path.join(dir, name), 2000);
  t.same(await store.loadNewest(), { snapshot: undefined, skippedCorrupt: [path.join(dir, snapshotFileName(20, 1)), path.join(dir, snapshotFileName(10, 1))] });
});

t.test('a leftover temp file (a save cut by a crash) is ignored and deleted', async (t) => {
  const { dataDir, dir, store } = await fresh(t);
  await store.save(snapshot(10, 1));
  await writeFile(path.join(dir, `${snapshotFileName(20, 1)}.tmp`), 'CAIRNSNP half a snapshot');
  const loaded = await store.loadNewest();
  t.equal(loaded.snapshot?.meta.index, 10);
  t.same(loaded.skippedCorrupt, []);
  t.same(await readdir(dir), [snapshotFileName(10, 1)]);
  await writeFile(path.join(dir, `${snapshotFileName(30, 1)}.tmp`), 'x');
  const reopened = await FileSnapshotStore.open({ dataDir });
  t.same(await readdir(dir), [snapshotFileName(10, 1)], 'open cleans up too');
  await reopened.close();
});

t.test('a save that fails midway leaves no temp file and the older snapshot intact', async (t) => {
  const { dir, store } = await fresh(t);
  await store.save(snapshot(10, 1));
  function* chunks(): Generator<Uint8Array> {
    yield new Uint8Array(1000);
    throw new Error('the state machine failed while serializing');
  }
  const meta = snapshot(20, 1).meta;
  await t.rejects(store.saveChunks(meta, chunks()), { name: 'StorageError', message: /save snapshot 20 .* failed: the state machine failed while serializing/ });
  t.same(await readdir(dir), [snapshotFileName(10, 1)]);
  t.equal((await store.loadNewest()).snapshot?.meta.index, 10);
});

t.test('saveChunks streams pieces (sync or async) without joining them first', async (t) => {
  const { store } = await fresh(t);
  const parts = [randomBytes(10), randomBytes(0), randomBytes(70_000), randomBytes(5)];
  async function* gen(): AsyncGenerator<Uint8Array> {
    for (const p of parts) yield p;
  }
  const meta = { index: 77 as LogIndex, term: 3 as Term, config: { members: [] } };
  const saved = await store.saveChunks(meta, gen());
  const whole = Buffer.concat(parts);
  t.ok(saved.bytes > whole.length);
  const loaded = await store.loadNewest();
  t.same(loaded.snapshot?.meta, meta);
  t.equal(Buffer.from(loaded.snapshot?.data ?? new Uint8Array()).toString('hex'), whole.toString('hex'));
});

t.test('a large snapshot (64 MiB) round-trips', async (t) => {
  const { store } = await fresh(t);
  const data = new Uint8Array(64 << 20);
  for (let i = 0; i < data.length; i += 4096) data[i] = (i / 4096) & 0xff;
  await store.save(snapshot(1_000_000, 9, data));
  const loaded = await store.loadNewest();
  t.equal(loaded.snapshot?.data.length, data.length);
  t.ok(Buffer.from(loaded.snapshot?.data ?? new Uint8Array()).equals(Buffer.from(data.buffer)));
});

t.test('a snapshot from a newer format version is refused, not skipped', async (t) => {
  const { dir, store } = await fresh(t);
  await store.save(snapshot(10, 1));
  const file = path.join(dir, snapshotFileName(10, 1));
  const bytes = await readFile(file);
  bytes.writeUInt32BE(2, 8);
  await writeFile(file, bytes);
  await t.rejects(store.loadNewest(), { name: 'UnsupportedFormatError', message: /format version 2; this build reads only version 1/ });
});

t.test('options are validated', async (t) => {
  const { dir, remove } = await tempDir('snap-opts');
  t.teardown(remove);
  await t.rejects(FileSnapshotStore.open({ dataDir: dir, retain: 0 }), /option retain must be an integer of at least 1, got 0/);
});
