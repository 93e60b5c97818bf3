/**
 * A synced append resolves only once every byte written to the log before it is durable, and a
 * synced round costs one thread-pool round trip (`syncMethod: 'dsync'`, the default on Linux).
 *
 * The store's write and fdatasync calls go through a watching `WalIo` that keeps a model of the
 * page cache: a write through a descriptor the kernel reports as O_DSYNC (its flags in
 * /proc/self/fdinfo, so the store cannot fake it) is durable when it returns; any other write
 * is volatile until an fdatasync of its file. After each synced append resolves, nothing may be
 * volatile.
 */
import { fstatSync, readFileSync } from 'node:fs';
import t, { type Test } from 'tap';
import type { LogIndex } from '../base/index.js';
import type { Entry } from '../raft/index.js';
import { describeLoaded, entry, hardState } from '../replica/testing/index.js';
import { tempDir } from './testing/index.js';
import { nodeWalIo, O_DSYNC, type WalIo, type WalSyncMethod } from './wal-io.js';
import { UNSYNCED_REWRITE_MAX_BYTES, WalLogStore } from './wal-log-store.js';

const linux = process.platform === 'linux' && O_DSYNC !== undefined;

/** Whether the kernel says `fd` was opened with O_DSYNC. */
function kernelSaysDsync(fd: number): boolean {
  const info = readFileSync(`/proc/self/fdinfo/${fd}`, 'utf8');
  const flags = /^flags:\s+([0-7]+)$/m.exec(info)?.[1];
  if (flags === undefined) throw new Error(`no flags in /proc/self/fdinfo/${fd}`);
  return (Number.parseInt(flags, 8) & (O_DSYNC as number)) !== 0;
}

/** Byte ranges [from, to) per file (inode) written but not yet durable. */
class WatchedIo implements WalIo {
  readonly volatile = new Map<number, [number, number][]>();
  writes = 0;
  dsyncWrites = 0;
  datasyncs = 0;

  writev(fd: number, buffers: readonly Uint8Array[], position: number, callback: (err: NodeJS.ErrnoException | null, bytesWritten: number) => void): void {
    const dsync = kernelSaysDsync(fd);
    const ino = fstatSync(fd).ino;
    this.writes++;
    if (dsync) this.dsyncWrites++;
    nodeWalIo.writev(fd, buffers, position, (err, n) => {
      if (err === null && n > 0) {
        const ranges = this.cut(this.volatile.get(ino) ?? [], position, position + n);
        if (!dsync) ranges.push([position, position + n]);
        this.volatile.set(ino, ranges);
      }
      callback(err, n);
    });
  }

  fdatasync(fd: number, callback: (err: NodeJS.ErrnoException | null) => void): void {
    const ino = fstatSync(fd).ino;
    this.datasyncs++;
    nodeWalIo.fdatasync(fd, (err) => {
      if (err === null) this.volatile.delete(ino);
      callback(err);
    });
  }

  volatileBytes(): number {
    let n = 0;
    for (const ranges of this.volatile.values()) for (const [a, b] of ranges) n += b - a;
    return n;
  }

  /** `ranges` without [from, to). */
  private cut(ranges: [number, number][], from: number, to: number): [number, number][] {
    const out: [number, number][] = [];
    for (const [a, b] of ranges) {
      if (b <= from || a >= to) out.push([a, b]);
      else {
        if (a < from) out.push([a, from]);
        if (b > to) out.push([to, b]);
      }
    }
    return out;
  }
}

async function openWatched(t: Test, segmentBytes: number, syncMethod?: WalSyncMethod): Promise<{ store: WalLogStore; io: WatchedIo; reopen: () => Promise<WalLogStore> }> {
  const { dir, remove } = await tempDir('wal-durable');
  t.teardown(remove);
  const io = new WatchedIo();
  const options = { dataDir: dir, segmentBytes, io, ...(syncMethod !== undefined ? { syncMethod } : {}) };
  const store = await WalLogStore.open(options);
  await store.load(0 as LogIndex);
  return { store, io, reopen: () => WalLogStore.open(options) };
}

const sized = (index: number, bytes: number): Entry => entry(index, 1, `${index}:`.padEnd(bytes, 'd'));

t.test('a synced append resolves only when everything written before it is durable', { skip: linux ? false : 'needs Linux (/proc/self/fdinfo and O_DSYNC)' }, async (t) => {
  for (const syncMethod of ['dsync', 'fdatasync'] as const) {
    await t.test(syncMethod, async (t) => {
      const { store, io } = await openWatched(t, 1024 * 1024, syncMethod);
      t.teardown(() => store.close());
      await store.append({ entries: [sized(1, 100)], hardState: hardState(1, 0), sync: true });
      t.equal(io.volatileBytes(), 0, 'a synced append alone');
      await store.append({ entries: [sized(2, 100)], hardState: undefined, sync: false });
      t.ok(io.volatileBytes() > 0, 'an unsynced append is written and not durable (the model sees it)');
      await store.append({ entries: [sized(3, 100)], hardState: hardState(1, 1), sync: true });
      t.equal(io.volatileBytes(), 0, 'a synced append after an unsynced one makes that one durable too');
      await store.append({ entries: [], hardState: hardState(1, 2), sync: false });
      await store.append({ entries: [], hardState: undefined, sync: true });
      t.equal(io.volatileBytes(), 0, 'an empty synced append after an unsynced one');
      // More unsynced than is kept for writing again: the synced round falls back to fdatasync.
      const before = io.datasyncs;
      for (let i = 4; i < 4 + 3; i++) await store.append({ entries: [sized(i, UNSYNCED_REWRITE_MAX_BYTES / 2)], hardState: undefined, sync: false });
      await store.append({ entries: [sized(7, 100)], hardState: hardState(1, 3), sync: true });
      t.equal(io.volatileBytes(), 0, `after ${(3 * UNSYNCED_REWRITE_MAX_BYTES) / 2} unsynced bytes`);
      t.ok(io.datasyncs > before, 'by an fdatasync');
    });
  }
});

t.test('one thread-pool round trip per synced round with dsync, two with fdatasync', { skip: linux ? false : 'needs Linux (/proc/self/fdinfo and O_DSYNC)' }, async (t) => {
  for (const [syncMethod, calls] of [
    ['dsync', 1],
    ['fdatasync', 2],
  ] as const) {
    const { store, io } = await openWatched(t, 1024 * 1024, syncMethod);
    t.teardown(() => store.close());
    await store.append({ entries: [sized(1, 100)], hardState: hardState(1, 0), sync: true });
    const w = io.writes;
    const d = io.datasyncs;
    for (let i = 2; i <= 51; i++) await store.append({ entries: [sized(i, 200)], hardState: hardState(1, i - 1), sync: true });
    t.equal(io.writes - w + io.datasyncs - d, 50 * calls, `${syncMethod}: ${calls} call(s) per synced append (${io.writes - w} writes, ${io.datasyncs - d} fdatasyncs)`);
    t.equal(store.stats().dsyncWrites > 0, syncMethod === 'dsync', `${syncMethod}: stats().dsyncWrites ${store.stats().dsyncWrites}`);
    t.equal(io.dsyncWrites > 0, syncMethod === 'dsync', `${syncMethod}: writes through an O_DSYNC descriptor (the kernel's flags): ${io.dsyncWrites}`);
  }
  await t.rejects(WalLogStore.open({ dataDir: '/nonexistent-never', syncMethod: 'bogus' as never }), { message: `syncMethod must be 'dsync' or 'fdatasync', got "bogus"` }, 'an unknown sync method is refused by name, before anything is touched');
});

t.test('a random mix of synced and unsynced appends across segment roll-overs: never resolved before durable', { skip: linux ? false : 'needs Linux (/proc/self/fdinfo and O_DSYNC)' }, async (t) => {
  // Small segments, so roll-overs (the old segment fsynced, a new O_DSYNC descriptor) happen often.
  const { store, io, reopen } = await openWatched(t, 64 * 1024);
  let seed = 17;
  const random = (): number => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed / 2 ** 31;
  };
  const written: Entry[] = [];
  let bad = 0;
  let commit = 0;
  for (let i = 1; i <= 400; i++) {
    const sync = random() < 0.6;
    const bytes = random() < 0.05 ? 20_000 : 50 + Math.floor(random() * 600);
    const e = sized(i, bytes);
    written.push(e);
    if (sync) commit = Math.max(commit, i - 2);
    // Sometimes several at once (group commit), sometimes one at a time.
    const burst = random() < 0.3;
    const p = store.append({ entries: [e], hardState: hardState(1, sync ? commit : Math.max(0, commit - 1)), sync });
    if (burst) continue;
    await p;
    if (sync && io.volatileBytes() > 0) bad++;
  }
  await store.append({ entries: [], hardState: undefined, sync: true });
  t.equal(io.volatileBytes(), 0, 'the final synced append: nothing volatile');
  t.equal(bad, 0, 'no synced append resolved while something written before it was volatile');
  t.ok(store.stats().segments > 5, `rolled over (${store.stats().segments} segments)`);
  await store.close();
  const again = await reopen();
  t.same(describeLoaded(await again.load(0 as LogIndex)).entries.length, written.length, 'every entry is there after a restart');
  await again.close();
});
