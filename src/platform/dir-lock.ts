import { Level } from 'level';
import { StorageError } from './errors.js';

/** An exclusive lock on a directory, held until released or until the process dies. */
export interface DirLock {
  release(): Promise<void>;
}

/**
 * Takes an exclusive `fcntl` lock by opening an empty LevelDB database at `dir` (created if
 * missing). Node has no `flock`/`fcntl` of its own, and LevelDB's lock is exactly the one we
 * want: held while open, refused to a second opener in any process (this one included), and
 * dropped by the kernel when the holder dies, so a crash never leaves it stale. The database
 * itself stays empty (a few hundred bytes).
 */
export async function lockDir(dir: string): Promise<DirLock> {
  const db = new Level<Uint8Array, Uint8Array>(dir, { keyEncoding: 'view', valueEncoding: 'view' });
  try {
    await db.open();
  } catch (e) {
    const cause = e instanceof Error && e.cause instanceof Error ? e.cause : e;
    const locked = (cause as { code?: unknown }).code === 'LEVEL_LOCKED';
    throw new StorageError(
      'lock the raft log',
      dir,
      e,
      locked ? `another process (or another store in this one) holds the lock on ${dir}; two agents cannot share a data dir` : cause instanceof Error ? cause.message : String(cause),
    );
  }
  let released = false;
  return {
    release: async () => {
      if (released) return;
      released = true;
      await db.close();
    },
  };
}
