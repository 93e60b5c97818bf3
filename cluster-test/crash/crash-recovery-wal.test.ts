/**
 * Crash recovery with real processes and a real disk (ARCHITECTURE.md, test tier 3), on the
 * segment-file log (WalLogStore, the default store of a new data dir); crash-recovery.test.ts
 * runs the same loop on LevelDB.
 *
 * A durable single-voter node (durable-node.ts) writes in a loop and prints each
 * acknowledgement; it is SIGKILLed at random moments, many rounds, on one data dir. After each
 * kill a fresh process opens the data dir and dumps the store: every acknowledged write must be
 * there with the version it was acknowledged with, and versions must follow commit order.
 * Segments are small (64 KiB instead of 64 MiB), so every round rolls over to new segments,
 * prepares the next one in the background and deletes compacted ones: kills land in all of that.
 * Then damage is planted on disk while the node is down:
 *   (a)  the newest record is torn (zeros from a random byte of it on, as a power loss leaves a
 *        write): the node starts, consistent, losing at most the newest writes;
 *   (a2) a record holding entries above the commit index fails its checksum: the tail is cut,
 *        the node goes on;
 *   (b)  the newest snapshot file fails its checksum: it is skipped, the older one plus the
 *        retained log give back every acknowledged write;
 *   (c)  a record holding an entry at or below the commit index fails its checksum: the node
 *        refuses to start.
 *
 * CRASH_ROUNDS (default 10) sets the number of kill rounds, CRASH_SEED the seed of the random
 * kill moments and damage offsets (printed first, so a run's choices can be repeated; the
 * process timing itself is not deterministic).
 */
import path from 'node:path';
import t from 'tap';
import { SeededRandom } from '../../src/base/index.js';
import { tempDir, walSegments } from '../../src/platform/testing/index.js';
import { checkStore } from './checks.js';
import { ACK_TIMEOUT_MS, CrashRun } from './crash-run.js';
import type { VerifyReport } from './durable-node.js';
import { killAll, verify, Writer, type Ack } from './node-process.js';
import { damageWalEntry, plantTornRecord, preparedSegments, readRawWal, tearLastRecord } from './wal-damage.js';

const ROUNDS = Number(process.env['CRASH_ROUNDS'] ?? 10);
const SEED = Number(process.env['CRASH_SEED'] ?? Date.now() % 2 ** 31);
const SEGMENT_BYTES = 64 * 1024;
const WRITER_ARGS = ['--log-store', 'wal', '--wal-segment-bytes', String(SEGMENT_BYTES)];

const rng = new SeededRandom(SEED);
const { dir, remove } = await tempDir('crash-wal');
t.comment(`seed ${SEED} (rerun with CRASH_SEED=${SEED}), ${ROUNDS} rounds, ${SEGMENT_BYTES}-byte segments, data dir ${dir}`);
t.teardown(async () => {
  killAll();
  if (t.passing()) await remove();
  else t.comment(`data dir kept for inspection: ${dir}`);
});

/** What the log directory looked like right after each kill. */
const atKill: { round: number; segments: number; firstSeq: number; lastSeq: number; prepared: number }[] = [];
const seqOf = (file: string): number => Number.parseInt(path.basename(file).slice(0, 16), 16);
const run = new CrashRun(dir, rng, WRITER_ARGS, async (round) => {
  const segments = await walSegments(dir);
  atKill.push({ round, segments: segments.length, firstSeq: seqOf(segments[0] ?? ''), lastSeq: seqOf(segments[segments.length - 1] ?? ''), prepared: (await preparedSegments(dir)).length });
});
const { outcomes } = run;

t.test(`SIGKILL at random moments, ${ROUNDS} rounds: every acknowledged write survives each restart`, async (t) => {
  for (let i = 0; i < ROUNDS; i++) {
    const w = await run.crashRound(t, 20, 400);
    const report = run.ok(t, await verify(dir), `round ${run.round}`);
    t.equal(report.logStore, 'wal', `round ${run.round}: the node runs on the segment-file log`);
    run.allAcksPresent(t, report, `round ${run.round} (killed after ${w.acks.length} acks)`);
    // A SIGKILL loses nothing the kernel has (the page cache survives the process), but a
    // write() it interrupts may stop part way: that torn record is cut, nothing else is logged.
    // (The killed writer's LOCK file is always taken over.)
    const cuts = report.warnings.filter((m) => m.startsWith('cut a torn or corrupt raft log tail above the commit index'));
    const others = report.warnings.filter((m) => !cuts.includes(m) && !m.startsWith('taking over a stale data dir lock'));
    t.same(others, [], `round ${run.round}: no warning but a torn tail's cut`);
    if (cuts.length > 0) outcomes.push(`round ${run.round}: the kill tore a write, cut on restart: ${cuts.join(' | ')}`);
    // The disk keeps the log back to the snapshot before the newest one, so either can start the node.
    const snaps = await run.snapshotFiles();
    const raw = await readRawWal(dir);
    const from = snaps[1]?.index ?? 0;
    t.ok(
      raw.firstIndex <= from + 1 && raw.lastIndex >= raw.commit,
      `round ${run.round}: the stored log ${raw.firstIndex}..${raw.lastIndex} (${raw.segments} segments) covers everything after the older snapshot (${from}) up to the commit index ${raw.commit}`,
    );
  }
  const last = atKill[atKill.length - 1];
  t.ok(last !== undefined && last.lastSeq >= 3, `the log rolled over to new segments (segment ${last?.lastSeq} at the last kill)`);
  t.ok(atKill.some((k) => k.firstSeq > 0), 'compaction deleted old segments');
});

t.test('(a) a torn newest record: the node starts, consistent, losing at most the newest writes', async (t) => {
  const w = await run.crashRound(t, 150, 400);
  const { record, kept } = await tearLastRecord(dir, (length) => rng.range(8, length - 1));
  const report = run.ok(t, await verify(dir), '(a)');
  t.ok(
    report.warnings.some((m) => m.startsWith('cut a torn or corrupt raft log tail above the commit index')),
    `the cut was logged: ${report.warnings.filter((m) => m.startsWith('cut')).join(' | ')}`,
  );
  const lost = run.onlyNewestLost(t, report);
  const thisRound = new Set(w.acks.map((a) => a.name));
  const outcome =
    `(a) tore the newest record (${record.length} bytes at ${path.basename(record.file)}:${record.offset}, ` +
    `${record.count > 0 ? `entries ${record.firstIndex}..${record.firstIndex + record.count - 1}` : 'no entries'}, commit ${String(record.commit)}) after byte ${kept}: ` +
    `${lost.length} acknowledged writes lost (${lost.filter((m) => thisRound.has(m.name)).length} of them from the ${w.acks.length} of the crashed round); ` +
    `the node started from snapshot ${report.startup.loadedSnapshotIndex} with commit index ${report.startup.diskCommit} on disk, and now has log ${report.status.firstIndex}..${report.status.lastIndex}, commit ${report.status.commit}`;
  t.comment(outcome);
  outcomes.push(outcome);
  const after = await run.crashRound(t, 20, 200);
  run.allAcksPresent(t, run.ok(t, await verify(dir), '(a) next round'), `(a) the next round (${after.acks.length} acks) after the damage`);
});

t.test('(a2) a record holding entries above the commit index fails its checksum: the tail is cut and the node carries on', async (t) => {
  // A kill lands about half the time between a synced entry batch and the (unsynced) commit
  // update that follows it, leaving entries above the commit index on disk: try a few rounds
  // for that, so a real entry is damaged; otherwise plant a torn record after the last one.
  // The damaged record must have no record behind it that moves the commit index past the one
  // before it: the store refuses that (the record might have replaced entries now committed).
  const candidate = async (): Promise<{ raw: Awaited<ReturnType<typeof readRawWal>>; index: number | undefined }> => {
    const raw = await readRawWal(dir);
    const batches = raw.records.filter((r) => r.type === 'batch');
    for (let k = batches.length - 1; k >= 1; k--) {
      const r = batches[k];
      if (r === undefined || r.count === 0) continue;
      const last = r.firstIndex + r.count - 1;
      const before = batches[k - 1]?.commit ?? 0;
      const behind = batches.slice(k + 1).reduce((m, b) => Math.max(m, b.commit ?? 0), 0);
      return { raw, index: last > raw.commit && behind <= before ? last : undefined };
    }
    return { raw, index: undefined };
  };
  await run.crashRound(t, 50, 300);
  let c = await candidate();
  for (let tries = 1; c.index === undefined && tries < 4; tries++) {
    await run.crashRound(t, 20, 100);
    c = await candidate();
  }
  let how: string;
  if (c.index !== undefined) {
    const r = await damageWalEntry(dir, c.index);
    how = `flipped a bit in the record of entries ${r.firstIndex}..${r.firstIndex + r.count - 1}`;
  } else {
    await plantTornRecord(dir);
    how = 'planted a torn record after the newest one';
  }
  const report = run.ok(t, await verify(dir), '(a2)');
  t.ok(
    report.warnings.some((m) => m.startsWith('cut a torn or corrupt raft log tail above the commit index')),
    `the cut was logged: ${report.warnings.filter((m) => m.startsWith('cut')).join(' | ')}`,
  );
  // Acknowledged writes are committed and fsynced, but the commit index that covers them may
  // not be on disk yet when the ack goes out (the driver applies committed entries while the
  // write of that commit index runs), so a damaged record above the disk's commit index may
  // hold acknowledged writes: only the newest ones.
  const lost = run.onlyNewestLost(t, report);
  const outcome = `(a2) disk commit ${c.raw.commit}, last entry ${c.raw.lastIndex}: ${how}; ${lost.length} acknowledged writes cut with the tail`;
  t.comment(outcome);
  outcomes.push(outcome);
  const after = await run.crashRound(t, 20, 200);
  run.allAcksPresent(t, run.ok(t, await verify(dir), '(a2) next round'), `(a2) the next round (${after.acks.length} acks) writes over the cut tail`);
});

let lastReport: VerifyReport | undefined;

t.test('(b) a corrupt newest snapshot file is skipped; the older one plus the retained log give every acknowledged write', async (t) => {
  lastReport = await run.corruptNewestSnapshot(t, { expectSkipLogged: false });
});

t.test('(c) a record holding an entry at or below the commit index fails its checksum: the node refuses to start', async (t) => {
  if (lastReport === undefined) throw new Error('(b) did not leave a verified state to damage');
  const raw = await readRawWal(dir);
  const snapshotIndex = lastReport.startup.loadedSnapshotIndex;
  t.ok(raw.commit > snapshotIndex, `committed entries after the snapshot (${snapshotIndex}) are in the log (commit ${raw.commit})`);
  const damaged = rng.range(snapshotIndex + 1, raw.commit);
  const r = await damageWalEntry(dir, damaged);
  for (const attempt of ['first', 'second']) {
    const v = await verify(dir);
    if (v.kind === 'ok') {
      t.fail(`(c) ${attempt} start: the node started on a damaged committed entry ${damaged}`);
      continue;
    }
    t.equal(v.exitCode, 3, `${attempt} start: exit code 3`);
    t.match(
      v.line,
      /^error CorruptLogError the raft log is damaged in \S+\.wal at offset \d+ \(a record fails its checksum\): .*(at or below the commit index|above the commit index \d+ known before it).*refusing to start/,
      `${attempt} start: a clear refusal naming the segment, the offset and the commit index`,
    );
    if (attempt === 'first') outcomes.push(`(c) flipped a bit in the record of committed entries ${r.firstIndex}..${r.firstIndex + r.count - 1} (snapshot ${snapshotIndex}, commit ${raw.commit}): "${v.line.slice(0, 300)}"`);
  }
});

t.test('(planted bug) a log store that acknowledges appends before writing them is caught', async (t) => {
  // A test that cannot fail proves nothing (STYLE.md): the same kill-and-verify loop, on a node
  // whose log store lies about durability, must find acknowledged writes missing.
  const planted = await tempDir('crash-wal-planted');
  t.teardown(planted.remove);
  const all: Ack[] = [];
  const found: string[] = [];
  for (let r = 1; r <= 3 && found.length === 0; r++) {
    const w = new Writer(planted.dir, r, [...WRITER_ARGS, '--planted-bug', 'ack-before-write']);
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
  t.comment(
    `segments at each kill (round: count, first..last sequence number${atKill.some((k) => k.prepared > 0) ? ', + a prepared .tmp' : ''}): ` +
      atKill.map((k) => `r${k.round}: ${k.segments}, ${k.firstSeq}..${k.lastSeq}${k.prepared > 0 ? ' +tmp' : ''}`).join('; '),
  );
  t.comment(`kills that found a next segment prepared or being prepared (.tmp): ${atKill.filter((k) => k.prepared > 0).length} of ${atKill.length}`);
  run.summary(t, SEED, ROUNDS);
});
