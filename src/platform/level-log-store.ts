import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { Level } from 'level';
import { assert, NO_NODE, silentLogger, type Logger, type LogIndex, type Term } from '../base/index.js';
import type { Entry, HardState } from '../raft/index.js';
import { CorruptLogError, type LoadedLog, type LogStore } from '../replica/index.js';
import { StorageError, UnsupportedFormatError } from './errors.js';
import {
  decodeEntry,
  decodeHardState,
  decodeMeta,
  encodeEntry,
  encodeHardState,
  encodeMeta,
  ENTRY_KEY_END,
  entryKey,
  entryKeyIndex,
  HARD_STATE_KEY,
  LOG_FORMAT_VERSION,
  META_KEY,
} from './log-codec.js';
import { Serial } from './serial.js';

/** The database directory inside a node's data dir. */
export const RAFT_LOG_DIR = 'raft-log';
/**
 * Left in the database directory when LevelDB dropped write-ahead-log bytes while opening and
 * `onRecoveryDataLoss` is 'refuse'. LevelDB deletes the damaged file once it has recovered,
 * so without this marker the next start would look clean.
 */
export const RECOVERY_DATA_LOSS_MARKER = 'RECOVERY-DATA-LOSS';

export interface LevelLogStoreOptions {
  /** The node's data directory; the database lives in `<dataDir>/raft-log` (created if missing). */
  readonly dataDir: string;
  readonly logger?: Logger;
  /**
   * What to do when LevelDB reports, while opening, that it dropped bytes of its write-ahead
   * log (a record failed LevelDB's own checksum). LevelDB recovers to the state before the
   * damaged record and carries on, so such a loss is invisible to `load()`: the entries and
   * the hard state (term, vote, commit) simply revert together. That is the expected outcome
   * of a write torn by power loss (never acknowledged), but it can also hide the loss of an
   * fsynced, acknowledged write (a forgotten vote or append ack breaks Raft's promises).
   * 'warn' (default) logs an error and carries on; 'refuse' throws `CorruptLogError` from
   * `open()` and leaves a RECOVERY-DATA-LOSS marker file so later starts refuse too.
   */
  readonly onRecoveryDataLoss?: 'warn' | 'refuse';
  /** LevelDB's write buffer in bytes (LevelDB's default: 4 MiB). */
  readonly writeBufferSize?: number;
}

/** What LevelDB said about its recovery when this store opened the database. */
export interface LevelDbRecovery {
  /** Lines of LevelDB's LOG file reporting dropped or corrupt data during recovery. */
  readonly messages: readonly string[];
  /** Bytes LevelDB says it dropped from its write-ahead log. */
  readonly droppedBytes: number;
}

export interface LevelLogStoreStats {
  /** LevelDB write batches issued by `append` (one per call that had anything to write). */
  readonly batches: number;
  /** How many of those were fsynced. */
  readonly syncedBatches: number;
}

type Db = Level<Uint8Array, Uint8Array>;
type BatchOp = { type: 'put'; key: Uint8Array; value: Uint8Array } | { type: 'del'; key: Uint8Array };

const EMPTY_HARD_STATE: HardState = { term: 0 as Term, vote: NO_NODE, commit: 0 as LogIndex };
const LEVELDB_LOG_SCAN_BYTES = 1 << 20;

/**
 * The Raft log and hard state in a LevelDB database (classic-level). One `append` is one
 * LevelDB write batch (atomic: all or nothing after a crash), fsynced when asked. See
 * README.md for the format and the guarantees.
 */
export class LevelLogStore implements LogStore {
  private readonly serial = new Serial();
  /**
   * The highest entry index that may be stored: exact after open and after each successful
   * write, an overestimate after a failed one. Conflict truncation deletes up to it, so it
   * must never be lower than the true last stored index.
   */
  private lastStored: number;
  /** Writes since the last fsynced batch (an fsync of LevelDB's log covers all of them). */
  private unsynced = false;
  /** Set by the first failed write: the store refuses further work (see `checkUsable`). */
  private failure: StorageError | undefined;
  private closed = false;
  private batches = 0;
  private syncedBatches = 0;

  private constructor(
    private readonly db: Db,
    readonly path: string,
    private readonly logger: Logger,
    lastStored: number,
    readonly recovery: LevelDbRecovery,
  ) {
    this.lastStored = lastStored;
  }

  /** Opens (creating if needed) `<dataDir>/raft-log`; verifies the format version. */
  static async open(options: LevelLogStoreOptions): Promise<LevelLogStore> {
    const dir = path.join(options.dataDir, RAFT_LOG_DIR);
    const logger = options.logger ?? silentLogger;
    const policy = options.onRecoveryDataLoss ?? 'warn';
    const marker = path.join(dir, RECOVERY_DATA_LOSS_MARKER);
    try {
      await mkdir(options.dataDir, { recursive: true });
    } catch (e) {
      throw new StorageError('create the data dir', options.dataDir, e);
    }
    const earlierLoss = await readFile(marker, 'utf8').catch((e: unknown) => {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw new StorageError('read the recovery marker of the raft log', marker, e);
    });
    if (earlierLoss !== undefined && policy === 'warn') {
      logger.warn({ path: marker, leveldb: earlierLoss.trim() }, 'an earlier start found LevelDB had dropped raft log data; starting anyway (onRecoveryDataLoss is warn)');
    }
    if (earlierLoss !== undefined && policy === 'refuse') {
      throw new CorruptLogError(
        `an earlier start found that LevelDB dropped write-ahead-log data from the raft log in ${dir} (${earlierLoss.trim()}); ` +
          `refusing to start because acknowledged writes may be lost; wipe this node's data dir to rejoin, or delete ${marker} to accept the loss`,
      );
    }

    const db: Db = new Level<Uint8Array, Uint8Array>(dir, {
      keyEncoding: 'view',
      valueEncoding: 'view',
      ...(options.writeBufferSize !== undefined ? { writeBufferSize: options.writeBufferSize } : {}),
    });
    try {
      await db.open();
    } catch (e) {
      const cause = e instanceof Error && e.cause instanceof Error ? e.cause : e;
      const message = cause instanceof Error ? cause.message : String(cause);
      if (isLevelCorruption(e)) {
        throw new CorruptLogError(
          `LevelDB cannot open the raft log in ${dir} because its files are damaged (${message}); refusing to start; restore this node from a snapshot or wipe its data dir to rejoin the cluster`,
        );
      }
      throw new StorageError('open the raft log database', dir, e, message);
    }
    try {
      const recovery = await readRecoveryReport(dir);
      if (recovery.messages.length > 0) {
        logger.error(
          { path: dir, droppedBytes: recovery.droppedBytes, leveldb: recovery.messages },
          'LevelDB dropped damaged write-ahead-log records while opening the raft log; the log and hard state reverted to before them',
        );
        if (policy === 'refuse') {
          await writeFile(marker, `${recovery.messages.join('\n')}\n`, { flush: true });
          throw new CorruptLogError(
            `LevelDB dropped ${recovery.droppedBytes} bytes of damaged write-ahead log while opening the raft log in ${dir} (${recovery.messages.join('; ')}); ` +
              `refusing to start because acknowledged writes may be lost; wipe this node's data dir to rejoin, or delete ${marker} to accept the loss`,
          );
        }
      }
      await checkMeta(db, dir);
      return new LevelLogStore(db, dir, logger, await readLastStoredIndex(db), recovery);
    } catch (e) {
      await db.close().catch(() => undefined);
      if (e instanceof CorruptLogError || e instanceof StorageError || e instanceof UnsupportedFormatError) throw e;
      if (isLevelCorruption(e)) {
        throw new CorruptLogError(
          `LevelDB reports corruption while opening the raft log in ${dir} (${e instanceof Error ? e.message : String(e)}); refusing to start rather than serve wrong data; restore this node from a snapshot or wipe its data dir to rejoin the cluster`,
        );
      }
      throw new StorageError('open the raft log', dir, e);
    }
  }

  load(afterIndex: LogIndex): Promise<LoadedLog> {
    return this.serial.run(async () => {
      this.checkUsable('load');
      const hardState = await this.readHardState();
      const commit = hardState.commit;
      const entries: Entry[] = [];
      let expected = afterIndex + 1;
      let prevTerm = 0;
      let damage: string | undefined;
      const tail: Uint8Array[] = [];
      try {
        for await (const [key, value] of this.db.iterator({ gt: entryKey(afterIndex), lt: ENTRY_KEY_END })) {
          if (damage !== undefined) {
            tail.push(key);
            continue;
          }
          const index = entryKeyIndex(key);
          let problem: string | undefined;
          let at = expected;
          if (index === undefined) {
            problem = `a malformed key in the entry range follows entry ${expected - 1}`;
          } else if (index !== expected) {
            problem = `log entry ${expected} is missing (the next stored entry is ${index})`;
          } else {
            const decoded = decodeEntry(index, value);
            if (!decoded.ok) {
              problem = decoded.problem;
              at = index;
            } else if (decoded.value.term < prevTerm) {
              problem = `log entry ${index} has term ${decoded.value.term}, below the term ${prevTerm} of the entry before it`;
              at = index;
            } else {
              entries.push(decoded.value);
              prevTerm = decoded.value.term;
              expected++;
              continue;
            }
          }
          if (at <= commit) throw this.corrupt(`${problem} at or below the commit index ${commit}`);
          damage = problem;
          tail.push(key);
        }
      } catch (e) {
        if (e instanceof CorruptLogError) throw e;
        if (isLevelCorruption(e)) {
          // LevelDB found damage in its own files (a table block or the manifest): we cannot
          // tell which entries it affects, so this is not a tail we can safely cut.
          throw this.corrupt(`LevelDB reports corruption while reading entries after index ${afterIndex} (${e instanceof Error ? e.message : String(e)})`);
        }
        throw new StorageError(`read the raft log after index ${afterIndex}`, this.path, e);
      }
      const lastLoaded = expected - 1;
      if (lastLoaded < commit) {
        throw this.corrupt(
          `the raft log ends at index ${lastLoaded}${afterIndex > 0 ? ` (reading after snapshot index ${afterIndex})` : ''} but the commit index is ${commit}: committed entries are missing`,
        );
      }
      if (damage !== undefined) {
        // A torn or corrupt tail above the commit index: nothing in it was committed by this
        // node's knowledge, and the leader will send it again. Cut it durably before starting.
        await this.write(
          tail.map((key) => ({ type: 'del', key })),
          true,
          `cut the damaged raft log tail after index ${lastLoaded}`,
        );
        this.lastStored = await readLastStoredIndex(this.db).catch((e: unknown) => {
          throw this.fail(new StorageError('find the last raft log entry', this.path, e));
        });
        this.logger.warn(
          { path: this.path, problem: damage, cutEntries: tail.length, lastIndex: lastLoaded, commit },
          'cut a torn or corrupt raft log tail above the commit index',
        );
      }
      return { hardState, entries, afterIndexTerm: await this.readTermAt(afterIndex), truncatedTail: damage === undefined ? 0 : tail.length };
    });
  }

  append(batch: {
    readonly entries: readonly Entry[];
    readonly hardState: HardState | undefined;
    readonly sync: boolean;
    readonly installedSnapshot?: LogIndex;
  }): Promise<void> {
    return this.serial.run(async () => {
      const { entries, hardState, sync, installedSnapshot } = batch;
      const first = entries[0];
      const last = entries[entries.length - 1];
      this.checkUsable('append');
      const ops: BatchOp[] = [];
      let what = 'write the hard state';
      if (installedSnapshot !== undefined) {
        // The snapshot replaces the whole log. Entries after it are stale and must go in this
        // same atomic batch (or they would come back on restart behind a newer term); entries
        // at or below it are cleared right after (load skips them anyway).
        for (let i = installedSnapshot + 1; i <= this.lastStored; i++) ops.push({ type: 'del', key: entryKey(i) });
        // The entry at the snapshot's index goes in this batch too: once it is durable the log
        // holds nothing there, which is how Replica.open tells a completed install from one whose
        // batch a crash lost (a stale entry there, of another term, would mark the entries after
        // it, the ones written after the install, as stale).
        if (installedSnapshot >= 1) ops.push({ type: 'del', key: entryKey(installedSnapshot) });
        what = `install the snapshot at ${installedSnapshot}`;
      }
      if (first !== undefined && last !== undefined) {
        assert(first.index >= 1, () => `append: entry index ${first.index} is below 1`);
        for (let k = 1; k < entries.length; k++) {
          const e = entries[k];
          assert(e !== undefined && e.index === first.index + k, () => `append: entries are not contiguous (${first.index}.. then ${String(e?.index)} at position ${k})`);
        }
        // Raft §5.3: an entry at index i replaces everything at or after i. Puts overwrite
        // first..last; the stale entries above last are deleted by key (a range delete cannot
        // join an atomic batch), which is why the last stored index is kept in memory.
        for (let i = last.index + 1; i <= this.lastStored; i++) ops.push({ type: 'del', key: entryKey(i) });
        for (const e of entries) ops.push({ type: 'put', key: entryKey(e.index), value: encodeEntry(e) });
        what = `append entries ${first.index}..${last.index}${hardState ? ' and the hard state' : ''}`;
      }
      if (hardState !== undefined) ops.push({ type: 'put', key: HARD_STATE_KEY, value: encodeHardState(hardState) });
      if (ops.length === 0) {
        if (!sync || !this.unsynced) return;
        // Nothing new to write, but earlier unsynced batches must become durable now: a synced
        // LevelDB write fsyncs the whole write-ahead log, so rewrite the (unchanged) metadata.
        ops.push({ type: 'put', key: META_KEY, value: encodeMeta(LOG_FORMAT_VERSION) });
        what = 'fsync earlier writes';
      }
      // If the write fails it may still reach the disk (an fsync that failed after the data
      // was written); keep the overestimate so a later truncation deletes those entries too.
      const previous = this.lastStored;
      if (last !== undefined) this.lastStored = Math.max(previous, last.index);
      await this.write(ops, sync, what);
      if (last !== undefined) this.lastStored = last.index;
      else if (installedSnapshot !== undefined) this.lastStored = Math.min(previous, installedSnapshot);
      if (installedSnapshot !== undefined) {
        try {
          await this.db.clear({ gte: entryKey(0), lte: entryKey(installedSnapshot) });
        } catch (e) {
          throw new StorageError(`clear the raft log below the installed snapshot at ${installedSnapshot}`, this.path, e);
        }
      }
    });
  }

  compact(index: LogIndex): Promise<void> {
    return this.serial.run(async () => {
      this.checkUsable('compact');
      if (index < 1) return;
      // Not fsynced and not atomic: a crash may leave some of these entries behind, which is
      // harmless (load skips entries at or below the snapshot index).
      try {
        await this.db.clear({ gte: entryKey(0), lte: entryKey(index) });
      } catch (e) {
        throw new StorageError(`compact the raft log through index ${index}`, this.path, e);
      }
    });
  }

  close(): Promise<void> {
    return this.serial.run(async () => {
      if (this.closed) return;
      this.closed = true;
      try {
        await this.db.close();
      } catch (e) {
        throw new StorageError('close the raft log database', this.path, e);
      }
    });
  }

  /** The highest stored entry index as this store knows it (0 when empty). For tests and status. */
  get lastIndex(): LogIndex {
    return this.lastStored as LogIndex;
  }

  stats(): LevelLogStoreStats {
    return { batches: this.batches, syncedBatches: this.syncedBatches };
  }

  private async write(ops: BatchOp[], sync: boolean, what: string): Promise<void> {
    this.batches++;
    if (sync) this.syncedBatches++;
    try {
      await this.db.batch(ops, { sync });
    } catch (e) {
      throw this.fail(new StorageError(`${what}${sync ? ' (fsync)' : ''}`, this.path, e));
    }
    this.unsynced = !sync;
  }

  /**
   * After a failed write LevelDB may or may not hold it, and LevelDB itself refuses writes
   * after a write-ahead-log error; so does this store, until the node restarts and loads.
   */
  private fail(error: StorageError): StorageError {
    this.failure ??= error;
    this.logger.error({ path: this.path, err: error.message, noSpace: error.noSpace }, 'raft log write failed; the log store refuses further work until restarted');
    return error;
  }

  private checkUsable(operation: string): void {
    if (this.closed) throw new StorageError(operation, this.path, undefined, 'the raft log store is closed');
    if (this.failure !== undefined) {
      throw new StorageError(
        operation,
        this.path,
        this.failure,
        `the raft log store stopped after an earlier write failed (${this.failure.message}); restart the node once the cause is fixed`,
      );
    }
  }

  /**
   * The term of the stored entry at `index` (LoadedLog.afterIndexTerm), or undefined when none
   * is stored there or it does not decode (it is not part of what load returns, so not damage).
   */
  private async readTermAt(index: LogIndex): Promise<Term | undefined> {
    if (index < 1) return undefined;
    let value: Uint8Array | undefined;
    try {
      value = await getOrUndefined(this.db, entryKey(index));
    } catch (e) {
      if (isLevelCorruption(e)) throw this.corrupt(`LevelDB reports corruption while reading entry ${index} (${e instanceof Error ? e.message : String(e)})`);
      throw new StorageError(`read raft log entry ${index}`, this.path, e);
    }
    if (value === undefined) return undefined;
    const decoded = decodeEntry(index, value);
    return decoded.ok ? decoded.value.term : undefined;
  }

  private async readHardState(): Promise<HardState> {
    let value: Uint8Array | undefined;
    try {
      value = await getOrUndefined(this.db, HARD_STATE_KEY);
    } catch (e) {
      if (isLevelCorruption(e)) throw this.corrupt(`LevelDB reports corruption while reading the hard state (${e instanceof Error ? e.message : String(e)})`);
      throw new StorageError('read the hard state', this.path, e);
    }
    if (value === undefined) return EMPTY_HARD_STATE;
    const decoded = decodeHardState(value);
    if (!decoded.ok) {
      // Starting with a forgotten term or vote could elect two leaders in one term (Raft §5.2).
      throw this.corrupt(decoded.problem);
    }
    return decoded.value;
  }

  private corrupt(problem: string): CorruptLogError {
    return new CorruptLogError(
      `${problem} (raft log ${this.path}); refusing to start rather than serve wrong data; restore this node from a snapshot or wipe its data dir to rejoin the cluster`,
    );
  }
}

function isLevelCorruption(e: unknown): boolean {
  for (let c: unknown = e, depth = 0; c instanceof Error && depth < 5; c = c.cause, depth++) {
    if ((c as { code?: unknown }).code === 'LEVEL_CORRUPTION' || /^Corruption:/.test(c.message)) return true;
  }
  return false;
}

async function getOrUndefined(db: Db, key: Uint8Array): Promise<Uint8Array | undefined> {
  // abstract-level 2+ resolves a missing key to undefined (its typings still say V).
  const value: Uint8Array | undefined = await db.get(key);
  return value;
}

async function readLastStoredIndex(db: Db): Promise<number> {
  const keys = await db.keys({ gte: entryKey(0), lt: ENTRY_KEY_END, reverse: true, limit: 1 }).all();
  const key = keys[0];
  if (key === undefined) return 0;
  const index = entryKeyIndex(key);
  if (index === undefined) {
    throw new CorruptLogError(`the raft log in ${db.location} holds a malformed entry key; refusing to start; wipe this node's data dir to rejoin the cluster`);
  }
  return index;
}

async function checkMeta(db: Db, dir: string): Promise<void> {
  const value = await getOrUndefined(db, META_KEY);
  if (value === undefined) {
    const someKeys = await db.keys({ limit: 1 }).all();
    if (someKeys.length > 0) {
      throw new CorruptLogError(
        `the raft log in ${dir} has data but no format record; refusing to start rather than guess its format; wipe this node's data dir to rejoin the cluster`,
      );
    }
    await db.batch([{ type: 'put', key: META_KEY, value: encodeMeta(LOG_FORMAT_VERSION) }], { sync: true });
    return;
  }
  const meta = decodeMeta(value);
  if (!meta.ok) throw new CorruptLogError(`${meta.problem} (raft log ${dir}); refusing to start; wipe this node's data dir to rejoin the cluster`);
  if (meta.value !== LOG_FORMAT_VERSION) {
    throw new UnsupportedFormatError(`the raft log in ${dir} has format version ${meta.value}; this build reads only version ${LOG_FORMAT_VERSION}`);
  }
}

/**
 * LevelDB (without paranoid checks, which classic-level does not expose) recovers from a
 * damaged write-ahead-log record by dropping it and logging "dropping N bytes" to its LOG
 * file, which it starts afresh on every open. Reading that file right after opening is the
 * only way to learn about it.
 */
async function readRecoveryReport(dir: string): Promise<LevelDbRecovery> {
  let text: string;
  try {
    const content = await readFile(path.join(dir, 'LOG'));
    text = content.subarray(0, LEVELDB_LOG_SCAN_BYTES).toString('utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return { messages: [], droppedBytes: 0 };
    throw new StorageError("read LevelDB's LOG file", path.join(dir, 'LOG'), e);
  }
  const messages: string[] = [];
  let droppedBytes = 0;
  for (const line of text.split('\n')) {
    const dropped = /dropping (\d+) bytes/.exec(line);
    if (dropped === null && !/Corruption/i.test(line)) continue;
    messages.push(line.replace(/^\S+ \S+ /, '').trim()); // strip LevelDB's timestamp and thread id
    droppedBytes += Number(dropped?.[1] ?? 0);
  }
  return { messages, droppedBytes };
}
