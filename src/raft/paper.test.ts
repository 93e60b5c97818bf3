/**
 * One test per rule of the Raft paper (Ongaro & Ousterhout, "In Search of an Understandable
 * Consensus Algorithm", 2014), each named for its section, in the manner of etcd's
 * raft_paper_test.go. Every test drives real RawNodes through the deterministic TestCluster:
 * time is ticks, the network moves only when the test says so.
 *
 * Most tests run the algorithm as the paper states it (`PAPER`: no pre-vote, no check-quorum);
 * the thesis refinements have their own tests in thesis.test.ts.
 */
import t from 'tap';
import { NO_NODE, logIndex, nodeId, term, type NodeId } from '../base/index.js';
import { TestCluster, encodeCommand, testConfig } from './testing/cluster.js';
import type { ClusterOptions } from './testing/cluster.js';
import type { Entry, Message, MsgApp, MsgAppResp, MsgHeartbeat, MsgVote, MsgVoteResp, Role } from './types.js';

/** The assertions a scenario helper needs (a subtest's `t` has them). */
type Asserts = Pick<typeof t, 'equal' | 'same' | 'ok'>;

/** The algorithm as the paper states it: no pre-vote, no check-quorum (both are thesis additions). */
const PAPER: ClusterOptions = { preVote: false, checkQuorum: false };

const n = (s: string): NodeId => nodeId(s);

/** An entry as TestCluster.startWithLog makes them: command `t<term>i<index>`. */
function ent(index: number, t: number): Entry {
  return { index: logIndex(index), term: term(t), data: encodeCommand(`t${t}i${index}`) };
}

function app(from: string, to: string, t: number, index: number, logTerm: number, entries: Entry[], commit: number): MsgApp {
  return { type: 'app', from: n(from), to: n(to), term: term(t), index: logIndex(index), logTerm: term(logTerm), entries, commit: logIndex(commit) };
}

function heartbeat(from: string, to: string, t: number, commit: number): MsgHeartbeat {
  return { type: 'heartbeat', from: n(from), to: n(to), term: term(t), commit: logIndex(commit), readSeq: 0 };
}

function voteReq(from: string, to: string, t: number, lastIndex: number, lastTerm: number): MsgVote {
  return { type: 'vote', from: n(from), to: n(to), term: term(t), lastIndex: logIndex(lastIndex), lastTerm: term(lastTerm), transfer: false };
}

function voteResp(from: string, to: string, t: number, reject: boolean): MsgVoteResp {
  return { type: 'vote-resp', from: n(from), to: n(to), term: term(t), reject };
}

const isApp = (m: Message): m is MsgApp => m.type === 'app';
const isAppResp = (m: Message): m is MsgAppResp => m.type === 'app-resp';
const isVote = (m: Message): m is MsgVote => m.type === 'vote';
const isVoteResp = (m: Message): m is MsgVoteResp => m.type === 'vote-resp';

function role(c: TestCluster, id: string): Role {
  return c.node(id).raw.status().role;
}

/** Ticks `id` one tick at a time until its role changes; returns how many ticks it took. */
function ticksUntilRoleChanges(c: TestCluster, id: string, limit: number): number {
  const before = role(c, id);
  for (let i = 1; i <= limit; i++) {
    c.tick(id);
    if (role(c, id) !== before) return i;
  }
  return Infinity;
}

// ---------------------------------------------------------------------------------------------
// §5.1 Raft basics: terms
// ---------------------------------------------------------------------------------------------

t.test('§5.1 a node that sees a larger term in a message adopts it and becomes follower', async (t) => {
  type Setup = (c: TestCluster) => void;
  const roles: Array<[Role, ClusterOptions, Setup]> = [
    ['follower', PAPER, () => {}],
    ['pre-candidate', { preVote: true, checkQuorum: false }, (c) => c.node('n1').raw.campaign()],
    ['candidate', PAPER, (c) => c.node('n1').raw.campaign()],
    ['leader', PAPER, (c) => void c.elect('n1')],
  ];
  const messages: Array<[string, (to: string) => Message, NodeId]> = [
    ['AppendEntries', (to) => app('n2', to, 5, 1, 1, [], 1), n('n2')],
    ['heartbeat', (to) => heartbeat('n2', to, 5, 1), n('n2')],
    ['a vote response', (to) => voteResp('n2', to, 5, true), NO_NODE],
  ];
  for (const [startRole, opts, setup] of roles) {
    for (const [what, make, expectLeader] of messages) {
      const c = new TestCluster(opts);
      c.bootstrap(['n1', 'n2', 'n3']);
      setup(c);
      c.processAll();
      t.equal(role(c, 'n1'), startRole, `n1 starts as ${startRole}`);
      t.ok(c.node('n1').raw.status().term < 5, 'n1 starts below term 5');
      c.inject(make('n1'));
      const s = c.node('n1').raw.status();
      t.equal(s.term, 5, `${startRole} receiving ${what} of term 5 adopts term 5`);
      t.equal(s.role, 'follower', `${startRole} receiving ${what} of term 5 becomes follower`);
      t.equal(s.leader, expectLeader, `${startRole} receiving ${what}: leader is ${expectLeader || 'unknown'}`);
      t.equal(s.vote, NO_NODE, 'the vote is cleared for the new term');
    }
  }
});

t.test('§5.1 a node rejects requests with a stale term, and the stale leader learns the newer term and steps down', async (t) => {
  const c = new TestCluster(); // defaults: pre-vote and check-quorum make a node answer a stale leader
  const config = testConfig(['n1', 'n2', 'n3']);
  // n1 went through terms 3..5 alone; n2 and n3 are still in term 2.
  c.startWithLog('n1', { config, terms: [2], term: 5 });
  c.startWithLog('n2', { config, terms: [2], term: 2 });
  c.startWithLog('n3', { config, terms: [2], term: 2 });
  c.isolate('n1');
  t.equal(c.elect('n2'), 'n2', 'n2 is elected by n2 and n3');
  t.equal(c.node('n2').raw.status().term, 3, 'in term 3 < 5');
  c.heal();

  // n2's heartbeat (and an AppendEntries as n2 would send it) are stale for n1: they must not
  // touch its log or commit index.
  c.tick('n2');
  c.processReady('n2');
  t.equal(c.deliver((m) => m.to === 'n1' && m.type === 'heartbeat'), 1, 'n2 heartbeats n1');
  c.inject(app('n2', 'n1', 3, 2, 2, [ent(3, 3)], 3));
  let s = c.node('n1').raw.status();
  t.same([s.term, s.lastIndex, s.commit, s.leader], [5, 2, 1, NO_NODE], 'n1 keeps term 5, its log (2 entries) and commit 1, and takes nobody as leader');
  const out = c.takeMessages('n1');
  t.same(
    out.map((m) => [m.type, m.to, m.term, m.type === 'app-resp' ? m.index : -1]),
    [
      ['app-resp', 'n2', 5, 0],
      ['app-resp', 'n2', 5, 0],
    ],
    'each stale request is answered only with a response carrying the newer term 5',
  );

  // A stale RequestVote is ignored: no vote is granted, nothing is said.
  c.inject(voteReq('n3', 'n1', 4, 10, 9));
  s = c.node('n1').raw.status();
  t.equal(s.vote, NO_NODE, 'no vote for a candidate of term 4');
  t.same(c.takeMessages('n1'), [], 'a stale vote request gets no answer');

  // The stale leader learns the newer term from the answer and reverts to follower (§5.1).
  c.inject(out[0] as Message);
  s = c.node('n2').raw.status();
  t.same([s.term, s.role, s.leader], [5, 'follower', NO_NODE], 'n2 adopts term 5 and becomes follower');
});

// ---------------------------------------------------------------------------------------------
// §5.2 Leader election
// ---------------------------------------------------------------------------------------------

t.test('§5.2 a follower that hears nothing for an election timeout becomes candidate, votes for itself and asks every voter', async (t) => {
  const c = new TestCluster({ ...PAPER, electionTimeoutTicks: 10 });
  c.bootstrap(['n1', 'n2', 'n3', 'n4', 'n5'], ['n6']);
  c.processAll();
  c.takeMessages('n1');
  const ticks = ticksUntilRoleChanges(c, 'n1', 100);
  t.ok(ticks >= 10 && ticks < 20, `campaigned after ${ticks} ticks, within [T, 2T) = [10, 20)`);
  const rd = c.node('n1').raw.ready();
  const s = c.node('n1').raw.status();
  t.equal(s.role, 'candidate');
  t.equal(s.term, 2, 'the candidate increments its term (1 -> 2)');
  t.equal(s.vote, 'n1', 'the candidate votes for itself');
  t.same(rd.hardState, { term: 2, vote: 'n1', commit: 1 }, 'the self-vote is persisted');
  t.same(
    rd.messages.filter(isVote).map((m) => [m.to, m.term, m.lastIndex, m.lastTerm, m.transfer]),
    ['n2', 'n3', 'n4', 'n5'].map((to) => [to, 2, 1, 1, false]),
    'RequestVote to every other voter with its last log index and term, none to the learner n6',
  );
  t.equal(rd.messages.length, 4, 'no other messages');
  c.node('n1').raw.advance(rd);
});

t.test('§5.2 a follower does not campaign before its election timeout', async (t) => {
  const c = new TestCluster({ ...PAPER, electionTimeoutTicks: 10 });
  c.bootstrap(['n1', 'n2', 'n3']);
  c.processAll();
  c.tick('n1', 9);
  t.equal(role(c, 'n1'), 'follower', 'still follower after T-1 ticks');
  t.same(c.takeMessages('n1'), [], 'and has sent nothing');
  // Hearing from the leader resets the timer (§5.2: "as long as it receives valid RPCs").
  for (let i = 0; i < 30; i++) {
    c.inject(heartbeat('n2', 'n1', 1, 1));
    c.tick('n1', 9);
  }
  t.equal(role(c, 'n1'), 'follower', 'a follower that keeps hearing heartbeats never campaigns');
  t.equal(c.node('n1').raw.status().term, 1);
});

t.test('§5.2 a candidate that receives votes from a majority becomes leader', async (t) => {
  // [cluster size, votes received (true = granted), expected role]
  const cases: Array<[number, Record<string, boolean>, Role]> = [
    [1, {}, 'leader'],
    [3, { n2: true, n3: true }, 'leader'],
    [3, { n2: true }, 'leader'],
    [3, {}, 'candidate'],
    [3, { n2: false }, 'candidate'],
    [3, { n2: false, n3: false }, 'follower'],
    [5, { n2: true, n3: true, n4: true, n5: true }, 'leader'],
    [5, { n2: true, n3: true }, 'leader'],
    [5, { n2: true }, 'candidate'],
    [5, { n2: false, n3: false }, 'candidate'],
    [5, { n2: true, n3: false, n4: false }, 'candidate'],
    [5, { n2: false, n3: false, n4: false }, 'follower'],
    [4, { n2: true }, 'candidate'],
    [4, { n2: true, n3: true }, 'leader'],
    [4, { n2: false, n3: false }, 'follower'],
  ];
  for (const [size, votes, want] of cases) {
    const c = new TestCluster(PAPER);
    c.bootstrap(Array.from({ length: size }, (_, k) => `n${k + 1}`));
    c.node('n1').raw.campaign();
    for (const [from, granted] of Object.entries(votes)) c.inject(voteResp(from, 'n1', 2, !granted));
    const s = c.node('n1').raw.status();
    t.equal(s.role, want, `${size} voters, votes ${JSON.stringify(votes)}: ${want}`);
    t.equal(s.term, 2, 'the election happens in term 2');
  }
});

t.test('§5.2 a new leader sends AppendEntries at once and heartbeats every heartbeat timeout', async (t) => {
  const c = new TestCluster({ ...PAPER, electionTimeoutTicks: 10, heartbeatTimeoutTicks: 3 });
  c.bootstrap(['n1', 'n2', 'n3']);
  c.node('n1').raw.campaign();
  c.pump((m) => m.type === 'vote' || m.type === 'vote-resp');
  t.equal(role(c, 'n1'), 'leader');
  const first = c.takeMessages('n1').filter(isApp);
  t.same(
    first.map((m) => [m.to, m.term, m.index, m.logTerm, m.entries.map((e) => [e.index, e.term])]),
    [
      ['n2', 2, 1, 1, [[2, 2]]],
      ['n3', 2, 1, 1, [[2, 2]]],
    ],
    'on election the leader sends each follower its no-op entry of the new term',
  );
  for (const m of first) c.inject(m);
  c.stabilize();
  c.tick('n1', 2);
  t.same(c.takeMessages('n1'), [], 'nothing before the heartbeat timeout');
  c.tick('n1');
  const beats = c.takeMessages('n1');
  t.same(
    beats.map((m) => [m.type, m.to, m.term]),
    [
      ['heartbeat', 'n2', 2],
      ['heartbeat', 'n3', 2],
    ],
    'a heartbeat to every follower after heartbeatTimeoutTicks',
  );
  t.same(
    beats.map((m) => (m.type === 'heartbeat' ? m.commit : -1)),
    [2, 2],
    'heartbeats carry the commit index',
  );
});

t.test('§5.2 a candidate that hears from a leader of its term (or newer) returns to follower', async (t) => {
  const inputs: Array<[string, (to: string) => Message, number]> = [
    ['AppendEntries of the same term', (to) => app('n2', to, 2, 1, 1, [], 1), 2],
    ['heartbeat of the same term', (to) => heartbeat('n2', to, 2, 1), 2],
    ['AppendEntries of a newer term', (to) => app('n2', to, 3, 1, 1, [], 1), 3],
  ];
  for (const [what, make, wantTerm] of inputs) {
    const c = new TestCluster(PAPER);
    c.bootstrap(['n1', 'n2', 'n3']);
    c.node('n1').raw.campaign();
    c.processAll();
    t.equal(role(c, 'n1'), 'candidate');
    c.inject(make('n1'));
    const s = c.node('n1').raw.status();
    t.equal(s.role, 'follower', `${what}: candidate becomes follower`);
    t.equal(s.leader, 'n2', `${what}: and recognizes n2 as leader`);
    t.equal(s.term, wantTerm, `${what}: term ${wantTerm}`);
  }
  // An AppendEntries of an older term is rejected: the candidate keeps campaigning.
  const c = new TestCluster(PAPER);
  c.bootstrap(['n1', 'n2', 'n3']);
  c.node('n1').raw.campaign();
  c.inject(app('n2', 'n1', 1, 1, 1, [], 1));
  t.equal(role(c, 'n1'), 'candidate', 'a stale leader does not end the candidacy');
});

t.test('§5.2 a split vote times out and a new election starts with a higher term', async (t) => {
  const c = new TestCluster({ ...PAPER, electionTimeoutTicks: 10 });
  c.bootstrap(['n1', 'n2', 'n3']);
  c.isolate('n3');
  c.node('n1').raw.campaign();
  c.node('n2').raw.campaign();
  c.stabilize();
  for (const id of ['n1', 'n2']) {
    const s = c.node(id).raw.status();
    t.same([s.role, s.term, s.vote], ['candidate', 2, id], `${id} is a candidate of term 2 that voted for itself; neither has a majority`);
  }
  t.equal(c.leader(), NO_NODE, 'no leader in term 2');
  let waited = 0;
  while (c.node('n1').raw.status().term === 2 && waited < 100) {
    c.tick('n1');
    waited++;
  }
  t.ok(waited >= 10 && waited < 20, `n1 started a new election after ${waited} ticks, within [T, 2T)`);
  const s = c.node('n1').raw.status();
  t.same([s.role, s.term, s.vote], ['candidate', 3, 'n1'], 'the new election is in term 3');
  c.processAll();
  t.same(
    c.pending(isVote).map((m) => [m.from, m.to, m.term]),
    [
      ['n1', 'n2', 3],
      ['n1', 'n3', 3],
    ],
    'and n1 asks for votes again',
  );
  c.heal();
  c.stabilize();
  t.equal(c.leader(), 'n1', 'the new election has a winner');
  t.equal(c.node('n1').raw.status().term, 3, 'in term 3');
});

t.test('§5.2 each node votes for at most one candidate per term, first come first served', async (t) => {
  const c = new TestCluster(PAPER);
  c.bootstrap(['n1', 'n2', 'n3']);
  c.processAll();
  const answer = (): Array<[string, string, number, boolean]> =>
    c.takeMessages('n1').filter(isVoteResp).map((m) => [m.type, m.to, m.term, m.reject]);

  c.inject(voteReq('n2', 'n1', 2, 1, 1));
  t.same(answer(), [['vote-resp', 'n2', 2, false]], 'the first candidate of term 2 (n2) gets the vote');
  t.equal(c.node('n1').raw.status().vote, 'n2');
  t.same(c.node('n1').disk.hardState, { term: 2, vote: 'n2', commit: 1 }, 'the vote is on disk');

  c.inject(voteReq('n3', 'n1', 2, 1, 1));
  t.same(answer(), [['vote-resp', 'n3', 2, true]], 'a second candidate in term 2 (n3) is refused');
  t.equal(c.node('n1').raw.status().vote, 'n2', 'the vote stays with n2');

  c.inject(voteReq('n2', 'n1', 2, 1, 1));
  t.same(answer(), [['vote-resp', 'n2', 2, false]], 'a repeated request from n2 is granted again (idempotent)');

  c.inject(voteReq('n3', 'n1', 3, 1, 1));
  t.same(answer(), [['vote-resp', 'n3', 3, false]], 'in a new term (3) the node may vote again');
  t.equal(c.node('n1').raw.status().vote, 'n3');
});

t.test('§5.2 election timeouts are randomized in [T, 2T)', async (t) => {
  const T = 10;
  const seen = new Set<number>();
  for (let seed = 1; seed <= 60; seed++) {
    const c = new TestCluster({ seed, electionTimeoutTicks: T });
    c.bootstrap(['n1', 'n2', 'n3']);
    for (const id of ['n1', 'n2', 'n3']) {
      const ticks = ticksUntilRoleChanges(c, id, 5 * T);
      if (ticks < T || ticks >= 2 * T) t.fail(`seed ${seed} ${id}: campaigned after ${ticks} ticks, outside [${T}, ${2 * T})`);
      seen.add(ticks);
    }
  }
  t.ok([...seen].every((x) => x >= T && x < 2 * T), `every timeout in [${T}, ${2 * T}): ${[...seen].sort((a, b) => a - b).join(',')}`);
  t.ok(seen.size >= 8, `timeouts are spread out (${seen.size} distinct values of 10 possible)`);

  // A candidate draws a new timeout for each election (paper mode: each election is a new term).
  const c = new TestCluster({ ...PAPER, seed: 3, electionTimeoutTicks: T });
  c.bootstrap(['n1', 'n2', 'n3']);
  c.isolate('n1');
  const gaps: number[] = [];
  let lastTerm = 1;
  let lastAt = 0;
  for (let tick = 1; tick <= 400; tick++) {
    c.tick('n1');
    const tm = c.node('n1').raw.status().term;
    if (tm !== lastTerm) {
      t.equal(tm, lastTerm + 1, 'one term per election');
      gaps.push(tick - lastAt);
      lastTerm = tm;
      lastAt = tick;
    }
  }
  t.ok(gaps.length >= 20, `n1 campaigned ${gaps.length} times in 400 ticks`);
  t.ok(gaps.every((g) => g >= T && g < 2 * T), `each gap in [T, 2T): ${gaps.join(',')}`);
  t.ok(new Set(gaps).size > 1, 'the gaps differ: each election draws a fresh timeout');
});

t.test('§5.2 the new term and vote are in the same Ready as the vote, marked mustSync, before the answer can be sent', async (t) => {
  const c = new TestCluster();
  c.bootstrap(['n1', 'n2', 'n3']);
  c.processAll();
  c.inject(voteReq('n2', 'n1', 2, 1, 1));
  const raw = c.node('n1').raw;
  const rd = raw.ready();
  t.same(rd.hardState, { term: 2, vote: 'n2', commit: 1 }, 'the Ready carries term 2 and the vote for n2');
  t.equal(rd.mustSync, true, 'and asks for an fsync');
  t.same(
    rd.messages.map((m) => [m.type, m.to, m.term, m.type === 'vote-resp' ? m.reject : undefined]),
    [['vote-resp', 'n2', 2, false]],
    'the granted vote travels in the Ready whose hard state records it (sent only after persisting)',
  );
  raw.advance(rd);
  t.equal(raw.hasReady(), false, 'nothing left over');

  // Likewise a candidate's own vote (and new term) must be durable before it asks for votes.
  const c2 = new TestCluster(PAPER);
  c2.bootstrap(['n1', 'n2', 'n3']);
  c2.processAll();
  c2.node('n1').raw.campaign();
  const rd2 = c2.node('n1').raw.ready();
  t.same(rd2.hardState, { term: 2, vote: 'n1', commit: 1 });
  t.equal(rd2.mustSync, true);
  t.equal(rd2.messages.filter(isVote).length, 2, 'vote requests come with the hard state that records the self-vote');
  c2.node('n1').raw.advance(rd2);
});

// ---------------------------------------------------------------------------------------------
// §5.3 Log replication
// ---------------------------------------------------------------------------------------------

t.test('§5.3 the leader appends a client command to its log and sends it to every follower', async (t) => {
  const c = new TestCluster(PAPER);
  c.bootstrap(['n1', 'n2', 'n3']);
  c.elect('n1');
  const p = c.propose('n1', 'x');
  t.same([p.index, p.term], [3, 2], 'the command goes at index 3 in term 2');
  const rd = c.handleReady('n1');
  if (!rd) throw new Error('expected a Ready');
  t.same(
    rd.entries.map((e) => [e.index, e.term]),
    [[3, 2]],
    'the new entry is handed to the driver to persist',
  );
  t.equal(rd.mustSync, true);
  t.same(
    rd.messages.filter(isApp).map((m) => [m.to, m.term, m.index, m.logTerm, m.entries.map((e) => e.index), m.commit]),
    [
      ['n2', 2, 2, 2, [3], 2],
      ['n3', 2, 2, 2, [3], 2],
    ],
    'AppendEntries to each follower with the preceding entry (2, term 2), the entry and the commit index',
  );
  t.equal(rd.committedEntries.length, 0, 'not committed yet');
  c.stabilize();
  for (const id of ['n1', 'n2', 'n3']) t.same(c.appliedCommands(id), ['x'], `${id} applied x`);
});

t.test('§5.3 the AppendEntries consistency check rejects when the log lacks the preceding entry', async (t) => {
  // Follower log: 1 (term 1), 2 (term 2); commit 1.
  const cases: Array<[string, number, number, boolean, number]> = [
    // [what, prevIndex, prevTerm, reject, answered index]
    ['matching entry 1', 1, 1, false, 1],
    ['matching entry 2', 2, 2, false, 2],
    ['entry 2 with the wrong term', 2, 1, true, 2],
    ['entry 3, which it lacks', 3, 2, true, 3],
    ['entry 5, far beyond its log', 5, 3, true, 5],
  ];
  for (const [what, prevIndex, prevTerm, reject, index] of cases) {
    const c = new TestCluster(PAPER);
    const config = testConfig(['n1', 'n2', 'n3']);
    c.startWithLog('n1', { config, terms: [2], term: 2 });
    c.inject(app('n2', 'n1', 3, prevIndex, prevTerm, [ent(prevIndex + 1, 3)], 1));
    const resp = c.takeMessages('n1').filter(isAppResp);
    t.same(
      resp.map((m) => [m.to, m.term, m.reject, m.index]),
      [['n2', 3, reject, reject ? index : index + 1]],
      `${what}: ${reject ? 'rejected' : 'accepted'}`,
    );
    t.equal(c.node('n1').raw.status().lastIndex, reject ? 2 : prevIndex + 1, reject ? 'the log is unchanged' : 'the entry was appended');
  }
});

t.test('§5.3 a rejection carries a hint so the leader can skip a whole term', async (t) => {
  // Follower log terms: 1 1 2 2 2 ; leader probes at index 6 with term 4.
  const c = new TestCluster(PAPER);
  c.startWithLog('n1', { config: testConfig(['n1', 'n2', 'n3']), terms: [1, 2, 2, 2], term: 3 });
  c.inject(app('n2', 'n1', 4, 7, 4, [], 1));
  const [resp] = c.takeMessages('n1').filter(isAppResp);
  t.same(resp && [resp.reject, resp.index, resp.hintIndex, resp.hintTerm], [true, 7, 5, 2], 'beyond the log: hint at the last entry (5, term 2)');
  c.inject(app('n2', 'n1', 4, 4, 3, [], 1));
  const [resp2] = c.takeMessages('n1').filter(isAppResp);
  t.same(resp2 && [resp2.reject, resp2.index, resp2.hintIndex, resp2.hintTerm], [true, 4, 4, 2], 'term mismatch at 4: hint (4, term 2), the last entry with term <= 3');
  c.inject(app('n2', 'n1', 4, 4, 1, [], 1));
  const [resp3] = c.takeMessages('n1').filter(isAppResp);
  t.same(resp3 && [resp3.reject, resp3.index, resp3.hintIndex, resp3.hintTerm], [true, 4, 2, 1], 'leader term 1 at 4: skip back past all of term 2 to (2, term 1)');
});

t.test('§5.3 a follower deletes a conflicting suffix and appends the leader’s entries', async (t) => {
  // Follower log: 1 (term 1), 2 (term 2), 3 (term 2); commit 1.
  const cases: Array<[string, MsgApp, Array<[number, number]>, Array<[number, number]>]> = [
    ['new entries after the end', app('n2', 'n1', 5, 3, 2, [ent(4, 3), ent(5, 3)], 1), [[1, 1], [2, 2], [3, 2], [4, 3], [5, 3]], [[4, 3], [5, 3]]],
    ['a conflict at 3 truncates 3..', app('n2', 'n1', 5, 2, 2, [ent(3, 4), ent(4, 4)], 1), [[1, 1], [2, 2], [3, 4], [4, 4]], [[3, 4], [4, 4]]],
    ['a conflict at 2 truncates 2..', app('n2', 'n1', 5, 1, 1, [ent(2, 5)], 1), [[1, 1], [2, 5]], [[2, 5]]],
    ['entries it already has change nothing', app('n2', 'n1', 5, 1, 1, [ent(2, 2)], 1), [[1, 1], [2, 2], [3, 2]], []],
    ['a matching prefix then a conflict', app('n2', 'n1', 5, 1, 1, [ent(2, 2), ent(3, 5), ent(4, 5)], 1), [[1, 1], [2, 2], [3, 5], [4, 5]], [[3, 5], [4, 5]]],
  ];
  for (const [what, msg, wantLog, wantUnstable] of cases) {
    const c = new TestCluster(PAPER);
    c.startWithLog('n1', { config: testConfig(['n1', 'n2', 'n3']), terms: [2, 2], term: 2 });
    c.inject(msg);
    const rd = c.node('n1').raw.ready();
    t.same(
      rd.entries.map((e) => [e.index, e.term]),
      wantUnstable,
      `${what}: the driver is asked to write ${JSON.stringify(wantUnstable)}`,
    );
    const resp = rd.messages.filter(isAppResp);
    t.same(resp.map((m) => [m.reject, m.index]), [[false, msg.index + msg.entries.length]], `${what}: acknowledged up to the last new entry`);
    c.node('n1').raw.advance(rd);
    const s = c.node('n1').raw.status();
    t.equal(s.lastIndex, wantLog.length, `${what}: last index ${wantLog.length}`);
    // The TestCluster disk applies the same rule as the driver contract: an entry at i replaces >= i.
    const c2 = new TestCluster(PAPER);
    c2.startWithLog('n1', { config: testConfig(['n1', 'n2', 'n3']), terms: [2, 2], term: 2 });
    c2.inject(msg);
    c2.processAll();
    t.same(
      c2.node('n1').disk.entries.map((e) => [e.index, e.term]),
      wantLog,
      `${what}: the log becomes ${JSON.stringify(wantLog)}`,
    );
  }
});

t.test('§5.3 the follower sets its commit index to min(leaderCommit, index of the last new entry)', async (t) => {
  const c = new TestCluster(PAPER);
  c.startWithLog('n1', { config: testConfig(['n1', 'n2', 'n3']), terms: [2, 2], term: 2 });
  c.inject(app('n2', 'n1', 2, 1, 1, [ent(2, 2)], 3));
  t.equal(c.node('n1').raw.status().commit, 2, 'leader commit 3, last new entry 2: commit 2 (entry 3 is not vouched for by this message)');
  c.inject(app('n2', 'n1', 2, 3, 2, [], 3));
  t.equal(c.node('n1').raw.status().commit, 3, 'once the leader vouches for entry 3: commit 3');
  c.processAll();
  t.same(c.appliedCommands('n1'), ['t2i2', 't2i3'], 'committed entries are applied in order');
  c.inject(app('n2', 'n1', 2, 3, 2, [], 2));
  t.equal(c.node('n1').raw.status().commit, 3, 'the commit index never goes back');
});

/** Raft Figure 7: the leader's log (term 8) and the six possible follower logs (a)-(f). */
const FIGURE_7_LEADER = [1, 1, 4, 4, 5, 5, 6, 6, 6]; // terms of indexes 2..10; index 1 (term 1) is the bootstrap entry
const FIGURE_7_FOLLOWERS: Record<string, number[]> = {
  a: [1, 1, 4, 4, 5, 5, 6, 6], //           missing entry 10
  b: [1, 1, 4], //                          missing 5..10
  c: [1, 1, 4, 4, 5, 5, 6, 6, 6, 6], //     an extra uncommitted entry of term 6 at 11
  d: [1, 1, 4, 4, 5, 5, 6, 6, 6, 7, 7], //  extra entries of term 7 at 11, 12
  e: [1, 1, 4, 4, 4, 4], //                 diverges at 6 (term 4 where the leader has 5)
  f: [1, 1, 2, 2, 2, 3, 3, 3, 3, 3], //     diverges at 4 (terms 2, 3)
};

for (const [name, followerTerms] of Object.entries(FIGURE_7_FOLLOWERS)) {
  t.test(`§5.3 Figure 7 (${name}): the leader backs up nextIndex until the logs match, then the follower's log equals the leader's`, async (t) => {
    const c = new TestCluster(PAPER);
    const config = testConfig(['n1', 'n2', 'n3']);
    c.startWithLog('n1', { config, terms: FIGURE_7_LEADER, term: 8 });
    c.startWithLog('n2', { config, terms: followerTerms, term: 8 });
    // n3 has the leader's log, so n1 can win even when n2's log is more up to date (c, d).
    c.startWithLog('n3', { config, terms: FIGURE_7_LEADER, term: 8 });
    const delivered = c.startRecording();
    t.equal(c.elect('n1'), 'n1', 'n1 becomes leader');
    c.tick('n1'); // one heartbeat round: the follower learns the final commit index
    c.stabilize();
    t.equal(c.node('n1').raw.status().term, 9, 'in term 9');
    const leaderLog = c.logSummary('n1');
    t.same(
      leaderLog.map(([i, tm]) => [i, tm]),
      [[1, 1], ...FIGURE_7_LEADER.map((tm, k) => [k + 2, tm]), [11, 9]],
      'the leader log is Figure 7 plus its no-op at 11 (term 9)',
    );
    t.same(c.logSummary('n2'), leaderLog, `follower (${name}) ends with exactly the leader's log`);
    t.same(c.logSummary('n3'), leaderLog, 'and so does n3');
    for (const id of ['n1', 'n2', 'n3']) t.equal(c.node(id).raw.status().commit, 11, `${id} commits 11`);
    const rejections = delivered.filter((m) => isAppResp(m) && m.from === 'n2' && m.reject).length;
    const matchesAt10 = followerTerms.length >= 9 && followerTerms[8] === 6;
    if (matchesAt10) t.equal(rejections, 0, 'n2 holds the leader’s entry 10: the first append matches, only a truncation is needed');
    else t.ok(rejections > 0, `n2 rejected ${rejections} append(s) before nextIndex reached the match point`);
  });
}

t.test('§5.3 the leader commits an entry once it is on a majority, and followers learn the commit index', async (t) => {
  const c = new TestCluster(PAPER);
  c.bootstrap(['n1', 'n2', 'n3', 'n4', 'n5']);
  c.elect('n1');
  c.propose('n1', 'x');
  c.processReady('n1'); // persisted on n1, appends queued for everyone
  const toN = (id: string) => (m: Message) => m.to === id || m.from === id;

  c.pump(toN('n2'));
  t.equal(c.node('n2').disk.entries.length, 3, 'n2 has the entry');
  t.equal(c.node('n1').raw.status().commit, 2, 'on 2 of 5 (n1, n2): not committed');

  c.pump(toN('n3'));
  t.equal(c.node('n1').raw.status().commit, 3, 'on 3 of 5 (n1, n2, n3): committed');
  t.same(c.appliedCommands('n1'), ['x'], 'the leader applies it');
  t.equal(c.node('n2').raw.status().commit, 2, 'n2 does not know yet');
  t.same(c.appliedCommands('n2'), [], 'and has not applied it');

  // The leader's next AppendEntries carries the new commit index.
  c.processReady('n1');
  const commits = c
    .pending((m) => m.from === 'n1' && m.type === 'app' && m.to === 'n2')
    .map((m) => (m.type === 'app' ? m.commit : -1));
  t.ok(commits.includes(logIndex(3)), 'the leader tells n2 the commit index 3');
  c.pump(toN('n2'));
  t.equal(c.node('n2').raw.status().commit, 3, 'n2 learns the commit index');
  t.same(c.appliedCommands('n2'), ['x'], 'and applies the entry');
  c.stabilize();
  for (const id of ['n3', 'n4', 'n5']) t.same(c.appliedCommands(id), ['x'], `${id} applies it in the end`);
});

t.test('§5.3 AppendEntries is idempotent: a duplicate changes nothing', async (t) => {
  const c = new TestCluster(PAPER);
  c.startWithLog('n1', { config: testConfig(['n1', 'n2', 'n3']), terms: [2], term: 2 });
  const acks = (): Array<[boolean, number]> => c.takeMessages('n1').filter(isAppResp).map((r) => [r.reject, r.index]);
  const m = app('n2', 'n1', 2, 2, 2, [ent(3, 2), ent(4, 2)], 1);
  c.inject(m);
  c.processAll();
  const once = c.logSummary('n1');
  t.same(acks(), [[false, 4]], 'acknowledged up to 4');
  c.inject(m);
  c.processAll();
  t.same(c.logSummary('n1'), once, 'the log is the same after the duplicate');
  t.same(acks(), [[false, 4]], 'the same acknowledgement');
  // A duplicate of entries this node already knows committed: acknowledged with the commit
  // index (it cannot go back), log unchanged, nothing applied twice.
  c.inject(app('n2', 'n1', 2, 2, 2, [ent(3, 2), ent(4, 2)], 3));
  c.processAll();
  t.same(acks(), [[false, 4]]);
  t.same(c.appliedCommands('n1'), ['t2i2', 't2i3'], 'commit 3: entries 2 and 3 applied');
  c.inject(m);
  c.processAll();
  t.same(c.logSummary('n1'), once, 'a late duplicate (prev 2 < commit 3) leaves the log alone');
  t.same(acks(), [[false, 3]], 'and is acknowledged with the commit index');
  t.same(c.appliedCommands('n1'), ['t2i2', 't2i3'], 'nothing applied twice');
});

// ---------------------------------------------------------------------------------------------
// §5.4 Safety
// ---------------------------------------------------------------------------------------------

t.test('§5.4.1 a voter denies its vote to a candidate whose log is less up-to-date', async (t) => {
  // The voter's log: 1 (term 1), 2 (term 2), 3 (term 2). Candidate in term 3 with (lastIndex, lastTerm):
  const cases: Array<[string, number, number, boolean]> = [
    ['a lower last term, even with a longer log', 5, 1, false],
    ['the same last term, a shorter log', 2, 2, false],
    ['the same last term, the same length', 3, 2, true],
    ['the same last term, a longer log', 4, 2, true],
    ['a higher last term, even with a shorter log', 2, 3, true],
  ];
  for (const [what, lastIndex, lastTerm, granted] of cases) {
    const c = new TestCluster(PAPER);
    c.startWithLog('n1', { config: testConfig(['n1', 'n2', 'n3']), terms: [2, 2], term: 2 });
    c.inject(voteReq('n2', 'n1', 3, lastIndex, lastTerm));
    const resp = c.takeMessages('n1').filter(isVoteResp);
    t.same(resp.map((m) => [m.to, m.term, m.reject]), [['n2', 3, !granted]], `${what}: ${granted ? 'granted' : 'denied'}`);
    t.equal(c.node('n1').raw.status().vote, granted ? 'n2' : NO_NODE, `${what}: vote ${granted ? 'recorded' : 'not recorded'}`);
    t.equal(c.node('n1').raw.status().term, 3, 'the voter adopts the term either way (§5.1)');
  }
});

t.test('§5.4.1 a candidate with a stale log cannot win: the up-to-date majority elects a complete leader', async (t) => {
  const c = new TestCluster(PAPER);
  const config = testConfig(['n1', 'n2', 'n3']);
  c.startWithLog('n1', { config, terms: [2], term: 2 });
  c.startWithLog('n2', { config, terms: [2, 2], term: 2, commit: 3 });
  c.startWithLog('n3', { config, terms: [2, 2], term: 2, commit: 3 });
  c.node('n1').raw.campaign();
  c.stabilize();
  t.not(c.node('n1').raw.status().role, 'leader', 'n1 (missing committed entry 3) is not elected');
  t.equal(c.leader(), NO_NODE, 'nobody else campaigned');
  t.equal(c.elect('n2'), 'n2', 'n2, which holds every committed entry, can win');
  t.same(c.logSummary('n1').slice(0, 3), c.logSummary('n2').slice(0, 3), 'and n1 receives the committed entries');
});

/**
 * The simple form of Figure 8: a new leader (term 3) holds an entry of term 2 that is not
 * committed. Returns n1's commit index once entry 2 (term 2) is on a majority, and once its own
 * no-op (term 3) is.
 */
function olderTermScenario(plantedBugs?: ClusterOptions['plantedBugs']): { whenOldOnMajority: number; whenNewOnMajority: number; n2HasOld: boolean; applied: string[] } {
  const opts: ClusterOptions = { ...PAPER, maxAppendBytes: 1, ...(plantedBugs ? { plantedBugs } : {}) };
  const c = new TestCluster(opts);
  const config = testConfig(['n1', 'n2', 'n3']);
  c.startWithLog('n1', { config, terms: [2], term: 2 });
  c.startWithLog('n2', { config, terms: [], term: 2 });
  c.startWithLog('n3', { config, terms: [], term: 2 });
  c.isolate('n3');
  c.node('n1').raw.campaign();
  c.pump((m) => m.type === 'vote' || m.type === 'vote-resp');
  // One entry per append (maxAppendBytes 1). Let n2 reject the first probe, receive entry 2,
  // and hold back the append that brings it entry 3 once it has entry 2.
  const hasEntry = (id: string, i: number): boolean => c.node(id).disk.entries.some((e) => e.index === i);
  const carries3 = (m: Message): boolean => m.type === 'app' && m.entries.some((e) => e.index === 3);
  c.pump((m) => !(carries3(m) && m.to === 'n2' && hasEntry('n2', 2)));
  const whenOldOnMajority = c.node('n1').raw.status().commit;
  const n2HasOld = c.node('n2').disk.entries.some((e) => e.index === 2 && e.term === 2);
  c.pump();
  return { whenOldOnMajority, whenNewOnMajority: c.node('n1').raw.status().commit, n2HasOld, applied: c.appliedCommands('n1') };
}

t.test('§5.4.2 a leader does not commit an entry from an older term by counting replicas; it commits with an entry of its term', async (t) => {
  const r = olderTermScenario();
  t.equal(r.n2HasOld, true, 'entry 2 (term 2) is on n1 and n2, a majority of three');
  t.equal(r.whenOldOnMajority, 1, 'yet the term-3 leader does not commit it');
  t.equal(r.whenNewOnMajority, 3, 'once its no-op (3, term 3) is on a majority it commits 3, and entry 2 with it');
  t.same(r.applied, ['t2i2'], 'the older entry is applied, committed indirectly');

  // The check catches the planted bug that commits by counting replicas of an older term.
  const bug = olderTermScenario({ commitOldTermByCount: true });
  t.equal(bug.whenOldOnMajority, 2, 'with the planted bug the old entry is committed by counting: this test would fail');
});

/**
 * Raft Figure 8 played out on five nodes. Returns early at the dangerous point (d) when
 * `stopAtD`. One entry per append (maxAppendBytes 1) lets the test place each entry.
 */
function figure8(t: Asserts, plantedBugs?: ClusterOptions['plantedBugs']): number {
  const c = new TestCluster({ ...PAPER, maxAppendBytes: 1, ...(plantedBugs ? { plantedBugs } : {}) });
  c.bootstrap(['n1', 'n2', 'n3', 'n4', 'n5']);
  // (a) n1 leads term 2 and replicates "a" (index 3) to n2 only.
  c.elect('n1');
  c.partition(['n1', 'n2'], ['n3', 'n4', 'n5']);
  c.propose('n1', 'a');
  c.stabilize();
  t.same(c.logSummary('n2')[2], [3, 2, 'a'], '(a) n2 has entry 3 = "a" (term 2)');
  t.equal(c.node('n1').raw.status().commit, 2, '(a) "a" is on 2 of 5: not committed');
  c.restart('n1'); // n1 crashes

  // (b) n5 is elected for term 3 by n3, n4, n5 and appends its no-op at 3, but crashes before sending it.
  c.node('n5').raw.campaign();
  c.pump((m) => m.type === 'vote' || m.type === 'vote-resp');
  t.equal(role(c, 'n5'), 'leader', '(b) n5 leads term 3');
  c.processAll();
  c.drop((m) => m.from === 'n5');
  t.same(c.logSummary('n5')[2], [3, 3, 'noop'], '(b) n5 has entry 3 of term 3');
  c.restart('n5');

  // (c) n1 restarts and is elected for term 4 by n1, n2, n3 (n3's vote of term 3 went to n5).
  c.partition(['n1', 'n2', 'n3'], ['n4'], ['n5']);
  c.node('n1').raw.campaign();
  c.pump();
  t.same([role(c, 'n1'), c.node('n1').raw.status().term], ['candidate', 3], '(c) in term 3 n3 has already voted: no majority');
  c.node('n1').raw.campaign();
  c.pump((m) => m.type !== 'app');
  t.same([role(c, 'n1'), c.node('n1').raw.status().term], ['leader', 4], '(c) n1 leads term 4');
  // n2 gets n1's no-op (4, term 4); n3 gets the old entry 3 (term 2) but not the no-op.
  const noopTo3 = (m: Message): boolean =>
    m.type === 'app' && m.to === 'n3' && m.entries.some((e) => e.index === 4) && c.node('n3').disk.entries.some((e) => e.index === 3);
  c.pump((m) => !noopTo3(m));
  for (const id of ['n1', 'n2', 'n3']) t.same(c.logSummary(id)[2], [3, 2, 'a'], `(c) ${id} has entry 3 = "a" (term 2)`);
  const commitAtC = c.node('n1').raw.status().commit;
  if (plantedBugs) return commitAtC;
  t.equal(commitAtC, 2, '(c) "a" is on a majority (n1, n2, n3) but from term 2: NOT committed');

  // (d) n1 crashes again; n5 is elected for term 5 by n3, n4, n5 and overwrites entry 3.
  c.partition(['n1'], ['n2', 'n3', 'n4', 'n5']);
  c.drop((m) => m.from === 'n1');
  c.node('n5').raw.campaign();
  c.pump();
  t.same([role(c, 'n5'), c.node('n5').raw.status().term], ['candidate', 4], '(d) in term 4 n2 and n3 voted for n1 already');
  c.node('n5').raw.campaign();
  c.stabilize();
  t.same([role(c, 'n5'), c.node('n5').raw.status().term], ['leader', 5], '(d) n5 leads term 5 (n3 and n4 grant: its last term 3 > 2)');
  for (const id of ['n2', 'n3', 'n4', 'n5']) t.same(c.logSummary(id)[2], [3, 3, 'noop'], `(d) ${id}: entry 3 is now n5's (term 3); "a" is gone`);
  t.equal(c.node('n5').raw.status().commit, 4, '(d) n5 commits its term-5 no-op at 4');

  // (e) n1 rejoins and follows n5: nobody ever applied "a".
  c.heal();
  c.tick('n5');
  c.stabilize();
  t.same(c.logSummary('n1'), c.logSummary('n5'), '(e) n1 takes n5’s log');
  for (const id of c.ids()) t.same(c.appliedCommands(id), [], `(e) ${id} never applied "a"`);
  return commitAtC;
}

t.test('§5.4.2 Figure 8: an older-term entry stored on a majority is not committed, and a later leader may overwrite it', async (t) => {
  figure8(t);
  t.test('the check catches a planted bug that commits by counting replicas', async (t) => {
    t.equal(figure8(t, { commitOldTermByCount: true }), 3, 'with the bug, n1 commits "a" at (c), which (d) then overwrites');
  });
});

// ---------------------------------------------------------------------------------------------
// §5.5 Follower and candidate crashes
// ---------------------------------------------------------------------------------------------

t.test('§5.5 a follower restarts from what it persisted: term, vote and log survive, and it keeps its promise', async (t) => {
  const c = new TestCluster(PAPER);
  c.bootstrap(['n1', 'n2', 'n3']);
  c.elect('n1');
  c.propose('n1', 'x');
  c.stabilize();
  c.inject(voteReq('n3', 'n2', 3, 3, 2));
  c.takeMessages('n2');
  const before = c.node('n2').raw.status();
  t.same([before.term, before.vote], [3, 'n3'], 'n2 voted for n3 in term 3');
  const log = c.logSummary('n2');

  c.restart('n2');
  c.processAll();
  const after = c.node('n2').raw.status();
  t.same([after.role, after.term, after.vote, after.lastIndex, after.commit], ['follower', 3, 'n3', 3, 3], 'term 3, vote n3, log up to 3, commit 3 survive');
  t.same(c.logSummary('n2'), log, 'the same log');
  t.same(c.appliedCommands('n2'), ['x'], 'committed entries are applied again from the log');

  c.inject(voteReq('n1', 'n2', 3, 3, 2));
  t.same(
    c.takeMessages('n2').filter(isVoteResp).map((m) => [m.to, m.reject]),
    [['n1', true]],
    'after the restart n2 still refuses a second candidate in term 3',
  );
});

t.test('§5.5 a candidate that crashes restarts as a follower in the same term with its self-vote', async (t) => {
  const c = new TestCluster(PAPER);
  c.bootstrap(['n1', 'n2', 'n3']);
  c.node('n1').raw.campaign();
  c.processAll();
  c.drop(() => true);
  t.same([role(c, 'n1'), c.node('n1').raw.status().term], ['candidate', 2]);
  c.restart('n1');
  const s = c.node('n1').raw.status();
  t.same([s.role, s.term, s.vote], ['follower', 2, 'n1'], 'follower of term 2 that voted for itself');
  c.inject(voteReq('n2', 'n1', 2, 1, 1));
  t.same(c.takeMessages('n1').filter(isVoteResp).map((m) => m.reject), [true], 'it cannot vote for n2 in term 2');
  const ticks = ticksUntilRoleChanges(c, 'n1', 100);
  t.ok(ticks >= 10 && ticks < 20, `it campaigns again after its election timeout (${ticks} ticks)`);
  t.equal(c.node('n1').raw.status().term, 3, 'in term 3');
});

t.test('§5.5 lost messages are retried: a follower that was down catches up when it returns', async (t) => {
  const c = new TestCluster(PAPER);
  c.bootstrap(['n1', 'n2', 'n3']);
  c.elect('n1');
  c.isolate('n3');
  for (const x of ['a', 'b', 'c']) c.propose('n1', x);
  c.stabilize();
  t.same(c.appliedCommands('n3'), [], 'n3 missed everything');
  c.restart('n3');
  c.heal();
  c.tick('n1'); // heartbeat
  c.stabilize();
  t.same(c.appliedCommands('n3'), ['a', 'b', 'c'], 'n3 receives and applies the entries');
  t.same(c.logSummary('n3'), c.logSummary('n1'));
});

// ---------------------------------------------------------------------------------------------
// §7 Log compaction
// ---------------------------------------------------------------------------------------------

t.test('§7 a follower behind the leader’s snapshot receives it; its log and commit jump to the snapshot index, and later entries follow', async (t) => {
  const c = new TestCluster(PAPER);
  c.bootstrap(['n1', 'n2', 'n3']);
  c.isolate('n3'); // n3 is down from the start: the leader's progress for it stays in probe
  c.elect('n1');
  c.propose('n1', 'before');
  c.stabilize();
  for (const x of ['a', 'b', 'c']) c.propose('n1', x);
  c.stabilize();
  const snapIndex = c.node('n1').raw.status().commit; // 6
  t.equal(snapIndex, 6);
  const data = new TextEncoder().encode('state@6');
  c.compact('n1', snapIndex, data);
  t.equal(c.node('n1').raw.status().firstIndex, 7, 'the leader dropped its log up to 6');
  c.propose('n1', 'after');
  c.stabilize();

  c.heal();
  const delivered = c.startRecording();
  c.tick('n1'); // a heartbeat response tells the leader where n3 stands
  c.stabilize();
  const snaps = delivered.filter((m) => m.type === 'snap' && m.to === 'n3');
  t.equal(snaps.length, 1, 'one InstallSnapshot (the snapshot fits in a chunk)');
  const n3 = c.node('n3');
  t.equal(n3.restoredFrom.length, 1, 'n3 installed a snapshot');
  t.same(n3.restoredFrom[0] && [n3.restoredFrom[0].meta.index, n3.restoredFrom[0].meta.term, new TextDecoder().decode(n3.restoredFrom[0].data)], [6, 2, 'state@6'], 'the snapshot at 6 (term 2) with the leader’s data');
  const s = n3.raw.status();
  t.same([s.snapshotIndex, s.firstIndex, s.lastIndex, s.commit], [6, 7, 7, 7], 'its log starts after 6; the entry after the snapshot (7) replicated and committed');
  t.same(c.node('n3').disk.snapshot?.meta.index, 6, 'the snapshot is on its disk');
  t.same(c.appliedCommands('n3'), ['after'], 'it restored the snapshot (before, a, b, c) and applied "after" from the log');
  t.same(c.logSummary('n3').filter(([i]) => i > 6), c.logSummary('n1').filter(([i]) => i > 6), 'entries after the snapshot match the leader’s');
});

t.test('§7 a follower that replaced its log with a snapshot restarts with the same log (the snapshot discards every entry)', async (t) => {
  const c = new TestCluster(PAPER);
  const config = testConfig(['n1', 'n2', 'n3']);
  // n3 holds a long uncommitted suffix from term 2 (indexes 2..12); n1 and n2 moved on in term 3.
  c.startWithLog('n1', { config, terms: [3, 3, 3], term: 3 });
  c.startWithLog('n2', { config, terms: [3, 3, 3], term: 3 });
  c.startWithLog('n3', { config, terms: [2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2], term: 2 });
  c.isolate('n3');
  c.elect('n1');
  for (const x of ['a', 'b', 'c']) c.propose('n1', x);
  c.stabilize();
  const at = c.node('n1').raw.status().commit; // 8
  c.compact('n1', at, new TextEncoder().encode('state@8'));
  c.heal();
  c.tick('n1');
  c.stabilize();
  const before = c.node('n3').raw.status();
  t.same([before.snapshotIndex, before.lastIndex], [at, at], 'n3 replaced its whole log (2..12, term 2) with the snapshot at 8 (term 3)');
  c.restart('n3');
  const after = c.node('n3').raw.status();
  t.same(
    [after.snapshotIndex, after.firstIndex, after.lastIndex],
    [before.snapshotIndex, before.firstIndex, before.lastIndex],
    'after a restart its log is what it was: the stale term-2 entries 9..12 must not come back from disk',
  );
  t.same(c.logTerms('n3'), [], 'nothing after the snapshot on disk');
});
