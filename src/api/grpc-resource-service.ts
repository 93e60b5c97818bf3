import * as grpc from '@grpc/grpc-js';
import protobuf from 'protobufjs/minimal.js';
import { callIdentity, type PeerIdentity } from '../auth/index.js';
import { CairnError, ErrorCode, silentLogger, type Logger } from '../base/index.js';
import { cairn } from '../gen/resource.js';
import type { TxnResourceRef } from '../fsm/index.js';
import type { Consistency } from '../replica/index.js';
import type { AuditLog } from './audit.js';
import { ACL_TYPES } from './audit.js';
import { grpcErrorOf, toCairnError } from './errors.js';
import { ipOfGrpcPeer, type RequestLimits } from './limits.js';
import type { Resource } from '../store/index.js';
import { idToJson as storeIdToJson, resourceToJson, type ResourceIdJson, type ResourceJson, type StatusJson } from './resource-json.js';
import type { LeaseService } from './lease-service.js';
import { atPart, bearerToken, checkRequestId, checkTxnSize, LIMITS, type CallContext, type DeleteRequest, type ResourceService, type TxnAnswer, type TxnCompareRequest, type TxnOpRequest, type WriteRequest, type WriteStatusRequest } from './resource-service.js';
import { SharedChangeEvent, type WatchEvent, type WatchService, type WatchSession } from './watch.js';

/**
 * The public gRPC resource API (proto/cairn/resource/v1/resource.proto) over ResourceService:
 * this file only translates messages and errors; every rule lives in ResourceService, shared
 * with the HTTP routes. Nothing a client sends can crash it: bytes that do not decode, unknown
 * fields and unknown enum values are INVALID_ARGUMENT, and a handler bug is INTERNAL (logged).
 */
import pb = cairn.resource.v1;
const SERVICE = 'cairn.resource.v1.ResourceService';

// The messages are the generated ones (src/gen, from the proto): a request is the decoded
// message object, whose unset fields read as the proto3 defaults ('' / 0 / false / [] / {};
// null for an unset message field; an enum as its number, also one this build does not know);
// answers are built as `$Properties`. Nested messages are typed as `$Properties` (every field
// optional) although a decoded one has them all: the conversions read them with the same
// defaults.

/** A request as the handler receives it: decoded, or why it could not be. */
type Decoded<T> = { readonly ok: true; readonly value: T } | { readonly ok: false; readonly error: string; readonly tooLarge?: number };

/**
 * The largest public request message (bytes): a resource's data (1 MiB of JSON) plus its
 * envelope, with room to spare. The cluster port's server-wide limit stays high for Raft
 * snapshots and forwarded restores; public methods check this one (docs/security.md "Limits").
 */
export const MAX_PUBLIC_MESSAGE_BYTES = 4 * 1024 * 1024;

/** The slices of a generated message class a method needs. */
interface Decoder<M> {
  decode(r: protobuf.Reader): M;
}
interface Encoder<M> {
  encode(m: M): { finish(): Uint8Array };
}

/** The field number of the first unknown field anywhere in a decoded message, with its path. */
function firstUnknownField(m: unknown, path: string): string | undefined {
  if (m === null || typeof m !== 'object' || m instanceof Uint8Array) return undefined;
  const unknowns = Object.getOwnPropertyDescriptor(m, '$unknowns')?.value as unknown;
  if (Array.isArray(unknowns) && unknowns[0] instanceof Uint8Array) {
    // The raw field starts with its tag, a varint: field number << 3 | wire type.
    const raw = unknowns[0];
    let tag = 0;
    for (let i = 0, shift = 0; i < raw.length && i < 5; i++, shift += 7) {
      const b = raw[i] as number;
      tag += (b & 0x7f) * 2 ** shift;
      if (b < 0x80) break;
    }
    return `${path} has an unknown field (number ${Math.floor(tag / 8)})`;
  }
  for (const [k, v] of Object.entries(m)) {
    const found = firstUnknownField(v, Array.isArray(m) ? `${path}[${k}]` : `${path}.${k}`);
    if (found !== undefined) return found;
  }
  return undefined;
}

function decodeRequest<T>(codec: Decoder<T>, what: string, bytes: Buffer, limit: number): Decoded<T> {
  // Checked before decoding: a message over the limit is never parsed.
  if (bytes.length > limit) return { ok: false, error: `the ${what} message is ${bytes.length} bytes; at most ${limit}`, tooLarge: limit };
  try {
    const reader = protobuf.Reader.create(bytes);
    reader.discardUnknown = false;
    const message = codec.decode(reader);
    const unknown = firstUnknownField(message, what);
    if (unknown !== undefined) return { ok: false, error: `${unknown}; this server does not know it (a newer client?)` };
    return { ok: true, value: message };
  } catch (e) {
    return { ok: false, error: `the ${what} message does not decode: ${e instanceof Error ? e.message : String(e)}` };
  }
}

/**
 * An answer already encoded: the handler built the message's bytes itself (`answerWithResource`,
 * from a resource's cached bytes), so the serializer passes them through.
 */
class Encoded {
  constructor(readonly bytes: Buffer) {}
}

function method<Req, Res>(name: string, req: Decoder<Req>, res: Encoder<Res>, limit: number): grpc.MethodDefinition<Decoded<Req>, Res | Encoded> {
  return {
    path: `/${SERVICE}/${name}`,
    requestStream: false,
    responseStream: false,
    // Never throws: grpc-js would answer a throwing deserializer with INTERNAL.
    requestDeserialize: (b: Buffer) => decodeRequest(req, `${name}Request`, b, limit),
    requestSerialize: () => {
      throw new Error('server-side definition');
    },
    responseSerialize: (m: Res | Encoded) => (m instanceof Encoded ? m.bytes : Buffer.from(res.encode(m).finish())),
    responseDeserialize: () => {
      throw new Error('server-side definition');
    },
  };
}

/** The service's method definitions, public requests bounded by `limit` bytes. */
function serviceDefinition(limit: number) {
  return {
    read: method('Read', pb.ReadRequest, pb.ReadResponse, limit),
    write: method('Write', pb.WriteRequest, pb.WriteResponse, limit),
    writeStatus: method('WriteStatus', pb.WriteStatusRequest, pb.WriteStatusResponse, limit),
    delete: method('Delete', pb.DeleteRequest, pb.DeleteResponse, limit),
    list: method('List', pb.ListRequest, pb.ListResponse, limit),
    listByOwner: method('ListByOwner', pb.ListByOwnerRequest, pb.ListByOwnerResponse, limit),
    txn: method('Txn', pb.TxnRequest, pb.TxnResponse, limit),
    leaseGrant: method('LeaseGrant', pb.LeaseGrantRequest, pb.LeaseGrantResponse, limit),
    leaseRevoke: method('LeaseRevoke', pb.LeaseRevokeRequest, pb.LeaseRevokeResponse, limit),
    leaseTimeToLive: method('LeaseTimeToLive', pb.LeaseTimeToLiveRequest, pb.LeaseTimeToLiveResponse, limit),
    leaseList: method('LeaseList', pb.LeaseListRequest, pb.LeaseListResponse, limit),
    leaseKeepAlive: {
      path: `/${SERVICE}/LeaseKeepAlive`,
      requestStream: true,
      responseStream: true,
      requestDeserialize: (b: Buffer) => decodeRequest(pb.LeaseKeepAliveRequest, 'LeaseKeepAliveRequest', b, limit),
      requestSerialize: () => {
        throw new Error('server-side definition');
      },
      responseSerialize: (m: pb.LeaseKeepAliveResponse.$Properties) => Buffer.from(pb.LeaseKeepAliveResponse.encode(m).finish()),
      responseDeserialize: () => {
        throw new Error('server-side definition');
      },
    } satisfies grpc.MethodDefinition<Decoded<pb.LeaseKeepAliveRequest>, pb.LeaseKeepAliveResponse.$Properties>,
    watchList: watchMethod('WatchList', limit),
    watchListBatched: watchMethod('WatchListBatched', limit),
  } satisfies grpc.ServiceDefinition;
}

/**
 * A server-streaming watch method: WatchList's request, answers already encoded (events by
 * encodeWatchEvent, batches by encodeWatchEventBatch, from the resources' cached bytes).
 */
function watchMethod(name: 'WatchList' | 'WatchListBatched', limit: number): grpc.MethodDefinition<Decoded<pb.WatchListRequest>, Buffer> {
  return {
    path: `/${SERVICE}/${name}`,
    requestStream: false,
    responseStream: true,
    requestDeserialize: (b: Buffer) => decodeRequest(pb.WatchListRequest, 'WatchListRequest', b, limit),
    requestSerialize: () => {
      throw new Error('server-side definition');
    },
    responseSerialize: (b: Buffer) => b,
    responseDeserialize: () => {
      throw new Error('server-side definition');
    },
  };
}

/** The service with the default public request limit. */
export const resourceServiceDefinition = serviceDefinition(MAX_PUBLIC_MESSAGE_BYTES);

/** A stored resource's encoded cairn.resource.v1.Resource, built once per stored version. */
const encodedResources = new WeakMap<Resource, Uint8Array>();

/** Exported for its test: the cached bytes own exactly their memory. */
export function encodedResource(r: Resource): Uint8Array {
  let b = encodedResources.get(r);
  if (b === undefined) {
    b = pb.Resource.encode(resourceToMsg(resourceToJson(r))).finish();
    // Only a stored resource (frozen: a new version is a new object) may be answered from
    // cached bytes; a result relayed from the leader (decoded, not frozen) is used once.
    if (Object.isFrozen(r)) {
      // The encoder returns a slice of Node's shared 8 KiB Buffer pool: cached as it is, each
      // version kept alive by the event window would pin a whole slab (78 MiB of slabs on a
      // leader under load, docs/performance.md "Where a node's memory goes"). Keep a copy of
      // exactly its size.
      if (b.byteOffset !== 0 || b.buffer.byteLength !== b.byteLength) b = new Uint8Array(b);
      encodedResources.set(r, b);
    }
  }
  return b;
}

const EMPTY = {};

/**
 * A response message whose field 1 is the `Resource` `r` (ReadResponse, WriteResponse,
 * WriteStatusResponse), built from the resource's cached bytes (`encodedResource`: encoded once
 * per stored version, shared with watch events) followed by the other fields (`rest`, encoded by
 * the caller). Protobuf allows any field order; decoders see the same message as
 * `X.encode({ resource, ...rest })` would give.
 */
export function answerWithResource(r: Resource, rest?: Uint8Array): Encoded {
  const body = encodedResource(r);
  const restLength = rest?.length ?? 0;
  // One allocation: field 1 (tag, the length as a varint, the bytes), then the rest.
  const out = Buffer.allocUnsafe(fieldSize(body.length) + restLength);
  const at = putField1(out, 0, body);
  if (rest !== undefined && restLength > 0) out.set(rest, at);
  return new Encoded(out);
}

/** The bytes of a length-delimited field with a one-byte tag holding `n` bytes: the tag, the length as a varint, the bytes. */
function fieldSize(n: number): number {
  let lengthBytes = 1;
  for (let m = n; m >= 0x80; m = Math.floor(m / 128)) lengthBytes++;
  return 1 + lengthBytes + n;
}

/** Writes the tag of length-delimited field `field` (1-15) and the length `n` into `out` at `at`; returns the position after them. */
function putFieldHead(out: Buffer, at: number, field: number, n: number): number {
  out[at++] = (field << 3) | 2;
  while (n >= 0x80) {
    out[at++] = (n & 0x7f) | 0x80;
    n = Math.floor(n / 128);
  }
  out[at++] = n;
  return at;
}

/** Writes field 1 holding `body` into `out` at `at`; returns the position after it. */
function putField1(out: Buffer, at: number, body: Uint8Array): number {
  at = putFieldHead(out, at, 1, body.length);
  out.set(body, at);
  return at + body.length;
}

/**
 * One WatchEvent message. A change or delete is the event's head (watch, revision) followed by
 * the resource's cached bytes as field 3 (change) or 4 (delete): protobuf allows any field
 * order. A SharedChangeEvent (what sessions send) is encoded once and its bytes handed to every
 * watcher that gets it.
 */
export function encodeWatchEvent(ev: WatchEvent): Buffer {
  const codec = pb.WatchEvent;
  switch (ev.kind) {
    case 'change':
    case 'delete': {
      const shared = ev instanceof SharedChangeEvent ? ev : undefined;
      const cached = shared?.encoded.grpc;
      if (cached !== undefined) return cached;
      const head = codec.encode({ watch: ev.watch, revision: String(ev.revision) }).finish();
      const body = encodedResource(ev.resource);
      const w = protobuf.Writer.create();
      w.uint32(ev.kind === 'change' ? (3 << 3) | 2 : (4 << 3) | 2).bytes(body);
      const tail = w.finish();
      // An exact-size buffer, not Buffer.concat's slice of the shared 8 KiB pool: the event
      // lives as long as the window keeps its version, and a pool slice would pin a whole slab.
      const out = Buffer.allocUnsafeSlow(head.length + tail.length);
      out.set(head, 0);
      out.set(tail, head.length);
      if (shared) shared.encoded.grpc = out;
      return out;
    }
    case 'tail':
      return Buffer.from(codec.encode({ watch: ev.watch, revision: String(ev.revision), tail: EMPTY }).finish());
    case 'bookmark':
      return Buffer.from(codec.encode({ revision: String(ev.revision), bookmark: EMPTY }).finish());
    case 'new-snapshot-to-follow':
      return Buffer.from(codec.encode({ watch: ev.watch, revision: String(ev.revision), newSnapshotToFollow: EMPTY }).finish());
    case 'end-of-snapshot':
      return Buffer.from(codec.encode({ watch: ev.watch, revision: String(ev.revision), endOfSnapshot: EMPTY }).finish());
  }
}

/**
 * The last few batches encoded, with their events: watchers of one filter at one position are
 * handed the very same event objects in the same fan-out turn, so the sessions after the first
 * reuse its bytes instead of copying them again (grpc-js copies them into its frame either
 * way, and never changes them). Short-lived on purpose: a cache per event would keep up to a
 * batch of bytes alive for every event in the window.
 */
const recentBatches: Array<{ readonly events: readonly WatchEvent[]; readonly bytes: Buffer }> = [];
const RECENT_BATCHES = 4;

function sameEvents(a: readonly WatchEvent[], b: readonly WatchEvent[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/**
 * One WatchEventBatch message (WatchListBatched): each event as field 1, length-delimited. The
 * events' own encodings (cached per shared event) are copied once into the batch; nothing is
 * re-encoded, and a batch of the same event objects as one just encoded reuses its bytes.
 */
export function encodeWatchEventBatch(events: readonly WatchEvent[]): Buffer {
  for (const r of recentBatches) if (sameEvents(r.events, events)) return r.bytes;
  const bytes = encodeBatchBytes(events);
  // Plain events (tails, bookmarks) are new objects per stream: a batch holding one never recurs.
  if (events.every((e) => e instanceof SharedChangeEvent)) {
    if (recentBatches.length >= RECENT_BATCHES) recentBatches.pop();
    recentBatches.unshift({ events: [...events], bytes });
  }
  return bytes;
}

/**
 * A change or delete goes into a batch as its head (watch, revision) and the resource's cached
 * bytes, written straight into the batch: the event's own concatenated bytes are not made or
 * kept (kept per event, they would live as long as the window keeps its version: a third copy
 * of every resource, docs/performance.md "Where a node's memory goes").
 */
type BatchPart = { readonly whole: Uint8Array; readonly size: number } | { readonly head: Uint8Array; readonly field: number; readonly body: Uint8Array; readonly size: number };

function batchPart(ev: WatchEvent): BatchPart {
  if (ev.kind === 'change' || ev.kind === 'delete') {
    const cached = ev instanceof SharedChangeEvent ? ev.encoded.grpc : undefined;
    if (cached !== undefined) return { whole: cached, size: cached.length };
    const head = pb.WatchEvent.encode({ watch: ev.watch, revision: String(ev.revision) }).finish();
    const body = encodedResource(ev.resource);
    return { head, field: ev.kind === 'change' ? 3 : 4, body, size: head.length + fieldSize(body.length) };
  }
  const whole = encodeWatchEvent(ev);
  return { whole, size: whole.length };
}

function encodeBatchBytes(events: readonly WatchEvent[]): Buffer {
  const parts = events.map(batchPart);
  const out = Buffer.allocUnsafe(parts.reduce((total, p) => total + fieldSize(p.size), 0));
  let at = 0;
  for (const p of parts) {
    at = putFieldHead(out, at, 1, p.size);
    if ('whole' in p) {
      out.set(p.whole, at);
      at += p.whole.length;
    } else {
      out.set(p.head, at);
      at = putFieldHead(out, at + p.head.length, p.field, p.body.length);
      out.set(p.body, at);
      at += p.body.length;
    }
  }
  return out;
}

// ---- Messages <-> ResourceService ------------------------------------------------------------

function invalid(msg: string): CairnError {
  return new CairnError(ErrorCode.INVALID_ARGUMENT, msg);
}

function requireId(id: pb.ResourceId.$Properties | null | undefined): pb.ResourceId.$Properties {
  if (id === null || id === undefined) throw invalid('id is required (type, tenancy, name)');
  return id;
}

function target(id: pb.ResourceId.$Properties): { type: string; partition: string; namespace: string; name: string } {
  return { type: id.type ?? '', partition: id.tenancy?.partition ?? '', namespace: id.tenancy?.namespace ?? '', name: id.name ?? '' };
}

/** A string field where '' (the proto3 default) means "not set". */
function optional(s: string | null | undefined): string | undefined {
  return s === '' || s === null || s === undefined ? undefined : s;
}

function consistency(c: pb.Consistency): Consistency {
  switch (c) {
    case pb.Consistency.CONSISTENCY_UNSPECIFIED:
    case pb.Consistency.CONSISTENCY_LINEARIZABLE:
      return 'linearizable';
    case pb.Consistency.CONSISTENCY_STALE:
      return 'stale';
    default:
      throw invalid(`consistency ${JSON.stringify(c)} is not a known value (CONSISTENCY_LINEARIZABLE or CONSISTENCY_STALE)`);
  }
}

function idToJson(id: pb.ResourceId.$Properties): ResourceIdJson {
  return { type: id.type ?? '', tenancy: { partition: id.tenancy?.partition ?? '', namespace: id.tenancy?.namespace ?? '' }, name: id.name ?? '', uid: id.uid ?? '' };
}

function conditionToJson(c: pb.Condition.$Properties): { type: string; state: string; reason: string; message: string } {
  return { type: c.type ?? '', state: c.state ?? '', reason: c.reason ?? '', message: c.message ?? '' };
}

function statusToJson(s: pb.Status.$Properties): { observed_generation: string; conditions: unknown[]; updated_at: string } {
  return { observed_generation: s.observedGeneration ?? '', conditions: (s.conditions ?? []).map(conditionToJson), updated_at: s.updatedAt ?? '' };
}

function parseData(text: string): unknown {
  if (text === '') throw invalid('data_json is required (the resource data as JSON text)');
  const bytes = Buffer.byteLength(text);
  if (bytes > LIMITS.dataBytes) throw new CairnError(ErrorCode.TOO_LARGE, `data_json is ${bytes} bytes; at most ${LIMITS.dataBytes}`, { limit: LIMITS.dataBytes });
  try {
    return JSON.parse(text) as unknown;
  } catch (e) {
    throw invalid(`data_json is not valid JSON: ${e instanceof Error ? e.message : String(e)}`);
  }
}

function idToMsg(id: ResourceIdJson): pb.ResourceId.$Properties {
  return { type: id.type, tenancy: { partition: id.tenancy.partition, namespace: id.tenancy.namespace }, name: id.name, uid: id.uid };
}

function statusToMsg(s: StatusJson): pb.Status.$Properties {
  return { observedGeneration: s.observed_generation, conditions: s.conditions.map((c) => ({ ...c })), updatedAt: s.updated_at };
}

function resourceToMsg(r: ResourceJson): pb.Resource.$Properties {
  const status: Record<string, pb.Status.$Properties> = {};
  for (const [k, s] of Object.entries(r.status)) status[k] = statusToMsg(s);
  return {
    id: idToMsg(r.id),
    owner: r.owner ? idToMsg(r.owner) : null,
    version: r.version,
    generation: r.generation,
    metadata: { ...r.metadata },
    finalizers: [...r.finalizers],
    deletionTimestamp: r.deletion_timestamp ?? '',
    dataJson: JSON.stringify(r.data),
    status,
    lease: r.lease ?? '',
  };
}

function writeRequestOf(req: pb.WriteRequest): WriteRequest {
  const id = requireId(req.id);
  const status: Record<string, unknown> = {};
  for (const [k, s] of Object.entries(req.status)) status[k] = statusToJson(s);
  return {
    ...target(id),
    data: parseData(req.dataJson),
    metadata: req.metadata === null || req.metadata === undefined ? undefined : { ...req.metadata.entries },
    owner: req.owner === null || req.owner === undefined ? undefined : idToJson(req.owner),
    finalizers: req.finalizers === null || req.finalizers === undefined ? undefined : [...(req.finalizers.items ?? [])],
    version: optional(req.version),
    // An empty map is "left out": status cannot change through Write anyway.
    status: Object.keys(status).length === 0 ? undefined : status,
    uid: optional(id.uid),
    // proto3 `optional`: null when absent (keep), "" detaches.
    lease: req.lease === null || req.lease === undefined ? undefined : req.lease,
  };
}

function writeStatusRequestOf(req: pb.WriteStatusRequest): WriteStatusRequest {
  const id = requireId(req.id);
  return { ...target(id), key: req.key, uid: id.uid ?? '', observedGeneration: req.observedGeneration, conditions: req.conditions.map(conditionToJson), version: optional(req.version) };
}

function deleteRequestOf(req: pb.DeleteRequest): DeleteRequest {
  const id = requireId(req.id);
  return { ...target(id), version: optional(req.version), uid: optional(id.uid) };
}

const TARGETS: Readonly<Record<number, string>> = {
  [pb.TxnCompare.Target.TARGET_VERSION]: 'version',
  [pb.TxnCompare.Target.TARGET_EXISTS]: 'exists',
  [pb.TxnCompare.Target.TARGET_ABSENT]: 'absent',
  [pb.TxnCompare.Target.TARGET_UID]: 'uid',
};

/** A TxnRequest as the service's request: the counts checked first, each part as its single operation's request. */
function txnRequestOf(req: pb.TxnRequest, svc: Pick<ResourceService, 'txnLimits'>): { compare: TxnCompareRequest[]; then: TxnOpRequest[]; else: TxnOpRequest[] } {
  checkTxnSize(svc.txnLimits, req.compare.length, req.thenOps.length, req.elseOps.length);
  const compare = req.compare.map((c, i): TxnCompareRequest => {
    try {
      const id = requireId(c.id);
      if (optional(id.uid) !== undefined) throw invalid('id.uid must be empty (a uid comparison names the uid in uid, with target TARGET_UID)');
      const t = TARGETS[c.target ?? 0];
      if (t === undefined) throw invalid(`target ${JSON.stringify(c.target)} is not a known value (TARGET_VERSION, TARGET_EXISTS, TARGET_ABSENT, TARGET_UID)`);
      return { target: t, ...target(id), version: optional(c.version), uid: optional(c.uid) };
    } catch (e) {
      throw atPart(`compare[${i}]`, e);
    }
  });
  const ops = (list: pb.ITxnOp[], branch: string): TxnOpRequest[] =>
    list.map((o, i): TxnOpRequest => {
      try {
        const one = (r: { requestId?: string | null }): void => {
          if (optional(r.requestId) !== undefined) throw invalid('request_id must be empty in an op (the transaction has one)');
        };
        if (o.write) {
          one(o.write);
          return { op: 'write', ...writeRequestOf(o.write as pb.WriteRequest) };
        }
        if (o.delete) {
          one(o.delete);
          return { op: 'delete', ...deleteRequestOf(o.delete as pb.DeleteRequest) };
        }
        if (o.writeStatus) {
          one(o.writeStatus);
          return { op: 'status', ...writeStatusRequestOf(o.writeStatus as pb.WriteStatusRequest) };
        }
        throw invalid('an op needs one of write, delete, write_status');
      } catch (e) {
        throw atPart(`${branch}[${i}]`, e);
      }
    });
  return { compare, then: ops(req.thenOps, 'then'), else: ops(req.elseOps, 'else') };
}

function txnResponseOf(r: TxnAnswer): pb.TxnResponse.$Properties {
  return {
    succeeded: r.succeeded,
    revision: String(r.revision),
    ...(r.failedComparison !== undefined ? { failedComparison: r.failedComparison } : {}),
    results: r.results.map((x): pb.ITxnOpResult => {
      switch (x.op) {
        case 'write':
          return { write: { resource: txnRefMsg(x.resource), changed: x.changed } };
        case 'delete':
          return { delete: { deleted: x.deleted, deleting: x.deleting, ...(x.resource !== null ? { resource: txnRefMsg(x.resource) } : {}) } };
        case 'status':
          return { writeStatus: { resource: txnRefMsg(x.resource) } };
      }
    }),
  };
}

/** A transaction's slim resource (id, version, generation; docs/api.md "Transactions"). */
function txnRefMsg(r: TxnResourceRef): pb.ITxnResourceRef {
  const id = storeIdToJson(r.id);
  return { id: { type: id.type, tenancy: id.tenancy, name: id.name, uid: id.uid }, version: String(r.version), generation: r.generation };
}

/** Freshness of a read (API.md "Stale read"): in response metadata, as the HTTP API sends headers. */
function freshness(revision: number, lastContactMs: number | undefined): { metadata: grpc.Metadata; fields: { revision: string; lastLeaderContactMs?: number } } {
  const metadata = new grpc.Metadata();
  metadata.set('cairn-revision', String(revision));
  if (lastContactMs === undefined) return { metadata, fields: { revision: String(revision) } };
  const ms = Math.max(0, Math.round(lastContactMs));
  metadata.set('cairn-last-contact-ms', String(ms));
  return { metadata, fields: { revision: String(revision), lastLeaderContactMs: ms } };
}

/** Answer a little before the caller's deadline, so it gets our TIMEOUT rather than its own. */
const DEADLINE_MARGIN_MS = 50;

function context(call: grpc.ServerUnaryCall<unknown, unknown>, requestId = ''): CallContext {
  const auth = call.metadata.get('authorization')[0];
  const token = bearerToken(auth);
  const deadline = call.getDeadline();
  const at = deadline instanceof Date ? deadline.getTime() : deadline;
  const timeoutMs = Number.isFinite(at) ? Math.max(1, Math.floor(at - Date.now() - DEADLINE_MARGIN_MS)) : undefined;
  return { requestId: checkRequestId(requestId), token, timeoutMs, peer: peerOf(call) };
}

/** The caller's verified client certificate, if any (a node's makes it a node of the cluster: docs/security.md). */
function peerOf(call: { getAuthContext?: () => unknown }): PeerIdentity | undefined {
  if (typeof call.getAuthContext !== 'function') return undefined;
  try {
    return callIdentity(call as Parameters<typeof callIdentity>[0]);
  } catch {
    return undefined;
  }
}

type Handler<Req, Res> = (req: Req, call: grpc.ServerUnaryCall<unknown, unknown>) => Promise<{ response: Res | Encoded; metadata?: grpc.Metadata }>;

/** A request that did not decode: TOO_LARGE when over the message limit, else INVALID_ARGUMENT. */
function undecoded(d: { readonly error: string; readonly tooLarge?: number }): CairnError {
  return d.tooLarge !== undefined ? new CairnError(ErrorCode.TOO_LARGE, d.error, { limit: d.tooLarge }) : invalid(d.error);
}

/** What every public call shares: the limits, the audit log, the error logger. */
interface Edge {
  readonly logger: Logger;
  readonly limits: RequestLimits | undefined;
  readonly audit: AuditLog | undefined;
}

function callerOf(call: { getPeer(): string; metadata: grpc.Metadata }): { address: string; token: string | undefined } {
  return { address: ipOfGrpcPeer(call.getPeer()), token: bearerToken(call.metadata.get('authorization')[0]) };
}

/** Records a denied answer (UNAUTHENTICATED, PERMISSION_DENIED, RATE_LIMITED) in the audit log. */
function auditDenied(edge: Edge, name: string, call: { getPeer(): string; metadata: grpc.Metadata }, err: CairnError): void {
  if (edge.audit === undefined) return;
  const c = callerOf(call);
  edge.audit.denied({ transport: 'grpc', method: `/${SERVICE}/${name}`, address: c.address, token: c.token, code: err.code, message: err.message });
}

/** Whether a Write or Delete of this type is an admin action (the ACL types). */
function aclTarget(id: pb.ResourceId.$Properties | null | undefined): Record<string, unknown> | undefined {
  if (id === null || id === undefined || !ACL_TYPES.has(id.type ?? '')) return undefined;
  return { type: id.type, name: id.name ?? '' };
}

function unary<Req, Res>(name: string, edge: Edge, run: Handler<Req, Res>, admin?: (req: Req) => { action: string; target: Record<string, unknown> } | undefined): grpc.handleUnaryCall<Decoded<Req>, Res | Encoded> {
  return (call, callback) => {
    let audited: { action: string; target: Record<string, unknown> } | undefined;
    const handle = async (): Promise<void> => {
      const d = call.request;
      edge.limits?.check(callerOf(call));
      if (!d.ok) throw undecoded(d);
      audited = admin?.(d.value);
      const { response, metadata } = await run(d.value, call);
      if (audited) edge.audit?.admin({ transport: 'grpc', action: audited.action, method: `/${SERVICE}/${name}`, ...callerOf(call), outcome: 'ok', target: audited.target });
      if (metadata) call.sendMetadata(metadata);
      callback(null, response);
    };
    handle().catch((e: unknown) => {
      const err = toCairnError(e);
      if (err.code === ErrorCode.INTERNAL) edge.logger.error({ method: name, err: err.message, stack: e instanceof Error ? e.stack : undefined }, 'grpc resource handler failed');
      if (audited) edge.audit?.admin({ transport: 'grpc', action: audited.action, method: `/${SERVICE}/${name}`, ...callerOf(call), outcome: err.code, target: audited.target });
      auditDenied(edge, name, call, err);
      callback(grpcErrorOf(err));
    });
  };
}

export interface ResourceGrpcServiceOptions {
  /** Where INTERNAL errors (bugs) are logged. Default: nowhere. */
  readonly logger?: Logger;
  /** Serves WatchList; without it WatchList answers UNIMPLEMENTED. */
  readonly watches?: WatchService;
  /** Per-address and per-token rate limits (every method, starting a watch included). Default: none. */
  readonly limits?: RequestLimits;
  /** Where denied calls and ACL writes are recorded. Default: nowhere. */
  readonly audit?: AuditLog;
  /** The largest request message a public method takes (bytes). Default MAX_PUBLIC_MESSAGE_BYTES. */
  readonly maxMessageBytes?: number;
  /** Serves the lease methods (docs/api.md "Leases"); without it they answer UNIMPLEMENTED. */
  readonly leases?: LeaseService;
  /** Serve WatchListBatched. Default true; false answers it UNIMPLEMENTED (tests of clients' fallback). */
  readonly batchedWatches?: boolean;
}

/** WatchListBatched messages a stream may have waiting in grpc-js before its session waits (one being written, one queued). */
const BATCHES_IN_FLIGHT = 2;
/** Bytes of one WatchListBatched message, at most (a single larger event goes alone). */
export const WATCH_BATCH_BYTES = 32 * 1024;

/**
 * Serves WatchList (`batched` false: one WatchEvent per message) or WatchListBatched (one
 * WatchEventBatch per write the session makes: the events that queued while the stream waited).
 */
/** A proto int64 as a number (protobufjs gives a Long for large values); beyond 2^53 it is not a safe integer, so the service refuses it. */
function int64(v: number | Long | null | undefined): number {
  if (v === null || v === undefined) return 0;
  return typeof v === 'number' ? v : Number(v.toString());
}

/** Most keep-alives of one stream waiting for their answers; a client sending more is ended (RESOURCE_EXHAUSTED). */
export const KEEPALIVE_STREAM_PENDING = 256;

/**
 * LeaseKeepAlive (docs/api.md "Leases"): one answer per request, in order. A request is checked
 * (limits, decoding, the caller's grant) and renews the lease on the leader's clock; a refusal
 * of one lease is an answer (ttl_seconds 0, error_code) and the stream goes on, as etcd's
 * answers TTL 0 for a lease it does not have. The caller's deadline does not apply (the
 * stream lives as long as the client keeps it); each request gets the node's request timeout.
 */
function leaseKeepAlive(leases: LeaseService, edge: Edge): grpc.handleBidiStreamingCall<Decoded<pb.LeaseKeepAliveRequest>, pb.LeaseKeepAliveResponse.$Properties> {
  return (call) => {
    const token = bearerToken(call.metadata.get('authorization')[0]);
    const peer = peerOf(call as unknown as { getAuthContext?: () => unknown });
    let chain: Promise<void> = Promise.resolve();
    let pending = 0;
    let ended = false;
    const end = (err?: CairnError): void => {
      if (ended) return;
      ended = true;
      if (err !== undefined) {
        auditDenied(edge, 'LeaseKeepAlive', call, err);
        call.emit('error', grpcErrorOf(err));
      } else call.end();
    };
    call.on('data', (d: Decoded<pb.LeaseKeepAliveRequest>) => {
      if (ended) return;
      pending++;
      if (pending > KEEPALIVE_STREAM_PENDING) {
        end(new CairnError(ErrorCode.TOO_LARGE, `more than ${KEEPALIVE_STREAM_PENDING} keep-alives are waiting for their answers on this stream; wait for answers before sending more`));
        return;
      }
      chain = chain.then(async () => {
        if (ended) return;
        let answer: pb.LeaseKeepAliveResponse.$Properties;
        const id = d.ok ? d.value.id : '';
        try {
          edge.limits?.check(callerOf(call));
          if (!d.ok) throw undecoded(d);
          const r = await leases.keepAlive(id, { token, peer });
          answer = { id: r.id, ttlSeconds: r.ttlSeconds };
        } catch (e) {
          const err = toCairnError(e);
          if (err.code === ErrorCode.INTERNAL) edge.logger.error({ method: 'LeaseKeepAlive', err: err.message }, 'grpc keep-alive failed');
          if (err.code === ErrorCode.UNAUTHENTICATED || err.code === ErrorCode.PERMISSION_DENIED || err.code === ErrorCode.RATE_LIMITED) auditDenied(edge, 'LeaseKeepAlive', call, err);
          answer = { id, ttlSeconds: 0, errorCode: err.code, errorMessage: err.message };
        }
        pending--;
        if (!ended) call.write(answer);
      });
    });
    call.on('end', () => {
      void chain.then(() => end());
    });
    call.on('error', () => {
      ended = true;
    });
    call.on('cancelled', () => {
      ended = true;
    });
  };
}

function watchList(watches: WatchService | undefined, edge: Edge, batched: boolean): grpc.handleServerStreamingCall<Decoded<pb.WatchListRequest>, Buffer> {
  const method = batched ? 'WatchListBatched' : 'WatchList';
  return (call) => {
    const fail = (e: unknown): void => {
      const err = toCairnError(e);
      if (err.code === ErrorCode.INTERNAL) edge.logger.error({ method, err: err.message, stack: e instanceof Error ? e.stack : undefined }, 'grpc watch failed');
      auditDenied(edge, method, call, err);
      call.emit('error', grpcErrorOf(err));
    };
    try {
      if (!watches) {
        call.emit('error', { code: grpc.status.UNIMPLEMENTED, details: `${method} is not served by this server` });
        return;
      }
      const d = call.request;
      edge.limits?.check(callerOf(call));
      if (!d.ok) throw undecoded(d);
      const auth = call.metadata.get('authorization')[0];
      const token = bearerToken(auth);
      let ended = false;
      // WatchListBatched: messages handed to grpc-js whose HTTP/2 write has not completed.
      // grpc-js's own back-pressure counts messages (16), not bytes: the session is held once
      // BATCHES_IN_FLIGHT are outstanding, so what waits for a slow reader stays in its
      // subscription queue (references to events every watcher shares), where the
      // SLOW_CONSUMER bound applies.
      let inFlight = 0;
      let drained: (() => void) | undefined;
      // A caller that goes away while the node starts (open() waits for it) ends its session at once.
      let session: WatchSession | undefined;
      let gone = false;
      const release = (): void => {
        gone = true;
        if (!ended) session?.close();
      };
      call.on('cancelled', release);
      call.on('close', release);
      watches.open(
        d.value.watches.map((w) => ({
          type: w.type ?? '',
          partition: w.tenancy?.partition ?? '',
          namespace: w.tenancy?.namespace ?? '',
          namePrefix: optional(w.namePrefix),
          gtRevision: optional(w.gtRevision),
          atTail: w.atTail === true,
          snapshotOnCompacted: w.snapshotOnCompacted === true,
        })),
        { token, peer: peerOf(call) },
        {
          send(events) {
            if (batched) {
              if (events.length > 0) {
                inFlight++;
                call.write(encodeWatchEventBatch(events), () => {
                  inFlight--;
                  const w = drained;
                  drained = undefined;
                  w?.();
                });
              }
              return inFlight < BATCHES_IN_FLIGHT;
            }
            let ok = true;
            for (const ev of events) ok = call.write(encodeWatchEvent(ev));
            return ok;
          },
          onDrain(cb) {
            if (!batched) call.once('drain', cb);
            else if (inFlight < BATCHES_IN_FLIGHT) setImmediate(cb);
            else drained = cb;
          },
          // A batch is cut at this many bytes (one larger event goes alone): with at most
          // BATCHES_IN_FLIGHT of them, a stream holds about 64 KiB for its reader in grpc-js.
          maxBatchBytes: batched ? WATCH_BATCH_BYTES : undefined,
          sizeOf(ev) {
            // Encoded once per shared event; the write below reuses the bytes.
            return ev.kind === 'change' || ev.kind === 'delete' ? encodeWatchEvent(ev).length + 5 : 32;
          },
          end(error) {
            ended = true;
            if (error) call.emit('error', grpcErrorOf(error));
            else call.end();
          },
        },
        // One HTTP/2 connection per client address and port: the per-connection watch cap's key.
        { connection: call.getPeer(), caller: { transport: 'grpc', method: `/${SERVICE}/${method}`, ...callerOf(call) } },
      ).then(
        (s) => {
          session = s;
          if (gone && !ended) s.close();
        },
        fail,
      );
    } catch (e) {
      fail(e);
    }
  };
}

/** Adds cairn.resource.v1.ResourceService, served by `svc`, to a gRPC server (the cluster port). */
export function addResourceGrpcService(server: grpc.Server, svc: ResourceService, opts: ResourceGrpcServiceOptions = {}): void {
  const logger = opts.logger ?? silentLogger;
  const edge: Edge = { logger, limits: opts.limits, audit: opts.audit };
  const impl: grpc.UntypedServiceImplementation = {
    read: unary<pb.ReadRequest, pb.ReadResponse.$Properties>('Read', edge, async (req, call) => {
      const id = requireId(req.id);
      const r = await svc.readStored({ ...target(id), uid: optional(id.uid), consistency: consistency(req.consistency) }, context(call));
      const f = freshness(r.revision, r.lastLeaderContactMs);
      return { response: answerWithResource(r.resource, pb.ReadResponse.encode(f.fields).finish()), metadata: f.metadata };
    }),
    write: unary<pb.WriteRequest, pb.WriteResponse.$Properties>('Write', edge, async (req, call) => {
      const ctx = context(call, req.requestId);
      const resource = await svc.writeStored(writeRequestOf(req), ctx);
      return { response: answerWithResource(resource) };
    }, (req) => {
      const target = aclTarget(req.id);
      return target ? { action: 'acl.write', target } : undefined;
    }),
    writeStatus: unary<pb.WriteStatusRequest, pb.WriteStatusResponse.$Properties>('WriteStatus', edge, async (req, call) => {
      const resource = await svc.writeStatusStored(writeStatusRequestOf(req), context(call, req.requestId));
      return { response: answerWithResource(resource) };
    }),
    delete: unary<pb.DeleteRequest, pb.DeleteResponse.$Properties>('Delete', edge, async (req, call) => {
      const r = await svc.delete(deleteRequestOf(req), context(call, req.requestId));
      return { response: r.resource ? { deleted: r.deleted, resource: resourceToMsg(r.resource) } : { deleted: r.deleted } };
    }, (req) => {
      const target = aclTarget(req.id);
      return target ? { action: 'acl.delete', target } : undefined;
    }),
    list: unary<pb.ListRequest, pb.ListResponse.$Properties>('List', edge, async (req, call) => {
      const r = await svc.list(
        {
          type: req.type,
          partition: req.tenancy?.partition ?? '',
          namespace: req.tenancy?.namespace ?? '',
          namePrefix: optional(req.namePrefix),
          ownerUid: optional(req.ownerUid),
          consistency: consistency(req.consistency),
          limit: req.limit,
          continue: optional(req.continue),
        },
        context(call),
      );
      const f = freshness(r.revision, r.lastLeaderContactMs);
      return { response: { resources: r.resources.map(resourceToMsg), ...f.fields, continue: r.continue ?? '' }, metadata: f.metadata };
    }),
    listByOwner: unary<pb.ListByOwnerRequest, pb.ListByOwnerResponse.$Properties>('ListByOwner', edge, async (req, call) => {
      const r = await svc.listByOwner({ ownerUid: req.ownerUid, consistency: consistency(req.consistency), limit: req.limit, continue: optional(req.continue) }, context(call));
      const f = freshness(r.revision, r.lastLeaderContactMs);
      return { response: { resources: r.resources.map(resourceToMsg), ...f.fields, continue: r.continue ?? '' }, metadata: f.metadata };
    }),
    txn: unary<pb.TxnRequest, pb.TxnResponse.$Properties>('Txn', edge, async (req, call) => {
      const r = await svc.txn(txnRequestOf(req, svc), context(call, req.requestId));
      return { response: txnResponseOf(r), metadata: freshness(r.revision, undefined).metadata };
    }),
  };
  const leases = opts.leases;
  if (leases !== undefined) {
    impl['leaseGrant'] = unary<pb.LeaseGrantRequest, pb.LeaseGrantResponse.$Properties>('LeaseGrant', edge, async (req, call) => {
      const r = await leases.grant({ ttlSeconds: int64(req.ttlSeconds), id: req.id }, context(call, req.requestId));
      return { response: { id: r.id, ttlSeconds: r.ttlSeconds } };
    });
    impl['leaseRevoke'] = unary<pb.LeaseRevokeRequest, pb.LeaseRevokeResponse.$Properties>('LeaseRevoke', edge, async (req, call) => {
      const r = await leases.revoke(req.id, context(call, req.requestId));
      return { response: { id: r.id, deleted: r.deleted, revision: String(r.revision) }, metadata: freshness(r.revision, undefined).metadata };
    });
    impl['leaseTimeToLive'] = unary<pb.LeaseTimeToLiveRequest, pb.LeaseTimeToLiveResponse.$Properties>('LeaseTimeToLive', edge, async (req, call) => {
      const r = await leases.timeToLive(req.id, req.attached, context(call));
      return { response: { id: r.id, ttlSeconds: r.ttlSeconds, remainingSeconds: r.remainingSeconds, remainingMs: Math.floor(r.remainingMs), attached: (r.attached ?? []).map(idToMsg) } };
    });
    impl['leaseList'] = unary<pb.LeaseListRequest, pb.LeaseListResponse.$Properties>('LeaseList', edge, async (_req, call) => {
      const r = await leases.list(context(call));
      return { response: { leases: r.leases.map((l) => ({ id: l.id, ttlSeconds: l.ttlSeconds })) } };
    });
    impl['leaseKeepAlive'] = leaseKeepAlive(leases, edge);
  }
  impl['watchList'] = watchList(opts.watches, edge, false);
  // Left out, grpc-js answers UNIMPLEMENTED, as a server from before the method did.
  if (opts.batchedWatches !== false) impl['watchListBatched'] = watchList(opts.watches, edge, true);
  server.addService(serviceDefinition(opts.maxMessageBytes ?? MAX_PUBLIC_MESSAGE_BYTES), impl);
}
