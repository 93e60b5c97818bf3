import { mkdir, open, readFile, realpath, unlink } from 'node:fs/promises';
import path from 'node:path';
import { silentLogger, type Logger, type NodeId } from '../base/index.js';
import { fsyncDir, writeFileAtomic } from './durable-fs.js';
import { StorageError } from './errors.js';

export const LOCK_FILE = 'LOCK';
export const NODE_ID_FILE = 'node-id';

export interface OpenDataDirOptions {
  /** The data directory; created (with parents) if missing. */
  readonly path: string;
  /** The node that owns it. A new directory is stamped with this id; an old one must carry it. */
  readonly nodeId: NodeId;
  readonly logger?: Logger;
}

/** An open, locked data directory. */
export interface DataDir {
  /** Absolute, symlink-resolved path. */
  readonly path: string;
  readonly nodeId: NodeId;
  /** Releases the lock (deletes LOCK if it is still ours). Idempotent. */
  close(): Promise<void>;
}

export type DataDirProblem = 'locked' | 'owned-by-another-node' | 'invalid';

/** The data dir cannot be used: `problem` says why, the message says what to do. */
export class DataDirError extends Error {
  override readonly name = 'DataDirError';
  constructor(
    readonly problem: DataDirProblem,
    message: string,
  ) {
    super(message);
  }
}

/** Data dirs this process holds, by real path: a LOCK naming our own pid is ours only if listed here. */
const heldHere = new Set<string>();

/**
 * Opens a node's data directory: creates it, takes `<dir>/LOCK` (our pid) so two agents never
 * share it, and checks or writes `<dir>/node-id`.
 *
 * The lock is a pid file, taken with an exclusive create. A LOCK naming a live process other
 * than us is refused; one naming a dead process (or our own pid when this process does not
 * hold it: a container restarted with the same pid) is stale and taken over. The pid check
 * gives a clear message; the hard exclusion is the log store's fcntl lock (LevelDB's on
 * `raft-log/LOCK`, or `wal/lock/` for the segment-file log), held for as long as the log store
 * is open (the kernel drops it when the process dies). See README.md.
 */
export async function openDataDir(options: OpenDataDirOptions): Promise<DataDir> {
  const logger = options.logger ?? silentLogger;
  let dir: string;
  try {
    const created = await mkdir(options.path, { recursive: true, mode: 0o700 });
    dir = await realpath(options.path);
    if (created !== undefined) await fsyncDir(path.dirname(dir));
  } catch (e) {
    throw new StorageError('create the data dir', options.path, e);
  }
  await acquireLock(dir, logger);
  try {
    await checkNodeId(dir, options.nodeId, logger);
  } catch (e) {
    await releaseLock(dir);
    throw e;
  }
  let closed = false;
  return {
    path: dir,
    nodeId: options.nodeId,
    close: async () => {
      if (closed) return;
      closed = true;
      await releaseLock(dir);
    },
  };
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    // EPERM: it exists but belongs to another user, so it is alive.
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

async function readLockPid(file: string): Promise<{ readonly text: string; readonly pid: number | undefined } | undefined> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new StorageError('read the data dir lock', file, e);
  }
  const pid = /^\d+$/.test(text.trim()) ? Number(text.trim()) : undefined;
  return { text, pid: pid !== undefined && Number.isSafeInteger(pid) && pid > 0 ? pid : undefined };
}

async function acquireLock(dir: string, logger: Logger): Promise<void> {
  const file = path.join(dir, LOCK_FILE);
  if (heldHere.has(dir)) {
    throw new DataDirError('locked', `data dir ${dir} is already open in this process (pid ${process.pid}); two nodes cannot share a data dir`);
  }
  // A few rounds: another process may create or remove the LOCK between our steps.
  for (let attempt = 0; attempt < 5; attempt++) {
    try {
      const handle = await open(file, 'wx', 0o644);
      try {
        await handle.writeFile(`${process.pid}\n`);
        await handle.sync();
      } finally {
        await handle.close();
      }
      await fsyncDir(dir);
      heldHere.add(dir);
      return;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw new StorageError('create the data dir lock', file, e);
    }
    const holder = await readLockPid(file);
    if (holder === undefined) continue; // removed meanwhile: try again
    if (holder.pid !== undefined && holder.pid !== process.pid && isAlive(holder.pid)) {
      throw new DataDirError(
        'locked',
        `data dir ${dir} is locked by process ${holder.pid} (${file}); another agent is using it. ` +
          `If no cairn agent runs with that pid, delete ${file} and start again`,
      );
    }
    // Stale: a dead process, an unreadable pid (a crash between create and write), or our own
    // pid left by an earlier incarnation (containers restart with the same pid). Delete it
    // only if it is still the file we judged.
    const again = await readLockPid(file);
    if (again === undefined || again.text !== holder.text) continue;
    logger.warn({ dir, stalePid: holder.pid ?? null }, 'taking over a stale data dir lock');
    try {
      await unlink(file);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw new StorageError('remove a stale data dir lock', file, e);
    }
  }
  throw new DataDirError('locked', `could not take the data dir lock ${file}: it keeps changing hands; is another agent starting on the same data dir?`);
}

async function releaseLock(dir: string): Promise<void> {
  const file = path.join(dir, LOCK_FILE);
  heldHere.delete(dir);
  const holder = await readLockPid(file);
  if (holder?.pid !== process.pid) return; // not ours (any more): leave it alone
  try {
    await unlink(file);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw new StorageError('release the data dir lock', file, e);
  }
}

async function checkNodeId(dir: string, nodeId: NodeId, logger: Logger): Promise<void> {
  const file = path.join(dir, NODE_ID_FILE);
  let stored: string | undefined;
  try {
    stored = (await readFile(file, 'utf8')).trim();
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw new StorageError('read the node id file', file, e);
  }
  if (stored === undefined) {
    try {
      await writeFileAtomic(file, `${nodeId}\n`);
    } catch (e) {
      throw new StorageError('write the node id file', file, e);
    }
    logger.info({ dir, nodeId }, 'stamped the data dir with this node id');
    return;
  }
  if (stored === '') {
    throw new DataDirError('invalid', `data dir ${dir} has an empty ${NODE_ID_FILE} file; it is damaged or was not written by cairn`);
  }
  if (stored !== nodeId) {
    throw new DataDirError(
      'owned-by-another-node',
      `data dir ${dir} belongs to node ${JSON.stringify(stored)}, not ${JSON.stringify(nodeId)}; refusing to start as a different node on its data. ` +
        'Start with the node id it was created with, or use an empty data dir for a new node',
    );
  }
}
