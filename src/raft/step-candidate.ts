import { becomeFollower } from './become.js';
import { handleVoteResp } from './election.js';
import type { RaftState } from './state.js';
import { handleAppend, handleHeartbeat, handleSnapChunk, stepFollower } from './step-follower.js';
import type { Message } from './types.js';

/** Messages a (pre-)candidate handles (etcd stepCandidate). */
export function stepCandidate(r: RaftState, m: Message): void {
  switch (m.type) {
    case 'app':
      // Raft §5.2: a leader exists for our term; return to follower.
      becomeFollower(r, m.term, m.from);
      handleAppend(r, m);
      return;
    case 'heartbeat':
      becomeFollower(r, m.term, m.from);
      handleHeartbeat(r, m);
      return;
    case 'snap':
      becomeFollower(r, m.term, m.from);
      handleSnapChunk(r, m);
      return;
    case 'vote-resp':
    case 'pre-vote-resp':
      handleVoteResp(r, m);
      return;
    case 'timeout-now':
      return; // already campaigning
    default:
      stepFollower(r, m);
      return;
  }
}
