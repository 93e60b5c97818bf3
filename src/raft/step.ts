import { NO_NODE, type LogIndex, type Term } from '../base/index.js';
import { becomeFollower } from './become.js';
import { handleVote } from './election.js';
import type { RaftState } from './state.js';
import { stepCandidate } from './step-candidate.js';
import { stepFollower } from './step-follower.js';
import { stepLeader } from './step-leader.js';
import type { Message } from './types.js';

/**
 * Entry point for every message from a peer (etcd `Step`). First the term rules of Raft §5.1
 * with the thesis' refinements, then the role-specific handler.
 */
export function step(r: RaftState, m: Message): void {
  if (m.to !== r.id) return;
  // Thesis §3.10: only the leader transfers its leadership. A timeout-now is taken only from
  // the leader this node follows, in its own term; any other (a non-member, a stale or deposed
  // leader, a forged higher term) is dropped before it can change the term or start an election.
  if (m.type === 'timeout-now' && (m.term !== r.term || m.from !== r.leader)) return;
  if (m.term > r.term) {
    if (m.type === 'vote' || m.type === 'pre-vote') {
      // Thesis §4.2.3 (leader stickiness): while we hear from a leader within the minimum
      // election timeout, ignore requests to elect another, unless the leader itself asked
      // for it (a transfer). This also keeps removed servers from disrupting the cluster.
      const inLease = r.opts.checkQuorum && r.leader !== NO_NODE && r.electionElapsed < r.opts.electionTimeoutTicks;
      if (inLease && !m.transfer) return;
    }
    if (m.type === 'pre-vote') {
      // Thesis §9.6: a pre-vote never changes our term.
    } else if (m.type === 'pre-vote-resp' && !m.reject) {
      // A granted pre-vote carries the future term we asked about; it is not a newer leader.
    } else if (m.type === 'app' || m.type === 'heartbeat' || m.type === 'snap') {
      becomeFollower(r, m.term, m.from);
    } else {
      becomeFollower(r, m.term, NO_NODE);
    }
  } else if (m.term < r.term) {
    if ((r.opts.checkQuorum || r.opts.preVote) && (m.type === 'heartbeat' || m.type === 'app')) {
      // A leader cut off by a partition may never hear a higher term otherwise (with
      // pre-vote nobody else bumps terms): answer so it steps down (etcd does the same).
      r.send({ type: 'app-resp', from: r.id, to: m.from, term: r.term, index: 0 as LogIndex, reject: false, hintIndex: 0 as LogIndex, hintTerm: 0 as Term });
    } else if (m.type === 'pre-vote') {
      r.send({ type: 'pre-vote-resp', from: r.id, to: m.from, term: r.term, reject: true });
    }
    return;
  }

  if (m.type === 'vote' || m.type === 'pre-vote') {
    handleVote(r, m);
    return;
  }
  const role = r.role;
  switch (role.kind) {
    case 'leader':
      stepLeader(r, role, m);
      return;
    case 'candidate':
    case 'pre-candidate':
      stepCandidate(r, m);
      return;
    case 'follower':
      stepFollower(r, m);
      return;
  }
}
