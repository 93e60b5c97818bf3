/**
 * What the data plane reports, for SPU processes (and tests and tools acting as one): an SPU's
 * heartbeat and a replica's log end offset. Both are status writes under the reporter's own key,
 * so they never collide with the controllers' reports.
 */
import type { CairnClient, CallOptions, Condition, Resource } from '../../client/index.js';
import { heartbeatConditions, logEndConditions, PARTITION_TYPE, replicaStatusKey, SPU_TYPE, StatusKey } from '../../types/index.js';
import { refOf } from './shared.js';

async function current(client: CairnClient, type: string, r: Resource<unknown> | string, opts: CallOptions): Promise<Resource<unknown>> {
  return typeof r === 'string' ? (await client.read({ type, name: r }, opts)).resource : r;
}

/** One heartbeat of the SPU (by name, or as read): a status write under `streaming.v1.spu-heartbeat`. */
export async function sendSpuHeartbeat(client: CairnClient, spu: Resource<unknown> | string, opts: CallOptions = {}): Promise<Resource<unknown>> {
  const r = await current(client, SPU_TYPE, spu, opts);
  return client.writeStatus(refOf(r), StatusKey.spuHeartbeat, { observed_generation: r.generation, conditions: heartbeatConditions() as Condition[] }, opts);
}

/** The replica on SPU `spuId` reports its log end offset for a partition (by name, or as read). */
export async function reportReplicaOffset(client: CairnClient, partition: Resource<unknown> | string, spuId: number, offset: number, opts: CallOptions = {}): Promise<Resource<unknown>> {
  const r = await current(client, PARTITION_TYPE, partition, opts);
  return client.writeStatus(refOf(r), replicaStatusKey(spuId), { observed_generation: r.generation, conditions: logEndConditions(offset) as Condition[] }, opts);
}
