import * as grpc from '@grpc/grpc-js';
import { EventEmitter } from 'node:events';
import type { Server as HttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { CairnError, ErrorCode, NO_NODE, SeededRandom, nodeId, type NodeId, type Revision } from '../base/index.js';
import {
  Metrics,
  HostAllowList,
  ResourceService,
  Router,
  TypeRegistry,
  WatchService,
  addOperatorRoutes,
  addResourceGrpcService,
  addResourceRoutes,
  addSnapshotRoutes,
  addWatchRoutes,
  createHttpServer,
  registerDemoTypes,
  registerLeaseType,
} from '../api/index.js';
import { demoArtistController, streamingControllers, type ControllerManager, type ControllerSpec } from '../controller/index.js';
import { ClientPool, GrpcForwarder, GrpcTransport, addClusterService, type HelloResponseMsg } from '../forwarding/index.js';
import { Fsm, type ApplyResult } from '../fsm/index.js';
import { FileSnapshotStore, createLogger, openDataDir, openLogStore, systemClock, systemTimers, type DataDir, type PinoLogger } from '../platform/index.js';
import { makeConfig, type Config } from '../raft/index.js';
import { Coordinator, Replica, type Transport } from '../replica/index.js';
import type { Resource } from '../store/index.js';
import { EventPublisher } from '../stream/index.js';
import { registerStreamingTypes } from '../types/index.js';
import { LeaderControllers } from './leader-controllers.js';
import { derivedClusterId, newClusterId, readClusterId, writeClusterId } from './cluster-id.js';
import type { AgentConfig } from './config.js';
import { TimedLogStore } from './timed-log-store.js';
import { advertisedHttpAddress, PeerHttpAddresses } from './peer-http.js';
import { AckBeforeFsyncLogStore, parsePlantedBugs, skipNthChange, WATCH_SKIP_NTH } from './planted-bugs.js';

export interface Agent {
  readonly nodeId: NodeId;
  /** The bound gRPC and HTTP addresses (host:port; the port is real even if 0 was asked). */
  readonly grpcAddress: string;
  readonly httpAddress: string;
  /** Resolves once the replica runs (after bootstrap, discovery or join); rejects if it cannot start. */
  readonly ready: Promise<void>;
  coordinator(): Coordinator | undefined;
  /** The type registry: register your own types here (before writes of them arrive). */
  readonly registry: TypeRegistry;
  /** The resource operations (what the HTTP and gRPC APIs call). */
  readonly resources: ResourceService;
  /** The watch streams (HTTP and gRPC) and this node's event publisher (once the replica runs). */
  readonly watches: WatchService;
  publisher(): EventPublisher | undefined;
  readonly metrics: Metrics;
  readonly logger: PinoLogger;
  /** The built-in controllers' manager, while this node leads and runs them. */
  controllerManager(): ControllerManager | undefined;
  /** Graceful stop: hand over leadership, finish in-flight requests, close files. Idempotent. */
  close(): Promise<void>;
}

export interface StartAgentOptions {
  readonly logger?: PinoLogger;
  /** Extra routes (the resource API) and gRPC services (the public API), added by the caller. */
  readonly extend?: (ctx: {
    router: Router;
    grpcServer: grpc.Server;
    coordinator: () => Coordinator | undefined;
    registry: TypeRegistry;
    resources: ResourceService;
    watches: WatchService;
    agentConfig: AgentConfig;
  }) => void;
  /**
   * Built-in controllers: they run in this process while this node is the Raft leader (over a
   * client connected to this node), and stop when it loses leadership.
   */
  readonly controllers?: readonly ControllerSpec[];
  /**
   * Test hook: while it returns true, every Raft message this node sends or receives is dropped
   * (a network partition of the Raft traffic; client requests still reach the node).
   */
  readonly raftPartitioned?: () => boolean;
}

/** The transport, with the `raftPartitioned` test hook in front of it. */
function partitionable(inner: Transport, cut: () => boolean): Transport {
  return {
    send: (messages) => {
      if (!cut()) inner.send(messages);
    },
    onMessage: (handler) => inner.onMessage((m) => {
      if (!cut()) handler(m);
    }),
    // A partition loses messages; it resets no connection.
    onConnectionLost: (handler) => inner.onConnectionLost?.((peer) => {
      if (!cut()) handler(peer);
    }),
    close: () => inner.close(),
  };
}

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

function bindGrpc(server: grpc.Server, addr: string): Promise<string> {
  return new Promise((resolve, reject) => {
    server.bindAsync(addr, grpc.ServerCredentials.createInsecure(), (err, port) => {
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
function noDelayOnAccept(server: grpc.Server, logger: PinoLogger): void {
  const servers = (server as unknown as { http2Servers?: unknown }).http2Servers;
  if (!(servers instanceof Map)) {
    logger.debug({}, 'cannot set TCP_NODELAY on the gRPC port: grpc-js internals changed');
    return;
  }
  for (const s of servers.keys()) {
    if (s instanceof EventEmitter) s.on('connection', (socket: unknown) => (socket as { setNoDelay?: (on: boolean) => void }).setNoDelay?.(true));
  }
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms).unref());

/**
 * Starts a node: the composition root (ARCHITECTURE.md `server`). Opens the data dir, serves
 * the cluster port and the HTTP API at once (so peers can discover it), then starts the
 * replica: from its own state, by bootstrapping, by forming a cluster with --bootstrap-expect
 * peers, or by joining an existing cluster as a learner.
 */
export async function startAgent(config: AgentConfig, opts: StartAgentOptions = {}): Promise<Agent> {
  const self = nodeId(config.nodeId);
  const logger = opts.logger ?? createLogger({ level: config.logLevel, nodeId: self });
  const bugs = parsePlantedBugs(config.plantedBugs);
  if (config.plantedBugs.length > 0) logger.warn({ bugs: config.plantedBugs, ...(bugs.watchSkipEvent ? { watchSkipNth: WATCH_SKIP_NTH } : {}) }, 'PLANTED BUGS ARE ON: this node is deliberately unsafe (test use only)');
  const dataDir: DataDir = await openDataDir({ path: config.dataDir, nodeId: self, logger });

  let clusterId = (await readClusterId(config.dataDir)) ?? '';
  let replica: Replica<ApplyResult, Resource> | undefined;
  let coordinator: Coordinator | undefined;
  let publisher: EventPublisher | undefined;
  let transport: GrpcTransport | undefined;
  let closing: Promise<void> | undefined;
  const discovered = new Map<NodeId, string>();
  const pool = new ClientPool();
  const metrics = new Metrics(() => replica?.status());

  const addressOf = (id: NodeId): string | undefined =>
    replica?.basicStatus().config.members.find((m) => m.id === id)?.address ?? discovered.get(id);
  const forwarder = new GrpcForwarder({
    self,
    clusterId: () => clusterId,
    addressOf,
    pool,
    onForward: (kind, outcome) => metrics.forwarded.inc({ kind, outcome }),
  });

  const grpcServer = new grpc.Server({
    'grpc.max_receive_message_length': 64 * 1024 * 1024,
    'grpc.max_send_message_length': 64 * 1024 * 1024,
  });
  let advertisedHttp: string | undefined;
  const peerHttp = new PeerHttpAddresses({ self, ownHttpAddress: () => advertisedHttp, pool, clusterId: () => clusterId, advertiseAddr: config.advertiseAddr });
  addClusterService(grpcServer, {
    self,
    advertiseAddr: config.advertiseAddr,
    httpAddress: () => advertisedHttp,
    clusterId: () => clusterId,
    coordinator: () => coordinator,
    transport: () => transport,
    bootstrapExpect: config.bootstrapExpect,
    logger,
    onRejected: (reason) => metrics.rejectedPeerInput.inc({ reason }),
    stopping: () => closing !== undefined,
  });
  const registry = new TypeRegistry();
  if (config.demoTypes || config.dev) registerDemoTypes(registry);
  registerStreamingTypes(registry); // built-in: the streaming.v1 domain (src/types)
  registerLeaseType(registry);
  const resources = new ResourceService(() => coordinator, registry, systemClock);
  const watches = new WatchService(() => publisher, resources, {
    clock: systemClock,
    bookmarkIntervalMs: config.watchBookmarkMs,
    metrics: { onEvents: (n) => metrics.watchEvents.inc(n), onEnded: (code) => metrics.watchEnded.inc({ code }) },
  });
  metrics.watchGauges(() =>
    publisher
      ? { streams: watches.activeSessions, subscribers: publisher.subscribers, windowEvents: publisher.windowSize, snapshotBuilds: publisher.snapshotBuilds, slowConsumers: publisher.slowConsumersEnded }
      : undefined,
  );
  // Publisher waits and trimming, and bookmarks: a tenth of the bookmark interval, at most 250 ms apart.
  const watchTicker = setInterval(() => watches.tick(), Math.max(10, Math.min(250, Math.floor(config.watchBookmarkMs / 10))));
  watchTicker.unref();
  const router = new Router();
  addOperatorRoutes(router, { coordinator: () => coordinator, metrics, httpAddressOf: (id, grpcAddr) => peerHttp.lookup(id, grpcAddr) });
  addResourceRoutes(router, resources);
  addWatchRoutes(router, watches);
  addSnapshotRoutes(router, () => coordinator, systemClock);
  addResourceGrpcService(grpcServer, resources, { logger, watches });
  opts.extend?.({ router, grpcServer, coordinator: () => coordinator, registry, resources, watches, agentConfig: config });
  const httpServer = createHttpServer({ router, logger, onResponse: (method, status) => metrics.httpRequests.inc({ method, status: String(status) }), allowedHosts: new HostAllowList([config.httpAddr, config.advertiseAddr, ...config.httpAllowedHosts]) });

  let grpcAddress: string;
  let httpAddress: string;
  try {
    grpcAddress = await bindGrpc(grpcServer, config.grpcAddr);
    noDelayOnAccept(grpcServer, logger);
    httpAddress = await listen(httpServer, config.httpAddr);
  } catch (e) {
    grpcServer.forceShutdown();
    httpServer.close();
    await dataDir.close();
    throw e;
  }
  const advertise = config.advertiseAddr.endsWith(':0') ? grpcAddress : config.advertiseAddr;
  advertisedHttp = advertisedHttpAddress(httpAddress, advertise);

  // Leader-only controllers: driven by role changes once the node serves (after `ready`).
  const controllerSpecs = [
    ...(opts.controllers ?? []),
    ...(config.controllers ? streamingControllers({ logger, spuTimeoutMs: config.spuTimeoutMs }) : []),
    ...(config.demoControllers ? [demoArtistController()] : []),
  ];
  const leaderControllers = controllerSpecs.length > 0 ? new LeaderControllers({ controllers: controllerSpecs, grpcAddress, logger, registry: metrics.registry }) : undefined;
  let serving = false;
  logger.info({ grpc: grpcAddress, http: httpAddress, dataDir: config.dataDir }, 'listening');

  const hello = (address: string): Promise<HelloResponseMsg> =>
    new Promise((resolve, reject) => {
      pool.get(address).hello({ clusterId, from: self, address: advertise, bootstrapExpect: config.bootstrapExpect }, { deadline: Date.now() + 2000 }, (err, res) => {
        if (err || !res) reject(err ?? new Error('empty hello'));
        else resolve(res);
      });
    });

  /** Forms the initial configuration with --bootstrap-expect, or finds an existing cluster. */
  async function discover(): Promise<{ bootstrap: Config | undefined }> {
    const me = { id: self, address: advertise };
    let lastLog = 0;
    for (;;) {
      if (closing) throw new CairnError(ErrorCode.UNAVAILABLE, 'shutting down during discovery');
      const known = new Map<NodeId, string>([[self, advertise]]);
      for (const addr of config.join) {
        try {
          const h = await hello(addr);
          discovered.set(h.nodeId as NodeId, h.address);
          if (h.clusterId !== '') {
            clusterId = h.clusterId;
            logger.info({ via: addr, cluster: clusterId }, 'found an existing cluster; joining it');
            return { bootstrap: undefined };
          }
          if (config.bootstrapExpect > 0 && h.bootstrapExpect === config.bootstrapExpect) known.set(h.nodeId as NodeId, h.address);
        } catch {
          // not up yet
        }
      }
      if (config.bootstrapExpect > 0 && known.size >= config.bootstrapExpect) {
        if (known.size > config.bootstrapExpect) {
          throw new CairnError(ErrorCode.INVALID_ARGUMENT, `found ${known.size} nodes expecting ${config.bootstrapExpect}: ${[...known.keys()].join(', ')}`);
        }
        const members = [...known].map(([id, address]) => ({ id, address }));
        clusterId = derivedClusterId(members);
        const bootstrap = makeConfig(members.map((m) => ({ ...m, suffrage: 'voter' as const })));
        logger.info({ members: members.map((m) => m.id), cluster: clusterId }, 'forming a new cluster');
        return { bootstrap };
      }
      if (Date.now() - lastLog > 5000) {
        lastLog = Date.now();
        logger.info({ known: [...known.keys()], expect: config.bootstrapExpect, join: config.join, me: me.id }, 'waiting for peers');
      }
      await sleep(250);
    }
  }

  /**
   * Asks the cluster's leader to add this node as a learner that it promotes once caught up,
   * unless the leader already counts it as a member. The leader's configuration decides, not
   * this node's: a removed node usually never learns of its removal (the leader stops sending
   * to it as soon as it appends the change, thesis §4.2.2), so its own log still names it a
   * member, and a follower that answers first may lag behind the leader.
   */
  async function joinCluster(): Promise<void> {
    for (;;) {
      if (closing || !replica) return;
      for (const addr of config.join) {
        try {
          const h = await hello(addr);
          for (const m of h.members) discovered.set(m.id as NodeId, m.address);
          if (h.leader === '') continue;
          const leaderAddr = h.members.find((m) => m.id === h.leader)?.address ?? discovered.get(h.leader as NodeId);
          const l = h.leader === h.nodeId ? h : leaderAddr === undefined ? undefined : await hello(leaderAddr);
          if (l === undefined || l.leader !== l.nodeId) continue; // leadership moved: ask again
          if (l.members.some((m) => m.id === self)) return;
          await forwarder.forward(l.nodeId as NodeId, { kind: 'config-change', change: { type: 'add-learner', id: self, address: advertise, autoPromote: true } }, 5000);
          logger.info({ leader: l.nodeId }, 'asked the leader to add this node as a learner');
          return;
        } catch (e) {
          logger.debug({ via: addr, err: e instanceof Error ? e.message : String(e) }, 'join attempt failed; retrying');
        }
      }
      await sleep(500);
    }
  }

  /** Leader duty: promote learners that asked for it once they have caught up (thesis §4.2.1). */
  const promoter = setInterval(() => {
    const c = coordinator;
    if (!c || closing) return;
    const st = c.status();
    if (st.role !== 'leader' || st.commit < st.configIndex) return;
    for (const m of st.config.members) {
      if (m.suffrage !== 'learner' || m.autoPromote !== true) continue;
      const pr = st.progress?.get(m.id);
      if (!pr || pr.state !== 'replicate' || pr.match < st.commit) continue;
      logger.info({ learner: m.id, match: pr.match, commit: st.commit }, 'promoting caught-up learner to voter');
      c.changeMembership({ type: 'promote', id: m.id }).catch((e: unknown) => logger.warn({ learner: m.id, err: e instanceof Error ? e.message : String(e) }, 'promotion failed; will retry'));
      return; // one change at a time
    }
  }, 500);
  promoter.unref();

  let lastLeader: string = NO_NODE;
  const ready = (async () => {
    let bootstrap: Config | undefined;
    let joining = false;
    if (clusterId === '') {
      if (config.bootstrap) {
        clusterId = newClusterId();
        bootstrap = makeConfig([{ id: self, suffrage: 'voter', address: advertise }]);
      } else if (config.bootstrapExpect > 0 || config.join.length > 0) {
        ({ bootstrap } = await discover());
        joining = bootstrap === undefined;
      } else {
        throw new CairnError(ErrorCode.INVALID_ARGUMENT, 'this node belongs to no cluster: start it with --bootstrap, --dev, --bootstrap-expect N --join ..., or --join ...');
      }
      await writeClusterId(config.dataDir, clusterId);
    }
    const fsm = new Fsm({
      onIgnoredEntry: (type, index) => logger.warn({ type, index }, 'skipped a log entry of an unknown optional type'),
      onMalformedEntry: (type, index, message) => logger.error({ type, index, message }, 'refused a malformed log entry'),
    });
    transport = new GrpcTransport({ self, clusterId: () => clusterId, addressOf, pool, logger });
    const opened = await openLogStore({
      dataDir: config.dataDir,
      kind: config.logStore,
      logger,
      walSegmentBytes: config.walSegmentBytes,
      onSync: (seconds) => metrics.fsyncSeconds.observe(seconds),
    });
    logger.info({ logStore: opened.kind }, 'opened the raft log');
    const logStore = bugs.ackBeforeFsync ? new AckBeforeFsyncLogStore(opened.store) : opened.store;
    const snapshotStore = await FileSnapshotStore.open({ dataDir: config.dataDir, logger });
    replica = await Replica.open<ApplyResult, Resource>({
      id: self,
      random: new SeededRandom(Date.now() ^ process.pid),
      clock: systemClock,
      timers: systemTimers,
      logStore: new TimedLogStore(logStore, metrics, { storeReportsSyncs: opened.reportsSyncs }),
      snapshotStore,
      transport: opts.raftPartitioned ? partitionable(transport, opts.raftPartitioned) : transport,
      stateMachine: fsm,
      logger,
      tickMs: config.tickMs,
      snapshotEveryEntries: config.snapshotEntries,
      raft: {
        electionTimeoutTicks: config.electionTicks,
        heartbeatTimeoutTicks: config.heartbeatTicks,
        leaderLostTicks: config.leaderLostTicks,
        plantedBugs: bugs.raft,
      },
      onRoleChange: ({ role, leader }) => {
        if (leader !== NO_NODE && leader !== lastLeader) metrics.leaderChanges.inc();
        if (leader !== NO_NODE) lastLeader = leader;
        if (serving && !closing) leaderControllers?.setLeader(role === 'leader');
      },
      ...(bootstrap ? { bootstrap } : {}),
    });
    coordinator = new Coordinator(replica, fsm, { forwarder, onProposal: (outcome) => metrics.proposals.inc({ outcome }), plantedStaleRead: bugs.staleFollowerRead, checkCommand: (c, store) => resources.checkCommand(c, store) });
    // Every applied entry's changes, in commit order, feed this node's watch streams. Created
    // in the same turn as the subscription, so no applied entry falls between the two.
    const pub = new EventPublisher(
      { current: () => fsm.store },
      {
        clock: systemClock,
        maxWindowEvents: config.watchWindowEvents,
        subscriberBufferEvents: config.watchBufferEvents,
        // Bookmarks are the watch streams' (one per stream, covering all its watches).
        bookmarkIntervalMs: Number.POSITIVE_INFINITY,
      },
    );
    const skip = bugs.watchSkipEvent ? skipNthChange<Resource>() : undefined;
    coordinator.subscribe((e) => {
      if (e.kind === 'changes') pub.publish(e.index as number as Revision, skip ? skip(e.changes) : e.changes);
      else {
        pub.reset(e.index as number as Revision);
        logger.info({ index: e.index }, 'state replaced: every watch stream was ended with RESET');
      }
    });
    publisher = pub;
    serving = true;
    if (!closing) leaderControllers?.setLeader(replica.status().role === 'leader');
    logger.info({ cluster: clusterId }, 'replica running');
    // With --join, also on a restart: a node that was removed while it was down or cut off
    // asks to be added back (joinCluster asks the leader whether it is still a member).
    if (joining || config.join.length > 0) void joinCluster();
  })();
  ready.catch((e: unknown) => logger.error({ err: e instanceof Error ? e.message : String(e) }, 'the node could not start'));

  async function shutdown(): Promise<void> {
    clearInterval(promoter);
    clearInterval(watchTicker);
    // Controllers first: they stop on their own terms rather than through broken streams.
    await leaderControllers?.close();
    // Watchers are told at once (UNAVAILABLE: resume on another node), before the handover.
    watches.close();
    const c = coordinator;
    if (c) {
      const st = c.status();
      const others = st.config.members.filter((m) => m.suffrage === 'voter' && m.id !== self);
      if (st.role === 'leader' && others.length > 0) {
        try {
          await c.transferLeadership('', 3000);
          const deadline = Date.now() + 3000;
          while (c.status().role === 'leader' && Date.now() < deadline) await sleep(20);
          logger.info({ leader: c.status().leader }, 'handed over leadership before stopping');
        } catch (e) {
          logger.warn({ err: e instanceof Error ? e.message : String(e) }, 'leadership transfer before stopping failed');
        }
      }
    }
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
    await ready.catch(() => {});
    if (replica) await replica.close();
    pool.close();
    await dataDir.close();
    logger.info({}, 'stopped');
  }

  return {
    nodeId: self,
    grpcAddress,
    httpAddress,
    ready,
    metrics,
    logger,
    registry,
    resources,
    watches,
    publisher: () => publisher,
    coordinator: () => coordinator,
    controllerManager: () => leaderControllers?.manager,
    close: () => (closing ??= shutdown()),
  };
}
