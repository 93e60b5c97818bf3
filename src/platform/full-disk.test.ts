import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readdir, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import t, { type Test } from 'tap';
import type { LogIndex, Term } from '../base/index.js';
import type { Entry } from '../raft/index.js';
import type { LogStore } from '../replica/index.js';
import { describeEntries, hardState, snapshot } from '../replica/testing/index.js';
import { StorageError } from './errors.js';
import { FileSnapshotStore, SNAPSHOTS_DIR } from './file-snapshot-store.js';
import { LevelLogStore } from './level-log-store.js';
import { WalLogStore } from './wal-log-store.js';
import { tempDir } from './testing/fs-faults.js';

const run = promisify(execFile);
const z = 0 as LogIndex;

/**
 * A 1 MiB tmpfs, so the disk really fills (ENOSPC from the kernel, not a mock). Mounting needs
 * root (CAP_SYS_ADMIN): without root the tests are skipped with the reason; as root, a mount
 * that fails is a test failure.
 */
async function probeMount(): Promise<string | undefined> {
  const { dir, remove } = await tempDir('mount-probe');
  try {
    await run('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', dir]);
    await run('umount', [dir]);
    return undefined;
  } catch (e) {
    const uid = typeof process.getuid === 'function' ? process.getuid() : undefined;
    if (uid !== 0) return `the full-disk tests need root to mount a 1 MiB tmpfs (running as uid ${String(uid)}): ${(e as Error).message.trim()}`;
    return undefined; // root: let the test itself fail on the mount, loudly
  } finally {
    await remove();
  }
}
const skip = await probeMount();

async function tinyDisk(t: Test): Promise<string> {
  const { dir, remove } = await tempDir('full-disk');
  try {
    await run('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', dir]);
  } catch (e) {
    await remove();
    throw new Error(`running as root but could not mount a tmpfs on ${dir} for the full-disk test: ${(e as Error).message}`);
  }
  t.teardown(async () => {
    await run('umount', [dir]);
    await remove();
  });
  return dir;
}

/** The log stores under test, each with what its full-disk failure says. */
const STORES = [
  {
    kind: 'level',
    open: (dataDir: string): Promise<LogStore> => LevelLogStore.open({ dataDir }),
    // LevelDB's recovery rewrites the write-ahead log into a table file before it deletes the
    // log, so reopening needs room: the ballast freed later is larger than what the log writes.
    ballastBytes: 600 * 1024,
    message: /^append entries \d+\.\.\d+ and the hard state \(fsync\) in .*raft-log failed: .*No space left on device/,
  },
  {
    kind: 'wal',
    // Preallocated segments: the disk fills when the next segment is made, never in an append's write.
    open: (dataDir: string): Promise<LogStore> => WalLogStore.open({ dataDir, segmentBytes: 64 * 1024 }),
    ballastBytes: 600 * 1024,
    message: /^append entries \d+\.\.\d+ and the hard state \(fsync\) in .*wal failed: prepare raft log segment \d+ in .* failed: ENOSPC: no space left on device/,
  },
] as const;

for (const store of STORES) {
  t.test(`full disk (${store.kind}): appends fail with ENOSPC, nothing is acknowledged after that, and the log is a consistent prefix afterwards`, { skip: skip ?? false }, async (t) => {
    const disk = await tinyDisk(t);
    const dataDir = path.join(disk, 'node');
    // Ballast to free later, standing in for whatever else filled the disk.
    const ballast = path.join(disk, 'ballast');
    await writeFile(ballast, randomBytes(store.ballastBytes));

    let log = await store.open(dataDir);
    const acknowledged: Entry[] = [];
    let failure: unknown;
    let index = 1;
    let batches = 0;
    while (failure === undefined && batches < 10_000) {
      // 1-3 incompressible entries per Ready, always fsynced: each resolved append is a promise.
      const batch: Entry[] = [];
      for (let k = 0; k < 1 + (batches % 3); k++) batch.push({ index: (index + k) as LogIndex, term: 1 as Term, data: Uint8Array.from(randomBytes(3000)) });
      try {
        await log.append({ entries: batch, hardState: hardState(1, Math.max(0, index - 5)), sync: true });
        acknowledged.push(...batch);
        index += batch.length;
      } catch (e) {
        failure = e;
      }
      batches++;
    }
    t.ok(failure instanceof StorageError, `the append failed with a StorageError after ${acknowledged.length} acknowledged entries`);
    const err = failure as StorageError;
    t.ok(err.noSpace, 'noSpace is set');
    t.match(err.message, store.message, err.message);
    if (store.kind === 'wal') {
      t.same((await readdir(path.join(dataDir, 'wal'))).filter((n) => n.endsWith('.tmp')), [], 'a segment that could not be prepared leaves no file behind');
    }

    // After the failure nothing else is acknowledged, not even a write that might now fit.
    await rm(ballast);
    await t.rejects(log.append({ entries: [{ index: index as LogIndex, term: 1 as Term, data: Uint8Array.of(1) }], hardState: undefined, sync: true }), {
      name: 'StorageError',
      message: /stopped after an earlier write failed .* restart the node/,
    });
    await t.rejects(log.append({ entries: [], hardState: hardState(2, 0), sync: true }), { name: 'StorageError' }, 'not even a hard-state-only write');
    await t.rejects(log.compact(1 as LogIndex), { name: 'StorageError' });
    await log.close();

    // Space freed, node restarted: every acknowledged entry is there, intact; at most the failed
    // batch beyond it (it may or may not have reached the disk, as with a crash before the ack).
    log = await store.open(dataDir);
    const loaded = await log.load(z);
    t.equal(loaded.truncatedTail, 0);
    t.ok(loaded.entries.length >= acknowledged.length, `all ${acknowledged.length} acknowledged entries survived (loaded ${loaded.entries.length})`);
    t.ok(loaded.entries.length <= acknowledged.length + 3, 'nothing but the failed batch beyond them');
    t.same(describeEntries(loaded.entries.slice(0, acknowledged.length)), describeEntries(acknowledged), 'the acknowledged prefix is intact');
    t.ok(loaded.hardState.commit <= loaded.entries.length, 'the hard state is consistent with the entries');
    // And the node can go on writing.
    const next = loaded.entries.length + 1;
    await log.append({ entries: [{ index: next as LogIndex, term: 2 as Term, data: Uint8Array.of(9) }], hardState: hardState(2, 0), sync: true });
    t.equal((await log.load(z)).entries.length, next);
    await log.close();
  });
}

t.test('full disk: a snapshot that does not fit fails cleanly, leaves no temp file, and the older one still loads', { skip: skip ?? false }, async (t) => {
  const disk = await tinyDisk(t);
  const dataDir = path.join(disk, 'node');
  const store = await FileSnapshotStore.open({ dataDir });
  t.teardown(() => store.close());
  const small = snapshot(10, 1, Uint8Array.from(randomBytes(100 * 1024)));
  await store.save(small);
  const err: unknown = await store.save(snapshot(20, 1, Uint8Array.from(randomBytes(2 * 1024 * 1024)))).then(
    () => undefined,
    (e: unknown) => e,
  );
  t.ok(err instanceof StorageError && err.noSpace, `ENOSPC reported: ${String(err)}`);
  t.match((err as Error).message, /^save snapshot 20 \(term 1\) in .*snap-00000000000000000020-1\.snap failed: ENOSPC/);
  t.same(await readdir(path.join(dataDir, SNAPSHOTS_DIR)), ['snap-00000000000000000010-1.snap'], 'no temp file left behind');
  const loaded = await store.loadNewest();
  t.equal(loaded.snapshot?.meta.index, 10);
  t.same(loaded.skippedCorrupt, []);
});

t.test('full disk (wal): with appends in flight and queued when a segment cannot be made, every one after the failure rejects (resolved ones are a prefix, in call order)', { skip: skip ?? false }, async (t) => {
  const disk = await tinyDisk(t);
  const dataDir = path.join(disk, 'node');
  await writeFile(path.join(disk, 'ballast'), randomBytes(700 * 1024));
  const log = await WalLogStore.open({ dataDir, segmentBytes: 64 * 1024 });
  // Groups of concurrent appends (one group commit each, roughly) until one fails.
  const outcomes: ('ok' | 'failed')[] = [];
  let index = 1;
  for (let round = 0; round < 200 && !outcomes.includes('failed'); round++) {
    const calls: Promise<'ok' | 'failed'>[] = [];
    for (let k = 0; k < 20; k++, index++) {
      const e: Entry = { index: index as LogIndex, term: 1 as Term, data: Uint8Array.from(randomBytes(1000)) };
      calls.push(log.append({ entries: [e], hardState: hardState(1, Math.max(0, index - 5)), sync: k % 2 === 0 }).then(() => 'ok' as const, () => 'failed' as const));
    }
    outcomes.push(...(await Promise.all(calls)));
  }
  const firstFailed = outcomes.indexOf('failed');
  t.ok(firstFailed > 0, `appends failed once the disk was full (after ${firstFailed} succeeded)`);
  t.same(outcomes.slice(firstFailed).filter((o) => o === 'ok'), [], `all ${outcomes.length - firstFailed} appends from the first failure on rejected, none resolved after it`);
  await log.close();
});
