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
  /** Milliseconds per Raft tick. Default 100 (election timeout 10-20 ticks). */
  readonly tickMs: number;
  /** Election timeout in ticks. Default 10. */
  readonly electionTicks: number;
  /** Heartbeat interval in ticks. Default 1. */
  readonly heartbeatTicks: number;
  /**
   * When the followers' connections with the leader break (its process died: the kernel resets
   * them at once), they campaign in turn instead of waiting out the election timeout: in id
   * order, the first at once, each next one this many ticks later. Default 2; 0 =
   * always wait for the election timeout.
   */
  readonly leaderLostTicks: number;
  /** Entries applied between snapshots. Default 10,000. */
  readonly snapshotEntries: number;
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
  /** Events queued for one watcher before it is ended with SLOW_CONSUMER. Default 10,000. */
  readonly watchBufferEvents: number;
  /** A quiet watch stream gets a bookmark this often (ms). Default 5,000. */
  readonly watchBookmarkMs: number;
  /** Most resources in one List page; a larger `limit` is clamped to it, none means it (docs/api.md "Paging"). Default 1,000. */
  readonly listMaxPage: number;
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
}

/** The Raft log stores a node can use (src/platform: WalLogStore, LevelLogStore). */
export type LogStoreKind = 'wal' | 'level';
export const LOG_STORE_KINDS: readonly LogStoreKind[] = ['wal', 'level'];

export const DEFAULT_GRPC_ADDR = '127.0.0.1:7500';
export const DEFAULT_HTTP_ADDR = '127.0.0.1:7501';

export const AGENT_DEFAULTS: Omit<AgentConfig, 'nodeId' | 'dataDir' | 'advertiseAddr'> = {
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
  tickMs: 100,
  electionTicks: 10,
  heartbeatTicks: 1,
  leaderLostTicks: 2,
  snapshotEntries: 10_000,
  logStore: 'wal',
  walSegmentBytes: 64 * 1024 * 1024, // DEFAULT_SEGMENT_BYTES of src/platform (a test keeps them equal)
  watchWindowEvents: 100_000,
  watchBufferEvents: 10_000,
  watchBookmarkMs: 5_000,
  listMaxPage: 1_000, // PAGING_DEFAULTS of src/api
  listSnapshots: 64,
  listSnapshotTtlMs: 300_000,
  httpAllowedHosts: [],
  plantedBugs: [],
  insecure: false,
};
