import t from 'tap';
import { LogView, SimDisk } from './disk.js';
import { logIndex, nodeId, SeededRandom, term, type Entry, type HardState, type PersistedState, type Snapshot } from './raft.js';
import { SimViolation } from './violation.js';

const e = (index: number, t: number, byte = index): Entry => ({ index: logIndex(index), term: term(t), data: new Uint8Array([0x10, byte]) });
const hs = (t: number, commit: number): HardState => ({ term: term(t), vote: nodeId('n1'), commit: logIndex(commit) });
const empty: PersistedState = { hardState: hs(0, 0), snapshot: undefined, entries: [] };
const snap = (index: number, t: number): Snapshot => ({
  meta: { index: logIndex(index), term: term(t), config: { members: [{ id: nodeId('n1'), suffrage: 'voter', address: 'x' }] } },
  data: new Uint8Array([1, 2, 3]),
});
const indices = (v: LogView): string => v.entries.map((x) => `${x.index}/${x.term}`).join(' ');

t.test('a crash before fsync loses the unsynced writes', async (t) => {
  const d = new SimDisk('n1', empty);
  const a = d.write({ snapshot: undefined, entries: [e(1, 1), e(2, 1)], hardState: hs(1, 0) });
  d.sync(a);
  d.write({ snapshot: undefined, entries: [e(3, 1)], hardState: hs(2, 2) });
  t.equal(d.latest.lastIndex, 3, 'the running node sees its write at once');
  t.equal(d.durable.lastIndex, 2, 'but it is not durable yet');
  const out = d.crash(new SeededRandom(1), 0);
  t.same(out, { kept: 0, lost: 1 });
  const back = d.recover();
  t.same(back.entries.map((x) => x.index), [1, 2], 'the synced entries survive');
  t.equal(back.hardState.term, 1, 'the unsynced hard state is lost');
  t.equal(d.latest.lastIndex, 2, 'after the crash the node sees only what was durable');
});

t.test('a crash may keep a prefix of the unsynced writes, never a later one without an earlier one', async (t) => {
  for (let seed = 1; seed <= 20; seed++) {
    const d = new SimDisk('n1', empty);
    d.write({ snapshot: undefined, entries: [e(1, 1)], hardState: undefined });
    d.write({ snapshot: undefined, entries: [e(2, 1)], hardState: undefined });
    d.write({ snapshot: undefined, entries: [e(3, 1)], hardState: undefined });
    const { kept, lost } = d.crash(new SeededRandom(seed), 1);
    t.equal(kept + lost, 3);
    t.ok(kept >= 1, 'with keep probability 1 something survives');
    t.equal(d.durable.lastIndex, kept, `seed ${seed}: the first ${kept} writes survive, in order`);
  }
});

t.test('fsync makes every write issued before it durable', async (t) => {
  const d = new SimDisk('n1', empty);
  d.write({ snapshot: undefined, entries: [e(1, 1)], hardState: undefined });
  const b = d.write({ snapshot: undefined, entries: [e(2, 1)], hardState: hs(1, 1) });
  d.write({ snapshot: undefined, entries: [e(3, 1)], hardState: undefined });
  d.sync(b);
  t.equal(d.durable.lastIndex, 2);
  t.equal(d.unsyncedWrites, 1);
  d.crash(new SeededRandom(3), 0);
  t.same(d.recover().entries.map((x) => x.index), [1, 2]);
  t.equal(d.recover().hardState.commit, 1);
});

t.test('an entry at index i replaces every entry from i on', async (t) => {
  const v = LogView.from(empty);
  v.apply({ snapshot: undefined, entries: [e(1, 1), e(2, 1), e(3, 1), e(4, 1)], hardState: undefined }, 'n1');
  v.apply({ snapshot: undefined, entries: [e(3, 2)], hardState: undefined }, 'n1');
  t.equal(indices(v), '1/1 2/1 3/2');
});

t.test('entries that leave a gap or are not contiguous break the Ready contract', async (t) => {
  const v = LogView.from(empty);
  t.throws(() => v.apply({ snapshot: undefined, entries: [e(2, 1)], hardState: undefined }, 'n1'), SimViolation);
  t.throws(() => v.apply({ snapshot: undefined, entries: [e(1, 1), e(3, 1)], hardState: undefined }, 'n1'), SimViolation);
});

t.test('a snapshot replaces the log up to its index', async (t) => {
  const v = LogView.from(empty);
  v.apply({ snapshot: undefined, entries: [e(1, 1), e(2, 1), e(3, 2), e(4, 2)], hardState: undefined }, 'n1');
  v.installSnapshot(snap(3, 2));
  t.equal(indices(v), '4/2', 'entries after a matching snapshot point are kept');
  t.equal(v.termAt(3), 2);
  const w = LogView.from(empty);
  w.apply({ snapshot: undefined, entries: [e(1, 1), e(2, 1), e(3, 1), e(4, 1)], hardState: undefined }, 'n1');
  w.installSnapshot(snap(3, 2));
  t.equal(indices(w), '', 'a conflicting log is discarded entirely');
  t.equal(w.lastIndex, 3);
  t.throws(() => w.apply({ snapshot: undefined, entries: [e(2, 2)], hardState: undefined }, 'n1'), SimViolation, 'nothing may be appended below the snapshot');
});

t.test('compaction is durable at once and raises the durable commit to the snapshot', async (t) => {
  const d = new SimDisk('n1', empty);
  d.sync(d.write({ snapshot: undefined, entries: [e(1, 1), e(2, 1), e(3, 1)], hardState: hs(1, 1) }));
  d.compact(snap(2, 1));
  d.crash(new SeededRandom(1), 0);
  const back = d.recover();
  t.equal(back.snapshot?.meta.index, 2);
  t.same(back.entries.map((x) => x.index), [3]);
  t.equal(back.hardState.commit, 2);
});

t.test('what a node recovers is a copy, not shared with the disk', async (t) => {
  const d = new SimDisk('n1', empty);
  d.sync(d.write({ snapshot: undefined, entries: [e(1, 1, 7)], hardState: undefined }));
  const back = d.recover();
  (back.entries[0]?.data as Uint8Array)[1] = 99;
  t.equal(d.durable.entryAt(1)?.data[1], 7);
});
