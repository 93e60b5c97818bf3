/**
 * RaftLog: positions, append and truncation (Raft §5.3), the follower's AppendEntries
 * (consistency check, conflicts, commit), fast backtracking, durability and apply tracking,
 * compaction and snapshot restore (§7), and the configuration history that a truncation must
 * revert (thesis §4.1). Ends with a property test against a naive array model.
 */
import fc from 'fast-check';
import t from 'tap';
import { AssertionError, logIndex, nodeId, term, type LogIndex, type Term } from '../base/index.js';
import { EMPTY_CONFIG, encodeConfigEntry, makeConfig } from './config.js';
import { RaftLog } from './log.js';
import { encodeCommand } from './testing/cluster.js';
import type { Config, Entry, Snapshot } from './types.js';

const cfg = (...voters: string[]): Config => makeConfig(voters.map((v) => ({ id: nodeId(v), suffrage: 'voter' as const, address: `${v}:1` })));
const C1 = cfg('a');
const C2 = cfg('a', 'b');
const C3 = cfg('a', 'b', 'c');

/** A command entry (index, term). */
function e(index: number, tm: number, text = `t${tm}i${index}`): Entry {
  return { index: logIndex(index), term: term(tm), data: encodeCommand(text) };
}

/** A config entry carrying `config`. */
function ce(index: number, tm: number, config: Config): Entry {
  return { index: logIndex(index), term: term(tm), data: encodeConfigEntry({ change: { type: 'bootstrap' }, config }) };
}

/** Entries with these terms at 1, 2, ... */
function terms(...ts: number[]): Entry[] {
  return ts.map((tm, k) => e(k + 1, tm));
}

function snap(index: number, tm: number, config: Config = C1): Snapshot {
  return { meta: { index: logIndex(index), term: term(tm), config }, data: new TextEncoder().encode(`snap@${index}`) };
}

const L = (i: number): LogIndex => logIndex(i);
const Tm = (i: number): Term => term(i);

/** (index, term) pairs of the whole log, from the first index to the last. */
function shape(log: RaftLog): Array<[number, number | undefined]> {
  const out: Array<[number, number | undefined]> = [];
  for (let i = log.firstIndex(); i <= log.lastIndex(); i++) out.push([i, log.term(i)]);
  return out;
}

t.test('an empty log', async (t) => {
  const log = new RaftLog(EMPTY_CONFIG, undefined, [], L(0));
  t.same([log.firstIndex(), log.lastIndex(), log.lastTerm(), log.committed, log.applied, log.stabled], [1, 0, 0, 0, 0, 0]);
  t.equal(log.term(0), 0, 'index 0 has term 0 (the empty prefix matches everything)');
  t.equal(log.term(1), undefined, 'index 1 is beyond the end');
  t.equal(log.matchTerm(0, 0), true);
  t.same(log.unstableEntries(), []);
  t.same(log.nextCommittedEntries(), []);
});

t.test('a log restarts from a snapshot and persisted entries', async (t) => {
  const log = new RaftLog(EMPTY_CONFIG, snap(5, 2, C2), [e(4, 2), e(5, 2), e(6, 3), e(7, 3)], L(6));
  t.same([log.firstIndex(), log.lastIndex(), log.lastTerm()], [6, 7, 3], 'entries the snapshot covers are skipped');
  t.same([log.committed, log.applied, log.stabled], [6, 5, 7], 'applied starts at the snapshot, everything on disk is durable');
  t.same([log.term(5), log.term(4)], [2, undefined], 'the snapshot point keeps its term, below it is gone');
  t.same(log.config(), C2, 'the configuration comes from the snapshot');
  t.same(log.nextCommittedEntries().map((x) => x.index), [6], 'entry 6 is committed and not applied yet');
  t.throws(() => new RaftLog(EMPTY_CONFIG, undefined, [e(1, 1), e(3, 1)], L(0)), AssertionError, 'a gap in the persisted log is corruption');
  t.throws(() => new RaftLog(EMPTY_CONFIG, undefined, [e(1, 1)], L(2)), AssertionError, 'a commit index beyond the log is corruption');
  const low = new RaftLog(EMPTY_CONFIG, snap(5, 2), [], L(3));
  t.equal(low.committed, 5, 'the commit index is at least the snapshot index');
});

t.test('§5.3 append: after the end, or over a conflicting suffix; never over a committed entry, never leaving a gap', async (t) => {
  const log = new RaftLog(EMPTY_CONFIG, undefined, terms(1, 1, 2), L(1));
  log.append([e(4, 2), e(5, 3)]);
  t.same(shape(log), [[1, 1], [2, 1], [3, 2], [4, 2], [5, 3]]);
  t.same(log.unstableEntries().map((x) => x.index), [4, 5], 'new entries are not durable yet');
  log.append([e(3, 4)]);
  t.same(shape(log), [[1, 1], [2, 1], [3, 4]], 'appending at 3 truncates 3.. first');
  t.same(log.unstableEntries().map((x) => [x.index, x.term]), [[3, 4]], 'and the durable index drops below the truncation');
  t.equal(log.stabled, 2);
  log.append([]);
  t.equal(log.lastIndex(), 3, 'appending nothing changes nothing');
  t.throws(() => log.append([e(1, 5)]), AssertionError, 'refuses to overwrite committed entry 1');
  t.throws(() => log.append([e(5, 5)]), AssertionError, 'refuses to leave a gap at 4');
});

t.test('§5.3 maybeAppend: the consistency check, conflict truncation, and commit = min(leader commit, last new)', async (t) => {
  // [what, prevIndex, prevTerm, commit, entries, result, log after, commit after]
  const cases: Array<[string, number, number, number, Entry[], number | undefined, Array<[number, number]>, number]> = [
    ['prev term mismatch', 2, 2, 3, [e(3, 2)], undefined, [[1, 1], [2, 1], [3, 2]], 1],
    ['prev beyond the end', 4, 2, 3, [e(5, 2)], undefined, [[1, 1], [2, 1], [3, 2]], 1],
    ['heartbeat-like, nothing new', 3, 2, 3, [], 3, [[1, 1], [2, 1], [3, 2]], 3],
    ['commit capped by the last new entry', 1, 1, 3, [], 1, [[1, 1], [2, 1], [3, 2]], 1],
    ['new entries after the end', 3, 2, 4, [e(4, 3), e(5, 3)], 5, [[1, 1], [2, 1], [3, 2], [4, 3], [5, 3]], 4],
    ['entries already present', 1, 1, 2, [e(2, 1), e(3, 2)], 3, [[1, 1], [2, 1], [3, 2]], 2],
    ['conflict at 3', 2, 1, 9, [e(3, 3), e(4, 3)], 4, [[1, 1], [2, 1], [3, 3], [4, 3]], 4],
    ['a shorter, matching append keeps the rest', 1, 1, 1, [e(2, 1)], 2, [[1, 1], [2, 1], [3, 2]], 1],
  ];
  for (const [what, pi, pt, commit, ents, want, after, commitAfter] of cases) {
    const log = new RaftLog(EMPTY_CONFIG, undefined, terms(1, 1, 2), L(1));
    t.equal(log.maybeAppend(L(pi), Tm(pt), L(commit), ents), want, `${what}: returns ${String(want)}`);
    t.same(shape(log), after, `${what}: log`);
    t.equal(log.committed, commitAfter, `${what}: commit ${commitAfter}`);
  }
  const log = new RaftLog(EMPTY_CONFIG, undefined, terms(1, 1, 2), L(3));
  t.throws(() => log.maybeAppend(L(1), Tm(1), L(3), [e(2, 5)]), AssertionError, 'a conflict with a committed entry is a broken invariant');
});

t.test('§5.3 findConflictByTerm: the last index <= i whose term is <= t (fast backtracking)', async (t) => {
  // Log terms: 1 1 2 2 2 4 4 (indexes 1..7)
  const log = new RaftLog(EMPTY_CONFIG, undefined, terms(1, 1, 2, 2, 2, 4, 4), L(0));
  const cases: Array<[number, number, [number, number]]> = [
    [7, 4, [7, 4]],
    [7, 3, [5, 2]],
    [9, 3, [5, 2]], // beyond the end: start at the last entry
    [5, 5, [5, 2]],
    [4, 1, [2, 1]],
    [7, 1, [2, 1]],
    [7, 0, [0, 0]],
    [0, 3, [0, 0]],
  ];
  for (const [i, tm, want] of cases) {
    const got = log.findConflictByTerm(i, tm);
    t.same([got.index, got.term], want, `(${i}, ${tm}) -> (${want.join(', ')})`);
  }
  const compacted = new RaftLog(EMPTY_CONFIG, snap(3, 2), [e(4, 3), e(5, 3)], L(3));
  const got = compacted.findConflictByTerm(5, 1);
  t.same([got.index, got.term], [3, 2], 'it stops at the compaction point, which is committed and so matches any leader');
});

t.test('§5.4.1 isUpToDate: a higher last term wins, then a longer log', async (t) => {
  const log = new RaftLog(EMPTY_CONFIG, undefined, terms(1, 2, 2), L(0)); // last (3, t2)
  const cases: Array<[number, number, boolean]> = [
    [3, 2, true],
    [4, 2, true],
    [2, 2, false],
    [1, 3, true],
    [9, 1, false],
  ];
  for (const [li, lt, want] of cases) t.equal(log.isUpToDate(li, lt), want, `candidate (${li}, t${lt}): ${want}`);
});

t.test('stableTo: entries become durable only if they are still in the log with that term', async (t) => {
  const log = new RaftLog(EMPTY_CONFIG, undefined, terms(1), L(0));
  log.append([e(2, 1), e(3, 1)]);
  log.stableTo(L(3), Tm(1));
  t.equal(log.stabled, 3);
  t.same(log.unstableEntries(), []);
  log.append([e(4, 2), e(5, 2)]);
  log.append([e(4, 3)]); // 4 and 5 of term 2 replaced before the driver finished writing them
  log.stableTo(L(5), Tm(2));
  t.equal(log.stabled, 3, 'an acknowledgement for entries since replaced (5, t2) is ignored');
  log.stableTo(L(4), Tm(2));
  t.equal(log.stabled, 3, 'so is (4, t2): entry 4 is now term 3');
  log.stableTo(L(4), Tm(3));
  t.equal(log.stabled, 4, '(4, t3) is durable');
  log.stableTo(L(2), Tm(1));
  t.equal(log.stabled, 4, 'the durable index never goes back');
});

t.test('nextCommittedEntries: committed and durable, not yet applied', async (t) => {
  const log = new RaftLog(EMPTY_CONFIG, undefined, terms(1, 1), L(0));
  log.append([e(3, 1), e(4, 1)]);
  log.commitTo(L(4));
  t.same(log.nextCommittedEntries().map((x) => x.index), [1, 2], 'entries 3, 4 are committed but not durable here yet');
  t.equal(log.hasNextCommittedEntries(), true);
  log.appliedTo(L(2));
  t.same(log.nextCommittedEntries(), []);
  t.equal(log.hasNextCommittedEntries(), false);
  log.stableTo(L(4), Tm(1));
  t.same(log.nextCommittedEntries().map((x) => x.index), [3, 4]);
  t.throws(() => log.appliedTo(L(5)), AssertionError, 'cannot apply beyond the commit index');
  t.equal(log.commitTo(L(3)), false, 'commitTo never goes back');
  t.throws(() => log.commitTo(L(9)), AssertionError, 'cannot commit beyond the log');
});

t.test('slice honours maxBytes but always returns at least one entry', async (t) => {
  const log = new RaftLog(EMPTY_CONFIG, undefined, [e(1, 1, 'aaaa'), e(2, 1, 'bbbb'), e(3, 1, 'cccc')], L(0)); // 5 bytes each
  t.same(log.slice(1, 4, 1).map((x) => x.index), [1], 'one entry even if it is larger than the limit');
  t.same(log.slice(1, 4, 10).map((x) => x.index), [1, 2]);
  t.same(log.slice(1, 4, 100).map((x) => x.index), [1, 2, 3]);
  t.same(log.slice(2, 9, 100).map((x) => x.index), [2, 3], 'hi is capped at the end');
});

t.test('§7 compact drops the entries a snapshot covers and keeps the snapshot with the configuration at its index', async (t) => {
  const log = new RaftLog(C1, undefined, [e(1, 1), ce(2, 1, C2), e(3, 2), ce(4, 2, C3), e(5, 2)], L(5));
  t.throws(() => log.compact(L(3), new Uint8Array()), AssertionError, 'not beyond the applied index');
  log.appliedTo(L(5));
  const s = log.compact(L(3), new TextEncoder().encode('s3'));
  t.same([s.meta.index, s.meta.term], [3, 2]);
  t.same(s.meta.config, C2, 'the snapshot carries the configuration in force at 3');
  t.same([log.firstIndex(), log.lastIndex(), log.term(3), log.term(2)], [4, 5, 2, undefined]);
  t.same(log.config(), C3, 'the latest configuration (entry 4) is still in force');
  t.same(log.configAt(3), C2, 'and the one at the compaction point is kept as the base');
  t.same(log.snapshot, { meta: s.meta, size: 2, data: s.data }, 'the log keeps the snapshot to send to followers');
  t.equal(log.snapshot?.data, s.data, 'with its bytes');
  t.equal(log.releaseSnapshotData(L(2)), undefined, 'a release names the snapshot it means: not another index');
  t.same(log.releaseSnapshotData(L(3)), { meta: s.meta, size: 2, data: undefined }, 'released: its bytes forgotten, their count kept');
  t.same(log.snapshot, { meta: s.meta, size: 2, data: undefined });
  t.equal(log.releaseSnapshotData(L(3)), undefined, 'a second release does nothing');
  t.throws(() => log.compact(L(3), new Uint8Array()), AssertionError, 'not at or before the current compaction point');

  const log2 = new RaftLog(C1, undefined, terms(1, 1, 2, 2, 2, 3), L(6));
  log2.appliedTo(L(6));
  const s2 = log2.compact(L(5), new Uint8Array(), 2);
  t.same([s2.meta.index, log2.firstIndex(), log2.term(3)], [5, 4, 2], 'with retain 2 the snapshot is at 5 but entries 4 and 5 stay in the log');

  const log3 = new RaftLog(C1, undefined, terms(1, 1, 2), L(3));
  log3.appliedTo(L(3));
  log3.append([e(4, 2)]);
  t.throws(() => log3.compact(L(4), new Uint8Array()), AssertionError, 'not beyond the applied index');
});

t.test('§7 compact keeps at most `retain` entries behind the snapshot, and of them at most `retainBytes` of entry data', async (t) => {
  // Entries of 10, 20, 30, 40, 50 and 60 bytes at 1..6.
  const sized = (i: number): Entry => ({ index: logIndex(i), term: term(1), data: new Uint8Array(10 * i) });
  const fresh = (): RaftLog => {
    const log = new RaftLog(C1, undefined, [1, 2, 3, 4, 5, 6].map(sized), L(6));
    log.appliedTo(L(6));
    return log;
  };
  const a = fresh();
  a.compact(L(5), new Uint8Array(), 4, 90);
  t.same([a.firstIndex(), a.lastIndex()], [4, 6], 'entries 4 and 5 (90 B) fit 90 bytes, 3 more would not: 4 and 5 stay behind the snapshot');
  const b = fresh();
  b.compact(L(5), new Uint8Array(), 4, 89);
  t.same([b.firstIndex(), b.lastIndex()], [5, 6], 'with 89 bytes only entry 5 stays (4 and 5 are 90 B)');
  const c = fresh();
  c.compact(L(5), new Uint8Array(), 4, 49);
  t.same(c.firstIndex(), 6, 'an entry larger than the budget is not kept: nothing behind the snapshot');
  const d = fresh();
  d.compact(L(5), new Uint8Array(), 2, 1_000);
  t.same(d.firstIndex(), 4, 'the entry count still bounds it when the bytes would allow more');
  const e2 = fresh();
  e2.compact(L(5), new Uint8Array(), 4);
  t.same(e2.firstIndex(), 2, 'without a byte budget: the last 4 entries up to 5');
});

t.test('§7 restore replaces the log with a snapshot; nothing is applied from the log until the driver installs it', async (t) => {
  const log = new RaftLog(C1, undefined, terms(1, 1, 2, 2), L(2));
  log.appliedTo(L(2));
  log.restore(snap(10, 4, C3));
  t.same([log.firstIndex(), log.lastIndex(), log.lastTerm(), log.committed, log.stabled], [11, 10, 4, 10, 10]);
  t.same(log.config(), C3, 'the configuration comes from the snapshot');
  t.equal(log.pendingSnapshot?.meta.index, 10, 'the driver must persist and install it');
  t.same(log.nextCommittedEntries(), [], 'nothing to apply while it is pending');
  t.equal(log.hasNextCommittedEntries(), false);
  log.append([e(11, 4)]);
  log.commitTo(L(11));
  log.stableTo(L(11), Tm(4));
  t.same(log.nextCommittedEntries(), [], 'still nothing, even for entries after it');
  t.equal(log.releaseSnapshotData(L(10)), undefined, 'an incoming snapshot keeps its bytes until it is installed');
  t.ok(log.snapshot?.data !== undefined);
  log.snapshotInstalled(L(10));
  t.equal(log.releaseSnapshotData(L(10))?.data, undefined, 'installed, they may go');
  t.same([log.applied, log.pendingSnapshot], [10, undefined], 'installed: applied jumps to 10');
  t.same(log.nextCommittedEntries().map((x) => x.index), [11]);
});

t.test('§4.1 the configuration is the latest in the log, committed or not, and a truncation reverts it', async (t) => {
  const log = new RaftLog(C1, undefined, [e(1, 1)], L(1));
  t.same([log.config(), log.configIndex()], [C1, 0], 'the base configuration');
  log.append([ce(2, 1, C2), e(3, 1)]);
  t.same([log.config(), log.configIndex()], [C2, 2], 'in force as soon as it is appended');
  log.append([ce(4, 1, C3)]);
  t.same([log.config(), log.configIndex()], [C3, 4]);
  t.same([log.configAt(1), log.configAt(2), log.configAt(3), log.configAt(4)], [C1, C2, C2, C3]);
  log.append([e(4, 2)]);
  t.same([log.config(), log.configIndex()], [C2, 2], 'truncating entry 4 reverts to the configuration of entry 2');
  t.equal(log.maybeAppend(L(1), Tm(1), L(1), [e(2, 3)]), 2, 'a conflicting append over entry 2 is accepted');
  t.same([log.config(), log.configIndex()], [C1, 0], 'a conflicting append over entry 2 reverts to the base');
  log.restore(snap(10, 4, C3));
  t.same([log.config(), log.configIndex()], [C3, 10]);
});

// ---------------------------------------------------------------------------------------------
// Property: random appends, conflicting AppendEntries, commits, durability, applies and
// compactions against a naive model that keeps the whole log in a plain array.
// ---------------------------------------------------------------------------------------------

const CONFIGS = [C1, C2, C3];

interface Model {
  entries: Entry[]; // after prev, contiguous
  prev: number;
  prevTerm: number;
  committed: number;
  stabled: number;
  applied: number;
  curTerm: number;
  baseConfig: Config;
}

const modelLast = (m: Model): number => m.prev + m.entries.length;
const modelTerm = (m: Model, i: number): number | undefined => (i === m.prev ? m.prevTerm : i < m.prev || i > modelLast(m) ? undefined : m.entries[i - m.prev - 1]?.term);
function modelConfigAt(m: Model, i: number): Config {
  let c = m.baseConfig;
  for (const x of m.entries) if (x.index <= i && x.data[0] === 0x02) c = CONFIGS[(x.index + x.term) % 3] as Config;
  return c;
}
function newEntry(index: number, tm: number, isConfig: boolean): Entry {
  return isConfig ? ce(index, tm, CONFIGS[(index + tm) % 3] as Config) : e(index, tm, `p${index}/${tm}`);
}

type Op =
  | { kind: 'append'; at: number; count: number; bump: boolean; config: boolean }
  | { kind: 'follower-append'; prev: number; keep: number; count: number; bump: boolean; config: boolean; mismatch: boolean; commit: number }
  | { kind: 'commit'; pick: number }
  | { kind: 'stable' }
  | { kind: 'stale-stable'; pick: number }
  | { kind: 'apply' }
  | { kind: 'compact'; pick: number };

const opArb: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ kind: fc.constant('append' as const), at: fc.nat(), count: fc.integer({ min: 1, max: 4 }), bump: fc.boolean(), config: fc.boolean() }),
  fc.record({
    kind: fc.constant('follower-append' as const),
    prev: fc.nat(),
    keep: fc.nat(4),
    count: fc.nat(3),
    bump: fc.boolean(),
    config: fc.boolean(),
    mismatch: fc.boolean(),
    commit: fc.nat(),
  }),
  fc.record({ kind: fc.constant('commit' as const), pick: fc.nat() }),
  fc.constant({ kind: 'stable' as const }),
  fc.record({ kind: fc.constant('stale-stable' as const), pick: fc.nat() }),
  fc.constant({ kind: 'apply' as const }),
  fc.record({ kind: fc.constant('compact' as const), pick: fc.nat() }),
);

/** Applies `op` to both; returns a description of a disagreement, or undefined. */
function step(log: RaftLog, m: Model, op: Op): string | undefined {
  switch (op.kind) {
    case 'append': {
      const lo = m.committed + 1;
      const at = lo + (op.at % (modelLast(m) + 1 - lo + 1));
      if (op.bump) m.curTerm++;
      const ents = Array.from({ length: op.count }, (_, k) => newEntry(at + k, m.curTerm, op.config && k === 0));
      log.append(ents);
      m.entries = m.entries.filter((x) => x.index < at).concat(ents);
      m.stabled = Math.min(m.stabled, at - 1);
      return undefined;
    }
    case 'follower-append': {
      const p = m.prev + (op.prev % (modelLast(m) - m.prev + 1));
      const pt = modelTerm(m, p) as number;
      const keep = Math.min(op.keep, modelLast(m) - p);
      if (op.bump) m.curTerm++;
      const ents = [
        ...m.entries.filter((x) => x.index > p && x.index <= p + keep),
        ...Array.from({ length: op.count }, (_, k) => newEntry(p + keep + 1 + k, m.curTerm, op.config && k === 0)),
      ];
      if (op.mismatch) {
        const got = log.maybeAppend(L(p), Tm(pt + 1000), L(m.committed), ents);
        return got === undefined ? undefined : `maybeAppend with a wrong prev term returned ${got}`;
      }
      // Naive: walk the entries; the first one we lack or hold with another term truncates.
      let conflictAt = 0;
      for (const x of ents) {
        if (modelTerm(m, x.index) !== x.term) {
          conflictAt = x.index;
          break;
        }
      }
      if (conflictAt !== 0 && conflictAt <= m.committed) return undefined; // would overwrite a committed entry: not a legal input
      const leaderCommit = op.commit % (modelLast(m) + 5);
      const got = log.maybeAppend(L(p), Tm(pt), L(leaderCommit), ents);
      if (conflictAt !== 0) {
        m.entries = m.entries.filter((x) => x.index < conflictAt).concat(ents.filter((x) => x.index >= conflictAt));
        m.stabled = Math.min(m.stabled, conflictAt - 1);
      }
      const lastNew = p + ents.length;
      m.committed = Math.max(m.committed, Math.min(leaderCommit, lastNew));
      return got === lastNew ? undefined : `maybeAppend returned ${String(got)}, want ${lastNew}`;
    }
    case 'commit': {
      const to = m.committed + (op.pick % (modelLast(m) - m.committed + 1));
      log.commitTo(L(to));
      m.committed = to;
      return undefined;
    }
    case 'stable': {
      const last = modelLast(m);
      log.stableTo(L(last), Tm(modelTerm(m, last) as number));
      m.stabled = last;
      return undefined;
    }
    case 'stale-stable': {
      // The driver acknowledges an entry that has since been replaced (another term): no effect.
      const i = m.prev + (op.pick % (modelLast(m) - m.prev + 1));
      log.stableTo(L(i), Tm((modelTerm(m, i) ?? 0) + 1));
      return undefined;
    }
    case 'apply': {
      const hi = Math.min(m.committed, m.stabled);
      const want = m.entries.filter((x) => x.index > m.applied && x.index <= hi).map((x) => x.index);
      const got = log.nextCommittedEntries().map((x) => x.index);
      if (JSON.stringify(got) !== JSON.stringify(want)) return `nextCommittedEntries ${JSON.stringify(got)}, want ${JSON.stringify(want)}`;
      if (want.length > 0) {
        log.appliedTo(L(hi));
        m.applied = hi;
      }
      return undefined;
    }
    case 'compact': {
      const top = Math.min(m.applied, m.stabled);
      if (top <= m.prev) return undefined;
      const at = m.prev + 1 + (op.pick % (top - m.prev));
      const atTerm = modelTerm(m, at) as number;
      let base = m.baseConfig;
      for (const x of m.entries) if (x.index <= at && x.data[0] === 0x02) base = CONFIGS[(x.index + x.term) % 3] as Config;
      const s = log.compact(L(at), new Uint8Array([at]));
      m.entries = m.entries.filter((x) => x.index > at);
      m.prev = at;
      m.prevTerm = atTerm;
      m.baseConfig = base;
      if (s.meta.index !== at || s.meta.term !== atTerm) return `snapshot meta (${s.meta.index}, ${s.meta.term}), want (${at}, ${atTerm})`;
      if (JSON.stringify(s.meta.config) !== JSON.stringify(base)) return 'snapshot config differs from the model';
      return undefined;
    }
  }
}

function compare(log: RaftLog, m: Model): string | undefined {
  const last = modelLast(m);
  const facts: Array<[string, unknown, unknown]> = [
    ['lastIndex', log.lastIndex(), last],
    ['firstIndex', log.firstIndex(), m.prev + 1],
    ['committed', log.committed, m.committed],
    ['stabled', log.stabled, m.stabled],
    ['applied', log.applied, m.applied],
    ['lastTerm', log.lastTerm(), modelTerm(m, last)],
  ];
  for (const [what, got, want] of facts) if (got !== want) return `${what} ${String(got)}, want ${String(want)}`;
  for (let i = Math.max(0, m.prev - 2); i <= last + 2; i++) {
    if (log.term(i) !== modelTerm(m, i)) return `term(${i}) ${String(log.term(i))}, want ${String(modelTerm(m, i))}`;
  }
  const unstable = log.unstableEntries().map((x) => [x.index, x.term]);
  const wantUnstable = m.entries.filter((x) => x.index > m.stabled).map((x) => [x.index, x.term]);
  if (JSON.stringify(unstable) !== JSON.stringify(wantUnstable)) return `unstable ${JSON.stringify(unstable)}, want ${JSON.stringify(wantUnstable)}`;
  if (JSON.stringify(log.config()) !== JSON.stringify(modelConfigAt(m, last))) return 'config differs from the model';
  for (let i = m.prev; i <= last; i++) {
    if (JSON.stringify(log.configAt(i)) !== JSON.stringify(modelConfigAt(m, i))) return `configAt(${i}) differs from the model`;
  }
  return undefined;
}

t.test('property: RaftLog agrees with a naive array model under random appends, conflicts, commits, applies and compactions', async (t) => {
  fc.assert(
    fc.property(fc.array(opArb, { minLength: 5, maxLength: 80, size: 'max' }), (ops) => {
      const log = new RaftLog(C1, undefined, [], L(0));
      const m: Model = { entries: [], prev: 0, prevTerm: 0, committed: 0, stabled: 0, applied: 0, curTerm: 1, baseConfig: C1 };
      for (const op of ops) {
        const bad = step(log, m, op) ?? compare(log, m);
        if (bad !== undefined) throw new Error(`after ${JSON.stringify(op)}: ${bad}`);
      }
      return true;
    }),
    { numRuns: 500 },
  );
  t.pass('500 random runs of 5 to 80 operations agree');
});
