import { stat } from 'node:fs/promises';
import path from 'node:path';
import { silentLogger, type Logger } from '../base/index.js';
import type { LogStore } from '../replica/index.js';
import { DataDirError } from './data-dir.js';
import { StorageError } from './errors.js';
import { LevelLogStore, RAFT_LOG_DIR } from './level-log-store.js';
import { WAL_DIR } from './wal-format.js';
import type { WalSyncMethod } from './wal-io.js';
import { WalLogStore } from './wal-log-store.js';

/** The Raft log stores: `wal` (segment files, WalLogStore) and `level` (LevelDB, LevelLogStore). */
export type LogStoreKind = 'wal' | 'level';

export interface OpenLogStoreOptions {
  readonly dataDir: string;
  /** The store for a data dir that has no log yet. One that has a log keeps its own. */
  readonly kind: LogStoreKind;
  readonly logger?: Logger;
  /** WalLogStore's segment size (bytes). */
  readonly walSegmentBytes?: number;
  /** WalLogStore only: the duration in seconds of each sync (LevelDB's are not visible). */
  readonly onSync?: (seconds: number) => void;
  /** WalLogStore's `syncMethod` (default: `dsync` where the platform has O_DSYNC). */
  readonly walSyncMethod?: WalSyncMethod;
}

export interface OpenedLogStore {
  readonly store: LogStore;
  readonly kind: LogStoreKind;
  /** Whether `onSync` reports this store's fsyncs (true for `wal`). */
  readonly reportsSyncs: boolean;
}

async function isDir(p: string): Promise<boolean> {
  try {
    return (await stat(p)).isDirectory();
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw new StorageError('look for the raft log', p, e);
  }
}

/** Which store the data dir's log was made with, or undefined if it has none yet. */
export async function detectLogStore(dataDir: string): Promise<LogStoreKind | undefined> {
  const [level, wal] = await Promise.all([isDir(path.join(dataDir, RAFT_LOG_DIR)), isDir(path.join(dataDir, WAL_DIR))]);
  if (level && wal) {
    throw new DataDirError(
      'invalid',
      `data dir ${dataDir} holds two raft logs, a LevelDB one (${RAFT_LOG_DIR}/) and a segment-file one (${WAL_DIR}/), and cairn cannot tell which is current; move the wrong one away (or wipe the data dir to rejoin the cluster)`,
    );
  }
  return level ? 'level' : wal ? 'wal' : undefined;
}

/**
 * Opens the data dir's Raft log: with the store it was made with if it has one (there is no
 * migration between stores yet), else with `kind`.
 */
export async function openLogStore(options: OpenLogStoreOptions): Promise<OpenedLogStore> {
  const logger = options.logger ?? silentLogger;
  const existing = await detectLogStore(options.dataDir);
  const kind = existing ?? options.kind;
  if (existing !== undefined && existing !== options.kind) {
    logger.warn({ dataDir: options.dataDir, existing, configured: options.kind }, 'the data dir keeps the raft log store it was made with (no migration between stores yet)');
  }
  if (kind === 'level') return { store: await LevelLogStore.open({ dataDir: options.dataDir, logger }), kind, reportsSyncs: false };
  const store = await WalLogStore.open({
    dataDir: options.dataDir,
    logger,
    ...(options.walSegmentBytes !== undefined ? { segmentBytes: options.walSegmentBytes } : {}),
    ...(options.onSync !== undefined ? { onSync: options.onSync } : {}),
    ...(options.walSyncMethod !== undefined ? { syncMethod: options.walSyncMethod } : {}),
  });
  return { store, kind, reportsSyncs: true };
}
