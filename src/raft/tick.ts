import { NO_NODE } from '../base/index.js';
import { becomeFollower } from './become.js';
import { campaign, repeatVoteRequests } from './election.js';
import { bcastHeartbeat, quorumActiveAndReset } from './replication.js';
import type { LeaderState, RaftState } from './state.js';

/** One logical clock tick (etcd tickElection / tickHeartbeat). */
export function tick(r: RaftState): void {
  const ls = r.leaderState();
  if (ls) tickHeartbeat(r, ls);
  else tickElection(r);
}

function tickElection(r: RaftState): void {
  r.electionElapsed++;
  // The early deadline is armed only after the connection with the leader broke
  // (handleConnectionLost); whichever comes first starts the (pre-)vote.
  if (r.promotable() && (r.pastElectionTimeout() || r.pastLeaderLostDeadline())) {
    const leaderLost = r.pastLeaderLostDeadline();
    r.resetElectionElapsed();
    campaign(r, false, leaderLost);
    return;
  }
  repeatVoteRequests(r);
}

function tickHeartbeat(r: RaftState, ls: LeaderState): void {
  r.heartbeatElapsed++;
  r.electionElapsed++;
  if (r.electionElapsed >= r.opts.electionTimeoutTicks) {
    r.electionElapsed = 0;
    // Thesis §6.2: a leader that has not heard from a quorum for an election timeout steps
    // down, so clients can find the real leader and stale reads cannot be served.
    if (r.opts.checkQuorum && !quorumActiveAndReset(r, ls)) {
      becomeFollower(r, r.term, NO_NODE);
      return;
    }
  }
  if (ls.transferee !== NO_NODE) {
    // Thesis §3.10: a transfer that has not finished within an election timeout is aborted,
    // and the leader accepts proposals again.
    ls.transferElapsed++;
    if (ls.transferElapsed >= r.opts.electionTimeoutTicks) {
      ls.transferee = NO_NODE;
      ls.transferElapsed = 0;
    }
  }
  if (r.heartbeatElapsed >= r.opts.heartbeatTimeoutTicks) {
    r.heartbeatElapsed = 0;
    bcastHeartbeat(r, ls);
  }
}
