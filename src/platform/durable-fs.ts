import { open, rename, rm } from 'node:fs/promises';
import path from 'node:path';

/**
 * fsyncs a directory, making the creations, renames and deletions of its entries durable
 * (a renamed file is only safe once its directory is: ext4 and xfs journal the entry on
 * their own schedule otherwise).
 */
export async function fsyncDir(dir: string): Promise<void> {
  const handle = await open(dir, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/**
 * Replaces `file` with `content` atomically and durably: write a temp file beside it, fsync
 * it, rename it over `file`, fsync the directory. After a crash the file is either the old
 * one or the new one, never a mix.
 */
export async function writeFileAtomic(file: string, content: string | Uint8Array): Promise<void> {
  const temp = `${file}.tmp`;
  const handle = await open(temp, 'w', 0o644);
  try {
    await handle.writeFile(content);
    await handle.sync();
  } catch (e) {
    await handle.close().catch(() => undefined);
    await rm(temp, { force: true }).catch(() => undefined);
    throw e;
  }
  await handle.close();
  await rename(temp, file);
  await fsyncDir(path.dirname(file));
}
