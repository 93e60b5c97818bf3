/**
 * Partition leader election, decided purely (the partition controller feeds it and reports the
 * result in the partition's status).
 *
 * Lag: each replica reports its log end offset (LEO) under `streaming.v1.replica-<spu id>` in
 * the partition's status; a replica that has not reported counts as 0. A follower's lag is the
 * highest LEO any replica reported (the offline leader's last report included) minus its own.
 *
 * - The current leader (the one last reported, else the spec's assigned leader) keeps the
 *   partition while its SPU is online: no fail-back to the assigned leader, no flapping.
 * - When its SPU is offline, the online follower with the smallest lag takes over, if that lag
 *   is at most `maxLag`; ties go to the earlier replica in the replica list.
 * - With no such follower the partition is `LeaderOffline` (some replica is online, none may
 *   lead) or `Offline` (no replica is online); the leader stays as it was, so a returning
 *   leader SPU regains the partition, and a returning follower within the bound takes it.
 */
import { PartitionResolution } from '../../types/index.js';

export interface ElectionInput {
  /** SPU ids, assigned leader first. */
  readonly replicas: readonly number[];
  /** The spec's assigned leader. */
  readonly assignedLeader: number;
  /** The leader last reported in status, if any. */
  readonly currentLeader: number | undefined;
  /** Ids of the SPUs that are online. */
  readonly online: ReadonlySet<number>;
  /** Reported log end offsets by SPU id. */
  readonly offsets: ReadonlyMap<number, number>;
  /** The largest lag (offsets) at which a follower may take over. */
  readonly maxLag: number;
}

export interface ElectionResult {
  readonly resolution: typeof PartitionResolution.Online | typeof PartitionResolution.Offline | typeof PartitionResolution.LeaderOffline;
  readonly leader: number;
  /** Replicas on online SPUs, leader first, then in replica order. */
  readonly live: readonly number[];
  /** Depends only on the state, so reconciling again rewrites nothing. */
  readonly message: string;
  /** Set when this decision moved leadership: from whom, and the new leader's lag. */
  readonly elected?: { readonly from: number; readonly lag: number };
}

/** Each replica's lag: the highest reported offset minus its own (0 when it did not report). */
export function replicaLags(replicas: readonly number[], offsets: ReadonlyMap<number, number>): Map<number, number> {
  let top = 0;
  for (const id of replicas) top = Math.max(top, offsets.get(id) ?? 0);
  return new Map(replicas.map((id) => [id, top - (offsets.get(id) ?? 0)]));
}

function liveOf(replicas: readonly number[], online: ReadonlySet<number>, leader: number): number[] {
  const live = replicas.filter((id) => online.has(id) && id !== leader);
  return online.has(leader) ? [leader, ...live] : live;
}

function onlineMessage(leader: number, assigned: number): string {
  return leader === assigned ? `leader on SPU ${leader}` : `leader on SPU ${leader} (elected; the assigned leader is SPU ${assigned})`;
}

export function electLeader(input: ElectionInput): ElectionResult {
  const { replicas, online, maxLag, assignedLeader } = input;
  const current = input.currentLeader !== undefined && replicas.includes(input.currentLeader) ? input.currentLeader : assignedLeader;
  if (online.has(current)) {
    return { resolution: PartitionResolution.Online, leader: current, live: liveOf(replicas, online, current), message: onlineMessage(current, assignedLeader) };
  }
  const lags = replicaLags(replicas, input.offsets);
  let best: number | undefined;
  for (const id of replicas) {
    if (id === current || !online.has(id)) continue;
    const lag = lags.get(id) ?? 0;
    if (lag > maxLag) continue;
    if (best === undefined || lag < (lags.get(best) ?? 0)) best = id;
  }
  if (best !== undefined) {
    return {
      resolution: PartitionResolution.Online,
      leader: best,
      live: liveOf(replicas, online, best),
      message: onlineMessage(best, assignedLeader),
      elected: { from: current, lag: lags.get(best) ?? 0 },
    };
  }
  const live = liveOf(replicas, online, current);
  if (live.length === 0) {
    return { resolution: PartitionResolution.Offline, leader: current, live, message: `no replica is online (replicas on SPUs ${replicas.join(', ')})` };
  }
  const behind = live.map((id) => `SPU ${id} lags ${lags.get(id) ?? 0}`).join(', ');
  return {
    resolution: PartitionResolution.LeaderOffline,
    leader: current,
    live,
    message: `the leader's SPU ${current} is offline and no online follower is within ${maxLag} offsets of the log end (${behind})`,
  };
}
