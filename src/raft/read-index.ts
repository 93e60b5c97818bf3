import type { LogIndex, NodeId } from '../base/index.js';
import { majorityValue } from './quorum.js';
import type { LeaderState, PendingRead, RaftState } from './state.js';

/**
 * ReadIndex (thesis §6.4). The leader records its commit index for each read, proves it is
 * still leader with a heartbeat round acknowledged by a quorum, and only then releases the
 * read at that index. A new leader first commits an entry of its own term (its no-op), since
 * until then it may not know the latest commit index. Reads that arrive between two flushes
 * share one heartbeat round.
 */

/** This leader has committed an entry of its current term. */
export function committedInTerm(r: RaftState): boolean {
  return r.log.term(r.log.committed) === r.term;
}

export function leaderRead(r: RaftState, ls: LeaderState, requestId: string, origin: NodeId): void {
  const read: PendingRead = { requestId, origin, index: r.log.committed, seq: ls.readSeq + 1 };
  if (!committedInTerm(r)) {
    ls.readsAwaitingCommit.push(read);
    return;
  }
  if (r.opts.plantedBugs.readIndexWithoutHeartbeat) {
    releaseRead(r, read);
    return;
  }
  ls.readsInRound.push(read);
  ls.readRoundWanted = true;
}

/** Called whenever the leader's commit index advanced. */
export function onLeaderCommit(r: RaftState, ls: LeaderState): void {
  if (ls.readsAwaitingCommit.length === 0 || !committedInTerm(r)) return;
  for (const read of ls.readsAwaitingCommit.splice(0)) {
    read.index = r.log.committed;
    read.seq = ls.readSeq + 1;
    if (r.opts.plantedBugs.readIndexWithoutHeartbeat) releaseRead(r, read);
    else {
      ls.readsInRound.push(read);
      ls.readRoundWanted = true;
    }
  }
}

/** The highest round a quorum of voters has acknowledged (the leader acks its own rounds). */
function confirmedSeq(r: RaftState, ls: LeaderState): number {
  return majorityValue(r.voters(), (id) => (id === r.id ? ls.readSeq : (ls.readAcks.get(id) ?? 0)));
}

export function onHeartbeatAck(r: RaftState, ls: LeaderState, from: NodeId, seq: number): void {
  if (seq > (ls.readAcks.get(from) ?? 0)) ls.readAcks.set(from, seq);
  releaseConfirmed(r, ls);
}

export function releaseConfirmed(r: RaftState, ls: LeaderState): void {
  if (ls.readsInRound.length === 0) return;
  const confirmed = confirmedSeq(r, ls);
  let k = 0;
  while (k < ls.readsInRound.length && (ls.readsInRound[k] as PendingRead).seq <= confirmed) k++;
  if (k === 0) return;
  for (const read of ls.readsInRound.splice(0, k)) releaseRead(r, read);
}

function releaseRead(r: RaftState, read: PendingRead): void {
  if (read.origin === r.id) {
    r.readStates.push({ requestId: read.requestId, index: read.index });
  } else {
    r.send({ type: 'read-index-resp', from: r.id, to: read.origin, term: r.term, requestIds: [read.requestId], index: read.index, reject: false });
  }
}

/** Leadership is lost: every pending read fails (locally) or is refused (to followers). */
export function failLeaderReads(r: RaftState, ls: LeaderState): void {
  const all = [...ls.readsAwaitingCommit.splice(0), ...ls.readsInRound.splice(0)];
  for (const read of all) {
    if (read.origin === r.id) r.readFailures.push({ requestId: read.requestId, reason: 'leadership-lost' });
    else r.send({ type: 'read-index-resp', from: r.id, to: read.origin, term: r.term, requestIds: [read.requestId], index: 0 as LogIndex, reject: true });
  }
}

/** This follower's leader changed or vanished: reads it forwarded will get no answer. */
export function failForwardedReads(r: RaftState): void {
  for (const id of r.forwardedReads) r.readFailures.push({ requestId: id, reason: 'leadership-lost' });
  r.forwardedReads.clear();
}
