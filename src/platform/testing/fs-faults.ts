import { mkdtemp, open, readdir, rm, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';

/** A fresh directory under the OS temp dir; removed by the returned function. */
export async function tempDir(prefix: string): Promise<{ readonly dir: string; readonly remove: () => Promise<void> }> {
  const dir = await mkdtemp(path.join(os.tmpdir(), `cairn-${prefix}-`));
  return { dir, remove: () => rm(dir, { recursive: true, force: true }) };
}

/** The newest (highest-numbered) LevelDB write-ahead log file in a database directory. */
export async function newestLevelDbLog(dbDir: string): Promise<{ readonly file: string; readonly size: number }> {
  const logs = (await readdir(dbDir)).filter((n) => /^\d+\.log$/.test(n)).sort();
  const name = logs[logs.length - 1];
  if (name === undefined) throw new Error(`no LevelDB .log file in ${dbDir}`);
  const file = path.join(dbDir, name);
  return { file, size: (await stat(file)).size };
}

/** XORs the byte at `offset` with `mask`. */
export async function flipByte(file: string, offset: number, mask = 0xff): Promise<void> {
  const handle = await open(file, 'r+');
  try {
    const b = new Uint8Array(1);
    await handle.read(b, 0, 1, offset);
    b[0] = (b[0] ?? 0) ^ mask;
    await handle.write(b, 0, 1, offset);
    await handle.sync();
  } finally {
    await handle.close();
  }
}
