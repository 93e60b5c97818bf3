import t from 'tap';
import { SimDisk } from './disk.js';
import { logIndex, nodeId, RawNode, SeededRandom, term, type Entry, type HardState, type Snapshot } from './raft.js';
import { SimViolation } from './violation.js';

const e = (index: number, t: number, byte = index): Entry => ({ index: logIndex(index), term: term(t), data: new Uint8Array([0x10, byte]) });
const hs = (t: number, commit: number): HardState => ({ term: term(t), vote: nodeId('n1'), commit: logIndex(commit) });
const snap = (index: number, t: number): Snapshot => ({
  meta: { index: logIndex(index), term: term(t), config: { members: [{ id: nodeId('n1'), suffrage: 'voter', address: 'x' }] } },
  data: new Uint8Array([1, 2, 3]),
});
const fresh = (): SimDisk => new SimDisk('n1', RawNode.emptyState());
const indices = (entries: readonly Entry[]): string => entries.map((x) => `${x.index}/${x.term}`).join(' ');

t.test('a crash before fsync loses the unsynced writes', async (t) => {
  const d = fresh();
  const a = d.write({ entries: [e(1, 1), e(2, 1)], hardState: hs(1, 0) });
  d.sync(a);
  d.write({ entries: [e(3, 1)], hardState: hs(2, 2) });
  t.equal(d.latest.lastIndex, 3, 'the running node sees its write at once');
  t.equal(d.durable.lastIndex, 2, 'but it is not durable yet');
  const out = d.crash(new SeededRandom(1), 0);
  t.same(out, { kept: 0, lost: 1 });
  const back = d.load(0);
  t.same(back.entries.map((x) => x.index), [1, 2], 'the synced entries survive');
  t.equal(back.hardState.term, 1, 'the unsynced hard state is lost');
  t.equal(d.latest.lastIndex, 2, 'after the crash the node sees only what was durable');
});

t.test('a crash may keep a prefix of the unsynced writes, never a later one without an earlier one', async (t) => {
  for (let seed = 1; seed <= 20; seed++) {
    const d = fresh();
    d.write({ entries: [e(1, 1)], hardState: undefined });
    d.write({ entries: [e(2, 1)], hardState: undefined });
    d.write({ entries: [e(3, 1)], hardState: undefined });
    const { kept, lost } = d.crash(new SeededRandom(seed), 1);
    t.equal(kept + lost, 3);
    t.ok(kept >= 1, 'with keep probability 1 something survives');
    t.equal(d.durable.lastIndex, kept, `seed ${seed}: the first ${kept} writes survive, in order`);
  }
});

t.test('fsync makes every write issued before it durable', async (t) => {
  const d = fresh();
  d.write({ entries: [e(1, 1)], hardState: undefined });
  const b = d.write({ entries: [e(2, 1)], hardState: hs(1, 1) });
  d.write({ entries: [e(3, 1)], hardState: undefined });
  d.sync(b);
  t.equal(d.durable.lastIndex, 2);
  t.equal(d.unsyncedWrites, 1);
});

t.test('a write replaces the suffix from its first entry; gaps and writes below the compacted log are refused', async (t) => {
  const d = fresh();
  d.write({ entries: [e(1, 1), e(2, 1), e(3, 1)], hardState: undefined });
  d.write({ entries: [e(2, 2)], hardState: undefined });
  t.equal(indices(d.latest.entries), '1/1 2/2');
  d.write({ entries: [e(5, 2)], hardState: undefined });
  t.equal(indices(d.latest.entries), '5/2', 'a gap: what lies before it is out of reach of a load');
  d.write({ entries: [e(5, 3), e(6, 3)], hardState: undefined });
  t.throws(() => d.write({ entries: [e(7, 2), e(9, 2)], hardState: undefined }), SimViolation, 'not contiguous');
  d.saveSnapshot(snap(5, 3));
  d.compact(5);
  t.equal(d.latest.first, 6);
  t.throws(() => d.write({ entries: [e(5, 4)], hardState: undefined }), SimViolation, 'below the compacted log');
});

t.test('an installed snapshot drops the whole stored log in the same batch', async (t) => {
  const d = fresh();
  d.sync(d.write({ entries: [e(1, 1), e(2, 1), e(3, 1), e(4, 1)], hardState: hs(1, 2) }));
  d.saveSnapshot(snap(6, 2));
  d.sync(d.write({ entries: [e(7, 2)], hardState: hs(2, 6), installedSnapshot: logIndex(6) }));
  t.equal(indices(d.durable.entries), '7/2');
  t.equal(d.load(6).entries.length, 1);
  t.ok(d.holdsDurably(5, 1), 'covered by the snapshot');
  t.ok(d.holdsDurably(7, 2));
  t.notOk(d.holdsDurably(7, 1), 'another term at 7');
});

t.test('load reports the term of the entry at afterIndex, or none', async (t) => {
  const d = fresh();
  d.sync(d.write({ entries: [e(1, 1), e(2, 1), e(3, 2)], hardState: hs(2, 1) }));
  t.equal(d.load(0).afterIndexTerm, undefined, 'nothing at 0');
  t.equal(d.load(2).afterIndexTerm, 1);
  t.equal(d.load(3).afterIndexTerm, 2);
  t.equal(d.load(4).afterIndexTerm, undefined, 'beyond the end');
  d.saveSnapshot(snap(2, 1));
  d.compact(2);
  t.equal(d.load(2).afterIndexTerm, undefined, 'compacted away');
  d.saveSnapshot(snap(6, 3));
  d.sync(d.write({ entries: [e(7, 3)], hardState: hs(3, 6), installedSnapshot: logIndex(6) }));
  t.equal(d.load(6).afterIndexTerm, undefined, 'dropped by an installed snapshot');
});

t.test('a stale suffix behind the newest snapshot is handed back, and the node must complete the install before anything else', async (t) => {
  const stale = (): SimDisk => {
    const d = fresh();
    d.sync(d.write({ entries: [e(1, 1), e(2, 1), e(3, 1), e(4, 1)], hardState: hs(1, 1) }));
    d.saveSnapshot(snap(3, 2));
    return d;
  };
  const d = stale();
  const back = d.load(3);
  t.equal(back.afterIndexTerm, 1, 'entry 3 is of term 1, the snapshot of term 2');
  t.equal(indices(back.entries), '4/1', 'and entry 4 comes back behind it, as the real stores hand it back');
  t.throws(() => d.write({ entries: [e(4, 2)], hardState: hs(2, 3) }), SimViolation, 'going on without completing the install is a violation');
  const d2 = stale();
  d2.load(3);
  t.throws(() => d2.compact(1), SimViolation, 'so is compacting first');
  const d3 = stale();
  d3.load(3);
  d3.sync(d3.write({ entries: [], hardState: hs(2, 3), installedSnapshot: logIndex(3) }));
  t.same(d3.load(3).entries, [], 'once the install batch is written, nothing stale remains');
  d3.write({ entries: [e(4, 2)], hardState: hs(2, 3) });
  t.equal(indices(d3.latest.entries), '4/2', 'and the node goes on');
  const d4 = stale();
  d4.load(3);
  d4.crash(new SeededRandom(1), 0);
  d4.load(2);
  d4.write({ entries: [e(4, 1)], hardState: undefined });
  t.pass('a crash (or a load that finds nothing stale) clears the obligation');
});

t.test('compaction needs a durable snapshot covering it; load refuses a gap after the snapshot', async (t) => {
  const d = fresh();
  d.sync(d.write({ entries: [e(1, 1), e(2, 1), e(3, 1)], hardState: hs(1, 3) }));
  t.throws(() => d.compact(2), SimViolation, 'no snapshot yet');
  d.saveSnapshot(snap(2, 1));
  d.compact(1);
  t.equal(indices(d.load(2).entries), '3/1', 'entries after the snapshot');
  t.equal(indices(d.latest.entries), '2/1 3/1', 'the log keeps entries behind the newest snapshot until compacted');
  t.throws(() => d.load(0), SimViolation, 'a gap between a (missing) snapshot at 0 and the log at 2');
});

t.test('a snapshot save lost in a crash is gone; the newest few saved are kept', async (t) => {
  const d = fresh();
  for (let i = 1; i <= 5; i++) d.saveSnapshot(snap(i * 10, 1));
  t.equal(d.newestSnapshot?.meta.index, 50);
  d.crash(new SeededRandom(3), 0.5);
  t.equal(d.newestSnapshot?.meta.index, 50, 'a completed save survives a crash');
});
