import * as grpc from '@grpc/grpc-js';
import { EventEmitter } from 'node:events';
import type { Server as HttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { CairnError, ErrorCode, type Logger } from '../base/index.js';
import {
  HostAllowList,
  ResourceService,
  Router,
  TypeRegistry,
  WatchService,
  addOperatorRoutes,
  addResourceGrpcService,
  addResourceRoutes,
  addLeaseRoutes,
  addSnapshotRoutes,
  addWatchRoutes,
  createHttpServer,
  addAclRoutes,
  httpCallContext,
  type ServedNode,
} from '../api/index.js';
import { serverCredentials } from '../auth/index.js';
import { addClusterService, type PeerCall } from '../forwarding/index.js';
import { requestTimer } from './grpc-timing.js';
import { guardGrpcServer, type GrpcGuard } from './grpc-guard.js';
import { advertisedHttpAddress, PeerHttpAddresses } from './peer-http.js';
import { systemClock } from '../platform/index.js';
import type { AgentConfig } from './config.js';
import type { Node } from './node.js';

/** Extra routes (the resource API) and gRPC services (the public API), added by the caller. */
export type ExtendServers = (ctx: {
  router: Router;
  grpcServer: grpc.Server;
  node: ServedNode;
  registry: TypeRegistry;
  resources: ResourceService;
  watches: WatchService;
  agentConfig: AgentConfig;
}) => void;

/** A node's servers, listening. */
export interface Served {
  /** The bound gRPC and HTTP addresses (host:port; the port is real even if 0 was asked). */
  readonly grpcAddress: string;
  readonly httpAddress: string;
  /** The cluster address peers dial: --advertise, or the bound gRPC address if its port was 0. */
  readonly advertise: string;
  /** Stops accepting, lets in-flight requests finish (closing idle and, after 2 s, all connections). */
  close(): Promise<void>;
  /** Re-reads the TLS files (SIGHUP): the gRPC port and the HTTPS server use them for new connections. */
  reloadTls(): Promise<boolean>;
}

/** How long the gRPC port waits for a keepalive ping's answer before dropping the connection (ms). */
const GRPC_KEEPALIVE_TIMEOUT_MS = 20_000;

/** The public API's gRPC service name (its calls get the public limits). */
const resourceServiceName = 'cairn.resource.v1.ResourceService';

function splitHostPort(addr: string): { host: string; port: number } {
  const i = addr.lastIndexOf(':');
  const host = addr.slice(0, i).replace(/^\[|\]$/g, '');
  return { host, port: Number(addr.slice(i + 1)) };
}

function listen(server: HttpServer, addr: string): Promise<string> {
  const { host, port } = splitHostPort(addr);
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      const a = server.address() as AddressInfo;
      resolve(`${host.includes(':') ? `[${host}]` : host}:${a.port}`);
    });
  });
}

function bindGrpc(server: grpc.Server, addr: string, credentials: grpc.ServerCredentials): Promise<string> {
  return new Promise((resolve, reject) => {
    server.bindAsync(addr, credentials, (err, port) => {
      if (err) reject(new CairnError(ErrorCode.UNAVAILABLE, `cannot listen on the gRPC address ${addr}: ${err.message}`));
      else resolve(`${splitHostPort(addr).host}:${port}`);
    });
  });
}

/**
 * Turns off Nagle's algorithm on the gRPC port's accepted connections. grpc-js sets TCP_NODELAY
 * on the connections it makes but not on those its server accepts, so small HTTP/2 frames
 * (Raft acks, answers) could wait for a delayed ACK. grpc-js offers no option for it: this
 * reaches its (private) list of HTTP/2 servers, and does nothing if that changes.
 */
function noDelayOnAccept(server: grpc.Server, logger: Logger): void {
  const servers = (server as unknown as { http2Servers?: unknown }).http2Servers;
  if (!(servers instanceof Map)) {
    logger.debug({}, 'cannot set TCP_NODELAY on the gRPC port: grpc-js internals changed');
    return;
  }
  for (const s of servers.keys()) {
    if (s instanceof EventEmitter) s.on('connection', (socket: unknown) => (socket as { setNoDelay?: (on: boolean) => void }).setNoDelay?.(true));
  }
}

/**
 * Step 3 of starting a node (src/server/README.md): serving it. The gRPC server on the cluster
 * port (node-to-node cluster service, and the public resource API) and the HTTP server (the
 * resource, watch, snapshot and operator routes), listening at once, while the node still
 * starts: peers discover it through the cluster port, and requests wait for it to run.
 */
export async function serveNode(node: Node, config: AgentConfig, extend?: ExtendServers): Promise<Served> {
  const { logger, metrics } = node;
  const grpcServer = new grpc.Server({
    // Server-wide, so high: Raft snapshots and forwarded restores (48 MiB) come through here.
    // Public methods check their own, lower limit (grpc-resource-service.ts, grpc-guard.ts).
    'grpc.max_receive_message_length': 64 * 1024 * 1024,
    'grpc.max_send_message_length': 64 * 1024 * 1024,
    'grpc.max_concurrent_streams': config.grpcMaxConcurrentStreams,
    // Ping a quiet connection; drop it if the ping goes unanswered (a vanished client). Off by
    // default: peers share this server, and a paused peer's dropped Raft stream would read as
    // its death (src/forwarding/cluster-service.ts).
    ...(config.grpcKeepaliveMs > 0 ? { 'grpc.keepalive_time_ms': config.grpcKeepaliveMs, 'grpc.keepalive_timeout_ms': GRPC_KEEPALIVE_TIMEOUT_MS } : {}),
    ...(config.grpcIdleTimeoutMs > 0 ? { 'grpc.max_connection_idle_ms': config.grpcIdleTimeoutMs } : {}),
    // The public API's unary calls, timed for cairn_grpc_request_seconds.
    interceptors: [requestTimer((method, seconds) => metrics.grpcRequestSeconds.labels(method).observe(seconds), () => performance.now())],
  });
  // This node's HTTP address as peers should use it (known once it listens), answered in Hello;
  // and the peers' HTTP addresses, learned through their Hello (for /v1/status/leader).
  let advertisedHttp: string | undefined;
  const peerHttp = new PeerHttpAddresses({ self: node.id, ownHttpAddress: () => advertisedHttp, pool: node.pool, clusterId: () => node.clusterId, advertiseAddr: config.advertiseAddr });
  addClusterService(grpcServer, {
    self: node.id,
    advertiseAddr: config.advertiseAddr,
    httpAddress: () => advertisedHttp,
    clusterId: () => node.clusterId,
    coordinator: () => node.coordinatorNow(),
    transport: () => node.transportNow(),
    bootstrapExpect: config.bootstrapExpect,
    logger,
    onRejected: (reason) => metrics.rejectedPeerInput.inc({ reason }),
    stopping: () => node.state === 'stopping' || node.state === 'stopped',
    ...(node.tls !== undefined ? { peerNodeId: (call: PeerCall) => node.peerNodeId(call) } : {}),
  });
  const router = new Router();
  addOperatorRoutes(router, {
    node,
    metrics,
    httpAddressOf: (id, grpcAddr) => peerHttp.lookup(id, grpcAddr),
    security: { tls: node.tls !== undefined, insecure: config.insecure, acl: config.acl },
    ...(config.metricsAnonymous ? { metricsAccess: 'public' as const } : {}),
    quotaBytes: config.quotaBytes,
  });
  addAclRoutes(router, { resources: node.resources, clock: systemClock });
  addResourceRoutes(router, node.resources);
  addLeaseRoutes(router, node.leases);
  addWatchRoutes(router, node.watches);
  addSnapshotRoutes(router, node, systemClock);
  addResourceGrpcService(grpcServer, node.resources, { logger, watches: node.watches, leases: node.leases, limits: node.limits, audit: node.audit, maxMessageBytes: config.grpcMaxMessageBytes });
  extend?.({ router, grpcServer, node, registry: node.registry, resources: node.resources, watches: node.watches, agentConfig: config });
  const tlsNow = node.tls?.current;
  const httpServer = createHttpServer({
    router,
    logger,
    onResponse: (method, status) => metrics.httpRequests.inc({ method, status: String(status) }),
    allowedHosts: new HostAllowList([config.httpAddr, config.advertiseAddr, ...config.httpAllowedHosts]),
    limits: node.limits,
    audit: node.audit,
    maxConnections: config.httpMaxConnections,
    onConnectionRefused: () => metrics.limitRefusals.inc({ limit: 'http-connections' }),
    timeouts: { headersMs: config.httpHeadersTimeoutMs, requestMs: config.httpRequestTimeoutMs, keepAliveMs: config.httpKeepAliveTimeoutMs },
    ...(tlsNow !== undefined ? { tls: { cert: tlsNow.cert, key: tlsNow.key, ca: tlsNow.ca } } : {}),
    // Routes that name a grant (operator, snapshot, metrics) are checked here; the resource API,
    // watches and ACL objects check each operation in their services.
    authorize: async (req, verb, target) => {
      await node.resources.authorizeCall(httpCallContext(req), verb, target);
    },
  });

  let grpcAddress: string;
  let httpAddress: string;
  let guard: GrpcGuard | undefined;
  try {
    // With TLS, one port still: node certificates are asked for but not required (public API
    // calls come without one); the cluster service checks them per call (src/auth README).
    grpcAddress = await bindGrpc(grpcServer, config.grpcAddr, node.tls !== undefined ? serverCredentials(node.tls) : grpc.ServerCredentials.createInsecure());
    noDelayOnAccept(grpcServer, logger);
    guard = guardGrpcServer(grpcServer, {
      maxConnections: config.grpcMaxConnections,
      maxPublicMessageBytes: config.grpcMaxMessageBytes,
      publicPathPrefix: `/${resourceServiceName}/`,
      peerHosts: () => node.peerHosts(),
      logger,
      onRefused: (reason) => metrics.limitRefusals.inc({ limit: reason === 'connections' ? 'grpc-connections' : 'grpc-message-cut' }),
    });
    httpAddress = await listen(httpServer, config.httpAddr);
  } catch (e) {
    guard?.close();
    grpcServer.forceShutdown();
    httpServer.close();
    throw e;
  }
  const advertise = config.advertiseAddr.endsWith(':0') ? grpcAddress : config.advertiseAddr;
  advertisedHttp = advertisedHttpAddress(httpAddress, advertise);
  logger.info({ grpc: grpcAddress, http: httpAddress, dataDir: config.dataDir }, 'listening');

  const close = async (): Promise<void> => {
    guard?.close();
    await new Promise<void>((resolve) => {
      // Watch streams end a moment after watches.close() (their last event goes out on a later
      // turn), so their keep-alive connections go idle only then: keep closing idle ones, or
      // every shutdown with an open watch would wait for the fallback below.
      const idle = setInterval(() => httpServer.closeIdleConnections(), 20);
      const all = setTimeout(() => httpServer.closeAllConnections(), 2000);
      all.unref();
      httpServer.close(() => {
        clearInterval(idle);
        clearTimeout(all);
        resolve();
      });
      httpServer.closeIdleConnections();
    });
    await new Promise<void>((resolve) => {
      const t = setTimeout(() => {
        grpcServer.forceShutdown();
        resolve();
      }, 2000);
      t.unref();
      grpcServer.tryShutdown(() => {
        clearTimeout(t);
        resolve();
      });
    });
  };
  const reloadTls = (): Promise<boolean> =>
    node.reloadTls((m) => {
      // The gRPC port's credentials follow the material store; the HTTPS server is told here.
      if ('setSecureContext' in httpServer) httpServer.setSecureContext({ cert: m.cert, key: m.key, ca: m.ca });
    });
  return { grpcAddress, httpAddress, advertise, close, reloadTls };
}
