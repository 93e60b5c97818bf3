import t from 'tap';
import { isCairnError, nodeId, type Revision } from '../base/index.js';
import { CommandType, type ApplyResult } from '../fsm/index.js';
import type { Resource } from '../store/index.js';
import { ManualTime } from '../base/testing/index.js';
import { LocalCluster, waitUntil, type LocalNode } from './testing/index.js';

const artist = { group: 'demo', groupVersion: 'v1', kind: 'Artist' };
const tenancy = { partition: 'default', namespace: 'default' };
let seq = 0;

/**
 * For the multi-node tests in real time that take one leader for the whole test (proposals go
 * to it without forwarding, refusals name it): a 1-2 s election timeout (100 ticks of 10 ms)
 * instead of 100-200 ms, which an event-loop stall on a loaded machine exceeded, electing
 * another leader mid-test.
 */
const STEADY = { electionTimeoutTicks: 100 } as const;

function writeBody(name: string, data: Record<string, unknown>, extra: Record<string, unknown> = {}): Record<string, unknown> {
  seq++;
  return { time: '2026-11-21T10:00:00.000Z', uid: `uid-${seq}`, generation: `gen-${seq}`, id: { type: artist, tenancy, name }, data, ...extra };
}

function resourceOf(r: ApplyResult): Resource {
  if (!r.ok || r.kind !== 'write') throw new Error(`expected a write result, got ${JSON.stringify(r)}`);
  return r.resource;
}

function get(n: LocalNode, name: string): Resource | undefined {
  return n.fsm.store.get({ group: 'demo', kind: 'Artist', tenancy, name });
}

t.test('a single node bootstraps, commits a write with version = its log index, and keeps it across a crash', async (t) => {
  const c = new LocalCluster();
  t.teardown(() => c.close());
  await c.bootstrap(['n1']);
  const leader = await c.waitForLeader();
  const stored = resourceOf(await leader.coordinator.propose(CommandType.ResourceWrite, writeBody('korn', { name: 'Korn' })));
  t.equal(stored.version, leader.replica.status().applied, 'version is the applied entry index');
  const disks = await c.crash('n1');
  const again = await c.start('n1', undefined, disks);
  await waitUntil(() => get(again, 'korn') !== undefined, 5000, 'the replayed write');
  t.same(get(again, 'korn')?.data, { name: 'Korn' });
});

t.test('three nodes: writes commit on all, followers refuse proposals with a leader hint', async (t) => {
  const c = new LocalCluster({ seed: 3, ...STEADY });
  t.teardown(() => c.close());
  await c.bootstrap(['n1', 'n2', 'n3']);
  const leader = await c.waitForLeader();
  const events: number[] = [];
  const follower = [...c.nodes.values()].find((n) => n.id !== leader.id) as LocalNode;
  follower.coordinator.subscribe((e) => {
    if (e.kind === 'changes') events.push(e.index);
  });
  for (let i = 0; i < 10; i++) await leader.coordinator.propose(CommandType.ResourceWrite, writeBody(`a${i}`, { name: `A${i}` }));
  for (const n of c.nodes.values()) await waitUntil(() => get(n, 'a9') !== undefined, 5000, `${n.id} to apply a9`);
  t.equal(events.length, 10, 'the follower published one change per write');
  t.same(events, [...events].sort((a, b) => a - b), 'in commit order');
  await t.rejects(follower.coordinator.propose(CommandType.ResourceWrite, writeBody('x', { name: 'X' })), { code: 'NOT_LEADER' });
  try {
    await follower.coordinator.propose(CommandType.ResourceWrite, writeBody('x', { name: 'X' }));
  } catch (e) {
    t.ok(isCairnError(e) && e.details['leader'] === leader.id, 'the refusal names the leader');
  }
});

t.test('a linearizable read on a follower sees every write acknowledged before it', async (t) => {
  const c = new LocalCluster({ seed: 5, ...STEADY });
  t.teardown(() => c.close());
  await c.bootstrap(['n1', 'n2', 'n3']);
  const leader = await c.waitForLeader();
  const follower = [...c.nodes.values()].find((n) => n.id !== leader.id) as LocalNode;
  // Keep the follower from applying on its own: it only learns through the read barrier.
  for (let i = 0; i < 20; i++) {
    const w = resourceOf(await leader.coordinator.propose(CommandType.ResourceWrite, writeBody('counter', { name: `v${i}` })));
    const read = await follower.coordinator.read('linearizable', (s) => s.get({ group: 'demo', kind: 'Artist', tenancy, name: 'counter' }));
    t.ok(read.value !== undefined && read.value.version >= w.version, `read ${i} reflects the acknowledged write`);
    t.ok(read.revision >= (w.version as Revision));
  }
});

t.test('snapshots compact the log, and a node added later catches up through one', async (t) => {
  const c = new LocalCluster({ seed: 9, snapshotEveryEntries: 20, snapshotRetainEntries: 5, ...STEADY });
  t.teardown(() => c.close());
  await c.bootstrap(['n1', 'n2', 'n3']);
  const leader = await c.waitForLeader();
  for (let i = 0; i < 80; i++) await leader.coordinator.propose(CommandType.ResourceWrite, writeBody(`k${i % 13}`, { name: `v${i}` }));
  await waitUntil(() => leader.snapshotStore.saves > 0, 5000, 'a snapshot on the leader');
  await waitUntil(() => leader.replica.status().snapshotIndex > 20, 5000, 'the log to be compacted');
  t.ok(leader.replica.status().firstIndex > 1, 'the leader dropped compacted entries');
  const n4 = await c.start('n4', undefined);
  await leader.coordinator.changeMembership({ type: 'add-learner', id: nodeId('n4'), address: 'n4:7500' });
  await waitUntil(() => n4.replica.status().applied >= leader.replica.status().commit, 10_000, 'n4 to catch up');
  t.ok(n4.replica.status().snapshotIndex > 0, 'n4 started from a snapshot sent by the leader');
  t.ok(leader.snapshotStore.bodyReads > 0, 'read back from the leader’s store chunk by chunk: the leader no longer holds it in memory');
  for (let i = 0; i < 13; i++) t.same(get(n4, `k${i}`), get(leader, `k${i}`), `n4 has k${i} as the leader does`);
  await leader.coordinator.changeMembership({ type: 'promote', id: nodeId('n4') });
  t.equal(leader.replica.status().config.members.find((m) => m.id === 'n4')?.suffrage, 'voter');
});

t.test('a node restarts from its snapshot plus the log after it', async (t) => {
  const c = new LocalCluster({ seed: 11, snapshotEveryEntries: 15, snapshotRetainEntries: 3 });
  t.teardown(() => c.close());
  await c.bootstrap(['n1']);
  const leader = await c.waitForLeader();
  for (let i = 0; i < 40; i++) await leader.coordinator.propose(CommandType.ResourceWrite, writeBody(`k${i % 7}`, { name: `v${i}` }));
  await waitUntil(() => leader.snapshotStore.saves > 0 && !leader.replica.status().failed, 5000, 'a snapshot');
  const before = [...leader.fsm.store.all()];
  const disks = await c.crash('n1');
  const again = await c.start('n1', undefined, disks);
  await waitUntil(() => again.fsm.store.size === before.length && again.replica.status().applied >= before.reduce((m, r) => Math.max(m, r.version), 0), 5000, 'replay');
  t.same([...again.fsm.store.all()], before, 'identical store after restart');
});

t.test('a failing disk stops the node: nothing further is acknowledged', async (t) => {
  const c = new LocalCluster();
  t.teardown(() => c.close());
  await c.bootstrap(['n1']);
  const leader = await c.waitForLeader();
  await leader.coordinator.propose(CommandType.ResourceWrite, writeBody('before', { name: 'B' }));
  leader.logStore.failWrites(Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' }));
  let failure: unknown;
  try {
    await leader.coordinator.propose(CommandType.ResourceWrite, writeBody('after', { name: 'A' }));
  } catch (e) {
    failure = e;
  }
  t.ok(isCairnError(failure) && (failure.code === 'TIMEOUT' || failure.code === 'UNAVAILABLE'), 'not acknowledged (outcome unknown or refused)');
  t.match(leader.replica.status().failed, /ENOSPC/);
  t.equal(get(leader, 'after'), undefined, 'never applied');
  await t.rejects(leader.coordinator.propose(CommandType.ResourceWrite, writeBody('later', { name: 'L' })), { code: 'UNAVAILABLE' });
});

t.test("the leader sends appends while its own disk write runs (thesis §10.2.1); it acknowledges only once durable", async (t) => {
  const c = new LocalCluster({ seed: 5, ...STEADY });
  t.teardown(() => c.close());
  await c.bootstrap(['n1', 'n2', 'n3']);
  const leader = await c.waitForLeader();
  await leader.coordinator.propose(CommandType.ResourceWrite, writeBody('warm', { name: 'W' }));
  const followers = [...c.nodes.values()].filter((n) => n.id !== leader.id);
  for (const f of followers) await waitUntil(() => get(f, 'warm') !== undefined, 5000, `${f.id} to apply warm`);
  // Hold the leader's next log write until released.
  let release: () => void = () => {};
  const gate = new Promise<void>((r) => (release = r));
  let held = 0;
  const store = leader.logStore;
  const append = store.append.bind(store);
  store.append = async (b) => {
    if (b.entries.length > 0 && held === 0) {
      held++;
      await gate;
    }
    return append(b);
  };
  const before = leader.replica.status().lastIndex;
  let acked = false;
  const write = leader.coordinator.propose(CommandType.ResourceWrite, writeBody('early', { name: 'E' })).then((r) => {
    acked = true;
    return r;
  });
  for (const f of followers) await waitUntil(() => f.replica.status().lastIndex > before, 5000, `${f.id} to receive the entry while the leader's write is held`);
  t.equal(held, 1, "the leader's own write is still held");
  t.notOk(acked, 'nothing is acknowledged before the leader made it durable');
  t.equal(get(leader, 'early'), undefined, 'nor applied on the leader');
  release();
  t.same(resourceOf(await write).data, { name: 'E' }, 'acknowledged once durable');
});

t.test('a committed write is answered while the next Ready\'s log write is still running (apply before persist)', async (t) => {
  const c = new LocalCluster({ seed: 5, ...STEADY });
  t.teardown(() => c.close());
  await c.bootstrap(['n1', 'n2', 'n3']);
  const leader = await c.waitForLeader();
  await leader.coordinator.propose(CommandType.ResourceWrite, writeBody('warm2', { name: 'W' }));
  // Every leader log write that carries entries waits for its own release, in order.
  const gates: (() => void)[] = [];
  const store = leader.logStore;
  const append = store.append.bind(store);
  store.append = async (b) => {
    if (b.entries.length > 0) await new Promise<void>((r) => gates.push(r));
    return append(b);
  };
  const acked = new Set<string>();
  const propose = (name: string): Promise<unknown> =>
    leader.coordinator.propose(CommandType.ResourceWrite, writeBody(name, { name })).then((r) => {
      acked.add(name);
      return r;
    });
  const a = propose('a');
  await waitUntil(() => gates.length === 1, 5000, "the leader's write of a to be held");
  const indexA = leader.replica.status().lastIndex;
  // The followers make a durable and ack it: a commits without the leader.
  await waitUntil(() => leader.replica.status().commit >= indexA, 5000, 'a to commit on the followers alone');
  t.notOk(acked.has('a'), 'a is not answered while it is not durable on the leader');
  const b = propose('b');
  gates[0]?.();
  // The next Ready carries a (now durable here and committed) and b's entry, whose write is held.
  await waitUntil(() => gates.length === 2, 5000, "the leader's write of b to be held");
  await waitUntil(() => acked.has('a'), 5000, 'a to be answered while the write of b is held');
  t.same(get(leader, 'a')?.data, { name: 'a' }, 'a is applied');
  t.notOk(acked.has('b'), 'b is not answered before it is durable');
  t.equal(get(leader, 'b'), undefined, 'nor applied');
  gates[1]?.();
  await a;
  await b;
  t.ok(acked.has('b'), 'b answered once durable');
});

t.test('only members speak Raft: a non-member\'s timeout-now, high-term vote and snapshot are dropped and counted; the leader stays', async (t) => {
  // Simulated time: "term and leader unchanged after several election timeouts" must not depend
  // on the event loop keeping up in real time (10 ms ticks: a stall of ~100 ms on a loaded
  // machine was an election, and a failure of this test, with no stranger involved).
  const time = new ManualTime();
  const c = new LocalCluster({ seed: 13, clock: time, timers: time });
  /** Advances simulated time in 1 ms steps until `done` holds; fails past `limitMs` of it. */
  const runUntil = async (what: string, limitMs: number, done: () => boolean): Promise<void> => {
    const end = time.monotonicMs() + limitMs;
    while (!done()) {
      if (time.monotonicMs() >= end) throw new Error(`${what}: not within ${limitMs} simulated ms`);
      await time.advance(1);
    }
  };
  const settled = async <T>(what: string, p: Promise<T>): Promise<T> => {
    let done = false;
    const watched = p.finally(() => (done = true));
    await runUntil(what, 10_000, () => done);
    return watched;
  };
  t.teardown(() => settled('the cluster to close', c.close()));
  await c.bootstrap(['n1', 'n2', 'n3']);
  await runUntil('a leader', 10_000, () => c.leader() !== undefined);
  const leader = c.leader() as LocalNode;
  await settled('the write before', leader.coordinator.propose(CommandType.ResourceWrite, writeBody('before', { name: 'B' })));
  const followers = [...c.nodes.values()].filter((n) => n.id !== leader.id);
  for (const f of followers) await runUntil(`${f.id} to apply before`, 5000, () => get(f, 'before') !== undefined);
  const term0 = leader.replica.status().term;
  const evil = nodeId('evil');
  const dropped = (n: LocalNode): number => n.replica.status().droppedMessages['non-member'];
  const before = new Map([...c.nodes.values()].map((n) => [n.id, dropped(n)]));
  const target = followers[0] as LocalNode;
  // A timeout-now and a transfer-flagged vote with a far higher term, sent to every node.
  for (const n of c.nodes.values()) {
    c.net.inject({ type: 'timeout-now', from: evil, to: n.id, term: term0 });
    c.net.inject({ type: 'vote', from: evil, to: n.id, term: (term0 + 100) as typeof term0, lastIndex: 1_000_000 as never, lastTerm: (term0 + 99) as typeof term0, transfer: true });
  }
  // A crafted snapshot that would replace the follower's whole state, at a higher term.
  const snapTerm = (term0 + 50) as typeof term0;
  c.net.inject({
    type: 'snap',
    from: evil,
    to: target.id,
    term: snapTerm,
    meta: { index: 1_000_000 as never, term: snapTerm, config: { members: [{ id: evil, suffrage: 'voter', address: 'evil:1' }] } },
    offset: 0,
    totalBytes: 3,
    chunk: new Uint8Array([1, 2, 3]),
  });
  // Several election timeouts (10 ticks of 10 ms) of simulated time, in 1 ms steps (each lets
  // the in-memory network deliver): time for a wrongly accepted message to act.
  for (let ms = 0; ms < 400; ms++) await time.advance(1);
  for (const n of c.nodes.values()) t.equal(dropped(n) - (before.get(n.id) ?? 0), n === target ? 3 : 2, `${n.id} counted its drops`);
  for (const n of c.nodes.values()) {
    const s = n.replica.status();
    t.same([s.term, s.leader], [term0, leader.id], `${n.id}: term and leader unchanged`);
  }
  t.equal(target.replica.status().snapshotIndex, 0, 'the crafted snapshot was not installed');
  t.notOk(target.replica.status().failed, 'the target keeps running');
  t.same(get(target, 'before')?.data, { name: 'B' }, 'and keeps its data');
  const after = resourceOf(await settled('the write after', leader.coordinator.propose(CommandType.ResourceWrite, writeBody('after', { name: 'A' }))));
  t.ok(after.version > 0, 'the same leader keeps committing writes');
});

t.test('only members speak Raft: a node with no configuration takes only a leader\'s messages and vote requests, and a joining learner catches up from the log', async (t) => {
  const c = new LocalCluster({ seed: 17 });
  t.teardown(() => c.close());
  await c.bootstrap(['n1', 'n2', 'n3']);
  const leader = await c.waitForLeader();
  for (let i = 0; i < 10; i++) await leader.coordinator.propose(CommandType.ResourceWrite, writeBody(`j${i}`, { name: `J${i}` }));
  const n4 = await c.start('n4', undefined);
  // Before it is added: a stranger's timeout-now and responses are dropped as `no-config`.
  c.net.inject({ type: 'timeout-now', from: nodeId('evil'), to: n4.id, term: 9 as never });
  c.net.inject({ type: 'app-resp', from: nodeId('evil'), to: n4.id, term: 9 as never, index: 5 as never, reject: false, hintIndex: 0 as never, hintTerm: 0 as never });
  await waitUntil(() => n4.replica.status().droppedMessages['no-config'] === 2, 5000, 'n4 to drop both');
  t.equal(n4.replica.status().term, 0, 'n4 did not move to the stranger\'s term');
  await leader.coordinator.changeMembership({ type: 'add-learner', id: nodeId('n4'), address: 'n4:7500' });
  await waitUntil(() => n4.replica.status().applied >= leader.replica.status().commit, 10_000, 'n4 to catch up');
  for (let i = 0; i < 10; i++) t.same(get(n4, `j${i}`), get(leader, `j${i}`), `n4 has j${i}`);
  t.equal(n4.replica.status().snapshotIndex, 0, 'n4 caught up from the log, from index 1 (no snapshot)');
  t.equal(n4.replica.status().droppedMessages['non-member'], 0, 'n4 dropped nothing from the cluster');
  for (const n of c.nodes.values()) t.equal(n.replica.status().droppedMessages['non-member'], 0, `${n.id} dropped nothing from n4`);
});

t.test('only members speak Raft: a node replaying the log from index 1 keeps following a leader its older configuration does not name', async (t) => {
  // One entry per append: n5 appends the bootstrap configuration alone, and only later the
  // entries that add n4, its leader.
  const c = new LocalCluster({ seed: 19, maxAppendBytes: 1 });
  t.teardown(() => c.close());
  await c.bootstrap(['n1', 'n2', 'n3']);
  let leader = await c.waitForLeader();
  const n4 = await c.start('n4', undefined);
  await leader.coordinator.changeMembership({ type: 'add-learner', id: nodeId('n4'), address: 'n4:7500' });
  await waitUntil(() => n4.replica.status().applied >= leader.replica.status().commit, 10_000, 'n4 to catch up');
  await leader.coordinator.changeMembership({ type: 'promote', id: nodeId('n4') });
  leader.replica.transferLeadership(nodeId('n4'));
  await waitUntil(() => n4.replica.status().role === 'leader', 10_000, 'n4 to lead');
  leader = n4;
  for (let i = 0; i < 5; i++) await leader.coordinator.propose(CommandType.ResourceWrite, writeBody(`m${i}`, { name: `M${i}` }));
  // n5 replays from index 1: its first configuration is the bootstrap one, without n4.
  const n5 = await c.start('n5', undefined);
  await leader.coordinator.changeMembership({ type: 'add-learner', id: nodeId('n5'), address: 'n5:7500' });
  await waitUntil(() => n5.replica.status().applied >= leader.replica.status().commit, 10_000, 'n5 to catch up from n4');
  for (let i = 0; i < 5; i++) t.same(get(n5, `m${i}`), get(leader, `m${i}`), `n5 has m${i}`);
  t.equal(n5.replica.status().snapshotIndex, 0, 'from the log, not a snapshot');
  t.equal(n5.replica.status().droppedMessages['non-member'], 0, 'n5 dropped nothing from its leader');
});
