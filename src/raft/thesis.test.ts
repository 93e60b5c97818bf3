/**
 * The features of Ongaro's thesis ("Consensus: Bridging Theory and Practice", 2014) that Cairn
 * implements beyond the paper, one test per rule, each named for its section: pre-vote (§9.6),
 * check-quorum (§6.2), the leader lease on votes (§4.2.3), leadership transfer (§3.10),
 * ReadIndex (§6.4), single-server membership changes with learners (§4.1-§4.3), and the
 * replication performance work of §10.2 (pipelining, batching, probing, chunked snapshots).
 *
 * Unless a test says otherwise the cluster runs with the defaults: pre-vote and check-quorum
 * on, electionTimeoutTicks 10, heartbeatTimeoutTicks 1. Time is ticks; nothing sleeps.
 */
import t from 'tap';
import { NO_NODE, logIndex, nodeId, term, type NodeId } from '../base/index.js';
import { TestCluster, testConfig } from './testing/cluster.js';
import type { ClusterOptions } from './testing/cluster.js';
import type { Message, MsgApp, MsgSnap, MsgVote, Role, Snapshot } from './types.js';

const T = 10; // electionTimeoutTicks (the default)
const n = (s: string): NodeId => nodeId(s);

const isApp = (m: Message): m is MsgApp => m.type === 'app';
const isSnap = (m: Message): m is MsgSnap => m.type === 'snap';

function role(c: TestCluster, id: string): Role {
  return c.node(id).raw.status().role;
}

function voteMsg(type: 'vote' | 'pre-vote', from: string, to: string, t: number, lastIndex: number, lastTerm: number, transfer = false): MsgVote {
  return { type, from: n(from), to: n(to), term: term(t), lastIndex: logIndex(lastIndex), lastTerm: term(lastTerm), transfer };
}

/** A three-node cluster (defaults unless overridden) with n1 elected in term 2 and everything delivered. */
function threeWithLeader(opts: ClusterOptions = {}): TestCluster {
  const c = new TestCluster(opts);
  c.bootstrap(['n1', 'n2', 'n3']);
  c.elect('n1');
  return c;
}

/** Campaigns on `id` and delivers everything except appends, so it leads with its no-op uncommitted. */
function electHoldingAppends(c: TestCluster, id: string): void {
  c.node(id).raw.campaign();
  c.pump((m) => m.type !== 'app');
  if (role(c, id) !== 'leader') throw new Error(`${id} did not win`);
}

const to = (id: string) => (m: Message): boolean => m.to === id || m.from === id;

/** A pump filter that holds back (delays, does not lose) every message to or from `ids`. */
const holding = (...ids: string[]) => (m: Message): boolean => !ids.includes(m.to) && !ids.includes(m.from);

// ---------------------------------------------------------------------------------------------
// §9.6 Pre-vote
// ---------------------------------------------------------------------------------------------

t.test('§9.6 a partitioned node pre-votes without raising its term, and on rejoining does not disrupt the leader', async (t) => {
  const c = threeWithLeader();
  c.isolate('n3');
  c.tickAndStabilize(10 * T);
  const s3 = c.node('n3').raw.status();
  t.equal(s3.term, 2, 'after 10 election timeouts alone n3 is still in term 2');
  t.equal(s3.role, 'pre-candidate', 'it keeps asking for pre-votes');
  t.same([c.leader(), c.node('n1').raw.status().term], ['n1', 2], 'n1 leads term 2 with n2 throughout');

  c.heal();
  c.tickAndStabilize(5 * T);
  for (const id of ['n1', 'n2', 'n3']) {
    const s = c.node(id).raw.status();
    t.same([s.term, s.leader], [2, 'n1'], `${id}: still term 2 under n1`);
  }
  t.equal(role(c, 'n3'), 'follower', 'n3 rejoined as a follower');

  t.test('without pre-vote the same partition disrupts the leader (what §9.6 prevents)', async (t) => {
    const c = threeWithLeader({ preVote: false });
    c.isolate('n3');
    c.tickAndStabilize(10 * T);
    t.ok(c.node('n3').raw.status().term > 5, `n3 inflated its term to ${c.node('n3').raw.status().term}`);
    c.heal();
    c.tickAndStabilize(5 * T);
    t.ok(c.node('n1').raw.status().term > 2, 'on rejoining it forced a new term on the cluster');
  });
});

t.test('§9.6 a pre-vote is granted only to an up-to-date log, and changes neither the voter’s term nor its vote', async (t) => {
  // The voter: log 1 (t1), 2 (t2), 3 (t2); term 2; voted for n2; no leader known.
  const cases: Array<[string, MsgVote, boolean, number]> = [
    ['up to date (3, t2), next term', voteMsg('pre-vote', 'n3', 'n1', 3, 3, 2), true, 3],
    ['more up to date (2, t3), next term', voteMsg('pre-vote', 'n3', 'n1', 3, 2, 3), true, 3],
    ['shorter log (2, t2)', voteMsg('pre-vote', 'n3', 'n1', 3, 2, 2), false, 2],
    ['older last term (9, t1)', voteMsg('pre-vote', 'n3', 'n1', 3, 9, 1), false, 2],
    ['same term as the voter, which voted for n2', voteMsg('pre-vote', 'n3', 'n1', 2, 3, 2), false, 2],
  ];
  for (const [what, msg, granted, respTerm] of cases) {
    const c = new TestCluster();
    c.startWithLog('n1', { config: testConfig(['n1', 'n2', 'n3']), terms: [2, 2], term: 2, vote: 'n2' });
    c.processAll();
    c.inject(msg);
    const rd = c.node('n1').raw.ready();
    t.same(
      rd.messages.map((m) => [m.type, m.to, m.term, m.type === 'pre-vote-resp' ? m.reject : undefined]),
      [['pre-vote-resp', 'n3', respTerm, !granted]],
      `${what}: ${granted ? 'granted' : 'refused'} (answer in term ${respTerm})`,
    );
    t.equal(rd.hardState, undefined, `${what}: no hard state change to persist`);
    const s = c.node('n1').raw.status();
    t.same([s.term, s.vote, s.role], [2, 'n2', 'follower'], `${what}: the voter keeps term 2 and its vote for n2`);
    c.node('n1').raw.advance(rd);
  }
});

t.test('§9.6 a pre-candidate becomes candidate (term + 1) only after a majority of pre-votes', async (t) => {
  const c = new TestCluster();
  c.bootstrap(['n1', 'n2', 'n3', 'n4', 'n5']);
  c.node('n1').raw.campaign();
  c.processAll();
  const pre = c.pending((m) => m.type === 'pre-vote');
  t.same(
    pre.map((m) => [m.to, m.term]),
    [
      ['n2', 2],
      ['n3', 2],
      ['n4', 2],
      ['n5', 2],
    ],
    'pre-votes ask about term 2',
  );
  t.same([role(c, 'n1'), c.node('n1').raw.status().term, c.node('n1').raw.status().vote], ['pre-candidate', 1, NO_NODE], 'still term 1, no vote cast');
  c.pump((m) => m.type === 'pre-vote' && m.to === 'n2');
  c.pump((m) => m.type === 'pre-vote-resp');
  t.equal(role(c, 'n1'), 'pre-candidate', 'two of five pre-votes are not enough');
  c.pump((m) => m.type === 'pre-vote' && m.to === 'n3');
  c.pump((m) => m.type === 'pre-vote-resp');
  const s = c.node('n1').raw.status();
  t.same([s.role, s.term, s.vote], ['candidate', 2, 'n1'], 'three of five: a real election in term 2');
  c.stabilize();
  t.equal(c.leader(), 'n1');
});

// ---------------------------------------------------------------------------------------------
// §6.2 Check-quorum
// ---------------------------------------------------------------------------------------------

t.test('§6.2 a leader that hears from no quorum for an election timeout steps down', async (t) => {
  const c = threeWithLeader();
  c.isolate('n1');
  let ticks = 0;
  while (role(c, 'n1') === 'leader' && ticks < 10 * T) {
    c.tick('n1');
    c.processAll();
    c.deliver();
    ticks++;
  }
  t.ok(ticks > T && ticks <= 2 * T, `stepped down after ${ticks} ticks: within two election timeouts of its last quorum`);
  const s = c.node('n1').raw.status();
  t.same([s.role, s.term, s.leader], ['follower', 2, NO_NODE], 'follower of the same term, with no known leader');
  t.throws(() => c.propose('n1', 'x'), { code: 'NOT_LEADER' }, 'and refuses proposals');

  t.test('a leader in touch with a quorum stays', async (t) => {
    const c = threeWithLeader();
    c.isolate('n3');
    c.tickAndStabilize(10 * T);
    t.same([role(c, 'n1'), c.node('n1').raw.status().term], ['leader', 2], 'n1 + n2 are a quorum of three');
  });
  t.test('without check-quorum an isolated leader stays leader', async (t) => {
    const c = threeWithLeader({ checkQuorum: false });
    c.isolate('n1');
    c.tick('n1', 10 * T);
    t.equal(role(c, 'n1'), 'leader', 'what §6.2 fixes: it would keep accepting requests it cannot commit');
  });
});

// ---------------------------------------------------------------------------------------------
// §4.2.3 Leader lease on votes (disruptive servers)
// ---------------------------------------------------------------------------------------------

t.test('§4.2.3 a follower that heard from its leader within the election timeout ignores (pre-)vote requests, unless they carry `transfer`', async (t) => {
  const c = threeWithLeader();
  for (const type of ['pre-vote', 'vote'] as const) {
    c.inject(voteMsg(type, 'n3', 'n2', 3, 99, 9));
    t.same(c.takeMessages('n2'), [], `a ${type} request in the lease is dropped without an answer`);
    const s = c.node('n2').raw.status();
    t.same([s.term, s.vote, s.leader], [2, 'n1', 'n1'], `${type}: term, vote and leader unchanged`);
  }
  c.inject(voteMsg('vote', 'n3', 'n2', 3, 2, 2, true));
  t.same(
    c.takeMessages('n2').map((m) => [m.type, m.to, m.term, m.type === 'vote-resp' ? m.reject : undefined]),
    [['vote-resp', 'n3', 3, false]],
    'a vote for a leadership transfer is considered despite the lease, and granted',
  );
  t.same([c.node('n2').raw.status().term, c.node('n2').raw.status().vote], [3, 'n3']);

  t.test('once an election timeout passes without the leader, requests are considered again', async (t) => {
    const c = threeWithLeader();
    c.isolate('n1');
    c.tick('n2', T);
    c.takeMessages('n2');
    c.inject(voteMsg('pre-vote', 'n3', 'n2', 3, 2, 2));
    t.same(
      c.takeMessages('n2').filter((m) => m.type === 'pre-vote-resp').map((m) => [m.to, m.term, m.type === 'pre-vote-resp' ? m.reject : undefined]),
      [['n3', 3, false]],
      'the pre-vote is granted',
    );
  });
});

t.test('§4.2.3 a removed server cannot disrupt the cluster', async (t) => {
  const c = threeWithLeader();
  c.node('n1').raw.proposeConfigChange({ type: 'remove', id: n('n3') });
  c.stabilize();
  t.same(c.node('n1').raw.status().config.members.map((m) => m.id), ['n1', 'n2'], 'n3 is out');
  const delivered = c.startRecording();
  c.tickAndStabilize(10 * T);
  t.ok(delivered.some((m) => m.from === 'n3' && m.type === 'pre-vote'), 'n3, never told of its removal, hears no heartbeats and campaigns');
  t.same([c.leader(), c.node('n1').raw.status().term], ['n1', 2], 'n3 times out and campaigns, but n1 leads term 2 undisturbed');
  t.equal(c.node('n2').raw.status().term, 2);
});

// ---------------------------------------------------------------------------------------------
// §3.10 Leadership transfer
// ---------------------------------------------------------------------------------------------

t.test('§3.10 leadership transfer to an up-to-date follower: TimeoutNow, and it wins the next term at once', async (t) => {
  const c = threeWithLeader();
  c.propose('n1', 'x');
  c.stabilize();
  const delivered = c.startRecording();
  c.node('n1').raw.transferLeadership(n('n2'));
  c.processAll();
  t.same(
    c.pending().map((m) => [m.type, m.from, m.to, m.term]),
    [['timeout-now', 'n1', 'n2', 2]],
    'n2 has the whole log: TimeoutNow goes out at once',
  );
  c.stabilize();
  t.same([c.leader(), c.node('n2').raw.status().term], ['n2', 3], 'n2 leads term 3');
  t.same([role(c, 'n1'), c.node('n1').raw.status().leader], ['follower', 'n2'], 'n1 follows n2');
  const votes = delivered.filter((m) => m.type === 'vote' || m.type === 'pre-vote');
  t.ok(votes.length > 0 && votes.every((m) => m.type === 'vote' && m.transfer && m.from === 'n2'), 'n2 skipped pre-vote and flagged its requests as a transfer (past the lease)');
  c.propose('n2', 'y');
  c.stabilize();
  for (const id of ['n1', 'n2', 'n3']) t.same(c.appliedCommands(id), ['x', 'y'], `${id} applied x, y`);
});

t.test('§3.10 only the leader transfers leadership: a TimeoutNow from anyone else, or of another term, is dropped', async (t) => {
  const c = threeWithLeader();
  const timeoutNow = (from: string, t: number): Message => ({ type: 'timeout-now', from: n(from), to: n('n2'), term: term(t) });
  for (const [from, tm, what] of [
    ['n3', 2, 'a fellow follower of the same term'],
    ['n9', 2, 'a stranger of the same term'],
    ['n3', 7, 'a follower claiming a higher term'],
    ['n1', 7, 'the leader\'s name with a higher term'],
    ['n1', 1, 'the leader\'s name with an older term'],
  ] as const) {
    c.inject(timeoutNow(from, tm));
    t.same(c.takeMessages('n2'), [], `${what}: no election starts`);
    const s = c.node('n2').raw.status();
    t.same([s.role, s.term, s.leader], ['follower', 2, 'n1'], `${what}: n2 still follows n1 in term 2`);
  }
  c.inject(timeoutNow('n1', 2));
  t.ok(c.takeMessages('n2').some((m) => m.type === 'vote' && m.transfer && m.term === 3), 'the same message from the leader of term 2 starts the transfer election');
});

t.test('§3.10 leadership transfer to a slow follower: it catches up first; proposals are refused meanwhile', async (t) => {
  const c = threeWithLeader();
  // n3 is slow: its appends are held back, not lost.
  for (const x of ['a', 'b', 'c']) c.propose('n1', x);
  c.pump((m) => m.to !== 'n3');
  t.equal(c.node('n3').raw.status().lastIndex, 2, 'n3 lacks a, b, c');
  c.node('n1').raw.transferLeadership(n('n3'));
  c.processAll();
  t.equal(c.pending((m) => m.type === 'timeout-now').length, 0, 'no TimeoutNow while n3 is behind');
  t.equal(c.node('n1').raw.status().leadTransferee, 'n3', 'the transfer is under way');
  t.throws(() => c.propose('n1', 'd'), { code: 'PROPOSAL_DROPPED' }, 'a proposal during the transfer is dropped');
  t.throws(() => c.node('n1').raw.proposeConfigChange({ type: 'add-learner', id: n('n4'), address: 'n4:7500' }), { code: 'PROPOSAL_DROPPED' }, 'so is a membership change');
  c.pump((m) => m.type !== 'timeout-now');
  t.equal(c.node('n3').raw.status().lastIndex, 5, 'n3 caught up');
  t.same(c.pending((m) => m.type === 'timeout-now').map((m) => [m.to, m.term]), [['n3', 2]], 'then n1 sends TimeoutNow');
  c.stabilize();
  t.same([c.leader(), c.node('n3').raw.status().term], ['n3', 3], 'n3 leads term 3');
  t.same(c.appliedCommands('n3'), ['a', 'b', 'c'], 'with every entry');
});

t.test('§3.10 leadership can only be transferred to a voter', async (t) => {
  const c = new TestCluster();
  c.bootstrap(['n1', 'n2', 'n3'], ['n4']);
  c.elect('n1');
  t.throws(() => c.node('n1').raw.transferLeadership(n('n4')), { code: 'INVALID_ARGUMENT' }, 'not to a learner');
  t.throws(() => c.node('n1').raw.transferLeadership(n('n9')), { code: 'INVALID_ARGUMENT' }, 'not to a stranger');
  t.throws(() => c.node('n2').raw.transferLeadership(n('n3')), { code: 'NOT_LEADER' }, 'only the leader transfers');
  t.equal(c.node('n1').raw.status().leadTransferee, NO_NODE, 'no transfer started');
});

t.test('§3.10 a transfer that does not finish within an election timeout is aborted', async (t) => {
  const c = threeWithLeader();
  c.isolate('n3');
  c.propose('n1', 'a');
  c.stabilize();
  c.node('n1').raw.transferLeadership(n('n3'));
  c.tickAndStabilize(T - 1);
  t.equal(c.node('n1').raw.status().leadTransferee, 'n3', `still transferring after ${T - 1} ticks`);
  t.throws(() => c.propose('n1', 'b'), { code: 'PROPOSAL_DROPPED' });
  c.tickAndStabilize(1);
  const s = c.node('n1').raw.status();
  t.same([s.leadTransferee, s.role, s.term], [NO_NODE, 'leader', 2], `after ${T} ticks the transfer is off; n1 still leads term 2`);
  c.propose('n1', 'b');
  c.stabilize();
  t.same(c.appliedCommands('n2'), ['a', 'b'], 'and proposals are accepted again');
});

// ---------------------------------------------------------------------------------------------
// §6.4 ReadIndex
// ---------------------------------------------------------------------------------------------

t.test('§6.4 a new leader holds reads until its no-op (an entry of its term) commits', async (t) => {
  const c = new TestCluster();
  c.bootstrap(['n1', 'n2', 'n3']);
  electHoldingAppends(c, 'n1');
  t.equal(c.node('n1').raw.status().commit, 1, 'the no-op (2) is not committed');
  c.node('n1').raw.readIndex('r1');
  c.processAll();
  t.same([c.node('n1').readStates, c.node('n1').readFailures], [[], []], 'the read waits');
  t.equal(c.pending((m) => m.type === 'heartbeat').length, 0, 'no confirmation round yet');
  c.stabilize();
  t.same(c.node('n1').readStates, [{ requestId: 'r1', index: 2 }], 'after the no-op commits the read is served at 2, not the stale 1');
});

t.test('§6.4 a read is released only after a quorum acknowledges a heartbeat round started after it arrived', async (t) => {
  const c = threeWithLeader();
  const n1 = c.node('n1');
  n1.raw.readIndex('r1');
  c.processReady('n1');
  t.same(
    c.pending((m) => m.type === 'heartbeat').map((m) => [m.to, m.type === 'heartbeat' ? m.readSeq : -1]),
    [
      ['n2', 1],
      ['n3', 1],
    ],
    'the read starts heartbeat round 1',
  );
  c.deliver((m) => m.type === 'heartbeat');
  c.processAll();
  const dropped = c.drop((m) => m.type === 'heartbeat-resp');
  t.equal(dropped.length, 2, 'both acknowledgements are lost');
  c.processAll();
  t.same(n1.readStates, [], 'without a quorum of acknowledgements the read stays pending');

  // Meanwhile a proposal commits: the read must still be served at the commit index it arrived at.
  c.propose('n1', 'x');
  c.pump((m) => m.type === 'app' || m.type === 'app-resp');
  t.equal(n1.raw.status().commit, 3, 'x committed at 3');
  t.same(n1.readStates, [], 'appends are not a confirmation round: still pending');

  c.tick('n1'); // the next heartbeat carries round 1 again
  c.processReady('n1');
  c.pump((m) => (m.type === 'heartbeat' || m.type === 'heartbeat-resp') && to('n2')(m));
  t.same(n1.readStates, [{ requestId: 'r1', index: 2 }], 'n1 + n2 acknowledged round 1: released at 2, the commit index when it arrived');

  t.test('the check catches a planted bug that answers without a heartbeat round', async (t) => {
    const c = threeWithLeader({ plantedBugs: { readIndexWithoutHeartbeat: true } });
    c.node('n1').raw.readIndex('r1');
    c.processReady('n1');
    c.drop(() => true);
    t.same(c.node('n1').readStates, [{ requestId: 'r1', index: 2 }], 'with the bug the read is released with no acknowledgement at all');
  });
});

t.test('§6.4 reads that arrive together share one heartbeat round', async (t) => {
  const c = threeWithLeader();
  for (const id of ['r1', 'r2', 'r3']) c.node('n1').raw.readIndex(id);
  c.processReady('n1');
  t.equal(c.pending((m) => m.type === 'heartbeat').length, 2, 'one heartbeat per follower for three reads');
  c.stabilize();
  t.same(c.node('n1').readStates.map((r) => [r.requestId, r.index]), [['r1', 2], ['r2', 2], ['r3', 2]]);
});

t.test('§6.4 a follower’s read is forwarded to the leader and answered with the leader’s read index', async (t) => {
  const c = threeWithLeader();
  c.propose('n1', 'x');
  c.stabilize();
  c.node('n2').raw.readIndex('f1');
  c.processReady('n2');
  t.same(
    c.pending((m) => m.from === 'n2').map((m) => [m.type, m.to, m.type === 'read-index' ? m.requestIds : []]),
    [['read-index', 'n1', ['f1']]],
    'n2 forwards the read to n1',
  );
  c.stabilize();
  t.same(c.node('n2').readStates, [{ requestId: 'f1', index: 3 }], 'n2 is told index 3, the leader’s commit index');
  t.same(c.node('n1').readStates, [], 'the leader does not serve it locally');
});

t.test('§6.4 a leader that loses leadership fails its pending reads, local and forwarded', async (t) => {
  const c = threeWithLeader();
  c.node('n1').raw.readIndex('r1');
  c.node('n2').raw.readIndex('f1');
  c.processAll();
  c.deliver((m) => m.type === 'read-index');
  c.drop((m) => m.type === 'heartbeat');
  c.processAll();
  // n1 still reaches n2 and n3, but hears nothing back.
  c.cutOneWay('n2', 'n1');
  c.cutOneWay('n3', 'n1');
  let ticks = 0;
  while (role(c, 'n1') === 'leader' && ticks < 5 * T) {
    c.tick('n1');
    c.stabilize();
    ticks++;
  }
  t.equal(role(c, 'n1'), 'follower', `n1 stepped down (check-quorum) after ${ticks} ticks`);
  t.same(c.node('n1').readFailures, [{ requestId: 'r1', reason: 'leadership-lost' }], 'its own read fails: leadership-lost');
  t.same(c.node('n1').readStates, [], 'and was never served');
  t.same(c.node('n2').readFailures, [{ requestId: 'f1', reason: 'not-leader' }], 'the forwarded read is refused back to n2');
  t.same(c.node('n2').readStates, []);
});

t.test('§6.4 a single-voter leader is its own quorum: reads are served at once', async (t) => {
  const c = new TestCluster();
  c.bootstrap(['n1']);
  c.elect('n1');
  c.propose('n1', 'x');
  c.stabilize();
  c.node('n1').raw.readIndex('r1');
  c.processReady('n1');
  t.same(c.node('n1').readStates, [{ requestId: 'r1', index: 3 }], 'released in the next Ready, at commit 3');
});

t.test('§6.4 a follower that knows no leader fails a read with no-leader', async (t) => {
  const c = new TestCluster();
  c.bootstrap(['n1', 'n2', 'n3']);
  c.node('n2').raw.readIndex('q');
  c.processAll();
  t.same(c.node('n2').readFailures, [{ requestId: 'q', reason: 'no-leader' }]);
  t.same(c.pending(), [], 'nothing is sent');
});

// ---------------------------------------------------------------------------------------------
// §4.1 Cluster membership changes (single-server, with learners)
// ---------------------------------------------------------------------------------------------

t.test('§4.1 a learner receives the log but neither votes nor counts toward commit', async (t) => {
  const c = threeWithLeader();
  c.propose('n1', 'a');
  c.stabilize();
  c.node('n1').raw.proposeConfigChange({ type: 'add-learner', id: n('n4'), address: 'n4:7500' });
  c.addEmpty('n4');
  c.stabilize();
  t.same(c.logSummary('n4'), c.logSummary('n1'), 'the learner received the whole log');
  t.same(c.appliedCommands('n4'), ['a'], 'and applied it');
  t.same(
    c.node('n4').raw.status().config.members.map((m) => [m.id, m.suffrage]),
    [
      ['n1', 'voter'],
      ['n2', 'voter'],
      ['n3', 'voter'],
      ['n4', 'learner'],
    ],
  );

  // It never campaigns, and candidates do not ask it.
  c.isolate('n4');
  c.tick('n4', 10 * T);
  t.same([role(c, 'n4'), c.node('n4').raw.status().term], ['follower', 2], 'a learner never campaigns');
  t.same(c.takeMessages('n4'), [], 'and sends nothing');
  c.heal();
  c.node('n2').raw.campaign();
  c.processAll();
  t.same(c.pending((m) => m.type === 'pre-vote' || m.type === 'vote').map((m) => m.to).sort(), ['n1', 'n3'], 'a candidate asks only the voters');
  c.drop(() => true);

  // Commit proceeds without the learner...
  const c2 = threeWithLeader();
  c2.node('n1').raw.proposeConfigChange({ type: 'add-learner', id: n('n4'), address: 'n4:7500' });
  c2.addEmpty('n4');
  c2.stabilize();
  c2.isolate('n4');
  const b = c2.propose('n1', 'b');
  c2.stabilize();
  t.equal(c2.node('n1').raw.status().commit, b.index, 'with the learner cut off, b commits on n1, n2, n3');
  // ...and does not proceed with only the learner: n1 + n4 are not a majority of the voters.
  c2.heal();
  const x = c2.propose('n1', 'x');
  c2.pump(holding('n2', 'n3')); // the voters n2 and n3 are unreachable (their messages wait)
  t.ok(c2.node('n4').disk.entries.some((e) => e.index === x.index), 'the learner stores x and acknowledges it');
  t.equal(c2.node('n1').raw.status().progress?.get(n('n4'))?.match, x.index, 'the leader knows the learner has x');
  t.equal(c2.node('n1').raw.status().commit, b.index, 'but x does not commit: the learner does not count');
  c2.stabilize();
  t.equal(c2.node('n1').raw.status().commit, x.index, 'once the voters answer x commits');
});

t.test('§4.1 promoting a learner makes it a voter: it now counts toward the quorum', async (t) => {
  const c = threeWithLeader();
  c.node('n1').raw.proposeConfigChange({ type: 'add-learner', id: n('n4'), address: 'n4:7500' });
  c.addEmpty('n4');
  c.stabilize();
  // n3 and n4 unreachable (their messages wait): n1 + n2 are 2 of the 3 voters.
  const a = c.propose('n1', 'a');
  c.pump(holding('n3', 'n4'));
  t.equal(c.node('n1').raw.status().commit, a.index, 'as a learner n4 is not needed: n1 + n2 are 2 of 3 voters');
  c.stabilize();
  c.node('n1').raw.proposeConfigChange({ type: 'promote', id: n('n4') });
  c.stabilize();
  for (const id of ['n1', 'n2', 'n3', 'n4']) {
    t.same(
      c.node(id).raw.status().config.members.find((m) => m.id === 'n4')?.suffrage,
      'voter',
      `${id} sees n4 as a voter`,
    );
  }
  const b = c.propose('n1', 'b');
  c.pump(holding('n3', 'n4'));
  t.ok(c.node('n1').raw.status().commit < b.index, 'now n1 + n2 are only 2 of 4 voters: b does not commit');
  c.pump(holding('n3'));
  t.equal(c.node('n1').raw.status().commit, b.index, 'with n4’s acknowledgement (3 of 4) b commits');
  c.stabilize();
  t.same(c.appliedCommands('n4'), ['a', 'b']);
});

t.test('§4.1 removing a follower: the leader stops replicating to it and the quorum shrinks', async (t) => {
  const c = threeWithLeader();
  const rm = c.node('n1').raw.proposeConfigChange({ type: 'remove', id: n('n3') });
  t.same([...(c.node('n1').raw.status().progress?.keys() ?? [])].sort(), ['n1', 'n2'], 'the change takes effect on append: no more progress for n3');
  c.stabilize();
  t.equal(c.node('n1').raw.status().commit, rm.index, 'committed by n1 and n2 (the new configuration)');
  c.propose('n1', 'x');
  c.processReady('n1');
  t.same(c.pending((m) => m.from === 'n1').map((m) => m.to), ['n2'], 'appends go only to n2');
  c.stabilize();
  c.isolate('n2');
  const y = c.propose('n1', 'y');
  c.stabilize();
  t.ok(c.node('n1').raw.status().commit < y.index, 'without n2, 1 of 2 voters: y does not commit');
});

t.test('§4.2.2 removing the leader: it leads until the change commits, then steps down, and the rest elect a new leader', async (t) => {
  const c = threeWithLeader();
  const rm = c.node('n1').raw.proposeConfigChange({ type: 'remove', id: n('n1') });
  c.processReady('n1');
  t.same(c.node('n1').raw.status().config.members.map((m) => m.id), ['n2', 'n3'], 'the new configuration is in force on n1 at once');
  c.pump(to('n2'));
  const s = c.node('n1').raw.status();
  t.same([s.role, s.commit], ['leader', 2], 'with only n2’s acknowledgement (1 of the 2 new voters) n1 still leads, uncommitted');
  c.pump(to('n3'));
  const s2 = c.node('n1').raw.status();
  t.same([s2.role, s2.commit], ['follower', rm.index], 'when n2 and n3 have it, n1 commits the change and steps down');

  let rounds = 0;
  while (![c.leader()].some((l) => l === 'n2' || l === 'n3') && rounds < 10 * T) {
    c.tickAndStabilize(1);
    rounds++;
  }
  const leader = c.leader();
  t.ok(leader === 'n2' || leader === 'n3', `n2 and n3 elected ${leader} after ${rounds} ticks`);
  t.equal(c.node(leader).raw.status().term, 3, 'in term 3');
  t.equal(role(c, 'n1'), 'follower', 'n1, no longer a voter, never campaigns');
  const z = c.propose(leader, 'z');
  c.stabilize();
  t.equal(c.node(leader).raw.status().commit, z.index, 'the two-node cluster commits');
  t.same(c.appliedCommands('n1'), [], 'n1 no longer receives entries');
});

t.test('§4.1 one change at a time: a second change while the first is uncommitted is refused', async (t) => {
  const c = threeWithLeader();
  c.node('n1').raw.proposeConfigChange({ type: 'add-learner', id: n('n4'), address: 'n4:7500' });
  t.throws(
    () => c.node('n1').raw.proposeConfigChange({ type: 'add-learner', id: n('n5'), address: 'n5:7500' }),
    { code: 'INVALID_CONFIG_CHANGE' },
    'refused while the first is uncommitted',
  );
  c.addEmpty('n4');
  c.stabilize();
  t.doesNotThrow(() => c.node('n1').raw.proposeConfigChange({ type: 'add-learner', id: n('n5'), address: 'n5:7500' }), 'accepted once it commits');
  t.throws(
    () => c.node('n1').raw.proposeConfigChange({ type: 'remove', id: n('n9') }),
    { code: 'INVALID_CONFIG_CHANGE' },
    'a change naming a non-member is refused too',
  );
});

t.test('§4.1 (errata) a new leader refuses a membership change until an entry of its term commits', async (t) => {
  const c = new TestCluster();
  c.bootstrap(['n1', 'n2', 'n3']);
  electHoldingAppends(c, 'n1');
  t.throws(
    () => c.node('n1').raw.proposeConfigChange({ type: 'add-learner', id: n('n4'), address: 'n4:7500' }),
    { code: 'PROPOSAL_DROPPED' },
    'refused while its no-op is uncommitted',
  );
  t.doesNotThrow(() => c.propose('n1', 'x'), 'ordinary proposals are accepted');
  c.stabilize();
  t.doesNotThrow(() => c.node('n1').raw.proposeConfigChange({ type: 'add-learner', id: n('n4'), address: 'n4:7500' }), 'accepted after the no-op commits');
});

t.test('§4.1 a configuration takes effect when appended, and reverts when its entry is truncated', async (t) => {
  // The lease is not the subject here: without it n3 can be elected without waiting out timeouts.
  const c = new TestCluster({ preVote: false, checkQuorum: false });
  c.bootstrap(['n1', 'n2', 'n3', 'n4', 'n5']);
  c.elect('n1');
  const memberIds = (id: string): string[] => c.node(id).raw.status().config.members.map((m) => m.id);
  const ch = c.node('n1').raw.proposeConfigChange({ type: 'add-learner', id: n('n6'), address: 'n6:7500' });
  c.processReady('n1');
  c.pump(to('n2'));
  t.same(memberIds('n2'), ['n1', 'n2', 'n3', 'n4', 'n5', 'n6'], 'n2 appended the change: in force there, uncommitted');
  t.equal(c.node('n2').raw.status().commit, 2, 'n2 has not seen it commit');
  t.ok(c.node('n1').raw.status().commit < ch.index, 'nor has n1 (2 of 5)');

  // n1 is deposed: n3 is elected by n3, n4, n5 and overwrites index 3.
  c.partition(['n1'], ['n2', 'n3', 'n4', 'n5']);
  c.drop((m) => m.from === 'n1');
  c.node('n3').raw.campaign();
  c.stabilize();
  t.same([c.leader(), c.node('n3').raw.status().term], ['n3', 3], 'n3 leads term 3');
  t.same(c.logSummary('n2')[ch.index - 1], [ch.index, 3, 'noop'], 'n2’s config entry was overwritten by n3’s no-op');
  t.same(memberIds('n2'), ['n1', 'n2', 'n3', 'n4', 'n5'], 'and n2’s configuration reverted');

  c.heal();
  c.tick('n3');
  c.stabilize();
  t.same(memberIds('n1'), ['n1', 'n2', 'n3', 'n4', 'n5'], 'n1, back as a follower, reverts too');
  t.same(c.logSummary('n1'), c.logSummary('n3'));
});

// ---------------------------------------------------------------------------------------------
// §10.2 Replication performance: pipelining, batching, probing, chunked snapshots
// ---------------------------------------------------------------------------------------------

t.test('§10.2 in replicate state appends are pipelined without waiting for acks, up to maxInflightMsgs', async (t) => {
  const c = threeWithLeader({ maxInflightMsgs: 3 });
  t.equal(c.node('n1').raw.status().progress?.get(n('n2'))?.state, 'replicate');
  for (let i = 1; i <= 5; i++) {
    c.propose('n1', `p${i}`);
    c.processReady('n1');
  }
  const appsTo2 = (): number[][] => c.pending((m) => isApp(m) && m.to === 'n2').map((m) => (isApp(m) ? m.entries.map((e) => e.index) : []));
  t.same(appsTo2(), [[3], [4], [5]], 'three appends in flight at once; p4 and p5 wait for a free slot');
  const first = c.pending((m) => isApp(m) && m.to === 'n2')[0];
  c.deliver((m) => m === first);
  c.processReady('n2');
  c.deliver((m) => m.from === 'n2');
  c.processReady('n1');
  t.same(appsTo2(), [[4], [5], [6, 7]], 'one acknowledgement frees one slot: p4 and p5 go out together');
  c.stabilize();
  t.same(c.appliedCommands('n2'), ['p1', 'p2', 'p3', 'p4', 'p5']);
});

t.test('§10.2 proposals between two Readys go out as one append per follower (batching)', async (t) => {
  const c = threeWithLeader();
  for (const x of ['a', 'b', 'c']) c.propose('n1', x);
  c.processReady('n1');
  t.same(
    c.pending(isApp).map((m) => [m.to, isApp(m) ? m.entries.map((e) => e.index) : []]),
    [
      ['n2', [3, 4, 5]],
      ['n3', [3, 4, 5]],
    ],
    'one append per follower carrying all three',
  );
});

t.test('§10.2 a rejected append in replicate state sends the follower back to probe', async (t) => {
  const c = threeWithLeader();
  c.propose('n1', 'x');
  c.processReady('n1');
  c.propose('n1', 'y');
  c.processReady('n1');
  const [a, b] = c.pending((m) => isApp(m) && m.to === 'n2');
  t.same([a, b].map((m) => (m && isApp(m) ? [m.index, m.entries.map((e) => e.index)] : [])), [[2, [3]], [3, [4]]], 'two pipelined appends');
  c.drop((m) => m === a);
  c.deliver((m) => m === b);
  c.processReady('n2');
  c.deliver((m) => m.from === 'n2');
  const pr = c.node('n1').raw.status().progress?.get(n('n2'));
  t.same(pr && [pr.state, pr.match, pr.next], ['probe', 2, 3], 'after the rejection n2 is probed from index 3');
  c.processReady('n1');
  t.same(
    c.pending((m) => isApp(m) && m.to === 'n2' && m.index === 2).map((m) => (isApp(m) ? m.entries.map((e) => e.index) : [])),
    [[3, 4]],
    'the probe resends from 3',
  );
  c.stabilize();
  t.same(c.appliedCommands('n2'), ['x', 'y']);
  t.equal(c.node('n1').raw.status().progress?.get(n('n2'))?.state, 'replicate', 'and replication resumes');
});

t.test('§10.2 in probe state at most one append is outstanding per heartbeat', async (t) => {
  const c = new TestCluster();
  c.bootstrap(['n1', 'n2', 'n3']);
  electHoldingAppends(c, 'n1');
  t.equal(c.node('n1').raw.status().progress?.get(n('n2'))?.state, 'probe', 'a new leader probes');
  c.drop((m) => isApp(m) && m.to === 'n2'); // the first probe is lost
  const appsTo2 = (): number => c.pending((m) => isApp(m) && m.to === 'n2').length;
  c.propose('n1', 'a');
  c.propose('n1', 'b');
  c.processAll();
  t.equal(appsTo2(), 0, 'no new append while the probe is unanswered');
  const heartbeatRound = (): void => {
    c.tick('n1');
    c.processAll();
    c.pump((m) => (m.type === 'heartbeat' || m.type === 'heartbeat-resp') && to('n2')(m));
  };
  heartbeatRound();
  t.equal(appsTo2(), 1, 'a heartbeat response allows one more probe');
  c.propose('n1', 'c');
  c.processAll();
  t.equal(appsTo2(), 1, 'still one: new proposals wait');
  heartbeatRound();
  t.equal(appsTo2(), 2, 'one more per heartbeat');
  c.stabilize();
  t.same(c.appliedCommands('n2'), ['a', 'b', 'c'], 'once answered, replication catches up');
});

t.test('§10.2 appends lost in replicate state are resent after a heartbeat response, with nothing new proposed', async (t) => {
  // The paper (§5.3): "If followers crash or run slowly, or if network packets are lost, the
  // leader retries AppendEntries RPCs indefinitely until all followers eventually store all
  // log entries" - also when no new entry comes along to reveal the gap.
  const c = threeWithLeader();
  t.equal(c.node('n1').raw.status().progress?.get(n('n2'))?.state, 'replicate', 'n2 is in replicate state');
  c.cutOneWay('n1', 'n2'); // everything n1 sends n2 for a while is lost
  c.propose('n1', 'x');
  c.stabilize();
  t.equal(c.node('n1').raw.status().commit, 3, 'x commits with n3');
  t.same(c.appliedCommands('n2'), [], 'n2 lost the append and the commit update');
  c.heal();
  const delivered = c.startRecording();
  for (let i = 0; i < 3; i++) {
    c.tick('n1');
    c.stabilize();
  }
  t.ok(delivered.some((m) => m.type === 'heartbeat-resp' && m.from === 'n2'), 'n2 answers heartbeats: the leader knows it is alive (match 2 < last 3)');
  t.ok(delivered.some((m) => isApp(m) && m.to === 'n2'), 'so the leader sends n2 an append');
  t.same(c.appliedCommands('n2'), ['x'], 'and n2 receives x');
  t.equal(c.node('n1').raw.status().progress?.get(n('n2'))?.match, 3, 'the leader knows n2 has it');
});

/** A three-node cluster where n3 was down from the start, the leader compacted to 5, and n3 is back. */
function snapshotSetup(opts: ClusterOptions): { c: TestCluster; data: Uint8Array } {
  const c = new TestCluster(opts);
  c.bootstrap(['n1', 'n2', 'n3']);
  c.isolate('n3');
  c.elect('n1');
  for (const x of ['a', 'b', 'c']) c.propose('n1', x);
  c.stabilize();
  const data = new TextEncoder().encode('0123456789'); // 10 bytes
  c.compact('n1', logIndex(5), data);
  c.propose('n1', 'd');
  c.stabilize();
  c.heal();
  return { c, data };
}

t.test('§10.2 (§7) a snapshot larger than snapshotChunkBytes goes in acknowledged chunks', async (t) => {
  const { c, data } = snapshotSetup({ snapshotChunkBytes: 4 });
  const delivered = c.startRecording();
  c.tick('n1');
  c.stabilize();
  const snaps = delivered.filter(isSnap).filter((m) => m.to === 'n3');
  t.same(
    snaps.map((m) => [m.offset, m.chunk.length, m.totalBytes, m.meta.index]),
    [
      [0, 4, 10, 5],
      [4, 4, 10, 5],
      [8, 2, 10, 5],
    ],
    'three chunks of at most 4 bytes, one at a time',
  );
  t.same(
    delivered.filter((m) => m.type === 'snap-resp').map((m) => (m.type === 'snap-resp' ? m.nextOffset : -1)),
    [4, 8],
    'each chunk but the last is acknowledged with the next offset',
  );
  const n3 = c.node('n3');
  t.same(n3.restoredFrom.map((s) => [s.meta.index, Buffer.from(s.data).toString()]), [[5, Buffer.from(data).toString()]], 'n3 reassembled and installed the snapshot');
  t.same(c.appliedCommands('n3'), ['d'], 'then applied the entry after it');
  t.equal(n3.raw.status().commit, 6);
});

t.test('§7 a leader that released its snapshot’s bytes sends chunks its driver reads from the stored snapshot', async (t) => {
  const { c, data } = snapshotSetup({ snapshotChunkBytes: 4 });
  const n1 = c.node('n1');
  t.equal(n1.raw.releaseSnapshotData(logIndex(4)), false, 'a release must name the snapshot the log holds');
  t.equal(n1.raw.releaseSnapshotData(logIndex(5)), true, 'the snapshot at 5 is released');
  // What the driver reads is what goes out: give the "disk" copy different bytes of the same
  // length, so the follower's result tells where its chunks came from.
  const onDisk = new TextEncoder().encode('abcdefghij');
  n1.disk.snapshot = { meta: (n1.disk.snapshot as Snapshot).meta, data: onDisk };
  const readies: Message[] = [];
  const ready = n1.raw.ready.bind(n1.raw);
  n1.raw.ready = () => {
    const rd = ready();
    readies.push(...rd.messages);
    return rd;
  };
  const delivered = c.startRecording();
  c.tick('n1');
  c.stabilize();
  const unfilled = readies.filter(isSnap);
  t.same(
    unfilled.map((m) => [m.offset, m.chunk.length, m.fill]),
    [
      [0, 0, 4],
      [4, 0, 4],
      [8, 0, 2],
    ],
    'the core sends every chunk unfilled: how many bytes to read at which offset',
  );
  t.same(
    delivered.filter(isSnap).map((m) => [m.offset, m.chunk.length, m.totalBytes, 'fill' in m]),
    [
      [0, 4, 10, false],
      [4, 4, 10, false],
      [8, 2, 10, false],
    ],
    'every chunk on the wire is filled',
  );
  t.same(c.node('n3').restoredFrom.map((s) => Buffer.from(s.data).toString()), ['abcdefghij'], 'n3 installed the bytes read from the store');
  t.not(Buffer.from(data).toString(), 'abcdefghij');
  t.same(c.appliedCommands('n3'), ['d']);
});

t.test('§7 a follower whose driver is installing a snapshot ignores chunks of a newer one until it is installed', async (t) => {
  const { c } = snapshotSetup({ snapshotChunkBytes: 64 });
  const n1 = c.node('n1');
  const five = n1.disk.snapshot as Snapshot;
  const term = n1.raw.status().term;
  const chunk = (s: Snapshot): Message => ({ type: 'snap', from: n('n1'), to: n('n3'), term, meta: s.meta, offset: 0, totalBytes: s.data.length, chunk: s.data });
  c.inject(chunk(five));
  const n3 = c.node('n3');
  const rd = n3.raw.ready();
  t.equal(rd.snapshot?.meta.index, 5, 'the driver takes snapshot 5 to persist and install');
  // While it writes, a newer snapshot arrives whole (as after a leader starts the follower over).
  c.inject(chunk({ meta: { ...five.meta, index: logIndex(6) }, data: new TextEncoder().encode('SIX') }));
  t.doesNotThrow(() => n3.raw.advance(rd), 'the install of snapshot 5 finishes');
  t.equal(n3.raw.status().commit, 5, 'the newer snapshot was not taken meanwhile');
  t.equal(n3.raw.hasReady() && n3.raw.ready().snapshot !== undefined, false, 'and no second install is pending');
});

t.test('§7 a released snapshot replaced in the store mid-transfer: the follower is probed again and gets the newest', async (t) => {
  const { c } = snapshotSetup({ snapshotChunkBytes: 4 });
  c.node('n1').raw.releaseSnapshotData(logIndex(5));
  const delivered = c.startRecording();
  c.tick('n1');
  c.pump((m) => !(isSnap(m) && m.offset > 0));
  t.same(delivered.filter(isSnap).map((m) => [m.meta.index, m.offset]), [[5, 0]], 'the first chunk of snapshot 5 reached n3, the second waits to go');
  // The leader takes a newer snapshot; its store keeps only that one (as a pruned file).
  const newer = new TextEncoder().encode('NEWER-SNAP');
  c.compact('n1', logIndex(6), newer);
  c.stabilize();
  t.equal(c.node('n1').raw.status().progress?.get(n('n3'))?.state, 'probe', 'chunk 4 of snapshot 5 cannot be read: n3 is probed again');
  for (let i = 0; i < 4 && c.node('n3').restoredFrom.length === 0; i++) {
    c.tick('n1');
    c.stabilize();
  }
  t.same(
    c.node('n3').restoredFrom.map((s) => [s.meta.index, Buffer.from(s.data).toString()]),
    [[6, 'NEWER-SNAP']],
    'n3 installs the newest snapshot, never a mix of the two',
  );
  t.equal(c.node('n3').raw.status().commit, 6);
});

t.test('§10.2 (§7) a lost snapshot chunk is resent once the transfer stalls for a heartbeat interval', async (t) => {
  const { c } = snapshotSetup({ snapshotChunkBytes: 4 });
  const delivered = c.startRecording();
  c.tick('n1');
  const second = (m: Message): boolean => isSnap(m) && m.offset === 4;
  c.pump((m) => !second(m));
  t.equal(c.drop(second).length, 1, 'the second chunk is lost');
  c.stabilize();
  t.same(c.node('n3').restoredFrom, [], 'the transfer is stuck');
  t.same(delivered.filter(isSnap).map((m) => m.offset), [0], 'only the first chunk arrived');
  c.tick('n1');
  c.stabilize();
  t.same(delivered.filter(isSnap).map((m) => m.offset), [0], 'the first heartbeat after progress only notes that none followed');
  c.tick('n1');
  c.stabilize();
  t.same(
    delivered.filter(isSnap).map((m) => m.offset),
    [0, 4, 8],
    'a heartbeat interval without progress: the leader resends from offset 4, then 8',
  );
  t.equal(c.node('n3').restoredFrom.length, 1, 'and n3 installs the snapshot');
  t.same(c.appliedCommands('n3'), ['d']);
});

t.test('§10.2 (§7) a follower that restarts mid-transfer gets the snapshot again from offset 0', async (t) => {
  const { c } = snapshotSetup({ snapshotChunkBytes: 4 });
  c.tick('n1');
  const second = (m: Message): boolean => isSnap(m) && m.offset === 4;
  c.pump((m) => !second(m));
  t.equal(c.pending(second).length, 1, 'the second chunk is on its way');
  c.restart('n3');
  const delivered = c.startRecording();
  c.stabilize();
  t.same(
    delivered.filter(isSnap).map((m) => m.offset),
    [4, 0, 4, 8],
    'the restarted n3 lost the first chunk: it answers offset 0 and receives every chunk again',
  );
  t.same(
    delivered.filter((m) => m.type === 'snap-resp').map((m) => (m.type === 'snap-resp' ? m.nextOffset : -1)),
    [0, 4, 8],
  );
  t.equal(c.node('n3').restoredFrom.length, 1, 'it installs the snapshot');
  t.same(c.appliedCommands('n3'), ['d']);
});

t.test('§7 stale and duplicated snapshot acks do not multiply chunks (one chunk in flight)', async (t) => {
  // 1-byte chunks: a long transfer with a heartbeat between every delivery round, and every
  // ack delivered twice (network duplication). Each chunk should go out about once.
  const { c } = snapshotSetup({ snapshotChunkBytes: 1 });
  const delivered = c.startRecording();
  for (let round = 0; round < 200 && c.node('n3').restoredFrom.length === 0; round++) {
    c.tick('n1');
    for (const id of c.ids()) while (c.processReady(id)) {
      // drain
    }
    for (const a of c.pending((m) => m.type === 'snap-resp')) c.inject(a);
    c.deliver();
  }
  c.stabilize();
  t.equal(c.node('n3').restoredFrom.length, 1, 'the snapshot is installed');
  const size = c.node('n3').restoredFrom[0]?.data.length ?? 0;
  const chunks = delivered.filter(isSnap).length;
  t.ok(chunks <= size * 2 + 4, `${chunks} chunk messages for a ${size}-byte snapshot in 1-byte chunks: about one per chunk, not one per ack or heartbeat`);
});
