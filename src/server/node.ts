import { CairnError, DeadlineSweep, ErrorCode, NO_NODE, SeededRandom, nodeId, type NodeId } from '../base/index.js';
import {
  AccessControl,
  AuditLog,
  LeaseService,
  Metrics,
  RequestLimits,
  ResourceService,
  TXN_LIMITS_DEFAULT,
  TypeRegistry,
  WatchService,
  createManagementToken,
  registerAclTypes,
  registryWriteHooks,
  registerDemoTypes,
  registerLeaseType,
  minLeaseTtlSeconds,
  type NodeState,
  type ServedNode,
} from '../api/index.js';
import { demoArtistController, streamingControllers, type ControllerManager, type ControllerSpec } from '../controller/index.js';
import { callIdentity, newSecret, nodeChannelCredentials, TlsMaterialStore } from '../auth/index.js';
import { ClientPool, GrpcForwarder, GrpcTransport, type HelloResponseMsg, type PeerCall } from '../forwarding/index.js';
import { Fsm, type ApplyResult, type LeaseGrantCommand } from '../fsm/index.js';
import { FileSnapshotStore, createLogger, openDataDir, openLogStore, systemClock, systemTimers, type DataDir, type PinoLogger } from '../platform/index.js';
import { Coordinator, Replica, type ChangePublisher, type Transport } from '../replica/index.js';
import type { Resource } from '../store/index.js';
import { EventPublisher } from '../stream/index.js';
import { registerStreamingTypes } from '../types/index.js';
import { readClusterId } from './cluster-id.js';
import { auditLogPath, type AgentConfig } from './config.js';
import { askToJoin, formCluster, type FormClusterContext, type Formation } from './form-cluster.js';
import { LeaderControllers } from './leader-controllers.js';
import { readInitialTokenFile } from './load-config.js';
import { AckBeforeFsyncLogStore, parsePlantedBugs, skipNthChange, WATCH_SKIP_NTH, type AgentPlantedBugs } from './planted-bugs.js';
import { TimedLogStore } from './timed-log-store.js';
import { RoundTripTransport, TimedStateMachine } from './timed-ports.js';

export type { NodeState } from '../api/index.js';

export interface NodeOptions {
  readonly logger?: PinoLogger;
  /** Controllers that run in this process while this node leads (besides the configured built-in ones). */
  readonly controllers?: readonly ControllerSpec[];
  /** Test hook: while it returns true, every Raft message this node sends or receives is dropped. */
  readonly raftPartitioned?: () => boolean;
}

/** Where the node's cluster port can be reached, known once it is served (the bound port if 0 was asked). */
export interface NodeEndpoint {
  readonly grpcAddress: string;
  readonly advertise: string;
}

/** How often the lease clock looks for expired leases (ms): expiry comes at most this late. */
const LEASE_TICK_MS = 100;

/** What exists only once the replica runs. */
interface Opened {
  readonly replica: Replica<ApplyResult, Resource>;
  readonly coordinator: Coordinator;
  readonly publisher: EventPublisher;
}

interface Waiter {
  resolve(o: Opened): void;
  reject(e: CairnError): void;
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

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms).unref());

/**
 * Step 2 of starting a node (src/server/README.md): one Cairn node as a typed object with an
 * explicit lifecycle, `starting -> running -> stopping -> stopped`.
 *
 * Built (`Node.open`) before anything is served: the data dir, the type registry, metrics and
 * the services the servers call (`resources`, `watches`), which reach the replica through this
 * object as their `ServedNode` port: while the node starts, a request waits for it (within its
 * deadline) instead of failing. `start(endpoint)` then forms or joins the cluster (step 1,
 * form-cluster.ts), opens the replica, wires the event publisher, and runs: `ready` resolves.
 * `stop(closeServers)` stops it in order, closing the servers (step 3) at the right moment.
 */
export class Node implements ServedNode {
  readonly id: NodeId;
  readonly config: AgentConfig;
  readonly logger: PinoLogger;
  readonly metrics: Metrics;
  readonly registry = new TypeRegistry();
  /** The resource operations (what the HTTP and gRPC APIs call). */
  readonly resources: ResourceService;
  /** The watch streams (HTTP and gRPC) over this node's event publisher. */
  readonly watches: WatchService;
  /** Leases (docs/api.md "Leases"): grant, revoke, keep-alive, time-to-live, list, and the leader's lease clock. */
  readonly leases: LeaseService;
  /** Drives the lease clock (expiries are proposed from it while this node leads). */
  private readonly leaseTicker: ReturnType<typeof setInterval>;
  /** Node-to-node channels: mutual TLS with this node's certificate when it has TLS material. */
  readonly pool: ClientPool;
  /** This node's TLS material (reloaded on SIGHUP), or undefined: plaintext on loopback or `--insecure`. */
  readonly tls: TlsMaterialStore | undefined;
  readonly forwarder: GrpcForwarder;
  /**
   * The audit log (denied requests, admin actions): the servers record into it; other admin
   * doors (the ACL routes) call `audit.admin(...)` too.
   */
  readonly audit: AuditLog;
  /** The per-address and per-token rate limits of the public API. */
  readonly limits: RequestLimits;
  /** Resolves once the node runs (after `start`); rejects if it cannot start, or stops first. */
  readonly ready: Promise<void>;
  private settleReady!: (outcome: { ok: true } | { ok: false; error: unknown }) => void;
  private started = false;

  private lifecycle: NodeState = 'starting';
  private clusterIdValue: string;
  private readonly discovered = new Map<NodeId, string>();
  private readonly bugs: AgentPlantedBugs;
  private transport: GrpcTransport | undefined;
  private opened: Opened | undefined;
  /** Why the node could not start, once `start` failed. */
  private startFailure: CairnError | undefined;
  private readonly waiters = new Set<Waiter>();
  private controllers: LeaderControllers | undefined;
  private lastLeader: string = NO_NODE;
  /** `--acl-initial-management-token-file`: created while this node leads, once. */
  private initialToken: { readonly secret: string; readonly accessor: string } | undefined;
  private initialTokenState: 'todo' | 'creating' | 'done' = 'todo';
  /**
   * The built-in controllers' credential on a node with ACLs but no TLS (no node certificate to
   * present): random per process, known only here (AccessControlOptions.internalSecret).
   */
  private readonly internalSecret = newSecret('internal');
  private readonly promoter: ReturnType<typeof setInterval>;
  private readonly watchTicker: ReturnType<typeof setInterval>;
  private stopped: Promise<void> | undefined;
  /** Aborted when the node starts stopping: wakes the formation's waits at once. */
  private readonly stopSignal = new AbortController();

  /** Opens the data dir and builds the node (state `starting`); nothing is served yet. */
  static async open(config: AgentConfig, opts: NodeOptions = {}): Promise<Node> {
    const self = nodeId(config.nodeId);
    const logger = opts.logger ?? createLogger({ level: config.logLevel, nodeId: self });
    const bugs = parsePlantedBugs(config.plantedBugs);
    if (config.plantedBugs.length > 0) logger.warn({ bugs: config.plantedBugs, ...(bugs.watchSkipEvent ? { watchSkipNth: WATCH_SKIP_NTH } : {}) }, 'PLANTED BUGS ARE ON: this node is deliberately unsafe (test use only)');
    // TLS material first: a node with broken certificates must not start (the error names the file).
    const tls =
      config.tlsCaFile !== undefined && config.tlsCertFile !== undefined && config.tlsKeyFile !== undefined
        ? await TlsMaterialStore.open({ caFile: config.tlsCaFile, certFile: config.tlsCertFile, keyFile: config.tlsKeyFile }, { nodeId: self })
        : undefined;
    if (tls !== undefined) {
      const m = tls.current;
      logger.info({ ca: config.tlsCaFile, cert: config.tlsCertFile, notAfter: m.notAfter, fingerprint: m.fingerprint256 }, 'TLS on: peers must prove their node identity; the HTTP API serves HTTPS');
    } else if (config.insecure) {
      logger.warn({ grpc: config.grpcAddr, http: config.httpAddr }, 'INSECURE: no TLS off loopback (--insecure): anyone who can reach these ports can join the cluster and read or rewrite every resource');
    }
    const dataDir = await openDataDir({ path: config.dataDir, nodeId: self, logger });
    let audit: AuditLog | undefined;
    try {
      const clusterId = (await readClusterId(config.dataDir)) ?? '';
      const auditTo = auditLogPath(config);
      audit = AuditLog.open({ destination: auditTo, maxBytes: config.auditLogMaxBytes, nodeId: self, clock: systemClock });
      logger.info({ auditLog: auditTo, rotateBytes: config.auditLogMaxBytes }, audit.enabled ? 'audit log on' : 'audit log off');
      return new Node(self, config, opts, logger, bugs, dataDir, clusterId, tls, audit);
    } catch (e) {
      audit?.close();
      await dataDir.close();
      throw e;
    }
  }

  private constructor(
    self: NodeId,
    config: AgentConfig,
    private readonly opts: NodeOptions,
    logger: PinoLogger,
    bugs: AgentPlantedBugs,
    private readonly dataDir: DataDir,
    clusterId: string,
    tls: TlsMaterialStore | undefined,
    audit: AuditLog,
  ) {
    this.id = self;
    this.audit = audit;
    this.limits = new RequestLimits({
      perAddress: { perSecond: config.rateLimitPerAddress, burst: config.rateLimitPerAddressBurst },
      perToken: { perSecond: config.rateLimitPerToken, burst: config.rateLimitPerTokenBurst },
      maxKeys: config.rateLimitMaxKeys,
      clock: systemClock,
      onRefused: (limit) => this.metrics.limitRefusals.inc({ limit: `rate-${limit}` }),
    });
    this.tls = tls;
    this.pool = tls !== undefined ? new ClientPool(() => nodeChannelCredentials(tls)) : new ClientPool();
    this.config = config;
    this.logger = logger;
    this.bugs = bugs;
    this.clusterIdValue = clusterId;
    this.ready = new Promise<void>((resolve, reject) => {
      this.settleReady = (o) => (o.ok ? resolve() : reject(o.error));
    });
    this.ready.catch((e: unknown) => {
      this.startFailure = new CairnError(ErrorCode.UNAVAILABLE, `node ${this.id} could not start: ${e instanceof Error ? e.message : String(e)}`);
      this.settleWaiters();
      if (this.started) this.logger.error({ err: e instanceof Error ? e.message : String(e) }, 'the node could not start');
    });
    this.metrics = new Metrics(() => this.opened?.replica.status());
    this.metrics.security({ tls: tls !== undefined, insecure: config.insecure });
    this.forwarder = new GrpcForwarder({
      self,
      clusterId: () => this.clusterIdValue,
      addressOf: (id) => this.addressOf(id),
      pool: this.pool,
      onForward: (kind, outcome) => this.metrics.forwarded.inc({ kind, outcome }),
      // One timer for the deadlines of every forwarded call (docs/performance.md "CPU per
      // request"). Never closed: it stops by itself when the last pending call ends.
      deadlines: { sweep: new DeadlineSweep(systemClock, systemTimers), clock: systemClock },
    });
    if (config.demoTypes || config.dev) registerDemoTypes(this.registry);
    registerStreamingTypes(this.registry); // built-in: the streaming.v1 domain (src/types)
    registerLeaseType(this.registry);
    registerAclTypes(this.registry);
    this.resources = new ResourceService(this, this.registry, systemClock, {
      quotaBytes: config.quotaBytes,
      leaseMaxAttached: config.leaseMaxAttached,
      maxPageItems: config.listMaxPage,
      txnLimits: { ...TXN_LIMITS_DEFAULT, maxCompares: config.txnMaxOps, maxOps: config.txnMaxOps },
      maxSnapshots: config.listSnapshots,
      snapshotTtlMs: config.listSnapshotTtlMs,
      access: new AccessControl({ enabled: config.acl, clock: systemClock, metricsAnonymous: config.metricsAnonymous, internalSecret: this.internalSecret }),
    });
    this.leases = new LeaseService(this, this.resources, systemClock, {
      minTtlSeconds: minLeaseTtlSeconds(config.electionTicks * config.tickMs),
      maxLeases: config.maxLeases,
      logger,
    });
    // Expiry is decided at most this late after a deadline; the clock does nothing on a follower.
    this.leaseTicker = setInterval(() => this.leases.tick(), LEASE_TICK_MS);
    this.leaseTicker.unref();
    if (config.aclInitialManagementTokenFile !== undefined) {
      const r = readInitialTokenFile(config.aclInitialManagementTokenFile);
      // loadAgentConfig checked the file; one that changed since is reported, not fatal.
      if ('problem' in r) logger.error({ file: config.aclInitialManagementTokenFile, problem: r.problem }, 'the initial management token file is not usable');
      else this.initialToken = r;
    }
    if (config.tlsCaFile !== undefined && !config.acl) logger.warn({}, 'access control is off (--acl=false) on a TLS node: every client that reaches the API may do everything');
    this.watches = new WatchService(this, this.resources, {
      clock: systemClock,
      bookmarkIntervalMs: config.watchBookmarkMs,
      maxStreams: config.watchMaxStreams,
      maxStreamsPerConnection: config.watchMaxStreamsPerConnection,
      audit,
      metrics: {
        onEvents: (n) => this.metrics.watchEvents.inc(n),
        onEnded: (code) => this.metrics.watchEnded.inc({ code }),
        onRefused: (limit) => this.metrics.limitRefusals.inc({ limit: `watch-${limit}` }),
      },
    });
    this.metrics.listGauges(() => ({ snapshots: this.resources.heldSnapshots }));
    this.metrics.watchGauges(() => {
      const pub = this.publisherNow();
      return pub
        ? { streams: this.watches.activeSessions, subscribers: pub.subscribers, windowEvents: pub.windowSize, windowBytes: pub.windowBytes, snapshotBuilds: pub.snapshotBuilds, slowConsumers: pub.slowConsumersEnded }
        : undefined;
    });
    this.metrics.quotaGauges(config.quotaBytes, () => this.coordinatorNow()?.dataStatus());
    // Publisher waits and trimming, and bookmarks: a tenth of the bookmark interval, at most 250 ms apart.
    // The same ticker drops expired paged-list snapshots (a node that gets no more lists frees them too).
    this.watchTicker = setInterval(() => {
      this.watches.tick();
      this.resources.sweepPagedLists();
    }, Math.max(10, Math.min(250, Math.floor(config.watchBookmarkMs / 10))));
    this.watchTicker.unref();
    this.promoter = setInterval(() => this.maybePromoteLearner(), 500);
    this.promoter.unref();
  }

  get state(): NodeState {
    return this.lifecycle;
  }

  /**
   * With TLS: the node a cluster-port call proves to be (its client certificate, verified
   * against the cluster CA), or undefined. Without TLS there is nothing to prove (undefined is
   * never asked for: the cluster service then trusts the claim).
   */
  peerNodeId(call: PeerCall): string | undefined {
    const who = callIdentity(call);
    return who?.kind === 'node' ? who.id : undefined;
  }

  /**
   * Re-reads the TLS files (SIGHUP): new connections use the new certificate, key and CA at
   * once; bad files keep the current material and say why. Resolves false without TLS.
   */
  async reloadTls(onApplied?: (m: { readonly cert: Buffer; readonly key: Buffer; readonly ca: Buffer }) => void): Promise<boolean> {
    if (this.tls === undefined) {
      this.logger.info({}, 'SIGHUP: no TLS material to reload');
      return false;
    }
    const r = await this.tls.reload();
    if (!r.ok) {
      this.logger.error({ err: r.error.message }, 'TLS reload failed: keeping the current certificates');
      this.metrics.tlsReloads.inc({ outcome: 'failed' });
      return false;
    }
    onApplied?.(r.material);
    this.metrics.tlsReloads.inc({ outcome: 'ok' });
    this.logger.info({ changed: r.changed, notAfter: r.material.notAfter, fingerprint: r.material.fingerprint256 }, 'TLS material reloaded');
    return true;
  }

  /** This node's cluster id ('' until it belongs to one). */
  get clusterId(): string {
    return this.clusterIdValue;
  }

  // ---- ServedNode: what the services see ------------------------------------------------------

  coordinator(timeoutMs: number): Promise<Coordinator> {
    return this.whenOpened(timeoutMs).then((o) => o.coordinator);
  }

  publisher(timeoutMs: number): Promise<EventPublisher> {
    return this.whenOpened(timeoutMs).then((o) => o.publisher);
  }

  /** While running, and while stopping (in-flight and draining requests finish on it). */
  coordinatorNow(): Coordinator | undefined {
    return this.lifecycle === 'running' || this.lifecycle === 'stopping' ? this.opened?.coordinator : undefined;
  }

  publisherNow(): EventPublisher | undefined {
    return this.lifecycle === 'running' || this.lifecycle === 'stopping' ? this.opened?.publisher : undefined;
  }

  /** The Raft transport, once the replica is being opened (the cluster port drops Raft traffic before). */
  transportNow(): GrpcTransport | undefined {
    return this.transport;
  }

  /** The built-in controllers' manager, while this node leads and runs them. */
  controllerManager(): ControllerManager | undefined {
    return this.controllers?.manager;
  }

  private whenOpened(timeoutMs: number): Promise<Opened> {
    const now = this.coordinatorNow() !== undefined ? this.opened : undefined;
    if (now) return Promise.resolve(now);
    const refused = this.refusal();
    if (refused) return Promise.reject(refused);
    // Starting: wait for it, at most timeoutMs (starting is not failing).
    return new Promise<Opened>((resolve, reject) => {
      const timer = systemTimers.setTimeout(() => {
        this.waiters.delete(waiter);
        reject(new CairnError(ErrorCode.UNAVAILABLE, `node ${this.id} is still starting after ${timeoutMs} ms (forming or joining its cluster, or opening its log); retry, or use another node`));
      }, Math.max(0, timeoutMs));
      const waiter: Waiter = {
        resolve: (o) => {
          systemTimers.clearTimeout(timer);
          resolve(o);
        },
        reject: (e) => {
          systemTimers.clearTimeout(timer);
          reject(e);
        },
      };
      this.waiters.add(waiter);
    });
  }

  /** Why a request cannot be served now and will not be by waiting, if so. */
  private refusal(): CairnError | undefined {
    if (this.startFailure) return this.startFailure;
    if (this.lifecycle === 'stopping' || this.lifecycle === 'stopped') return new CairnError(ErrorCode.UNAVAILABLE, `node ${this.id} is ${this.lifecycle}; use another node`);
    return undefined;
  }

  private settleWaiters(): void {
    const refused = this.refusal();
    const opened = this.coordinatorNow() !== undefined ? this.opened : undefined;
    if (!refused && !opened) return;
    for (const w of this.waiters) {
      if (refused) w.reject(refused);
      else if (opened) w.resolve(opened);
    }
    this.waiters.clear();
  }

  // ---- Lifecycle --------------------------------------------------------------------------------

  /**
   * Starts the node once its cluster port is served: forms or joins the cluster (step 1), opens
   * the replica, and runs. Returns `ready`.
   */
  start(endpoint: NodeEndpoint): Promise<void> {
    if (this.started || this.lifecycle !== 'starting') return this.ready;
    this.started = true;
    const specs = [
      ...(this.opts.controllers ?? []),
      ...(this.config.controllers ? streamingControllers({ logger: this.logger, spuTimeoutMs: this.config.spuTimeoutMs }) : []),
      ...(this.config.demoControllers ? [demoArtistController()] : []),
    ];
    // Leader-only controllers: driven by role changes once the node runs.
    if (specs.length > 0) {
      const tls = this.tls;
      this.controllers = new LeaderControllers({
        controllers: specs,
        grpcAddress: endpoint.grpcAddress,
        logger: this.logger,
        registry: this.metrics.registry,
        clock: systemClock,
        timers: systemTimers,
        ...(tls !== undefined ? { tls: () => ({ ca: tls.current.ca, cert: tls.current.cert, key: tls.current.key }) } : {}),
        // With TLS the node certificate proves the controllers are this node; without, a secret only this process knows.
        ...(tls === undefined && this.config.acl ? { token: () => this.internalSecret } : {}),
      });
    }
    const formCtx: FormClusterContext = {
      self: this.id,
      advertise: endpoint.advertise,
      config: this.config,
      logger: this.logger,
      storedClusterId: this.clusterIdValue,
      hello: (address) => this.hello(address, endpoint.advertise),
      discovered: this.discovered,
      onClusterId: (id) => (this.clusterIdValue = id),
      stopping: () => this.lifecycle === 'stopping' || this.lifecycle === 'stopped',
      sleep: (ms) => this.sleepUnlessStopping(ms),
      nowMs: () => systemClock.nowMs(),
    };
    void (async () => {
      const formation = await formCluster(formCtx);
      await this.openReplica(formation);
      if (formation.askToJoin && this.lifecycle === 'running') void askToJoin({ ...formCtx, forwarder: this.forwarder });
    })().then(
      () => this.settleReady({ ok: true }),
      (error: unknown) => this.settleReady({ ok: false, error }),
    );
    return this.ready;
  }

  private async openReplica(formation: Formation): Promise<void> {
    const { config, logger, metrics, bugs } = this;
    const fsm = new Fsm({
      onIgnoredEntry: (type, index) => logger.warn({ type, index }, 'skipped a log entry of an unknown optional type'),
      onMalformedEntry: (type, index, message) => logger.error({ type, index, message }, 'refused a malformed log entry'),
      // Unconditional writes run their type's hooks at apply (docs/api.md "Unconditional writes").
      writeHooks: registryWriteHooks(this.registry),
    });
    const transport = new GrpcTransport({ self: this.id, clusterId: () => this.clusterIdValue, addressOf: (id) => this.addressOf(id), pool: this.pool, logger });
    this.transport = transport;
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
    const publisher = this.eventPublisher(fsm);
    const now = (): number => performance.now();
    const heartbeatRtt = metrics.roundTripSeconds.labels('heartbeat');
    const appendRtt = metrics.roundTripSeconds.labels('append');
    const roundTrips = { heartbeat: (s: number) => heartbeatRtt.observe(s), append: (s: number) => appendRtt.observe(s) };
    const replica = await Replica.open<ApplyResult, Resource>({
      id: this.id,
      random: new SeededRandom(Date.now() ^ process.pid),
      clock: systemClock,
      timers: systemTimers,
      logStore: new TimedLogStore(logStore, metrics, { storeReportsSyncs: opened.reportsSyncs }),
      snapshotStore,
      // Timed for the metrics (where a request's time goes: round trips, applies).
      transport: new RoundTripTransport(this.opts.raftPartitioned ? partitionable(transport, this.opts.raftPartitioned) : transport, roundTrips, now),
      stateMachine: new TimedStateMachine<ApplyResult, Resource>(fsm, (seconds) => metrics.applySeconds.observe(seconds), now),
      publisher: this.publisherPort(publisher),
      logger,
      tickMs: config.tickMs,
      writeStallMs: config.writeStallMs,
      snapshotEveryEntries: config.snapshotEntries,
      snapshotLogRatio: config.snapshotLogPercent / 100,
      snapshotMaxLogBytes: config.snapshotMaxLogBytes,
      snapshotRetainEntries: config.snapshotRetainEntries,
      snapshotRetainBytes: config.snapshotRetainBytes,
      raft: {
        electionTimeoutTicks: config.electionTicks,
        heartbeatTimeoutTicks: config.heartbeatTicks,
        leaderLostTicks: config.leaderLostTicks,
        plantedBugs: bugs.raft,
      },
      onRoleChange: ({ role, leader }) => {
        if (leader !== NO_NODE && leader !== this.lastLeader) metrics.leaderChanges.inc();
        if (leader !== NO_NODE) this.lastLeader = leader;
        if (this.lifecycle === 'running') this.controllers?.setLeader(role === 'leader');
        if (this.lifecycle === 'running' && role === 'leader') this.maybeCreateInitialToken();
      },
      ...(formation.bootstrap ? { bootstrap: formation.bootstrap } : {}),
    });
    const coordinator = new Coordinator(replica, fsm, {
      forwarder: this.forwarder,
      onProposal: (outcome) => metrics.proposals.inc({ outcome }),
      onStepTimed: (step, seconds) => (step === 'proposal' ? metrics.proposalSeconds : metrics.readIndexSeconds).observe(seconds),
      plantedStaleRead: bugs.staleFollowerRead,
      // The leader checks a forwarded command exactly as a local request (issue 15 item 4).
      checkCommand: (c, store) => {
        const replaced = this.resources.checkCommand(c, store);
        // A forwarded grant gets this leader's minimum TTL and --max-leases.
        return c.kind === 'lease-grant' ? this.leases.clampForwardedGrant((replaced?.body ?? c.cmd) as LeaseGrantCommand) : replaced;
      },
      // Keep-alives, time-to-live and lists are the leader's lease clock's (forwarded here by followers).
      leaseRequests: (request) => this.leases.handle(request),
    });
    this.opened = { replica, coordinator, publisher };
    if (this.lifecycle !== 'starting') return; // stopped while the log opened: stop() closes the replica
    // A node whose configuration has only itself as a voter is its own quorum: it needs no
    // election timeout (nobody else could lead), so it campaigns now and wins at once.
    const voters = replica.basicStatus().config.members.filter((m) => m.suffrage === 'voter');
    if (voters.length === 1 && voters[0]?.id === this.id) replica.campaign();
    this.lifecycle = 'running';
    this.settleWaiters();
    this.controllers?.setLeader(replica.status().role === 'leader');
    if (replica.status().role === 'leader') this.maybeCreateInitialToken();
    logger.info({ cluster: this.clusterIdValue }, 'replica running');
  }

  /**
   * Creates the initial management token (`--acl-initial-management-token-file`) while this
   * node leads, unless a token of its accessor exists (then it never does: a revoked one stays
   * revoked). Retries while it leads; a later leader with the same file finishes the job.
   */
  private maybeCreateInitialToken(): void {
    const token = this.initialToken;
    if (token === undefined || this.initialTokenState !== 'todo') return;
    this.initialTokenState = 'creating';
    const leading = (): boolean => this.lifecycle === 'running' && this.opened?.replica.status().role === 'leader';
    const run = async (): Promise<void> => {
      while (leading()) {
        try {
          const created = await createManagementToken(this.resources, token.secret, token.accessor, 'initial management token (--acl-initial-management-token-file)', systemClock, 5_000);
          this.logger.info({ accessor: token.accessor, created }, created ? 'created the initial management token' : 'the initial management token exists');
          this.initialTokenState = 'done';
          return;
        } catch (e) {
          this.logger.warn({ err: e instanceof Error ? e.message : String(e) }, 'could not create the initial management token yet; retrying');
          await new Promise<void>((resolve) => setTimeout(resolve, 500).unref());
        }
      }
      this.initialTokenState = 'todo';
    };
    void run();
  }

  /**
   * This node's event publisher (what watches subscribe to), over the state machine's store.
   * The replica feeds it through its publisher port (`publisherPort`): the publish step of the
   * write path, seen in `Replica.apply`.
   */
  private eventPublisher(fsm: Fsm): EventPublisher {
    const { config } = this;
    return new EventPublisher(
      { current: () => fsm.store },
      {
        clock: systemClock,
        maxWindowEvents: config.watchWindowEvents,
        maxWindowBytes: config.watchWindowBytes,
        subscriberBufferEvents: config.watchBufferEvents,
        // Bookmarks are the watch streams' (one per stream, covering all its watches).
        bookmarkIntervalMs: Number.POSITIVE_INFINITY,
      },
    );
  }

  /**
   * The replica's `ChangePublisher` port onto the event publisher: every applied entry's
   * changes, in commit order; a replaced state (snapshot install, restore) resets it. The
   * planted bug `watch-skip-event` (test use only) drops one change here.
   */
  private publisherPort(publisher: EventPublisher): ChangePublisher<Resource> {
    const { logger } = this;
    const skip = this.bugs.watchSkipEvent ? skipNthChange<Resource>() : undefined;
    return {
      publish: (revision, changes) => publisher.publish(revision, skip ? skip(changes) : changes),
      reset: (revision) => {
        publisher.reset(revision);
        logger.info({ index: revision }, 'state replaced: every watch stream was ended with RESET');
      },
    };
  }

  /**
   * Stops the node, in order: controllers (they stop on their own terms rather than through
   * broken streams), watches (told at once to resume elsewhere), leadership (handed over),
   * then `closeServers` (in-flight requests finish), then the replica, connections and the
   * data dir. Idempotent.
   */
  stop(closeServers: () => Promise<void>): Promise<void> {
    return (this.stopped ??= this.stopInOrder(closeServers));
  }

  private async stopInOrder(closeServers: () => Promise<void>): Promise<void> {
    this.lifecycle = 'stopping';
    this.stopSignal.abort();
    if (!this.started) this.settleReady({ ok: false, error: new CairnError(ErrorCode.UNAVAILABLE, 'stopped before it was started') });
    this.settleWaiters();
    clearInterval(this.promoter);
    clearInterval(this.watchTicker);
    clearInterval(this.leaseTicker);
    await this.controllers?.close();
    this.watches.close();
    await this.handOverLeadership();
    await closeServers();
    await this.ready.catch(() => {});
    if (this.opened) await this.opened.replica.close();
    this.pool.close();
    await this.dataDir.close();
    this.audit.close();
    this.lifecycle = 'stopped';
    this.logger.info({}, 'stopped');
  }

  private async handOverLeadership(): Promise<void> {
    const c = this.opened?.coordinator;
    if (!c) return;
    const st = c.status();
    const others = st.config.members.filter((m) => m.suffrage === 'voter' && m.id !== this.id);
    if (st.role !== 'leader' || others.length === 0) return;
    try {
      await c.transferLeadership('', 3000);
      const deadline = Date.now() + 3000;
      while (c.status().role === 'leader' && Date.now() < deadline) await sleep(20);
      this.logger.info({ leader: c.status().leader }, 'handed over leadership before stopping');
    } catch (e) {
      this.logger.warn({ err: e instanceof Error ? e.message : String(e) }, 'leadership transfer before stopping failed');
    }
  }

  /** Leader duty: promote learners that asked for it once they have caught up (thesis §4.2.1). */
  private maybePromoteLearner(): void {
    const c = this.lifecycle === 'running' ? this.opened?.coordinator : undefined;
    if (!c) return;
    const st = c.status();
    if (st.role !== 'leader' || st.commit < st.configIndex) return;
    for (const m of st.config.members) {
      if (m.suffrage !== 'learner' || m.autoPromote !== true) continue;
      const pr = st.progress?.get(m.id);
      if (!pr || pr.state !== 'replicate' || pr.match < st.commit) continue;
      this.logger.info({ learner: m.id, match: pr.match, commit: st.commit }, 'promoting caught-up learner to voter');
      c.changeMembership({ type: 'promote', id: m.id }).catch((e: unknown) => this.logger.warn({ learner: m.id, err: e instanceof Error ? e.message : String(e) }, 'promotion failed; will retry'));
      return; // one change at a time
    }
  }

  /** Resolves after `ms`, or at once when the node starts stopping. */
  private sleepUnlessStopping(ms: number): Promise<void> {
    const signal = this.stopSignal.signal;
    if (signal.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        signal.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      timer.unref();
      signal.addEventListener('abort', done, { once: true });
    });
  }

  /**
   * The hosts of this node's peers as configured (members, --join, discovered): the gRPC port's
   * connection cap never counts connections from them.
   */
  peerHosts(): string[] {
    const out = new Set<string>();
    const add = (addr: string | undefined): void => {
      if (addr === undefined) return;
      const i = addr.lastIndexOf(':');
      out.add((i < 0 ? addr : addr.slice(0, i)).replace(/^\[|\]$/g, ''));
    };
    for (const m of this.opened?.replica.basicStatus().config.members ?? []) if (m.id !== this.id) add(m.address);
    for (const a of this.config.join) add(a);
    for (const a of this.discovered.values()) add(a);
    return [...out];
  }

  private addressOf(id: NodeId): string | undefined {
    return this.opened?.replica.basicStatus().config.members.find((m) => m.id === id)?.address ?? this.discovered.get(id);
  }

  private hello(address: string, advertise: string): Promise<HelloResponseMsg> {
    return new Promise((resolve, reject) => {
      this.pool.get(address).hello({ clusterId: this.clusterIdValue, from: this.id, address: advertise, bootstrapExpect: this.config.bootstrapExpect }, { deadline: Date.now() + 2000 }, (err, res) => {
        if (err || !res) reject(err ?? new Error('empty hello'));
        else resolve(res);
      });
    });
  }
}
