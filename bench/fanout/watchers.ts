/**
 * Many watchers in one process: gRPC watch streams (several per connection, one connection per
 * `perChannel` watchers), Cairn's WatchList or etcd's Watch, or HTTP `POST /v1/watch` streams
 * (one connection each). Each records, per change event, its revision, when it arrived and how
 * many bytes it took; nothing else of the event is decoded (see wire.ts).
 */
import http from 'node:http';
import * as grpc from '@grpc/grpc-js';
import { cairn } from '../../src/gen/resource.js';
import { monoMs } from './clock.js';
import type { DeliveryLog } from './stats.js';
import { decodeCairnWatchBatch, decodeCairnWatchMessage, decodeNdjsonHeader, EventKind, GRPC_MESSAGE_PREFIX_BYTES, LineSplitter, type WatchMessage } from './wire.js';

export const ARTIST = 'demo.v1.Artist';
const CAIRN_SERVICE = '/cairn.resource.v1.ResourceService';

export type Transport = 'grpc' | 'http';

/** What all the watchers of a pool received, whatever the revision. */
export interface WatcherTotals {
  readonly messages: number;
  readonly bytes: number;
  readonly changes: number;
  /** Bytes of the change and delete events alone. */
  readonly changeBytes: number;
  readonly bookmarks: number;
  /** A stream's change revisions went down or repeated: must be 0 (API.md "Watch"). */
  readonly orderViolations: number;
  /** Streams that ended before the pool closed them, by code (SLOW_CONSUMER, UNAVAILABLE, ...). */
  readonly ended: Readonly<Record<string, number>>;
}

export interface WatcherPool {
  readonly transport: Transport;
  readonly size: number;
  /** Starts every stream (live events only: `at_tail`, no initial state). */
  open(): void;
  /** Streams still open (not ended by the server or an error). */
  openStreams(): number;
  /** Watchers the server has confirmed as registered (etcd's `created`); 0 where the protocol says nothing. */
  confirmed(): number;
  /** The lowest last-received change revision over the open streams (0 when none received). */
  minLastRevision(): number;
  /** Streams that missed a write between the first and the last change they received (`Streams.gaps`). */
  gaps(writeRevisions: readonly number[]): number;
  totals(): WatcherTotals;
  /** Cancels every stream and closes the connections. */
  close(): void;
}

/** Per-stream bookkeeping shared by every transport (exported for tests and fake pools). */
export class Streams {
  readonly lastRevision: Float64Array;
  /** The first change revision each stream received (0: none yet) and how many changes it received. */
  readonly firstRevision: Float64Array;
  readonly received: Uint32Array;
  readonly open: Uint8Array;
  messages = 0;
  bytes = 0;
  changes = 0;
  changeBytes = 0;
  bookmarks = 0;
  orderViolations = 0;
  created = 0;
  closing = false;
  readonly ended: Record<string, number> = {};

  constructor(
    readonly size: number,
    private readonly log: DeliveryLog,
  ) {
    this.lastRevision = new Float64Array(size);
    this.firstRevision = new Float64Array(size);
    this.received = new Uint32Array(size);
    this.open = new Uint8Array(size);
  }

  receive(i: number, m: WatchMessage, atMs: number): void {
    this.messages++;
    this.bytes += m.bytes;
    if (m.created) this.created++;
    if (m.bookmark) this.bookmarks++;
    const n = m.changes.length;
    if (n > 0) {
      // Several changes in one message share its bytes.
      const each = m.bytes / n;
      for (let k = 0; k < n; k++) {
        const revision = m.changes[k] as number;
        this.changes++;
        this.changeBytes += each;
        if (revision <= (this.lastRevision[i] as number)) this.orderViolations++;
        if (this.firstRevision[i] === 0) this.firstRevision[i] = revision;
        this.received[i] = (this.received[i] as number) + 1;
        this.lastRevision[i] = revision;
        this.log.push(revision, atMs, each);
      }
    }
    if (m.canceled) this.end(i, 'CANCELED');
  }

  end(i: number, code: string): void {
    if (this.open[i] === 0) return;
    this.open[i] = 0;
    if (!this.closing) this.ended[code] = (this.ended[code] ?? 0) + 1;
  }

  openCount(): number {
    let n = 0;
    for (let i = 0; i < this.size; i++) n += this.open[i] as number;
    return n;
  }

  /**
   * Streams with a gap: fewer changes received than the writer's writes from the stream's
   * first change to its last (every write of the phase is a change every watcher matches, so a
   * stream that lost none has them all in between; one ended early has a prefix, no gap).
   * `writeRevisions`: every write's revision, ascending. Order violations are counted apart.
   */
  gaps(writeRevisions: readonly number[]): number {
    const atOrBelow = (r: number): number => {
      let lo = 0;
      let hi = writeRevisions.length;
      while (lo < hi) {
        const mid = (lo + hi) >>> 1;
        if ((writeRevisions[mid] as number) <= r) lo = mid + 1;
        else hi = mid;
      }
      return lo;
    };
    let gapped = 0;
    for (let i = 0; i < this.size; i++) {
      const n = this.received[i] as number;
      if (n === 0) continue;
      const expected = atOrBelow(this.lastRevision[i] as number) - atOrBelow((this.firstRevision[i] as number) - 1);
      if (n < expected) gapped++;
    }
    return gapped;
  }

  minLast(): number {
    let min = Number.POSITIVE_INFINITY;
    for (let i = 0; i < this.size; i++) if (this.open[i] === 1) min = Math.min(min, this.lastRevision[i] as number);
    return Number.isFinite(min) ? min : 0;
  }

  totals(): WatcherTotals {
    return { messages: this.messages, bytes: this.bytes, changes: this.changes, changeBytes: this.changeBytes, bookmarks: this.bookmarks, orderViolations: this.orderViolations, ended: { ...this.ended } };
  }
}

/** How one system's gRPC watch stream is opened and read. */
export interface GrpcWatchProtocol {
  /** The method's path: /package.Service/Method. */
  readonly path: string;
  /**
   * A bidirectional method (etcd's Watch): the request is written on the open stream, which
   * stays open; otherwise (Cairn's WatchList) a server-streaming call with the request.
   */
  readonly bidi: boolean;
  /** The encoded request message that starts the watch. */
  readonly request: Buffer;
  /** Reads one received message (the bytes without gRPC's prefix). */
  decode(buf: Buffer): WatchMessage;
  /** The error code to count a stream under when the server ends it with an error. */
  codeOf?(e: grpc.ServiceError): string;
}

/**
 * Cairn's watch of one type in one namespace, live changes only (`at_tail`, no initial state):
 * WatchListBatched, the call Cairn's client uses, or (`batched` false, or the environment's
 * BENCH_CAIRN_WATCH_CALL=WatchList) WatchList, one event per message, for comparison.
 */
export function cairnWatchProtocol(type: string, namespace: string, batched = process.env['BENCH_CAIRN_WATCH_CALL'] !== 'WatchList'): GrpcWatchProtocol {
  const req = cairn.resource.v1.WatchListRequest.create({ watches: [{ type, tenancy: { partition: 'default', namespace }, atTail: true }] });
  return {
    path: `${CAIRN_SERVICE}/${batched ? 'WatchListBatched' : 'WatchList'}`,
    bidi: false,
    request: Buffer.from(cairn.resource.v1.WatchListRequest.encode(req).finish()),
    decode: batched ? decodeCairnWatchBatch : decodeCairnWatchMessage,
    codeOf: (e) => {
      const cairnCode = e.metadata?.get('cairn-error-code')[0];
      return typeof cairnCode === 'string' ? cairnCode : (grpc.status[e.code] ?? String(e.code));
    },
  };
}

export class GrpcWatcherPool implements WatcherPool {
  readonly transport = 'grpc' as const;
  private readonly streams: Streams;
  private readonly clients: grpc.Client[] = [];
  private readonly calls: (grpc.ClientReadableStream<WatchMessage> | grpc.ClientDuplexStream<Buffer, WatchMessage>)[] = [];

  constructor(
    private readonly address: string,
    readonly size: number,
    log: DeliveryLog,
    private readonly protocol: GrpcWatchProtocol = cairnWatchProtocol(ARTIST, 'default'),
    private readonly perChannel = 500,
    /** 'grpc-node.flow_control_window' of each connection (bytes); default HTTP/2's 65,535. */
    private readonly flowControlWindowBytes?: number,
  ) {
    this.streams = new Streams(size, log);
  }

  open(): void {
    const { path, request, decode, bidi } = this.protocol;
    const codeOf = this.protocol.codeOf ?? ((e: grpc.ServiceError): string => grpc.status[e.code] ?? String(e.code));
    const identity = (b: Buffer): Buffer => b;
    for (let i = 0; i < this.size; i++) {
      const c = Math.floor(i / this.perChannel);
      if (c === this.clients.length) {
        // A local subchannel pool per client: its own HTTP/2 connection, where equal channel
        // options would otherwise share one process-wide.
        this.clients.push(
          new grpc.Client(this.address, grpc.credentials.createInsecure(), {
            'grpc.use_local_subchannel_pool': 1,
            'grpc.max_receive_message_length': 64 * 1024 * 1024,
            ...(this.flowControlWindowBytes !== undefined ? { 'grpc-node.flow_control_window': this.flowControlWindowBytes } : {}),
          }),
        );
      }
      const client = this.clients[c] as grpc.Client;
      let call: grpc.ClientReadableStream<WatchMessage> | grpc.ClientDuplexStream<Buffer, WatchMessage>;
      if (bidi) {
        const duplex = client.makeBidiStreamRequest<Buffer, WatchMessage>(path, identity, decode, new grpc.Metadata(), {});
        // The request side stays open: etcd ends a watch stream whose client has closed its side.
        duplex.write(request);
        call = duplex;
      } else {
        call = client.makeServerStreamRequest<Buffer, WatchMessage>(path, identity, decode, request, new grpc.Metadata(), {});
      }
      this.streams.open[i] = 1;
      call.on('data', (m: WatchMessage) => this.streams.receive(i, m, monoMs()));
      call.on('error', (e: grpc.ServiceError) => this.streams.end(i, codeOf(e)));
      call.on('end', () => this.streams.end(i, 'ENDED'));
      this.calls.push(call);
    }
  }

  openStreams(): number {
    return this.streams.openCount();
  }

  confirmed(): number {
    return this.streams.created;
  }

  minLastRevision(): number {
    return this.streams.minLast();
  }

  gaps(writeRevisions: readonly number[]): number {
    return this.streams.gaps(writeRevisions);
  }

  totals(): WatcherTotals {
    return this.streams.totals();
  }

  close(): void {
    this.streams.closing = true;
    for (const call of this.calls) call.cancel();
    for (const c of this.clients) c.close();
  }
}

export class HttpWatcherPool implements WatcherPool {
  readonly transport = 'http' as const;
  private readonly streams: Streams;
  private readonly requests: http.ClientRequest[] = [];

  constructor(
    private readonly baseUrl: string,
    readonly size: number,
    log: DeliveryLog,
  ) {
    this.streams = new Streams(size, log);
  }

  open(): void {
    const body = JSON.stringify([{ type: ARTIST, at_tail: true }]);
    const url = new URL('/v1/watch', this.baseUrl);
    for (let i = 0; i < this.size; i++) {
      // agent: false: a connection of its own per watcher, as separate clients would have.
      const req = http.request(url, { method: 'POST', agent: false, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } });
      this.streams.open[i] = 1;
      req.on('response', (res) => {
        if (res.statusCode !== 200) {
          this.streams.end(i, `HTTP_${res.statusCode ?? 0}`);
          res.resume();
          return;
        }
        const lines = new LineSplitter();
        res.on('data', (chunk: Buffer) => {
          const at = monoMs();
          for (const line of lines.push(chunk.toString('utf8'))) {
            if (line === '') continue;
            const h = decodeNdjsonHeader(line);
            // The line and its newline; watch lines are ASCII unless the data is not.
            const change = h.kind === EventKind.change || h.kind === EventKind.delete;
            this.streams.receive(i, { bytes: line.length + 1, changes: change ? [h.revision] : [], bookmark: h.kind === EventKind.bookmark, created: false, canceled: false }, at);
            if (h.kind === EventKind.error) this.streams.end(i, /"code":"([A-Z_]+)"/.exec(line)?.[1] ?? 'ERROR');
          }
        });
        res.on('end', () => this.streams.end(i, 'ENDED'));
        res.on('error', () => this.streams.end(i, 'CONNECTION'));
      });
      req.on('error', (e: NodeJS.ErrnoException) => this.streams.end(i, e.code ?? 'CONNECTION'));
      req.end(body);
      this.requests.push(req);
    }
  }

  openStreams(): number {
    return this.streams.openCount();
  }

  confirmed(): number {
    return 0;
  }

  minLastRevision(): number {
    return this.streams.minLast();
  }

  gaps(writeRevisions: readonly number[]): number {
    return this.streams.gaps(writeRevisions);
  }

  totals(): WatcherTotals {
    return this.streams.totals();
  }

  close(): void {
    this.streams.closing = true;
    for (const r of this.requests) r.destroy();
  }
}

/**
 * The bytes of one List response for the watched data set, as a poller would receive it:
 * the gRPC message plus its 5-byte prefix, or the HTTP body.
 */
export async function listResponseBytes(transport: Transport, grpcAddress: string, httpUrl: string): Promise<{ bytes: number; resources: number }> {
  if (transport === 'http') {
    const r = await fetch(new URL(`/v1/resources/${ARTIST}?namespace=default`, httpUrl), { signal: AbortSignal.timeout(30_000) });
    const buf = Buffer.from(await r.arrayBuffer());
    if (r.status !== 200) throw new Error(`HTTP List answered ${r.status}: ${buf.toString('utf8', 0, 200)}`);
    const parsed = JSON.parse(buf.toString('utf8')) as { resources: unknown[] };
    return { bytes: buf.length, resources: parsed.resources.length };
  }
  const pb = cairn.resource.v1;
  const client = new grpc.Client(grpcAddress, grpc.credentials.createInsecure(), { 'grpc.max_receive_message_length': 64 * 1024 * 1024 });
  try {
    const req = Buffer.from(pb.ListRequest.encode(pb.ListRequest.create({ type: ARTIST, tenancy: { partition: 'default', namespace: 'default' } })).finish());
    const buf = await new Promise<Buffer>((resolve, reject) => {
      client.makeUnaryRequest<Buffer, Buffer>('/cairn.resource.v1.ResourceService/List', (b) => b, (b) => b, req, new grpc.Metadata(), { deadline: Date.now() + 30_000 }, (err, value) => {
        if (err || value === undefined) reject(err ?? new Error('List: no answer'));
        else resolve(value);
      });
    });
    return { bytes: buf.length + GRPC_MESSAGE_PREFIX_BYTES, resources: pb.ListResponse.decode(buf).resources.length };
  } finally {
    client.close();
  }
}
