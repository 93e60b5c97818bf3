import { CairnError, ErrorCode, NO_NODE, assert, type LogIndex, type NodeId, type Term } from '../base/index.js';
import { becomeFollower, maybeStepDownAfterRemoval, mostUpToDateVoter } from './become.js';
import { applyConfigChange, EMPTY_CONFIG, encodeConfigEntry, isVoter, voters } from './config.js';
import { campaign, handleConnectionLost } from './election.js';
import { RaftLog } from './log.js';
import { resolveOptions, type RaftOptions } from './options.js';
import { committedInTerm, leaderRead, releaseConfirmed } from './read-index.js';
import { appendLeaderEntries, bcastAppend, bcastHeartbeat, maybeCommit, sendAppends } from './replication.js';
import { RaftState, type LeaderState } from './state.js';
import { step } from './step.js';
import { tick } from './tick.js';
import {
  EntryType,
  type Config,
  type ConfigChange,
  type HardState,
  type Message,
  type PersistedState,
  type ProgressStatus,
  type Ready,
  type SoftState,
  type Snapshot,
  type Status,
} from './types.js';

export interface Proposed {
  readonly index: LogIndex;
  readonly term: Term;
}

/**
 * The public face of the Raft core (etcd `RawNode`): a synchronous state machine. Inputs
 * (`tick`, `step`, `propose`, ...) only change memory; `ready()` says what to persist, send
 * and apply; `advance()` acknowledges that it was done. No I/O, no timers, no ambient time.
 */
export class RawNode {
  private readonly r: RaftState;
  private prevHard: HardState;
  private prevSoft: SoftState;
  private outstanding: Ready | undefined = undefined;
  /** Reads asked of this follower, to forward to the leader at the next flush. */
  private forwardQueue: string[] = [];

  constructor(options: RaftOptions, persisted: PersistedState) {
    const opts = resolveOptions(options);
    const hs = persisted.hardState;
    const log = new RaftLog(EMPTY_CONFIG, persisted.snapshot, persisted.entries, hs.commit);
    this.r = new RaftState(opts, log, hs.term, hs.vote);
    becomeFollower(this.r, hs.term, NO_NODE);
    this.prevHard = { term: hs.term, vote: hs.vote, commit: log.committed };
    this.prevSoft = { role: 'follower', leader: NO_NODE };
  }

  /** What each member of a new cluster persists before its first start (identical on all). */
  static bootstrapState(config: Config): PersistedState {
    if (voters(config).length === 0) throw new CairnError(ErrorCode.INVALID_ARGUMENT, 'a bootstrap configuration needs at least one voter');
    const data = encodeConfigEntry({ change: { type: 'bootstrap' }, config });
    return {
      hardState: { term: 1 as Term, vote: NO_NODE, commit: 1 as LogIndex },
      snapshot: undefined,
      entries: [{ index: 1 as LogIndex, term: 1 as Term, data }],
    };
  }

  /** What a node joining an existing cluster starts from: it learns everything from the leader. */
  static emptyState(): PersistedState {
    return { hardState: { term: 0 as Term, vote: NO_NODE, commit: 0 as LogIndex }, snapshot: undefined, entries: [] };
  }

  get id(): NodeId {
    return this.r.id;
  }

  tick(): void {
    tick(this.r);
  }

  /** A message from a peer. Messages addressed to another node are ignored. */
  step(m: Message): void {
    step(this.r, m);
  }

  /**
   * The driver's connection with `peer` broke at the peer's end: reset or closed without a
   * goodbye, as when its process is killed (not a timeout: a paused or partitioned peer is
   * left to the election timeout). If `peer` is this follower's leader, the follower forgets it
   * and campaigns at its turn (`leaderLostTicks`) unless it hears from a leader first.
   * Affects liveness only. Returns whether an early campaign was armed.
   */
  reportConnectionLost(peer: NodeId): boolean {
    return handleConnectionLost(this.r, peer);
  }

  /** Start an election now (pre-vote first when enabled). No-op for a leader or a non-voter. */
  campaign(): void {
    if (this.r.role.kind === 'leader') return;
    campaign(this.r, false);
  }

  propose(data: Uint8Array): Proposed {
    return this.proposeMany([data]);
  }

  /** Appends several commands as consecutive entries; returns the first one's position. */
  proposeMany(datas: readonly Uint8Array[]): Proposed {
    const ls = this.leaderOrThrow('propose');
    let bytes = 0;
    for (const d of datas) {
      const t = d[0];
      if (t === undefined || t === EntryType.Noop || t === EntryType.Config) {
        throw new CairnError(ErrorCode.INVALID_ARGUMENT, `cannot propose an entry of type ${String(t)}: types 0x01 and 0x02 belong to Raft`);
      }
      bytes += d.length;
    }
    const max = this.r.opts.maxUncommittedBytes;
    if (max > 0 && ls.uncommittedBytes > 0 && ls.uncommittedBytes + bytes > max) {
      throw new CairnError(ErrorCode.PROPOSAL_DROPPED, `proposal dropped: ${ls.uncommittedBytes} bytes are uncommitted, the limit is ${max}`);
    }
    const ents = appendLeaderEntries(this.r, ls, datas);
    const first = ents[0];
    assert(first !== undefined, 'proposeMany needs at least one entry');
    return { index: first.index, term: first.term };
  }

  /**
   * One membership change at a time (thesis §4.1), taking effect when appended. Per the thesis
   * errata the leader must first have committed an entry of its own term.
   */
  proposeConfigChange(change: ConfigChange): Proposed {
    const r = this.r;
    const ls = this.leaderOrThrow('change membership');
    if (r.log.committed < r.log.configIndex()) {
      throw new CairnError(
        ErrorCode.INVALID_CONFIG_CHANGE,
        `membership change refused: the change at index ${r.log.configIndex()} is not committed yet (commit ${r.log.committed})`,
      );
    }
    if (!committedInTerm(r)) {
      throw new CairnError(ErrorCode.PROPOSAL_DROPPED, `membership change refused: leader of term ${r.term} has not committed an entry of its term yet`);
    }
    const next = applyConfigChange(r.log.config(), change);
    if (typeof next === 'string') throw new CairnError(ErrorCode.INVALID_CONFIG_CHANGE, `membership change refused: ${next}`);
    const ents = appendLeaderEntries(r, ls, [encodeConfigEntry({ change, config: next })]);
    const e = ents[0] as { index: LogIndex; term: Term };
    return { index: e.index, term: e.term };
  }

  /**
   * Ask for a linearizable read (thesis §6.4). The answer comes in a later Ready: a ReadState
   * (read local state once applied >= its index) or a ReadFailure.
   */
  readIndex(requestId: string): void {
    const r = this.r;
    const ls = r.leaderState();
    if (ls) leaderRead(r, ls, requestId, r.id);
    else if (r.leader !== NO_NODE) this.forwardQueue.push(requestId);
    else r.readFailures.push({ requestId, reason: 'no-leader' });
  }

  /** Thesis §3.10: hand leadership to `target` once it has our whole log. */
  transferLeadership(target: NodeId): void {
    const r = this.r;
    const ls = this.leaderOrThrow('transfer leadership');
    if (target === r.id) return;
    if (!isVoter(r.log.config(), target)) {
      throw new CairnError(ErrorCode.INVALID_ARGUMENT, `cannot transfer leadership to ${target}: it is not a voter`);
    }
    if (ls.transferee === target) return;
    ls.transferee = target;
    ls.transferElapsed = 0;
    const pr = ls.progress.get(target);
    if (pr && pr.match === r.log.lastIndex()) r.send({ type: 'timeout-now', from: r.id, to: target, term: r.term });
    else sendAppends(r, ls, target, 'always');
  }

  /**
   * Leader only: the voter other than this node with the longest log among those recently
   * active, where a hand-over would go (`transferLeadership`); `NO_NODE` when this node does
   * not lead or no other voter is active.
   */
  mostUpToDateVoter(): NodeId {
    const r = this.r;
    const ls = r.leaderState();
    if (!ls) return NO_NODE;
    return mostUpToDateVoter(r, ls, (v) => v !== r.id && ls.progress.get(v)?.recentActive === true).id;
  }

  /**
   * The application snapshotted its state at `index` (applied and durable). The core keeps it
   * for followers that need it and drops log entries up to it, except the last `retain`
   * (and at most `retainBytes` of entry data among them).
   * Returns the snapshot with its metadata (term and configuration at `index`).
   */
  compact(index: LogIndex, data: Uint8Array, retain = 0, retainBytes = Number.POSITIVE_INFINITY): Snapshot {
    return this.r.log.compact(index, data, retain, retainBytes);
  }

  /**
   * The snapshot at `index` is in the driver's snapshot store, which can read its bytes back
   * (`MsgSnap.fill`): the core forgets them, here and in every transfer sending it. Returns
   * whether they were released (not when the log holds another snapshot or still installs it).
   */
  releaseSnapshotData(index: LogIndex): boolean {
    const r = this.r;
    const released = r.log.releaseSnapshotData(index);
    if (released === undefined) return false;
    const ls = r.leaderState();
    if (ls) {
      for (const pr of ls.progress.values()) {
        if (pr.snapshot !== undefined && pr.snapshot.meta.index === index && pr.snapshot.meta.term === released.meta.term) pr.snapshot = released;
      }
    }
    return true;
  }

  /**
   * The driver could not read a chunk of the snapshot it is sending `peer` (its file was
   * replaced by a newer snapshot meanwhile, or could not be read): the transfer stops and the
   * follower is probed again, so the next attempt sends the newest snapshot from the start.
   */
  reportSnapshotUnavailable(peer: NodeId, index: LogIndex): void {
    const pr = this.r.leaderState()?.progress.get(peer);
    if (pr === undefined || pr.state !== 'snapshot' || pr.snapshot === undefined || pr.snapshot.meta.index !== index) return;
    pr.becomeProbe();
  }

  hasReady(): boolean {
    if (this.outstanding) return false;
    const r = this.r;
    const ls = r.leaderState();
    if (r.msgs.length > 0 || r.readStates.length > 0 || r.readFailures.length > 0 || this.forwardQueue.length > 0) return true;
    if (r.broadcastWanted || (ls !== undefined && ls.readRoundWanted)) return true;
    if (r.log.pendingSnapshot || r.log.inProgress < r.log.lastIndex() || r.log.hasNextCommittedEntries()) return true;
    if (r.role.kind !== this.prevSoft.role || r.leader !== this.prevSoft.leader) return true;
    return r.term !== this.prevHard.term || r.vote !== this.prevHard.vote || r.log.committed !== this.prevHard.commit;
  }

  ready(): Ready {
    assert(this.outstanding === undefined, 'ready() called again before advance()');
    const r = this.r;
    this.flush();
    const soft: SoftState = { role: r.role.kind, leader: r.leader };
    const softChanged = soft.role !== this.prevSoft.role || soft.leader !== this.prevSoft.leader;
    const hard: HardState = { term: r.term, vote: r.vote, commit: r.log.committed };
    const hardChanged = hard.term !== this.prevHard.term || hard.vote !== this.prevHard.vote || hard.commit !== this.prevHard.commit;
    const entries = r.log.unstableEntries();
    const snapshot = r.log.pendingSnapshot;
    const rd: Ready = {
      softState: softChanged ? soft : undefined,
      hardState: hardChanged ? hard : undefined,
      snapshot,
      entries,
      committedEntries: r.log.nextCommittedEntries(),
      messages: r.msgs,
      readStates: r.readStates,
      readFailures: r.readFailures,
      mustSync: entries.length > 0 || snapshot !== undefined || hard.term !== this.prevHard.term || hard.vote !== this.prevHard.vote,
    };
    r.msgs = [];
    r.readStates = [];
    r.readFailures = [];
    if (softChanged) this.prevSoft = soft;
    if (hardChanged) this.prevHard = hard;
    this.outstanding = rd;
    return rd;
  }

  /**
   * The driver did everything `rd` asked (persisted, sent, applied): `accept` and `persisted`
   * in one. The only way to finish a Ready that carries a snapshot.
   */
  advance(rd: Ready): void {
    assert(rd === this.outstanding, 'advance() must be given the Ready returned by the last ready()');
    if (rd.snapshot) this.r.log.snapshotInstalled(rd.snapshot.meta.index);
    this.accept(rd);
    this.persisted(rd);
  }

  /**
   * The pipelined half of `advance` (etcd raft's asynchronous storage writes): the driver sent
   * what vouches for nothing in the Ready's write, applied its committed entries, and started
   * (or queued) its write, which is not durable yet. The next Ready may be taken now; its
   * entries start after this one's. The driver calls `persisted(rd)` once the write is
   * durable, in the order the Readies were handed out. A Ready with a snapshot is not accepted
   * before it is durable: it is finished with `advance`.
   */
  accept(rd: Ready): void {
    assert(rd === this.outstanding, 'accept() must be given the Ready returned by the last ready()');
    assert(rd.snapshot === undefined || this.r.log.pendingSnapshot === undefined, 'a Ready with a snapshot is finished with advance(), once it is durable');
    this.outstanding = undefined;
    const r = this.r;
    const last = rd.entries[rd.entries.length - 1];
    if (last) r.log.inProgressTo(last.index, last.term);
    const applied = rd.committedEntries[rd.committedEntries.length - 1];
    if (applied && applied.index > r.log.applied) r.log.appliedTo(applied.index);
  }

  /**
   * The write of an accepted Ready is durable. Its entries count as stable (if not replaced
   * meanwhile), and a leader counts them toward commit: the leader's own entries count only
   * once they are on its disk (Raft §5.4, thesis §10.2.1).
   */
  persisted(rd: Ready): void {
    const r = this.r;
    const last = rd.entries[rd.entries.length - 1];
    if (last) r.log.stableTo(last.index, last.term);
    const ls = r.leaderState();
    if (ls && maybeCommit(r, ls)) maybeStepDownAfterRemoval(r);
  }

  /** Everything but the leader's per-follower progress (cheap: no copies; for hot paths). */
  basicStatus(): Status {
    const r = this.r;
    const ls = r.leaderState();
    return {
      id: r.id,
      role: r.role.kind,
      leader: r.leader,
      term: r.term,
      vote: r.vote,
      commit: r.log.committed,
      applied: r.log.applied,
      firstIndex: r.log.firstIndex(),
      lastIndex: r.log.lastIndex(),
      snapshotIndex: r.log.snapshot ? r.log.snapshot.meta.index : (0 as LogIndex),
      config: r.log.config(),
      configIndex: r.log.configIndex(),
      leadTransferee: ls ? ls.transferee : NO_NODE,
      progress: undefined,
    };
  }

  /** The full status, with a copy of the leader's progress per member. */
  status(): Status {
    const ls = this.r.leaderState();
    if (!ls) return this.basicStatus();
    const progress = new Map<NodeId, ProgressStatus>();
    for (const [id, pr] of ls.progress) progress.set(id, { match: pr.match, next: pr.next, state: pr.state, recentActive: pr.recentActive });
    return { ...this.basicStatus(), progress };
  }

  /** Deferred work batched per Ready: one append per follower for all new proposals, one heartbeat round for all new reads. */
  private flush(): void {
    const r = this.r;
    const ls = r.leaderState();
    if (ls) {
      if (r.broadcastWanted) {
        const commit = r.broadcastCommit;
        r.broadcastWanted = false;
        r.broadcastCommit = false;
        bcastAppend(r, ls, commit ? 'commit' : 'never');
      }
      if (ls.readRoundWanted) {
        ls.readRoundWanted = false;
        ls.readSeq++;
        bcastHeartbeat(r, ls);
        releaseConfirmed(r, ls);
      }
    } else {
      r.broadcastWanted = false;
      r.broadcastCommit = false;
    }
    if (this.forwardQueue.length > 0) {
      const ids = this.forwardQueue;
      this.forwardQueue = [];
      if (ls) {
        for (const id of ids) leaderRead(r, ls, id, r.id);
        if (ls.readRoundWanted) {
          ls.readRoundWanted = false;
          ls.readSeq++;
          bcastHeartbeat(r, ls);
          releaseConfirmed(r, ls);
        }
      } else if (r.leader === NO_NODE) {
        for (const id of ids) r.readFailures.push({ requestId: id, reason: 'no-leader' });
      } else {
        for (const id of ids) r.forwardedReads.add(id);
        r.send({ type: 'read-index', from: r.id, to: r.leader, term: r.term, requestIds: ids });
      }
    }
  }

  private leaderOrThrow(action: string): LeaderState {
    const ls = this.r.leaderState();
    if (!ls) {
      throw new CairnError(ErrorCode.NOT_LEADER, `cannot ${action}: node ${this.r.id} is not the leader`, { leader: this.r.leader });
    }
    if (ls.transferee !== NO_NODE) {
      throw new CairnError(ErrorCode.PROPOSAL_DROPPED, `cannot ${action}: leadership transfer to ${ls.transferee} in progress`, { leader: this.r.id });
    }
    return ls;
  }
}
