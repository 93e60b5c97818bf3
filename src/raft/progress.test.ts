/**
 * Progress: the leader's view of one follower (Raft §5.3 nextIndex/matchIndex; thesis §10.2
 * probe/replicate/snapshot states; etcd tracker/progress_test.go).
 */
import t from 'tap';
import { logIndex, term, type LogIndex } from '../base/index.js';
import { Progress } from './progress.js';
import { heldSnapshot, type Snapshot } from './types.js';

const L = (i: number): LogIndex => logIndex(i);

function progress(state: 'probe' | 'replicate', match: number, next: number, maxInflight = 4): Progress {
  const pr = new Progress(L(next), maxInflight, 0);
  pr.match = L(match);
  if (state === 'replicate') {
    pr.becomeReplicate();
    pr.next = L(next);
  }
  return pr;
}

function snap(index: number): Snapshot {
  return { meta: { index: L(index), term: term(2), config: { members: [] } }, data: new Uint8Array(1) };
}

t.test('§5.3 a new progress starts in probe with the given nextIndex and matchIndex 0', async (t) => {
  const pr = new Progress(L(11), 4, 0);
  t.same([pr.state, pr.match, pr.next, pr.isPaused()], ['probe', 0, 11, false]);
});

t.test('§5.3 maybeUpdate: an acknowledgement raises matchIndex and nextIndex, never lowers them', async (t) => {
  // [match, next, ack] -> [updated, match, next]
  const cases: Array<[number, number, number, boolean, number, number]> = [
    [3, 5, 2, false, 3, 5], // stale ack
    [3, 5, 3, false, 3, 5], // repeated ack
    [3, 5, 4, true, 4, 5], // ack below next
    [3, 5, 5, true, 5, 6], // ack at next: next moves past it
    [3, 5, 9, true, 9, 10], // ack beyond next
  ];
  for (const [match, next, ack, updated, wantMatch, wantNext] of cases) {
    const pr = progress('probe', match, next);
    t.equal(pr.maybeUpdate(L(ack)), updated, `match ${match} next ${next}, ack ${ack}: ${updated ? 'updated' : 'stale'}`);
    t.same([pr.match, pr.next], [wantMatch, wantNext]);
  }
});

t.test('§5.3 maybeDecrTo in probe: a rejection of the probe moves nextIndex back, using the hint', async (t) => {
  // [match, next, rejected, hint] -> [accepted, next]
  const cases: Array<[number, number, number, number, boolean, number]> = [
    [0, 10, 5, 5, false, 10], // rejection of an older probe (next - 1 = 9, not 5): stale
    [0, 10, 9, 9, true, 9], // no useful hint: one step back
    [0, 10, 9, 4, true, 5], // hint: the follower may match at 4, probe 5
    [0, 10, 9, 0, true, 1], // hint 0: start from the beginning
    [6, 10, 9, 2, true, 7], // never below match + 1
    [0, 10, 9, 20, true, 9], // a hint above the rejected index does not move next forward
  ];
  for (const [match, next, rejected, hint, accepted, wantNext] of cases) {
    const pr = progress('probe', match, next);
    pr.probeSent = true;
    t.equal(pr.maybeDecrTo(L(rejected), L(hint)), accepted, `next ${next}, rejected ${rejected}, hint ${hint}: ${accepted ? 'backs up' : 'stale'}`);
    t.equal(pr.next, wantNext, `next becomes ${wantNext}`);
    if (accepted) t.equal(pr.probeSent, false, 'and may probe again at once');
  }
});

t.test('§10.2 maybeDecrTo in replicate: a rejection above matchIndex resets nextIndex to match + 1', async (t) => {
  const pr = progress('replicate', 5, 9);
  t.equal(pr.maybeDecrTo(L(4), L(4)), false, 'a rejection at or below match is stale');
  t.equal(pr.next, 9);
  t.equal(pr.maybeDecrTo(L(7), L(3)), true);
  t.equal(pr.next, 6, 'next = match + 1 (the hint is not needed: match is known)');
});

t.test('§10.2 isPaused: probe waits for an answer to its one probe; replicate waits for a free inflight slot; snapshot always', async (t) => {
  const probe = progress('probe', 0, 5);
  t.equal(probe.isPaused(), false);
  probe.sentEntries(2, L(6), 10);
  t.equal(probe.isPaused(), true, 'one probe outstanding');
  t.equal(probe.next, 5, 'in probe, nextIndex does not move optimistically');
  t.equal(probe.maybeUpdate(L(6)), true);
  t.equal(probe.isPaused(), false, 'an acknowledgement unpauses it');

  const rep = progress('replicate', 4, 5, 2);
  rep.sentEntries(2, L(6), 10);
  t.same([rep.next, rep.isPaused()], [7, false], 'replicate: next moves past what was sent, one slot left');
  rep.sentEntries(1, L(7), 10);
  t.same([rep.next, rep.isPaused()], [8, true], 'two of two in flight: paused');
  rep.sentEntries(0, L(7), 0);
  t.equal(rep.inflights.count, 2, 'an empty append (commit update) takes no slot');
  rep.maybeUpdate(L(6));
  rep.inflights.freeLE(6);
  t.equal(rep.isPaused(), false, 'an acknowledgement frees a slot');

  const sn = progress('probe', 0, 5);
  sn.becomeSnapshot(heldSnapshot(snap(20)));
  t.equal(sn.isPaused(), true, 'while a snapshot is sent, no appends');
});

t.test('§10.2 state transitions: probe -> replicate -> probe, and snapshot -> probe past the snapshot', async (t) => {
  const pr = progress('probe', 3, 9);
  pr.becomeReplicate();
  t.same([pr.state, pr.next, pr.probeSent], ['replicate', 4, false], 'replicate starts right after match');
  pr.sentEntries(3, L(6), 30);
  t.equal(pr.inflights.count, 1);
  pr.becomeProbe();
  t.same([pr.state, pr.next, pr.inflights.count], ['probe', 4, 0], 'probe restarts from match + 1 and forgets inflights');

  pr.becomeSnapshot(heldSnapshot(snap(20)));
  t.same([pr.state, pr.snapshot?.meta.index, pr.snapOffset], ['snapshot', 20, 0]);
  pr.becomeProbe();
  t.same([pr.state, pr.next, pr.snapshot], ['probe', 21, undefined], 'after a snapshot, probe from just past it');

  const ahead = progress('probe', 30, 31);
  ahead.becomeSnapshot(heldSnapshot(snap(20)));
  ahead.becomeProbe();
  t.equal(ahead.next, 31, 'or from match + 1 if that is further');
});
