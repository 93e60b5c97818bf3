import { assert, NO_NODE, type NodeId, type Term } from '../base/index.js';
import type { LogIndex } from '../base/index.js';
import { isVoter, NOOP_ENTRY_DATA } from './config.js';
import { failForwardedReads, failLeaderReads } from './read-index.js';
import { appendLeaderEntries, bcastAppend, syncProgressWithConfig } from './replication.js';
import type { LeaderState, RaftState } from './state.js';

/**
 * Role transitions (etcd becomeFollower/becomeCandidate/becomeLeader). These are the only
 * functions that assign `r.role`, so leader-only state is created here and dropped here.
 */

function setLeader(r: RaftState, leader: NodeId): void {
  if (r.leader !== leader) failForwardedReads(r);
  r.leader = leader;
}

/**
 * A follower stops following `r.leader` without a new term (its connection with the leader
 * broke): the lease on votes ends with it, and reads forwarded to that leader fail now
 * rather than at their deadline.
 */
export function forgetLeader(r: RaftState): void {
  assert(r.role.kind === 'follower', () => `only a follower forgets its leader (role ${r.role.kind})`);
  setLeader(r, NO_NODE);
}

/** Leaves the current role: leader-only duties end and its waiting reads fail. */
function leaveRole(r: RaftState): void {
  const ls = r.leaderState();
  if (ls) failLeaderReads(r, ls);
  r.broadcastWanted = false;
  r.broadcastCommit = false;
  r.leaderLostDeadline = 0;
}

function reset(r: RaftState, term: Term): void {
  if (r.term !== term) {
    assert(term > r.term, () => `term must not go back from ${r.term} to ${term}`);
    r.term = term;
    r.vote = NO_NODE;
  }
  r.resetElectionElapsed();
  r.heartbeatElapsed = 0;
  r.resetRandomizedElectionTimeout();
}

export function becomeFollower(r: RaftState, term: Term, leader: NodeId): void {
  leaveRole(r);
  reset(r, term);
  r.role = { kind: 'follower' };
  setLeader(r, leader);
}

export function becomePreCandidate(r: RaftState, leaderLost = false): void {
  assert(r.role.kind !== 'leader', 'a leader cannot become a pre-candidate');
  leaveRole(r);
  // Thesis §9.6: a pre-candidate does not change its term or vote; it only asks.
  r.role = { kind: 'pre-candidate', votes: new Map(), leaderLost };
  setLeader(r, NO_NODE);
}

export function becomeCandidate(r: RaftState, leaderLost = false): void {
  assert(r.role.kind !== 'leader', 'a leader cannot become a candidate');
  leaveRole(r);
  reset(r, (r.term + 1) as Term);
  r.vote = r.id;
  r.role = { kind: 'candidate', votes: new Map(), leaderLost };
  setLeader(r, NO_NODE);
}

export function becomeLeader(r: RaftState): void {
  assert(r.role.kind === 'candidate', () => `only a candidate can become leader (role ${r.role.kind})`);
  leaveRole(r);
  reset(r, r.term);
  const ls: LeaderState = {
    kind: 'leader',
    progress: new Map(),
    transferee: NO_NODE,
    transferElapsed: 0,
    readsAwaitingCommit: [],
    readsInRound: [],
    readSeq: 0,
    readRoundWanted: false,
    readAcks: new Map(),
    uncommittedBytes: 0,
  };
  r.role = ls;
  setLeader(r, r.id);
  // Raft §5.3: nextIndex starts just after the new leader's last entry.
  syncProgressWithConfig(r, ls, (r.log.lastIndex() + 1) as LogIndex);
  for (const [id, pr] of ls.progress) pr.recentActive = id === r.id;
  // Thesis §6.4 / §4.1 errata: commit an entry of our own term before serving reads or
  // accepting a configuration change.
  appendLeaderEntries(r, ls, [NOOP_ENTRY_DATA]);
}

/**
 * The voter with the longest log (highest match; the first in `r.voters()` order on a tie)
 * among those `eligible` accepts: where a leader hands over (thesis §3.10). `NO_NODE` and -1
 * when none qualifies.
 */
export function mostUpToDateVoter(r: RaftState, ls: LeaderState, eligible: (id: NodeId) => boolean = () => true): { readonly id: NodeId; readonly match: number } {
  let best: NodeId = NO_NODE;
  let bestMatch = -1;
  for (const id of r.voters()) {
    if (!eligible(id)) continue;
    const m = ls.progress.get(id)?.match ?? 0;
    if (m > bestMatch) {
      best = id;
      bestMatch = m;
    }
  }
  return { id: best, match: bestMatch };
}

/**
 * Thesis §4.2.2: a leader that is not part of the configuration it committed steps down
 * once that configuration is committed (it managed the cluster until then).
 */
export function maybeStepDownAfterRemoval(r: RaftState): boolean {
  const ls = r.leaderState();
  if (!ls) return false;
  if (r.log.committed < r.log.configIndex()) return false;
  if (isVoter(r.log.config(), r.id)) return false;
  // Before leaving: tell everyone the commit index (so they know the change is committed)
  // and hand leadership to the most up-to-date voter, so the cluster does not wait an
  // election timeout for a new leader (thesis §3.10 used for §4.2.2).
  bcastAppend(r, ls, 'commit');
  const { id: best, match: bestMatch } = mostUpToDateVoter(r, ls);
  if (best !== NO_NODE && bestMatch === r.log.lastIndex()) {
    r.send({ type: 'timeout-now', from: r.id, to: best, term: r.term });
  }
  becomeFollower(r, r.term, NO_NODE);
  return true;
}
