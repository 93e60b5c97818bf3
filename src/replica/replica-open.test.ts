import t, { type Test } from 'tap';
import { nodeId, type LogIndex, type NodeId, type Term } from '../base/index.js';
import { Fsm } from '../fsm/index.js';
import { NOOP_ENTRY_DATA, type Entry, type Message, type Snapshot } from '../raft/index.js';
import { LocalCluster, MemoryLogStore, MemorySnapshotStore, waitUntil, type LocalNode } from './testing/index.js';

/**
 * Replica.open after a crash in the middle of installing a leader's snapshot (Raft §7, thesis
 * §5): the snapshot file is saved first, then the log batch that drops the log it replaces
 * (LogStore.append with installedSnapshot). These tests build on the in-memory disks the state
 * such a crash leaves (the snapshot durable, the batch never written) and the states that must
 * not be mistaken for it.
 */

const N1 = nodeId('n1');
const N2 = nodeId('n2');
const CONFIG = LocalCluster.config(['n1', 'n2', 'n3']);

function noop(index: number, term: number): Entry {
  return { index: index as LogIndex, term: term as Term, data: NOOP_ENTRY_DATA.slice() };
}

function noops(from: number, to: number, term: number): Entry[] {
  const out: Entry[] = [];
  for (let i = from; i <= to; i++) out.push(noop(i, term));
  return out;
}

/** A real state-machine snapshot at `index` (the FSM after `index` no-ops), of `term`. */
function fsmSnapshot(index: number, term: number): Snapshot {
  const fsm = new Fsm();
  for (const e of noops(1, index, term)) fsm.apply(e);
  const view = fsm.snapshot();
  const chunks = [...view.chunks()];
  const data = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
  let at = 0;
  for (const c of chunks) {
    data.set(c, at);
    at += c.length;
  }
  return { meta: { index: index as LogIndex, term: term as Term, config: CONFIG }, data };
}

interface Disk {
  readonly logStore: MemoryLogStore;
  readonly snapshotStore: MemorySnapshotStore;
}

/** n2's disks: `log` and the hard state written (synced) to its log, then `snap` saved. */
async function disk(log: readonly Entry[], hs: { term: number; commit: number }, snap: Snapshot): Promise<Disk> {
  const logStore = new MemoryLogStore();
  const snapshotStore = new MemorySnapshotStore();
  await logStore.append({ entries: log, hardState: { term: hs.term as Term, vote: N1, commit: hs.commit as LogIndex }, sync: true });
  await snapshotStore.save(snap);
  // Power loss right after the snapshot's save: whatever the driver would write next never lands.
  return { logStore: logStore.crash(), snapshotStore: snapshotStore.reopen() };
}

/** What n2's log store holds after its snapshot at `index`, read through a second handle. */
async function stored(n: LocalNode, index: number): Promise<{ term: number | undefined; entries: string[] }> {
  const loaded = await n.logStore.load(index as LogIndex);
  return { term: loaded.afterIndexTerm, entries: loaded.entries.map((e) => `${e.index}/${e.term}`) };
}

/** Starts n2 alone (n1 is a stand-in leader whose messages the test writes by hand). */
async function startN2(t: Test, d: Disk): Promise<{ c: LocalCluster; n2: LocalNode; toLeader: Message[] }> {
  const c = new LocalCluster({ seed: 7, tickMs: 1000 });
  t.teardown(() => c.close());
  const toLeader: Message[] = [];
  c.net.transport(N1).onMessage((m) => toLeader.push(m));
  const n2 = await c.start('n2', undefined, d);
  return { c, n2, toLeader };
}

function appendFromLeader(c: LocalCluster, m: { term: number; index: number; logTerm: number; entries: Entry[]; commit: number }): void {
  c.net.transport(N1).send([{ type: 'app', from: N1, to: N2 as NodeId, term: m.term as Term, index: m.index as LogIndex, logTerm: m.logTerm as Term, entries: m.entries, commit: m.commit as LogIndex }]);
}

t.test('Raft §7: an install whose log batch was lost leaves a stale suffix; open drops it and the node takes the leader\'s entries from S+1', async (t) => {
  // The old log holds 1..12 of term 2; the leader's snapshot at 8 is of term 3 (it was sent
  // because the log did not match there), so 9..12 are another history's, never committed.
  const d = await disk(noops(1, 12, 2), { term: 2, commit: 4 }, fsmSnapshot(8, 3));
  const { c, n2, toLeader } = await startN2(t, d);
  const st = n2.replica.status();
  t.same({ lastIndex: st.lastIndex, commit: st.commit, applied: st.applied }, { lastIndex: 8, commit: 8, applied: 8 }, 'the log ends at the snapshot: 9..12 are gone');
  t.same(await stored(n2, 8), { term: undefined, entries: [] }, 'and gone from the disk too (the install batch was written again)');

  appendFromLeader(c, { term: 3, index: 8, logTerm: 3, entries: noops(9, 10, 3), commit: 10 });
  await waitUntil(() => toLeader.some((m) => m.type === 'app-resp'), 5000, 'n2 to answer the append');
  const resp = toLeader.find((m) => m.type === 'app-resp');
  t.match(resp, { type: 'app-resp', index: 10, reject: false }, 'n2 accepts 9..10 after the snapshot');
  await waitUntil(() => n2.replica.status().applied === 10, 5000, 'n2 to apply 10');
  t.same(await stored(n2, 8), { term: undefined, entries: ['9/3', '10/3'] }, 'its log: the leader\'s entries right after the snapshot');
});

t.test('Raft §7: an install whose log batch was lost, the old log ending before the snapshot: open writes the batch again', async (t) => {
  const d = await disk(noops(1, 5, 2), { term: 2, commit: 4 }, fsmSnapshot(8, 3));
  const { c, n2, toLeader } = await startN2(t, d);
  t.same({ lastIndex: n2.replica.status().lastIndex, commit: n2.replica.status().commit }, { lastIndex: 8, commit: 8 });
  // The batch dropped entries 1..5 (LogStore contract); its hard state shows it was written.
  const after = await n2.logStore.load(8 as LogIndex);
  t.same({ commit: after.hardState.commit, term: after.afterIndexTerm, entries: after.entries.length }, { commit: 8, term: undefined, entries: 0 }, 'the install batch was written again');
  appendFromLeader(c, { term: 3, index: 8, logTerm: 3, entries: noops(9, 9, 3), commit: 9 });
  await waitUntil(() => n2.replica.status().applied === 9, 5000, 'n2 to apply 9');
  t.match(toLeader.find((m) => m.type === 'app-resp'), { index: 9, reject: false });
  t.same(await stored(n2, 8), { term: undefined, entries: ['9/3'] });
});

t.test('the node\'s own snapshot: its log holds the snapshot\'s entry in the same term, and the entries after it are kept', async (t) => {
  // Snapshot taken at applied index 8 (term 2); 9..10 committed (perhaps acknowledged), 11..12 not yet.
  const d = await disk(noops(1, 12, 2), { term: 2, commit: 10 }, fsmSnapshot(8, 2));
  const { n2 } = await startN2(t, d);
  const st = n2.replica.status();
  t.same({ lastIndex: st.lastIndex, commit: st.commit }, { lastIndex: 12, commit: 10 }, 'nothing dropped');
  await waitUntil(() => n2.replica.status().applied === 10, 5000, 'n2 to apply the committed entries after its snapshot');
  t.same(await stored(n2, 8), { term: 2, entries: ['9/2', '10/2', '11/2', '12/2'] }, 'the disk is untouched');
});

t.test('a completed install followed by new entries: nothing at the snapshot index, the log resumes after it and is kept', async (t) => {
  const logStore = new MemoryLogStore();
  const snapshotStore = new MemorySnapshotStore();
  await logStore.append({ entries: noops(1, 12, 2), hardState: { term: 2 as Term, vote: N1, commit: 4 as LogIndex }, sync: true });
  await snapshotStore.save(fsmSnapshot(8, 3));
  await logStore.append({ entries: noops(9, 11, 3), hardState: { term: 3 as Term, vote: N1, commit: 10 as LogIndex }, sync: true, installedSnapshot: 8 as LogIndex });
  const { n2 } = await startN2(t, { logStore: logStore.crash(), snapshotStore: snapshotStore.reopen() });
  const st = n2.replica.status();
  t.same({ lastIndex: st.lastIndex, commit: st.commit }, { lastIndex: 11, commit: 10 });
  t.same(await stored(n2, 8), { term: undefined, entries: ['9/3', '10/3', '11/3'] });
});

t.test('a completed install and nothing after it (a commit index at the snapshot index): nothing is written again', async (t) => {
  const logStore = new MemoryLogStore();
  const snapshotStore = new MemorySnapshotStore();
  await logStore.append({ entries: noops(1, 12, 2), hardState: { term: 2 as Term, vote: N1, commit: 4 as LogIndex }, sync: true });
  await snapshotStore.save(fsmSnapshot(8, 3));
  await logStore.append({ entries: [], hardState: { term: 3 as Term, vote: N1, commit: 8 as LogIndex }, sync: true, installedSnapshot: 8 as LogIndex });
  const before = logStore.stats().batches;
  const { n2 } = await startN2(t, { logStore: logStore.crash(), snapshotStore: snapshotStore.reopen() });
  t.same({ lastIndex: n2.replica.status().lastIndex, commit: n2.replica.status().commit }, { lastIndex: 8, commit: 8 });
  t.equal(n2.logStore.stats().batches, before, 'no batch written at open');
});

t.test('a log holding the snapshot index in another term at or below its commit index contradicts the snapshot: open refuses', async (t) => {
  const d = await disk(noops(1, 12, 2), { term: 2, commit: 9 }, fsmSnapshot(8, 3));
  const c = new LocalCluster({ seed: 7, tickMs: 1000 });
  t.teardown(() => c.close());
  await t.rejects(c.start('n2', undefined, d), { name: 'CorruptLogError', message: /entry 8 of term 2 with commit index 9.*of term 3/ });
});

t.test('open resolves only once the node has applied every entry its disk holds as committed (nothing is served from an older state)', async (t) => {
  // A snapshot at 5, the log to 20, committed to 15: the replay of 6..15 runs in the Ready loop,
  // which starts at the next event-loop turn; a node that answered before it would read (or
  // check a token) against the state at 5.
  const logStore = new MemoryLogStore();
  const snapshotStore = new MemorySnapshotStore();
  await logStore.append({ entries: noops(1, 20, 2), hardState: { term: 2 as Term, vote: N1, commit: 15 as LogIndex }, sync: true });
  await snapshotStore.save(fsmSnapshot(5, 2));
  const { n2 } = await startN2(t, { logStore: logStore.crash(), snapshotStore: snapshotStore.reopen() });
  const st = n2.replica.status();
  t.same({ applied: st.applied, stateMachine: n2.fsm.appliedIndex, commit: st.commit }, { applied: 15, stateMachine: 15, commit: 15 }, 'applied through the commit index when open resolved');
});
