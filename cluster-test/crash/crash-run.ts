/**
 * The kill-and-verify loop of the crash-recovery tests (crash-recovery.test.ts on LevelDB,
 * crash-recovery-wal.test.ts on the segment-file log), shared: one data dir, writers SIGKILLed
 * at random moments, a verify after each, and the bookkeeping of every acknowledged write that
 * must survive.
 */
import { readdir, stat } from 'node:fs/promises';
import path from 'node:path';
import type { Test } from 'tap';
import type { SeededRandom } from '../../src/base/index.js';
import { SNAPSHOTS_DIR } from '../../src/platform/index.js';
import { flipByte } from '../../src/platform/testing/index.js';
import { checkAckOrder, checkStore } from './checks.js';
import type { VerifyReport } from './durable-node.js';
import { verify, Writer, type Ack, type VerifyOutcome } from './node-process.js';

export const ACK_TIMEOUT_MS = 30_000;

export interface SnapshotFile {
  readonly name: string;
  readonly index: number;
  readonly file: string;
}

export class CrashRun {
  /** Every write acknowledged so far that must still be stored, in acknowledgement order. */
  acked: Ack[] = [];
  /** Writes acknowledged after this must carry higher versions (the last verified commit index). */
  floor = 0;
  round = 0;
  snapshotsTaken = 0;
  readonly snapshotFilesSeen = new Set<string>();
  readonly kills: string[] = [];
  readonly writerStarts: { openMs: number; leadMs: number }[] = [];
  readonly verifies: { openAndReplayMs: number; leadMs: number; processMs: number; replayed: number }[] = [];
  readonly outcomes: string[] = [];

  /**
   * `writerArgs`: extra flags for every writer (the log store, its segment size). `afterKill`
   * looks at the data dir while the killed writer's files are exactly as it left them.
   */
  constructor(
    readonly dir: string,
    private readonly rng: SeededRandom,
    readonly writerArgs: readonly string[],
    private readonly afterKill: (round: number) => Promise<void> = async () => {},
  ) {}

  /** Starts a writer, lets it acknowledge between `min` and `max` writes, SIGKILLs it. */
  async crashRound(t: Test, min: number, max: number): Promise<Writer> {
    this.round++;
    const round = this.round;
    const target = this.rng.range(min, max);
    const w = new Writer(this.dir, round, this.writerArgs);
    try {
      await w.waitForAcks(target, ACK_TIMEOUT_MS);
    } catch (e) {
      await w.kill(); // never leave a writer holding the data dir for the next round
      throw e;
    }
    // A random few ms more, so the kill is not always just after an ack was printed (the node
    // is then mostly between a commit update and its next batch) but anywhere in its cycle.
    const jitterMs = this.rng.int(12);
    if (jitterMs > 0) await new Promise<void>((resolve) => setTimeout(resolve, jitterMs));
    const { signal } = await w.kill();
    t.equal(signal, 'SIGKILL', `round ${round}: the writer died of the SIGKILL`);
    t.same(w.other, [], `round ${round}: the writer printed nothing unexpected`);
    t.same(checkAckOrder(w.acks, this.floor), [], `round ${round}: ack versions strictly increase, above the last verified commit ${this.floor}`);
    this.acked.push(...w.acks);
    this.snapshotsTaken += w.snapshotsTaken();
    if (w.ready) this.writerStarts.push({ openMs: w.ready.openMs, leadMs: w.ready.leadMs });
    this.kills.push(`r${round}: ${w.acksAtKill ?? 0} acks read (target ${target}, +${jitterMs} ms) at ${Math.round(w.killedAtMs ?? 0)} ms, ${w.acks.length} in all`);
    for (const name of await readdir(path.join(this.dir, SNAPSHOTS_DIR))) if (name.endsWith('.snap')) this.snapshotFilesSeen.add(name);
    await this.afterKill(round);
    return w;
  }

  /** The report of a verify that must succeed; records its timings. */
  ok(t: Test, v: VerifyOutcome, what: string): VerifyReport {
    if (v.kind === 'error') {
      t.fail(`${what}: verify failed with exit ${String(v.exitCode)}: ${v.line}`, { stderr: v.stderr.slice(-3000) });
      throw new Error(`${what}: the node did not start`);
    }
    const s = v.report.startup;
    this.verifies.push({ openAndReplayMs: s.openAndReplayMs, leadMs: s.leadMs, processMs: Math.round(v.ms), replayed: s.diskCommit - s.loadedSnapshotIndex });
    this.floor = v.report.status.commit;
    return v.report;
  }

  /** Every acknowledged write is stored, at its acknowledged version; the store is consistent. */
  allAcksPresent(t: Test, report: VerifyReport, what: string): void {
    const c = checkStore(report, this.acked);
    const problems = [...c.problems, ...c.missing.map((m) => `acknowledged ${m.name} (version ${m.version}) is missing`)];
    t.same(problems, [], `${what}: all ${this.acked.length} acknowledged writes present (${report.resources.length} stored, ${c.unacked} never acknowledged), consistent`);
  }

  /**
   * After damage that may destroy fsynced data: the store is consistent and only a suffix of
   * the acknowledged writes (the newest, in commit order) is missing. Those are dropped from
   * what later rounds require (later writes reuse their indexes). Returns the lost ones.
   */
  onlyNewestLost(t: Test, report: VerifyReport): Ack[] {
    const c = checkStore(report, this.acked);
    t.same(c.problems, [], 'the store is internally consistent (names, data, distinct versions in commit order)');
    const missing = new Set(c.missing.map((m) => m.name));
    const firstLost = this.acked.findIndex((a) => missing.has(a.name));
    const lostSuffix = firstLost < 0 ? [] : this.acked.slice(firstLost);
    t.same(
      c.missing.map((m) => m.name),
      lostSuffix.map((a) => a.name),
      'only a suffix of the acknowledged writes (the newest, in commit order) can be lost: none from the middle',
    );
    this.acked = this.acked.filter((a) => !missing.has(a.name));
    return c.missing;
  }

  async snapshotFiles(): Promise<SnapshotFile[]> {
    const names = (await readdir(path.join(this.dir, SNAPSHOTS_DIR))).filter((n) => /^snap-\d{20}-\d+\.snap$/.test(n));
    return names.map((name) => ({ name, index: Number(name.slice(5, 25)), file: path.join(this.dir, SNAPSHOTS_DIR, name) })).sort((a, b) => b.index - a.index);
  }

  /**
   * Case (b), the same on every log store: with two snapshot files on disk, a byte of the newest
   * is flipped; the node must fall back to the older one plus the retained log, set the corrupt
   * one aside and lose nothing; then one more round runs. Returns that round's verified report.
   */
  async corruptNewestSnapshot(t: Test, o: { readonly expectSkipLogged: boolean }): Promise<VerifyReport> {
    const dir = this.dir;
    for (let tries = 0; (await this.snapshotFiles()).length < 2 && tries < 5; tries++) {
      await this.crashRound(t, 300, 400);
      this.ok(t, await verify(dir), '(b) building snapshots');
    }
    const baseline = this.ok(t, await verify(dir), '(b) baseline');
    this.allAcksPresent(t, baseline, '(b) before the damage');
    const [newest, older] = await this.snapshotFiles();
    if (newest === undefined || older === undefined) throw new Error('fewer than two snapshot files to work with');
    t.equal(baseline.startup.loadedSnapshotIndex, newest.index, `the baseline started from the newest snapshot, ${newest.index}`);
    const size = (await stat(newest.file)).size;
    const back = this.rng.range(1, 16);
    await flipByte(newest.file, size - back);
    const report = this.ok(t, await verify(dir), '(b)');
    t.equal(report.startup.loadedSnapshotIndex, older.index, `it started from the older snapshot, ${older.index}`);
    if (o.expectSkipLogged) {
      t.ok(
        report.warnings.some((w) => w.startsWith('skipped a corrupt snapshot file')),
        `the skip was logged: ${report.warnings.filter((w) => w.startsWith('skipped')).join(' | ')}`,
      );
    }
    t.ok((await readdir(path.join(dir, SNAPSHOTS_DIR))).includes(`${newest.name}.corrupt`), 'the corrupt file was set aside as .corrupt');
    t.same(report.resources, baseline.resources, 'the same resources, versions and data as before the damage');
    this.allAcksPresent(t, report, '(b) after falling back');
    const outcome = `(b) flipped a byte ${back} before the end of ${newest.name} (${size} bytes): fell back to snapshot ${older.index} and replayed ${report.startup.diskCommit - older.index} log entries (open + replay ${report.startup.openAndReplayMs} ms)`;
    t.comment(outcome);
    this.outcomes.push(outcome);

    const after = await this.crashRound(t, 20, 200);
    const last = this.ok(t, await verify(dir), '(b) next round');
    this.allAcksPresent(t, last, `(b) the next round (${after.acks.length} acks) after the fallback`);
    return last;
  }

  summary(t: Test, seed: number, rounds: number): void {
    const med = (xs: number[]): number => {
      const s = [...xs].sort((a, b) => a - b);
      return s.length === 0 ? 0 : (s[Math.floor(s.length / 2)] ?? 0);
    };
    const max = (xs: number[]): number => xs.reduce((a, b) => Math.max(a, b), 0);
    const stat2 = (xs: number[]): string => `median ${med(xs)} ms, max ${max(xs)} ms`;
    t.comment(`seed ${seed}; ${this.round} writer processes SIGKILLed (${rounds} plain rounds + the damage cases); ${this.acked.length} acknowledged writes still required at the end`);
    t.comment(`kill moments: ${this.kills.join('; ')}`);
    t.comment(`snapshots taken by writers: ${this.snapshotsTaken}; distinct snapshot files seen: ${this.snapshotFilesSeen.size}`);
    t.comment(`writer start (Replica.open): ${stat2(this.writerStarts.map((s) => s.openMs))}; to leadership: ${stat2(this.writerStarts.map((s) => s.leadMs))}`);
    t.comment(
      `restart (verify, ${this.verifies.length} runs): open + replay ${stat2(this.verifies.map((v) => v.openAndReplayMs))} ` +
        `(median ${med(this.verifies.map((v) => v.replayed))} entries after the snapshot); lead + read index ${stat2(this.verifies.map((v) => v.leadMs))}; ` +
        `whole process ${stat2(this.verifies.map((v) => v.processMs))}`,
    );
    for (const o of this.outcomes) t.comment(o);
    t.ok(this.snapshotsTaken > 0, 'snapshots were taken during the run, so crashes met snapshot files');
  }
}
