import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import type { LogIndex } from '../base/index.js';
import { entries, hardState } from '../replica/testing/index.js';
import { LevelLogStore, RAFT_LOG_DIR } from './level-log-store.js';
import { detectLogStore, openLogStore, type LogStoreKind } from './open-log-store.js';
import { tempDir } from './testing/index.js';
import { WAL_DIR } from './wal-format.js';
import { WalLogStore } from './wal-log-store.js';

const warnings: unknown[] = [];
const logger = {
  debug: () => undefined,
  info: () => undefined,
  warn: (o: unknown) => warnings.push(o),
  error: () => undefined,
};

async function opened(dataDir: string, kind: LogStoreKind): Promise<{ kind: LogStoreKind; klass: string; reportsSyncs: boolean; entries: number }> {
  const o = await openLogStore({ dataDir, kind, logger, walSegmentBytes: 64 * 1024 });
  try {
    return { kind: o.kind, klass: o.store.constructor.name, reportsSyncs: o.reportsSyncs, entries: (await o.store.load(0 as LogIndex)).entries.length };
  } finally {
    await o.store.close();
  }
}

t.test('a new data dir gets the configured store; one with a log keeps the store it was made with', async (t) => {
  const { dir, remove } = await tempDir('open-log');
  t.teardown(remove);
  t.equal(await detectLogStore(path.join(dir, 'nothing-yet')), undefined);
  t.same(await opened(path.join(dir, 'a'), 'wal'), { kind: 'wal', klass: 'WalLogStore', reportsSyncs: true, entries: 0 });
  t.same(await opened(path.join(dir, 'b'), 'level'), { kind: 'level', klass: 'LevelLogStore', reportsSyncs: false, entries: 0 });

  const level = path.join(dir, 'level');
  const l = await LevelLogStore.open({ dataDir: level });
  await l.append({ entries: entries(1, 3, 1), hardState: hardState(1, 3), sync: true });
  await l.close();
  warnings.length = 0;
  t.same(await opened(level, 'wal'), { kind: 'level', klass: 'LevelLogStore', reportsSyncs: false, entries: 3 }, 'an existing LevelDB log is kept, asked for wal');
  t.match(warnings, [{ existing: 'level', configured: 'wal' }], 'and the mismatch is logged');

  const wal = path.join(dir, 'wal');
  const w = await WalLogStore.open({ dataDir: wal, segmentBytes: 64 * 1024 });
  await w.append({ entries: entries(1, 2, 1), hardState: hardState(1, 2), sync: true });
  await w.close();
  t.same(await opened(wal, 'level'), { kind: 'wal', klass: 'WalLogStore', reportsSyncs: true, entries: 2 }, 'an existing wal is kept, asked for level');
});

t.test('a data dir holding both logs is refused', async (t) => {
  const { dir, remove } = await tempDir('open-log-both');
  t.teardown(remove);
  await mkdir(path.join(dir, RAFT_LOG_DIR));
  await mkdir(path.join(dir, WAL_DIR));
  await t.rejects(openLogStore({ dataDir: dir, kind: 'wal' }), { name: 'DataDirError', message: /holds two raft logs, a LevelDB one \(raft-log\/\) and a segment-file one \(wal\/\)/ });
});
