import { CairnError, ErrorCode, type NodeId, type Random } from '../base/index.js';

/**
 * Deliberately planted bugs, for proving that the simulator and the transcript tests catch
 * them (a checker that has never failed proves nothing). Never set outside tests.
 */
export interface PlantedBugs {
  /** Grant a vote to a second candidate in the same term (breaks election safety, §5.2). */
  readonly doubleVote?: boolean;
  /** Commit by counting replicas of an entry from an older term (breaks §5.4.2, Figure 8). */
  readonly commitOldTermByCount?: boolean;
  /** Answer ReadIndex with the commit index without a heartbeat round (breaks §6.4). */
  readonly readIndexWithoutHeartbeat?: boolean;
}

export interface RaftOptions {
  readonly id: NodeId;
  /** Ticks without hearing from a leader before campaigning; randomized in [n, 2n). Default 10. */
  readonly electionTimeoutTicks?: number;
  /** Ticks between a leader's heartbeats. Must be < electionTimeoutTicks. Default 1. */
  readonly heartbeatTimeoutTicks?: number;
  /**
   * When the driver reports that its connection with the leader broke
   * (`RawNode.reportConnectionLost`), the followers campaign in turn instead of waiting out the
   * election timeout: in the order of their ids, the first at once, each next one this
   * many ticks later. Default 2; 0 = ignore such reports.
   */
  readonly leaderLostTicks?: number;
  /** Pre-vote (thesis §9.6). Default true. */
  readonly preVote?: boolean;
  /** Check-quorum and the leader lease on votes (thesis §6.2, §4.2.3). Default true. */
  readonly checkQuorum?: boolean;
  /** Upper bound on the bytes of entries in one append message. Default 1 MiB. */
  readonly maxAppendBytes?: number;
  /** Upper bound on unacknowledged append messages per follower (pipelining). Default 256. */
  readonly maxInflightMsgs?: number;
  /** Upper bound on unacknowledged entry bytes per follower. Default 32 MiB; 0 = unlimited. */
  readonly maxInflightBytes?: number;
  /** Snapshot chunk size in bytes. Default 1 MiB. */
  readonly snapshotChunkBytes?: number;
  /** Upper bound on the bytes of uncommitted entries the leader accepts. Default 64 MiB; 0 = unlimited. */
  readonly maxUncommittedBytes?: number;
  /** Seeded randomness for election timeouts. */
  readonly random: Random;
  /** Test-only planted bugs. */
  readonly plantedBugs?: PlantedBugs;
}

export interface ResolvedRaftOptions {
  readonly id: NodeId;
  readonly electionTimeoutTicks: number;
  readonly heartbeatTimeoutTicks: number;
  readonly leaderLostTicks: number;
  readonly preVote: boolean;
  readonly checkQuorum: boolean;
  readonly maxAppendBytes: number;
  readonly maxInflightMsgs: number;
  readonly maxInflightBytes: number;
  readonly snapshotChunkBytes: number;
  readonly maxUncommittedBytes: number;
  readonly random: Random;
  readonly plantedBugs: PlantedBugs;
}

function positiveInt(name: string, v: number): number {
  if (!Number.isSafeInteger(v) || v <= 0) {
    throw new CairnError(ErrorCode.INVALID_ARGUMENT, `raft option ${name} must be a positive integer, got ${String(v)}`);
  }
  return v;
}

function nonNegativeInt(name: string, v: number): number {
  if (!Number.isSafeInteger(v) || v < 0) {
    throw new CairnError(ErrorCode.INVALID_ARGUMENT, `raft option ${name} must be a non-negative integer, got ${String(v)}`);
  }
  return v;
}

/** Validates options up front with an error that names the option (etcd `Config.validate`). */
export function resolveOptions(o: RaftOptions): ResolvedRaftOptions {
  if (o.id === '') throw new CairnError(ErrorCode.INVALID_ARGUMENT, 'raft option id must not be empty');
  const electionTimeoutTicks = positiveInt('electionTimeoutTicks', o.electionTimeoutTicks ?? 10);
  const heartbeatTimeoutTicks = positiveInt('heartbeatTimeoutTicks', o.heartbeatTimeoutTicks ?? 1);
  if (heartbeatTimeoutTicks >= electionTimeoutTicks) {
    throw new CairnError(
      ErrorCode.INVALID_ARGUMENT,
      `raft option heartbeatTimeoutTicks (${heartbeatTimeoutTicks}) must be less than electionTimeoutTicks (${electionTimeoutTicks})`,
    );
  }
  return {
    id: o.id,
    electionTimeoutTicks,
    heartbeatTimeoutTicks,
    leaderLostTicks: nonNegativeInt('leaderLostTicks', o.leaderLostTicks ?? 2),
    preVote: o.preVote ?? true,
    checkQuorum: o.checkQuorum ?? true,
    maxAppendBytes: positiveInt('maxAppendBytes', o.maxAppendBytes ?? 1024 * 1024),
    maxInflightMsgs: positiveInt('maxInflightMsgs', o.maxInflightMsgs ?? 256),
    maxInflightBytes: nonNegativeInt('maxInflightBytes', o.maxInflightBytes ?? 32 * 1024 * 1024),
    snapshotChunkBytes: positiveInt('snapshotChunkBytes', o.snapshotChunkBytes ?? 1024 * 1024),
    maxUncommittedBytes: nonNegativeInt('maxUncommittedBytes', o.maxUncommittedBytes ?? 64 * 1024 * 1024),
    random: o.random,
    plantedBugs: o.plantedBugs ?? {},
  };
}
