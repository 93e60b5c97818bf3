import type { LogIndex, Term } from '../base/index.js';
import { campaign } from './election.js';
import type { RaftState } from './state.js';
import type { Message, MsgApp, MsgHeartbeat, MsgReadIndexResp, MsgSnap, Snapshot } from './types.js';

/** Messages a follower handles (etcd stepFollower). Term checks already happened in step.ts. */
export function stepFollower(r: RaftState, m: Message): void {
  switch (m.type) {
    case 'app':
      r.resetElectionElapsed();
      r.leader = m.from;
      handleAppend(r, m);
      return;
    case 'heartbeat':
      r.resetElectionElapsed();
      r.leader = m.from;
      handleHeartbeat(r, m);
      return;
    case 'snap':
      r.resetElectionElapsed();
      r.leader = m.from;
      handleSnapChunk(r, m);
      return;
    case 'timeout-now':
      // Thesis §3.10: the leader asks us to campaign now, bypassing pre-vote and the lease.
      campaign(r, true);
      return;
    case 'read-index-resp':
      handleReadIndexResp(r, m);
      return;
    default:
      return; // responses meant for a leader or candidate of this term: stale, ignore
  }
}

/** Raft §5.3: the consistency check, conflict truncation, and the commit index. */
export function handleAppend(r: RaftState, m: MsgApp): void {
  if (m.index < r.log.committed) {
    // Already committed here: tell the leader where we are so it skips ahead.
    reply(r, m.from, r.log.committed, false);
    return;
  }
  const lastNew = r.log.maybeAppend(m.index, m.logTerm, m.commit, m.entries);
  if (lastNew !== undefined) {
    reply(r, m.from, lastNew, false);
    return;
  }
  // Fast backtracking: point the leader at the last index that can match in term <= m.logTerm.
  const hint = r.log.findConflictByTerm(Math.min(m.index, r.log.lastIndex()), m.logTerm);
  r.send({ type: 'app-resp', from: r.id, to: m.from, term: r.term, index: m.index, reject: true, hintIndex: hint.index, hintTerm: hint.term });
}

function reply(r: RaftState, to: Message['from'], index: LogIndex, reject: boolean): void {
  r.send({ type: 'app-resp', from: r.id, to, term: r.term, index, reject, hintIndex: 0 as LogIndex, hintTerm: 0 as Term });
}

export function handleHeartbeat(r: RaftState, m: MsgHeartbeat): void {
  // The leader never sends a commit beyond what it knows we match (replication.ts).
  r.log.commitTo(Math.min(m.commit, r.log.lastIndex()) as LogIndex);
  r.send({ type: 'heartbeat-resp', from: r.id, to: m.from, term: r.term, readSeq: m.readSeq });
}

/** InstallSnapshot (Raft §7), reassembled from chunks that arrive one at a time. */
export function handleSnapChunk(r: RaftState, m: MsgSnap): void {
  // A snapshot is waiting for the driver to persist and install it (a Ready carries it): take
  // no other until then, or the one being installed would be replaced under the driver. The
  // leader resends once the transfer stalls for a heartbeat interval. (Found by the simulator
  // once a leader whose snapshot file was pruned starts a follower over on its newest one.)
  if (r.log.pendingSnapshot !== undefined) return;
  const meta = m.meta;
  if (meta.index <= r.log.committed) {
    r.incomingSnapshot = undefined;
    reply(r, m.from, r.log.committed, false);
    return;
  }
  let inc = r.incomingSnapshot;
  const same = inc !== undefined && inc.snapshot.index === meta.index && inc.snapshot.term === meta.term && inc.buffer.length === m.totalBytes;
  if (m.offset === 0 && !same) {
    inc = { snapshot: meta, buffer: new Uint8Array(m.totalBytes), received: 0 };
    r.incomingSnapshot = inc;
  } else if (!same) {
    inc = undefined;
  }
  if (!inc || m.offset !== inc.received || m.offset + m.chunk.length > m.totalBytes) {
    // Out of order or from another snapshot: tell the leader where we are.
    const next = inc && same ? inc.received : 0;
    r.send({ type: 'snap-resp', from: r.id, to: m.from, term: r.term, snapIndex: meta.index, nextOffset: next, chunkOffset: m.offset });
    return;
  }
  inc.buffer.set(m.chunk, m.offset);
  inc.received += m.chunk.length;
  if (inc.received < m.totalBytes) {
    r.send({ type: 'snap-resp', from: r.id, to: m.from, term: r.term, snapIndex: meta.index, nextOffset: inc.received, chunkOffset: m.offset });
    return;
  }
  r.incomingSnapshot = undefined;
  const snapshot: Snapshot = { meta, data: inc.buffer };
  if (restore(r, snapshot)) {
    reply(r, m.from, r.log.lastIndex(), false);
  } else {
    reply(r, m.from, r.log.committed, false);
  }
}

/**
 * Installs a snapshot unless our log already has its last entry (then only the commit index
 * moves). Returns whether the log was replaced.
 */
function restore(r: RaftState, snap: Snapshot): boolean {
  if (snap.meta.index <= r.log.committed) return false;
  if (r.log.matchTerm(snap.meta.index, snap.meta.term)) {
    r.log.commitTo(snap.meta.index);
    return false;
  }
  r.log.restore(snap);
  return true;
}

function handleReadIndexResp(r: RaftState, m: MsgReadIndexResp): void {
  for (const id of m.requestIds) {
    if (!r.forwardedReads.delete(id)) continue;
    if (m.reject) r.readFailures.push({ requestId: id, reason: 'not-leader' });
    else r.readStates.push({ requestId: id, index: m.index });
  }
}
