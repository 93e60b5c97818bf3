import * as dns from 'node:dns';
import { EventEmitter } from 'node:events';
import * as http2 from 'node:http2';
import { isIP, type Socket } from 'node:net';
import type * as grpc from '@grpc/grpc-js';
import { normalizeIp } from '../api/index.js';
import type { Logger } from '../base/index.js';

/**
 * Guards on the gRPC port that grpc-js has no option for (docs/security.md "Limits"): a cap on
 * open connections that never counts the cluster's peers, and an early cut of a public call
 * whose request grows far past the public message limit. Both reach grpc-js's (private) list
 * of HTTP/2 servers, as serve.ts's noDelayOnAccept does, and do nothing if that changes.
 */

export interface GrpcGuardOptions {
  /** Open connections at most, peers not counted (0 = no cap). */
  readonly maxConnections: number;
  /** The public request limit (bytes); a public call's request data past `2 x` this is cut. */
  readonly maxPublicMessageBytes: number;
  /** The gRPC path prefix of the public API (its calls are bounded; the cluster service is not). */
  readonly publicPathPrefix: string;
  /** The hosts of the peers (names or IPs), looked up every `refreshMs`. */
  readonly peerHosts: () => readonly string[];
  readonly refreshMs?: number;
  readonly logger: Logger;
  /** Told of each refused connection and each cut call. */
  readonly onRefused?: (reason: 'connections' | 'message-size') => void;
}

export interface GrpcGuard {
  /** Connections counted now (peers excluded). */
  readonly connections: number;
  /** The peer IPs known now. */
  readonly peerIps: ReadonlySet<string>;
  /** Looks the peer hosts up now (also done every refreshMs). */
  refresh(): Promise<void>;
  close(): void;
}

/** The IPs of peer hosts: literal IPs as they are, names through the resolver (failures skipped). */
async function resolvePeers(hosts: readonly string[]): Promise<Set<string>> {
  const out = new Set<string>();
  await Promise.all(
    hosts.map(async (h) => {
      if (isIP(h) !== 0) {
        out.add(normalizeIp(h));
        return;
      }
      try {
        for (const a of await dns.promises.lookup(h, { all: true })) out.add(normalizeIp(a.address));
      } catch {
        // Unresolvable now: counted like any client until it resolves.
      }
    }),
  );
  return out;
}

export function guardGrpcServer(server: grpc.Server, opts: GrpcGuardOptions): GrpcGuard {
  let peerIps = new Set<string>();
  let connections = 0;
  const servers = (server as unknown as { http2Servers?: unknown }).http2Servers;
  const refresh = async (): Promise<void> => {
    peerIps = await resolvePeers(opts.peerHosts());
  };
  void refresh();
  const timer = setInterval(() => void refresh(), opts.refreshMs ?? 2_000);
  timer.unref();
  if (!(servers instanceof Map)) {
    opts.logger.warn({}, 'cannot guard the gRPC port (connection cap, message size): grpc-js internals changed');
  } else {
    const cutBytes = 2 * opts.maxPublicMessageBytes + 5;
    for (const s of servers.keys()) {
      if (!(s instanceof EventEmitter)) continue;
      s.on('connection', (socket: Socket) => {
        const ip = normalizeIp(socket.remoteAddress);
        if (peerIps.has(ip)) return; // peers are never counted nor refused
        connections++;
        socket.once('close', () => connections--);
        if (opts.maxConnections > 0 && connections > opts.maxConnections) {
          opts.onRefused?.('connections');
          socket.destroy();
        }
      });
      // Before grpc-js's own listener: grpc-js buffers a whole message (up to the server-wide
      // 64 MiB that Raft snapshots need) before the method's deserializer can refuse it. A
      // public call whose request data passes twice the public limit is reset at once with
      // ENHANCE_YOUR_CALM (the client sees RESOURCE_EXHAUSTED); below that, the deserializer
      // answers TOO_LARGE with the limit.
      s.prependListener('stream', (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders) => {
        const path = headers[':path'];
        if (typeof path !== 'string' || !path.startsWith(opts.publicPathPrefix)) return;
        let bytes = 0;
        const onData = (chunk: Buffer): void => {
          bytes += chunk.length;
          if (bytes > cutBytes) {
            stream.off('data', onData);
            opts.onRefused?.('message-size');
            stream.close(http2.constants.NGHTTP2_ENHANCE_YOUR_CALM);
          }
        };
        stream.on('data', onData);
      });
    }
  }
  return {
    get connections() {
      return connections;
    },
    get peerIps() {
      return peerIps;
    },
    refresh,
    close: () => clearInterval(timer),
  };
}
