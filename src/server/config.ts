import { getHeapStatistics } from 'node:v8';

/**
 * The agent's configuration: every field can be set by a command-line flag, an environment
 * variable (CAIRN_<FLAG_IN_CAPS>) or a config file key (the flag name in camelCase), in that
 * order of precedence over the defaults below (API.md "The command line").
 */
export interface AgentConfig {
  /** This node's id, a lowercase DNS label. Default: the host name's first label, or "cairn1" with --dev. */
  readonly nodeId: string;
  /** Where the log, snapshots and lock live. Default ./cairn-data (with --dev) or required. */
  readonly dataDir: string;
  /** The multiplexed gRPC port: Raft, forwarding, public API. Default 127.0.0.1:7500. */
  readonly grpcAddr: string;
  /** The address peers use to reach this node, if different from grpcAddr (e.g. 0.0.0.0 binds). */
  readonly advertiseAddr: string;
  /** The HTTP/JSON API. Default 127.0.0.1:7501. */
  readonly httpAddr: string;
  /** Form a one-node cluster if this node has no state yet. */
  readonly bootstrap: boolean;
  /** Form an N-voter cluster with the nodes in `join` once N are known (0 = off). */
  readonly bootstrapExpect: number;
  /** gRPC addresses of other nodes, to form or join a cluster. */
  readonly join: readonly string[];
  /** A single node with embedded defaults: bootstraps itself and registers the demo types. */
  readonly dev: boolean;
  /** Register the demo resource types (implied by dev). */
  readonly demoTypes: boolean;
  /** Run the demo controller (a status on every demo.v1.Artist) on the leader. Needs demoTypes. */
  readonly demoControllers: boolean;
  /**
   * Run the built-in streaming.v1 controllers (SPU liveness, SPU groups, topics, partitions) on
   * the leader. Off by default for now; production deployments (and `make run`, `make cluster`,
   * docker-compose.yml) turn it on.
   */
  readonly controllers: boolean;
  /** With `controllers`: an SPU whose heartbeat has not changed for this long (ms) is Offline. Default 10,000. */
  readonly spuTimeoutMs: number;
  /** pino level: fatal, error, warn, info, debug, trace, silent. Default info. */
  readonly logLevel: string;
  /**
   * Milliseconds per Raft tick. Default 40: a heartbeat every 40 ms, an election timeout of
   * 10-20 ticks = 400-800 ms (etcd: 100 ms and 1-2 s). Why it is safe to be 2.5x quicker than
   * etcd, and what guards against needless elections: src/cli/README.md, "Election timing".
   */
  readonly tickMs: number;
  /** Election timeout in ticks. Default 10. */
  readonly electionTicks: number;
  /** Heartbeat interval in ticks. Default 1. */
  readonly heartbeatTicks: number;
  /**
   * When the followers' connections with the leader break (its process died: the kernel resets
   * them at once), they campaign in turn instead of waiting out the election timeout: in id
   * order, the first at once, each next one this many ticks later. Default 5 (200 ms at the
   * default 40 ms tick: the spacing the 100 ms tick had with 2; closer turns split the vote on
   * a loaded machine, where a pre-vote round can take longer than 80 ms); 0 = always wait for
   * the election timeout.
   */
  readonly leaderLostTicks: number;
  /**
   * A leader whose log write has been running this long (a hung disk) hands leadership to its
   * most up-to-date follower (ReplicaOptions.writeStallMs). Default 5,000; 0 = never.
   */
  readonly writeStallMs: number;
  /**
   * Entries applied between snapshots, at least (ReplicaOptions.snapshotEveryEntries). Default
   * 10,000.
   */
  readonly snapshotEntries: number;
  /**
   * A snapshot also waits until the log applied since the last one holds this percentage of
   * the last snapshot's size in bytes, capped at `snapshotMaxLogBytes` (ReplicaOptions.
   * snapshotLogRatio, as a percentage). Default 25; 0 = every `snapshotEntries` entries.
   */
  readonly snapshotLogPercent: number;
  /** The cap of that byte trigger (ReplicaOptions.snapshotMaxLogBytes). Default 64 MiB. */
  readonly snapshotMaxLogBytes: number;
  /** Log entries kept behind a snapshot for followers a little behind. Default 10,000. */
  readonly snapshotRetainEntries: number;
  /** ... and at most this many bytes of them. Default 32 MiB. */
  readonly snapshotRetainBytes: number;
  /**
   * The Raft log's store for a NEW data dir: `wal` (segment files, the default) or `level`
   * (LevelDB). A data dir that already has a log keeps the store it was made with (no
   * migration yet).
   */
  readonly logStore: LogStoreKind;
  /** With the `wal` store: bytes per segment file, preallocated. Default 64 MiB (a multiple of 4096, at least 64 KiB). */
  readonly walSegmentBytes: number;
  /** Change events kept per node so watchers can resume (older resumes get COMPACTED). Default 100,000. */
  readonly watchWindowEvents: number;
  /**
   * Memory the change events kept per node for resumes may hold, each event counted as twice
   * its resource's deterministic size (`windowEventBytes`, src/stream; measured 1.0-2.0x): the
   * oldest go first when any bound is passed, so rewriting one large resource many times
   * cannot pin its old versions. Default sized to the heap: `defaultWatchWindowBytes`.
   */
  readonly watchWindowBytes: number;
  /**
   * The data quota (docs/security.md "Quotas"): the deterministic size of all stored resources
   * (src/store size.ts) may not grow above it; writes that would are refused with NO_SPACE and
   * raise the NO_SPACE alarm. Stamped into every command this node builds. Default: an eighth
   * of the V8 heap limit, rounded down to a MiB (`defaultQuotaBytes`); at least 1 MiB.
   */
  readonly quotaBytes: number;
  /** Events queued for one watcher before it is ended with SLOW_CONSUMER. Default 10,000. */
  readonly watchBufferEvents: number;
  /** A quiet watch stream gets a bookmark this often (ms). Default 5,000. */
  readonly watchBookmarkMs: number;
  /** Most resources in one List page; a larger `limit` is clamped to it, none means it (docs/api.md "Paging"). Default 1,000. */
  readonly listMaxPage: number;
  /** Most comparisons, and most ops in each branch, of one transaction (docs/api.md "Transactions"). Default 128 (etcd's --max-txn-ops). */
  readonly txnMaxOps: number;
  /** Most leases the cluster holds (docs/api.md "Leases"); a grant past it is NO_SPACE. Default 100,000. */
  readonly maxLeases: number;
  /**
   * Most resources attached to one lease (docs/api.md "Leases"); a write that would attach one
   * more is TOO_LARGE. Default 10,000, the default `watchBufferEvents`, so one revoke's deletes
   * fit one watcher's buffer.
   */
  readonly leaseMaxAttached: number;
  /** Most snapshots held for unfinished paged lists, one per revision; the oldest is dropped first. Default 64. */
  readonly listSnapshots: number;
  /** How long a paged list's snapshot serves its continue tokens, from its first page (ms). Default 300,000. */
  readonly listSnapshotTtlMs: number;
  /**
   * Host names (or `host:port`, the port ignored) the HTTP API answers besides the loopback
   * names (localhost, 127.0.0.1, [::1]), IP literals and this node's own --http-addr and
   * --advertise-addr hosts, which it always answers. A request whose Host header names
   * anything else is refused (403), defeating DNS rebinding. `*` turns the check off.
   */
  readonly httpAllowedHosts: readonly string[];
  /** Test-only planted bugs, comma-separated (stage 7's checker proofs). Never set in production. */
  readonly plantedBugs: readonly string[];
  /**
   * TLS material (PEM files; docs/security.md): the cluster CA, this node's certificate (its
   * identity `cairn://node/<node-id>`) and key. All three or none. With them, the gRPC port
   * speaks TLS (peers must present a certificate from the CA naming the node they claim to be;
   * API clients need none) and so does the HTTP API; SIGHUP reloads the files.
   */
  readonly tlsCaFile?: string;
  readonly tlsCertFile?: string;
  readonly tlsKeyFile?: string;
  /**
   * Serve without TLS on an address other than loopback: anyone who can reach the ports can
   * join the cluster, read and rewrite everything. Refused unless asked for; said at start, in
   * /v1/agent/self and in the metric `cairn_insecure`.
   */
  readonly insecure: boolean;
  /**
   * Access control (docs/security.md "Tokens and roles"): default deny; callers present tokens.
   * Default: on whenever the node has TLS material (runs securely), off otherwise; a `--dev` or
   * loopback node may turn it on.
   */
  readonly acl: boolean;
  /**
   * A file holding a token secret (`cairn_<accessor>_<64 hex>`) that becomes a management token
   * when this node leads and no token of that accessor exists (as Consul's
   * `initial_management`): how automation starts a secure cluster without `cairn acl bootstrap`.
   */
  readonly aclInitialManagementTokenFile?: string;
  /** `/metrics` answers without a token (ACLs on): for a scraper on a trusted network. Default false. */
  readonly metricsAnonymous: boolean;

  // ---- Limits that protect the node (docs/security.md "Limits"); 0 turns a cap off. ----
  /** Open HTTP connections at most; over it a new connection gets 503 and is closed. Default 4,096. */
  readonly httpMaxConnections: number;
  /** A request's headers must all arrive within this (ms) of its first byte (slowloris). Default 10,000. */
  readonly httpHeadersTimeoutMs: number;
  /** A whole request (headers and body) must arrive within this (ms); responses such as watches may stream longer. Default 120,000. */
  readonly httpRequestTimeoutMs: number;
  /** An idle keep-alive HTTP connection is closed after this (ms). Default 5,000. */
  readonly httpKeepAliveTimeoutMs: number;
  /** Open connections on the gRPC port at most, not counting the cluster's peers. Default 4,096. */
  readonly grpcMaxConnections: number;
  /** Concurrent HTTP/2 streams (calls) per gRPC connection. Default 2,048. */
  readonly grpcMaxConcurrentStreams: number;
  /** The largest request message of a public gRPC method (bytes). Default 4 MiB. */
  readonly grpcMaxMessageBytes: number;
  /**
   * The gRPC port pings a connection quiet this long (ms) and drops it if the ping is not
   * answered within 20 s. Default 0 (off): it would also drop a paused peer's Raft stream,
   * which the cluster service takes as the peer's death (src/forwarding/cluster-service.ts).
   */
  readonly grpcKeepaliveMs: number;
  /** A gRPC connection with no call for this long (ms) is sent GOAWAY (clients reconnect when needed). Default 1,800,000. */
  readonly grpcIdleTimeoutMs: number;
  /** Watch streams open at once on this node (HTTP and gRPC). Default 50,000. */
  readonly watchMaxStreams: number;
  /** Watch streams open at once on one connection. Default 1,000. */
  readonly watchMaxStreamsPerConnection: number;
  /** Requests per second from one address (HTTP and public gRPC, probes exempt). Default 10,000. */
  readonly rateLimitPerAddress: number;
  /** Requests one address may send at once before the rate applies. Default 20,000. */
  readonly rateLimitPerAddressBurst: number;
  /** Requests per second with one bearer token. Default 10,000. */
  readonly rateLimitPerToken: number;
  /** Requests one token may send at once before the rate applies. Default 20,000. */
  readonly rateLimitPerTokenBurst: number;
  /** Addresses and tokens each rate limiter remembers at most (least recently seen forgotten first). Default 100,000. */
  readonly rateLimitMaxKeys: number;
  /** The audit log: a file, `-` for stderr, or `off`. Unset: `<data-dir>/audit.log`. */
  readonly auditLogFile?: string;
  /** The audit file is rotated past this size (bytes) to `<file>.1`; 0 = never (rotate it externally). Default 64 MiB. */
  readonly auditLogMaxBytes: number;
  /**
   * V8's heap growing factor for the `cairn agent` process, as a percentage above 1 (V8's
   * `--heap-growing-percent`, set at start by the process entry, not by `startAgent`): the old
   * generation may grow to (1 + n/100) times its live size before the next full collection.
   * 0 = V8's own heuristic (up to 4x with a heap limit of 2 GiB or more). Default 100, twice
   * the live size, as Go's GOGC=100 gives etcd: docs/performance.md "Where a node's memory
   * goes" (a leader after ten minutes of CAS load 318-344 MiB, against 522 MiB and climbing with
   * V8's own; 50 saved another ~30 MiB but cost watch fan-out CPU). Ignored when `node` itself
   * was started with `--heap-growing-percent`.
   */
  readonly heapGrowingPercent: number;
}

/** The Raft log stores a node can use (src/platform: WalLogStore, LevelLogStore). */
export type LogStoreKind = 'wal' | 'level';
export const LOG_STORE_KINDS: readonly LogStoreKind[] = ['wal', 'level'];

/** The largest `--heap-growing-percent` accepts (4x, V8's own largest factor). */
export const MAX_HEAP_GROWING_PERCENT = 300;

/**
 * The V8 flag the `cairn agent` process sets at start for `heapGrowingPercent`, or undefined
 * when there is nothing to set: 0 (V8's own heuristic), or `node` was started with the flag
 * (`execArgv`), which wins.
 */
export function heapGrowingFlag(percent: number, execArgv: readonly string[]): string | undefined {
  if (percent === 0) return undefined;
  if (execArgv.some((a) => /^--heap[-_]growing[-_]percent(=|$)/.test(a))) return undefined;
  return `--heap-growing-percent=${percent}`;
}

/** The smallest quota `--quota-bytes` accepts: one resource at the size limit must fit. */
export const MIN_QUOTA_BYTES = 1024 * 1024;

/**
 * The default data quota: an eighth of the V8 heap limit, rounded down to a MiB (and at least
 * MIN_QUOTA_BYTES). Measured (docs/security.md "Quotas", scripts/measure-store-heap.mjs): the
 * store holds 1.0 to 2.9 heap bytes per counted byte, depending on the data's shape; a
 * follower installing a snapshot holds two stores for a moment; the watch window, the
 * de-duplication window and the log hold more. An eighth leaves room for all of it.
 */
export function defaultQuotaBytes(heapLimitBytes: number = getHeapStatistics().heap_size_limit): number {
  const mib = 1024 * 1024;
  return Math.max(MIN_QUOTA_BYTES, Math.floor(heapLimitBytes / 8 / mib) * mib);
}

/**
 * The default watch window: a 128th of the V8 heap limit, rounded down to a MiB, from 8 MiB to
 * 256 MiB: 32 MiB with Node 20's default limit on a 64-bit machine with 16 GiB or more (about
 * 26,000 events of a 256-byte value: 23 s of writes at 1,139/s, the full 300 s below 90/s).
 * docs/performance.md "Where a node's memory goes" has the arithmetic.
 */
export function defaultWatchWindowBytes(heapLimitBytes: number = getHeapStatistics().heap_size_limit): number {
  const mib = 1024 * 1024;
  return Math.min(256 * mib, Math.max(8 * mib, Math.floor(heapLimitBytes / 128 / mib) * mib));
}

export const DEFAULT_GRPC_ADDR = '127.0.0.1:7500';
export const DEFAULT_HTTP_ADDR = '127.0.0.1:7501';

export const AGENT_DEFAULTS: Omit<AgentConfig, 'nodeId' | 'dataDir' | 'advertiseAddr' | 'auditLogFile'> = {
  grpcAddr: DEFAULT_GRPC_ADDR,
  httpAddr: DEFAULT_HTTP_ADDR,
  bootstrap: false,
  bootstrapExpect: 0,
  join: [],
  dev: false,
  demoTypes: false,
  demoControllers: false,
  controllers: false,
  spuTimeoutMs: 10_000, // STREAMING_DEFAULTS.spuTimeoutMs (a test keeps them equal)
  logLevel: 'info',
  tickMs: 40,
  electionTicks: 10,
  heartbeatTicks: 1,
  leaderLostTicks: 5,
  writeStallMs: 5_000,
  snapshotEntries: 10_000,
  snapshotLogPercent: 25,
  snapshotMaxLogBytes: 64 * 1024 * 1024,
  snapshotRetainEntries: 10_000,
  snapshotRetainBytes: 32 * 1024 * 1024,
  logStore: 'wal',
  walSegmentBytes: 64 * 1024 * 1024, // DEFAULT_SEGMENT_BYTES of src/platform (a test keeps them equal)
  watchWindowEvents: 100_000,
  watchWindowBytes: defaultWatchWindowBytes(),
  quotaBytes: defaultQuotaBytes(),
  watchBufferEvents: 10_000,
  watchBookmarkMs: 5_000,
  listMaxPage: 1_000, // PAGING_DEFAULTS of src/api
  txnMaxOps: 128, // TXN_LIMITS_DEFAULT of src/api
  maxLeases: 100_000,
  leaseMaxAttached: 10_000,
  listSnapshots: 64,
  listSnapshotTtlMs: 300_000,
  httpAllowedHosts: [],
  plantedBugs: [],
  insecure: false,
  acl: false,
  metricsAnonymous: false,
  httpMaxConnections: 4096,
  httpHeadersTimeoutMs: 10_000,
  httpRequestTimeoutMs: 120_000,
  httpKeepAliveTimeoutMs: 5_000,
  grpcMaxConnections: 4096,
  grpcMaxConcurrentStreams: 2048,
  grpcMaxMessageBytes: 4 * 1024 * 1024,
  grpcKeepaliveMs: 0,
  grpcIdleTimeoutMs: 1_800_000,
  watchMaxStreams: 50_000,
  watchMaxStreamsPerConnection: 1_000,
  rateLimitPerAddress: 10_000,
  rateLimitPerAddressBurst: 20_000,
  rateLimitPerToken: 10_000,
  rateLimitPerTokenBurst: 20_000,
  rateLimitMaxKeys: 100_000,
  auditLogMaxBytes: 64 * 1024 * 1024,
  heapGrowingPercent: 100,
};

/** `auditLogFile` when not set: this file in the data dir. */
export const AUDIT_LOG_FILE_NAME = 'audit.log';

/** Where the audit log goes: the configured file, `-` (stderr), `off`, or `<data-dir>/audit.log`. */
export function auditLogPath(config: Pick<AgentConfig, 'auditLogFile' | 'dataDir'>): string {
  return config.auditLogFile ?? `${config.dataDir.replace(/\/+$/, '')}/${AUDIT_LOG_FILE_NAME}`;
}
