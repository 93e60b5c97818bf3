import { createHash } from 'node:crypto';
import { open, readFile, rename } from 'node:fs/promises';
import * as path from 'node:path';
import { ulid } from 'ulid';

/**
 * The cluster id: names the cluster a node belongs to, so traffic from another cluster is
 * refused. Stored in `<dataDir>/cluster-id` (written atomically, fsynced).
 */
export const CLUSTER_ID_FILE = 'cluster-id';

export async function readClusterId(dataDir: string): Promise<string | undefined> {
  try {
    const s = (await readFile(path.join(dataDir, CLUSTER_ID_FILE), 'utf8')).trim();
    return s === '' ? undefined : s;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw e;
  }
}

export async function writeClusterId(dataDir: string, id: string): Promise<void> {
  const file = path.join(dataDir, CLUSTER_ID_FILE);
  const tmp = `${file}.tmp`;
  const fh = await open(tmp, 'w');
  try {
    await fh.writeFile(`${id}\n`);
    await fh.sync();
  } finally {
    await fh.close();
  }
  await rename(tmp, file);
  const dir = await open(dataDir, 'r');
  try {
    await dir.sync();
  } finally {
    await dir.close();
  }
}

/** A new cluster formed by one node. */
export function newClusterId(): string {
  return ulid().toLowerCase();
}

/** A cluster formed by N nodes together: every one of them computes the same id. */
export function derivedClusterId(members: ReadonlyArray<{ id: string; address: string }>): string {
  const canon = [...members].sort((a, b) => (a.id < b.id ? -1 : 1)).map((m) => `${m.id}@${m.address}`).join(',');
  return createHash('sha256').update(canon).digest('hex').slice(0, 26);
}
