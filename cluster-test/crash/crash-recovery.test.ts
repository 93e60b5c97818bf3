/**
 * Crash recovery with real processes and a real disk (ARCHITECTURE.md, test tier 3), on the
 * LevelDB log store (crash-recovery-wal.test.ts runs the same loop on the segment-file log).
 *
 * A durable single-voter node (durable-node.ts) writes in a loop and prints each
 * acknowledgement; it is SIGKILLed at random moments, many rounds, on one data dir. After each
 * kill a fresh process opens the data dir and dumps the store: every acknowledged write must be
 * there with the version it was acknowledged with, and versions must follow commit order.
 * Then damage is planted on disk while the node is down:
 *   (a)  the newest LevelDB write-ahead log file is truncated and a byte near its end flipped;
 *   (a2) a log entry above the commit index fails its checksum: the tail is cut, the node goes on;
 *   (b)  the newest snapshot file fails its checksum: it is skipped, the older one plus the
 *        retained log give back every acknowledged write;
 *   (c)  a log entry at or below the commit index fails its checksum: the node refuses to start.
 *
 * CRASH_ROUNDS (default 12) sets the number of kill rounds, CRASH_SEED the seed of the random
 * kill moments and damage offsets (printed first, so a run's choices can be repeated; the
 * process timing itself is not deterministic).
 */
import { truncate } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { SeededRandom } from '../../src/base/index.js';
import { RAFT_LOG_DIR } from '../../src/platform/index.js';
import { flipByte, newestLevelDbLog, tempDir } from '../../src/platform/testing/index.js';
import { checkStore } from './checks.js';
import { ACK_TIMEOUT_MS, CrashRun } from './crash-run.js';
import type { VerifyReport } from './durable-node.js';
import { killAll, verify, Writer, type Ack } from './node-process.js';
import { damageEntry, levelDbLogRecords, plantTornEntry, readRawLog } from './raft-log-damage.js';

const ROUNDS = Number(process.env['CRASH_ROUNDS'] ?? 12);
const SEED = Number(process.env['CRASH_SEED'] ?? Date.now() % 2 ** 31);

const rng = new SeededRandom(SEED);
const { dir, remove } = await tempDir('crash');
t.comment(`seed ${SEED} (rerun with CRASH_SEED=${SEED}), ${ROUNDS} rounds, data dir ${dir}`);
t.teardown(async () => {
  killAll();
  if (t.passing()) await remove();
  else t.comment(`data dir kept for inspection: ${dir}`);
});

const run = new CrashRun(dir, rng, ['--log-store', 'level']);
const { outcomes } = run;

t.test(`SIGKILL at random moments, ${ROUNDS} rounds: every acknowledged write survives each restart`, async (t) => {
  for (let i = 0; i < ROUNDS; i++) {
    const w = await run.crashRound(t, 20, 400);
    const report = run.ok(t, await verify(dir), `round ${run.round}`);
    run.allAcksPresent(t, report, `round ${run.round} (killed after ${w.acks.length} acks)`);
    // The disk keeps the log back to the snapshot before the newest one, so either can start the node.
    const snaps = await run.snapshotFiles();
    const raw = await readRawLog(dir);
    const from = snaps[1]?.index ?? 0;
    t.ok(
      raw.firstIndex <= from + 1 && raw.lastIndex >= raw.commit,
      `round ${run.round}: the stored log ${raw.firstIndex}..${raw.lastIndex} covers everything after the older snapshot (${from}) up to the commit index ${raw.commit}`,
    );
  }
});

t.test('(a) a truncated and bit-flipped LevelDB write-ahead log: the node starts, consistent, losing only the newest writes', async (t) => {
  const w = await run.crashRound(t, 150, 400);
  const wal = await newestLevelDbLog(path.join(dir, RAFT_LOG_DIR));
  // Tear the last record (a few bytes off its end: LevelDB takes that for a write interrupted
  // by a crash and ignores it silently) and flip a byte inside the complete record before it
  // (LevelDB's checksum catches that one).
  const records = await levelDbLogRecords(wal.file);
  const last = records[records.length - 1];
  const prev = records[records.length - 2];
  if (last === undefined || prev === undefined || last.offset + 7 + last.length !== wal.size) {
    throw new Error(`${wal.file} (${wal.size} bytes) does not end in two whole records: ${JSON.stringify(records.slice(-2))}`);
  }
  const cut = rng.range(1, Math.min(8, last.length + 6));
  const flipAt = prev.offset + 7 + rng.int(prev.length);
  await truncate(wal.file, wal.size - cut);
  await flipByte(wal.file, flipAt);
  const flipBack = wal.size - cut - flipAt;
  const report = run.ok(t, await verify(dir), '(a)');
  t.ok(report.recovery.droppedBytes > 0, `LevelDB reported dropping the damaged record: ${report.recovery.messages.join('; ')}`);
  t.ok(
    report.warnings.some((w) => w.startsWith('LevelDB dropped damaged write-ahead-log records')),
    'the log store logged that LevelDB dropped data',
  );
  const c = checkStore(report, run.acked);
  t.same(c.problems, [], 'the store is internally consistent (names, data, distinct versions in commit order)');
  const missing = new Set(c.missing.map((m) => m.name));
  const firstLost = run.acked.findIndex((a) => missing.has(a.name));
  const lostSuffix = firstLost < 0 ? [] : run.acked.slice(firstLost);
  t.same(
    c.missing.map((m) => m.name),
    lostSuffix.map((a) => a.name),
    'only a suffix of the acknowledged writes (the newest, in commit order) can be lost: none from the middle',
  );
  const thisRound = new Set(w.acks.map((a) => a.name));
  const outcome =
    `(a) ${path.basename(wal.file)} (${wal.size} bytes, ${records.length} records) cut by ${cut} bytes and a byte flipped ${flipBack} before the new end ` +
    `(in the ${prev.length}-byte record before the torn one): LevelDB dropped ${report.recovery.droppedBytes} bytes (${report.recovery.messages.join('; ')}); ` +
    `${c.missing.length} acknowledged writes lost (${c.missing.filter((m) => thisRound.has(m.name)).length} of them from the ${w.acks.length} of the crashed round` +
    `${c.missing.length > 0 ? `, versions ${c.missing[0]?.version}..${c.missing[c.missing.length - 1]?.version}` : ''}); ` +
    `the node started from snapshot ${report.startup.loadedSnapshotIndex} with commit index ${report.startup.diskCommit} on disk, and now has log ${report.status.firstIndex}..${report.status.lastIndex}, commit ${report.status.commit}`;
  t.comment(outcome);
  outcomes.push(outcome);
  // Writes lost with fsynced bytes we destroyed are gone for good; later writes reuse their indexes.
  run.acked = run.acked.filter((a) => !missing.has(a.name));

  const after = await run.crashRound(t, 20, 200);
  run.allAcksPresent(t, run.ok(t, await verify(dir), '(a) next round'), `(a) the next round (${after.acks.length} acks) after the damage`);
});

t.test('(a2) a log entry above the commit index that fails its checksum: the tail is cut and the node carries on', async (t) => {
  // A kill lands about half the time between a synced entry batch and the (unsynced) commit
  // update that follows it, leaving entries above the commit index on disk: try a few rounds
  // for that, so a real entry is damaged; otherwise plant a torn entry after the last one.
  let raw = await run.crashRound(t, 50, 300).then(() => readRawLog(dir));
  for (let tries = 1; raw.lastIndex === raw.commit && tries < 4; tries++) raw = await run.crashRound(t, 20, 100).then(() => readRawLog(dir));
  let damaged: number;
  if (raw.lastIndex > raw.commit) {
    damaged = rng.range(raw.commit + 1, raw.lastIndex);
    await damageEntry(dir, damaged);
  } else {
    damaged = raw.lastIndex + 1;
    await plantTornEntry(dir, damaged);
  }
  const how = raw.lastIndex > raw.commit ? `flipped a bit in entry ${damaged}` : `planted a torn entry ${damaged}`;
  const report = run.ok(t, await verify(dir), '(a2)');
  t.ok(
    report.warnings.some((w) => w.startsWith('cut a torn or corrupt raft log tail above the commit index')),
    `the cut was logged: ${report.warnings.filter((w) => w.startsWith('cut')).join(' | ')}`,
  );
  // Not "none lost": acknowledged writes are committed and fsynced, but the commit index that
  // covers them may not be on disk yet when the ack goes out (the driver applies the committed
  // entries of a Ready while that Ready's hard state is being written), so entries above the
  // disk's commit index may be acknowledged ones (seen on the segment-file log: 8 of them). The
  // damage destroys fsynced data; only the newest acknowledged writes may go with it.
  const lost = run.onlyNewestLost(t, report);
  const outcome = `(a2) disk commit ${raw.commit}, last entry ${raw.lastIndex}: ${how}; ${lost.length} acknowledged writes cut with the tail`;
  t.comment(outcome);
  outcomes.push(outcome);

  const after = await run.crashRound(t, 20, 200);
  run.allAcksPresent(t, run.ok(t, await verify(dir), '(a2) next round'), `(a2) the next round (${after.acks.length} acks) writes over the cut tail`);
});

let lastReport: VerifyReport | undefined;

t.test('(b) a corrupt newest snapshot file is skipped; the older one plus the retained log give every acknowledged write', async (t) => {
  lastReport = await run.corruptNewestSnapshot(t, { expectSkipLogged: true });
});

t.test('(c) a log entry at or below the commit index that fails its checksum: the node refuses to start', async (t) => {
  if (lastReport === undefined) throw new Error('(b) did not leave a verified state to damage');
  const raw = await readRawLog(dir);
  const snapshotIndex = lastReport.startup.loadedSnapshotIndex;
  t.ok(raw.commit > snapshotIndex, `committed entries after the snapshot (${snapshotIndex}) are in the log (commit ${raw.commit})`);
  const damaged = rng.range(snapshotIndex + 1, raw.commit);
  await damageEntry(dir, damaged);
  for (const attempt of ['first', 'second']) {
    const v = await verify(dir);
    if (v.kind === 'ok') {
      t.fail(`(c) ${attempt} start: the node started on a damaged committed entry ${damaged}`);
      continue;
    }
    t.equal(v.exitCode, 3, `${attempt} start: exit code 3`);
    t.match(
      v.line,
      new RegExp(`^error CorruptLogError log entry ${damaged} fails its checksum at or below the commit index ${raw.commit} .*refusing to start`),
      `${attempt} start: a clear refusal naming the entry and the commit index`,
    );
    if (attempt === 'first') outcomes.push(`(c) flipped a bit in committed entry ${damaged} (snapshot ${snapshotIndex}, commit ${raw.commit}): "${v.line.slice(0, 260)}"`);
  }
});

t.test('(planted bug) a log store that acknowledges appends before writing them is caught', async (t) => {
  // A test that cannot fail proves nothing (STYLE.md): the same kill-and-verify loop, on a node
  // whose log store lies about durability, must find acknowledged writes missing.
  const planted = await tempDir('crash-planted');
  t.teardown(planted.remove);
  const all: Ack[] = [];
  const found: string[] = [];
  for (let r = 1; r <= 3 && found.length === 0; r++) {
    const w = new Writer(planted.dir, r, [...run.writerArgs, '--planted-bug', 'ack-before-write']);
    try {
      await w.waitForAcks(rng.range(100, 300), ACK_TIMEOUT_MS);
    } finally {
      await w.kill();
    }
    all.push(...w.acks);
    const v = await verify(planted.dir);
    if (v.kind === 'error') throw new Error(`planted bug: verify failed: ${v.line}`);
    const c = checkStore(v.report, all);
    t.same(c.problems, [], `round ${r}: what is stored is still consistent`);
    found.push(...c.missing.map((m) => `${m.name}@${m.version}`));
  }
  t.ok(found.length > 0, `the check reports acknowledged writes missing: ${found.length} (${found.slice(0, 3).join(', ')}...)`);
  outcomes.push(`(planted bug) a log store acknowledging appends 50 ms before writing them: ${found.length} acknowledged writes reported missing`);
});

t.test('summary', async (t) => {
  run.summary(t, SEED, ROUNDS);
});
