/**
 * The two systems under test, each a 3-node cluster of real processes on loopback with its
 * data dirs under one temporary directory (so on the same disk), started with its own default
 * timing and fsync on, and the same small key-value face for the load generator:
 *
 * - etcd: `etcd` processes (Debian's etcd-server), driven over gRPC by bench/etcd-client.ts.
 *   Read = Range (linearizable: serializable=false, etcd's default); CAS = Txn comparing the
 *   key's mod_revision with the one read, then Put; unconditional write = Put.
 * - Cairn: `node bin/cairn agent` processes (--bootstrap-expect 3 --join ...), driven by the
 *   client library (CairnClient). Keys are demo.v1.Album resources in namespace `bench`, the
 *   256-byte value is the `title`. Read = Read (linearizable); CAS = Write with `version` set to
 *   the version read; unconditional write = Write without version.
 *
 * Every worker talking to node K shares one gRPC channel (one HTTP/2 connection) to it, for
 * both systems.
 */
import * as grpc from '@grpc/grpc-js';
import { randomBytes } from 'node:crypto';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { monotonicFactory } from 'ulid';
import { createCa, createClientCert, createNodeCert, newSecret } from '../src/auth/index.js';
import { CairnClient, isCairnClientError, type ResourceRef } from '../src/client/index.js';
import { cairn } from '../src/gen/resource.js';
import { EtcdKv, etcdMessageSizes, etcdWatchProtocol, type EtcdStatus } from './etcd-client.js';
import { httpGet } from './fanout/agent.js';
import { CAIRN_TIMING_HISTOGRAMS, CAIRN_WINDOW_GAUGES, ETCD_TIMING_HISTOGRAMS } from './breakdown.js';
import { metricValue } from './fanout/proc.js';
import { cairnWatchProtocol, type GrpcWatchProtocol } from './fanout/watchers.js';
import type { WriteTarget } from './fanout/writer.js';
import { CAIRN_NAMESPACE, CAIRN_TYPE, ETCD_KEY_PREFIX, etcdKey, KEY_COUNT, keyName, makeValue, VALUE_BYTES } from './kv-data.js';
import { cutOff, heal } from './netcut.js';
import { cpuSeconds, freePorts, rssMiB, ServerProcess, until } from './procs.js';

export type SystemName = 'Cairn' | 'etcd';

/** An opaque version token from a read, handed back to `cas`. */
export type Version = unknown;

/** The operations the load generator drives, against one node. */
export interface KvOps {
  /** Linearizable read of key `k` (0-based): its version token. Throws if absent. */
  read(k: number): Promise<Version>;
  /** Compare-and-set: writes `value` to key `k` if it is still at `version`. False on a conflict. */
  cas(k: number, version: Version, value: string): Promise<boolean>;
  /** Unconditional write. */
  put(k: number, value: string, timeoutMs?: number): Promise<void>;
  /** Unconditional write of failover probe key `n`, in a key space of its own (not the preloaded keys). */
  probe(n: number, value: string, timeoutMs: number): Promise<void>;
}

export interface NodeHealth {
  readonly name: string;
  readonly up: boolean;
  readonly isLeader: boolean;
  /** The leader this node knows ('' for none). */
  readonly leader: string;
  /** How far this node has applied, and how far the log goes (for "caught up"). */
  readonly applied: number;
  readonly last: number;
  readonly note: string;
}

export interface KvSystem {
  readonly name: SystemName;
  readonly version: string;
  readonly nodeNames: readonly string[];
  /** Ops against node i; one gRPC channel per node, created on first use. */
  ops(i: number): KvOps;
  /** Node i's view of the cluster. */
  health(i: number): Promise<NodeHealth>;
  /** Waits until every node runs, agrees on one leader and has applied what the leader had; returns the leader's index. */
  waitHealthy(timeoutMs?: number): Promise<number>;
  pid(i: number): number | undefined;
  kill9(i: number): Promise<void>;
  restart(i: number): void;
  /** SIGSTOP node i (its connections stay open); `resume` SIGCONTs it. */
  pause(i: number): void;
  resume(i: number): void;
  /** Drops every packet node i sends or is sent (bench/netcut.ts); `reconnect` lets them through again. */
  cutOff(i: number): void;
  reconnect(): void;
  /** Drops the gRPC channels (a restarted node is reconnected to afresh). */
  resetClients(): void;
  /** SIGTERM every node (SIGKILL after a grace period) and closes the clients. */
  stop(): Promise<void>;
  /** Encoded sizes of one CAS round's request messages, for the report. */
  messageSizes(): Record<string, number>;
  /** Node i's Prometheus text (/metrics); undefined when it did not answer within 2 s. */
  metricsText(i: number): Promise<string | undefined>;
  /** The histogram of the log's fsyncs (etcd_disk_wal_fsync_duration_seconds, cairn_log_fsync_seconds); one of `timingHistograms`. */
  readonly fsyncHistogram: string;
  /** Histograms whose growth over a measured window each phase keeps per node (bench/breakdown.ts). */
  readonly timingHistograms: readonly string[];
  /** Gauges each phase reads at the end of its window (Cairn: the event-loop delay, reset at every scrape). */
  readonly windowGauges: readonly string[];
  /**
   * How many times node i has seen the leader change so far, from its metrics (etcd
   * `etcd_server_leader_changes_seen_total`, Cairn `cairn_raft_leader_changes_total`);
   * undefined if unavailable. Counted around every throughput phase: an election there is a
   * needless one (nothing was failed), the cost of too short an election timeout.
   */
  leaderChanges(i: number): Promise<number | undefined>;
}

/** What the watch fan-out phase (bench/fanout/cluster-phase.ts) needs of a system besides KvSystem. */
export interface WatchableSystem extends KvSystem {
  /** Where watchers of the whole data set (every key, live changes only) connect on node i, and how. */
  watchTarget(i: number): { readonly address: string; readonly protocol: GrpcWatchProtocol };
  /** The fan-out writer's target: node i, writing the data set's keys. */
  writeTarget(i: number): WriteTarget;
  /** Node i's watch metrics: streams (etcd: watchers) it holds, events it has sent so far; undefined when it did not answer in `timeoutMs`. */
  watchMetrics(i: number, timeoutMs?: number): Promise<{ readonly streams: number | undefined; readonly eventsSent: number | undefined } | undefined>;
}

/** One counter of node i's Prometheus text; undefined when it did not answer. */
async function scrapeCounter(url: string, name: string, ca?: string, token?: string): Promise<number | undefined> {
  try {
    const r = await httpGet(url, 2000, ca, token);
    return r.status === 200 ? metricValue(r.body, name) : undefined;
  } catch {
    return undefined;
  }
}

/** Scrapes two of node i's watch metrics from its Prometheus text. */
async function scrapeWatchMetrics(url: string, streams: string, eventsSent: string, timeoutMs: number, ca?: string, token?: string): Promise<{ streams: number | undefined; eventsSent: number | undefined } | undefined> {
  try {
    const r = await httpGet(url, timeoutMs, ca, token);
    if (r.status !== 200) return undefined;
    return { streams: metricValue(r.body, streams), eventsSent: metricValue(r.body, eventsSent) };
  } catch {
    return undefined;
  }
}

/**
 * The TLS material of one benchmark cluster, made with Cairn's own `src/auth` (ECDSA P-256): a
 * CA, one node certificate per node (serverAuth and clientAuth, SANs localhost, 127.0.0.1, ::1:
 * etcd's Go TLS accepts them for its client and peer ports alike) and a client certificate
 * `bench` that the load generator presents to both systems. For Cairn, TLS also turns access
 * control on (default deny): a management token secret, given to every agent with
 * --acl-initial-management-token-file and sent by the load generator with every request (etcd
 * runs without its auth, as before: its TLS rows check the client certificate only).
 */
export interface BenchTls {
  readonly caFile: string;
  readonly caPem: string;
  readonly nodes: ReadonlyMap<string, { readonly certFile: string; readonly keyFile: string }>;
  readonly client: { readonly certPem: string; readonly keyPem: string };
  /** Cairn's management token: its secret and the file holding it (mode 0600). */
  readonly token: string;
  readonly tokenFile: string;
}

/** Makes `BenchTls` for nodes `names` under `dir` (files mode 0600). */
export async function makeBenchTls(dir: string, names: readonly string[]): Promise<BenchTls> {
  await mkdir(dir, { recursive: true });
  const ca = await createCa({ name: 'Cairn bench CA', days: 2 });
  const caFile = path.join(dir, 'ca.pem');
  await writeFile(caFile, ca.certPem, { mode: 0o600 });
  const nodes = new Map<string, { certFile: string; keyFile: string }>();
  for (const n of names) {
    const pair = await createNodeCert(ca, { nodeId: n, hosts: [], days: 2 });
    const certFile = path.join(dir, `${n}.pem`);
    const keyFile = path.join(dir, `${n}-key.pem`);
    await writeFile(certFile, pair.certPem, { mode: 0o600 });
    await writeFile(keyFile, pair.keyPem, { mode: 0o600 });
    nodes.set(n, { certFile, keyFile });
  }
  const client = await createClientCert(ca, { name: 'bench', days: 2 });
  const token = newSecret('bench');
  const tokenFile = path.join(dir, 'management-token');
  await writeFile(tokenFile, `${token}\n`, { mode: 0o600 });
  return { caFile, caPem: ca.certPem, nodes, client: { certPem: client.certPem, keyPem: client.keyPem }, token, tokenFile };
}

function tlsFilesOf(tls: BenchTls, name: string): { readonly certFile: string; readonly keyFile: string } {
  const f = tls.nodes.get(name);
  if (f === undefined) throw new Error(`the bench PKI has no certificate for node ${name}`);
  return f;
}

/** The Prometheus text at `url` (https:// checked against `ca`, with `token`); undefined on failure or after 2 s. */
async function scrapeText(url: string, ca?: string, token?: string): Promise<string | undefined> {
  try {
    if (ca !== undefined) {
      const r = await httpGet(url, 2000, ca, token);
      return r.status === 200 ? r.body : undefined;
    }
    const res = await fetch(url, { signal: AbortSignal.timeout(2000) });
    return res.status === 200 ? await res.text() : undefined;
  } catch {
    return undefined;
  }
}

export { KEY_COUNT, VALUE_BYTES, makeValue, keyName };

/** Sum of the nodes' CPU seconds, and each one's. */
export function serverCpu(sys: KvSystem): number[] {
  return sys.nodeNames.map((_, i) => cpuSeconds(sys.pid(i)) ?? Number.NaN);
}

export function serverRss(sys: KvSystem): number[] {
  return sys.nodeNames.map((_, i) => rssMiB(sys.pid(i)) ?? Number.NaN);
}

/** Waits until `health` of every node agrees on one leader and each has applied the leader's last index. */
async function waitAgreed(sys: KvSystem, timeoutMs: number): Promise<number> {
  let last = '';
  let target = -1;
  return until(
    `${sys.name}: every node up, agreeing on one leader, and caught up`,
    timeoutMs,
    async () => {
      const hs = await Promise.all(sys.nodeNames.map((_, i) => sys.health(i)));
      last = hs.map((h) => `${h.name}: ${h.up ? `${h.isLeader ? 'leader' : 'follower'} of ${h.leader || '-'}, applied ${h.applied}/${h.last}` : `down (${h.note})`}`).join('; ');
      const leaders = hs.map((h, i) => (h.isLeader ? i : -1)).filter((i) => i >= 0);
      if (leaders.length !== 1) return undefined;
      const li = leaders[0] as number;
      const leader = hs[li] as NodeHealth;
      if (!hs.every((h) => h.up && h.leader === leader.name)) return undefined;
      if (target < 0) target = leader.last;
      return hs.every((h) => h.applied >= target) ? li : undefined;
    },
    () => last,
    100,
  );
}

// ---- what both systems share: their processes and their per-node clients ----------------

/**
 * A cluster of `ServerProcess`es with one lazily made client `C` per node: the process-management
 * members of `KvSystem`, written once for both systems. A subclass says how to make node i's
 * client (`newClient`) and how to stop one process (`stopProcess`).
 */
abstract class ProcessSystem<C extends { close(): void }> {
  readonly nodeNames: readonly string[];
  private clients: (C | undefined)[] = [];

  protected constructor(protected readonly procs: ServerProcess[]) {
    this.nodeNames = procs.map((p) => p.name);
  }

  /** Node i's client, made on first use. */
  protected client(i: number): C {
    let c = this.clients[i];
    if (c === undefined) {
      c = this.newClient(i);
      this.clients[i] = c;
    }
    return c;
  }

  protected abstract newClient(i: number): C;

  abstract waitHealthy(timeoutMs?: number): Promise<number>;

  /** Starts every node's process and waits (up to 60 s) until the cluster is healthy. */
  protected async launch(): Promise<void> {
    for (const p of this.procs) p.start();
    await this.waitHealthy(60_000);
  }

  /** Stops one process, as `stop` does for every node. */
  protected abstract stopProcess(p: ServerProcess): Promise<void>;

  /** Whether node i's process runs (false when the bench stopped it); throws, with its log, if it died unasked. */
  protected running(i: number): boolean {
    const p = this.procs[i] as ServerProcess;
    p.assertAlive();
    return p.running();
  }

  pid(i: number): number | undefined {
    return this.procs[i]?.pid;
  }

  async kill9(i: number): Promise<void> {
    await this.procs[i]?.kill9();
  }

  restart(i: number): void {
    this.procs[i]?.start();
  }

  /** SIGTERM node i, SIGKILL after `graceMs`; resolves once it is gone (`restart` starts it again). */
  async term(i: number, graceMs = 20_000): Promise<void> {
    await this.procs[i]?.term(graceMs);
  }

  pause(i: number): void {
    (this.procs[i] as ServerProcess).pause();
  }

  resume(i: number): void {
    (this.procs[i] as ServerProcess).cont();
  }

  cutOff(i: number): void {
    cutOff((this.procs[i] as ServerProcess).name);
  }

  reconnect(): void {
    heal();
  }

  resetClients(): void {
    for (const c of this.clients) c?.close();
    this.clients = [];
  }

  async stop(): Promise<void> {
    this.resetClients();
    await Promise.all(this.procs.map((p) => this.stopProcess(p)));
  }
}

// ---- etcd ----------------------------------------------------------------------------------

export class EtcdSystem extends ProcessSystem<EtcdKv> implements WatchableSystem {
  readonly name = 'etcd' as const;
  version = '';
  private readonly keys: Buffer[] = Array.from({ length: KEY_COUNT }, (_, k) => Buffer.from(etcdKey(k)));

  private constructor(
    procs: ServerProcess[],
    readonly clientAddrs: readonly string[],
    /** With TLS: the plaintext --listen-metrics-urls address of each node (the scrapes use it). */
    private readonly metricsAddrs: readonly string[],
    readonly tls: BenchTls | undefined,
  ) {
    super(procs);
  }

  /**
   * `opts.tls`: TLS everywhere, as Cairn's: https client URLs with --cert-file, --key-file,
   * --trusted-ca-file and --client-cert-auth (the load generator presents its client
   * certificate), mutual TLS between peers (--peer-cert-file, --peer-key-file,
   * --peer-trusted-ca-file, --peer-client-cert-auth, https peer URLs), and the metrics on a
   * plaintext --listen-metrics-urls of their own.
   */
  static async start(dir: string, opts: { readonly tls?: BenchTls } = {}, size = 3): Promise<EtcdSystem> {
    const tls = opts.tls;
    const ports = await freePorts(size * 3);
    const names = Array.from({ length: size }, (_, i) => `e${i + 1}`);
    const scheme = tls !== undefined ? 'https' : 'http';
    const peer = (i: number): string => `${scheme}://127.0.0.1:${ports[3 * i + 1] as number}`;
    const client = (i: number): string => `127.0.0.1:${ports[3 * i] as number}`;
    const metrics = (i: number): string => `127.0.0.1:${ports[3 * i + 2] as number}`;
    const initialCluster = names.map((n, i) => `${n}=${peer(i)}`).join(',');
    const token = `cairn-bench-${randomBytes(4).toString('hex')}`;
    const procs = names.map((n, i) => {
      // Everything else (election 1000 ms, heartbeat 100 ms, fsync, snapshot count, quota)
      // is etcd's default.
      const args = [
        '--name', n,
        '--data-dir', path.join(dir, n),
        '--listen-client-urls', `${scheme}://${client(i)}`,
        '--advertise-client-urls', `${scheme}://${client(i)}`,
        '--listen-peer-urls', peer(i),
        '--initial-advertise-peer-urls', peer(i),
        '--initial-cluster', initialCluster,
        '--initial-cluster-state', 'new',
        '--initial-cluster-token', token,
        '--logger', 'zap',
        '--log-outputs', 'stderr',
        '--log-level', 'warn',
        ...(tls !== undefined
          ? [
              '--cert-file', tlsFilesOf(tls, n).certFile, '--key-file', tlsFilesOf(tls, n).keyFile,
              '--trusted-ca-file', tls.caFile, '--client-cert-auth',
              '--peer-cert-file', tlsFilesOf(tls, n).certFile, '--peer-key-file', tlsFilesOf(tls, n).keyFile,
              '--peer-trusted-ca-file', tls.caFile, '--peer-client-cert-auth',
              '--listen-metrics-urls', `http://${metrics(i)}`,
            ]
          : []),
      ]; // prettier-ignore
      return new ServerProcess(n, 'etcd', args, path.join(dir, `${n}.log`));
    });
    const sys = new EtcdSystem(procs, names.map((_, i) => client(i)), names.map((_, i) => (tls !== undefined ? metrics(i) : client(i))), tls);
    await sys.launch();
    return sys;
  }

  protected override newClient(i: number): EtcdKv {
    const tls = this.tls;
    return new EtcdKv(this.clientAddrs[i] as string, 10_000, tls !== undefined ? grpc.credentials.createSsl(Buffer.from(tls.caPem), Buffer.from(tls.client.keyPem), Buffer.from(tls.client.certPem)) : undefined);
  }

  ops(i: number): KvOps {
    const c = this.client(i);
    const keys = this.keys;
    return {
      read: async (k) => {
        const kv = await c.get(keys[k] as Buffer);
        if (kv === undefined) throw new Error(`etcd: key ${k} is missing`);
        return kv.modRevision;
      },
      cas: (k, version, value) => c.casPut(keys[k] as Buffer, version as number, Buffer.from(value)),
      put: async (k, value, timeoutMs) => {
        await c.put(keys[k] as Buffer, Buffer.from(value), timeoutMs);
      },
      probe: async (n, value, timeoutMs) => {
        await c.put(Buffer.from(`/bench/failover-probe-${n}`), Buffer.from(value), timeoutMs);
      },
    };
  }

  async health(i: number): Promise<NodeHealth> {
    const name = this.nodeNames[i] as string;
    if (!this.running(i)) return { name, up: false, isLeader: false, leader: '', applied: 0, last: 0, note: 'stopped' };
    let s: EtcdStatus;
    try {
      s = await this.client(i).status(1000);
    } catch (e) {
      return { name, up: false, isLeader: false, leader: '', applied: 0, last: 0, note: e instanceof Error ? e.message : String(e) };
    }
    this.version = s.version;
    // Member ids are etcd's; the names are ours: map through the answers collected so far.
    this.memberNames.set(s.memberId, name);
    const leaderName = s.leader === '0' ? '' : (this.memberNames.get(s.leader) ?? `member ${s.leader}`);
    return { name, up: true, isLeader: s.leader === s.memberId, leader: leaderName, applied: s.raftAppliedIndex, last: s.raftIndex, note: '' };
  }

  private readonly memberNames = new Map<string, string>();

  override async waitHealthy(timeoutMs = 60_000): Promise<number> {
    // Learn every member id first (a down node's id is remembered from before).
    await until('etcd: every member answers Status', timeoutMs, async () => ((await Promise.all(this.nodeNames.map((_, i) => this.health(i)))).every((h) => h.up) ? true : undefined));
    return waitAgreed(this, timeoutMs);
  }

  /** SIGKILL: the data dir is thrown away, and etcd takes seconds over a clean stop. */
  protected override stopProcess(p: ServerProcess): Promise<void> {
    return p.kill9();
  }

  readonly fsyncHistogram = 'etcd_disk_wal_fsync_duration_seconds';
  readonly timingHistograms: readonly string[] = ETCD_TIMING_HISTOGRAMS;
  readonly windowGauges: readonly string[] = [];

  metricsText(i: number): Promise<string | undefined> {
    return scrapeText(`http://${this.metricsAddrs[i] as string}/metrics`);
  }

  leaderChanges(i: number): Promise<number | undefined> {
    return scrapeCounter(`http://${this.metricsAddrs[i] as string}/metrics`, 'etcd_server_leader_changes_seen_total');
  }

  watchTarget(i: number): { address: string; protocol: GrpcWatchProtocol } {
    return { address: this.clientAddrs[i] as string, protocol: etcdWatchProtocol(Buffer.from(ETCD_KEY_PREFIX)) };
  }

  writeTarget(i: number): WriteTarget {
    return { system: 'etcd', endpoint: this.clientAddrs[i] as string };
  }

  /** etcd's own watch gauges (mvcc/metrics.go): watchers registered on this member, events it has sent. */
  watchMetrics(i: number, timeoutMs = 10_000): Promise<{ streams: number | undefined; eventsSent: number | undefined } | undefined> {
    return scrapeWatchMetrics(`http://${this.metricsAddrs[i] as string}/metrics`, 'etcd_debugging_mvcc_watcher_total', 'etcd_debugging_mvcc_events_total', timeoutMs);
  }

  messageSizes(): Record<string, number> {
    const s = etcdMessageSizes(this.keys[0] as Buffer, Buffer.from(makeValue(0, 0)));
    return { readRequest: s.rangeRequest, casRequest: s.txnRequest };
  }
}

// ---- Cairn ---------------------------------------------------------------------------------

/** dist/bench/systems.js -> the checkout. */
export const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url));
export const CAIRN_BIN = path.join(REPO_ROOT, 'bin', 'cairn');
const ALBUM = CAIRN_TYPE;
const NAMESPACE = CAIRN_NAMESPACE;

/** Variables an agent must not inherit: CAIRN_* (the command line alone says what runs) and NODE_OPTIONS. */
const INHERITED_NOT = /^(CAIRN_|NODE_OPTIONS$|NODE_V8_COVERAGE$)/;

/** The environment an agent is started with: this one without CAIRN_* and NODE_OPTIONS. */
export function cairnAgentEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !INHERITED_NOT.test(k)) env[k] = v;
  return env;
}

interface AgentSelf {
  readonly id: string;
  readonly role: string;
  readonly leader: string | null;
  readonly commit_index: number;
  readonly applied_index: number;
  readonly last_index: number;
}

export interface CairnStartOptions {
  /** Extra `node` flags for every agent (e.g. --cpu-prof --cpu-prof-dir=DIR), from BENCH_CAIRN_NODE_FLAGS. */
  readonly nodeFlags?: readonly string[];
  /** Extra `cairn agent` flags for every agent (e.g. --log-store level), from BENCH_CAIRN_AGENT_FLAGS. */
  readonly agentFlags?: readonly string[];
  /**
   * TLS on every node (--tls-*: mutual TLS between nodes, HTTPS API) and so access control: the
   * load generator trusts the CA, presents its client certificate and sends the management token.
   */
  readonly tls?: BenchTls;
}

export class CairnSystem extends ProcessSystem<CairnClient> implements WatchableSystem {
  readonly name = 'Cairn' as const;
  readonly version: string;
  private readonly refs: ResourceRef[] = Array.from({ length: KEY_COUNT }, (_, k) => ({ type: ALBUM, name: keyName(k), tenancy: { namespace: NAMESPACE } }));
  /** Request ids: a monotonic ULID costs ~1 µs, the client's default ulid() ~46 µs of load-generator CPU. */
  private readonly requestId = monotonicFactory();

  private constructor(
    procs: ServerProcess[],
    readonly grpcAddrs: readonly string[],
    readonly httpAddrs: readonly string[],
    version: string,
    readonly tls: BenchTls | undefined,
  ) {
    super(procs);
    this.version = version;
  }

  /** Node i's HTTP API base URL (https:// with TLS). */
  private httpUrl(i: number): string {
    return `${this.tls !== undefined ? 'https' : 'http'}://${this.httpAddrs[i] as string}`;
  }

  static async start(dir: string, opts: CairnStartOptions = {}, size = 3): Promise<CairnSystem> {
    const ports = await freePorts(size * 2);
    const names = Array.from({ length: size }, (_, i) => `n${i + 1}`);
    const grpcAddr = (i: number): string => `127.0.0.1:${ports[2 * i] as number}`;
    const httpAddr = (i: number): string => `127.0.0.1:${ports[2 * i + 1] as number}`;
    const env = cairnAgentEnv();
    const procs = names.map((n, i) => {
      const others = names.map((_, j) => j).filter((j) => j !== i).map(grpcAddr);
      // Default tick (40 ms), election (10 ticks), heartbeat (1 tick) and leader-lost turns (5 ticks), snapshots every
      // 10,000 entries; every log batch fsynced (always, in Cairn).
      const args = [
        ...(opts.nodeFlags ?? []),
        CAIRN_BIN, 'agent',
        '--node-id', n,
        '--data-dir', path.join(dir, n),
        '--grpc-addr', grpcAddr(i),
        '--http-addr', httpAddr(i),
        '--demo-types',
        '--bootstrap-expect', String(size),
        '--join', others.join(','),
        '--log-level', 'warn',
        ...(opts.tls !== undefined ? ['--tls-ca-file', opts.tls.caFile, '--tls-cert-file', tlsFilesOf(opts.tls, n).certFile, '--tls-key-file', tlsFilesOf(opts.tls, n).keyFile, '--acl-initial-management-token-file', opts.tls.tokenFile] : []),
        ...(opts.agentFlags ?? []),
      ]; // prettier-ignore
      return new ServerProcess(n, process.execPath, args, path.join(dir, `${n}.log`), env, REPO_ROOT);
    });
    const pkg = JSON.parse(await readFile(path.join(REPO_ROOT, 'package.json'), 'utf8')) as { version: string };
    const sys = new CairnSystem(procs, names.map((_, i) => grpcAddr(i)), names.map((_, i) => httpAddr(i)), pkg.version, opts.tls);
    await mkdir(dir, { recursive: true });
    await sys.launch();
    return sys;
  }

  protected override newClient(i: number): CairnClient {
    // One endpoint: the benchmark chooses the node (leader or spread), not the client.
    const tls = this.tls;
    return new CairnClient({ endpoints: [this.grpcAddrs[i] as string], timeoutMs: 10_000, ...(tls !== undefined ? { tls: { ca: tls.caPem, cert: tls.client.certPem, key: tls.client.keyPem }, token: tls.token } : {}) });
  }

  ops(i: number): KvOps {
    const c = this.client(i);
    const refs = this.refs;
    return {
      read: async (k) => (await c.read(refs[k] as ResourceRef)).resource.version,
      cas: async (k, version, value) => {
        try {
          await c.write(refs[k] as ResourceRef, { data: { title: value }, version: version as string }, { requestId: this.requestId() });
          return true;
        } catch (e) {
          if (isCairnClientError(e, 'CAS_FAILED')) return false;
          throw e;
        }
      },
      put: async (k, value, timeoutMs) => {
        await c.write(refs[k] as ResourceRef, { data: { title: value } }, { requestId: this.requestId(), ...(timeoutMs !== undefined ? { timeoutMs } : {}) });
      },
      probe: async (n, value, timeoutMs) => {
        const ref: ResourceRef = { type: ALBUM, name: `failover-probe-${n}`, tenancy: { namespace: NAMESPACE } };
        await c.write(ref, { data: { title: value } }, { requestId: this.requestId(), timeoutMs });
      },
    };
  }

  async health(i: number): Promise<NodeHealth> {
    const name = this.nodeNames[i] as string;
    const down = (note: string): NodeHealth => ({ name, up: false, isLeader: false, leader: '', applied: 0, last: 0, note });
    if (!this.running(i)) return down('stopped');
    try {
      let s: AgentSelf;
      if (this.tls !== undefined) {
        // 401 until the leader has made the management token and this node has applied it.
        const r = await httpGet(`${this.httpUrl(i)}/v1/agent/self`, 1000, this.tls.caPem, this.tls.token);
        if (r.status !== 200) return down(`HTTP ${r.status}`);
        s = JSON.parse(r.body) as AgentSelf;
      } else {
        const res = await fetch(`${this.httpUrl(i)}/v1/agent/self`, { signal: AbortSignal.timeout(1000) });
        if (res.status !== 200) return down(`HTTP ${res.status}`);
        s = (await res.json()) as AgentSelf;
      }
      return { name, up: true, isLeader: s.role === 'leader', leader: s.leader ?? '', applied: s.applied_index, last: s.last_index, note: '' };
    } catch (e) {
      return down(e instanceof Error ? e.message : String(e));
    }
  }

  override waitHealthy(timeoutMs = 60_000): Promise<number> {
    return waitAgreed(this, timeoutMs);
  }

  /** SIGTERM: a clean stop, which is also when `node --cpu-prof` writes its profile. */
  protected override stopProcess(p: ServerProcess): Promise<void> {
    return p.term(20_000);
  }

  readonly fsyncHistogram = 'cairn_log_fsync_seconds';
  readonly timingHistograms: readonly string[] = CAIRN_TIMING_HISTOGRAMS;
  readonly windowGauges: readonly string[] = CAIRN_WINDOW_GAUGES;

  metricsText(i: number): Promise<string | undefined> {
    return scrapeText(`${this.httpUrl(i)}/metrics`, this.tls?.caPem, this.tls?.token);
  }

  leaderChanges(i: number): Promise<number | undefined> {
    return scrapeCounter(`${this.httpUrl(i)}/metrics`, 'cairn_raft_leader_changes_total', this.tls?.caPem, this.tls?.token);
  }

  watchTarget(i: number): { address: string; protocol: GrpcWatchProtocol } {
    return { address: this.grpcAddrs[i] as string, protocol: cairnWatchProtocol(ALBUM, NAMESPACE) };
  }

  writeTarget(i: number): WriteTarget {
    return { system: 'cairn-album', endpoint: this.grpcAddrs[i] as string };
  }

  watchMetrics(i: number, timeoutMs = 10_000): Promise<{ streams: number | undefined; eventsSent: number | undefined } | undefined> {
    return scrapeWatchMetrics(`${this.httpUrl(i)}/metrics`, 'cairn_watch_streams', 'cairn_watch_events_sent_total', timeoutMs, this.tls?.caPem, this.tls?.token);
  }

  messageSizes(): Record<string, number> {
    const pb = cairn.resource.v1;
    const id = { type: ALBUM, tenancy: { partition: '', namespace: NAMESPACE }, name: keyName(0), uid: '' };
    const readRequest = pb.ReadRequest.encode({ id, consistency: 0 }).finish().length;
    const casRequest = pb.WriteRequest.encode({ id, dataJson: JSON.stringify({ title: makeValue(0, 0) }), version: '12345678', requestId: this.requestId() }).finish().length;
    return { readRequest, casRequest };
  }
}
