import * as grpc from '@grpc/grpc-js';
import { cairn } from '../gen/resource.js';
import { ClientErrorCode, CairnClientError } from './errors.js';
import type { Condition, ConditionState, Resource, ResourceId, ResourceRef, Status } from './types.js';

/**
 * The client side of cairn.resource.v1.ResourceService (proto/cairn/resource/v1/resource.proto):
 * method definitions over the generated protobufjs module, and conversions between the
 * messages and the JSON-shaped types of types.ts.
 */
import pb = cairn.resource.v1;
const SERVICE = 'cairn.resource.v1.ResourceService';

/** Trailing metadata of a failed call (see the proto's header comment). */
export const ERROR_CODE_KEY = 'cairn-error-code';
export const ERROR_DETAILS_KEY = 'cairn-error-details-json';

// The messages are the generated ones (src/gen, from the proto): requests are built as their
// `$Properties`, answers are the decoded message objects, whose unset fields read as the proto3
// defaults ('' / 0 / false / [] / {}; null for an unset message field). Nested messages are
// typed as `$Properties` (every field optional) although a decoded one has them all: the
// conversions below read them with the same defaults.
export type WatchListRequestMsg = pb.WatchListRequest.$Properties;
export type WatchMsg = pb.Watch.$Properties;
/** A decoded WatchEvent; `event` names the member of the oneof that is set (undefined: one this client does not know). */
export type WatchEventMsg = pb.WatchEvent;

export interface Method<Req, Res> {
  readonly name: string;
  readonly path: string;
  /** Whether the call changes state (and so carries a request id and may have an unknown outcome). */
  readonly mutates: boolean;
  serialize(m: Req): Buffer;
  deserialize(b: Buffer): Res;
}

/** The slices of a generated message class a method needs. */
interface Encoder<M> {
  encode(m: M): { finish(): Uint8Array };
}
interface Decoder<M> {
  decode(b: Uint8Array): M;
}

function method<Req, Res>(name: string, mutates: boolean, req: Encoder<Req>, res: Decoder<Res>): Method<Req, Res> {
  return {
    name,
    path: `/${SERVICE}/${name}`,
    mutates,
    serialize: (m) => Buffer.from(req.encode(m).finish()),
    // Unknown fields in answers are ignored: a newer server may add some.
    deserialize: (b) => res.decode(b),
  };
}

export const methods = {
  read: method('Read', false, pb.ReadRequest, pb.ReadResponse),
  write: method('Write', true, pb.WriteRequest, pb.WriteResponse),
  writeStatus: method('WriteStatus', true, pb.WriteStatusRequest, pb.WriteStatusResponse),
  delete: method('Delete', true, pb.DeleteRequest, pb.DeleteResponse),
  list: method('List', false, pb.ListRequest, pb.ListResponse),
  listByOwner: method('ListByOwner', false, pb.ListByOwnerRequest, pb.ListByOwnerResponse),
  txn: method('Txn', true, pb.TxnRequest, pb.TxnResponse),
  leaseGrant: method('LeaseGrant', true, pb.LeaseGrantRequest, pb.LeaseGrantResponse),
  leaseRevoke: method('LeaseRevoke', true, pb.LeaseRevokeRequest, pb.LeaseRevokeResponse),
  leaseTimeToLive: method('LeaseTimeToLive', false, pb.LeaseTimeToLiveRequest, pb.LeaseTimeToLiveResponse),
  leaseList: method('LeaseList', false, pb.LeaseListRequest, pb.LeaseListResponse),
} as const;

/** The bidirectional LeaseKeepAlive call (see lease.ts). */
export const leaseKeepAliveMethod = {
  name: 'LeaseKeepAlive',
  path: `/${SERVICE}/LeaseKeepAlive`,
  serialize: (m: pb.LeaseKeepAliveRequest.$Properties): Buffer => Buffer.from(pb.LeaseKeepAliveRequest.encode(m).finish()),
  deserialize: (b: Buffer): pb.LeaseKeepAliveResponse => pb.LeaseKeepAliveResponse.decode(b),
} as const;

/**
 * The server-streaming WatchList call (see watch.ts): one event per message, decoded as a batch
 * of one so both watch calls hand the watch the same shape.
 */
export const watchListMethod = {
  name: 'WatchList',
  path: `/${SERVICE}/WatchList`,
  serialize: (m: WatchListRequestMsg): Buffer => Buffer.from(pb.WatchListRequest.encode(m).finish()),
  // `event` (a getter of the decoded message) names the event kind; unknown fields (a newer server's) are ignored.
  deserialize: (b: Buffer): readonly WatchEventMsg[] => [pb.WatchEvent.decode(b)],
} as const;

/** WatchListBatched: WatchList's events, one or more per message (the watch's first choice). */
export const watchListBatchedMethod = {
  name: 'WatchListBatched',
  path: `/${SERVICE}/WatchListBatched`,
  serialize: watchListMethod.serialize,
  deserialize: (b: Buffer): readonly WatchEventMsg[] => pb.WatchEventBatch.decode(b).events as WatchEventMsg[],
} as const;

export const CONSISTENCY = {
  linearizable: pb.Consistency.CONSISTENCY_LINEARIZABLE,
  stale: pb.Consistency.CONSISTENCY_STALE,
} as const;

// ---- Conversions -----------------------------------------------------------------------------

export function refToMsg(ref: ResourceRef): pb.ResourceId.$Properties {
  return { type: ref.type, tenancy: { partition: ref.tenancy?.partition ?? '', namespace: ref.tenancy?.namespace ?? '' }, name: ref.name, uid: ref.uid ?? '' };
}

export function statusToMsg(s: Status): pb.Status.$Properties {
  return { observedGeneration: s.observed_generation, conditions: s.conditions.map(conditionToMsg), updatedAt: s.updated_at };
}

export function conditionToMsg(c: Condition): pb.Condition.$Properties {
  return { type: c.type, state: c.state, reason: c.reason, message: c.message };
}

function malformedAnswer(what: string): CairnClientError {
  return new CairnClientError(ClientErrorCode.INTERNAL, `the server's answer is malformed: ${what}`);
}

export function idFromMsg(m: pb.ResourceId.$Properties): ResourceId {
  return { type: m.type ?? '', tenancy: { partition: m.tenancy?.partition ?? '', namespace: m.tenancy?.namespace ?? '' }, name: m.name ?? '', uid: m.uid ?? '' };
}

function statusFromMsg(s: pb.Status.$Properties): Status {
  return {
    observed_generation: s.observedGeneration ?? '',
    conditions: (s.conditions ?? []).map((c) => ({ type: c.type ?? '', state: (c.state ?? '') as ConditionState, reason: c.reason ?? '', message: c.message ?? '' })),
    updated_at: s.updatedAt ?? '',
  };
}

export function resourceFromMsg<D>(m: pb.Resource.$Properties | null | undefined): Resource<D> {
  if (m === null || m === undefined || m.id === null || m.id === undefined) throw malformedAnswer('a resource is missing');
  const id = idFromMsg(m.id);
  let data: unknown;
  try {
    data = JSON.parse(m.dataJson ?? '') as unknown;
  } catch (e) {
    throw malformedAnswer(`data_json of ${id.type} ${id.name} does not parse (${e instanceof Error ? e.message : String(e)})`);
  }
  const status: Record<string, Status> = {};
  for (const [k, s] of Object.entries(m.status ?? {})) status[k] = statusFromMsg(s);
  const deletionTimestamp = m.deletionTimestamp ?? '';
  return {
    id,
    owner: m.owner === null || m.owner === undefined ? null : idFromMsg(m.owner),
    version: m.version ?? '',
    generation: m.generation ?? '',
    metadata: { ...m.metadata },
    finalizers: [...(m.finalizers ?? [])],
    deletion_timestamp: deletionTimestamp === '' ? null : deletionTimestamp,
    ...(m.lease !== undefined && m.lease !== null && m.lease !== '' ? { lease: m.lease } : {}),
    data: data as D,
    status,
  };
}

/** An optional uint64 of an answer (last_leader_contact_ms) as a number; undefined when absent. */
export function optionalUint64(v: number | { toNumber(): number } | null | undefined): number | undefined {
  if (v === null || v === undefined) return undefined;
  return typeof v === 'number' ? v : v.toNumber();
}

// ---- Errors ----------------------------------------------------------------------------------

const KNOWN_CODES = new Set<string>(Object.values(ClientErrorCode));

/** For answers without a Cairn code (or with one this client does not know): API.md's table read backwards. */
const FROM_GRPC: Partial<Record<grpc.status, ClientErrorCode>> = {
  [grpc.status.INVALID_ARGUMENT]: ClientErrorCode.INVALID_ARGUMENT,
  [grpc.status.UNAUTHENTICATED]: ClientErrorCode.UNAUTHENTICATED,
  [grpc.status.PERMISSION_DENIED]: ClientErrorCode.PERMISSION_DENIED,
  [grpc.status.NOT_FOUND]: ClientErrorCode.NOT_FOUND,
  [grpc.status.ABORTED]: ClientErrorCode.CAS_FAILED,
  [grpc.status.FAILED_PRECONDITION]: ClientErrorCode.UID_MISMATCH,
  [grpc.status.OUT_OF_RANGE]: ClientErrorCode.COMPACTED,
  [grpc.status.RESOURCE_EXHAUSTED]: ClientErrorCode.TOO_LARGE,
  [grpc.status.UNAVAILABLE]: ClientErrorCode.UNAVAILABLE,
  [grpc.status.DEADLINE_EXCEEDED]: ClientErrorCode.TIMEOUT,
  [grpc.status.CANCELLED]: ClientErrorCode.CANCELLED,
};

/** A failed attempt: decoded from the status, with whether Cairn's handler produced it. */
export interface AttemptFailure {
  readonly error: CairnClientError;
  /** True when the answer carries cairn-error-code: the server's handler decided it. */
  readonly fromServer: boolean;
  readonly grpcCode: number;
  readonly details: string;
  /** RATE_LIMITED: how long the server asked the caller to wait, in ms (undefined: it did not say). */
  readonly retryAfterMs?: number;
}

/**
 * Error details in the shape the server sends them (docs/api.md "Errors"): top-level keys in
 * snake_case, versions, revisions and indexes as decimal strings. Servers before that rule sent
 * `storedType` and CAS versions as JSON numbers; they are read into the same shape, so callers
 * depend on one.
 */
export function normalizeDetails(details: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(details)) {
    const key = k.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
    const position = key === 'expected' || key === 'actual' || /(^|_)(revision|version|index)$/.test(key);
    out[key] = position && typeof v === 'number' ? String(v) : v;
  }
  return out;
}

export function decodeFailure(err: grpc.ServiceError, endpoint: string): AttemptFailure {
  const raw = err.metadata?.get(ERROR_CODE_KEY)[0];
  const fromServer = typeof raw === 'string' && raw !== '';
  let details: Record<string, unknown> = {};
  const rawDetails = err.metadata?.get(ERROR_DETAILS_KEY)[0];
  if (typeof rawDetails === 'string') {
    try {
      const parsed = JSON.parse(rawDetails) as unknown;
      if (typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed)) details = normalizeDetails(parsed as Record<string, unknown>);
    } catch {
      details = { unparsed: rawDetails };
    }
  }
  let code: ClientErrorCode;
  if (fromServer && KNOWN_CODES.has(raw)) code = raw as ClientErrorCode;
  else {
    code = FROM_GRPC[err.code] ?? ClientErrorCode.INTERNAL;
    if (fromServer) details = { ...details, server_code: raw };
  }
  const message = `${err.details || grpc.status[err.code]} (${endpoint})`;
  const retryAfterMs = code === ClientErrorCode.RATE_LIMITED ? retryAfterOf(err.metadata, details) : undefined;
  return {
    error: new CairnClientError(code, message, { details, grpcCode: err.code, endpoint, cause: err }),
    fromServer,
    grpcCode: err.code,
    details: err.details,
    ...(retryAfterMs !== undefined ? { retryAfterMs } : {}),
  };
}

/** The longest wait a server may ask for that the client honours (a larger one is capped to it). */
export const MAX_RETRY_AFTER_MS = 60_000;

/**
 * The wait a RATE_LIMITED answer asks for: the `retry_after_ms` detail, else `retry-after`
 * trailing metadata in seconds (HTTP's Retry-After, delta-seconds form). Undefined when
 * neither is a non-negative number; capped at MAX_RETRY_AFTER_MS.
 */
export function retryAfterOf(metadata: grpc.Metadata | undefined, details: Record<string, unknown>): number | undefined {
  const num = (v: unknown): number | undefined => {
    const n = typeof v === 'number' ? v : typeof v === 'string' && /^\d+(\.\d+)?$/.test(v.trim()) ? Number(v) : NaN;
    return Number.isFinite(n) && n >= 0 ? n : undefined;
  };
  const ms = num(details['retry_after_ms']);
  if (ms !== undefined) return Math.min(ms, MAX_RETRY_AFTER_MS);
  const seconds = num(metadata?.get('retry-after')[0]);
  if (seconds !== undefined) return Math.min(seconds * 1000, MAX_RETRY_AFTER_MS);
  return undefined;
}
