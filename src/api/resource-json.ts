import type { Resource, ResourceId, StatusEntry } from '../store/index.js';
import { formatTypeRef } from './registry.js';

/** The JSON shape of API.md ("Resources"): snake_case, version as a decimal string. */
export interface ResourceIdJson {
  type: string;
  tenancy: { partition: string; namespace: string };
  name: string;
  uid: string;
}

export interface StatusJson {
  observed_generation: string;
  conditions: Array<{ type: string; state: 'TRUE' | 'FALSE' | 'UNKNOWN'; reason: string; message: string }>;
  updated_at: string;
}

export interface ResourceJson {
  id: ResourceIdJson;
  owner: ResourceIdJson | null;
  version: string;
  generation: string;
  metadata: Record<string, string>;
  finalizers: string[];
  deletion_timestamp: string | null;
  data: unknown;
  status: Record<string, StatusJson>;
  /** The lease the resource is attached to (docs/api.md "Leases"); absent when none. */
  lease?: string;
}

export function idToJson(id: ResourceId): ResourceIdJson {
  return { type: formatTypeRef(id.type), tenancy: { partition: id.tenancy.partition, namespace: id.tenancy.namespace }, name: id.name, uid: id.uid };
}

function statusToJson(s: StatusEntry): StatusJson {
  return {
    observed_generation: s.observedGeneration,
    conditions: s.conditions.map((c) => ({ type: c.type, state: c.state, reason: c.reason, message: c.message })),
    updated_at: s.updatedAt,
  };
}

export function resourceToJson(r: Resource): ResourceJson {
  const status: Record<string, StatusJson> = {};
  for (const [k, v] of Object.entries(r.status)) status[k] = statusToJson(v);
  const out: ResourceJson = {
    id: idToJson(r.id),
    owner: r.owner ? idToJson(r.owner) : null,
    version: String(r.version),
    generation: r.generation,
    metadata: { ...r.metadata },
    finalizers: [...r.finalizers],
    deletion_timestamp: r.deletionTimestamp,
    data: r.data,
    status,
  };
  // Only when attached: every other resource's JSON is as it was.
  if (r.lease !== undefined) out.lease = r.lease;
  return out;
}
