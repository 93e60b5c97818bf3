/**
 * A minimal etcd v3 client for the benchmark: KV Range/Put/Txn and Maintenance Status over
 * @grpc/grpc-js, with the message codecs built at run time by protobufjs from bench/etcd/rpc.proto
 * (a hand-written subset of etcd's); and, for the watch fan-out phase, the Watch API's create
 * request and a cheap reader of its responses (the streams themselves are opened by
 * bench/fanout/watchers.ts, many per connection). One gRPC channel (one HTTP/2 connection) per endpoint,
 * shared by every worker that talks to it, as etcd's clientv3 does; no retries, no failover:
 * the benchmark decides what to do with an error.
 */
import * as grpc from '@grpc/grpc-js';
import protobuf from 'protobufjs';
import { fileURLToPath } from 'node:url';
import type { GrpcWatchProtocol } from './fanout/watchers.js';
import { GRPC_MESSAGE_PREFIX_BYTES, type WatchMessage } from './fanout/wire.js';

/** dist/bench/etcd-client.js -> bench/etcd/rpc.proto in the checkout. */
const PROTO = fileURLToPath(new URL('../../bench/etcd/rpc.proto', import.meta.url));

const root = new protobuf.Root().loadSync(PROTO, { keepCase: true });
const type = (name: string): protobuf.Type => root.lookupType(`etcdserverpb.${name}`);

/** An int64/uint64 as protobufjs decodes it: a number, or a Long when the value needs 64 bits. */
type Int64 = number | LongLike;
/** The part of long.js's Long used here (uint64 fields decode as unsigned Longs). */
interface LongLike {
  toNumber(): number;
  toString(): string;
}

interface KeyValueMsg {
  key: Uint8Array;
  mod_revision: Int64;
  version: Int64;
  value: Uint8Array;
}
interface HeaderMsg {
  member_id: Int64;
  revision: Int64;
  raft_term: Int64;
}
interface RangeResponseMsg {
  header: HeaderMsg | null;
  kvs: KeyValueMsg[];
}
interface PutResponseMsg {
  header: HeaderMsg | null;
}
interface TxnResponseMsg {
  header: HeaderMsg | null;
  succeeded: boolean;
}
interface StatusResponseMsg {
  header: HeaderMsg | null;
  version: string;
  leader: Int64;
  raftTerm: Int64;
  raftIndex: Int64;
  raftAppliedIndex: Int64;
}

export const int64 = (v: Int64 | null | undefined): number => (v === null || v === undefined ? 0 : typeof v === 'number' ? v : v.toNumber());
const idString = (v: Int64 | null | undefined): string => (v === null || v === undefined ? '0' : typeof v === 'number' ? String(v) : v.toString());

interface Method<Res> {
  readonly path: string;
  serialize(m: object): Buffer;
  deserialize(b: Buffer): Res;
}

function method<Res>(service: string, name: string, req: string, res: string): Method<Res> {
  const reqType = type(req);
  const resType = type(res);
  return {
    path: `/etcdserverpb.${service}/${name}`,
    serialize: (m) => Buffer.from(reqType.encode(m).finish()),
    deserialize: (b) => resType.decode(b) as unknown as Res,
  };
}

const M = {
  range: method<RangeResponseMsg>('KV', 'Range', 'RangeRequest', 'RangeResponse'),
  put: method<PutResponseMsg>('KV', 'Put', 'PutRequest', 'PutResponse'),
  txn: method<TxnResponseMsg>('KV', 'Txn', 'TxnRequest', 'TxnResponse'),
  status: method<StatusResponseMsg>('Maintenance', 'Status', 'StatusRequest', 'StatusResponse'),
} as const;

/** Compare.CompareResult.EQUAL and Compare.CompareTarget.MOD. */
const EQUAL = 0;
const MOD = 2;

export interface EtcdStatus {
  /** The answering member's id (decimal). */
  readonly memberId: string;
  /** The leader's member id as this member knows it ('0': none). */
  readonly leader: string;
  readonly raftTerm: number;
  readonly raftIndex: number;
  readonly raftAppliedIndex: number;
  readonly version: string;
}

/** The byte sizes of one CAS round's messages as encoded on the wire (protobuf, before gRPC framing). */
export function etcdMessageSizes(key: Uint8Array, value: Uint8Array): { readonly rangeRequest: number; readonly txnRequest: number } {
  return {
    rangeRequest: M.range.serialize({ key }).length,
    txnRequest: M.txn.serialize(casTxn(key, 12345678, value)).length,
  };
}

function casTxn(key: Uint8Array, modRevision: Int64, value: Uint8Array): object {
  return { compare: [{ result: EQUAL, target: MOD, key, mod_revision: modRevision }], success: [{ request_put: { key, value } }] };
}

/** One etcd endpoint (host:port of its client URL). */
export class EtcdKv {
  private readonly client: grpc.Client;

  constructor(
    readonly address: string,
    private readonly timeoutMs = 10_000,
    /** TLS to an etcd started with --cert-file etc.; default plaintext. */
    credentials: grpc.ChannelCredentials = grpc.credentials.createInsecure(),
  ) {
    this.client = new grpc.Client(address, credentials, { 'grpc.max_receive_message_length': 64 * 1024 * 1024 });
  }

  private call<Res>(m: Method<Res>, req: object, timeoutMs = this.timeoutMs): Promise<Res> {
    return new Promise((resolve, reject) => {
      this.client.makeUnaryRequest<object, Res>(m.path, m.serialize, m.deserialize, req, new grpc.Metadata(), { deadline: Date.now() + timeoutMs }, (err, value) => {
        if (err) reject(err);
        else if (value === undefined) reject(new Error(`${m.path}: empty answer from ${this.address}`));
        else resolve(value);
      });
    });
  }

  /** Range over one key, linearizable (etcd's default) unless `serializable`. Undefined when absent. */
  async get(key: Uint8Array, opts: { readonly serializable?: boolean; readonly timeoutMs?: number } = {}): Promise<{ readonly modRevision: Int64; readonly value: Uint8Array } | undefined> {
    const res = await this.call(M.range, { key, serializable: opts.serializable === true }, opts.timeoutMs);
    const kv = res.kvs[0];
    return kv === undefined ? undefined : { modRevision: kv.mod_revision, value: kv.value };
  }

  /** Unconditional Put; the store revision it created. */
  async put(key: Uint8Array, value: Uint8Array, timeoutMs?: number): Promise<number> {
    const res = await this.call(M.put, { key, value }, timeoutMs);
    return int64(res.header?.revision);
  }

  /** Puts every pair in one Txn (no compare; etcd's --max-txn-ops, default 128, bounds how many); the store revision it created. */
  async putMany(pairs: readonly { readonly key: Uint8Array; readonly value: Uint8Array }[], timeoutMs?: number): Promise<number> {
    const res = await this.call(M.txn, { compare: [], success: pairs.map((p) => ({ request_put: { key: p.key, value: p.value } })) }, timeoutMs);
    return int64(res.header?.revision);
  }

  /** Txn: if the key's mod_revision equals `modRevision`, Put. True when applied, false on a conflict. */
  async casPut(key: Uint8Array, modRevision: Int64, value: Uint8Array, timeoutMs?: number): Promise<boolean> {
    const res = await this.call(M.txn, casTxn(key, modRevision, value), timeoutMs);
    return res.succeeded;
  }

  async status(timeoutMs = 1000): Promise<EtcdStatus> {
    const res = await this.call(M.status, {}, timeoutMs);
    return {
      memberId: idString(res.header?.member_id),
      leader: idString(res.leader),
      raftTerm: int64(res.raftTerm),
      raftIndex: int64(res.raftIndex),
      raftAppliedIndex: int64(res.raftAppliedIndex),
      version: res.version,
    };
  }

  close(): void {
    this.client.close();
  }
}

// ---- Watch -------------------------------------------------------------------------------------

/** etcd's Watch method: a bidirectional stream of WatchRequest / WatchResponse. */
export const ETCD_WATCH_PATH = '/etcdserverpb.Watch/Watch';

/** The end of etcd's range for "every key starting with `prefix`": the prefix with its last byte plus one (clientv3's GetPrefixRangeEnd). */
export function prefixRangeEnd(prefix: Uint8Array): Uint8Array {
  const end = Uint8Array.from(prefix);
  for (let i = end.length - 1; i >= 0; i--) {
    if ((end[i] as number) < 0xff) {
      end[i] = (end[i] as number) + 1;
      return end.subarray(0, i + 1);
    }
  }
  return new Uint8Array([0]); // every byte 0xff: to the end of the keyspace
}

/** The encoded WatchRequest that creates a watcher of every key under `prefix`, live changes only (no start revision). */
export function etcdWatchCreateRequest(prefix: Uint8Array): Buffer {
  return Buffer.from(type('WatchRequest').encode({ create_request: { key: prefix, range_end: prefixRangeEnd(prefix) } }).finish());
}

/** etcd watchers of every key under `prefix`, live changes only, one watcher per stream (bench/fanout/watchers.ts). */
export function etcdWatchProtocol(prefix: Uint8Array): GrpcWatchProtocol {
  return { path: ETCD_WATCH_PATH, bidi: true, request: etcdWatchCreateRequest(prefix), decode: decodeEtcdWatchResponse };
}

/** Encodes a WatchResponse (for tests: what an etcd server sends). */
export function encodeEtcdWatchResponse(m: object): Buffer {
  return Buffer.from(type('WatchResponse').encode(m).finish());
}

const NO_REVISIONS: readonly number[] = [];

/**
 * What the benchmark needs of an etcd WatchResponse, read from its tags without building
 * objects: created, canceled, and each event's revision (Event.kv.mod_revision). Ten thousand
 * watchers at 200 changes/s are two million messages a second; decoding whole messages with
 * protobufjs would measure the load generator. Throws on bytes that are not a WatchResponse.
 */
export function decodeEtcdWatchResponse(buf: Uint8Array): WatchMessage {
  let created = false;
  let canceled = false;
  let changes: number[] | undefined;
  const r = new Skim(buf, 0, buf.length);
  while (r.more()) {
    const tag = r.varint();
    const field = Math.floor(tag / 8);
    if (field === 3 && (tag & 7) === 0) created = r.varint() !== 0;
    else if (field === 4 && (tag & 7) === 0) canceled = r.varint() !== 0;
    else if (field === 11 && (tag & 7) === 2) {
      const len = r.varint();
      (changes ??= []).push(eventRevision(buf, r.pos, r.pos + len));
      r.pos += len;
    } else r.skip(tag & 7, field);
  }
  return { bytes: buf.length + GRPC_MESSAGE_PREFIX_BYTES, changes: changes ?? NO_REVISIONS, bookmark: false, created, canceled };
}

/** Event.kv (2) -> KeyValue.mod_revision (3) of the Event in buf[from, to). */
function eventRevision(buf: Uint8Array, from: number, to: number): number {
  const e = new Skim(buf, from, to);
  while (e.more()) {
    const tag = e.varint();
    if (tag === ((2 << 3) | 2)) {
      const len = e.varint();
      const kv = new Skim(buf, e.pos, e.pos + len);
      while (kv.more()) {
        const t = kv.varint();
        if (t === ((3 << 3) | 0)) return kv.varint();
        kv.skip(t & 7, Math.floor(t / 8));
      }
      throw new Error('etcd WatchResponse: an event\'s kv has no mod_revision');
    }
    e.skip(tag & 7, Math.floor(tag / 8));
  }
  throw new Error('etcd WatchResponse: an event has no kv');
}

/** A protobuf reader over buf[pos, end): varints and skipping, nothing more. */
class Skim {
  constructor(
    private readonly buf: Uint8Array,
    public pos: number,
    private readonly end: number,
  ) {
    if (end > buf.length) throw new Error(`etcd WatchResponse: a field runs past the end (${end} > ${buf.length})`);
  }

  more(): boolean {
    if (this.pos > this.end) throw new Error(`etcd WatchResponse: a field runs past the end (${this.pos} > ${this.end})`);
    return this.pos < this.end;
  }

  varint(): number {
    let v = 0;
    for (let shift = 0; ; shift += 7) {
      if (this.pos >= this.end || shift > 49) throw new Error(`etcd WatchResponse: bad varint at byte ${this.pos}`);
      const b = this.buf[this.pos++] as number;
      v += (b & 0x7f) * 2 ** shift;
      if (b < 0x80) return v;
    }
  }

  skip(wire: number, field: number): void {
    switch (wire) {
      case 0:
        this.varint();
        return;
      case 1:
        this.pos += 8;
        return;
      case 2: {
        // Not `this.pos += this.varint()`: that adds the length to the position before the varint was read.
        const len = this.varint();
        this.pos += len;
        return;
      }
      case 5:
        this.pos += 4;
        return;
      default:
        throw new Error(`etcd WatchResponse: unsupported wire type ${wire} (field ${field})`);
    }
  }
}
