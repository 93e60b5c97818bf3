/**
 * `cairn agent [flags]`: starts a node and runs it until SIGINT or SIGTERM.
 *
 * The flags are parsed by the server's `loadAgentConfig` (with the environment and the config
 * file), not by commander, so the agent has one parser and one set of messages whichever way
 * it is started. The server module is imported only when an agent starts, so the client
 * commands never load Raft, gRPC or LevelDB.
 *
 * Shutdown: the first signal closes the agent cleanly and the process exits 0 once it has
 * closed; a second signal exits at once with 130 (an impatient operator, or a stuck close).
 * SIGHUP re-reads the TLS files (docs/security.md, "Rotating certificates").
 */
import { setFlagsFromString } from 'node:v8';
import type { Command } from 'commander';
import type { AgentConfig, LoadAgentConfigInput } from '../server/index.js';
import type { CliIo } from './context.js';
import { CliError, ExitCode } from './errors.js';

export type StopSignal = 'SIGINT' | 'SIGTERM';

/** The parts of the server's `Agent` the command uses. */
export interface RunningAgent {
  /** Settles when the node is serving; a rejection means it failed to come up. */
  readonly ready: Promise<void>;
  close(): Promise<void>;
  /** Re-reads the TLS files (SIGHUP); resolves whether new material is in use. */
  reloadTls?(): Promise<boolean>;
}

/** What `runAgent` needs from the server and the process; tests pass fakes. */
export interface AgentDeps {
  readonly loadAgentConfig: (input: LoadAgentConfigInput) => AgentConfig;
  readonly startAgent: (config: AgentConfig) => Promise<RunningAgent>;
  readonly hostname: string;
  /** Calls `handler` on each SIGINT/SIGTERM until the returned function is called. */
  readonly onSignal: (handler: (signal: StopSignal) => void) => () => void;
  /** Ends the process now, without waiting for anything (the second signal). */
  readonly exit: (code: number) => void;
  /** Calls `handler` on each SIGHUP until the returned function is called. */
  readonly onReload?: (handler: () => void) => () => void;
  /** Process-wide settings from the configuration, before the agent starts (the V8 heap growing factor). */
  readonly tuneProcess?: (config: AgentConfig) => void;
}

/** The agent flags, for `cairn agent --help` (the parser is loadAgentConfig; a test keeps them in step). */
export const AGENT_FLAG_HELP: readonly (readonly [string, string])[] = [
  ['--config <file>', 'YAML or JSON file of options keyed by their camelCase names ($CAIRN_CONFIG)'],
  ['--node-id <id>', "this node's id, a lowercase DNS label (default: the host name's first label; cairn1 with --dev)"],
  ['--data-dir <dir>', 'where the log, snapshots and lock live (required, or ./cairn-data with --dev)'],
  ['--grpc-addr <host:port>', 'the gRPC port: Raft, forwarding, public API (default 127.0.0.1:7500)'],
  ['--advertise-addr <host:port>', 'the gRPC address peers use (default --grpc-addr; required if it binds 0.0.0.0 or [::])'],
  ['--http-addr <host:port>', 'the HTTP/JSON API (default 127.0.0.1:7501)'],
  ['--bootstrap', 'form a one-node cluster if this node has no state yet'],
  ['--bootstrap-expect <n>', 'form an n-voter cluster with the nodes in --join once n are known'],
  ['--join <host:port,...>', "other nodes' gRPC addresses, to form or join a cluster (repeatable)"],
  ['--dev', 'a single node: bootstraps itself, registers the demo types, data in ./cairn-data'],
  ['--demo-types', 'register the demo resource types (implied by --dev)'],
  ['--controllers', 'run the built-in streaming.v1 controllers (SPUs, SPU groups, topics, partitions) on the leader; off by default, pass it in production'],
  ['--spu-timeout-ms <ms>', 'with --controllers: an SPU silent for this long is Offline (default 10000)'],
  ['--demo-controllers', 'run the demo controller on the leader: a status on every demo.v1.Artist (needs --demo-types)'],
  ['--log-level <level>', 'fatal, error, warn, info, debug, trace or silent (default info)'],
  ['--tick-ms <ms>', 'milliseconds per Raft tick (default 40: an election timeout of 400-800 ms)'],
  ['--election-ticks <n>', 'election timeout in ticks (default 10)'],
  ['--heartbeat-ticks <n>', 'heartbeat interval in ticks (default 1)'],
  ['--leader-lost-ticks <n>', "when the leader's connections break (its process died), its followers campaign in turn, n ticks apart, not after the election timeout; 0 = always wait for the timeout (default 5)"],
  ['--write-stall-ms <ms>', 'a leader whose log write has run this long (a hung disk) hands leadership to its most up-to-date follower; 0 = never (default 5000)'],
  ['--snapshot-entries <n>', 'entries applied between snapshots, at least (default 10000)'],
  ['--snapshot-log-percent <n>', "a snapshot also waits until the log applied since the last one holds this percentage of the last snapshot's size in bytes (capped at --snapshot-max-log-bytes; each node adds its own 0-50% so they do not all snapshot at once), so the cost of snapshots per write does not grow with the data; 0 = every --snapshot-entries entries (default 25)"],
  ['--snapshot-max-log-bytes <n>', 'the cap of that: bytes of log applied since the last snapshot after which one is due (default 67108864, 64 MiB)'],
  ['--snapshot-retain-entries <n>', 'log entries kept behind a snapshot, so a follower a little behind catches up from the log, not a whole snapshot (default 10000)'],
  ['--snapshot-retain-bytes <n>', 'and at most this many bytes of them (default 33554432, 32 MiB)'],
  ['--log-store <wal|level>', 'the Raft log store for a new data dir: wal (segment files) or level (LevelDB); an existing data dir keeps its own (default wal)'],
  ['--wal-segment-bytes <n>', 'with the wal store: bytes per preallocated segment file, a multiple of 4096 (default 67108864; the first segment of a new log is at most 1 MiB)'],
  ['--watch-window-events <n>', 'change events kept for watch resumes; older resumes get COMPACTED (default 100000)'],
  ['--watch-window-bytes <n>', 'memory the change events kept for watch resumes may hold, each counted as twice its resource\'s size; the oldest go first (default a 128th of the V8 heap limit, 8-256 MiB: 32 MiB with Node\'s default limit; at least 1 MiB)'],
  ['--heap-growing-percent <n>', "the V8 old generation may grow to (1 + n/100) times its live size before a full collection; 0 = V8's own (up to 4x); ignored if node was started with it (default 100, as Go's GOGC; at most 300)"],
  ['--quota-bytes <n>', 'the data quota: writes that would grow the stored data above it get NO_SPACE and raise the NO_SPACE alarm (default an eighth of the V8 heap limit; at least 1 MiB; docs/security.md "Quotas")'],
  ['--watch-buffer-events <n>', 'events queued for one watcher before it is ended with SLOW_CONSUMER (default 10000)'],
  ['--watch-bookmark-ms <ms>', 'a quiet watch stream gets a bookmark this often (default 5000)'],
  ['--list-max-page <n>', 'most resources in one List page; a larger limit is clamped to it, no limit means it (default 1000)'],
  ['--txn-max-ops <n>', 'most comparisons, and most ops in each branch, of one transaction (default 128)'],
  ['--max-leases <n>', 'most leases the cluster holds; a grant past it is refused (default 100000)'],
  ['--lease-max-attached <n>', 'most resources attached to one lease; a write attaching one more is refused (default 10000)'],
  ['--list-snapshots <n>', 'most snapshots held for unfinished paged lists (one per revision); the oldest is dropped first (default 64)'],
  ['--list-snapshot-ttl-ms <ms>', "how long a paged list's continue tokens work, from its first page; then COMPACTED (default 300000)"],
  ['--http-allowed-hosts <host,...>', 'Host names the HTTP API answers besides loopback names, IP addresses and its own addresses; others get 403 (DNS rebinding); * = any (repeatable)'],
  ['--tls-ca-file <file>', 'the cluster CA certificate (PEM); with --tls-cert-file and --tls-key-file the ports speak TLS and peers must prove their node identity (docs/security.md)'],
  ['--tls-cert-file <file>', "this node's certificate (PEM), from cairn tls cert create --node ID; SIGHUP reloads the three files"],
  ['--tls-key-file <file>', "this node's private key (PEM)"],
  ['--insecure', 'serve without TLS on an address other than loopback (anyone who can reach the ports can join and write); refused otherwise'],
  ['--acl', 'access control: every request needs a token granting it (default: on with TLS, off without; --acl=false turns it off); docs/security.md'],
  ['--acl-initial-management-token-file <file>', 'a file holding a token secret (cairn_<accessor>_<64 hex>) that becomes a management token once a node leads, if absent'],
  ['--metrics-anonymous', '/metrics answers without a token when ACLs are on (default: needs read on cairn.v1.Metrics)'],
  ['--http-max-connections <n>', 'open HTTP connections at most; over it a new one gets 503 and is closed; 0 = no cap (default 4096)'],
  ['--http-headers-timeout-ms <ms>', 'all request headers must arrive within this of the first byte, else 408 (default 10000)'],
  ['--http-request-timeout-ms <ms>', 'a whole request must arrive within this, else 408; responses such as watches may stream longer (default 120000)'],
  ['--http-keep-alive-timeout-ms <ms>', 'an idle keep-alive HTTP connection is closed after this (default 5000)'],
  ['--grpc-max-connections <n>', "open connections on the gRPC port at most, the cluster's peers not counted; 0 = no cap (default 4096)"],
  ['--grpc-max-concurrent-streams <n>', 'concurrent calls per gRPC connection, at least 100 (default 2048)'],
  ['--grpc-max-message-bytes <n>', 'largest request message of a public gRPC method, 2-64 MiB (default 4194304); over it TOO_LARGE'],
  ['--grpc-keepalive-ms <ms>', 'ping a quiet gRPC connection after this and drop it if unanswered in 20 s; 0 = off (default 0: it would drop a paused peer)'],
  ['--grpc-idle-timeout-ms <ms>', 'a gRPC connection without a call this long gets GOAWAY; 0 = never (default 1800000)'],
  ['--watch-max-streams <n>', 'watch streams open at once on this node, HTTP and gRPC; over it RATE_LIMITED; 0 = no cap (default 50000)'],
  ['--watch-max-streams-per-connection <n>', 'watch streams open at once on one connection; 0 = no cap (default 1000)'],
  ['--rate-limit-per-address <n>', 'requests per second from one client address (probes exempt); over it 429 RATE_LIMITED; 0 = off (default 10000)'],
  ['--rate-limit-per-address-burst <n>', 'requests one address may send at once (default 20000)'],
  ['--rate-limit-per-token <n>', 'requests per second with one bearer token; 0 = off (default 10000)'],
  ['--rate-limit-per-token-burst <n>', 'requests one token may send at once (default 20000)'],
  ['--rate-limit-max-keys <n>', 'addresses and tokens each rate limiter remembers, least recently seen forgotten first (default 100000)'],
  ['--audit-log-file <file|-|off>', 'the audit log of denied requests and admin actions: a file, - for stderr, off (default <data-dir>/audit.log)'],
  ['--audit-log-max-bytes <n>', 'rotate the audit file to <file>.1 past this size; 0 = never, rotate it externally (default 67108864)'],
  ['--planted-bugs <names>', 'test-only planted bugs, comma-separated; never in production: double-vote, commit-old-term, read-index-without-heartbeat (Raft), stale-follower-read, ack-before-fsync, watch-skip-event (cluster-test/jepsen/README.md)'],
];

function agentHelp(): string {
  const width = Math.max(...AGENT_FLAG_HELP.map(([flag]) => flag.length));
  const lines = AGENT_FLAG_HELP.map(([flag, text]) => `  ${flag.padEnd(width)}  ${text}`);
  return [
    '',
    'Flags:',
    ...lines,
    '',
    'Each flag --some-flag can also be set by the environment variable CAIRN_SOME_FLAG or the',
    'config file key someFlag. A flag beats the environment, which beats the file, which beats',
    'the default. Booleans take --flag or --flag=true|false; values take --flag v or --flag=v.',
  ].join('\n');
}

const isConfigError = (e: unknown): e is Error => e instanceof Error && e.name === 'ConfigError';

function describeError(e: unknown): string {
  if (!(e instanceof Error)) return String(e);
  const code = (e as { code?: unknown }).code;
  return typeof code === 'string' && /^[A-Z_]+$/.test(code) ? `${code}: ${e.message}` : e.message;
}

/** Runs an agent until a signal has closed it; resolves to the exit code. */
export async function runAgent(flags: readonly string[], io: CliIo, deps: AgentDeps): Promise<number> {
  let config: AgentConfig;
  try {
    config = deps.loadAgentConfig({ argv: flags, env: io.env, cwd: io.cwd, hostname: deps.hostname });
  } catch (e) {
    if (isConfigError(e)) throw new CliError(ExitCode.USAGE, e.message);
    throw e;
  }

  let stopping = false;
  let requestStop: (signal: StopSignal) => void = () => undefined;
  const stopRequested = new Promise<StopSignal>((resolve) => {
    requestStop = resolve;
  });
  // Listening before the start: a signal during a slow start still stops the agent once up.
  const unsubscribe = deps.onSignal((signal) => {
    if (stopping) {
      io.stderr(`cairn: ${signal} again; exiting without waiting for the agent to close\n`);
      deps.exit(ExitCode.INTERRUPTED);
      return;
    }
    stopping = true;
    io.stderr(`cairn: ${signal} received; closing the agent (send it again to exit at once)\n`);
    requestStop(signal);
  });

  try {
    let agent: RunningAgent;
    try {
      deps.tuneProcess?.(config);
      agent = await deps.startAgent(config);
    } catch (e) {
      // The agent checks what only it can (planted bug names, say) as INVALID_ARGUMENT:
      // still a configuration error, so still exit 2.
      const invalid = isConfigError(e) || (e as { code?: unknown } | null)?.code === 'INVALID_ARGUMENT';
      throw new CliError(invalid ? ExitCode.USAGE : ExitCode.GENERIC, `cannot start the agent: ${describeError(e)}`, { cause: e });
    }
    const stopReloads = deps.onReload?.(() => {
      if (agent.reloadTls === undefined) return;
      io.stderr('cairn: SIGHUP received; reloading the TLS files\n');
      agent.reloadTls().catch((e: unknown) => io.stderr(`cairn: TLS reload failed: ${describeError(e)}\n`));
    });
    // Never settles if the agent comes up: only a failure to become ready races the signal.
    const failed = new Promise<unknown>((resolve) => {
      agent.ready.catch(resolve);
    });
    const outcome = await Promise.race([
      stopRequested.then(() => ({ failure: undefined, failed: false })),
      failed.then((failure) => ({ failure, failed: true })),
    ]);
    stopping = true;
    stopReloads?.();
    if (outcome.failed) io.stderr(`cairn: the agent failed to come up: ${describeError(outcome.failure)}; closing it\n`);
    try {
      await agent.close();
    } catch (e) {
      throw new CliError(ExitCode.GENERIC, `closing the agent failed: ${describeError(e)}`, { cause: e });
    }
    return outcome.failed ? ExitCode.GENERIC : ExitCode.OK;
  } finally {
    unsubscribe();
  }
}

/** The real dependencies: the server module (loaded now, not before) and the process. */
export async function processAgentDeps(hostname: string): Promise<AgentDeps> {
  const server = await import('../server/index.js');
  return {
    loadAgentConfig: server.loadAgentConfig,
    startAgent: (config) => server.startAgent(config),
    tuneProcess: (config) => {
      // Read by V8 at each full collection, so setting it now takes effect (unlike the heap's
      // sizes, fixed when the process started).
      const flag = server.heapGrowingFlag(config.heapGrowingPercent, process.execArgv);
      if (flag !== undefined) setFlagsFromString(flag);
    },
    hostname,
    onSignal: (handler) => {
      const onInt = (): void => handler('SIGINT');
      const onTerm = (): void => handler('SIGTERM');
      process.on('SIGINT', onInt);
      process.on('SIGTERM', onTerm);
      return () => {
        process.off('SIGINT', onInt);
        process.off('SIGTERM', onTerm);
      };
    },
    exit: (code) => process.exit(code),
    onReload: (handler) => {
      process.on('SIGHUP', handler);
      return () => process.off('SIGHUP', handler);
    },
  };
}

/**
 * Registers `cairn agent`. `deps` is called only when the command runs, so loading the server
 * is paid for by `cairn agent` alone.
 */
export function registerAgentCommand(program: Command, io: CliIo, deps: () => Promise<AgentDeps>, setExitCode: (code: number) => void): void {
  program
    .command('agent')
    .summary('start a Cairn node (cairn agent --help lists its flags)')
    .description('Start a Cairn node and run it until SIGINT or SIGTERM.')
    .argument('[flags...]', 'agent flags, below')
    .allowUnknownOption()
    .allowExcessArguments()
    .addHelpText('after', agentHelp())
    .action(async (_flags: unknown, _opts: unknown, cmd: Command) => {
      setExitCode(await runAgent(cmd.args, io, await deps()));
    });
}
