/**
 * The real-process cluster harness (ARCHITECTURE.md, test tier 3): Cairn nodes started the way
 * a user starts them (`node bin/cairn agent ...`, one OS process each, free loopback ports, a
 * temporary data dir each), driven only through their public HTTP API.
 *
 * - `Cluster.start(t, {size})` forms a cluster with --bootstrap-expect; `addNode` starts one
 *   more with --join; each `ClusterNode` can be SIGKILLed, SIGTERMed, restarted on the same data
 *   dir (and ports), or have its data dir wiped.
 * - Helpers with deadlines: wait for a leader, wait until a node has caught up, write with
 *   retries under one Idempotency-Key, read and list linearizably.
 * - `WriteLoad` keeps writing unique resources from several workers and records every
 *   acknowledgement; `checkAcknowledged` proves none is lost (with the set checker).
 * - TLS is on by default (docs/security.md): one throwaway PKI per test process (`testPki()`, a
 *   CA and a certificate per node id, in a temporary directory), every node started with
 *   --tls-ca-file/--tls-cert-file/--tls-key-file, its URL https://, and `request` trusts that
 *   CA; clients of the library get `clientTls()`. `{ tls: false }` starts a plaintext cluster,
 *   for the tests that are about plaintext.
 * - Access control is on with TLS (docs/security.md "Tokens and roles"): a TLS cluster makes a
 *   management token secret (`cluster.token`, written to `<dir>/management-token`), starts every
 *   node with --acl-initial-management-token-file, and counts as formed only once that token
 *   works on every node. `request` (and `fetchNode`) send it to the cluster's nodes unless told
 *   otherwise (`token: null` is anonymous, a string is that token); library clients get
 *   `cluster.clientOptions()`; `cluster.makeToken(rules)` makes a scoped token.
 * - Teardown SIGKILLs every process this file started, also when a test fails or the test
 *   process is told to stop; on failure it prints each node's last log lines and keeps the
 *   data dirs and full logs for inspection (CLUSTER_KEEP=1 keeps them always).
 *
 * Nothing here sleeps to "let things settle": every wait polls a condition with a deadline
 * and says what it last saw when it gives up.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, openSync, readFileSync, rmSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { freePorts, TEST_WAL_SEGMENT_BYTES } from '../../src/server/testing/index.js';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import type { Test } from 'tap';
import { Agent, fetch as undiciFetch, setGlobalDispatcher } from 'undici';
import { makeTestPki, type TestPki } from '../../src/auth/testing/index.js';
import { newSecret, type PemPair, type TlsFiles } from '../../src/auth/index.js';
import { checkSet, type SetAdd, type SetCheckResult } from '../checker/set-checker.js';

/** The checkout: dist/cluster-test/cluster/harness.js -> ../../../ */
export const REPO_ROOT = fileURLToPath(new URL('../../../', import.meta.url));
/** What a user runs after `make build`. */
export const CAIRN_BIN = path.join(REPO_ROOT, 'bin', 'cairn');

export const ARTIST = 'demo.v1.Artist';
export const ALBUM = 'demo.v1.Album';

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
export const now = (): number => performance.now();

// ---- Processes: every child is tracked so nothing outlives the test ------------------------

const live = new Set<ChildProcess>();

function killAllSync(): void {
  for (const c of live) {
    try {
      c.kill('SIGKILL');
    } catch {
      // already gone
    }
  }
}

process.on('exit', killAllSync);
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
  // tap ends a test process that runs over its time with a signal: take the nodes along,
  // then die of the same signal.
  process.once(sig, () => {
    killAllSync();
    process.kill(process.pid, sig);
  });
}

/** `n` distinct free TCP ports on 127.0.0.1 (shared with the agent tests). */
export { freePorts };

// ---- TLS: one PKI per test process ----------------------------------------------------------

let pkiPromise: Promise<TestPki> | undefined;
let pkiDir: string | undefined;
let tlsDispatcher: Agent | undefined;
const nodeCerts = new Map<string, Promise<TlsFiles & PemPair>>();

/**
 * The test process's cluster PKI (a CA in a temporary directory, deleted at exit); made on first
 * use. Every TLS cluster of the process shares it, as the nodes of one real cluster share a CA.
 */
export function testPki(): Promise<TestPki> {
  pkiPromise ??= makeTestPki({ name: 'Cairn cluster-test CA' }).then((pki) => {
    pkiDir = pki.dir;
    tlsDispatcher = new Agent({ connect: { ca: pki.ca.certPem } });
    return pki;
  });
  return pkiPromise;
}

/** Node `id`'s certificate and key (made once per process; names only the loopback hosts). */
export function nodeTlsFiles(id: string): Promise<TlsFiles & PemPair> {
  let files = nodeCerts.get(id);
  if (files === undefined) {
    files = testPki().then((pki) => pki.node(id));
    nodeCerts.set(id, files);
  }
  return files;
}

/** `tls` for `new CairnClient({ endpoints, tls })`: trust the test CA (no client certificate). */
export async function clientTls(): Promise<{ readonly ca: string }> {
  return { ca: (await testPki()).ca.certPem };
}

process.on('exit', () => {
  if (pkiDir !== undefined && process.env['CLUSTER_KEEP'] !== '1') {
    try {
      rmSync(pkiDir, { recursive: true, force: true });
    } catch {
      // best effort at exit
    }
  }
});

// ---- HTTP -----------------------------------------------------------------------------------

export interface HttpResult {
  /** 0 when no HTTP answer came (connection refused or reset, timeout). */
  readonly status: number;
  readonly body: unknown;
  /** For status 0: why; otherwise the error code of an error body, if any. */
  readonly error: string | undefined;
  readonly ms: number;
}

export interface RequestInit {
  readonly method?: string;
  readonly body?: unknown;
  readonly headers?: Readonly<Record<string, string>>;
  readonly timeoutMs?: number;
  /**
   * The bearer token to send. Absent: the management token of the harness cluster whose node the
   * URL names, if it has one (`tokenFor`); null: none (an anonymous caller); a string: that one.
   * An `authorization` header in `headers` wins over all three.
   */
  readonly token?: string | null;
}

// ---- Tokens: a secure cluster's management token, by node address ----------------------------

/** host:port of a node's HTTP API -> its cluster's management token (set by ClusterNode). */
const tokensByHost = new Map<string, string>();

/** The management token of the harness cluster serving `url`, if it runs with ACLs. */
export function tokenFor(url: string): string | undefined {
  try {
    return tokensByHost.get(new URL(url).host);
  } catch {
    return undefined;
  }
}

/** `headers` plus `authorization: Bearer <token>` as `RequestInit.token` says (never replacing one given). */
export function withToken(url: string, headers: Readonly<Record<string, string>>, token?: string | null): Record<string, string> {
  const out: Record<string, string> = { ...headers };
  if (Object.keys(out).some((k) => k.toLowerCase() === 'authorization')) return out;
  const t = token === null ? undefined : (token ?? tokenFor(url));
  if (t !== undefined) out['authorization'] = `Bearer ${t}`;
  return out;
}

/**
 * `fetch`, but an https:// URL goes through undici's own fetch with an Agent that trusts the test
 * CA (`testPki()` must have been made: every TLS cluster makes it first), or the CA a cluster
 * with its own PKI named (`trustHttpsCa`), since the global fetch cannot be given a CA. Sends the
 * cluster's management token as `request` does (`token`: null for none, a string for that one),
 * unless `init.headers` (a plain object) has an `authorization` header.
 */
export async function fetchNode(url: string, init: globalThis.RequestInit & { readonly token?: string | null }): Promise<Response> {
  const { token, ...rest } = init;
  const headers = withToken(url, (rest.headers ?? {}) as Record<string, string>, token);
  return fetchRaw(url, { ...rest, headers });
}

/** `fetchNode` without the token. */
async function fetchRaw(url: string, init: globalThis.RequestInit): Promise<Response> {
  if (!url.startsWith('https:')) return fetch(url, init);
  if (customDispatcher === undefined) await testPki();
  const dispatcher = customDispatcher ?? tlsDispatcher;
  return (await undiciFetch(url, { ...(init as object), dispatcher } as Parameters<typeof undiciFetch>[1])) as unknown as Response;
}

/** A cluster with a PKI of its own (ClusterOptions.tls as `ClusterTls`): its CA(s) for the harness's HTTPS. */
let customDispatcher: Agent | undefined;

/**
 * Makes every `request` of this process check HTTPS servers against `caPem` (a cluster CA):
 * for clusters started with their own `ClusterTls` (security tests with several CAs).
 */
export function trustHttpsCa(caPem: string | readonly string[]): void {
  customDispatcher = new Agent({ connect: { ca: typeof caPem === 'string' ? caPem : [...caPem] } });
  // Also the global fetch's (a test's own raw requests): undici's global dispatcher is shared.
  setGlobalDispatcher(customDispatcher);
}

/** One HTTP request with a deadline. Never throws: a failure to get an answer is status 0. */
export async function request(url: string, init: RequestInit = {}): Promise<HttpResult> {
  const started = now();
  const headers = withToken(url, init.headers ?? {}, init.token);
  let body: string | undefined;
  if (init.body !== undefined) body = JSON.stringify(init.body);
  // The API takes PUT, POST and PATCH only as application/json, with a body or without.
  if (body !== undefined || (init.method !== undefined && init.method !== 'GET' && init.method !== 'DELETE')) headers['content-type'] = 'application/json';
  try {
    const res = await fetchRaw(url, { method: init.method ?? 'GET', headers, ...(body !== undefined ? { body } : {}), signal: AbortSignal.timeout(init.timeoutMs ?? 5000) });
    const text = await res.text();
    let parsed: unknown = text;
    try {
      parsed = text === '' ? null : JSON.parse(text);
    } catch {
      // not JSON: keep the text
    }
    return { status: res.status, body: parsed, error: errorCode(parsed), ms: now() - started };
  } catch (e) {
    return { status: 0, body: null, error: networkError(e), ms: now() - started };
  }
}

function networkError(e: unknown): string {
  if (e instanceof Error) {
    if (e.name === 'TimeoutError' || e.name === 'AbortError') return 'timeout';
    const cause = (e as { cause?: unknown }).cause;
    if (typeof cause === 'object' && cause !== null) {
      const code = (cause as { code?: unknown }).code;
      if (typeof code === 'string') return code;
      const msg = (cause as { message?: unknown }).message;
      if (typeof msg === 'string') return msg;
    }
    return e.message;
  }
  return String(e);
}

function errorCode(body: unknown): string | undefined {
  const err = field(body, 'error');
  const code = field(err, 'code');
  return typeof code === 'string' ? code : undefined;
}

/** `o[k]` for an object `o`, else undefined. */
export function field(o: unknown, k: string): unknown {
  return typeof o === 'object' && o !== null && !Array.isArray(o) ? (o as Record<string, unknown>)[k] : undefined;
}

function str(o: unknown, k: string): string {
  const v = field(o, k);
  if (typeof v !== 'string') throw new Error(`expected a string at ${k} in ${JSON.stringify(o)}`);
  return v;
}

function num(o: unknown, k: string): number {
  const v = field(o, k);
  if (typeof v !== 'number') throw new Error(`expected a number at ${k} in ${JSON.stringify(o)}`);
  return v;
}

/** Short description of a result for messages and error tallies: `503 UNAVAILABLE`, `ECONNREFUSED`. */
export function describeResult(r: HttpResult): string {
  return r.status === 0 ? (r.error ?? 'no answer') : `${r.status}${r.error !== undefined ? ` ${r.error}` : ''}`;
}

/** Polls `probe` every `everyMs` until it returns a value (not undefined) or the deadline passes. */
export async function until<T>(what: string, timeoutMs: number, probe: () => Promise<T | undefined>, lastSeen: () => string = () => '', everyMs = 100): Promise<T> {
  const deadline = now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (now() > deadline) {
      const seen = lastSeen();
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${seen !== '' ? `; last seen: ${seen}` : ''}`);
    }
    await sleep(everyMs);
  }
}

// ---- Agent status ---------------------------------------------------------------------------

export interface AgentSelf {
  readonly id: string;
  readonly role: string;
  readonly term: number;
  readonly leader: string | null;
  readonly commitIndex: number;
  readonly appliedIndex: number;
  readonly lastIndex: number;
  readonly snapshotIndex: number;
}

export interface RaftServer {
  readonly id: string;
  readonly address: string;
  readonly suffrage: 'voter' | 'learner';
  readonly leader: boolean;
}

export interface RaftConfiguration {
  readonly index: number;
  readonly servers: readonly RaftServer[];
}

function parseSelf(b: unknown): AgentSelf {
  const leader = field(b, 'leader');
  return {
    id: str(b, 'id'),
    role: str(b, 'role'),
    term: num(b, 'term'),
    leader: typeof leader === 'string' ? leader : null,
    commitIndex: num(b, 'commit_index'),
    appliedIndex: num(b, 'applied_index'),
    lastIndex: num(b, 'last_index'),
    snapshotIndex: num(b, 'snapshot_index'),
  };
}

function parseConfiguration(b: unknown): RaftConfiguration {
  const servers = field(b, 'servers');
  if (!Array.isArray(servers)) throw new Error(`no servers in ${JSON.stringify(b)}`);
  return {
    index: num(b, 'index'),
    servers: servers.map((s: unknown) => {
      const suffrage = str(s, 'suffrage');
      if (suffrage !== 'voter' && suffrage !== 'learner') throw new Error(`bad suffrage in ${JSON.stringify(s)}`);
      return { id: str(s, 'id'), address: str(s, 'address'), suffrage, leader: field(s, 'leader') === true };
    }),
  };
}

export function describeConfiguration(c: RaftConfiguration): string {
  return c.servers.map((s) => `${s.id}${s.suffrage === 'learner' ? '(learner)' : ''}${s.leader ? '*' : ''}`).join(' ');
}

// ---- Nodes ----------------------------------------------------------------------------------

export interface ExitInfo {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
}

/**
 * Variables a node must not inherit from the test process: CAIRN_* (the command line alone
 * says what runs) and the test runner's own (tap's loader hooks in NODE_OPTIONS, coverage).
 */
const INHERITED_NOT = /^(CAIRN_|NODE_OPTIONS$|NODE_V8_COVERAGE$|TAP|_TAPJS)/;

/** One `cairn agent` process, restartable on the same data dir and ports. */
export class ClusterNode {
  private child: ChildProcess | undefined;
  private exitedPromise: Promise<ExitInfo> | undefined;
  private exitInfo: ExitInfo | undefined;
  /** Set by a start, cleared when the test stops the node (see meantToRun). */
  private wanted = false;
  /** The flags given to the last `startWith` (not the common ones), for `restart`. */
  private lastFlags: readonly string[] = [];
  /** Every start's full argument list, in order. */
  readonly starts: string[][] = [];
  /** This node's TLS files (a TLS cluster's nodes; set by `prepareTls`). */
  tlsFiles: TlsFiles | undefined;

  constructor(
    readonly cluster: Cluster,
    readonly id: string,
    readonly grpcPort: number,
    readonly httpPort: number,
  ) {
    if (cluster.token !== undefined) tokensByHost.set(this.httpAddr, cluster.token);
  }

  get grpcAddr(): string {
    return `127.0.0.1:${this.grpcPort}`;
  }
  get httpAddr(): string {
    return `127.0.0.1:${this.httpPort}`;
  }
  get url(): string {
    return `${this.cluster.tls ? 'https' : 'http'}://${this.httpAddr}`;
  }
  get dataDir(): string {
    return path.join(this.cluster.dir, this.id);
  }
  /** Everything the process wrote (pino JSON lines and the CLI's own messages), all starts. */
  get logFile(): string {
    return path.join(this.cluster.dir, `${this.id}.log`);
  }
  get pid(): number | undefined {
    return this.child?.pid;
  }

  /** True while the process runs. */
  running(): boolean {
    return this.child !== undefined && this.exitInfo === undefined;
  }

  /**
   * True from a start until the test stops the node (kill9, term): a node that is meant to
   * run. One that is meant to run but has exited crashed, and every wait says so at once.
   */
  meantToRun(): boolean {
    return this.wanted;
  }

  /** How the last process ended (undefined while it runs or before it started). */
  lastExit(): ExitInfo | undefined {
    return this.exitInfo;
  }

  /**
   * Starts `node bin/cairn agent --node-id ID --data-dir DIR --grpc-addr ... --http-addr ...`
   * plus the cluster's common flags and `flags` (--bootstrap-expect/--join). CAIRN_* variables
   * of the test's environment are not passed on: the command line alone says what runs.
   */
  start(flags: readonly string[]): void {
    if (this.running()) throw new Error(`node ${this.id} is already running (pid ${this.pid})`);
    if (this.cluster.tls && this.cluster.customTls === undefined && this.tlsFiles === undefined) throw new Error(`node ${this.id} has no TLS material; start it through Cluster.start/addNode (or await node.prepareTls())`);
    const tlsFlags = this.tlsFiles !== undefined ? ['--tls-ca-file', this.tlsFiles.caFile, '--tls-cert-file', this.tlsFiles.certFile, '--tls-key-file', this.tlsFiles.keyFile] : [];
    const args = [
      CAIRN_BIN,
      'agent',
      '--node-id',
      this.id,
      '--data-dir',
      this.dataDir,
      '--grpc-addr',
      this.grpcAddr,
      '--http-addr',
      this.httpAddr,
      ...this.cluster.commonFlags(),
      ...(this.cluster.customTls !== undefined ? this.cluster.customTls.nodeFlags(this.id) : tlsFlags),
      ...flags,
    ];
    this.starts.push(args.slice(1));
    const env: Record<string, string> = {};
    for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !INHERITED_NOT.test(k)) env[k] = v;
    const fd = openSync(this.logFile, 'a');
    let child: ChildProcess;
    try {
      // Through `env -u NODE_OPTIONS`, which execs node (same pid): tap's process tracking
      // hooks every spawn and puts its loader into NODE_OPTIONS, whose require hook cannot load
      // the extensionless ES module bin/cairn. The agent runs exactly as a user's would.
      child = spawn('env', ['-u', 'NODE_OPTIONS', process.execPath, ...args], { cwd: REPO_ROOT, env, stdio: ['ignore', fd, fd] });
    } finally {
      closeSync(fd); // the child has its own copy
    }
    live.add(child);
    this.child = child;
    this.wanted = true;
    this.exitInfo = undefined;
    this.exitedPromise = new Promise<ExitInfo>((resolve) => {
      child.once('error', () => {
        live.delete(child);
        this.exitInfo = { code: null, signal: null };
        resolve(this.exitInfo);
      });
      child.once('exit', (code, signal) => {
        live.delete(child);
        this.exitInfo = { code, signal };
        resolve(this.exitInfo);
      });
    });
  }

  /** Makes (or finds) this node's certificate in the test PKI, if its cluster runs TLS. */
  async prepareTls(): Promise<void> {
    if (this.cluster.tls && this.cluster.customTls === undefined && this.tlsFiles === undefined) this.tlsFiles = await nodeTlsFiles(this.id);
  }

  /** Starts the node again on its data dir and ports, with the flags of its last start. */
  restart(): void {
    if (this.starts.length === 0) throw new Error(`node ${this.id} was never started`);
    this.start(this.lastFlags);
  }

  /** Starts with new flags and remembers them for `restart`. */
  startWith(flags: readonly string[]): void {
    this.lastFlags = flags;
    this.start(flags);
  }

  /** Starts again on its data dir and ports with the flags of its last start plus `extra` (remembered for `restart`). */
  restartWith(extra: readonly string[]): void {
    this.startWith([...this.lastFlags, ...extra]);
  }

  /**
   * SIGSTOP: the process freezes but stays alive, and so do its connections (the kernel still
   * accepts and acknowledges for it): to its peers it has merely gone quiet.
   */
  pause(): void {
    if (!this.running()) throw new Error(`node ${this.id} is not running`);
    this.child?.kill('SIGSTOP');
  }

  /** SIGCONT after `pause`. */
  resume(): void {
    if (!this.running()) throw new Error(`node ${this.id} is not running`);
    this.child?.kill('SIGCONT');
  }

  /** SIGKILL; resolves once the process is gone. */
  async kill9(): Promise<ExitInfo> {
    const child = this.child;
    if (!child || !this.exitedPromise) throw new Error(`node ${this.id} was never started`);
    this.wanted = false;
    if (this.exitInfo) return this.exitInfo;
    child.kill('SIGKILL');
    return this.exitedPromise;
  }

  /**
   * SIGTERM (a clean stop: the agent hands over leadership, finishes requests, closes its
   * files), then SIGKILL if it is still running after `graceMs`. Says how long it took and
   * whether it had to be forced.
   */
  async term(graceMs = 15_000): Promise<ExitInfo & { readonly ms: number; readonly forced: boolean }> {
    const child = this.child;
    if (!child || !this.exitedPromise) throw new Error(`node ${this.id} was never started`);
    const started = now();
    this.wanted = false;
    if (this.exitInfo) return { ...this.exitInfo, ms: 0, forced: false };
    child.kill('SIGTERM');
    let forced = false;
    const timer = setTimeout(() => {
      forced = true;
      child.kill('SIGKILL');
    }, graceMs);
    const info = await this.exitedPromise.finally(() => clearTimeout(timer));
    return { ...info, ms: now() - started, forced };
  }

  /** Waits for the process to exit by itself. */
  exited(): Promise<ExitInfo> {
    if (!this.exitedPromise) throw new Error(`node ${this.id} was never started`);
    return this.exitedPromise;
  }

  /** Deletes the data dir (the node must be stopped). */
  async wipe(): Promise<void> {
    if (this.running()) throw new Error(`node ${this.id} is running; stop it before wiping its data dir`);
    await rm(this.dataDir, { recursive: true, force: true });
  }

  /** The whole log file so far. */
  log(): string {
    return existsSync(this.logFile) ? readFileSync(this.logFile, 'utf8') : '';
  }

  /** Log lines (pino JSON) whose `msg` is exactly `msg`, parsed. */
  logEvents(msg: string): Record<string, unknown>[] {
    const out: Record<string, unknown>[] = [];
    for (const line of this.log().split('\n')) {
      if (!line.startsWith('{') || !line.includes(msg)) continue;
      try {
        const ev = JSON.parse(line) as unknown;
        if (field(ev, 'msg') === msg) out.push(ev as Record<string, unknown>);
      } catch {
        // a torn last line of a killed process
      }
    }
    return out;
  }

  /**
   * GET /v1/agent/self, or undefined if the node does not answer it (yet). With ACLs that is
   * also until the management token has reached this node (it is made once a leader is elected).
   */
  async self(timeoutMs = 1000): Promise<AgentSelf | undefined> {
    const r = await request(`${this.url}/v1/agent/self`, { timeoutMs });
    this.lastSelf = describeResult(r);
    return r.status === 200 ? parseSelf(r.body) : undefined;
  }

  /** How the last `self()` went when it gave nothing (`401 UNAUTHENTICATED`, `ECONNREFUSED`): for wait messages. */
  lastSelf = '';

  /**
   * Waits until this node accepts the cluster's management token (GET /v1/acl/token/self answers
   * 200 with it): the token was created by a leader and this node has applied it. At once for a
   * cluster without ACLs.
   */
  async waitTokenWorks(timeoutMs = 30_000): Promise<void> {
    const token = this.cluster.token;
    if (token === undefined) return;
    let last = '';
    await until(
      `node ${this.id} to accept the management token (the leader makes it from --acl-initial-management-token-file: look for "initial management token" in its log)`,
      timeoutMs,
      async () => {
        this.assertAlive();
        const r = await request(`${this.url}/v1/acl/token/self`, { token, timeoutMs: 1000 });
        last = `${describeResult(r)} ${JSON.stringify(r.body)}`;
        return r.status === 200 && field(r.body, 'management') === true ? true : undefined;
      },
      () => last,
    );
  }

  /** GET /v1/operator/raft/configuration as this node sees it. */
  async configuration(timeoutMs = 2000): Promise<RaftConfiguration | undefined> {
    const r = await request(`${this.url}/v1/operator/raft/configuration`, { timeoutMs });
    return r.status === 200 ? parseConfiguration(r.body) : undefined;
  }

  /** Waits for GET /readyz to answer 200 (has a leader and has applied what it knows is committed). */
  async waitReady(timeoutMs = 30_000): Promise<void> {
    let last = '';
    await until(
      `node ${this.id} to be ready`,
      timeoutMs,
      async () => {
        this.assertAlive();
        const r = await request(`${this.url}/readyz`, { timeoutMs: 1000 });
        last = `${describeResult(r)} ${JSON.stringify(r.body)}`;
        return r.status === 200 ? true : undefined;
      },
      () => last,
    );
  }

  /** Throws (with the log's tail) if the process has exited though it is meant to run. */
  assertAlive(): void {
    if (this.wanted && this.exitInfo !== undefined) {
      throw new Error(`node ${this.id} exited (code ${String(this.exitInfo.code)}, signal ${String(this.exitInfo.signal)}); log tail:\n${tail(this.log(), 15)}`);
    }
  }
}

export function tail(text: string, lines: number): string {
  return text.trimEnd().split('\n').slice(-lines).join('\n');
}

// ---- Clusters -------------------------------------------------------------------------------

export interface ClusterOptions {
  /** Nodes formed with --bootstrap-expect. */
  readonly size: number;
  /** Milliseconds per Raft tick (--tick-ms). Default: the agent's own default (40). */
  readonly tickMs?: number;
  /** --snapshot-entries. Default: the agent's own default (10,000). */
  readonly snapshotEntries?: number;
  /** More flags for every node. */
  readonly flags?: readonly string[];
  /** How long to wait for the first leader (and again for the management token). Default 60 s: a loaded 2-core machine takes 10 s and more just to start the processes. */
  readonly formTimeoutMs?: number;
  /**
   * TLS on every node. Default true: the test PKI (one per process). false: plaintext, only for
   * tests about plaintext. A `ClusterTls`: each node's own flags (`--tls-ca-file --tls-cert-file
   * --tls-key-file`, by node id, also for nodes added later) and the CA(s) the harness's HTTPS
   * requests trust (security tests with PKIs of their own).
   */
  readonly tls?: boolean | ClusterTls;
}

/** One rule of a role, as PUT /v1/acl/roles/{name} takes it (docs/security.md "Tokens and roles"). */
export interface AclRuleJson {
  readonly verbs: readonly string[];
  readonly types: readonly string[];
  readonly partitions?: readonly string[];
  readonly namespaces?: readonly string[];
  readonly name_prefix?: string;
}

/** A token made with `Cluster.makeToken`. */
export interface MadeToken {
  readonly accessorId: string;
  readonly secret: string;
  readonly role: string;
}

export interface ClusterTls {
  readonly caPem: string | readonly string[];
  readonly nodeFlags: (id: string) => readonly string[];
}

export class Cluster {
  readonly nodes: ClusterNode[] = [];
  private nextId: number;
  /** Whether the nodes serve TLS (ClusterOptions.tls). */
  readonly tls: boolean;
  /**
   * The management token's secret (`cairn_harness_<64 hex>`) of a TLS cluster, whose nodes run
   * with access control (on by default with TLS); undefined for a plaintext cluster. Every node
   * gets it with --acl-initial-management-token-file `tokenFile`; the harness's requests send it.
   */
  readonly token: string | undefined;
  /** The file holding `token` (mode 0600, in the cluster's directory). */
  readonly tokenFile: string;
  private roleSeq = 0;

  private constructor(
    readonly dir: string,
    private readonly opts: ClusterOptions,
  ) {
    this.nextId = opts.size + 1;
    this.tls = opts.tls !== false;
    this.token = this.tls ? newSecret('harness') : undefined;
    this.tokenFile = path.join(dir, 'management-token');
  }

  /**
   * Starts `size` nodes n1..nN, each with --bootstrap-expect N --join <the others>, and waits
   * until they agree on a leader and every one is ready. Registers a teardown on `t` that
   * SIGKILLs every node, prints each node's last log lines if `t` failed, and deletes the
   * data dirs unless the test failed (or CLUSTER_KEEP=1).
   */
  static async start(t: Test, opts: ClusterOptions): Promise<Cluster> {
    if (typeof opts.tls === 'object') trustHttpsCa(opts.tls.caPem);
    const dir = await mkdtemp(path.join(os.tmpdir(), 'cairn-cluster-'));
    const cluster = new Cluster(dir, opts);
    if (cluster.token !== undefined) await writeFile(cluster.tokenFile, `${cluster.token}\n`, { mode: 0o600 });
    t.teardown(async () => {
      const failed = !t.passing();
      await cluster.killAll();
      for (const n of cluster.nodes) if (tokensByHost.get(n.httpAddr) === cluster.token) tokensByHost.delete(n.httpAddr);
      if (failed) {
        for (const n of cluster.nodes) t.comment(`---- ${n.id} (${n.logFile}), last lines:\n${tail(n.log(), 25)}`);
      }
      if (failed || process.env['CLUSTER_KEEP'] === '1') t.comment(`cluster data dirs and full logs kept in ${dir}`);
      else await rm(dir, { recursive: true, force: true });
    });
    const ports = await freePorts(opts.size * 2);
    for (let k = 0; k < opts.size; k++) {
      cluster.nodes.push(new ClusterNode(cluster, `n${k + 1}`, ports[2 * k] as number, ports[2 * k + 1] as number));
    }
    await Promise.all(cluster.nodes.map((n) => n.prepareTls()));
    for (const n of cluster.nodes) {
      const others = cluster.nodes.filter((o) => o !== n).map((o) => o.grpcAddr);
      n.startWith(['--bootstrap-expect', String(opts.size), ...(others.length > 0 ? ['--join', others.join(',')] : [])]);
    }
    const formTimeoutMs = opts.formTimeoutMs ?? 60_000;
    // With ACLs, /v1/agent/self (what waitForLeader asks) answers only once the leader has made
    // the management token and the node has applied it: first the public leader route, then the
    // token, so a failure says which step did not happen.
    await cluster.waitForLeaderNamed(formTimeoutMs);
    // Ready includes "the management token works everywhere": every request after this may use it.
    await Promise.all(cluster.nodes.map((n) => n.waitTokenWorks(formTimeoutMs)));
    await cluster.waitForLeader({ timeoutMs: formTimeoutMs });
    await Promise.all(cluster.nodes.map((n) => n.waitReady()));
    return cluster;
  }

  /** Waits until every node of the cluster names the same leader on GET /v1/status/leader (no token needed). */
  private async waitForLeaderNamed(timeoutMs: number): Promise<string> {
    let last = '';
    return until(
      'every node to name the same leader (GET /v1/status/leader)',
      timeoutMs,
      async () => {
        for (const n of this.nodes) n.assertAlive();
        const rs = await Promise.all(this.nodes.map(async (n) => ({ n, r: await request(`${n.url}/v1/status/leader`, { token: null, timeoutMs: 1000 }) })));
        last = rs.map(({ n, r }) => `${n.id}: ${r.status === 200 ? `leader ${String(field(r.body, 'id'))}` : describeResult(r)}`).join(', ');
        const ids = new Set(rs.map(({ r }) => (r.status === 200 ? field(r.body, 'id') : undefined)));
        const [id] = ids;
        return ids.size === 1 && typeof id === 'string' && id !== '' ? id : undefined;
      },
      () => last,
    );
  }

  /**
   * What a library client of this cluster needs besides endpoints: `tls` trusting the cluster's
   * CA (the test PKI's, or the cluster's own) and the management `token` (or `token`, e.g. a
   * scoped one from `makeToken`; null for none). Spread into `new CairnClient({ endpoints, ...})`.
   */
  async clientOptions(token?: string | null): Promise<{ readonly tls?: { readonly ca: string }; readonly token?: string }> {
    const t = token === null ? undefined : (token ?? this.token);
    const custom = this.customTls;
    const tls = !this.tls ? undefined : custom !== undefined ? { ca: typeof custom.caPem === 'string' ? custom.caPem : custom.caPem.join('\n') } : await clientTls();
    return { ...(tls !== undefined ? { tls } : {}), ...(t !== undefined ? { token: t } : {}) };
  }

  /**
   * Makes a role with `rules` (PUT /v1/acl/roles/{role}) and a token holding it (POST
   * /v1/acl/tokens), with the management token, through the first running node: a scoped token
   * for a test. Throws with the node's answer when either is refused.
   */
  async makeToken(rules: readonly AclRuleJson[], opts: { readonly role?: string; readonly description?: string; readonly via?: ClusterNode } = {}): Promise<MadeToken> {
    if (this.token === undefined) throw new Error('this cluster runs without access control (no TLS): there are no tokens to make');
    const via = opts.via ?? this.running()[0];
    if (via === undefined) throw new Error('no running node to make a token through');
    const role = opts.role ?? `harness-role-${++this.roleSeq}`;
    const r1 = await request(`${via.url}/v1/acl/roles/${role}`, { method: 'PUT', body: { rules, ...(opts.description !== undefined ? { description: opts.description } : {}) }, token: this.token, timeoutMs: 15_000 });
    if (r1.status !== 200) throw new Error(`PUT /v1/acl/roles/${role} on ${via.id}: ${describeResult(r1)} ${JSON.stringify(r1.body)}`);
    const r2 = await request(`${via.url}/v1/acl/tokens`, { method: 'POST', body: { roles: [role], ...(opts.description !== undefined ? { description: opts.description } : {}) }, token: this.token, timeoutMs: 15_000 });
    if (r2.status !== 200) throw new Error(`POST /v1/acl/tokens on ${via.id}: ${describeResult(r2)} ${JSON.stringify(r2.body)}`);
    const made = { accessorId: str(r2.body, 'accessor_id'), secret: str(r2.body, 'secret_id'), role };
    // Committed is not yet applied everywhere: wait until every running node knows the token.
    await Promise.all(
      this.running().map(async (n) => {
        let last = '';
        await until(
          `node ${n.id} to accept the new token ${made.accessorId}`,
          15_000,
          async () => {
            const r = await request(`${n.url}/v1/acl/token/self`, { token: made.secret, timeoutMs: 1000 });
            last = describeResult(r);
            return r.status === 200 ? true : undefined;
          },
          () => last,
        );
      }),
    );
    return made;
  }

  /** Flags every node gets: the demo types, 256 KiB log segments (as in-process test agents) and the cluster's timing. */
  commonFlags(): string[] {
    return [
      '--demo-types',
      '--wal-segment-bytes',
      String(TEST_WAL_SEGMENT_BYTES),
      ...(this.opts.tickMs !== undefined ? ['--tick-ms', String(this.opts.tickMs)] : []),
      ...(this.opts.snapshotEntries !== undefined ? ['--snapshot-entries', String(this.opts.snapshotEntries)] : []),
      ...(this.token !== undefined ? ['--acl-initial-management-token-file', this.tokenFile] : []),
      ...(this.opts.flags ?? []),
    ];
  }

  /** The cluster's own PKI, when the test gave one (else the test PKI, or plaintext). */
  get customTls(): ClusterTls | undefined {
    return typeof this.opts.tls === 'object' ? this.opts.tls : undefined;
  }

  node(id: string): ClusterNode {
    const n = this.nodes.find((x) => x.id === id);
    if (!n) throw new Error(`no node ${id}`);
    return n;
  }

  /** The nodes meant to be running (started and not stopped by the test); throws if one of them crashed. */
  running(): ClusterNode[] {
    const out = this.nodes.filter((n) => n.meantToRun());
    for (const n of out) n.assertAlive();
    return out;
  }

  /** A new node (next id) with fresh ports, started with --join <the running nodes>: it joins as a learner. */
  async addNode(): Promise<ClusterNode> {
    const [grpcPort, httpPort] = await freePorts(2);
    const n = new ClusterNode(this, `n${this.nextId++}`, grpcPort as number, httpPort as number);
    this.nodes.push(n);
    await n.prepareTls();
    n.startWith(['--join', this.running().map((o) => o.grpcAddr).join(',')]);
    return n;
  }

  /**
   * Waits until one node says it is the leader and every node of `among` (default: the running
   * ones) names it. Returns the leader.
   */
  async waitForLeader(opts: { readonly among?: readonly ClusterNode[]; readonly timeoutMs?: number } = {}): Promise<ClusterNode> {
    let last = '';
    return until(
      'a leader every node agrees on',
      opts.timeoutMs ?? 30_000,
      async () => {
        const among = opts.among ?? this.running();
        for (const n of among) n.assertAlive();
        const selves = await Promise.all(among.map(async (n) => ({ n, s: await n.self() })));
        last = selves.map(({ n, s }) => `${n.id}: ${s ? `${s.role} t${s.term} leader=${s.leader ?? '-'}` : `no status (${n.lastSelf})`}`).join(', ');
        const leaders = selves.filter(({ s }) => s?.role === 'leader');
        if (leaders.length !== 1) return undefined;
        const leader = leaders[0]?.n as ClusterNode;
        return selves.every(({ s }) => s?.leader === leader.id) ? leader : undefined;
      },
      () => last,
    );
  }

  /** The current leader (waiting for one) and the other running nodes. */
  async roles(opts: { readonly timeoutMs?: number; readonly among?: readonly ClusterNode[] } = {}): Promise<{ leader: ClusterNode; followers: ClusterNode[] }> {
    const leader = await this.waitForLeader(opts);
    return { leader, followers: (opts.among ?? this.running()).filter((n) => n !== leader) };
  }

  /**
   * Waits until `node` has applied at least what the leader had committed when the wait began
   * (GET /v1/agent/self on both): the node has caught up.
   */
  async waitCaughtUp(node: ClusterNode, timeoutMs = 30_000): Promise<{ readonly target: number; readonly ms: number }> {
    const started = now();
    const leader = await this.waitForLeader({ timeoutMs, among: this.running().filter((n) => n !== node) });
    const ls = await until(`the leader ${leader.id}'s status`, 5000, () => leader.self());
    const target = ls.commitIndex;
    let last = '';
    await until(
      `node ${node.id} to apply index ${target} (the leader's commit index)`,
      timeoutMs,
      async () => {
        node.assertAlive();
        const s = await node.self();
        last = s ? `applied ${s.appliedIndex}, commit ${s.commitIndex}, role ${s.role}` : 'no answer';
        return s !== undefined && s.appliedIndex >= target ? true : undefined;
      },
      () => last,
    );
    return { target, ms: now() - started };
  }

  /** The Raft configuration as the leader reports it. */
  async configuration(): Promise<RaftConfiguration> {
    const leader = await this.waitForLeader();
    return until(`the configuration from ${leader.id}`, 5000, () => leader.configuration());
  }

  /** Waits until the leader's configuration satisfies `pred`. */
  async waitConfiguration(what: string, pred: (c: RaftConfiguration) => boolean, opts: { readonly timeoutMs?: number; readonly among?: readonly ClusterNode[] } = {}): Promise<RaftConfiguration> {
    let last = '';
    const timeoutMs = opts.timeoutMs ?? 30_000;
    return until(
      what,
      timeoutMs,
      async () => {
        const leader = await this.waitForLeader({ timeoutMs, ...(opts.among !== undefined ? { among: opts.among } : {}) });
        const c = await leader.configuration();
        if (c) last = describeConfiguration(c);
        return c !== undefined && pred(c) ? c : undefined;
      },
      () => last,
      200,
    );
  }

  /** SIGTERMs every running node at once (a clean stop), SIGKILL after the grace period. */
  async stopAll(graceMs = 15_000): Promise<void> {
    await Promise.all(this.nodes.filter((n) => n.running()).map((n) => n.term(graceMs)));
  }

  async killAll(): Promise<void> {
    await Promise.all(this.nodes.filter((n) => n.running()).map((n) => n.kill9()));
  }
}

// ---- Writes and reads -----------------------------------------------------------------------

export interface WriteSpec {
  readonly type?: string;
  readonly name: string;
  readonly namespace?: string;
  readonly data: unknown;
  /** Compare-and-swap on this version ("0": create only). Absent: upsert. */
  readonly version?: string;
  readonly key: string;
}

function resourceUrl(node: ClusterNode, type: string, name: string, namespace: string | undefined, query: Record<string, string> = {}): string {
  const q = new URLSearchParams({ ...(namespace !== undefined ? { namespace } : {}), ...query }).toString();
  return `${node.url}/v1/resource/${type}/${name}${q !== '' ? `?${q}` : ''}`;
}

/** One PUT with its Idempotency-Key. */
export function put(node: ClusterNode, w: WriteSpec, timeoutMs = 15_000): Promise<HttpResult> {
  return request(resourceUrl(node, w.type ?? ARTIST, w.name, w.namespace), {
    method: 'PUT',
    body: { data: w.data, ...(w.version !== undefined ? { version: w.version } : {}) },
    headers: { 'idempotency-key': w.key },
    timeoutMs,
  });
}

/** One GET; linearizable unless told otherwise. */
export function get(node: ClusterNode, type: string, name: string, opts: { namespace?: string; consistency?: 'linearizable' | 'stale'; timeoutMs?: number; token?: string | null } = {}): Promise<HttpResult> {
  return request(resourceUrl(node, type, name, opts.namespace, { consistency: opts.consistency ?? 'linearizable' }), { timeoutMs: opts.timeoutMs ?? 10_000, ...(opts.token !== undefined ? { token: opts.token } : {}) });
}

/** HTTP answers after which the same write (same key) is tried again: the outcome is unknown or nothing happened. */
export function retryable(r: HttpResult): boolean {
  return r.status === 0 || r.status === 503 || r.status === 504 || r.status === 500 || r.status === 502;
}

export interface Ack {
  readonly name: string;
  readonly key: string;
  readonly version: string;
  readonly data: unknown;
  /** The node that answered. */
  readonly via: string;
  /** When the acknowledgement arrived (performance.now()). */
  readonly at: number;
  /** When the first attempt was sent. */
  readonly sentAt: number;
  readonly attempts: number;
}

/**
 * Sends `w` until it is acknowledged (200), retrying with the same Idempotency-Key after any
 * answer that leaves the outcome unknown (no answer, 5xx), each time to the node `pick` gives.
 * Throws on a definite refusal (4xx) and at the deadline.
 */
export async function writeUntilAcked(
  pick: (attempt: number) => ClusterNode,
  w: WriteSpec,
  opts: { readonly deadlineMs?: number; readonly attemptTimeoutMs?: number; readonly errors?: Map<string, number> } = {},
): Promise<Ack> {
  const sentAt = now();
  const deadline = sentAt + (opts.deadlineMs ?? 30_000);
  let last = '';
  for (let attempt = 1; ; attempt++) {
    const node = pick(attempt);
    const r = await put(node, w, Math.max(1000, Math.min(opts.attemptTimeoutMs ?? 15_000, deadline - now())));
    if (r.status === 200) {
      return { name: w.name, key: w.key, version: str(r.body, 'version'), data: field(r.body, 'data'), via: node.id, at: now(), sentAt, attempts: attempt };
    }
    last = `${node.id}: ${describeResult(r)} ${r.status !== 0 ? JSON.stringify(r.body) : ''}`;
    if (opts.errors) opts.errors.set(describeResult(r), (opts.errors.get(describeResult(r)) ?? 0) + 1);
    if (!retryable(r)) throw new WriteRefused(`write ${w.name} (key ${w.key}) refused by ${last}`, r);
    if (now() > deadline) throw new Error(`write ${w.name} (key ${w.key}) not acknowledged after ${attempt} attempts; last: ${last}`);
    await sleep(Math.min(50 * attempt, 250));
  }
}

export class WriteRefused extends Error {
  override readonly name = 'WriteRefused';
  constructor(
    message: string,
    readonly result: HttpResult,
  ) {
    super(message);
  }
}

export interface StoredResource {
  readonly name: string;
  readonly version: string;
  readonly data: unknown;
}

/**
 * GET /v1/resources/{type} (linearizable unless told otherwise): every resource in the namespace,
 * by name. Lists are paged (docs/api.md "Paging"): this follows the continue tokens, all pages
 * at the first page's revision, and starts over if that revision is gone (410 COMPACTED).
 */
export async function list(node: ClusterNode, type: string, opts: { namespace?: string; consistency?: 'linearizable' | 'stale'; timeoutMs?: number } = {}): Promise<Map<string, StoredResource>> {
  return (await listAll(node, type, opts)).resources;
}

/** `list`, with the revision every page reflects. */
export async function listAll(
  node: ClusterNode,
  type: string,
  opts: { namespace?: string; consistency?: 'linearizable' | 'stale'; timeoutMs?: number } = {},
): Promise<{ resources: Map<string, StoredResource>; items: unknown[]; revision: string }> {
  for (let attempt = 0; ; attempt++) {
    const out = new Map<string, StoredResource>();
    const all: unknown[] = [];
    let revision = '';
    let token: string | undefined;
    let compacted = false;
    do {
      const q = new URLSearchParams({
        ...(opts.namespace !== undefined ? { namespace: opts.namespace } : {}),
        consistency: opts.consistency ?? 'linearizable',
        ...(token !== undefined ? { continue: token } : {}),
      });
      const r = await request(`${node.url}/v1/resources/${type}?${q.toString()}`, { timeoutMs: opts.timeoutMs ?? 15_000 });
      if (r.status === 410 && token !== undefined && attempt < 3) {
        compacted = true;
        break;
      }
      if (r.status !== 200) throw new Error(`list ${type} on ${node.id}: ${describeResult(r)} ${JSON.stringify(r.body)}`);
      const items = field(r.body, 'resources');
      if (!Array.isArray(items)) throw new Error(`list ${type} on ${node.id}: no resources array`);
      for (const it of items as unknown[]) {
        const name = str(field(it, 'id'), 'name');
        out.set(name, { name, version: str(it, 'version'), data: field(it, 'data') });
        all.push(it);
      }
      revision = String(field(r.body, 'revision'));
      const next = field(r.body, 'continue');
      token = typeof next === 'string' && next !== '' ? next : undefined;
    } while (token !== undefined);
    if (!compacted) return { resources: out, items: all, revision };
  }
}

// ---- Load -----------------------------------------------------------------------------------

export interface WriteLoadOptions {
  /** Resource names are `<prefix>-<worker>-<seq>`; Idempotency-Keys `<name>.key`. */
  readonly prefix: string;
  readonly namespace?: string;
  /** Concurrent writers. Default 3. */
  readonly workers?: number;
  /** The nodes writes may go to (asked before every attempt). Default: every running node. */
  readonly targets: () => readonly ClusterNode[];
  /** Per attempt. Default 12 s (a forwarded write waits for a new leader inside the node). */
  readonly attemptTimeoutMs?: number;
  /** A write still unacknowledged this long after its first attempt is given up (outcome unknown). Default 60 s. */
  readonly giveUpMs?: number;
  /** Pause between a worker's writes. Default 0. */
  readonly pauseMs?: number;
}

/**
 * Writes unique Artists from several workers, round-robin over the target nodes, retrying each
 * under its own Idempotency-Key until acknowledged. Every acknowledgement is recorded with the
 * version it reported; `check` proves every one is stored.
 */
export class WriteLoad {
  readonly acks: Ack[] = [];
  /** Writes given up with an unknown outcome. */
  readonly unknown: { name: string; key: string }[] = [];
  /** Writes definitely refused (4xx): should not happen. */
  readonly refused: string[] = [];
  /** Failed attempts by what they got (e.g. `503 UNAVAILABLE`, `ECONNREFUSED`). */
  readonly errors = new Map<string, number>();
  private running = false;
  private workers: Promise<void>[] = [];
  private rr = 0;
  private readonly started = now();

  constructor(private readonly opts: WriteLoadOptions) {}

  start(): this {
    this.running = true;
    const n = this.opts.workers ?? 3;
    for (let w = 0; w < n; w++) this.workers.push(this.work(w));
    return this;
  }

  /** Stops issuing new writes and waits for the writes in flight to be acknowledged or given up. */
  async stop(): Promise<void> {
    this.running = false;
    await Promise.all(this.workers);
  }

  private pick(): ClusterNode {
    const targets = this.opts.targets();
    if (targets.length === 0) throw new Error('no node to write to');
    return targets[this.rr++ % targets.length] as ClusterNode;
  }

  private async work(w: number): Promise<void> {
    for (let seq = 1; this.running; seq++) {
      const name = `${this.opts.prefix}-${w}-${seq}`;
      const spec: WriteSpec = { name, key: `${name}.key`, data: { name: `${this.opts.prefix} worker ${w} write ${seq}`, genre: 'rock' }, ...(this.opts.namespace !== undefined ? { namespace: this.opts.namespace } : {}) };
      try {
        this.acks.push(await writeUntilAcked(() => this.pick(), spec, { deadlineMs: this.opts.giveUpMs ?? 60_000, attemptTimeoutMs: this.opts.attemptTimeoutMs ?? 12_000, errors: this.errors }));
      } catch (e) {
        if (e instanceof WriteRefused) this.refused.push(e.message);
        else this.unknown.push({ name, key: spec.key });
      }
      if ((this.opts.pauseMs ?? 0) > 0) await sleep(this.opts.pauseMs ?? 0);
    }
  }

  /** Acknowledgements so far. */
  get count(): number {
    return this.acks.length;
  }

  /** Resolves once `n` more writes than now have been acknowledged. */
  async waitForMore(n: number, timeoutMs = 30_000): Promise<void> {
    const target = this.acks.length + n;
    await until(`${n} more acknowledged writes (have ${this.acks.length})`, timeoutMs, async () => (this.acks.length >= target ? true : undefined), () => this.summary(), 20);
  }

  /** The longest time between two consecutive acknowledgements (ms): how long writes stalled. */
  longestGapMs(): number {
    const times = this.acks.map((a) => a.at).sort((a, b) => a - b);
    let gap = 0;
    for (let i = 1; i < times.length; i++) gap = Math.max(gap, (times[i] as number) - (times[i - 1] as number));
    return gap;
  }

  summary(): string {
    const secs = (now() - this.started) / 1000;
    const errs = [...this.errors].map(([k, v]) => `${k} x${v}`).join(', ');
    return `${this.acks.length} acknowledged in ${secs.toFixed(1)} s, ${this.unknown.length} given up, ${this.refused.length} refused; longest stall ${Math.round(this.longestGapMs())} ms; retried attempts: ${errs === '' ? 'none' : errs}`;
  }

  /**
   * Lists the namespace linearizably on `node` and checks every acknowledged write is there
   * with the version it was acknowledged with (set checker: nothing lost, nothing unexpected).
   */
  async check(node: ClusterNode): Promise<{ readonly set: SetCheckResult; readonly versionMismatches: readonly string[] }> {
    return checkAcknowledged(node, this.acks, this.unknown, { prefix: this.opts.prefix, ...(this.opts.namespace !== undefined ? { namespace: this.opts.namespace } : {}) });
  }
}

/** Checks acknowledged writes against a linearizable list on `node`. */
export async function checkAcknowledged(
  node: ClusterNode,
  acks: readonly Ack[],
  unknown: readonly { name: string }[],
  opts: { readonly prefix: string; readonly namespace?: string },
): Promise<{ readonly set: SetCheckResult; readonly versionMismatches: readonly string[] }> {
  const stored = await list(node, ARTIST, opts.namespace !== undefined ? { namespace: opts.namespace } : {});
  const adds: SetAdd[] = [...acks.map((a) => ({ element: a.name, status: 'ok' as const })), ...unknown.map((u) => ({ element: u.name, status: 'info' as const }))];
  const finalRead = [...stored.keys()].filter((n) => n.startsWith(`${opts.prefix}-`));
  const versionMismatches: string[] = [];
  for (const a of acks) {
    const s = stored.get(a.name);
    if (s !== undefined && (s.version !== a.version || JSON.stringify(s.data) !== JSON.stringify(a.data))) {
      versionMismatches.push(`${a.name}: acknowledged version ${a.version} ${JSON.stringify(a.data)}, stored version ${s.version} ${JSON.stringify(s.data)} on ${node.id}`);
    }
  }
  return { set: checkSet(adds, finalRead), versionMismatches };
}

/** Median of a non-empty list. */
export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 === 1 ? (s[m] as number) : ((s[m - 1] as number) + (s[m] as number)) / 2;
}
