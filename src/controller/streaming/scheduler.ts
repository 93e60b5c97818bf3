/**
 * The replica scheduler of the streaming domain (Fluvio's SC model): places a topic's
 * partitions on SPUs. Pure and deterministic, so every leader computes the same map.
 *
 * For each new partition, in order: the leader is the online SPU with the fewest leader
 * replicas, then each follower is the online SPU (not yet in the row) with the fewest follower
 * replicas; ties go to the lowest id. Counts start from every replica map that already exists
 * (other topics' partitions, and this topic's rows that are kept), and grow as rows are placed,
 * so load spreads across topics and across the partitions of one topic.
 */

/** A partition's replicas, leader first. */
export type ReplicaRow = readonly number[];

export type PlacementResult =
  | { readonly ok: true; readonly rows: readonly ReplicaRow[] }
  | { readonly ok: false; readonly resolution: 'InsufficientResources' | 'InvalidConfig'; readonly reason: string };

export interface PlacementInput {
  /** Ids of the SPUs that can take replicas (online). */
  readonly spus: readonly number[];
  /** Replica rows that already exist elsewhere (other topics' partitions), for the load counts. */
  readonly existing: readonly ReplicaRow[];
  /** This topic's rows that exist already: kept as they are (partitions being added). */
  readonly keep?: readonly ReplicaRow[];
  readonly partitions: number;
  readonly replicationFactor: number;
}

function tally(rows: readonly ReplicaRow[], leaders: Map<number, number>, followers: Map<number, number>): void {
  for (const row of rows) {
    row.forEach((id, i) => {
      const m = i === 0 ? leaders : followers;
      m.set(id, (m.get(id) ?? 0) + 1);
    });
  }
}

/** The id with the smallest count in `m` among `candidates` (ascending ids), ties to the lowest id. */
function fewest(candidates: readonly number[], m: ReadonlyMap<number, number>, exclude: ReadonlySet<number>): number | undefined {
  let best: number | undefined;
  let bestCount = Number.POSITIVE_INFINITY;
  for (const id of candidates) {
    if (exclude.has(id)) continue;
    const c = m.get(id) ?? 0;
    if (c < bestCount) {
      best = id;
      bestCount = c;
    }
  }
  return best;
}

export function placeReplicas(input: PlacementInput): PlacementResult {
  const { partitions, replicationFactor: rf } = input;
  if (!Number.isSafeInteger(partitions) || partitions < 1) return { ok: false, resolution: 'InvalidConfig', reason: `partitions must be a positive integer, got ${partitions}` };
  if (!Number.isSafeInteger(rf) || rf < 1) return { ok: false, resolution: 'InvalidConfig', reason: `replication factor must be a positive integer, got ${rf}` };
  const keep = input.keep ?? [];
  if (keep.length > partitions) return { ok: false, resolution: 'InvalidConfig', reason: `partitions cannot shrink from ${keep.length} to ${partitions}` };
  const spus = [...new Set(input.spus)].sort((a, b) => a - b);
  if (keep.length === partitions) return { ok: true, rows: keep };
  if (rf > spus.length) {
    return { ok: false, resolution: 'InsufficientResources', reason: `replication factor ${rf} needs ${rf} online SPUs; ${spus.length} available` };
  }
  const leaders = new Map<number, number>();
  const followers = new Map<number, number>();
  tally(input.existing, leaders, followers);
  tally(keep, leaders, followers);
  const rows: ReplicaRow[] = [...keep];
  for (let p = keep.length; p < partitions; p++) {
    const used = new Set<number>();
    const leader = fewest(spus, leaders, used) as number;
    used.add(leader);
    leaders.set(leader, (leaders.get(leader) ?? 0) + 1);
    const row = [leader];
    for (let r = 1; r < rf; r++) {
      const f = fewest(spus, followers, used) as number;
      used.add(f);
      followers.set(f, (followers.get(f) ?? 0) + 1);
      row.push(f);
    }
    rows.push(row);
  }
  return { ok: true, rows };
}

/** Checks a manual replica assignment against the SPUs that exist. */
export function checkManualAssignment(rows: readonly ReplicaRow[], spuIds: readonly number[]): PlacementResult {
  if (rows.length === 0) return { ok: false, resolution: 'InvalidConfig', reason: 'a manual assignment needs at least one partition' };
  const known = new Set(spuIds);
  for (const [p, row] of rows.entries()) {
    if (row.length === 0) return { ok: false, resolution: 'InvalidConfig', reason: `partition ${p} has no replicas` };
    if (new Set(row).size !== row.length) return { ok: false, resolution: 'InvalidConfig', reason: `partition ${p} names an SPU twice: [${row.join(',')}]` };
    const missing = row.filter((id) => !known.has(id));
    if (missing.length > 0) return { ok: false, resolution: 'InvalidConfig', reason: `partition ${p} names SPUs that do not exist: ${missing.join(', ')}` };
  }
  return { ok: true, rows };
}
