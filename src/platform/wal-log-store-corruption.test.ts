import { access, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import t, { type Test } from 'tap';
import type { LogIndex } from '../base/index.js';
import type { Entry } from '../raft/index.js';
import { CorruptLogError } from '../replica/index.js';
import { describeEntries, describeLoaded, entry, hardState } from '../replica/testing/index.js';
import { flipByte, logStoreDamageContract, tempDir, walRecordOf, walRecords, walSegments } from './testing/index.js';
import { cutMarkerName, encodeSegmentHeader, recordBytes, segmentName, WAL_DIR, writeRecord } from './wal-format.js';
import { WalLogStore } from './wal-log-store.js';

const z = 0 as LogIndex;
const SEGMENT = 64 * 1024;

logStoreDamageContract(t, {
  open: (dataDir) => WalLogStore.open({ dataDir, segmentBytes: SEGMENT }),
  damageEntry: async (dataDir, index) => {
    const r = await walRecordOf(dataDir, index);
    await flipByte(r.file, r.offset + r.length - 1, 0x01);
  },
});

/** A WAL in a fresh temp dir holding entries 1..last (term 1), each its own synced batch with commit min(i, commit). */
async function written(t: Test, last: number, commit: number, dataBytes = 60): Promise<{ dir: string; all: Entry[] }> {
  const { dir, remove } = await tempDir('wal-damage');
  t.teardown(remove);
  const s = await WalLogStore.open({ dataDir: dir, segmentBytes: SEGMENT });
  const all: Entry[] = [];
  for (let i = 1; i <= last; i++) {
    // Data ending in a non-zero byte, so zeroing any suffix of a record changes it.
    const e = entry(i, 1, `${i}:`.padEnd(dataBytes, 'x'));
    all.push(e);
    await s.append({ entries: [e], hardState: hardState(1, Math.min(i, commit)), sync: true });
  }
  await s.close();
  return { dir, all };
}

async function openLoad(dir: string): Promise<ReturnType<typeof describeLoaded>> {
  const s = await WalLogStore.open({ dataDir: dir, segmentBytes: SEGMENT });
  try {
    return describeLoaded(await s.load(z));
  } finally {
    await s.close();
  }
}

t.test('a torn write at every byte offset of the last record: cut back to the record before it, no error, durably', async (t) => {
  const { dir, all } = await written(t, 10, 5);
  const last = await walRecordOf(dir, 10);
  const pristine = await readFile(last.file);
  const want = { hardState: hardState(1, 5), entries: describeEntries(all.slice(0, 9)) };
  let checked = 0;
  for (let k = 0; k < last.length; k++) {
    // The write reached the disk up to byte k of the record; the rest is still the preallocated zeros.
    const torn = Uint8Array.from(pristine);
    torn.fill(0, last.offset + k, last.offset + last.length);
    await writeFile(last.file, torn);
    const first = await openLoad(dir);
    if (first.truncatedTail > 1 || JSON.stringify({ hardState: first.hardState, entries: first.entries }) !== JSON.stringify(want)) {
      t.fail(`torn at byte ${k} of ${last.length}: loaded ${JSON.stringify(first)}`);
      continue;
    }
    const again = await openLoad(dir);
    if (JSON.stringify(again) !== JSON.stringify({ ...want, truncatedTail: 0 })) t.fail(`torn at byte ${k}: after the cut and a restart ${JSON.stringify(again)}`);
    checked++;
  }
  t.equal(checked, last.length, `all ${last.length} tears load entries 1..9 and the hard state of the record before`);
  // And the log goes on from the cut.
  const s = await WalLogStore.open({ dataDir: dir, segmentBytes: SEGMENT });
  await s.load(z);
  await s.append({ entries: [entry(10, 2)], hardState: hardState(2, 5), sync: true });
  await s.close();
  t.same(await openLoad(dir), { hardState: hardState(2, 5), entries: [...want.entries, ...describeEntries([entry(10, 2)])], truncatedTail: 0 });
});

t.test('a flipped bit anywhere in a committed record refuses to start (intact records behind it carry the commit index)', async (t) => {
  const { dir } = await written(t, 10, 5);
  const victim = await walRecordOf(dir, 3);
  const pristine = await readFile(victim.file);
  let refused = 0;
  for (let k = 0; k < victim.length; k++) {
    const damaged = Uint8Array.from(pristine);
    damaged[victim.offset + k] = (damaged[victim.offset + k] ?? 0) ^ (1 << k % 8);
    await writeFile(victim.file, damaged);
    const s = await WalLogStore.open({ dataDir: dir, segmentBytes: SEGMENT });
    const outcome = await s.load(z).then(
      (l) => `loaded ${l.entries.length} entries, cut ${l.truncatedTail}`,
      (e: unknown) => e,
    );
    await s.close();
    if (outcome instanceof CorruptLogError && /at or below the commit index 5/.test(outcome.message)) refused++;
    else t.fail(`bit ${k % 8} of byte ${k} (of ${victim.length}) flipped: ${String(outcome)}`);
  }
  t.equal(refused, victim.length, `every one of the ${victim.length} flips refused with CorruptLogError`);
  await writeFile(victim.file, pristine);
  t.equal((await openLoad(dir)).entries.length, 10, 'nothing was cut: the repaired file loads whole');
});

t.test('a flipped bit in the record that committed it, with later appends that change no hard state: refused', async (t) => {
  const { dir, remove } = await tempDir('wal-no-hs');
  t.teardown(remove);
  const s = await WalLogStore.open({ dataDir: dir, segmentBytes: SEGMENT });
  await s.append({ entries: [entry(1, 1), entry(2, 1)], hardState: hardState(1, 0), sync: true });
  await s.append({ entries: [entry(3, 1), entry(4, 1)], hardState: hardState(1, 4), sync: true });
  for (let i = 5; i <= 7; i++) await s.append({ entries: [entry(i, 1)], hardState: undefined, sync: true });
  await s.close();
  const victim = await walRecordOf(dir, 3);
  await flipByte(victim.file, victim.offset + victim.length - 1, 0x01);
  const s2 = await WalLogStore.open({ dataDir: dir, segmentBytes: SEGMENT });
  t.teardown(() => s2.close());
  // The commit index 4 was only ever given with entries 3..4; every later record repeats it.
  await t.rejects(s2.load(z), { name: 'CorruptLogError', message: /entries from 3 on cannot be read, at or below the commit index 4/ });
});

t.test('a flipped bit in the last record, above the commit index: cut like a torn write', async (t) => {
  const { dir, all } = await written(t, 10, 5);
  const last = await walRecordOf(dir, 10);
  await flipByte(last.file, last.offset + 20, 0x10);
  const loaded = await openLoad(dir);
  t.same(loaded, { hardState: hardState(1, 5), entries: describeEntries(all.slice(0, 9)), truncatedTail: 1 });
});

t.test('zeros where committed records were (a lost sector), with intact records after them: refused', async (t) => {
  const { dir } = await written(t, 10, 5);
  const victim = await walRecordOf(dir, 2);
  const buf = await readFile(victim.file);
  buf.fill(0, victim.offset, victim.offset + victim.length);
  await writeFile(victim.file, buf);
  const s = await WalLogStore.open({ dataDir: dir, segmentBytes: SEGMENT });
  t.teardown(() => s.close());
  await t.rejects(s.load(z), { name: 'CorruptLogError', message: /zeros inside the log, with intact records after them\): entries from 2 on cannot be read, at or below the commit index 5/ });
});

t.test('damage above the commit index with intact records behind it: cut, keeping their newer hard state (a vote is never forgotten)', async (t) => {
  const { dir, all } = await written(t, 8, 5);
  const s = await WalLogStore.open({ dataDir: dir, segmentBytes: SEGMENT });
  // A vote in a new term, written after entries 7 and 8, in its own record.
  await s.append({ entries: [], hardState: hardState(4, 5, 'n3' as never), sync: true });
  await s.close();
  const victim = await walRecordOf(dir, 7);
  await flipByte(victim.file, victim.offset + victim.length - 1, 0x01);
  const loaded = await openLoad(dir);
  t.same(loaded, { hardState: hardState(4, 5, 'n3' as never), entries: describeEntries(all.slice(0, 6)), truncatedTail: 2 }, 'entries 7 and 8 cut; term 4 and the vote for n3 kept');
  t.same(await openLoad(dir), { ...loaded, truncatedTail: 0 }, 'durably');
});

t.test('a damaged segment header with committed records after it: refused', async (t) => {
  const { dir } = await written(t, 10, 5);
  const [file] = await walSegments(dir);
  await flipByte(file ?? '', 12, 0x01);
  const s = await WalLogStore.open({ dataDir: dir, segmentBytes: SEGMENT });
  t.teardown(() => s.close());
  await t.rejects(s.load(z), { name: 'CorruptLogError', message: /the header of raft log segment .* is damaged \(a record fails its checksum\)/ });
});

t.test('damage found on open: nothing is written until load has cut it (or refused it)', async (t) => {
  const { dir } = await written(t, 10, 5);
  const last = await walRecordOf(dir, 10);
  await flipByte(last.file, last.offset + 20, 0x10);
  const s = await WalLogStore.open({ dataDir: dir, segmentBytes: SEGMENT });
  t.teardown(() => s.close());
  await t.rejects(s.append({ entries: [entry(11, 1)], hardState: undefined, sync: true }), { name: 'StorageError', message: /the raft log is damaged .* load\(\) must cut it back/ });
  await t.rejects(s.compact(2 as LogIndex), { name: 'StorageError' });
  t.equal((await s.load(z)).entries.length, 9);
  await s.append({ entries: [entry(10, 1)], hardState: undefined, sync: true });
  t.equal((await s.load(z)).entries.length, 10);
});

t.test('a segment missing from the middle of the log is refused on open', async (t) => {
  const { dir, remove } = await tempDir('wal-gap');
  t.teardown(remove);
  const s = await WalLogStore.open({ dataDir: dir, segmentBytes: 8192 });
  for (let i = 1; i <= 60; i++) await s.append({ entries: [entry(i, 1, 'y'.repeat(400))], hardState: hardState(1, i), sync: true });
  await s.close();
  const segments = await walSegments(dir);
  t.ok(segments.length >= 3, `${segments.length} segments`);
  await rm(segments[1] ?? '');
  await t.rejects(WalLogStore.open({ dataDir: dir, segmentBytes: 8192 }), { name: 'CorruptLogError', message: /is missing segment 1 / });
});

t.test('a segment with a newer format version is refused', async (t) => {
  const { dir, remove } = await tempDir('wal-version');
  t.teardown(remove);
  await (await WalLogStore.open({ dataDir: dir, segmentBytes: SEGMENT })).close();
  const [file] = await walSegments(dir);
  const buf = await readFile(file ?? '');
  const header = encodeSegmentHeader(0);
  header[4] = 2; // format version 2 (big-endian u32 at body offset 1)
  writeRecord(buf.fill(0, 0, 32), 0, header, 0, 0);
  await writeFile(file ?? '', buf);
  await t.rejects(WalLogStore.open({ dataDir: dir, segmentBytes: SEGMENT }), { name: 'UnsupportedFormatError', message: /format version 2; this build reads only version 1/ });
});

t.test('a stale prepared segment (.tmp) is removed on open', async (t) => {
  const { dir, remove } = await tempDir('wal-tmp');
  t.teardown(remove);
  await (await WalLogStore.open({ dataDir: dir, segmentBytes: SEGMENT })).close();
  const tmp = path.join(dir, WAL_DIR, '0000000000000001.tmp');
  await writeFile(tmp, 'half-written');
  await (await WalLogStore.open({ dataDir: dir, segmentBytes: SEGMENT })).close();
  await t.rejects(access(tmp), { code: 'ENOENT' });
});

t.test('a segment whose header names another sequence number is damage', async (t) => {
  const { dir, remove } = await tempDir('wal-misnamed');
  t.teardown(remove);
  const s = await WalLogStore.open({ dataDir: dir, segmentBytes: SEGMENT });
  await s.append({ entries: [entry(1, 1)], hardState: hardState(1, 1), sync: true });
  await s.close();
  const [file] = await walSegments(dir);
  await rename(file ?? '', path.join(dir, WAL_DIR, segmentName(1, 1)));
  const s2 = await WalLogStore.open({ dataDir: dir, segmentBytes: SEGMENT });
  t.teardown(() => s2.close());
  // Its records are checksummed with their position (segment 1 now): none of them verifies.
  await t.rejects(s2.load(z), { name: 'CorruptLogError', message: /the header of raft log segment .*0000000000000001-0000000000000001\.wal is damaged \(a record fails its checksum\); a segment header is never torn/ });
});

t.test('a damaged record that replaced uncommitted entries, with a commit index behind it that covers them: refused, not served as the old entries', async (t) => {
  // Entries 16..20 of term 1 are above the commit index 15; a term-2 leader replaces 16..18
  // (one record) and then commits 17 (a later record). If the replacing record is unreadable,
  // the entries 16..17 the log still holds are the replaced term-1 ones: cutting behind them
  // and keeping the commit index 17 would apply entries the cluster never committed.
  const { dir, remove } = await tempDir('wal-replaced');
  t.teardown(remove);
  const s = await WalLogStore.open({ dataDir: dir, segmentBytes: SEGMENT });
  for (let i = 1; i <= 20; i++) await s.append({ entries: [entry(i, 1, `${i}:old`)], hardState: hardState(1, Math.min(i, 15)), sync: true });
  await s.append({ entries: [entry(16, 2, '16:new'), entry(17, 2, '17:new'), entry(18, 2, '18:new')], hardState: hardState(2, 15), sync: true });
  await s.append({ entries: [], hardState: hardState(2, 17), sync: true });
  t.same(
    describeEntries((await s.load(z)).entries.slice(14)),
    describeEntries([entry(15, 1, '15:old'), entry(16, 2, '16:new'), entry(17, 2, '17:new'), entry(18, 2, '18:new')]),
    'before the damage: 16..18 are term 2',
  );
  await s.close();
  const victim = await walRecordOf(dir, 16);
  t.equal(victim.count, 3, 'the replacing record');
  await flipByte(victim.file, victim.offset + victim.length - 1, 0x01);
  const s2 = await WalLogStore.open({ dataDir: dir, segmentBytes: SEGMENT });
  t.teardown(() => s2.close());
  const outcome = await s2.load(z).then(
    (l) => `loaded entries up to ${l.entries.length} (16 and 17 of term ${l.entries[15]?.term}/${l.entries[16]?.term}) with commit ${l.hardState.commit}`,
    (e: unknown) => e,
  );
  t.ok(outcome instanceof CorruptLogError, `CorruptLogError, not: ${String(outcome)}`);
  t.match(String(outcome), /the commit index reached 17, above the commit index 15 known before it, and the unreadable record may have replaced entries from 16 on/);
});

t.test('a cut interrupted by a crash is finished on open: the segments behind the damage never replay after the cut', async (t) => {
  // Segment 0: entries 1..12 (term 1), then one record replacing 8..12 with term 2 (the last
  // index stays 12), then 13..45 of term 2 in later segments; commit 5 throughout. The
  // replacing record is damaged: load cuts the log after entry 12 (term 1) and deletes the later
  // segments. Had a crash left the cut segment with the later segments still there, they would
  // replay after it: 8..12 of term 1 followed by 13.. of term 2, a log that never existed.
  const seg = 8192;
  const { dir, remove } = await tempDir('wal-cut-crash');
  t.teardown(remove);
  const walDir = path.join(dir, WAL_DIR);
  const openStore = (): Promise<WalLogStore> => WalLogStore.open({ dataDir: dir, segmentBytes: seg });
  const e = (i: number, term: number, bytes = 400): Entry => entry(i, term, `${i}/${term}:`.padEnd(bytes, 'q'));
  const s = await openStore();
  for (let i = 1; i <= 12; i++) await s.append({ entries: [e(i, 1)], hardState: hardState(1, 5), sync: true });
  // Sized so that it fills segment 0: entry 13 starts segment 1, right after where the cut ends.
  await s.append({ entries: [8, 9, 10, 11, 12].map((i) => e(i, 2, 480)), hardState: hardState(2, 5), sync: true });
  for (let i = 13; i <= 45; i++) await s.append({ entries: [e(i, 2)], hardState: hardState(2, 5), sync: true });
  await s.close();
  const victim = await walRecordOf(dir, 8);
  t.equal(victim.count, 5, 'the replacing record');
  const [first, ...later] = await walSegments(dir);
  t.ok(later.length >= 2 && victim.file === first, `the replacing record is in the first of ${later.length + 1} segments`);
  t.equal((await walRecords(dir)).find((r) => r.file === later[0] && r.count > 0)?.firstIndex, 13, 'and the second segment goes on from entry 13');
  await flipByte(victim.file, victim.offset + victim.length - 1, 0x01);
  const damaged = new Map<string, Uint8Array>();
  for (const f of await walSegments(dir)) damaged.set(f, await readFile(f));

  const want = { hardState: hardState(2, 5), entries: describeEntries(Array.from({ length: 12 }, (_, k) => e(k + 1, 1))), truncatedTail: 0 };
  const cut = await openStore();
  t.same({ ...describeLoaded(await cut.load(z)), truncatedTail: 0 }, want, 'the cut: entries 1..12 of term 1, the newest hard state');
  await cut.close();
  t.same(await walSegments(dir), [first], 'the later segments are gone');
  t.same((await readdir(walDir)).filter((n) => n.endsWith('.cut')), [], 'and the marker');
  const cutSegment = await readFile(first ?? '');
  // The record the cut wrote in place of the damaged one is what the marker holds.
  const length = new DataView(cutSegment.buffer, cutSegment.byteOffset).getUint32(victim.offset);
  const record = cutSegment.slice(victim.offset, victim.offset + recordBytes(length));
  const marker = path.join(walDir, cutMarkerName(0, victim.offset));

  const crashes: { what: string; first: Uint8Array; later: number }[] = [
    { what: 'right after the marker was written', first: damaged.get(first ?? '') ?? new Uint8Array(), later: later.length },
    { what: 'after the damage was zeroed, before the record was written', first: Uint8Array.from(damaged.get(first ?? '') ?? []).fill(0, victim.offset), later: later.length },
    { what: 'after the cut, before any later segment was deleted', first: cutSegment, later: later.length },
    { what: 'after the cut and deleting the newest segment', first: cutSegment, later: later.length - 1 },
  ];
  for (const c of crashes) {
    await writeFile(first ?? '', c.first);
    for (const f of later.slice(0, c.later)) await writeFile(f, damaged.get(f) ?? new Uint8Array());
    await writeFile(marker, record);
    const s2 = await openStore();
    const loaded = describeLoaded(await s2.load(z));
    await s2.close();
    t.same(loaded, want, `crash ${c.what}: loads the cut log`);
    t.same(await walSegments(dir), [first], `crash ${c.what}: the later segments are gone`);
    t.same((await readdir(walDir)).filter((n) => n.endsWith('.cut')), [], `crash ${c.what}: the marker is gone`);
  }
  // And the log goes on from the cut.
  const s3 = await openStore();
  await s3.load(z);
  await s3.append({ entries: [e(13, 3)], hardState: hardState(3, 5), sync: true });
  await s3.close();
  t.same(await reloaded(dir), { hardState: hardState(3, 5), entries: [...want.entries, ...describeEntries([e(13, 3)])], truncatedTail: 0 });
  async function reloaded(d: string): Promise<ReturnType<typeof describeLoaded>> {
    const s4 = await WalLogStore.open({ dataDir: d, segmentBytes: seg });
    try {
      return describeLoaded(await s4.load(z));
    } finally {
      await s4.close();
    }
  }
});

t.test('a cut marker whose segment is missing, or which is damaged, refuses to start', async (t) => {
  const { dir } = await written(t, 10, 5);
  const walDir = path.join(dir, WAL_DIR);
  const state = new Uint8Array(recordBytes(14));
  await writeFile(path.join(walDir, cutMarkerName(3, 64)), state);
  await t.rejects(WalLogStore.open({ dataDir: dir, segmentBytes: SEGMENT }), { name: 'CorruptLogError', message: /was being cut when the node stopped, and the segment it was cutting \(sequence number 3\) is missing/ });
  await rm(path.join(walDir, cutMarkerName(3, 64)));
  await writeFile(path.join(walDir, cutMarkerName(0, 64)), state);
  await t.rejects(WalLogStore.open({ dataDir: dir, segmentBytes: SEGMENT }), { name: 'CorruptLogError', message: /was being cut when the node stopped, and its marker .* is damaged/ });
});

t.test('zeros at the end of a segment that is not the last (a lost sector): the next segment does not begin where the log ends, so it is damage, never replayed onto the wrong log', async (t) => {
  // Segment 0: entries 1..12 (term 1), then a record replacing from 8 with 8..9 of term 2 (the
  // log now ends at 9) that fills the segment; segment 1 goes on from 10 (term 2). The
  // replacing record reads back as zeros, which look like segment 0's normal end. Replaying
  // segment 1 onto what is left would give 8..9 of term 1 followed by 10.. of term 2.
  const seg = 8192;
  const { dir, remove } = await tempDir('wal-lost-tail');
  t.teardown(remove);
  const openStore = (): Promise<WalLogStore> => WalLogStore.open({ dataDir: dir, segmentBytes: seg });
  const e = (i: number, term: number, bytes = 400): Entry => entry(i, term, `${i}/${term}:`.padEnd(bytes, 'q'));
  const s = await openStore();
  for (let i = 1; i <= 12; i++) await s.append({ entries: [e(i, 1)], hardState: hardState(1, 5), sync: true });
  await s.append({ entries: [e(8, 2, 1200), e(9, 2, 1200)], hardState: hardState(2, 5), sync: true });
  for (let i = 10; i <= 20; i++) await s.append({ entries: [e(i, 2)], hardState: hardState(2, 5), sync: true });
  await s.close();
  const victim = await walRecordOf(dir, 8);
  const [first, second] = await walSegments(dir);
  t.equal(victim.file, first, 'the replacing record is in segment 0');
  t.match(path.basename(second ?? ''), /^0000000000000001-000000000000000a\.wal$/, 'segment 1 begins at index 10');
  const buf = await readFile(victim.file);
  buf.fill(0, victim.offset, victim.offset + victim.length);
  await writeFile(victim.file, buf);

  const s2 = await openStore();
  const loaded = describeLoaded(await s2.load(z));
  await s2.close();
  t.same(
    { ...loaded, truncatedTail: 0 },
    { hardState: hardState(2, 5), entries: describeEntries(Array.from({ length: 12 }, (_, k) => e(k + 1, 1))), truncatedTail: 0 },
    'cut at the end of segment 0: entries 1..12 of term 1 (the log as it was before the lost record), the newest hard state',
  );
  t.equal(loaded.truncatedTail, 11, 'entries 10..20 cut');
  t.same(await walSegments(dir), [first], 'segment 1 is gone');
  const s3 = await openStore();
  t.same(describeLoaded(await s3.load(z)), { ...loaded, truncatedTail: 0 }, 'durably');
  await s3.close();
});
