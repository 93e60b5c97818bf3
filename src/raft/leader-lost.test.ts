/**
 * A lost connection to the leader (RawNode.reportConnectionLost): a liveness shortcut for a
 * leader whose process died. The driver reports that its connection with a peer broke at the
 * peer's end; a follower of that peer forgets it and campaigns (pre-vote first) at its turn
 * instead of waiting out the election timeout: the voters other than the lost leader, in id
 * order, leaderLostTicks apart, the first at once (asking again every tick the voters that
 * have not answered). Nothing else changes: terms, votes,
 * logs and the lease rules are the paper's and the thesis', so safety does not depend on the
 * reports being true (`leader-lost.txt` shows the same scenarios as a transcript; the
 * simulator reports a crashed node's broken connections to its peers).
 *
 * The election timeout here is 100 ticks and the turns 2 apart, so "before the timeout" is
 * unambiguous. Time is ticks; nothing sleeps.
 */
import t from 'tap';
import { NO_NODE, nodeId, type NodeId } from '../base/index.js';
import { TestCluster, type ClusterOptions } from './testing/cluster.js';
import type { Message, Role } from './types.js';

const T = 100; // electionTimeoutTicks
const S = 2; // leaderLostTicks (the default): ticks between two followers' turns
const n = (s: string): NodeId => nodeId(s);

function role(c: TestCluster, id: string): Role {
  return c.node(id).raw.status().role;
}

/** n1 leads term 2 of n1..n3 (or n1..n5), everything delivered. */
function withLeader(opts: ClusterOptions = {}, size = 3): TestCluster {
  const c = new TestCluster({ electionTimeoutTicks: T, ...opts });
  c.bootstrap(Array.from({ length: size }, (_, i) => `n${i + 1}`));
  c.elect('n1');
  return c;
}

/**
 * `rounds` times: every node not in `dead` ticks once, one after another, and the cluster
 * stabilizes after each node's tick: real nodes tick at different phases (each process starts
 * its timer at its own moment), and a message crosses a LAN in less than a tick.
 */
function tickLive(c: TestCluster, dead: readonly string[], rounds: number): void {
  for (let i = 0; i < rounds; i++) {
    for (const id of c.ids()) {
      if (dead.includes(id)) continue;
      c.tick(id);
      c.stabilize();
    }
  }
}

/** The leader of the newest term among the live nodes, or NO_NODE. */
function liveLeader(c: TestCluster, dead: readonly string[]): NodeId {
  let best: { id: NodeId; term: number } | undefined;
  for (const id of c.ids()) {
    if (dead.includes(id)) continue;
    const s = c.node(id).raw.status();
    if (s.role === 'leader' && (!best || s.term > best.term)) best = { id, term: s.term };
  }
  return best?.id ?? NO_NODE;
}

/** Ticks the live nodes (`tickLive`, or all at the same instant with `lockstep`) until one of them leads; returns it and the ticks it took. */
function tickUntilLeader(c: TestCluster, dead: readonly string[], lockstep = false): { leader: NodeId; ticks: number } {
  let ticks = 0;
  while (liveLeader(c, dead) === NO_NODE && ticks < T) {
    if (lockstep) {
      for (const id of c.ids()) if (!dead.includes(id)) c.tick(id);
      c.stabilize();
    } else {
      tickLive(c, dead, 1);
    }
    ticks++;
  }
  return { leader: liveLeader(c, dead), ticks };
}

t.test('the followers of a killed leader elect the first in turn at once, not after the election timeout', async (t) => {
  for (const size of [3, 5]) {
    for (const lockstep of [false, true]) {
      const c = withLeader({}, size);
      const followers = c.ids().filter((id) => id !== 'n1');
      c.isolate('n1');
      for (const id of followers) t.ok(c.node(id).raw.reportConnectionLost(n('n1')), `${id} arms an early campaign`);
      for (const id of followers) t.equal(c.node(id).raw.status().leader, NO_NODE, `${id} forgot n1`);
      t.equal(role(c, 'n2'), 'pre-candidate', 'n2, first in turn, pre-votes at once');
      // The first pre-vote is granted by the others, which forgot n1 too (and put their turns
      // off). The others' turns are ticks away, even ticking at the same instant: no split vote.
      c.stabilize();
      const { leader, ticks } = tickUntilLeader(c, ['n1'], lockstep);
      const how = `${size} nodes${lockstep ? ', ticking in lockstep' : ''}`;
      t.same([leader, ticks], ['n2', 0], `${how}: n2 leads without waiting for a tick`);
      t.equal(c.node(leader).raw.status().term, 3, `${how}: in the next term (pre-vote kept the others from bumping terms)`);
      c.propose(leader, 'after-failover');
      c.stabilize();
      for (const id of followers) t.same(c.appliedCommands(id), ['after-failover'], `${how}: ${id} applied the write`);
      tickLive(c, ['n1'], 3 * S * size);
      t.same([liveLeader(c, ['n1']), c.node(leader).raw.status().term], [leader, 3], `${how}: nobody campaigns at a later turn`);
    }
  }
});

t.test('a follower whose log is behind loses its turn; the next in turn wins', async (t) => {
  const c = withLeader();
  c.cutOneWay('n1', 'n2');
  c.propose('n1', 'only-n1-and-n3');
  c.stabilize(); // committed by n1 and n3; n2 never got it
  c.isolate('n1');
  for (const id of ['n2', 'n3']) c.node(id).raw.reportConnectionLost(n('n1'));
  const { leader, ticks } = tickUntilLeader(c, ['n1']);
  t.same([leader, ticks], ['n3', S], `n3 leads at its turn, ${S} ticks on: n2 went first, but n3 refused its pre-vote (n2's log is behind)`);
  t.same(c.appliedCommands('n3'), ['only-n1-and-n3'], 'the committed entry survives');
});

t.test('a voter that heard of the break after the first in turn asked is asked again at the next tick', async (t) => {
  const c = withLeader();
  c.isolate('n1');
  c.node('n2').raw.reportConnectionLost(n('n1'));
  c.stabilize();
  t.equal(role(c, 'n2'), 'pre-candidate', 'n2 pre-voted at once ...');
  t.equal(c.node('n3').raw.status().leader, 'n1', '... while n3 still followed n1 (under the lease it ignored the pre-vote)');
  c.node('n3').raw.reportConnectionLost(n('n1'));
  const { leader, ticks } = tickUntilLeader(c, ['n1']);
  t.same([leader, ticks], ['n2', 1], 'n2 leads after its next tick: it asked n3 again, and n3 had forgotten n1 by then');

  const once = withLeader();
  once.isolate('n1');
  once.node('n2').raw.reportConnectionLost(n('n1'));
  once.stabilize();
  once.tick('n2');
  t.same(once.takeMessages('n2').filter((m) => m.type === 'pre-vote').map((m) => m.to).sort(), ['n1', 'n3'], 'asked again: every voter that has not answered');
});

t.test('without the report (the process is paused, or the feature is off) the followers wait out the election timeout', async (t) => {
  const paused = withLeader();
  paused.isolate('n1'); // SIGSTOP: connections stay open, nothing is reported
  tickLive(paused, ['n1'], T - 1);
  t.equal(liveLeader(paused, ['n1']), NO_NODE, 'no election before the timeout');
  for (const id of ['n2', 'n3']) t.same([role(paused, id), paused.node(id).raw.status().leader], ['follower', 'n1'], `${id} still follows n1`);
  tickLive(paused, ['n1'], T);
  t.not(liveLeader(paused, ['n1']), NO_NODE, 'the election timeout elects a new leader');

  const off = withLeader({ leaderLostTicks: 0 });
  off.isolate('n1');
  for (const id of ['n2', 'n3']) t.notOk(off.node(id).raw.reportConnectionLost(n('n1')), `leaderLostTicks 0: ${id} ignores the report`);
  tickLive(off, ['n1'], T - 1);
  t.equal(liveLeader(off, ['n1']), NO_NODE, 'no election before the timeout');
  t.equal(off.node('n2').raw.status().leader, 'n1', 'the leader is not forgotten either');
});

t.test('a follower that hears from the leader after the break does not campaign at its turn', async (t) => {
  const c = withLeader();
  const sent = c.startRecording();
  t.ok(c.node('n3').raw.reportConnectionLost(n('n1')), 'n3 (second in turn) armed');
  // The connection is back (the leader is alive): its next heartbeat arrives before n3's turn.
  c.tick('n1');
  c.stabilize();
  t.equal(c.node('n3').raw.status().leader, 'n1', 'n3 follows n1 again');
  tickLive(c, [], 3 * S);
  t.same(
    sent.filter((m) => m.type === 'pre-vote' || m.type === 'vote'),
    [],
    'no (pre-)vote request was ever sent',
  );
  t.same([role(c, 'n3'), c.node('n3').raw.status().term], ['follower', 2], 'n3 is a follower in term 2');
});

t.test('voters that still hear from the leader refuse the pre-vote (lease), so a wrong report disrupts nothing', async (t) => {
  const c = withLeader();
  c.cutOneWay('n1', 'n2'); // n2 stops hearing from n1; n3 and n1 still talk
  const sent = c.startRecording();
  t.ok(c.node('n2').raw.reportConnectionLost(n('n1')), 'armed');
  c.stabilize();
  t.equal(role(c, 'n2'), 'pre-candidate', 'n2 campaigned at once (first in turn among n2 and n3)');
  tickLive(c, [], 1); // it asks again; still ignored
  const answers = sent.filter((m) => m.type === 'pre-vote-resp' && m.to === 'n2');
  t.same(answers, [], 'n1 and n3 ignored the pre-vote: both are under the leader lease');
  t.same([liveLeader(c, []), c.node('n1').raw.status().term, c.node('n3').raw.status().term], ['n1', 2, 2], 'n1 still leads term 2');
  c.heal();
  tickLive(c, [], 2);
  t.same([role(c, 'n2'), c.node('n2').raw.status().leader, c.node('n2').raw.status().term], ['follower', 'n1', 2], 'n2 follows n1 again, term unchanged');
});

t.test('granting a pre-vote puts our own turn off by a round, not to the election timeout', async (t) => {
  const c = withLeader();
  c.isolate('n1');
  c.node('n2').raw.reportConnectionLost(n('n1'));
  c.node('n3').raw.reportConnectionLost(n('n1'));
  c.processAll();
  t.equal(role(c, 'n2'), 'pre-candidate', 'n2, first in turn, pre-voted at once');
  c.deliver((m) => m.type === 'pre-vote' && m.to === 'n3');
  c.processAll();
  t.same(
    c.pending((m) => m.from === 'n3').map((m) => [m.type, m.to, m.type === 'pre-vote-resp' && !m.reject]),
    [['pre-vote-resp', 'n2', true]],
    'n3 granted n2 its pre-vote',
  );
  c.drop(() => true); // n2 never gets the grant (it was lost, or n2 died too)
  c.tick('n3', S);
  c.processAll();
  t.equal(role(c, 'n3'), 'follower', `n3 did not start a competing campaign at its turn (${S} ticks after the report)`);
  c.tick('n3', S);
  t.equal(role(c, 'n3'), 'pre-candidate', 'it campaigns a round later, long before its election timeout, since no leader came of n2\'s campaign');
});

t.test('only a follower of the lost peer acts on the report', async (t) => {
  const c = withLeader();
  t.notOk(c.node('n2').raw.reportConnectionLost(n('n3')), 'a follower: the lost peer is not its leader');
  t.equal(c.node('n2').raw.status().leader, 'n1', 'its leader is kept');
  t.notOk(c.node('n1').raw.reportConnectionLost(n('n2')), 'the leader: a follower is lost');
  t.equal(role(c, 'n1'), 'leader', 'still leading');
  t.notOk(c.node('n2').raw.reportConnectionLost(NO_NODE), 'no peer named');
  t.notOk(c.node('n2').raw.reportConnectionLost(n('n9')), 'an unknown peer');

  const learner = new TestCluster({ electionTimeoutTicks: T });
  learner.bootstrap(['n1', 'n2', 'n3'], ['n4']);
  learner.elect('n1');
  t.equal(learner.node('n4').raw.status().leader, 'n1', 'the learner follows n1');
  t.notOk(learner.node('n4').raw.reportConnectionLost(n('n1')), 'a learner arms no campaign (it cannot vote)');
  t.equal(learner.node('n4').raw.status().leader, NO_NODE, 'but it forgets the leader, so reads asked of it fail now, not at their deadline');
});

t.test('the report changes no term, vote or log: nothing to persist until a campaign starts', async (t) => {
  const c = withLeader();
  c.propose('n1', 'x');
  c.stabilize();
  const before = c.node('n3').raw.status();
  c.node('n3').raw.reportConnectionLost(n('n1')); // second in turn: it only arms
  const rd = c.node('n3').raw.ready();
  t.same(
    { hardState: rd.hardState, entries: rd.entries, snapshot: rd.snapshot, messages: rd.messages, mustSync: rd.mustSync },
    { hardState: undefined, entries: [], snapshot: undefined, messages: [], mustSync: false },
    'the Ready carries only the soft state',
  );
  t.same(rd.softState, { role: 'follower', leader: NO_NODE }, 'the leader is forgotten');
  c.node('n3').raw.advance(rd);
  const after = c.node('n3').raw.status();
  t.same([after.term, after.vote, after.commit, after.lastIndex], [before.term, before.vote, before.commit, before.lastIndex], 'term, vote, commit and log unchanged');

  const first = c.node('n2').raw.status();
  c.node('n2').raw.reportConnectionLost(n('n1')); // first in turn: a pre-vote at once
  const pre = c.node('n2').raw.ready();
  t.same([pre.hardState, pre.entries, pre.mustSync], [undefined, [], false], 'a pre-vote persists nothing either (thesis §9.6)');
  t.same(pre.messages.map((m) => m.type), ['pre-vote', 'pre-vote'], 'it only asks');
  c.node('n2').raw.advance(pre);
  const now = c.node('n2').raw.status();
  t.same([now.term, now.vote], [first.term, first.vote], 'term and vote unchanged');
});

t.test('forwarded reads waiting on the lost leader fail at once', async (t) => {
  const c = withLeader();
  c.node('n2').raw.readIndex('r1');
  c.processReady('n2'); // the read goes out to n1 ...
  c.drop((m: Message) => m.type === 'read-index'); // ... which died before answering
  c.node('n2').raw.reportConnectionLost(n('n1'));
  c.processReady('n2');
  t.same(c.node('n2').readFailures, [{ requestId: 'r1', reason: 'leadership-lost' }], 'the read fails, and the caller can retry elsewhere');
});
