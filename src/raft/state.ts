import { NO_NODE, type LogIndex, type NodeId, type Term } from '../base/index.js';
import { isVoter, voters } from './config.js';
import { RaftLog } from './log.js';
import type { ResolvedRaftOptions } from './options.js';
import type { Progress } from './progress.js';
import type { Message, ReadFailure, ReadState, Snapshot } from './types.js';

/** A read request the leader is confirming (thesis §6.4). `origin` is who asked. */
export interface PendingRead {
  readonly requestId: string;
  readonly origin: NodeId;
  /** Commit index when the request arrived: the read index once confirmed. */
  index: LogIndex;
  /** Confirmation round; confirmed once a quorum acknowledged a heartbeat of round >= seq. */
  seq: number;
}

export interface LeaderState {
  readonly kind: 'leader';
  readonly progress: Map<NodeId, Progress>;
  /** Leadership transfer target (thesis §3.10), or NO_NODE. */
  transferee: NodeId;
  transferElapsed: number;
  /** Reads that wait for this leader's first commit in its term. */
  readonly readsAwaitingCommit: PendingRead[];
  /** Reads in a heartbeat confirmation round. */
  readonly readsInRound: PendingRead[];
  /** Latest round started; heartbeats carry it. */
  readSeq: number;
  /** A read arrived and needs a fresh round. */
  readRoundWanted: boolean;
  /** Highest round each voter acknowledged. */
  readonly readAcks: Map<NodeId, number>;
  /** Entry bytes appended this term and not yet committed (proposal back-pressure). */
  uncommittedBytes: number;
}

export interface CandidateState {
  readonly kind: 'pre-candidate' | 'candidate';
  readonly votes: Map<NodeId, boolean>;
  /**
   * Campaigning for a leader whose connection broke (`handleConnectionLost`): the requests are
   * sent again every tick to the voters that have not answered, since a voter may not have
   * heard of the break yet (it ignores the request under the lease) and a lost request would
   * otherwise cost an election timeout.
   */
  readonly leaderLost: boolean;
}

export interface FollowerState {
  readonly kind: 'follower';
}

export type RoleState = FollowerState | CandidateState | LeaderState;

/** An incoming chunked snapshot being reassembled. */
export interface IncomingSnapshot {
  readonly snapshot: Snapshot['meta'];
  readonly buffer: Uint8Array;
  received: number;
}

/**
 * All state of one Raft node. Only the functions in become.ts change `role`, so leader-only
 * data (progress trackers, read rounds) exists only while leading (STYLE.md).
 */
export class RaftState {
  readonly id: NodeId;
  readonly opts: ResolvedRaftOptions;
  readonly log: RaftLog;
  term: Term;
  vote: NodeId;
  leader: NodeId = NO_NODE;
  role: RoleState = { kind: 'follower' };
  electionElapsed = 0;
  heartbeatElapsed = 0;
  randomizedElectionTimeout = 0;
  /**
   * Armed when the connection with the leader broke (`handleConnectionLost`): campaign once
   * `electionElapsed` reaches this, before the election timeout. 0 = not armed. Anything that
   * restarts the election clock (leader contact, a granted vote, a new role) disarms it.
   */
  leaderLostDeadline = 0;
  /** Ticks from the report to our turn (1 + turn x leaderLostTicks), while armed. */
  leaderLostTurnTicks = 0;
  /** Outgoing messages, handed out by ready(). */
  msgs: Message[] = [];
  readStates: ReadState[] = [];
  readFailures: ReadFailure[] = [];
  /** Read requests this follower forwarded to the leader and still waits on. */
  readonly forwardedReads = new Set<string>();
  incomingSnapshot: IncomingSnapshot | undefined = undefined;
  /** Leader: new entries or a commit change need an append broadcast at the next flush. */
  broadcastWanted = false;
  broadcastCommit = false;

  constructor(opts: ResolvedRaftOptions, log: RaftLog, term: Term, vote: NodeId) {
    this.id = opts.id;
    this.opts = opts;
    this.log = log;
    this.term = term;
    this.vote = vote;
  }

  send(m: Message): void {
    this.msgs.push(m);
  }

  voters(): NodeId[] {
    return voters(this.log.config());
  }

  /** Members other than this node, voters and learners (replication targets). */
  peers(): NodeId[] {
    return this.log
      .config()
      .members.map((m) => m.id)
      .filter((id) => id !== this.id);
  }

  /** May this node campaign? Only voters, and not while installing a snapshot. */
  promotable(): boolean {
    return isVoter(this.log.config(), this.id) && this.log.pendingSnapshot === undefined;
  }

  pastElectionTimeout(): boolean {
    return this.electionElapsed >= this.randomizedElectionTimeout;
  }

  /** The leader lost its connection to us a while ago: time for the early campaign. */
  pastLeaderLostDeadline(): boolean {
    return this.leaderLostDeadline > 0 && this.electionElapsed >= this.leaderLostDeadline;
  }

  /** The election clock starts over (leader contact, a granted vote, a new role); an early campaign is called off. */
  resetElectionElapsed(): void {
    this.electionElapsed = 0;
    this.leaderLostDeadline = 0;
  }

  resetRandomizedElectionTimeout(): void {
    const base = this.opts.electionTimeoutTicks;
    this.randomizedElectionTimeout = base + this.opts.random.int(base);
  }

  leaderState(): LeaderState | undefined {
    return this.role.kind === 'leader' ? this.role : undefined;
  }
}
