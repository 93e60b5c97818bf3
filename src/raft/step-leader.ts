import { NO_NODE, type NodeId } from '../base/index.js';
import { maybeStepDownAfterRemoval } from './become.js';
import { leaderRead, onHeartbeatAck } from './read-index.js';
import { maybeCommit, sendAppends, sendSnapshotChunk } from './replication.js';
import type { LeaderState, RaftState } from './state.js';
import type { Message, MsgAppResp } from './types.js';

/** Messages a leader handles (etcd stepLeader). */
export function stepLeader(r: RaftState, ls: LeaderState, m: Message): void {
  switch (m.type) {
    case 'app-resp':
      handleAppendResp(r, ls, m);
      return;
    case 'heartbeat-resp': {
      const pr = ls.progress.get(m.from);
      if (!pr) return;
      pr.recentActive = true;
      pr.probeSent = false;
      // A full pipeline with a live follower: free a slot so replication cannot stall on a
      // lost ack (etcd does the same).
      if (pr.state === 'replicate' && pr.inflights.full()) pr.inflights.freeFirstOne();
      if (pr.state === 'snapshot') {
        // Retransmit the current chunk only if the transfer stalled for a whole heartbeat
        // interval (the chunk or its ack was lost); resending on every heartbeat response
        // would start a new chunk/ack loop each time and flood the link.
        if (!pr.snapProgressed) sendSnapshotChunk(r, pr, m.from);
        pr.snapProgressed = false;
      }
      // Raft §5.3: retry until the follower has everything. Appends it never got may have
      // moved `next` past them already, so send even an empty append: a rejection puts the
      // follower back into probe and repairs it without waiting for a new proposal.
      else if (pr.match < r.log.lastIndex()) sendAppends(r, ls, m.from, 'always');
      onHeartbeatAck(r, ls, m.from, m.readSeq);
      // A lost TimeoutNow is re-sent while the transfer is still on.
      maybeFinishTransfer(r, ls, m.from);
      return;
    }
    case 'snap-resp': {
      const pr = ls.progress.get(m.from);
      if (!pr) return;
      pr.recentActive = true;
      if (pr.state !== 'snapshot' || !pr.snapshot || pr.snapshot.meta.index !== m.snapIndex) return;
      if (m.nextOffset > pr.snapOffset) {
        // Progress: the next chunk (one in flight at a time).
        pr.snapOffset = Math.min(m.nextOffset, pr.snapshot.size);
        pr.snapProgressed = true;
        if (pr.snapOffset < pr.snapshot.size) sendSnapshotChunk(r, pr, m.from);
      } else if (m.nextOffset < pr.snapOffset && m.chunkOffset === pr.snapOffset) {
        // The receiver answered the current chunk with a lower offset: it lost its partial
        // copy (a restart). Start again from where it is.
        pr.snapOffset = m.nextOffset;
        pr.snapProgressed = true;
        sendSnapshotChunk(r, pr, m.from);
      }
      // Anything else is a stale or duplicated ack: ignore it, or acks would multiply chunks.
      return;
    }
    case 'read-index':
      for (const id of m.requestIds) leaderRead(r, ls, id, m.from);
      return;
    default:
      // Votes were handled in step.ts; an append or heartbeat from another leader of our term
      // cannot happen with correct peers; responses to roles we no longer hold are stale.
      return;
  }
}

function handleAppendResp(r: RaftState, ls: LeaderState, m: MsgAppResp): void {
  const pr = ls.progress.get(m.from);
  if (!pr) return;
  pr.recentActive = true;
  if (m.reject) {
    let hint = m.hintIndex;
    if (m.hintTerm > 0) hint = r.log.findConflictByTerm(m.hintIndex, m.hintTerm).index;
    if (pr.maybeDecrTo(m.index, hint)) {
      if (pr.state === 'replicate') pr.becomeProbe();
      sendAppends(r, ls, m.from, 'never');
    }
    return;
  }
  const wasPaused = pr.isPaused();
  if (pr.maybeUpdate(m.index)) {
    if (pr.state === 'probe') pr.becomeReplicate();
    else if (pr.state === 'snapshot' && pr.snapshot && pr.match >= pr.snapshot.meta.index) pr.becomeReplicate();
    else if (pr.state === 'replicate') pr.inflights.freeLE(m.index);
    if (maybeCommit(r, ls)) {
      if (maybeStepDownAfterRemoval(r)) return;
    }
    // A follower that was paused (probing) may have acked an append carrying an old commit
    // index: an empty append tells it the commit now rather than a heartbeat later.
    sendAppends(r, ls, m.from, wasPaused ? 'commit' : 'never');
    maybeFinishTransfer(r, ls, m.from);
  } else if (wasPaused && pr.state === 'replicate') {
    sendAppends(r, ls, m.from, 'never');
  } else if (pr.state === 'snapshot' && pr.snapshot && m.index >= pr.snapshot.meta.index) {
    // The follower already had the snapshot's entries; resume normal replication.
    pr.becomeProbe();
    sendAppends(r, ls, m.from, 'never');
  }
}

/** Thesis §3.10: once the target has our whole log, tell it to campaign now. */
export function maybeFinishTransfer(r: RaftState, ls: LeaderState, from: NodeId): void {
  if (ls.transferee === NO_NODE || ls.transferee !== from) return;
  const pr = ls.progress.get(from);
  if (pr && pr.match === r.log.lastIndex()) {
    r.send({ type: 'timeout-now', from: r.id, to: from, term: r.term });
  }
}
