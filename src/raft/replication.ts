import type { LogIndex, NodeId } from '../base/index.js';
import { Progress } from './progress.js';
import { majority, majorityValue } from './quorum.js';
import { onLeaderCommit } from './read-index.js';
import type { LeaderState, RaftState } from './state.js';
import type { Entry } from './types.js';

/**
 * The leader's replication (Raft §5.3, thesis §10.2): appends with the consistency check,
 * probe/replicate/snapshot progress, pipelining within the inflight limits, heartbeats,
 * chunked snapshots, and the commit rule (§5.4.2).
 */

export function newProgress(r: RaftState, next: LogIndex): Progress {
  return new Progress(next, r.opts.maxInflightMsgs, r.opts.maxInflightBytes);
}

/** Leader appends entries of its own term (proposals, its no-op, config changes). */
export function appendLeaderEntries(r: RaftState, ls: LeaderState, datas: readonly Uint8Array[]): Entry[] {
  const ents: Entry[] = [];
  let index = r.log.lastIndex();
  let bytes = 0;
  for (const data of datas) {
    index = (index + 1) as LogIndex;
    ents.push({ index, term: r.term, data });
    bytes += data.length;
  }
  r.log.append(ents);
  ls.uncommittedBytes += bytes;
  // A member added by an entry just appended is probed from that entry, so it gets it at once
  // (and rejects it if it lacks what precedes, starting the backtrack).
  syncProgressWithConfig(r, ls, r.log.lastIndex());
  r.broadcastWanted = true;
  return ents;
}

/**
 * Progress trackers follow the configuration in the log (it changes on append, §4.1). New
 * trackers start probing at `nextForNew`.
 */
export function syncProgressWithConfig(r: RaftState, ls: LeaderState, nextForNew: LogIndex): void {
  const members = new Set(r.log.config().members.map((m) => m.id));
  members.add(r.id);
  for (const id of members) {
    if (ls.progress.has(id)) continue;
    if (id === r.id) {
      const self = newProgress(r, (r.log.lastIndex() + 1) as LogIndex);
      self.match = r.log.stabled;
      self.becomeReplicate();
      self.next = (r.log.lastIndex() + 1) as LogIndex;
      ls.progress.set(id, self);
    } else {
      ls.progress.set(id, newProgress(r, Math.max(1, nextForNew) as LogIndex));
    }
  }
  for (const id of [...ls.progress.keys()]) {
    if (!members.has(id)) {
      ls.progress.delete(id);
      ls.readAcks.delete(id);
    }
  }
}

/**
 * When an append with no entries is worth sending: never; only to carry a commit index the
 * follower has not been sent yet; or always (to elicit a rejection that repairs a follower
 * whose appends were lost).
 */
export type EmptyAppend = 'never' | 'commit' | 'always';

/**
 * Sends one append to `to` if its progress allows (or a snapshot chunk if the entries it
 * needs are compacted away). Returns whether a message was sent.
 */
export function maybeSendAppend(r: RaftState, ls: LeaderState, to: NodeId, empty: EmptyAppend): boolean {
  const pr = ls.progress.get(to);
  if (!pr || to === r.id || pr.isPaused()) return false;
  const prevIndex = (pr.next - 1) as LogIndex;
  const prevTerm = r.log.term(prevIndex);
  if (prevTerm === undefined) return startSnapshot(r, pr, to);
  const ents = pr.next <= r.log.lastIndex() ? r.log.slice(pr.next, r.log.lastIndex() + 1, r.opts.maxAppendBytes) : [];
  if (ents.length === 0 && (empty === 'never' || (empty === 'commit' && pr.sentCommit >= r.log.committed))) return false;
  let bytes = 0;
  for (const e of ents) bytes += e.data.length;
  r.send({ type: 'app', from: r.id, to, term: r.term, index: prevIndex, logTerm: prevTerm, entries: ents, commit: r.log.committed });
  if (pr.sentCommit < r.log.committed) pr.sentCommit = r.log.committed;
  const last = ents[ents.length - 1];
  pr.sentEntries(ents.length, last ? last.index : prevIndex, bytes);
  return true;
}

/** Sends as much as the follower's progress allows (pipelining in replicate state). */
export function sendAppends(r: RaftState, ls: LeaderState, to: NodeId, empty: EmptyAppend): void {
  if (!maybeSendAppend(r, ls, to, empty)) return;
  while (maybeSendAppend(r, ls, to, 'never')) {
    // keep pipelining until paused or caught up
  }
}

export function bcastAppend(r: RaftState, ls: LeaderState, empty: EmptyAppend): void {
  for (const id of ls.progress.keys()) {
    if (id !== r.id) sendAppends(r, ls, id, empty);
  }
}

export function bcastHeartbeat(r: RaftState, ls: LeaderState): void {
  for (const [id, pr] of ls.progress) {
    if (id === r.id) continue;
    // Raft §5.3: a follower may not yet have entries up to our commit; never claim beyond match.
    const commit = Math.min(pr.match, r.log.committed) as LogIndex;
    r.send({ type: 'heartbeat', from: r.id, to: id, term: r.term, commit, readSeq: ls.readSeq });
  }
}

function startSnapshot(r: RaftState, pr: Progress, to: NodeId): boolean {
  const snap = r.log.snapshot;
  if (!snap) return false; // nothing to send yet; the log was never compacted below next
  pr.becomeSnapshot(snap);
  sendSnapshotChunk(r, pr, to);
  return true;
}

/** Sends the chunk at the acknowledged offset (also used to retransmit a lost chunk). */
const NO_BYTES = new Uint8Array(0);

export function sendSnapshotChunk(r: RaftState, pr: Progress, to: NodeId): void {
  const snap = pr.snapshot;
  if (!snap) return;
  const total = snap.size;
  const offset = Math.min(pr.snapOffset, total);
  const end = Math.min(total, offset + r.opts.snapshotChunkBytes);
  if (snap.data !== undefined) {
    r.send({ type: 'snap', from: r.id, to, term: r.term, meta: snap.meta, offset, totalBytes: total, chunk: snap.data.subarray(offset, end) });
  } else {
    // Released to the driver's store: the driver reads the chunk as it sends it.
    r.send({ type: 'snap', from: r.id, to, term: r.term, meta: snap.meta, offset, totalBytes: total, chunk: NO_BYTES, fill: end - offset });
  }
}

/**
 * Raft §5.4.2: advance the commit index to the highest index stored on a majority of voters,
 * but only if that entry is from the current term (Figure 8). The leader counts only what it
 * has made durable itself (its match is its stable index).
 */
export function maybeCommit(r: RaftState, ls: LeaderState): boolean {
  const self = ls.progress.get(r.id);
  if (self) {
    self.match = r.log.stabled;
    self.next = (r.log.lastIndex() + 1) as LogIndex;
  }
  const voters = r.voters();
  const idx = majorityValue(voters, (id) => ls.progress.get(id)?.match ?? 0) as LogIndex;
  if (idx <= r.log.committed) return false;
  if (r.log.term(idx) !== r.term && !r.opts.plantedBugs.commitOldTermByCount) return false;
  const old = r.log.committed;
  r.log.commitTo(idx);
  for (let i = old + 1; i <= idx; i++) {
    const e = r.log.entry(i);
    if (e && e.term === r.term) ls.uncommittedBytes -= e.data.length;
  }
  if (ls.uncommittedBytes < 0) ls.uncommittedBytes = 0;
  r.broadcastWanted = true;
  r.broadcastCommit = true;
  onLeaderCommit(r, ls);
  return true;
}

/** Is a quorum of voters active (thesis §6.2 check-quorum)? Resets the activity flags. */
export function quorumActiveAndReset(r: RaftState, ls: LeaderState): boolean {
  const voters = r.voters();
  let active = 0;
  for (const id of voters) {
    const pr = ls.progress.get(id);
    if (id === r.id || pr?.recentActive) active++;
  }
  for (const [id, pr] of ls.progress) pr.recentActive = id === r.id;
  return voters.length > 0 && active >= majority(voters.length);
}
