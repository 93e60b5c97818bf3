import { existsSync } from 'node:fs';
import { readdir, stat } from 'node:fs/promises';
import path from 'node:path';
import t, { type Test } from 'tap';
import type { LogIndex, NodeId, Term } from '../base/index.js';
import type { Entry } from '../raft/index.js';
import { describeEntries, describeLoaded, entries, entry, hardState, logStoreContract } from '../replica/testing/index.js';
import { tempDir, walRecords, walSegments } from './testing/index.js';
import { WAL_DIR } from './wal-format.js';
import { WalLogStore, type WalLogStoreOptions } from './wal-log-store.js';

// Small segments with large model entries: the model-based run rolls over, compacts and
// restarts across segments; the larger segments keep most of the log in one.
for (const { segmentBytes, modelEntryBytes, propertyRuns } of [
  { segmentBytes: 8192, modelEntryBytes: 2000, propertyRuns: 60 },
  { segmentBytes: 256 * 1024, modelEntryBytes: 0, propertyRuns: 25 },
]) {
  t.test(`WalLogStore (${segmentBytes}-byte segments) meets the LogStore contract`, async (t) => {
    logStoreContract(
      t,
      async () => {
        const { dir, remove } = await tempDir('wal-contract');
        return { open: () => WalLogStore.open({ dataDir: dir, segmentBytes }), dispose: remove };
      },
      { propertyRuns, modelEntryBytes },
    );
  });
}

const z = 0 as LogIndex;

async function waitUntil(cond: () => boolean, ms: number, what: string): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** An entry of about `bytes` bytes, its text naming its index and term. */
const big = (index: number, term: number, bytes = 400): Entry => entry(index, term, `${index}/${term}:`.padEnd(bytes, 'q'));

async function fresh(t: Test, segmentBytes: number, options: Partial<WalLogStoreOptions> = {}): Promise<{ dir: string; open: () => Promise<WalLogStore> }> {
  const { dir, remove } = await tempDir('wal');
  t.teardown(remove);
  return { dir, open: () => WalLogStore.open({ dataDir: dir, segmentBytes, ...options }) };
}

async function reloaded(open: () => Promise<WalLogStore>, afterIndex = z): Promise<ReturnType<typeof describeLoaded>> {
  const s = await open();
  try {
    return describeLoaded(await s.load(afterIndex));
  } finally {
    await s.close();
  }
}

t.test('group commit: one record per append, one write and one fdatasync per round', async (t) => {
  const { open } = await fresh(t, 1024 * 1024);
  const s = await open();
  t.teardown(() => s.close());
  await s.append({ entries: entries(1, 500, 1), hardState: hardState(1, 0), sync: true });
  t.match(s.stats(), { records: 1, writes: 1, syncs: 1 }, '500 entries and the hard state: one record, one write, one fsync');
  await s.append({ entries: entries(501, 510, 1), hardState: undefined, sync: false });
  t.match(s.stats(), { records: 2, writes: 2, syncs: 1 }, 'an unsynced append is written, not fsynced');
  await s.append({ entries: [], hardState: undefined, sync: true });
  t.match(s.stats(), { records: 2, writes: 2, syncs: 2 }, 'an empty synced append after an unsynced one still fsyncs');
  await s.append({ entries: [], hardState: undefined, sync: true });
  t.match(s.stats(), { records: 2, writes: 2, syncs: 2 }, 'nothing to write and nothing unsynced: nothing done');
  t.equal(s.lastIndex, 510);
});

t.test('concurrent appends share writes and fsyncs, resolve in call order, each only after an fsync that covers it', async (t) => {
  // When each fdatasync started (onSync is called as it returns, with its duration).
  const syncs: number[] = [];
  const { open } = await fresh(t, 1024 * 1024, { onSync: (seconds) => syncs.push(performance.now() - seconds * 1000) });
  const s = await open();
  t.teardown(() => s.close());
  const n = 200;
  const resolved: number[] = [];
  const covered: boolean[] = [];
  const calls: Promise<void>[] = [];
  for (let i = 1; i <= n; i++) {
    // Every few appends a turn of the event loop, so that later ones arrive while a round's
    // write or fdatasync is in flight (they must wait for the next round's).
    if (i % 8 === 0) await new Promise<void>((resolve) => setImmediate(resolve));
    const calledAt = performance.now();
    calls.push(
      s.append({ entries: [big(i, 1)], hardState: hardState(1, Math.max(0, i - 3)), sync: true }).then(() => {
        resolved.push(i);
        // An fsync that started after this append was made (not one already in flight then)
        // and finished before it resolved.
        covered.push(syncs.some((started) => started >= calledAt));
      }),
    );
  }
  // A replacement arriving in the same rush: entries from 150 on are replaced by term 2.
  calls.push(s.append({ entries: [big(150, 2), big(151, 2)], hardState: hardState(2, 100), sync: true }));
  await Promise.all(calls);
  t.same(resolved, Array.from({ length: n }, (_, k) => k + 1), 'resolved in call order');
  t.ok(covered.every((c) => c), 'every append resolved only after an fsync that started after it');
  const st = s.stats();
  t.equal(st.records, n + 1, 'one record per append');
  t.ok(st.writes < n / 2 && st.syncs < n / 2, `coalesced: ${st.writes} writes and ${st.syncs} fsyncs for ${n + 1} appends`);
  t.equal(syncs.length, st.syncs, 'onSync reports every fdatasync');
  const want = { hardState: hardState(2, 100), entries: describeEntries([...Array.from({ length: 149 }, (_, k) => big(k + 1, 1)), big(150, 2), big(151, 2)]), truncatedTail: 0 };
  t.same(describeLoaded(await s.load(z)), want, 'the log is every append applied in call order');
  await s.close();
  t.same(await reloaded(open), want, 'and so after a restart');
});

t.test('segments: preallocated to full size, the next one prepared before it is needed, rolled over under load', async (t) => {
  const segmentBytes = 16 * 1024;
  const { dir, open } = await fresh(t, segmentBytes);
  const s = await open();
  const walDir = path.join(dir, WAL_DIR);
  const sizes = async (): Promise<number[]> => Promise.all((await walSegments(dir)).map(async (f) => (await stat(f)).size));
  t.same(await sizes(), [segmentBytes], 'the first segment is full size from the start');
  const [first] = await walSegments(dir);
  const allocated = (await stat(first ?? '')).blocks * 512;
  t.ok(allocated >= segmentBytes, `and written out, not sparse (${allocated} bytes allocated)`);
  // Past half of the first segment: the next one is prepared in the background.
  let index = 1;
  while (s.stats().segmentsCreated === 0) {
    await s.append({ entries: [big(index, 1)], hardState: hardState(1, index), sync: true });
    index++;
  }
  await waitUntil(() => existsSync(path.join(walDir, '0000000000000001.tmp')), 10_000, 'the next segment to be prepared');
  t.same(await sizes(), [segmentBytes], 'appending never grows the segment file');
  // Under load: 400 concurrent appends of ~400 B (about 10 segments' worth).
  const calls: Promise<void>[] = [];
  for (let k = 0; k < 400; k++, index++) calls.push(s.append({ entries: [big(index, 1)], hardState: hardState(1, index), sync: true }));
  await Promise.all(calls);
  const last = index - 1;
  const files = await sizes();
  t.ok(files.length >= 10, `${files.length} segments`);
  t.ok(
    files.every((f) => f === segmentBytes),
    'every segment has its preallocated size',
  );
  const want = { hardState: hardState(1, last), entries: describeEntries(Array.from({ length: last }, (_, k) => big(k + 1, 1))), truncatedTail: 0 };
  t.same(describeLoaded(await s.load(z)), want, 'every entry, in order, across the segments');
  await s.close();
  t.same(await reloaded(open), want, 'and after a restart');
  // Every segment after the first starts with its header and a state record: the hard state
  // (and compaction index), so it stands alone once the segments before it are deleted.
  const records = await walRecords(dir);
  const starts = (await walSegments(dir)).slice(1).map((file) => records.filter((r) => r.file === file).slice(0, 2));
  t.ok(
    starts.every(([header, state]) => header?.type === 'segment' && state?.type === 'batch' && state.count === 0 && state.hasHardState),
    'every later segment opens with a header and a state record',
  );
  const names = (await readdir(walDir)).filter((n) => n.endsWith('.wal'));
  t.match(names[1], /^0000000000000001-00000000000000[0-9a-f]{2}\.wal$/, `segments are named <seq>-<first index>: ${names.slice(0, 3).join(' ')}`);
});

t.test("a segment change fsyncs the old segment's unsynced writes first (an fsync of the next one would not cover them)", async (t) => {
  const { open } = await fresh(t, 8192);
  const s = await open();
  t.teardown(() => s.close());
  let index = 1;
  while (s.stats().segments === 1) {
    await s.append({ entries: [big(index, 1)], hardState: undefined, sync: false });
    index++;
  }
  t.equal(s.stats().syncs, 1, 'nothing asked for an fsync, yet the full segment was fsynced before the next one was used');
});

t.test('a batch larger than a segment gets a segment of its own size', async (t) => {
  const { open } = await fresh(t, 8192);
  const s = await open();
  await s.append({ entries: entries(1, 3, 1), hardState: hardState(1, 1), sync: true });
  const huge = { index: 4 as LogIndex, term: 1 as Term, data: new Uint8Array(50_000).fill(9) };
  await s.append({ entries: [huge, big(5, 1)], hardState: hardState(1, 4), sync: true });
  await s.append({ entries: [big(6, 1)], hardState: hardState(1, 5), sync: true });
  await s.close();
  const loaded = await reloaded(open);
  t.same(loaded.entries, describeEntries([...entries(1, 3, 1), huge, big(5, 1), big(6, 1)]));
});

t.test('compaction deletes whole segments below the index, never the active one; the hard state survives them', async (t) => {
  const { dir, open } = await fresh(t, 8192);
  const s = await open();
  // The hard state is written once, in the first segment; later appends carry none.
  await s.append({ entries: [big(1, 3)], hardState: hardState(3, 1, 'n2' as NodeId), sync: true });
  for (let i = 2; i <= 100; i++) await s.append({ entries: [big(i, 3)], hardState: undefined, sync: true });
  const before = await walSegments(dir);
  t.ok(before.length >= 6, `${before.length} segments`);
  await s.compact(60 as LogIndex);
  const after = await walSegments(dir);
  t.ok(after.length < before.length && after.length >= 2, `compacting through 60 deleted ${before.length - after.length} of ${before.length} segments`);
  t.same(after, before.slice(before.length - after.length), 'the oldest ones');
  const firstKept = Number.parseInt(path.basename(after[0] ?? '').slice(17, 33), 16);
  t.ok(firstKept <= 61, `the first kept segment began at index ${firstKept}, so it holds entry 61 or earlier ones`);
  const want = { hardState: hardState(3, 1, 'n2' as NodeId), entries: describeEntries(Array.from({ length: 40 }, (_, k) => big(61 + k, 3))), truncatedTail: 0 };
  t.same(describeLoaded(await s.load(60 as LogIndex)), want, 'entries after 60, and the hard state from the deleted first segment');
  await s.compact(100 as LogIndex);
  t.equal((await walSegments(dir)).length, 1, 'compacting everything leaves the active segment');
  await s.append({ entries: [big(101, 3)], hardState: hardState(3, 101, 'n2' as NodeId), sync: true });
  await s.close();
  t.same(await reloaded(open, 100 as LogIndex), { hardState: hardState(3, 101, 'n2' as NodeId), entries: describeEntries([big(101, 3)]), truncatedTail: 0 }, 'after a restart');
  const s2 = await open();
  t.teardown(() => s2.close());
  await t.rejects(s2.load(z), { name: 'CorruptLogError', message: /log entry 1 is missing \(the next stored entry is 101\) at or below the commit index 101/ }, 'reading from 0: entries 1..100 are gone');
});

t.test('replacing entries from an index in an earlier segment (Raft §5.3), then compaction and restarts', async (t) => {
  const { dir, open } = await fresh(t, 8192);
  const s = await open();
  for (let i = 1; i <= 60; i++) await s.append({ entries: [big(i, 1)], hardState: hardState(1, Math.min(i, 10)), sync: true });
  const segments = await walSegments(dir);
  t.ok(segments.length >= 4, `${segments.length} segments`);
  // Index 15 is in an early segment; the log continues from there in term 2.
  const second = Number.parseInt(path.basename(segments[1] ?? '').slice(17, 33), 16);
  t.ok(second > 15, `entry 15 is before the second segment (which began at ${second})`);
  await s.append({ entries: [big(15, 2), big(16, 2)], hardState: hardState(2, 12), sync: true });
  const want = { hardState: hardState(2, 12), entries: describeEntries([...Array.from({ length: 14 }, (_, k) => big(k + 1, 1)), big(15, 2), big(16, 2)]), truncatedTail: 0 };
  t.same(describeLoaded(await s.load(z)), want, 'entries 17..60 are gone, 15..16 are term 2');
  await s.close();
  t.same(await reloaded(open), want, 'after a restart');
  const s2 = await open();
  await s2.load(z);
  for (let i = 17; i <= 40; i++) await s2.append({ entries: [big(i, 2)], hardState: hardState(2, i), sync: true });
  // Every old segment began at an index above 12: compacting through 12 deletes only the first.
  await s2.compact(12 as LogIndex);
  const left = await walSegments(dir);
  t.ok(left.length >= segments.length - 1, `at most the first segment went (${segments.length} -> ${left.length})`);
  const want2 = { hardState: hardState(2, 40), entries: describeEntries([...Array.from({ length: 2 }, (_, k) => big(k + 13, 1)), ...Array.from({ length: 26 }, (_, k) => big(k + 15, 2))]), truncatedTail: 0 };
  t.same(describeLoaded(await s2.load(12 as LogIndex)), want2, 'entries 13..14 of term 1 and 15..40 of term 2');
  await s2.close();
  t.same(await reloaded(open, 12 as LogIndex), want2, 'after a restart');
});

t.test('a snapshot install drops the log across segments', async (t) => {
  const { open } = await fresh(t, 8192);
  const s = await open();
  for (let i = 1; i <= 40; i++) await s.append({ entries: [big(i, 1)], hardState: hardState(1, 5), sync: true });
  await s.append({ entries: [big(101, 2)], hardState: hardState(2, 100), sync: true, installedSnapshot: 100 as LogIndex });
  await s.close();
  t.same(await reloaded(open, 100 as LogIndex), { hardState: hardState(2, 100), entries: describeEntries([big(101, 2)]), truncatedTail: 0 });
});

t.test('two stores cannot open one data dir (the kernel lock), in this process or another', async (t) => {
  const { open } = await fresh(t, 8192);
  const s = await open();
  await t.rejects(open(), { name: 'StorageError', message: /holds the lock .* two agents cannot share a data dir/ });
  await s.close();
  const again = await open();
  await again.close();
});

t.test('a closed store refuses work with a clear error', async (t) => {
  const { open } = await fresh(t, 8192);
  const s = await open();
  await s.close();
  await s.close(); // idempotent
  await t.rejects(s.append({ entries: entries(1, 1, 1), hardState: undefined, sync: true }), { name: 'StorageError', message: /append .* failed: the raft log store is closed/ });
});

t.test('start-up reads the log once: open reads no segment, the first load reads each one once', async (t) => {
  const segmentBytes = 16 * 1024;
  const { dir, open } = await fresh(t, segmentBytes);
  const s = await open();
  for (let i = 1; i <= 120; i++) await s.append({ entries: [big(i, 1)], hardState: hardState(1, i), sync: true });
  await s.close();
  const files = await walSegments(dir);
  const total = (await Promise.all(files.map(async (f) => (await stat(f)).size))).reduce((a, b) => a + b, 0);
  t.ok(files.length >= 3, `${files.length} segments`);
  const s2 = await open();
  t.teardown(() => s2.close());
  t.match(s2.stats(), { segmentsRead: 0, bytesRead: 0 }, 'open reads only names and segment headers');
  const loaded = await s2.load(100 as LogIndex);
  t.same(loaded.entries.map((e) => e.index), [...Array(20).keys()].map((k) => 101 + k));
  t.match(s2.stats(), { segmentsRead: files.length, bytesRead: total }, `load read each of the ${files.length} segments once (${total} bytes)`);
  await s2.append({ entries: [big(121, 1)], hardState: hardState(1, 121), sync: true });
  t.match(s2.stats(), { segmentsRead: files.length }, 'and writing after it reads nothing');
  t.equal(s2.lastIndex, 121);
});

t.test('a write before any load reads the log once to find where it ends, then load reads it again', async (t) => {
  const { open } = await fresh(t, 16 * 1024);
  const s = await open();
  for (let i = 1; i <= 5; i++) await s.append({ entries: [big(i, 1)], hardState: hardState(1, i), sync: true });
  await s.close();
  const s2 = await open();
  t.teardown(() => s2.close());
  await s2.append({ entries: [big(6, 1)], hardState: hardState(1, 6), sync: true });
  t.match(s2.stats(), { segmentsRead: 1 });
  t.equal(s2.lastIndex, 6, 'appended after the end found by that read');
  t.same((await s2.load(z)).entries.map((e) => e.index), [1, 2, 3, 4, 5, 6]);
  t.match(s2.stats(), { segmentsRead: 2 });
});

t.test('the first segment of a new log is at most firstSegmentBytes (default 1 MiB), written out; later ones are full size', async (t) => {
  const { dir: dflt, remove } = await tempDir('wal-first');
  t.teardown(remove);
  const d = await WalLogStore.open({ dataDir: dflt });
  await d.close();
  const [only] = await walSegments(dflt);
  const st = await stat(only ?? '');
  t.same([st.size, st.blocks * 512 >= st.size], [1024 * 1024, true], 'with the default 64 MiB segments the first one is 1 MiB, not sparse');
  const segmentBytes = 64 * 1024;
  const { dir, open } = await fresh(t, segmentBytes, { firstSegmentBytes: 8192 });
  const s = await open();
  t.teardown(() => s.close());
  for (let i = 1; i <= 60; i++) await s.append({ entries: [big(i, 1)], hardState: hardState(1, i), sync: true });
  const sizes = await Promise.all((await walSegments(dir)).map(async (f) => (await stat(f)).size));
  t.same(sizes, [8192, segmentBytes], 'a small first segment, then full-size ones');
  await s.close();
  t.same((await reloaded(open)).entries.length, 60);
  await t.rejects(WalLogStore.open({ dataDir: dir, segmentBytes, firstSegmentBytes: 2 * segmentBytes }), RangeError);
});
