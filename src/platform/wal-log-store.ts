import { mkdir, open, readdir, readFile, rename, rm, type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import { assert, NO_NODE, silentLogger, type Logger, type LogIndex, type Term } from '../base/index.js';
import type { Entry, HardState } from '../raft/index.js';
import { CorruptLogError, type LoadedLog, type LogStore } from '../replica/index.js';
import { lockDir, type DirLock } from './dir-lock.js';
import { fsyncDir, writeFileAtomic } from './durable-fs.js';
import { StorageError } from './errors.js';
import { Serial } from './serial.js';
import {
  cutMarkerName,
  encodeBatch,
  MAX_SEGMENT_BYTES,
  parseCutMarkerName,
  parseSegmentName,
  readRecord,
  recordBytes,
  RecordType,
  SEGMENT_HEADER_BYTES,
  segmentName,
  WAL_DIR,
  writeRecord,
  type Batch,
} from './wal-format.js';
import { checkFormatVersions, LogShape, scanSegments, type ScanResult, type SegmentRef } from './wal-scan.js';
import { defaultSyncMethod, nodeWalIo, O_DSYNC, openDsync, timedDatasync, writevFully, type WalIo, type WalSyncMethod } from './wal-io.js';
import { discard, nonZeroEnd, prepareSegment, writeCut, writeFully, type Prepared } from './wal-segment-files.js';

/** The lock directory inside `<dataDir>/wal` (an empty LevelDB database held open; dir-lock.ts). */
export const WAL_LOCK_DIR = 'lock';
export const DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024;
/**
 * The first segment of a new log is at most this big (`firstSegmentBytes`): a new node makes it
 * before it can take its first write, and writing and fsyncing 64 MiB of zeros there cost most
 * of a second (README.md, "Start-up"). Later segments are prepared in the background.
 */
export const DEFAULT_FIRST_SEGMENT_BYTES = 1024 * 1024;
const MIN_SEGMENT_BYTES = 4096;
/**
 * With `syncMethod: 'dsync'`, the records written since the active segment's last sync are kept
 * (up to this many bytes) to be written again through the O_DSYNC descriptor with the next synced
 * round: an O_DSYNC write makes only its own range durable, not earlier unsynced writes to the
 * file as fdatasync does. Beyond it, the next synced round falls back to write + fdatasync.
 * Unsynced rounds are small (a commit index, a compaction), so this is rarely reached.
 */
export const UNSYNCED_REWRITE_MAX_BYTES = 1024 * 1024;

export interface WalLogStoreOptions {
  /** The node's data directory; the log lives in `<dataDir>/wal` (created if missing). */
  readonly dataDir: string;
  readonly logger?: Logger;
  /**
   * Bytes per segment file, preallocated by writing zeros. Default 64 MiB; a multiple of 4096,
   * at least 4096 and below 2 GiB. A batch larger than a segment gets a segment of its own size.
   */
  readonly segmentBytes?: number;
  /**
   * Bytes of the first segment of a new (empty) log, made while the store opens. Default the
   * smaller of `segmentBytes` and 1 MiB; the same rules as `segmentBytes`, and at most it. The
   * format does not care: a segment's size is its file's size.
   */
  readonly firstSegmentBytes?: number;
  /**
   * Called with the duration in seconds of each sync of the log (the fsync metric): an O_DSYNC
   * write or an fdatasync, timed from the system call to the first statement of its libuv
   * callback (README.md, "wal": what that includes).
   */
  readonly onSync?: (seconds: number) => void;
  /**
   * How a synced round is made durable (wal-io.ts): `dsync` (default where the platform has
   * O_DSYNC), one write through an O_DSYNC descriptor, one thread-pool round trip; `fdatasync`,
   * a write then an fdatasync, two.
   */
  readonly syncMethod?: WalSyncMethod;
  /** The write and fdatasync calls (a test seam, wal-io.ts). Default node:fs. */
  readonly io?: WalIo;
}

export interface WalLogStoreStats {
  /** Batch records written (one per `append` that had something to write, plus compactions and cuts). */
  readonly records: number;
  /** write() calls that carried records (group commit: one per round, however many appends it holds). */
  readonly writes: number;
  /**
   * Syncs of segments: O_DSYNC writes and fdatasync calls (one per round that held a synced
   * append, plus one per segment change).
   */
  readonly syncs: number;
  /** Of `syncs`, the synced rounds written through the O_DSYNC descriptor (one thread-pool round trip each). */
  readonly dsyncWrites: number;
  /** Segments made since open (preparing included), and segments in the log now. */
  readonly segmentsCreated: number;
  readonly segments: number;
  /**
   * Segment files read in full since open, and the bytes read from them: each `load` reads the
   * log once (the first one, or a write before any load, is also what finds where it ends).
   */
  readonly segmentsRead: number;
  readonly bytesRead: number;
}

interface Active {
  readonly ref: SegmentRef;
  readonly handle: FileHandle;
  readonly size: number;
  /** Where the next record goes. */
  offset: number;
  /** Written since its last sync. */
  dirty: boolean;
  /** The same file opened with O_DSYNC (`syncMethod: 'dsync'`): a write through it is durable when it returns. */
  readonly dsync: FileHandle | undefined;
  /**
   * What was written since the last sync, from `unsyncedFrom` on, kept to be written again
   * through `dsync` by the next synced round; undefined once it outgrew UNSYNCED_REWRITE_MAX_BYTES
   * (then that round uses fdatasync).
   */
  unsynced: Uint8Array[] | undefined;
  unsyncedFrom: number;
  unsyncedBytes: number;
}

/** What an append changes in the log's shape (LogShape.apply). */
type Effect = Parameters<LogShape['apply']>[0];

interface Pending {
  /** The batch record's body, or undefined for a bare sync (an empty synced append). */
  readonly body: Uint8Array | undefined;
  readonly sync: boolean;
  readonly effect: Effect;
  /** For error messages: "append entries 12..40 and the hard state". */
  readonly what: string;
  readonly resolve: () => void;
  readonly reject: (e: unknown) => void;
}

const EMPTY_HARD_STATE: HardState = { term: 0 as Term, vote: NO_NODE, commit: 0 as LogIndex };

function effectOf(b: Batch): Effect {
  return { hardState: b.hardState, installedSnapshot: b.installedSnapshot, compact: b.compact, truncateFrom: b.truncateFrom, firstIndex: b.entries[0]?.index ?? 0, count: b.entries.length };
}

/** Closes a segment's two descriptors (errors ignored: closing neither syncs nor loses what was written). */
async function closeActive(a: Active): Promise<void> {
  await a.dsync?.close().catch(() => undefined);
  await a.handle.close().catch(() => undefined);
}

/**
 * Finishes a cut that a crash interrupted (WalLogStore.cutDamage), from its marker `name` in
 * `dir`: the segment it names is cut again at the offset it names (zeros from there to the last
 * byte that is not zero, the marker's record at the offset, fdatasync), every later segment is
 * deleted (newest first), then the marker. Idempotent, so a crash in here is finished next time.
 * Nothing was written after the cut while the marker existed, so nothing live is zeroed.
 */
async function finishCut(dir: string, name: string, segments: readonly SegmentRef[], logger: Logger): Promise<void> {
  const at = parseCutMarkerName(name);
  assert(at !== undefined, 'a cut marker name');
  const marker = path.join(dir, name);
  const refuse = (problem: string): CorruptLogError =>
    new CorruptLogError(
      `the raft log in ${dir} was being cut when the node stopped, and ${problem}; refusing to start rather than serve wrong data; restore this node from a snapshot or wipe its data dir to rejoin the cluster`,
    );
  const seg = segments.find((s) => s.seq === at.seq);
  if (seg === undefined) throw refuse(`the segment it was cutting (sequence number ${at.seq}) is missing`);
  let record: Uint8Array;
  let buf: Uint8Array;
  try {
    record = await readFile(marker);
    buf = await readFile(seg.path);
  } catch (e) {
    throw new StorageError('read an interrupted raft log cut', marker, e);
  }
  const r = readRecord(record, 0, at.seq, at.offset);
  // (The record may reach past the segment's end: a cut of a small last record grows the file.)
  if (r.kind !== 'record' || r.type !== RecordType.batch || r.next !== record.length || at.offset < SEGMENT_HEADER_BYTES || at.offset > buf.length) {
    throw refuse(`its marker ${marker} is damaged`);
  }
  let handle: FileHandle | undefined;
  try {
    handle = await open(seg.path, 'r+');
    await writeCut(handle, at.offset, Math.max(at.offset, nonZeroEnd(buf, at.offset)), record);
    await handle.close();
    handle = undefined;
    for (const s of segments.filter((x) => x.seq > at.seq).reverse()) {
      await rm(s.path, { force: true });
      await fsyncDir(dir);
    }
    await rm(marker);
    await fsyncDir(dir);
  } catch (e) {
    await handle?.close().catch(() => undefined);
    throw new StorageError(`finish the interrupted cut of raft log segment ${path.basename(seg.path)} at offset ${at.offset}`, seg.path, e);
  }
  logger.warn({ path: dir, segment: path.basename(seg.path), offset: at.offset }, 'finished cutting a damaged raft log tail (the cut was interrupted by a crash)');
}

/**
 * The Raft log and hard state as a segment-file write-ahead log, after etcd's WAL: fixed-size
 * segment files preallocated with zeros (so an fdatasync writes data, not file-size metadata),
 * one checksummed record per batch, appended; the next segment prepared in the background before
 * it is needed. Appends queue behind one writer and share writes: while one write + fdatasync
 * is in flight, the appends that arrive meanwhile go out together in the next one (group
 * commit), each resolved once its bytes are durable. See README.md ("wal") for the format and
 * the guarantees.
 */
export class WalLogStore implements LogStore {
  private readonly serial = new Serial();
  private queue: Pending[] = [];
  private flushing: Promise<void> | undefined;
  /** A segment being prepared (or ready) for the next roll-over. */
  private preparing: Promise<Prepared | undefined> | undefined;
  /** Damage found by the first read of the log (`readLog`), not yet handled by `load` (which cuts it or refuses). */
  private damaged: string | undefined;
  private failure: StorageError | undefined;
  private closed = false;
  private counts = { records: 0, writes: 0, syncs: 0, dsyncWrites: 0, segmentsCreated: 0, segmentsRead: 0, bytesRead: 0 };
  /** The hard state of the last batch queued (written into every record; see enqueue). */
  private latestHardState: HardState | undefined;
  /** The segment written to; undefined until the log has been read (`readLog`). */
  private activeSegment: Active | undefined;
  /** The log as written so far (by completed writes); undefined until the log has been read. */
  private logShape: LogShape | undefined;

  private constructor(
    readonly path: string,
    private readonly segmentBytes: number,
    private readonly logger: Logger,
    private readonly onSync: (seconds: number) => void,
    private readonly syncMethod: WalSyncMethod,
    private readonly io: WalIo,
    private readonly lock: DirLock,
    private segments: SegmentRef[],
  ) {}

  private get active(): Active {
    assert(this.activeSegment !== undefined, 'the raft log was read before it is written');
    return this.activeSegment;
  }

  private set active(a: Active) {
    this.activeSegment = a;
  }

  private get shape(): LogShape {
    assert(this.logShape !== undefined, 'the raft log was read before its shape is used');
    return this.logShape;
  }

  private set shape(shape: LogShape) {
    this.logShape = shape;
  }

  /**
   * Opens (creating if needed) `<dataDir>/wal`, takes its lock, finishes a cut a crash
   * interrupted and checks the segments' names and format versions. It does not read the log:
   * the first `load` does, once, and so finds where it ends (or, if something is written before
   * any load, that write does; either way the log is read once, not once to open it and again
   * to load it).
   */
  static async open(options: WalLogStoreOptions): Promise<WalLogStore> {
    const started = performance.now();
    const segmentBytes = options.segmentBytes ?? DEFAULT_SEGMENT_BYTES;
    if (!Number.isSafeInteger(segmentBytes) || segmentBytes < MIN_SEGMENT_BYTES || segmentBytes >= MAX_SEGMENT_BYTES || segmentBytes % 4096 !== 0) {
      throw new RangeError(`segmentBytes must be a multiple of 4096 from ${MIN_SEGMENT_BYTES} to below ${MAX_SEGMENT_BYTES}, got ${segmentBytes}`);
    }
    const firstSegmentBytes = options.firstSegmentBytes ?? Math.min(segmentBytes, DEFAULT_FIRST_SEGMENT_BYTES);
    if (!Number.isSafeInteger(firstSegmentBytes) || firstSegmentBytes < MIN_SEGMENT_BYTES || firstSegmentBytes > segmentBytes || firstSegmentBytes % 4096 !== 0) {
      throw new RangeError(`firstSegmentBytes must be a multiple of 4096 from ${MIN_SEGMENT_BYTES} to segmentBytes (${segmentBytes}), got ${firstSegmentBytes}`);
    }
    const syncMethod = options.syncMethod ?? defaultSyncMethod();
    if (syncMethod !== 'dsync' && syncMethod !== 'fdatasync') throw new RangeError(`syncMethod must be 'dsync' or 'fdatasync', got ${JSON.stringify(syncMethod)}`);
    if (syncMethod === 'dsync' && O_DSYNC === undefined) throw new RangeError(`syncMethod 'dsync' needs O_DSYNC, which this platform (${process.platform}) does not have; use 'fdatasync'`);
    const logger = options.logger ?? silentLogger;
    const dir = path.join(options.dataDir, WAL_DIR);
    try {
      await mkdir(options.dataDir, { recursive: true });
      if ((await mkdir(dir, { recursive: true })) !== undefined) await fsyncDir(options.dataDir);
    } catch (e) {
      throw new StorageError('create the raft log directory', dir, e);
    }
    const lock = await lockDir(path.join(dir, WAL_LOCK_DIR));
    const lockedMs = performance.now() - started;
    try {
      let names: string[];
      try {
        names = await readdir(dir);
      } catch (e) {
        throw new StorageError('list the raft log segments', dir, e);
      }
      let segments: SegmentRef[] = [];
      const cuts: string[] = [];
      for (const name of names) {
        if (name.endsWith('.tmp')) {
          // A segment prepared but never started (or cut short by a crash), or a cut marker
          // never completed (so the cut had not begun): not part of the log.
          await rm(path.join(dir, name), { force: true });
          continue;
        }
        const parsed = parseSegmentName(name);
        if (parsed !== undefined) segments.push({ ...parsed, path: path.join(dir, name) });
        else if (parseCutMarkerName(name) !== undefined) cuts.push(name);
        else if (name !== WAL_LOCK_DIR) logger.warn({ path: path.join(dir, name) }, 'ignoring a file in the raft log directory that is not a segment');
      }
      segments.sort((a, b) => a.seq - b.seq);
      for (const name of cuts.sort()) {
        await finishCut(dir, name, segments, logger);
        const { seq } = parseCutMarkerName(name) ?? { seq: 0 };
        segments = segments.filter((s) => s.seq <= seq);
      }
      for (let j = 1; j < segments.length; j++) {
        const before = segments[j - 1] as SegmentRef;
        const seg = segments[j] as SegmentRef;
        if (seg.seq !== before.seq + 1) {
          throw new CorruptLogError(
            `the raft log in ${dir} is missing segment ${before.seq + 1} (between ${path.basename(before.path)} and ${path.basename(seg.path)}); refusing to start rather than serve wrong data; restore this node from a snapshot or wipe its data dir to rejoin the cluster`,
          );
        }
      }
      let createdBytes = 0;
      if (segments.length === 0) {
        const first = await prepareSegment(dir, 0, firstSegmentBytes);
        createdBytes = firstSegmentBytes;
        const ref = { seq: 0, firstIndex: 1, path: path.join(dir, segmentName(0, 1)) };
        await first.handle.close();
        try {
          await rename(first.path, ref.path);
          await fsyncDir(dir);
        } catch (e) {
          throw new StorageError('create the first raft log segment', ref.path, e);
        }
        segments.push(ref);
      }
      await checkFormatVersions(segments);
      const store = new WalLogStore(dir, segmentBytes, logger, options.onSync ?? (() => undefined), syncMethod, options.io ?? nodeWalIo, lock, segments);
      logger.debug({ path: dir, segments: segments.length, createdBytes, lockMs: Math.round(lockedMs), openMs: Math.round(performance.now() - started) }, 'opened the raft log (segment files)');
      return store;
    } catch (e) {
      await lock.release().catch(() => undefined);
      throw e;
    }
  }

  /**
   * The last index of the log as written (of its last entry, or of its compaction floor). Known
   * once the log has been read: after `load`, or after a write.
   */
  get lastIndex(): number {
    return this.shape.lastIndex;
  }

  stats(): WalLogStoreStats {
    return { ...this.counts, segments: this.segments.length };
  }

  /**
   * Reads the whole log once (scanSegments), keeping the entries from `keepFrom` on. The first
   * read also sets up writing: the last segment opened for writing at the end of its last intact
   * record, the log's shape, and the damage found (nothing is written until load has dealt
   * with it).
   */
  private async readLog(keepFrom: number): Promise<ScanResult> {
    const started = performance.now();
    const scan = await scanSegments(this.segments, keepFrom);
    this.counts.segmentsRead += scan.segmentsRead;
    this.counts.bytesRead += scan.bytesRead;
    if (this.activeSegment === undefined) {
      const last = scan.segments[scan.segments.length - 1];
      assert(last !== undefined, 'a scanned log has a segment');
      let handle: FileHandle;
      try {
        handle = await open(last.ref.path, 'r+');
      } catch (e) {
        throw new StorageError('open the last raft log segment', last.ref.path, e);
      }
      try {
        this.activeSegment = await this.activate(last.ref, handle, last.size, last.end);
      } catch (e) {
        await handle.close().catch(() => undefined);
        throw e;
      }
      this.logShape = scan.replay.shape;
      this.latestHardState = scan.replay.shape.hardState;
      if (scan.damage !== undefined) {
        this.damaged = `${path.basename(scan.segments[scan.damage.segment]?.ref.path ?? '?')} at offset ${scan.damage.offset}: ${scan.damage.problem}`;
      }
    }
    this.logger.debug(
      { path: this.path, segments: scan.segmentsRead, bytesRead: scan.bytesRead, keptEntries: scan.replay.entries.size, damaged: scan.damage !== undefined, readMs: Math.round(performance.now() - started) },
      'read the raft log',
    );
    return scan;
  }

  /** Reads the log if nothing has yet (a write before any load: it must know where the log ends). */
  private async ensureRead(): Promise<void> {
    if (this.activeSegment === undefined) await this.readLog(Number.POSITIVE_INFINITY);
  }

  load(afterIndex: LogIndex): Promise<LoadedLog> {
    return this.serial.run(async () => {
      this.checkUsable('load');
      await this.drain();
      // The replay keeps the entry at afterIndex too, for its term (afterIndexTerm). What the
      // scan finds to be damage does not depend on where it starts keeping entries (every
      // record is checked and decoded whole either way; keepFrom only chooses which entries are
      // copied), and the entry at afterIndex is left out of the checks below as before.
      const scan = await this.readLog(Math.max(1, afterIndex));
      const { replay, damage, beyond } = scan;
      let hardState = replay.shape.hardState;
      let cut = 0;
      if (damage !== undefined) {
        const seen = Math.max(hardState?.commit ?? 0, beyond.maxCommit);
        const at = replay.shape.lastIndex + 1;
        const file = scan.segments[damage.segment]?.ref.path ?? '?';
        if (damage.offset === 0) {
          // Headers are written and fsynced before their segment joins the log: damage there is
          // never a torn write, and without the header nothing after it can be trusted.
          throw this.corrupt(`the header of raft log segment ${file} is damaged (${damage.problem}); a segment header is never torn by a crash`);
        }
        if (at <= seen) {
          throw this.corrupt(`the raft log is damaged in ${file} at offset ${damage.offset} (${damage.problem}): entries from ${at} on cannot be read, at or below the commit index ${seen}`);
        }
        // What the unreadable record held is unknown: it may have replaced entries (Raft §5.3)
        // anywhere above the commit index known before it, and so may the intact records behind
        // it, which the cut drops too. The entries the log still holds there may be the replaced
        // ones, so the commit index may not move past the one known before the damage (or the
        // snapshot): if a record behind it says it did, those entries are committed and unknown.
        const before = Math.max(replay.shape.hardState?.commit ?? 0, afterIndex);
        if (beyond.maxCommit > before) {
          throw this.corrupt(
            `the raft log is damaged in ${file} at offset ${damage.offset} (${damage.problem}): records after it say the commit index reached ${beyond.maxCommit}, above the commit index ${before} known before it, and the unreadable record may have replaced entries from ${before + 1} on`,
          );
        }
        // Intact records behind the damage were written after it: their hard state is the
        // newest (a vote must not be forgotten). Its commit index is at most `before` (checked above).
        if (beyond.hardState !== undefined) hardState = beyond.hardState;
        cut += damage.entries + beyond.entries;
      }
      const hs = hardState ?? EMPTY_HARD_STATE;
      const commit = hs.commit;
      const entries: Entry[] = [];
      let expected = afterIndex + 1;
      let prevTerm = 0;
      let problem: string | undefined;
      const afterIndexTerm = afterIndex > 0 ? replay.entries.get(afterIndex)?.term : undefined;
      const indexes = [...replay.entries.keys()].filter((i) => i > afterIndex).sort((a, b) => a - b);
      for (const index of indexes) {
        if (problem !== undefined) {
          cut++;
          continue;
        }
        const e = replay.entries.get(index) as Entry;
        let at = expected;
        if (index !== expected) {
          problem = `log entry ${expected} is missing (the next stored entry is ${index})`;
        } else if (e.term < prevTerm) {
          problem = `log entry ${index} has term ${e.term}, below the term ${prevTerm} of the entry before it`;
          at = index;
        } else {
          entries.push(e);
          prevTerm = e.term;
          expected++;
          continue;
        }
        if (at <= commit) throw this.corrupt(`${problem} at or below the commit index ${commit}`);
        cut++;
      }
      const lastLoaded = expected - 1;
      if (lastLoaded < commit) {
        throw this.corrupt(
          `the raft log ends at index ${lastLoaded}${afterIndex > 0 ? ` (reading after snapshot index ${afterIndex})` : ''} but the commit index is ${commit}: committed entries are missing`,
        );
      }
      if (damage !== undefined) await this.cutDamage(scan, hardState);
      if (problem !== undefined) {
        // Intact records, but the log they make is not contiguous or its terms go down above the
        // commit index: a record saying "drop everything after lastLoaded", fsynced.
        await this.enqueue({ entries: [], truncateFrom: lastLoaded + 1 }, true, `cut the raft log after index ${lastLoaded}`);
      }
      if (damage !== undefined || problem !== undefined) {
        this.logger.warn(
          { path: this.path, problem: damage !== undefined ? `${damage.problem} (offset ${damage.offset})` : problem, cutEntries: cut, lastIndex: lastLoaded, commit },
          'cut a torn or corrupt raft log tail above the commit index',
        );
      }
      return { hardState: hs, entries, afterIndexTerm, truncatedTail: cut };
    });
  }

  append(batch: {
    readonly entries: readonly Entry[];
    readonly hardState: HardState | undefined;
    readonly sync: boolean;
    readonly installedSnapshot?: LogIndex;
  }): Promise<void> {
    // Serialized with load, compact and close, but not with other appends: each one only joins
    // the write queue here and is resolved by the writer (group commit).
    return this.serial
      .run(async () => {
        const { entries, hardState, sync, installedSnapshot } = batch;
        const first = entries[0];
        const last = entries[entries.length - 1];
        this.checkUsable('append');
        await this.ensureRead();
        let what = 'write the hard state';
        if (installedSnapshot !== undefined) what = `install the snapshot at ${installedSnapshot}`;
        if (first !== undefined && last !== undefined) {
          assert(first.index >= 1, () => `append: entry index ${first.index} is below 1`);
          for (let k = 1; k < entries.length; k++) {
            const e = entries[k];
            assert(e !== undefined && e.index === first.index + k, () => `append: entries are not contiguous (${first.index}.. then ${String(e?.index)} at position ${k})`);
          }
          what = `append entries ${first.index}..${last.index}${hardState ? ' and the hard state' : ''}`;
        }
        if (first === undefined && hardState === undefined && installedSnapshot === undefined) {
          // Nothing to write; a synced empty append still makes earlier unsynced ones durable.
          return { done: sync ? this.enqueue(undefined, true, 'fsync earlier writes') : Promise.resolve() };
        }
        return { done: this.enqueue({ entries, hardState, installedSnapshot }, sync, what) };
      })
      .then((r) => r.done);
  }

  compact(index: LogIndex): Promise<void> {
    return this.serial.run(async () => {
      this.checkUsable('compact');
      await this.ensureRead();
      // Not fsynced (as with LevelDB): losing it in a crash is harmless, load skips entries at or
      // below the snapshot index anyway.
      await this.enqueue({ entries: [], compact: index }, false, `compact the raft log through ${index}`);
      // Whole segments go once every entry live when the next one began is at or below the
      // index (the next segment's name says where the log stood then). Never the active one.
      let upTo = -1;
      for (let j = 0; j < this.segments.length - 1; j++) {
        if ((this.segments[j + 1] as SegmentRef).firstIndex - 1 <= index) upTo = j;
      }
      const victims = this.segments.slice(0, upTo + 1);
      this.segments = this.segments.slice(upTo + 1);
      // Oldest first, each deletion durable before the next, so a crash leaves a contiguous run.
      for (const v of victims) {
        try {
          await rm(v.path, { force: true });
          await fsyncDir(this.path);
        } catch (e) {
          throw this.fail(new StorageError(`delete the compacted raft log segment ${path.basename(v.path)}`, v.path, e));
        }
      }
      if (victims.length > 0) this.logger.debug({ path: this.path, index, deleted: victims.map((v) => path.basename(v.path)) }, 'deleted compacted raft log segments');
    });
  }

  close(): Promise<void> {
    return this.serial.run(async () => {
      if (this.closed) return;
      this.closed = true;
      await this.drain();
      const prepared = await this.takePreparing();
      if (prepared !== undefined) await discard(prepared);
      if (this.activeSegment !== undefined) await closeActive(this.activeSegment);
      await this.lock.release();
    });
  }

  // ---- The writer ----------------------------------------------------------------------------

  private enqueue(given: Batch | undefined, sync: boolean, what: string): Promise<void> {
    if (this.damaged !== undefined) {
      return Promise.reject(new StorageError(what, this.path, undefined, `the raft log is damaged (${this.damaged}); load() must cut it back (or refuse it) before anything is written`));
    }
    // Every record carries the newest hard state (about 30 bytes), so any intact record behind
    // damage tells load the commit index as it was when it was written: damage to a committed
    // record is then refused even if no later append changed the hard state.
    let batch = given;
    if (batch?.hardState !== undefined) this.latestHardState = batch.hardState;
    else if (batch !== undefined && this.latestHardState !== undefined) batch = { ...batch, hardState: this.latestHardState };
    const body = batch === undefined ? undefined : encodeBatch(batch);
    const effect = batch === undefined ? { firstIndex: 0, count: 0 } : effectOf(batch);
    return new Promise<void>((resolve, reject) => {
      this.queue.push({ body, sync, effect, what, resolve, reject });
      this.flushing ??= this.flushLoop();
    });
  }

  private async drain(): Promise<void> {
    while (this.flushing !== undefined) await this.flushing;
  }

  private async flushLoop(): Promise<void> {
    try {
      while (this.queue.length > 0) {
        const group = this.queue;
        this.queue = [];
        if (this.failure !== undefined) {
          for (const p of group) p.reject(this.stopped(p.what));
          continue;
        }
        await this.writeGroup(group);
      }
    } finally {
      this.flushing = undefined;
    }
  }

  /** Writes a group of queued appends: as many as fit in the active segment per write, rolling over as needed. */
  private async writeGroup(group: readonly Pending[]): Promise<void> {
    let i = 0;
    while (i < group.length) {
      const placed: Pending[] = [];
      const bodies: Uint8Array[] = [];
      let bytes = 0;
      for (; i < group.length; i++) {
        const p = group[i] as Pending;
        if (p.body !== undefined) {
          const size = recordBytes(p.body.length);
          if (this.active.offset + bytes + size > this.active.size) break;
          bodies.push(p.body);
          bytes += size;
        }
        placed.push(p);
      }
      let written = false;
      try {
        if (placed.length > 0) await this.writeRecords(bodies, placed.some((p) => p.sync));
        written = true;
        for (const p of placed) {
          this.shape.apply(p.effect);
          p.resolve();
        }
        const next = group[i];
        if (next !== undefined) await this.rollOver(recordBytes(next.body?.length ?? 0));
      } catch (e) {
        // A failed segment change names itself (StorageError); a failed write or fsync is the cause as it is.
        this.fail(e instanceof StorageError ? e : new StorageError('write the raft log', this.active.ref.path, e));
        for (const p of written ? group.slice(i) : [...placed, ...group.slice(i)]) p.reject(new StorageError(`${p.what}${p.sync ? ' (fsync)' : ''}`, this.path, e));
        return;
      }
    }
  }

  /**
   * One write of the records and, if asked and anything is unsynced, a sync: with `dsync`, the
   * write goes through the O_DSYNC descriptor together with whatever earlier unsynced rounds
   * wrote (written again, so that it is durable too: an O_DSYNC write covers its own range
   * only), one thread-pool round trip; otherwise write, then fdatasync.
   */
  private async writeRecords(bodies: readonly Uint8Array[], sync: boolean): Promise<void> {
    const a = this.active;
    let buf: Uint8Array | undefined;
    if (bodies.length > 0) {
      let total = 0;
      for (const b of bodies) total += recordBytes(b.length);
      buf = new Uint8Array(total);
      let at = 0;
      for (const b of bodies) at += writeRecord(buf, at, b, a.ref.seq, a.offset + at);
    }
    if (sync && a.dsync !== undefined && (!a.dirty || a.unsynced !== undefined) && (buf !== undefined || a.dirty)) {
      const buffers = a.dirty ? [...(a.unsynced as Uint8Array[])] : [];
      if (buf !== undefined) buffers.push(buf);
      const seconds = await writevFully(this.io, a.dsync.fd, buffers, a.dirty ? a.unsyncedFrom : a.offset);
      if (buf !== undefined) this.wrote(a, buf.length, bodies.length);
      this.synced(a, seconds);
      this.counts.dsyncWrites++;
    } else {
      if (buf !== undefined) {
        const at = a.offset;
        await writevFully(this.io, a.handle.fd, [buf], at);
        this.wrote(a, buf.length, bodies.length);
        if (!a.dirty) {
          a.dirty = true;
          a.unsynced = a.dsync !== undefined ? [] : undefined;
          a.unsyncedFrom = at;
          a.unsyncedBytes = 0;
        }
        if (a.unsynced !== undefined && a.unsyncedBytes + buf.length <= UNSYNCED_REWRITE_MAX_BYTES) {
          a.unsynced.push(buf);
          a.unsyncedBytes += buf.length;
        } else a.unsynced = undefined;
      }
      if (sync && a.dirty) await this.datasync(a);
    }
    this.maybePrepareNext();
  }

  private wrote(a: Active, bytes: number, records: number): void {
    a.offset += bytes;
    this.counts.records += records;
    this.counts.writes++;
  }

  private synced(a: Active, seconds: number): void {
    a.dirty = false;
    a.unsynced = undefined;
    a.unsyncedBytes = 0;
    this.counts.syncs++;
    this.onSync(seconds);
  }

  private async datasync(a: Active): Promise<void> {
    this.synced(a, await timedDatasync(this.io, a.handle.fd));
  }

  /**
   * The segment `ref`, open as `handle` (the file now at `file`, which may still be its prepared
   * name), as the one written to from `offset`, with its O_DSYNC descriptor.
   */
  private async activate(ref: SegmentRef, handle: FileHandle, size: number, offset: number, file = ref.path): Promise<Active> {
    let dsync: FileHandle | undefined;
    if (this.syncMethod === 'dsync') {
      try {
        dsync = await openDsync(file);
      } catch (e) {
        throw new StorageError('open the raft log segment for synced writes (O_DSYNC)', file, e);
      }
    }
    return { ref, handle, size, offset, dirty: false, dsync, unsynced: undefined, unsyncedFrom: offset, unsyncedBytes: 0 };
  }

  /**
   * Moves writing to the next segment (etcd's `cut`): the old one is fsynced, the prepared one
   * gets a state record (the hard state and the compaction floor, so it can stand alone once the
   * segments before it are compacted away), is fsynced, and is renamed into the log.
   */
  private async rollOver(nextRecordBytes: number): Promise<void> {
    const old = this.active;
    if (old.dirty) await this.datasync(old);
    const seq = old.ref.seq + 1;
    const ref: SegmentRef = { seq, firstIndex: this.shape.lastIndex + 1, path: path.join(this.path, segmentName(seq, this.shape.lastIndex + 1)) };
    const state = encodeBatch({ hardState: this.shape.hardState, compact: this.shape.floor > 0 ? this.shape.floor : undefined, entries: [] });
    const need = SEGMENT_HEADER_BYTES + recordBytes(state.length) + nextRecordBytes;
    let prepared = await this.takePreparing();
    if (prepared !== undefined && (prepared.seq !== seq || prepared.size < need)) {
      await discard(prepared);
      prepared = undefined;
    }
    if (prepared === undefined) {
      this.counts.segmentsCreated++;
      prepared = await prepareSegment(this.path, seq, Math.max(this.segmentBytes, Math.ceil(need / 4096) * 4096));
    }
    let next: Active | undefined;
    try {
      const buf = new Uint8Array(recordBytes(state.length));
      writeRecord(buf, 0, state, seq, SEGMENT_HEADER_BYTES);
      await writeFully(prepared.handle, buf, SEGMENT_HEADER_BYTES);
      await prepared.handle.datasync();
      // Opened before the rename (the descriptor follows the file), so that once the segment is
      // in the log nothing is left that can fail.
      next = await this.activate(ref, prepared.handle, prepared.size, SEGMENT_HEADER_BYTES + buf.length, prepared.path);
      await rename(prepared.path, ref.path);
      await fsyncDir(this.path);
      this.active = next;
      this.segments.push(ref);
      this.counts.records++;
    } catch (e) {
      await next?.dsync?.close().catch(() => undefined);
      await discard(prepared);
      throw new StorageError(`start raft log segment ${path.basename(ref.path)}`, ref.path, e);
    }
    await closeActive(old);
    this.logger.debug({ segment: path.basename(ref.path) }, 'started a new raft log segment');
  }

  /** Starts preparing the next segment once the active one is half full. */
  private maybePrepareNext(): void {
    const a = this.active;
    if (this.preparing !== undefined || this.closed || a.offset < a.size / 2) return;
    const seq = a.ref.seq + 1;
    this.counts.segmentsCreated++;
    this.preparing = prepareSegment(this.path, seq, this.segmentBytes).catch((e: unknown) => {
      // Tried again, in the writer's path, when the segment is needed.
      this.logger.warn({ path: this.path, seq, err: e instanceof Error ? e.message : String(e) }, 'preparing the next raft log segment failed');
      return undefined;
    });
  }

  private async takePreparing(): Promise<Prepared | undefined> {
    const p = this.preparing;
    this.preparing = undefined;
    return p === undefined ? undefined : await p;
  }

  /**
   * Cuts the log at the damage `scan` found (load has checked it is above the commit index):
   * zeros from the damaged record on, a state record in its place (the newest hard state, which
   * may come from intact records behind the damage), fsync, then the segments after it deleted,
   * newest first.
   *
   * None of that is one atomic step, and every state in between is dangerous to load: a cut
   * segment followed by segments not yet deleted would replay records written after the
   * damaged one (which may have been replaced by it: a log that never existed), and deleting
   * the later segments first would forget the newest hard state (a vote) they hold. So the cut
   * is announced first by a marker file `<seq>-<offset>.cut` holding the state record, written
   * atomically; `open` finds a marker left by a crash and finishes the cut from it
   * (`finishCut`), before reading anything. The marker goes only once the cut is durable.
   */
  private async cutDamage(scan: ScanResult, hardState: HardState | undefined): Promise<void> {
    const damage = scan.damage;
    assert(damage !== undefined, 'cutDamage without damage');
    const seg = scan.segments[damage.segment];
    assert(seg !== undefined, 'the damaged segment was scanned');
    assert(damage.offset >= SEGMENT_HEADER_BYTES, 'a damaged segment header is refused, never cut');
    const later = scan.segments.slice(damage.segment + 1);
    const isActive = seg.ref.path === this.active.ref.path;
    const shape = scan.replay.shape;
    const stateBatch: Batch = { hardState, compact: shape.floor > 0 ? shape.floor : undefined, entries: [] };
    const state = encodeBatch(stateBatch);
    const record = new Uint8Array(recordBytes(state.length));
    writeRecord(record, 0, state, seg.ref.seq, damage.offset);
    const marker = path.join(this.path, cutMarkerName(seg.ref.seq, damage.offset));
    let handle: FileHandle | undefined;
    try {
      await writeFileAtomic(marker, record);
      handle = isActive ? this.active.handle : await open(seg.ref.path, 'r+');
      await writeCut(handle, damage.offset, damage.zeroEnd, record);
      this.counts.syncs++;
      this.counts.records++;
      for (const s of [...later].reverse()) {
        if (s.ref.path === this.active.ref.path) await closeActive(this.active);
        await rm(s.ref.path, { force: true });
        await fsyncDir(this.path);
      }
      // Durably gone before anything is written after the cut: finishing it again would zero that.
      await rm(marker);
      await fsyncDir(this.path);
      const off = damage.offset + record.length;
      this.segments = scan.segments.slice(0, damage.segment + 1).map((s) => s.ref);
      if (!isActive) this.active = await this.activate(seg.ref, handle, Math.max(seg.size, off), off);
      else Object.assign(this.active, { offset: off, dirty: false, unsynced: undefined, unsyncedBytes: 0 });
      shape.apply(effectOf(stateBatch));
      this.shape = shape;
      this.latestHardState = hardState;
      this.damaged = undefined;
    } catch (e) {
      if (handle !== undefined && !isActive) await handle.close().catch(() => undefined);
      throw this.fail(new StorageError(`cut the damaged raft log tail at ${path.basename(seg.ref.path)} offset ${damage.offset}`, seg.ref.path, e));
    }
  }

  /**
   * After a failed write the log may or may not hold it (a write can reach the disk before the
   * fsync fails); the store refuses further work until the node restarts and loads.
   */
  private fail(error: StorageError): StorageError {
    this.failure ??= error;
    this.logger.error({ path: this.path, err: error.message, noSpace: error.noSpace }, 'raft log write failed; the log store refuses further work until restarted');
    return error;
  }

  private stopped(operation: string): StorageError {
    const failure = this.failure as StorageError;
    return new StorageError(operation, this.path, failure, `the raft log store stopped after an earlier write failed (${failure.message}); restart the node once the cause is fixed`);
  }

  private checkUsable(operation: string): void {
    if (this.closed) throw new StorageError(operation, this.path, undefined, 'the raft log store is closed');
    if (this.failure !== undefined) throw this.stopped(operation);
  }

  private corrupt(problem: string): CorruptLogError {
    return new CorruptLogError(
      `${problem} (raft log ${this.path}); refusing to start rather than serve wrong data; restore this node from a snapshot or wipe its data dir to rejoin the cluster`,
    );
  }
}
