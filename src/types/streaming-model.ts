/**
 * The streaming.v1 domain (Fluvio's SC model) as data: type names, the shape of each type's
 * `data` (its spec), and how the controllers encode what they observe in `status`. Pure: no
 * I/O, no clock. Shared by the type registrations (streaming.ts), the controllers
 * (src/controller/streaming) and their tests. The CLI cannot import this module (it may import
 * only client, base and server), so src/cli/streaming.ts repeats the few status keys it reads.
 *
 * Status encoding (README.md beside this file): the API keeps one status entry per controller,
 * each a list of conditions `{type, state, reason, message}`. Every controller of the domain
 * writes a `Resolution` condition whose `reason` is the resolution (`Online`, `Provisioned`,
 * ...) and whose `message` says why in words. The partition controller adds `Leader` (message:
 * the leader's SPU id) and `LiveReplicas` (message: the ids, comma-separated, leader first).
 * A resource no controller has reported on yet is `Init`.
 */
import { LIMITS } from '../api/index.js';

export const STREAMING_GROUP = 'streaming';
export const STREAMING_VERSION = 'v1';
/**
 * Every streaming.v1 type is cluster-scoped (SPU ids and topic names are global, as in Fluvio).
 * The controllers declare it to the runtime (`managedScope`, `WatchedType.scope`) rather than
 * have it probed from the server at every start.
 */
export const STREAMING_SCOPE = 'cluster' as const;

export const SPU_TYPE = 'streaming.v1.Spu';
export const SPU_GROUP_TYPE = 'streaming.v1.SpuGroup';
export const TOPIC_TYPE = 'streaming.v1.Topic';
export const PARTITION_TYPE = 'streaming.v1.Partition';

/** Status keys: one per controller (a ControllerSpec's name is its key), plus what SPUs report. */
export const StatusKey = {
  spu: 'streaming.v1.spu-controller',
  spuGroup: 'streaming.v1.spu-group-controller',
  topic: 'streaming.v1.topic-controller',
  partition: 'streaming.v1.partition-controller',
  /** Written by the SPU itself, every few seconds: its heartbeat. */
  spuHeartbeat: 'streaming.v1.spu-heartbeat',
} as const;

/** The status key under which the replica on SPU `spuId` reports its log end offset for a partition. */
export function replicaStatusKey(spuId: number): string {
  return `streaming.v1.replica-${spuId}`;
}

export const ConditionType = {
  resolution: 'Resolution',
  leader: 'Leader',
  liveReplicas: 'LiveReplicas',
  heartbeat: 'Heartbeat',
  logEnd: 'LogEnd',
} as const;

// ---- Specs (the `data` of each type) ----------------------------------------------------------

export interface Endpoint {
  readonly host: string;
  readonly port: number;
}

export const SpuType = { managed: 'managed', custom: 'custom' } as const;
export type SpuType = (typeof SpuType)[keyof typeof SpuType];

export interface SpuSpec {
  /** Unique across SPUs (enforced by the SPU controller: the younger of two SPUs with one id is not used). */
  readonly id: number;
  /** `managed`: created and owned by an SpuGroup; `custom`: registered by hand. Default custom. */
  readonly type: SpuType;
  readonly rack?: string;
  readonly publicEndpoint: Endpoint;
  readonly privateEndpoint: Endpoint;
}

export interface SpuGroupSpec {
  readonly replicas: number;
  /** The first SPU id; the group's SPUs get minId .. minId + replicas - 1. Default 0. */
  readonly minId: number;
  /** Storage per SPU, e.g. `1Gi` (the default). */
  readonly storageSize: string;
  /** Rack given to every SPU of the group. */
  readonly rack?: string;
}

/**
 * Either `partitions` + `replicationFactor` (placed by the scheduler) or `replicaAssignment`
 * (one row of SPU ids per partition, leader first), never both.
 */
export interface TopicSpec {
  readonly partitions?: number;
  readonly replicationFactor?: number;
  readonly replicaAssignment?: ReadonlyArray<readonly number[]>;
}

export interface PartitionSpec {
  /** The topic's name (the topic also owns the partition). */
  readonly topic: string;
  readonly index: number;
  /** The assigned (preferred) leader: replicas[0] when the topic controller creates it. */
  readonly leader: number;
  /** SPU ids, leader first. */
  readonly replicas: readonly number[];
}

/** Ports of a managed SPU (Fluvio's defaults). */
export const MANAGED_PUBLIC_PORT = 9005;
export const MANAGED_PRIVATE_PORT = 9006;

/** The name of the managed SPU with `id` in group `group`. */
export function managedSpuName(group: string, id: number): string {
  return `${group}-${id}`;
}

/** The name of partition `index` of `topic`. */
export function partitionName(topic: string, index: number): string {
  return `${topic}-${index}`;
}

// ---- Resolutions --------------------------------------------------------------------------------

export const SpuResolution = { Init: 'Init', Online: 'Online', Offline: 'Offline' } as const;
export type SpuResolution = (typeof SpuResolution)[keyof typeof SpuResolution];

export const SpuGroupResolution = { Init: 'Init', Invalid: 'Invalid', Reserved: 'Reserved' } as const;
export type SpuGroupResolution = (typeof SpuGroupResolution)[keyof typeof SpuGroupResolution];

export const TopicResolution = {
  Init: 'Init',
  Pending: 'Pending',
  InsufficientResources: 'InsufficientResources',
  InvalidConfig: 'InvalidConfig',
  Provisioned: 'Provisioned',
} as const;
export type TopicResolution = (typeof TopicResolution)[keyof typeof TopicResolution];

/** `Init` only until the partition controller first reports. */
export const PartitionResolution = { Init: 'Init', Online: 'Online', Offline: 'Offline', LeaderOffline: 'LeaderOffline' } as const;
export type PartitionResolution = (typeof PartitionResolution)[keyof typeof PartitionResolution];

// ---- Status encoding ----------------------------------------------------------------------------

export type ConditionStateView = 'TRUE' | 'FALSE' | 'UNKNOWN';

export interface ConditionView {
  readonly type: string;
  readonly state: ConditionStateView;
  readonly reason: string;
  readonly message: string;
}

/** One status entry as the API shows it (the client's `Status` fits). */
export interface StatusView {
  readonly observed_generation: string;
  readonly conditions: readonly ConditionView[];
  readonly updated_at: string;
}

/** What the helpers below read of a resource (the client's `Resource` fits). */
export interface WithStatus {
  readonly status: Readonly<Record<string, StatusView>>;
}

/** The API caps a condition's message. */
export const CONDITION_TEXT_MAX = LIMITS.conditionTextLength;

/** Cuts `s` to the API's condition text limit, saying so. */
export function clipText(s: string): string {
  if (s.length <= CONDITION_TEXT_MAX) return s;
  const more = ' … (cut)';
  return s.slice(0, CONDITION_TEXT_MAX - more.length) + more;
}

const GOOD = new Set<string>(['Online', 'Reserved', 'Provisioned']);
const UNDECIDED = new Set<string>(['Init', 'Pending']);

/** The Resolution condition: TRUE for the good outcome, UNKNOWN while undecided, FALSE otherwise. */
export function resolutionCondition(resolution: string, message: string): ConditionView {
  return {
    type: ConditionType.resolution,
    state: GOOD.has(resolution) ? 'TRUE' : UNDECIDED.has(resolution) ? 'UNKNOWN' : 'FALSE',
    reason: resolution,
    message: clipText(message),
  };
}

export function findCondition(r: WithStatus, key: string, type: string): ConditionView | undefined {
  return r.status[key]?.conditions.find((c) => c.type === type);
}

/** The resolution a controller reported under `key`, or `Init` when it has not reported yet. */
export function resolutionOf(r: WithStatus, key: string): string {
  return findCondition(r, key, ConditionType.resolution)?.reason ?? 'Init';
}

/** The reason text of the resolution under `key` ('' when none). */
export function resolutionMessageOf(r: WithStatus, key: string): string {
  return findCondition(r, key, ConditionType.resolution)?.message ?? '';
}

const DECIMAL = /^(0|[1-9][0-9]{0,15})$/;

function parseId(s: string): number | undefined {
  return DECIMAL.test(s) ? Number(s) : undefined;
}

/** Encodes a list of SPU ids: `2,0,1`. */
export function formatIds(ids: readonly number[]): string {
  return ids.join(',');
}

/** Decodes `2,0,1` (undefined when malformed; '' is the empty list). */
export function parseIds(s: string): number[] | undefined {
  if (s === '') return [];
  const out: number[] = [];
  for (const part of s.split(',')) {
    const id = parseId(part.trim());
    if (id === undefined) return undefined;
    out.push(id);
  }
  return out;
}

/** The Partition's observed leader and live replicas, as the partition controller reported them. */
export interface PartitionObserved {
  readonly resolution: string;
  readonly leader: number | undefined;
  readonly liveReplicas: readonly number[] | undefined;
}

export function partitionObserved(r: WithStatus): PartitionObserved {
  const leader = findCondition(r, StatusKey.partition, ConditionType.leader);
  const live = findCondition(r, StatusKey.partition, ConditionType.liveReplicas);
  return {
    resolution: resolutionOf(r, StatusKey.partition),
    leader: leader === undefined ? undefined : parseId(leader.message),
    liveReplicas: live === undefined ? undefined : parseIds(live.message),
  };
}

/** What an SPU writes under `streaming.v1.spu-heartbeat`. */
export function heartbeatConditions(): ConditionView[] {
  return [{ type: ConditionType.heartbeat, state: 'TRUE', reason: 'Alive', message: '' }];
}

/**
 * The SPU's latest heartbeat as an opaque token (the server-set `updated_at` of its heartbeat
 * status entry: it changes on every status write), or undefined if it never sent one.
 */
export function heartbeatToken(r: WithStatus): string | undefined {
  return r.status[StatusKey.spuHeartbeat]?.updated_at;
}

/** What a replica writes under `replicaStatusKey(id)`: its log end offset. */
export function logEndConditions(offset: number): ConditionView[] {
  return [{ type: ConditionType.logEnd, state: 'TRUE', reason: 'Reported', message: String(offset) }];
}

/** Log end offsets the replicas of a partition reported, by SPU id (replicas that did not report are absent). */
export function reportedOffsets(r: WithStatus, replicas: readonly number[]): Map<number, number> {
  const out = new Map<number, number>();
  for (const id of replicas) {
    const c = findCondition(r, replicaStatusKey(id), ConditionType.logEnd);
    const offset = c === undefined ? undefined : parseId(c.message);
    if (offset !== undefined) out.set(id, offset);
  }
  return out;
}
