import * as grpc from '@grpc/grpc-js';
import type { PeerCertificate } from 'node:tls';
import { CairnError, ErrorCode, isCairnError, parseErrorCode, type Logger, type NodeId } from '../base/index.js';
import { parseConfigChange, type ConfigChange } from '../raft/index.js';
import type { Coordinator } from '../replica/index.js';
import { WireError, decodeMessage, packValue, unpackValue } from './codec.js';
import type { ForwardRequestMsg, ForwardResponseMsg, HelloRequestMsg, HelloResponseMsg, RaftAckMsg, RaftBatchMsg } from './grpc-defs.js';
import type { GrpcTransport } from './grpc-transport.js';
import { clusterServiceDefinition } from './grpc-defs.js';

/** What a server call tells about its transport: the peer's verified TLS certificate, if any. */
export interface PeerCall {
  getAuthContext(): { readonly sslPeerCertificate?: PeerCertificate | undefined };
}

export interface ClusterServiceOptions {
  readonly self: NodeId;
  readonly advertiseAddr: string;
  /** This node's HTTP/JSON API address as peers should use it (Hello answers it); undefined until it listens. */
  readonly httpAddress?: () => string | undefined;
  /** This node's cluster id ('' before it belongs to one). */
  readonly clusterId: () => string;
  /** Present once the replica runs. */
  readonly coordinator: () => Coordinator | undefined;
  readonly transport: () => GrpcTransport | undefined;
  readonly bootstrapExpect: number;
  readonly logger: Logger;
  /** Told about every refused batch or message (for metrics). */
  readonly onRejected?: (reason: string) => void;
  /** True once this node is shutting down: the streams it cancels then are not peers' failures. */
  readonly stopping?: () => boolean;
  /**
   * With TLS (docs/security.md): the node id proven by the call's client certificate (verified
   * against the cluster CA by the TLS layer), or undefined when it presents none. When set,
   * Raft streams, Forward and Hello are served only to a caller whose certificate names the
   * node it claims to be (`from`); anything else is refused with UNAUTHENTICATED and counted.
   * Absent: the port runs without TLS and trusts the claim (an `--insecure` or loopback node).
   */
  readonly peerNodeId?: (call: PeerCall) => string | undefined;
  /**
   * May `peer` (the node the call claims to come from) have the leader perform `op`? Throws a
   * typed error (PERMISSION_DENIED) to refuse. Called for every Forward before anything is
   * proposed. Default: allow (what the request carries is still checked: `proposeLocal`,
   * `changeMembership`).
   * With TLS, `peer.claimedId` has been proven by the caller's node certificate before this is
   * asked (`peerNodeId`): a certificate from the cluster CA is what makes a process a node, so
   * it may forward and ask to join; the default allows that.
   */
  readonly authorizeForward?: (peer: { readonly claimedId: string }, op: 'envelope' | 'configChange' | 'transferTo' | 'lease') => void;
}

/**
 * The server side of the cluster service: receives Raft batches (validated message by
 * message; anything malformed, from another cluster, or for another node is dropped and
 * logged at a bounded rate), serves forwarded operations when leader, and answers Hello.
 */
export function addClusterService(server: grpc.Server, opts: ClusterServiceOptions): void {
  const log = new RateLimitedLog(opts.logger);
  const reject = (reason: string, fields: object): void => {
    opts.onRejected?.(reason);
    log.warn(reason, fields);
  };

  // Open Raft streams per peer: a peer is lost only when the last of them breaks. Another
  // stream under its name (a duplicate after a reconnect, or anything else that can reach this
  // port claiming to be it) ending says nothing about the peer while its own stream still runs.
  const openStreams = new Map<NodeId, number>();
  /** Whether the call may speak for node `from` (always, without TLS). */
  const authenticated = (call: PeerCall, from: string): boolean => {
    if (opts.peerNodeId === undefined) return true;
    const proven = opts.peerNodeId(call);
    return proven !== undefined && proven === from;
  };
  const unauthenticated = (what: string, from: string, call: PeerCall): grpc.ServiceError => {
    const proven = opts.peerNodeId?.(call);
    reject(`unauthenticated ${what}`, { from, proven: proven ?? 'no node certificate' });
    return Object.assign(new Error(`${what} refused: the caller ${proven === undefined ? 'presented no node certificate of this cluster' : `proved to be node ${proven}`}, not node ${JSON.stringify(from)}`), {
      code: grpc.status.UNAUTHENTICATED,
      details: `${what} needs a client certificate from the cluster CA naming the node it claims to be (${JSON.stringify(from)})`,
      metadata: new grpc.Metadata(),
    });
  };
  const raft: grpc.handleClientStreamingCall<RaftBatchMsg, RaftAckMsg> = (call, callback) => {
    let received = 0;
    let done = false;
    // The peer at the other end, once one of its batches was accepted.
    let peer: NodeId | undefined;
    // The peer said it is ending the stream (an empty batch), so the end is not a failure.
    let goodbye = false;
    let reported = false;
    // A stream that ends without the peer's goodbye broke under it: the connection was reset
    // or closed, which a peer's stream (it lives as long as the peer's process) only does when
    // the process is gone (a SIGKILLed process's connections are reset by its kernel at once).
    // Tell Raft, which may elect a new leader without waiting out the election timeout. grpc-js
    // reports such a break as 'end' (then 'cancelled'), the same as a peer's own end, hence the
    // goodbye. A paused process keeps its connections, and this side runs no keepalive, so a
    // pause never gets here; nor does our own shutdown, which cancels every stream.
    const ended = (): void => {
      if (reported || peer === undefined) return;
      reported = true;
      const left = (openStreams.get(peer) ?? 1) - 1;
      if (left > 0) openStreams.set(peer, left);
      else openStreams.delete(peer);
      if (goodbye || left > 0 || opts.stopping?.() === true) return;
      opts.transport()?.connectionLost(peer);
    };
    call.on('data', (batch: RaftBatchMsg) => {
      const ours = opts.clusterId();
      if (ours === '' || batch.clusterId !== ours) {
        reject('raft batch from another cluster', { from: batch.from, theirs: batch.clusterId, ours });
        if (!done) {
          done = true;
          callback({ code: grpc.status.PERMISSION_DENIED, details: `cluster id mismatch: this node belongs to ${JSON.stringify(ours)}` });
        }
        return;
      }
      if (batch.to !== opts.self) {
        reject('raft batch addressed to another node', { from: batch.from, to: batch.to });
        return;
      }
      const transport = opts.transport();
      if (peer === undefined) {
        if (!authenticated(call, batch.from)) {
          if (!done) {
            done = true;
            const err = unauthenticated('raft stream', batch.from, call);
            callback({ code: err.code, details: err.details });
          }
          return;
        }
        peer = batch.from as NodeId;
        openStreams.set(peer, (openStreams.get(peer) ?? 0) + 1);
      } else if (batch.from !== peer) {
        reject('raft batch from another peer on the same stream', { from: batch.from, first: peer });
        return;
      }
      if (batch.messages.length === 0) goodbye = true;
      for (const buf of batch.messages) {
        try {
          const m = decodeMessage(buf);
          if (m.from !== batch.from || m.to !== opts.self) {
            reject('raft message does not match its batch', { from: batch.from, msgFrom: m.from, to: m.to });
            continue;
          }
          received++;
          transport?.deliver(m);
        } catch (e) {
          if (!(e instanceof WireError)) throw e;
          reject('malformed raft message', { from: batch.from, err: e.message });
        }
      }
    });
    call.on('end', () => {
      ended();
      if (!done) {
        done = true;
        callback(null, { received });
      }
    });
    call.on('error', () => {
      done = true;
      ended();
    });
    call.on('cancelled', () => {
      done = true;
      ended();
    });
  };

  const forward: grpc.handleUnaryCall<ForwardRequestMsg, ForwardResponseMsg> = (call, callback) => {
    const req = call.request;
    const reply = (p: Promise<unknown>): void => {
      p.then(
        (result) => callback(null, { result: packValue(result ?? null) }),
        (e: unknown) => callback(null, { result: new Uint8Array(0), error: toErrorMsg(e) }),
      );
    };
    if (!authenticated(call, req.from)) {
      const err = unauthenticated('forward', req.from, call);
      callback({ code: err.code, details: err.details });
      return;
    }
    if (req.clusterId !== opts.clusterId() || opts.clusterId() === '') {
      reject('forward request from another cluster', { from: req.from });
      callback(null, { result: new Uint8Array(0), error: toErrorMsg(new CairnError(ErrorCode.UNAVAILABLE, 'cluster id mismatch')) });
      return;
    }
    const coordinator = opts.coordinator();
    if (!coordinator) {
      reply(Promise.reject(new CairnError(ErrorCode.UNAVAILABLE, `node ${opts.self} is starting`)));
      return;
    }
    const st = coordinator.status();
    if (st.role !== 'leader') {
      // Never forward further: the caller retries against the leader we name.
      reply(Promise.reject(new CairnError(ErrorCode.NOT_LEADER, `node ${opts.self} is not the leader`, { leader: st.leader })));
      return;
    }
    const timeoutMs = Math.max(1, Math.min(req.timeoutMs || 10_000, 60_000));
    try {
      if (req.op === 'envelope' || req.op === 'configChange' || req.op === 'transferTo' || req.op === 'lease') opts.authorizeForward?.({ claimedId: req.from }, req.op);
      switch (req.op) {
        case 'envelope':
          reply(coordinator.proposeLocal(req.envelope ?? new Uint8Array(0), timeoutMs));
          return;
        case 'configChange':
          reply(coordinator.changeMembership(decodeConfigChange(req.configChange ?? new Uint8Array(0)), timeoutMs));
          return;
        case 'transferTo':
          reply(coordinator.transferLeadership((req.transferTo ?? '') as NodeId | '', timeoutMs));
          return;
        case 'lease':
          // Decoded here, shape-checked by the api's handler (it came from the network).
          reply(coordinator.leaseRequest(unpackValue(req.lease ?? new Uint8Array(0)), timeoutMs));
          return;
        default:
          reply(Promise.reject(new CairnError(ErrorCode.INVALID_ARGUMENT, 'forward request names no operation')));
      }
    } catch (e) {
      reply(Promise.reject(e));
    }
  };

  const hello: grpc.handleUnaryCall<HelloRequestMsg, HelloResponseMsg> = (call, callback) => {
    // Hello tells the cluster id and members, and starts joins: only for proven nodes with TLS.
    if (!authenticated(call, call.request.from)) {
      const err = unauthenticated('hello', call.request.from, call);
      callback({ code: err.code, details: err.details });
      return;
    }
    const c = opts.coordinator();
    const st = c?.status();
    callback(null, {
      nodeId: opts.self,
      address: opts.advertiseAddr,
      clusterId: opts.clusterId(),
      term: st?.term ?? 0,
      leader: st?.leader ?? '',
      members: (st?.config.members ?? []).map((m) => ({ id: m.id, address: m.address, voter: m.suffrage === 'voter' })),
      bootstrapExpect: opts.bootstrapExpect,
      httpAddress: opts.httpAddress?.() ?? '',
    });
  };

  server.addService(clusterServiceDefinition, { raft, forward, hello });
}

function toErrorMsg(e: unknown): { code: string; message: string; details: Uint8Array } {
  if (isCairnError(e)) return { code: e.code, message: e.message, details: packValue(e.details) };
  const message = e instanceof Error ? e.message : String(e);
  return { code: ErrorCode.INTERNAL, message, details: packValue({}) };
}

export function fromErrorMsg(e: { code: string; message: string; details: Uint8Array }): CairnError {
  let details: Record<string, unknown> = {};
  try {
    const d = unpackValue(e.details);
    if (typeof d === 'object' && d !== null && !Array.isArray(d)) details = d as Record<string, unknown>;
  } catch {
    // details are optional; a malformed blob is ignored
  }
  return new CairnError(parseErrorCode(e.code), e.message, details);
}

/** A forwarded membership change: msgpack, then the one check every door uses (`parseConfigChange`). */
function decodeConfigChange(b: Uint8Array): ConfigChange {
  let v: unknown;
  try {
    v = unpackValue(b);
  } catch {
    throw new CairnError(ErrorCode.INVALID_ARGUMENT, 'refused a membership change: it is not msgpack');
  }
  return parseConfigChange(v);
}

/** Logs each distinct reason at most once per interval, with a count of what was suppressed. */
class RateLimitedLog {
  private readonly last = new Map<string, { at: number; suppressed: number }>();
  constructor(private readonly logger: Logger, private readonly intervalMs = 10_000) {}

  warn(reason: string, fields: object): void {
    const now = Date.now();
    const s = this.last.get(reason);
    if (s && now - s.at < this.intervalMs) {
      s.suppressed++;
      return;
    }
    this.logger.warn({ ...fields, suppressed: s?.suppressed ?? 0 }, reason);
    this.last.set(reason, { at: now, suppressed: 0 });
  }
}
