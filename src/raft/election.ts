import { NO_NODE, type NodeId, type Term } from '../base/index.js';
import { becomeCandidate, becomeFollower, becomeLeader, becomePreCandidate, forgetLeader } from './become.js';
import { voteResult } from './quorum.js';
import type { RaftState } from './state.js';
import type { MsgVote, MsgVoteResp } from './types.js';

/**
 * Leader election (Raft §5.2) with pre-vote (thesis §9.6) and the leader lease on votes
 * (thesis §4.2.3, enforced in step.ts).
 */

/**
 * Start an election. `transfer`: asked by the leader (thesis §3.10), so skip pre-vote.
 * `leaderLost`: for a leader whose connection broke, so ask again every tick (CandidateState).
 */
export function campaign(r: RaftState, transfer: boolean, leaderLost = false): void {
  if (!r.promotable()) return;
  if (r.opts.preVote && !transfer) {
    becomePreCandidate(r, leaderLost);
    requestVotes(r, 'pre-vote', (r.term + 1) as Term, false);
  } else {
    startElection(r, transfer, leaderLost);
  }
}

function startElection(r: RaftState, transfer: boolean, leaderLost: boolean): void {
  becomeCandidate(r, leaderLost);
  requestVotes(r, 'vote', r.term, transfer);
}

function requestVotes(r: RaftState, type: 'vote' | 'pre-vote', term: Term, transfer: boolean): void {
  // Our own vote first: a single-voter cluster wins at once.
  if (recordVote(r, r.id, true)) return;
  sendVoteRequests(r, type, term, transfer);
}

/** Asks every voter that has not answered yet (all of them at the start of a campaign). */
function sendVoteRequests(r: RaftState, type: 'vote' | 'pre-vote', term: Term, transfer: boolean): void {
  const role = r.role;
  const lastIndex = r.log.lastIndex();
  const lastTerm = r.log.lastTerm();
  for (const id of r.voters()) {
    if (id === r.id || (role.kind !== 'follower' && role.kind !== 'leader' && role.votes.has(id))) continue;
    r.send({ type, from: r.id, to: id, term, lastIndex, lastTerm, transfer });
  }
}

/**
 * A campaign for a leader whose connection broke asks again, every tick, the voters that have
 * not answered: one that had not yet heard of the break ignored the first request under the
 * lease, and a lost request or answer would otherwise stall the campaign until the election
 * timeout. Asking again is harmless: a pre-vote records nothing, and a voter answers a repeated
 * vote request as it answered the first (it grants again only the candidate it voted for).
 */
export function repeatVoteRequests(r: RaftState): void {
  const role = r.role;
  if ((role.kind !== 'pre-candidate' && role.kind !== 'candidate') || !role.leaderLost) return;
  if (role.kind === 'pre-candidate') sendVoteRequests(r, 'pre-vote', (r.term + 1) as Term, false);
  else sendVoteRequests(r, 'vote', r.term, false);
}

/** Records a vote and acts on the outcome. Returns whether the campaign ended. */
function recordVote(r: RaftState, from: NodeId, granted: boolean): boolean {
  const role = r.role;
  if (role.kind !== 'pre-candidate' && role.kind !== 'candidate') return false;
  if (!role.votes.has(from)) role.votes.set(from, granted);
  switch (voteResult(r.voters(), role.votes)) {
    case 'won':
      if (role.kind === 'pre-candidate') startElection(r, false, role.leaderLost);
      else becomeLeader(r);
      return true;
    case 'lost':
      becomeFollower(r, r.term, NO_NODE);
      return true;
    case 'pending':
      return false;
  }
}

/** A (pre-)vote response for the current campaign. */
export function handleVoteResp(r: RaftState, m: MsgVoteResp): void {
  const role = r.role.kind;
  const expect = role === 'pre-candidate' ? 'pre-vote-resp' : role === 'candidate' ? 'vote-resp' : undefined;
  if (m.type !== expect) return;
  recordVote(r, m.from, !m.reject);
}

/**
 * Raft §5.2 / §5.4.1 and thesis §9.6: grant when we have not voted for someone else this term
 * (or, for a pre-vote, the asker's term is ahead of ours) and the candidate's log is at least
 * as up-to-date as ours. The lease check happened in step.ts before we got here.
 */
export function handleVote(r: RaftState, m: MsgVote): void {
  const canVote =
    r.vote === m.from ||
    (r.vote === NO_NODE && r.leader === NO_NODE) ||
    (m.type === 'pre-vote' && m.term > r.term) ||
    (m.type === 'vote' && r.opts.plantedBugs.doubleVote === true);
  const respType = m.type === 'vote' ? 'vote-resp' : 'pre-vote-resp';
  if (canVote && r.log.isUpToDate(m.lastIndex, m.lastTerm)) {
    // Thesis §9.6: a granted pre-vote carries the asker's future term, so it is not mistaken
    // for a stale response; a granted vote is in our (now equal) term.
    r.send({ type: respType, from: r.id, to: m.from, term: m.term, reject: false });
    if (m.type === 'vote') {
      r.resetElectionElapsed();
      r.vote = m.from;
    } else if (r.leaderLostDeadline > 0) {
      // Someone else is already campaigning for the lost leader's place: let it, rather than
      // start a competing campaign that could split the vote. Its vote request (or its first
      // append) will restart our clock; if neither comes (our grant was lost, or it died too),
      // we take our turn a round later, still in turn order, rather than after the election
      // timeout.
      r.leaderLostDeadline = r.electionElapsed + r.leaderLostTurnTicks + r.opts.leaderLostTicks;
    }
  } else {
    r.send({ type: respType, from: r.id, to: m.from, term: r.term, reject: true });
  }
}

/**
 * The driver saw its connection with `peer` break at the peer's end (reset or closed: its
 * process is gone, not merely slow). If `peer` is our leader, forget it and campaign at our
 * turn instead of waiting out the election timeout. The other followers saw the same break
 * and forgot the leader too, so they are no longer under the leader lease (thesis §4.2.3) and
 * grant the pre-vote.
 *
 * Turns, not a random spread: the voters other than the lost leader, in id order, campaign
 * `leaderLostTicks` ticks apart, the first at once (asking again every tick the voters that
 * have not answered: one may not have heard of the break yet). Followers hear of the break at
 * the same moment, so two that campaigned within one message delay of each other would both
 * pass the pre-vote (each grants the other's) and split the vote, which only an election
 * timeout resolves; a random spread of a few ticks makes that likely on a loaded machine,
 * where a message delay is tens of milliseconds. Turns a few ticks apart cannot collide. A
 * follower that grants a pre-vote puts its turn off by a round (someone is already
 * campaigning); one whose log is too far behind to win loses its pre-vote, and the next turn
 * follows.
 *
 * Only liveness changes: a report moves nothing but the election clock and the known leader,
 * as an election timeout would, so the term, vote and log rules (and so safety) hold whatever
 * the driver reports. A wrong report (the leader is alive) costs a pre-vote that fails: the
 * voters that still hear from the leader ignore it under the lease, and the leader's next
 * message makes us its follower again. Hearing from the leader (or granting a vote, or any
 * change of role) before our turn calls the campaign off.
 */
export function handleConnectionLost(r: RaftState, peer: NodeId): boolean {
  const spacing = r.opts.leaderLostTicks;
  if (spacing === 0 || peer === NO_NODE || r.role.kind !== 'follower' || r.leader !== peer) return false;
  forgetLeader(r);
  if (!r.promotable()) return false;
  const turn = r
    .voters()
    .filter((id) => id !== peer)
    .sort()
    .indexOf(r.id);
  if (turn === 0) {
    // First in turn: campaign now. A voter that has not heard of the break yet ignores the
    // pre-vote under the lease; it is asked again at our next tick (repeatVoteRequests).
    r.resetElectionElapsed();
    campaign(r, false, true);
    return true;
  }
  r.leaderLostTurnTicks = turn * spacing;
  r.leaderLostDeadline = r.electionElapsed + r.leaderLostTurnTicks;
  return true;
}
