/**
 * The test hosts: N network namespaces `cairn-j<run>-n<i>`, each with one veth pair whose outer
 * end is enslaved to a bridge `cj<run>br` in the root namespace, addresses 10.201.<b>.11.. on
 * the nodes and .1 on the bridge (the harness, in the root namespace, talks to the nodes over it).
 * Each namespace runs one `cairn agent` process.
 *
 * TLS is on (docs/security.md): `Hosts.create` makes the run's PKI in `<dir>/pki` (a CA, and a
 * node certificate per host naming its 10.x address, `--host <ip>`), every agent gets
 * --tls-ca-file/--tls-cert-file/--tls-key-file, its URL is https://, `Host.fetch` trusts the CA,
 * and `Hosts.clientTls` is what the workloads' clients are given. TLS brings access control
 * (default deny): `Hosts.create` also makes a management token secret (`<dir>/pki/management-token`,
 * `Hosts.token`), every agent gets --acl-initial-management-token-file, `Host.fetch` sends it,
 * and so do the workloads' clients (`token`).
 *
 * Everything made here carries the run's name prefix, so `cleanupLeftovers` finds it again after
 * a crash of the harness: namespaces `cairn-j*` (their processes are killed first; nftables
 * tables and tc qdiscs live inside them and go with them) and links `cj<hex4>*`.
 */
import { execFile, execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { closeSync, mkdirSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import { Agent, fetch as undiciFetch } from 'undici';
import { makeTestPki, type TestPki } from '../../src/auth/testing/index.js';
import { newSecret, type TlsFiles } from '../../src/auth/index.js';
import { TEST_WAL_SEGMENT_BYTES } from '../../src/server/testing/index.js';

const execFileAsync = promisify(execFile);

/** The checkout: dist/cluster-test/jepsen/hosts.js -> ../../../ */
export const REPO_ROOT = fileURLToPath(new URL('../../../', import.meta.url));
export const CAIRN_BIN = path.join(REPO_ROOT, 'bin', 'cairn');

export const NS_PREFIX = 'cairn-j';
const LINK_RE = /^cj[0-9a-f]{4}(br|v\d+|p\d+)$/;
export const GRPC_PORT = 7500;
export const HTTP_PORT = 7501;

/** Runs a command, throwing with its stderr on failure. */
export async function run(cmd: string, args: readonly string[], input?: string): Promise<string> {
  if (input === undefined) {
    const { stdout } = await execFileAsync(cmd, args, { encoding: 'utf8' });
    return stdout;
  }
  return new Promise((resolve, reject) => {
    const c = spawn(cmd, args, { stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    c.stdout.on('data', (d: Buffer) => (out += d.toString()));
    c.stderr.on('data', (d: Buffer) => (err += d.toString()));
    c.on('error', reject);
    c.on('close', (code) => (code === 0 ? resolve(out) : reject(new Error(`${cmd} ${args.join(' ')} exited ${String(code)}: ${err.trim()}`))));
    c.stdin.end(input);
  });
}

function sh(cmd: string, args: readonly string[]): string {
  return execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

function quiet(cmd: string, args: readonly string[]): void {
  try {
    sh(cmd, args);
  } catch {
    // already gone
  }
}

/**
 * A run's owner file holds the harness's pid, so a second harness leaves a live run alone. In
 * /tmp itself, not os.tmpdir(): every harness on the machine must find every other's file, and
 * TMPDIR may differ between them (a test runner may set its own).
 */
export function ownerFile(runId: string): string {
  return path.join('/tmp', `cairn-jepsen-${runId}.owner`);
}

/** True when the harness process that made run `runId` is still alive. */
function ownerAlive(runId: string): boolean {
  try {
    const pid = Number(readFileSync(ownerFile(runId), 'utf8').trim());
    if (!Number.isSafeInteger(pid) || pid <= 0) return false;
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** `cairn-j1a2b-n3` -> `1a2b`; `cj1a2bv3` -> `1a2b`. */
function runIdOf(name: string): string {
  return name.startsWith(NS_PREFIX) ? name.slice(NS_PREFIX.length, NS_PREFIX.length + 4) : name.slice(2, 6);
}

/**
 * Removes every namespace and link a run of this harness made (by name prefix): kills the
 * processes inside each namespace, deletes the namespaces (their nftables tables and qdiscs
 * go with them), then the bridges and veths. With `only`, that run's; without, every run whose
 * harness is no longer alive (a crashed one). Returns what it removed.
 */
export function cleanupLeftovers(only?: string): string[] {
  const removed: string[] = [];
  const mine = (name: string): boolean => (only !== undefined ? runIdOf(name) === only : !ownerAlive(runIdOf(name)));
  let names: string[] = [];
  try {
    names = sh('ip', ['netns', 'list']).split('\n').map((l) => l.split(' ')[0] ?? '').filter((n) => n.startsWith(NS_PREFIX) && mine(n));
  } catch {
    names = [];
  }
  for (const ns of names) {
    let pids: string[] = [];
    try {
      pids = sh('ip', ['netns', 'pids', ns]).split('\n').filter((p) => /^\d+$/.test(p));
    } catch {
      pids = [];
    }
    for (const p of pids) {
      try {
        process.kill(Number(p), 'SIGKILL');
      } catch {
        // gone
      }
    }
    quiet('ip', ['netns', 'del', ns]);
    removed.push(`netns ${ns}${pids.length > 0 ? ` (killed ${pids.join(',')})` : ''}`);
  }
  let links: string[] = [];
  try {
    links = sh('ip', ['-o', 'link', 'show']).split('\n').map((l) => (l.split(': ')[1] ?? '').split('@')[0] ?? '');
  } catch {
    links = [];
  }
  for (const l of links) {
    if (!LINK_RE.test(l) || !mine(l)) continue;
    quiet('ip', ['link', 'del', l]);
    removed.push(`link ${l}`);
  }
  const ids = new Set([...names, ...links.filter((l) => LINK_RE.test(l) && mine(l))].map(runIdOf));
  for (const id of only !== undefined ? [only] : ids) rmSync(ownerFile(id), { force: true });
  return removed;
}

export interface ExitInfo {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
}

/** Environment a node must not inherit: CAIRN_* and the test runner's (tap's loader in NODE_OPTIONS). */
const INHERITED_NOT = /^(CAIRN_|NODE_OPTIONS$|NODE_V8_COVERAGE$|TAP|_TAPJS)/;

export class Host {
  private child: ChildProcess | undefined;
  private exited: Promise<ExitInfo> | undefined;
  private exitInfo: ExitInfo | undefined;
  paused = false;
  private readonly dispatcher: Agent;

  constructor(
    readonly index: number,
    readonly id: string,
    readonly ns: string,
    readonly ip: string,
    readonly dir: string,
    /** This node's certificate (naming its IP) and key, and the run's CA. */
    readonly tls: TlsFiles & { readonly caPem: string },
    /** The run's management token: its secret (sent by `fetch`) and the file every agent is given. */
    readonly token: { readonly secret: string; readonly file: string },
  ) {
    this.dispatcher = new Agent({ connect: { ca: tls.caPem } });
  }

  /**
   * `fetch` of `route` on this node's HTTPS API, trusting the run's CA (the global fetch cannot be
   * given one), with the run's management token (`init.headers`, if given, is a plain object).
   */
  async fetch(route: string, init: RequestInit = {}): Promise<Response> {
    const headers = { ...((init.headers ?? {}) as Record<string, string>), authorization: `Bearer ${this.token.secret}` };
    return (await undiciFetch(`${this.url}${route}`, { ...(init as object), headers, dispatcher: this.dispatcher } as Parameters<typeof undiciFetch>[1])) as unknown as Response;
  }

  get grpcAddr(): string {
    return `${this.ip}:${GRPC_PORT}`;
  }
  get url(): string {
    return `https://${this.ip}:${HTTP_PORT}`;
  }
  /** The agent's data dir. */
  get dataDir(): string {
    return path.join(this.dir, this.id);
  }
  get logFile(): string {
    return path.join(this.dir, `${this.id}.log`);
  }
  get pid(): number | undefined {
    return this.child?.pid;
  }
  running(): boolean {
    return this.child !== undefined && this.exitInfo === undefined;
  }

  /**
   * `ip netns exec NS env -u NODE_OPTIONS node bin/cairn agent ...`: both exec, so the pid is
   * node's. `extraArgs` go last (the run's `--planted-bugs`, for instance).
   */
  start(peers: readonly string[], expect: number, extraArgs: readonly string[] = []): void {
    if (this.running()) throw new Error(`${this.id} is already running`);
    const args = [
      'netns', 'exec', this.ns, 'env', '-u', 'NODE_OPTIONS', process.execPath, CAIRN_BIN, 'agent',
      '--node-id', this.id,
      '--data-dir', this.dataDir,
      '--grpc-addr', this.grpcAddr,
      '--http-addr', `${this.ip}:${HTTP_PORT}`,
      '--demo-types',
      '--wal-segment-bytes', String(TEST_WAL_SEGMENT_BYTES),
      '--bootstrap-expect', String(expect),
      '--tls-ca-file', this.tls.caFile,
      '--tls-cert-file', this.tls.certFile,
      '--tls-key-file', this.tls.keyFile,
      '--acl-initial-management-token-file', this.token.file,
      ...(peers.length > 0 ? ['--join', peers.join(',')] : []),
      ...extraArgs,
    ];
    const env: Record<string, string> = {};
    for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !INHERITED_NOT.test(k)) env[k] = v;
    const fd = openSync(this.logFile, 'a');
    let child: ChildProcess;
    try {
      child = spawn('ip', args, { cwd: REPO_ROOT, env, stdio: ['ignore', fd, fd] });
    } finally {
      closeSync(fd);
    }
    this.child = child;
    this.exitInfo = undefined;
    this.paused = false;
    this.exited = new Promise<ExitInfo>((resolve) => {
      child.once('error', () => resolve((this.exitInfo = { code: null, signal: null })));
      child.once('exit', (code, signal) => resolve((this.exitInfo = { code, signal })));
    });
  }

  signal(sig: NodeJS.Signals): void {
    if (this.child !== undefined && this.running()) this.child.kill(sig);
  }

  async kill9(): Promise<ExitInfo | undefined> {
    if (!this.running() || this.exited === undefined) return this.exitInfo;
    this.child?.kill('SIGKILL');
    this.paused = false;
    return this.exited;
  }

  /** Deletes the stopped agent's data dir: its next start is a node that never ran (it joins as new). */
  wipe(): void {
    if (this.running()) throw new Error(`${this.id} is running: stop it before wiping its data dir`);
    rmSync(this.dataDir, { recursive: true, force: true });
  }

  /** Runs a command inside this host's namespace. */
  exec(cmd: string, args: readonly string[], input?: string): Promise<string> {
    return run('ip', ['netns', 'exec', this.ns, cmd, ...args], input);
  }
}

export interface HostsOptions {
  readonly nodes: number;
  /** Where node data dirs and logs go. */
  readonly dir: string;
  /** 4 hex digits; by default a random one whose subnet no interface on this machine uses. */
  readonly runId?: string;
  /** More `cairn agent` flags for every node, at every start (`--planted-bugs a,b`). */
  readonly agentArgs?: readonly string[];
}

/** The namespaces, bridge and veths of one run, and their agents. */
export class Hosts {
  readonly hosts: Host[] = [];
  readonly bridge: string;
  readonly bridgeIp: string;
  private cleaned = false;
  /** The run's PKI (set by `create`). */
  pki: TestPki | undefined;
  /** The run's management token secret (set by `create`; `<dir>/pki/management-token`). */
  token: string | undefined;

  private constructor(
    readonly runId: string,
    readonly subnet: string,
    readonly agentArgs: readonly string[],
  ) {
    this.bridge = `cj${runId}br`;
    this.bridgeIp = `${subnet}.1`;
  }

  /** `tls` for `new CairnClient({ endpoints, tls })`: trust the run's CA. */
  get clientTls(): { readonly ca: string } {
    if (this.pki === undefined) throw new Error('no PKI: Hosts.create makes it');
    return { ca: this.pki.ca.certPem };
  }

  /**
   * Cleans up leftovers of earlier runs, makes the run's PKI (in `<dir>/pki`), then builds the
   * network. Registers an exit and signal hook that tears everything down even if the caller
   * never gets to `close()`.
   */
  static async create(o: HostsOptions): Promise<Hosts> {
    const left = cleanupLeftovers();
    if (left.length > 0) process.stderr.write(`cluster-test: removed leftovers of an earlier run: ${left.join('; ')}\n`);
    const runId = o.runId ?? freeRunId();
    if (!/^[0-9a-f]{4}$/.test(runId)) throw new Error(`runId must be 4 hex digits, got ${runId}`);
    const h = new Hosts(runId, subnetOf(runId), o.agentArgs ?? []);
    installExitHook(h);
    writeFileSync(ownerFile(runId), `${process.pid}\n`);
    mkdirSync(o.dir, { recursive: true });
    const pkiDir = path.join(o.dir, 'pki');
    mkdirSync(pkiDir, { recursive: true });
    const pki = await makeTestPki({ name: `Cairn fault-harness CA ${runId}`, dir: pkiDir });
    h.pki = pki;
    const token = { secret: newSecret('jepsen'), file: path.join(pkiDir, 'management-token') };
    writeFileSync(token.file, `${token.secret}\n`, { mode: 0o600 });
    h.token = token.secret;
    const certs = await Promise.all(Array.from({ length: o.nodes }, (_, i) => pki.node(`n${i + 1}`, { hosts: [`${h.subnet}.${11 + i}`] })));
    try {
      sh('ip', ['link', 'add', h.bridge, 'type', 'bridge']);
      sh('ip', ['addr', 'add', `${h.bridgeIp}/24`, 'dev', h.bridge]);
      sh('ip', ['link', 'set', h.bridge, 'up']);
      for (let i = 0; i < o.nodes; i++) {
        const ns = `${NS_PREFIX}${runId}-n${i + 1}`;
        const v = `cj${runId}v${i + 1}`;
        const p = `cj${runId}p${i + 1}`;
        const ip = `${h.subnet}.${11 + i}`;
        sh('ip', ['netns', 'add', ns]);
        sh('ip', ['link', 'add', v, 'type', 'veth', 'peer', 'name', p]);
        sh('ip', ['link', 'set', p, 'netns', ns]);
        sh('ip', ['link', 'set', v, 'master', h.bridge]);
        sh('ip', ['link', 'set', v, 'up']);
        sh('ip', ['-n', ns, 'link', 'set', p, 'name', 'eth0']);
        sh('ip', ['-n', ns, 'addr', 'add', `${ip}/24`, 'dev', 'eth0']);
        sh('ip', ['-n', ns, 'link', 'set', 'eth0', 'up']);
        sh('ip', ['-n', ns, 'link', 'set', 'lo', 'up']);
        const c = certs[i] as TlsFiles;
        h.hosts.push(new Host(i, `n${i + 1}`, ns, ip, o.dir, { caFile: c.caFile, certFile: c.certFile, keyFile: c.keyFile, caPem: pki.ca.certPem }, token));
      }
    } catch (e) {
      h.closeSync();
      throw e;
    }
    return h;
  }

  /** Starts every agent with --bootstrap-expect N --join <the others>. */
  startAll(): void {
    for (const h of this.hosts) this.start(h);
  }

  start(h: Host): void {
    h.start(this.hosts.filter((o) => o !== h).map((o) => o.grpcAddr), this.hosts.length, this.agentArgs);
  }

  /** Kills every agent and removes the namespaces and links. Idempotent. */
  closeSync(): string[] {
    if (this.cleaned) return [];
    this.cleaned = true;
    for (const h of this.hosts) {
      h.signal('SIGCONT');
      h.signal('SIGKILL');
    }
    live.delete(this);
    return cleanupLeftovers(this.runId);
  }
}

/** The run's /24: 10.201.<1..250>.0, from its id. */
function subnetOf(runId: string): string {
  return `10.201.${(parseInt(runId, 16) % 250) + 1}`;
}

/**
 * A random run id whose namespaces do not exist and whose subnet no interface in the root
 * namespace has: two harnesses running at once (another test, another worktree) must not share
 * a subnet, or the root namespace would route one run's packets onto the other's bridge.
 */
function freeRunId(): string {
  let used = '';
  try {
    used = sh('ip', ['-o', '-4', 'addr', 'show']) + sh('ip', ['netns', 'list']);
  } catch {
    used = '';
  }
  for (let i = 0; i < 64; i++) {
    const id = Math.floor(Math.random() * 0x10000).toString(16).padStart(4, '0');
    if (!used.includes(` ${subnetOf(id)}.`) && !used.includes(`${NS_PREFIX}${id}`)) return id;
  }
  throw new Error('no free subnet under 10.201.0.0/16 for a harness run (64 random tries); make cluster-test-clean removes leftovers');
}

const live = new Set<Hosts>();
let hooked = false;

function installExitHook(h: Hosts): void {
  live.add(h);
  if (hooked) return;
  hooked = true;
  process.on('exit', () => {
    for (const x of [...live]) x.closeSync();
  });
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.once(sig, () => {
      for (const x of [...live]) x.closeSync();
      process.kill(process.pid, sig);
    });
  }
}
