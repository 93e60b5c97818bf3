import type * as grpc from '@grpc/grpc-js';
import type { Logger, NodeId } from '../base/index.js';
import type { Message } from '../raft/index.js';
import type { Transport } from '../replica/index.js';
import { encodeMessage } from './codec.js';
import type { ClientPool, RaftBatchMsg } from './grpc-defs.js';

export interface GrpcTransportOptions {
  readonly self: NodeId;
  /** This node's cluster id (sent with every batch). */
  readonly clusterId: () => string;
  /** Where a peer is reached (the cluster address in the Raft configuration). */
  readonly addressOf: (id: NodeId) => string | undefined;
  readonly pool: ClientPool;
  readonly logger: Logger;
  /** Bytes queued per peer before the oldest messages are dropped (Raft re-sends). Default 64 MiB. */
  readonly maxQueueBytes?: number;
  /** Bytes per streamed batch. Default 4 MiB. */
  readonly maxBatchBytes?: number;
}

/**
 * Raft's transport over the cluster port: one long-lived client stream per peer, the messages
 * of each `send` for one peer written as one batch right away, order kept per peer. Delivery is best-effort: when a peer is
 * unreachable its queue is dropped and the stream re-opened after a backoff; Raft re-sends.
 */
export class GrpcTransport implements Transport {
  private handler: ((m: Message) => void) | undefined;
  private lostHandler: ((peer: NodeId) => void) | undefined;
  private readonly links = new Map<NodeId, PeerLink>();
  private closed = false;
  sentMessages = 0;
  droppedMessages = 0;

  constructor(private readonly opts: GrpcTransportOptions) {}

  /**
   * Sends `messages` now: every message for the same peer goes out in one batch, written to that
   * peer's stream before this returns (no deferral to a later turn: the driver calls this once
   * or twice per Ready with all of its messages, so the batching is already done). HTTP/2 then
   * puts the frames on the socket in this loop iteration's check phase (Node's http2 session
   * schedules its socket write as a native immediate). A peer whose stream is not draining
   * keeps them queued, within `maxQueueBytes`.
   */
  send(messages: readonly Message[]): void {
    if (this.closed) return;
    let touched: PeerLink | PeerLink[] | undefined;
    for (const m of messages) {
      if (m.to === this.opts.self) {
        // Never happens with a correct core; deliver locally rather than over the wire.
        queueMicrotask(() => this.handler?.(m));
        continue;
      }
      let link = this.links.get(m.to);
      if (!link) {
        link = new PeerLink(m.to, this.opts, this);
        this.links.set(m.to, link);
      }
      link.enqueue(encodeMessage(m));
      // Usually one or two peers: no Set for them.
      if (touched === undefined) touched = link;
      else if (touched !== link) {
        if (!Array.isArray(touched)) touched = [touched];
        if (!touched.includes(link)) touched.push(link);
      }
    }
    if (touched === undefined) return;
    if (Array.isArray(touched)) for (const l of touched) l.flush();
    else touched.flush();
  }

  /** Bytes of encoded messages waiting in this node's per-peer queues (not yet handed to gRPC). */
  queuedBytes(): number {
    let n = 0;
    for (const l of this.links.values()) n += l.queuedBytes;
    return n;
  }

  onMessage(handler: (m: Message) => void): void {
    this.handler = handler;
  }

  /** A validated message from the cluster service. */
  deliver(m: Message): void {
    if (this.closed) return;
    this.links.get(m.from)?.heardFrom();
    this.handler?.(m);
  }

  onConnectionLost(handler: (peer: NodeId) => void): void {
    this.lostHandler = handler;
  }

  /**
   * From the cluster service: `peer`'s Raft stream to us broke before the peer ended it (the
   * connection was reset or closed under it). Only this side can tell: grpc-js reports a
   * keepalive timeout on an outgoing stream exactly as it reports a reset, and a peer that
   * is merely paused must be left to the election timeout.
   */
  connectionLost(peer: NodeId): void {
    if (!this.closed) this.lostHandler?.(peer);
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const l of this.links.values()) l.close();
    this.links.clear();
  }
}

class PeerLink {
  private queue: Uint8Array[] = [];
  queuedBytes = 0;
  private stream: grpc.ClientWritableStream<RaftBatchMsg> | undefined;
  private address: string | undefined;
  private waitingDrain = false;
  private retryAt = 0;
  private backoffMs = 50;
  private closed = false;
  private lastWarn = 0;

  constructor(
    private readonly peer: NodeId,
    private readonly opts: GrpcTransportOptions,
    private readonly owner: GrpcTransport,
  ) {}

  enqueue(buf: Uint8Array): void {
    if (this.closed) return;
    this.queue.push(buf);
    this.queuedBytes += buf.length;
    const max = this.opts.maxQueueBytes ?? 64 * 1024 * 1024;
    while (this.queuedBytes > max && this.queue.length > 1) {
      const dropped = this.queue.shift() as Uint8Array;
      this.queuedBytes -= dropped.length;
      this.owner.droppedMessages++;
    }
  }

  /**
   * Writes what is queued, as batches of at most `maxBatchBytes`, unless the stream is waiting
   * for 'drain' (then the queue waits, bounded by `maxQueueBytes`, and goes out on 'drain').
   */
  flush(): void {
    if (this.closed || this.waitingDrain || this.queue.length === 0) return;
    const now = Date.now();
    if (now < this.retryAt) {
      // Peer recently unreachable: drop what is queued (Raft re-sends) until the retry time.
      this.owner.droppedMessages += this.queue.length;
      this.queue = [];
      this.queuedBytes = 0;
      return;
    }
    const stream = this.ensureStream();
    if (!stream) return;
    const maxBatch = this.opts.maxBatchBytes ?? 4 * 1024 * 1024;
    while (this.queue.length > 0) {
      const batch: Uint8Array[] = [];
      let bytes = 0;
      while (this.queue.length > 0 && (batch.length === 0 || bytes + (this.queue[0] as Uint8Array).length <= maxBatch)) {
        const m = this.queue.shift() as Uint8Array;
        bytes += m.length;
        batch.push(m);
      }
      this.queuedBytes -= bytes;
      this.owner.sentMessages += batch.length;
      const ok = stream.write({ clusterId: this.opts.clusterId(), from: this.opts.self, to: this.peer, messages: batch });
      if (!ok) {
        this.waitingDrain = true;
        stream.once('drain', () => {
          this.waitingDrain = false;
          this.flush();
        });
        return;
      }
    }
  }

  private ensureStream(): grpc.ClientWritableStream<RaftBatchMsg> | undefined {
    const address = this.opts.addressOf(this.peer);
    if (!address) {
      this.queue = [];
      this.queuedBytes = 0;
      return undefined;
    }
    if (this.stream && this.address === address) return this.stream;
    this.endStream();
    this.address = address;
    const stream = this.opts.pool.get(address).raft((err) => {
      if (this.stream !== stream) return;
      this.stream = undefined;
      this.waitingDrain = false;
      if (err) this.onError(err);
    });
    stream.on('error', () => {
      // Reported through the callback above as well; this keeps an unhandled 'error' away.
    });
    this.stream = stream;
    return stream;
  }

  private onError(err: grpc.ServiceError): void {
    this.retryAt = Date.now() + this.backoffMs;
    this.backoffMs = Math.min(this.backoffMs * 2, 1000);
    const now = Date.now();
    if (now - this.lastWarn > 5000) {
      this.lastWarn = now;
      this.opts.logger.warn({ peer: this.peer, address: this.address, code: err.code, err: err.details }, 'raft stream to peer failed; retrying');
    }
    if (this.queue.length > 0) setTimeout(() => this.flush(), this.backoffMs).unref();
    else this.backoffMs = Math.max(50, this.backoffMs);
  }

  /**
   * The peer just sent us a message, so it is up (a restarted peer, say): end the backoff,
   * so that our answer goes out now rather than being dropped until the retry time. An answer
   * to a vote request is sent once; losing it stalls an election until its timeout.
   */
  heardFrom(): void {
    this.retryAt = 0;
    this.backoffMs = 50;
  }

  close(): void {
    this.closed = true;
    this.endStream();
    this.queue = [];
    this.queuedBytes = 0;
  }

  /**
   * Ends the stream with a goodbye first (an empty batch): the peer then knows the end is ours
   * on purpose, not the connection breaking under the stream (which it reports to Raft as a
   * lost connection).
   */
  private endStream(): void {
    const stream = this.stream;
    if (!stream) return;
    this.stream = undefined;
    stream.write({ clusterId: this.opts.clusterId(), from: this.opts.self, to: this.peer, messages: [] });
    stream.end();
  }
}
