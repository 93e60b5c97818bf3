/**
 * Reading a segment whose zero tail spans several read pieces (wal-scan.ts `readSegment`: 4 MiB
 * reads, 64 KiB pieces compared with zeros and not kept). What the scan finds must be exactly
 * what reading the whole file finds: the damage tests of wal-log-store-corruption.test.ts use
 * 64 KiB segments (one piece), so these plant the same kinds of damage deep in a segment of a
 * little over 8 MiB (three reads, the last one short, and a short last piece).
 */
import { open as openFile, readFile } from 'node:fs/promises';
import t, { type Test } from 'tap';
import type { LogIndex, Term } from '../base/index.js';
import type { Entry } from '../raft/index.js';
import { describeEntries, describeLoaded, entry, hardState } from '../replica/testing/index.js';
import { tempDir, walRecords, walSegments } from './testing/index.js';
import { encodeBatch, recordBytes, writeRecord } from './wal-format.js';
import { WalLogStore } from './wal-log-store.js';

const z = 0 as LogIndex;
const SEGMENT = 8 * 1024 * 1024 + 12 * 1024;

async function written(t: Test, last: number, commit: number): Promise<{ dir: string; file: string; all: Entry[] }> {
  const { dir, remove } = await tempDir('wal-scan');
  t.teardown(remove);
  const s = await WalLogStore.open({ dataDir: dir, segmentBytes: SEGMENT, firstSegmentBytes: SEGMENT });
  const all: Entry[] = [];
  for (let i = 1; i <= last; i++) {
    const e = entry(i, 1, `${i}:`.padEnd(60, 'x'));
    all.push(e);
    await s.append({ entries: [e], hardState: hardState(1, Math.min(i, commit)), sync: true });
  }
  await s.close();
  const [file] = await walSegments(dir);
  return { dir, file: file ?? '', all };
}

async function openLoad(dir: string): Promise<{ loaded: ReturnType<typeof describeLoaded>; stats: ReturnType<WalLogStore['stats']> }> {
  const s = await WalLogStore.open({ dataDir: dir, segmentBytes: SEGMENT });
  try {
    return { loaded: describeLoaded(await s.load(z)), stats: s.stats() };
  } finally {
    await s.close();
  }
}

async function writeAt(file: string, offset: number, bytes: Uint8Array): Promise<void> {
  const h = await openFile(file, 'r+');
  try {
    await h.write(bytes, 0, bytes.length, offset);
  } finally {
    await h.close();
  }
}

/** A batch record that verifies at `offset` of segment 0 (its checksum is seeded with its position). */
function recordFor(offset: number, commit: number): Uint8Array {
  const body = encodeBatch({ hardState: hardState(1, commit), entries: [] });
  const rec = new Uint8Array(recordBytes(body.length));
  writeRecord(rec, 0, body, 0, offset);
  return rec;
}

t.test('a 64 MiB-class segment is read once at start-up, in full, and only the part before its zero tail is kept', async (t) => {
  const { dir, all } = await written(t, 10, 5);
  const { loaded, stats } = await openLoad(dir);
  t.same(loaded, { hardState: hardState(1, 5), entries: describeEntries(all), truncatedTail: 0 });
  t.match(stats, { segmentsRead: 1, bytesRead: SEGMENT }, 'one read of the one segment, every byte of it');
});

for (const at of [64 * 1024, 5 * 1024 * 1024 + 8, SEGMENT - 64]) {
  t.test(`an intact record at offset ${at}, deep in the zero tail: zeros inside the log, cut there, the record zeroed too`, async (t) => {
    const { dir, file, all } = await written(t, 10, 5);
    const rec = recordFor(at, 5);
    await writeAt(file, at, rec);
    const first = await openLoad(dir);
    t.same(first.loaded, { hardState: hardState(1, 5), entries: describeEntries(all), truncatedTail: 0 }, 'nothing lost: the record behind the zeros held no entries and no newer commit');
    const after = await readFile(file);
    t.ok(
      after.subarray(at, at + rec.length).every((b) => b === 0),
      'the cut zeroed through the planted record (the scan saw where the non-zero bytes end, beyond what it kept)',
    );
    t.same((await openLoad(dir)).loaded, first.loaded, 'and it loads the same again');
  });
}

t.test('an intact record behind the zeros with a newer commit index: refused, as with a small segment', async (t) => {
  const { dir, file } = await written(t, 10, 5);
  await writeAt(file, 6 * 1024 * 1024, recordFor(6 * 1024 * 1024, 9));
  const s = await WalLogStore.open({ dataDir: dir, segmentBytes: SEGMENT });
  t.teardown(() => s.close());
  await t.rejects(s.load(z), { name: 'CorruptLogError', message: /zeros inside the log, with intact records after them\).*commit index reached 9/ });
});

t.test('stray non-zero bytes deep in the tail that are no record: ignored, as a full read would', async (t) => {
  const { dir, file, all } = await written(t, 10, 5);
  await writeAt(file, 7 * 1024 * 1024 + 4, Uint8Array.of(0, 0, 0, 40, 1, 2, 3, 4, 2, 9));
  const { loaded } = await openLoad(dir);
  t.same(loaded, { hardState: hardState(1, 5), entries: describeEntries(all), truncatedTail: 0 });
});

t.test('a last record whose data ends in more than a piece of zeros loads whole; torn inside those zeros, it is cut', async (t) => {
  const { dir, remove } = await tempDir('wal-scan');
  t.teardown(remove);
  const s = await WalLogStore.open({ dataDir: dir, segmentBytes: SEGMENT, firstSegmentBytes: SEGMENT });
  const first = entry(1, 1, 'one');
  // 300 KiB of zeros: the record's end lies in pieces the reader finds all zero and drops.
  const zeros: Entry = { index: 2 as LogIndex, term: 1 as Term, data: new Uint8Array(300 * 1024) };
  await s.append({ entries: [first], hardState: hardState(1, 1), sync: true });
  await s.append({ entries: [zeros], hardState: hardState(1, 1), sync: true });
  await s.close();
  t.same((await openLoad(dir)).loaded, { hardState: hardState(1, 1), entries: describeEntries([first, zeros]), truncatedTail: 0 }, 'the zeros inside the record are read as data');
  // A torn write of the same record: its checksum field is lost... as a bit flip in its zeros.
  const rec = (await walRecords(dir)).find((r) => r.firstIndex === 2);
  t.ok(rec !== undefined);
  const [file] = await walSegments(dir);
  await writeAt(file ?? '', (rec?.offset ?? 0) + 200 * 1024, Uint8Array.of(1));
  t.same((await openLoad(dir)).loaded, { hardState: hardState(1, 1), entries: describeEntries([first]), truncatedTail: 1 }, 'damaged above the commit index: cut');
});

t.test('a length field claiming more than the segment holds: damage, cut above the commit index', async (t) => {
  const { dir, all } = await written(t, 10, 5);
  const last = (await walRecords(dir)).at(-1);
  const [file] = await walSegments(dir);
  // Where the next record would go: a length reaching past the end of the file.
  const end = (last?.offset ?? 0) + recordBytes((last?.length ?? 8) - 8);
  await writeAt(file ?? '', end, Uint8Array.of(0x7f, 0xff, 0xff, 0xf0));
  const { loaded } = await openLoad(dir);
  t.same(loaded, { hardState: hardState(1, 5), entries: describeEntries(all), truncatedTail: 1 });
});
