/**
 * Resolves the agent's configuration from the command line, the environment and an optional
 * config file, in that order of precedence over the defaults of `config.ts` (API.md "The
 * command line"). Everything is validated here, up front, and every problem names the option
 * and where its value came from (etcd `Config.validate`), so a node never starts half
 * configured. Pure apart from reading the config file: the caller passes argv, env, cwd and
 * the host name, so tests need no process.
 */
import { readFileSync } from 'node:fs';
import { secretAccessor } from '../auth/index.js';
import { isIP } from 'node:net';
import path from 'node:path';
import { parse as parseYaml } from 'yaml';
import { normalizeHostHeader } from '../api/index.js';
import { AGENT_DEFAULTS, LOG_STORE_KINDS, MAX_HEAP_GROWING_PERCENT, MIN_QUOTA_BYTES, type AgentConfig } from './config.js';

/** A configuration that cannot be used: one or more problems, each a sentence. */
export class ConfigError extends Error {
  override readonly name = 'ConfigError';
  /** Every problem found; `message` joins them with "; ". */
  readonly problems: readonly string[];

  constructor(problems: readonly string[]) {
    super(problems.join('; '));
    this.problems = problems;
  }
}

export interface LoadAgentConfigInput {
  /** The flags after `agent`, e.g. `['--dev', '--tick-ms', '50']`. */
  readonly argv: readonly string[];
  readonly env: Readonly<Record<string, string | undefined>>;
  /** Relative paths on the command line and in the environment resolve against this. */
  readonly cwd: string;
  /** `os.hostname()`: its first label is the default node id without --dev. */
  readonly hostname: string;
}

type Kind = 'string' | 'boolean' | 'count' | 'positive' | 'list';

interface OptionSpec {
  readonly key: keyof AgentConfig;
  readonly kind: Kind;
}

/** Every AgentConfig field, its flag is `--<kebab-case key>`, its variable `CAIRN_<SNAKE_KEY>`. */
const OPTIONS: readonly OptionSpec[] = [
  { key: 'nodeId', kind: 'string' },
  { key: 'dataDir', kind: 'string' },
  { key: 'grpcAddr', kind: 'string' },
  { key: 'advertiseAddr', kind: 'string' },
  { key: 'httpAddr', kind: 'string' },
  { key: 'bootstrap', kind: 'boolean' },
  { key: 'bootstrapExpect', kind: 'count' },
  { key: 'join', kind: 'list' },
  { key: 'dev', kind: 'boolean' },
  { key: 'demoTypes', kind: 'boolean' },
  { key: 'demoControllers', kind: 'boolean' },
  { key: 'controllers', kind: 'boolean' },
  { key: 'spuTimeoutMs', kind: 'positive' },
  { key: 'logLevel', kind: 'string' },
  { key: 'tickMs', kind: 'positive' },
  { key: 'electionTicks', kind: 'positive' },
  { key: 'heartbeatTicks', kind: 'positive' },
  { key: 'leaderLostTicks', kind: 'count' },
  { key: 'writeStallMs', kind: 'count' },
  { key: 'snapshotEntries', kind: 'positive' },
  { key: 'snapshotLogPercent', kind: 'count' },
  { key: 'snapshotMaxLogBytes', kind: 'positive' },
  { key: 'snapshotRetainEntries', kind: 'count' },
  { key: 'snapshotRetainBytes', kind: 'count' },
  { key: 'logStore', kind: 'string' },
  { key: 'walSegmentBytes', kind: 'positive' },
  { key: 'watchWindowEvents', kind: 'positive' },
  { key: 'watchWindowBytes', kind: 'positive' },
  { key: 'quotaBytes', kind: 'positive' },
  { key: 'watchBufferEvents', kind: 'positive' },
  { key: 'watchBookmarkMs', kind: 'positive' },
  { key: 'listMaxPage', kind: 'positive' },
  { key: 'txnMaxOps', kind: 'positive' },
  { key: 'maxLeases', kind: 'positive' },
  { key: 'leaseMaxAttached', kind: 'positive' },
  { key: 'listSnapshots', kind: 'positive' },
  { key: 'listSnapshotTtlMs', kind: 'positive' },
  { key: 'httpAllowedHosts', kind: 'list' },
  { key: 'plantedBugs', kind: 'list' },
  { key: 'tlsCaFile', kind: 'string' },
  { key: 'tlsCertFile', kind: 'string' },
  { key: 'tlsKeyFile', kind: 'string' },
  { key: 'insecure', kind: 'boolean' },
  { key: 'acl', kind: 'boolean' },
  { key: 'aclInitialManagementTokenFile', kind: 'string' },
  { key: 'metricsAnonymous', kind: 'boolean' },
  { key: 'httpMaxConnections', kind: 'count' },
  { key: 'httpHeadersTimeoutMs', kind: 'positive' },
  { key: 'httpRequestTimeoutMs', kind: 'positive' },
  { key: 'httpKeepAliveTimeoutMs', kind: 'positive' },
  { key: 'grpcMaxConnections', kind: 'count' },
  { key: 'grpcMaxConcurrentStreams', kind: 'positive' },
  { key: 'grpcMaxMessageBytes', kind: 'positive' },
  { key: 'grpcKeepaliveMs', kind: 'count' },
  { key: 'grpcIdleTimeoutMs', kind: 'count' },
  { key: 'watchMaxStreams', kind: 'count' },
  { key: 'watchMaxStreamsPerConnection', kind: 'count' },
  { key: 'rateLimitPerAddress', kind: 'count' },
  { key: 'rateLimitPerAddressBurst', kind: 'positive' },
  { key: 'rateLimitPerToken', kind: 'count' },
  { key: 'rateLimitPerTokenBurst', kind: 'positive' },
  { key: 'rateLimitMaxKeys', kind: 'positive' },
  { key: 'auditLogFile', kind: 'string' },
  { key: 'auditLogMaxBytes', kind: 'count' },
  { key: 'heapGrowingPercent', kind: 'count' },
];

const kebab = (key: string): string => key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
/** `tickMs` -> `--tick-ms`. */
export const flagName = (key: keyof AgentConfig): string => `--${kebab(key)}`;
/** `tickMs` -> `CAIRN_TICK_MS`. */
export const envName = (key: keyof AgentConfig): string => `CAIRN_${kebab(key).replace(/-/g, '_').toUpperCase()}`;

const CONFIG_FLAG = '--config';
const CONFIG_ENV = 'CAIRN_CONFIG';
/** Every flag `cairn agent` accepts. */
export const AGENT_FLAGS: readonly string[] = [CONFIG_FLAG, ...OPTIONS.map((o) => flagName(o.key))];
const BY_FLAG = new Map(OPTIONS.map((o) => [flagName(o.key), o]));

export const LOG_LEVELS: readonly string[] = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

/** Where a value came from, for error messages. */
type Source =
  | { readonly kind: 'flag'; readonly name: string }
  | { readonly kind: 'env'; readonly name: string }
  | { readonly kind: 'file'; readonly key: string; readonly file: string };

function describe(source: Source): string {
  switch (source.kind) {
    case 'flag':
      return 'from the command line';
    case 'env':
      return `from ${source.name}`;
    case 'file':
      return `from key '${source.key}' in ${source.file}`;
  }
}

/** A raw value: a string from a flag or variable, anything from a config file. */
interface Raw {
  readonly value: unknown;
  readonly source: Source;
  /** Relative paths resolve against this directory. */
  readonly baseDir: string;
}

const shown = (value: unknown): string => (typeof value === 'string' ? `'${value}'` : JSON.stringify(value) ?? String(value));

/**
 * Resolves and validates the agent's configuration. Precedence: flags, then environment, then
 * the config file (`--config` or CAIRN_CONFIG), then the defaults. Throws `ConfigError` naming
 * every problem found.
 */
export function loadAgentConfig(input: LoadAgentConfigInput): AgentConfig {
  const problems: string[] = [];
  const flags = parseFlags(input.argv, input.cwd, problems);
  const layers: Map<keyof AgentConfig, Raw>[] = [flags.values, readEnv(input.env, input.cwd)];

  const configPath = flags.config ?? nonEmpty(input.env[CONFIG_ENV]);
  if (configPath !== undefined) {
    const from = flags.config !== undefined ? 'from the command line' : `from ${CONFIG_ENV}`;
    const file = readConfigFile(path.resolve(input.cwd, configPath), from, problems);
    if (file !== undefined) layers.push(file);
  }
  // The first layer that sets a key wins.
  const raw = new Map<keyof AgentConfig, Raw>();
  for (const layer of layers) {
    for (const [key, value] of layer) if (!raw.has(key)) raw.set(key, value);
  }
  const config = resolve(raw, input, problems);
  if (problems.length > 0 || config === undefined) throw new ConfigError(problems);
  return config;
}

const nonEmpty = (s: string | undefined): string | undefined => (s === undefined || s === '' ? undefined : s);

// ---- Sources ------------------------------------------------------------------------------

interface ParsedFlags {
  readonly values: Map<keyof AgentConfig, Raw>;
  readonly config: string | undefined;
}

/**
 * `--flag value` and `--flag=value`; booleans are `--dev` or `--dev=true|false`. A repeated
 * flag replaces the earlier one, except `--join`, `--http-allowed-hosts` and `--planted-bugs`, which accumulate.
 */
function parseFlags(argv: readonly string[], cwd: string, problems: string[]): ParsedFlags {
  const values = new Map<keyof AgentConfig, Raw>();
  let config: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] ?? '';
    if (!arg.startsWith('--')) {
      problems.push(arg.startsWith('-') ? `unknown flag ${arg} for cairn agent (see cairn agent --help)` : `unexpected argument '${arg}' (cairn agent takes only flags; see cairn agent --help)`);
      continue;
    }
    const eq = arg.indexOf('=');
    const name = eq < 0 ? arg : arg.slice(0, eq);
    let value: string | undefined = eq < 0 ? undefined : arg.slice(eq + 1);
    const spec = BY_FLAG.get(name);
    if (spec === undefined && name !== CONFIG_FLAG) {
      problems.push(`unknown flag ${name} for cairn agent (see cairn agent --help)`);
      continue;
    }
    if (value === undefined && spec?.kind !== 'boolean') {
      const next = argv[i + 1];
      if (next === undefined || next.startsWith('--')) {
        problems.push(`${name} needs a value`);
        continue;
      }
      value = next;
      i++;
    }
    if (spec === undefined) {
      config = value;
      continue;
    }
    const source: Source = { kind: 'flag', name };
    const v = value ?? 'true';
    const earlier = values.get(spec.key);
    const accumulated = spec.kind === 'list' && earlier !== undefined ? `${String(earlier.value)},${v}` : v;
    values.set(spec.key, { value: accumulated, source, baseDir: cwd });
  }
  return { values, config };
}

/** CAIRN_* variables; an empty variable counts as unset. */
function readEnv(env: LoadAgentConfigInput['env'], cwd: string): Map<keyof AgentConfig, Raw> {
  const values = new Map<keyof AgentConfig, Raw>();
  for (const { key } of OPTIONS) {
    const name = envName(key);
    const value = nonEmpty(env[name]);
    if (value !== undefined) values.set(key, { value, source: { kind: 'env', name }, baseDir: cwd });
  }
  return values;
}

/**
 * A YAML or JSON mapping whose keys are AgentConfig field names. JSON when the text starts
 * with `{` (for JSON's sharper error messages), YAML otherwise. Relative paths in the file
 * resolve against the file's directory, so a file means the same wherever it is used from.
 */
function readConfigFile(file: string, from: string, problems: string[]): Map<keyof AgentConfig, Raw> | undefined {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    problems.push(`cannot read config file ${file} (${from}): ${(e as Error).message}`);
    return undefined;
  }
  let doc: unknown;
  const json = text.trimStart().startsWith('{');
  try {
    doc = json ? JSON.parse(text) : parseYaml(text);
  } catch (e) {
    const first = ((e as Error).message.split('\n')[0] ?? '').trim();
    problems.push(`config file ${file} is not valid ${json ? 'JSON' : 'YAML'}: ${first}`);
    return undefined;
  }
  if (doc === null || doc === undefined) return new Map(); // an empty file sets nothing
  if (typeof doc !== 'object' || Array.isArray(doc)) {
    problems.push(`config file ${file} must hold a mapping of option names to values, got ${Array.isArray(doc) ? 'a list' : typeof doc}`);
    return undefined;
  }
  const known = new Map(OPTIONS.map((o) => [o.key as string, o.key]));
  const values = new Map<keyof AgentConfig, Raw>();
  const baseDir = path.dirname(file);
  for (const [k, value] of Object.entries(doc)) {
    const key = known.get(k);
    if (key === undefined) {
      problems.push(`unknown key '${k}' in config file ${file} (known keys: ${[...known.keys()].join(', ')})`);
      continue;
    }
    if (value === null) continue; // `key:` with no value leaves the option unset
    values.set(key, { value, source: { kind: 'file', key: k, file }, baseDir });
  }
  return values;
}

// ---- Typing and validation ----------------------------------------------------------------

type Typed = {
  readonly [K in keyof AgentConfig]?: { readonly value: AgentConfig[K]; readonly source: Source };
};

function typed(raw: Map<keyof AgentConfig, Raw>, problems: string[]): Typed {
  const out: Record<string, { value: unknown; source: Source }> = {};
  for (const spec of OPTIONS) {
    const r = raw.get(spec.key);
    if (r === undefined) continue;
    const flag = flagName(spec.key);
    const fail = (what: string): void => {
      problems.push(`${flag} must be ${what}, got ${shown(r.value)} (${describe(r.source)})`);
    };
    let value: unknown;
    switch (spec.kind) {
      case 'string':
        if (typeof r.value === 'string' && r.value !== '') value = r.value;
        else fail('a non-empty string');
        break;
      case 'boolean':
        value = toBoolean(r.value);
        if (value === undefined) fail('true or false');
        break;
      case 'count':
      case 'positive': {
        const min = spec.kind === 'count' ? 0 : 1;
        value = toInteger(r.value, min);
        if (value === undefined) fail(min === 0 ? 'a non-negative integer' : 'a positive integer');
        break;
      }
      case 'list':
        value = toList(r.value);
        if (value === undefined) fail('a comma-separated string or a list of strings');
        break;
    }
    if (value === undefined) continue;
    if ((spec.key === 'dataDir' || (spec.key === 'auditLogFile' && value !== '-' && value !== 'off') || spec.key === 'tlsCaFile' || spec.key === 'tlsCertFile' || spec.key === 'tlsKeyFile' || spec.key === 'aclInitialManagementTokenFile') && typeof value === 'string') value = path.resolve(r.baseDir, value);
    out[spec.key] = { value, source: r.source };
  }
  return out as Typed;
}

function toBoolean(v: unknown): boolean | undefined {
  if (typeof v === 'boolean') return v;
  if (typeof v !== 'string') return undefined;
  const s = v.toLowerCase();
  if (['true', '1', 'yes', 'on'].includes(s)) return true;
  if (['false', '0', 'no', 'off'].includes(s)) return false;
  return undefined;
}

function toInteger(v: unknown, min: number): number | undefined {
  const n = typeof v === 'number' ? v : typeof v === 'string' && /^\d+$/.test(v) ? Number(v) : NaN;
  return Number.isSafeInteger(n) && n >= min ? n : undefined;
}

function toList(v: unknown): string[] | undefined {
  const items = typeof v === 'string' ? v.split(',') : Array.isArray(v) && v.every((x) => typeof x === 'string') ? (v as string[]) : undefined;
  return items?.map((s) => s.trim()).filter((s) => s !== '');
}

const MIN_WAL_SEGMENT_BYTES = 64 * 1024;
const MIN_GRPC_MESSAGE_BYTES = 2 * 1024 * 1024;
const MAX_GRPC_MESSAGE_BYTES = 64 * 1024 * 1024;
const MIN_GRPC_STREAMS = 100;
const MAX_WAL_SEGMENT_BYTES = 1024 * 1024 * 1024;

const NODE_ID_RE = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;
const HOST_LABEL_RE = /^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$/;

/** The parts of `host:port` (IPv6 in brackets), or why it is not one. */
export function parseHostPort(addr: string): { host: string; port: number } | string {
  const m = /^(\[[^\]]*\]|[^:[\]]*):(\d+)$/.exec(addr);
  if (m === null) return 'host:port (IPv6 in brackets, e.g. [::1]:7500)';
  const [, rawHost = '', portText = ''] = m;
  const port = Number(portText);
  if (!(port >= 1 && port <= 65535)) return 'host:port with a port from 1 to 65535';
  if (rawHost.startsWith('[')) {
    const host = rawHost.slice(1, -1);
    return isIP(host) === 6 ? { host, port } : 'host:port with a valid IPv6 address in the brackets';
  }
  if (rawHost === '') return 'host:port with a host';
  if (isIP(rawHost) === 4) return { host: rawHost, port };
  const name = rawHost.endsWith('.') ? rawHost.slice(0, -1) : rawHost;
  const labelsOk = name.length <= 253 && name.split('.').every((l) => HOST_LABEL_RE.test(l));
  // A dotted all-numeric name is a malformed IPv4 address, not a host name.
  return labelsOk && !/^[\d.]+$/.test(name) ? { host: rawHost, port } : 'host:port with a valid host name or IP address';
}

const isWildcard = (host: string): boolean => host === '0.0.0.0' || host === '::' || /^[0:]+$/.test(host);
/** Loopback only: `localhost`, 127.0.0.0/8, ::1 (what a node may serve on without TLS). */
const isLoopback = (host: string): boolean => host === 'localhost' || host === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);

function resolve(raw: Map<keyof AgentConfig, Raw>, input: LoadAgentConfigInput, problems: string[]): AgentConfig | undefined {
  const t = typed(raw, problems);
  const where = (o: { source: Source } | undefined): string => (o === undefined ? 'by default' : describe(o.source));
  const named = (key: keyof AgentConfig): string => `${flagName(key)} (${where(t[key])})`;

  const dev = t.dev?.value ?? AGENT_DEFAULTS.dev;
  const join = t.join?.value ?? AGENT_DEFAULTS.join;
  const bootstrapExpect = t.bootstrapExpect?.value ?? AGENT_DEFAULTS.bootstrapExpect;

  if (dev && (join.length > 0 || bootstrapExpect > 0)) {
    const with_ = [join.length > 0 ? named('join') : '', bootstrapExpect > 0 ? named('bootstrapExpect') : '']
      .filter((s) => s !== '')
      .join(' and ');
    problems.push(`--dev is a single node; it cannot be combined with --join/--bootstrap-expect (got --dev ${where(t.dev)}, ${with_})`);
  }
  const bootstrap = dev || (t.bootstrap?.value ?? AGENT_DEFAULTS.bootstrap);
  if (!dev && bootstrap && bootstrapExpect > 0) {
    problems.push(`--bootstrap and --bootstrap-expect are exclusive: --bootstrap forms a one-node cluster, --bootstrap-expect N an N-node one (got ${named('bootstrap')} and ${named('bootstrapExpect')})`);
  }
  if (!dev && bootstrap && join.length > 0) {
    problems.push(`--bootstrap forms a one-node cluster and cannot be combined with --join; use --bootstrap-expect N with --join to form a larger one (got ${named('bootstrap')} and ${named('join')})`);
  }
  if (!dev && bootstrapExpect > 1 && join.length === 0) {
    problems.push(`--bootstrap-expect ${bootstrapExpect} needs --join with the other nodes' gRPC addresses (got ${named('bootstrapExpect')})`);
  }

  // Node id.
  let nodeId: string | undefined = t.nodeId?.value;
  if (nodeId !== undefined) {
    if (!NODE_ID_RE.test(nodeId)) {
      problems.push(`--node-id must be a lowercase DNS label (a-z, 0-9 and '-', at most 63 characters, not starting or ending with '-'), got '${nodeId}' (${where(t.nodeId)})`);
    }
  } else if (dev) {
    nodeId = 'cairn1';
  } else {
    const label = (input.hostname.split('.')[0] ?? '').toLowerCase();
    if (NODE_ID_RE.test(label)) nodeId = label;
    else problems.push(`cannot default --node-id from the host name '${input.hostname}' (its first label is not a valid DNS label); set --node-id`);
  }

  // Data directory.
  let dataDir = t.dataDir?.value;
  if (dataDir === undefined) {
    if (dev) dataDir = path.resolve(input.cwd, 'cairn-data');
    else problems.push('--data-dir is required (or --dev)');
  }

  // Addresses.
  const checkAddr = (key: 'grpcAddr' | 'httpAddr' | 'advertiseAddr', value: string): { host: string; port: number } | undefined => {
    const parsed = parseHostPort(value);
    if (typeof parsed === 'string') {
      problems.push(`${flagName(key)} must be ${parsed}, got '${value}' (${where(t[key])})`);
      return undefined;
    }
    return parsed;
  };
  const grpcAddr = t.grpcAddr?.value ?? AGENT_DEFAULTS.grpcAddr;
  const httpAddr = t.httpAddr?.value ?? AGENT_DEFAULTS.httpAddr;
  const grpc = checkAddr('grpcAddr', grpcAddr);
  const http = checkAddr('httpAddr', httpAddr);
  if (grpc !== undefined && http !== undefined && grpc.port === http.port && (grpc.host === http.host || isWildcard(grpc.host) || isWildcard(http.host))) {
    problems.push(`--grpc-addr and --http-addr must not share a port, got ${grpcAddr} (${where(t.grpcAddr)}) and ${httpAddr} (${where(t.httpAddr)})`);
  }
  let advertiseAddr = t.advertiseAddr?.value;
  if (advertiseAddr !== undefined) {
    const adv = checkAddr('advertiseAddr', advertiseAddr);
    if (adv !== undefined && isWildcard(adv.host)) {
      problems.push(`--advertise-addr must be an address peers can reach, not the wildcard '${advertiseAddr}' (${where(t.advertiseAddr)})`);
    }
  } else if (grpc !== undefined && isWildcard(grpc.host)) {
    problems.push(`--grpc-addr ${grpcAddr} (${where(t.grpcAddr)}) binds every interface, so peers cannot use it; set --advertise-addr to the address they should use`);
  } else {
    advertiseAddr = grpcAddr;
  }
  join.forEach((addr) => {
    const parsed = parseHostPort(addr);
    if (typeof parsed === 'string') problems.push(`--join entries must each be ${parsed}, got '${addr}' (${where(t.join)})`);
    else if (isWildcard(parsed.host)) problems.push(`--join entries must be addresses of other nodes, not the wildcard '${addr}' (${where(t.join)})`);
  });

  // Logging and timing.
  const logLevel = t.logLevel?.value ?? AGENT_DEFAULTS.logLevel;
  if (!LOG_LEVELS.includes(logLevel)) {
    problems.push(`--log-level must be one of ${LOG_LEVELS.join(', ')}, got '${logLevel}' (${where(t.logLevel)})`);
  }
  const electionTicks = t.electionTicks?.value ?? AGENT_DEFAULTS.electionTicks;
  const heartbeatTicks = t.heartbeatTicks?.value ?? AGENT_DEFAULTS.heartbeatTicks;
  // etcd raft Config.validate: a follower must hear several heartbeats per election timeout.
  if (electionTicks <= heartbeatTicks) {
    problems.push(`--election-ticks must be greater than --heartbeat-ticks, got ${electionTicks} (${where(t.electionTicks)}) and ${heartbeatTicks} (${where(t.heartbeatTicks)})`);
  }
  const plantedBugs = t.plantedBugs?.value ?? AGENT_DEFAULTS.plantedBugs;
  for (const bug of plantedBugs) {
    if (!/^[A-Za-z0-9._-]+$/.test(bug)) {
      problems.push(`--planted-bugs entries must be names (letters, digits, '.', '_', '-'), got '${bug}' (${where(t.plantedBugs)})`);
    }
  }

  const httpAllowedHosts = t.httpAllowedHosts?.value ?? AGENT_DEFAULTS.httpAllowedHosts;
  for (const h of httpAllowedHosts) {
    if (h !== '*' && normalizeHostHeader(h) === undefined) {
      problems.push(`--http-allowed-hosts entries must be host names or addresses (optionally with a port), or '*', got '${h}' (${where(t.httpAllowedHosts)})`);
    }
  }

  // The Raft log.
  const logStore = t.logStore?.value ?? AGENT_DEFAULTS.logStore;
  if (!LOG_STORE_KINDS.includes(logStore)) {
    problems.push(`--log-store must be one of ${LOG_STORE_KINDS.join(', ')}, got '${logStore}' (${where(t.logStore)})`);
  }
  const quotaBytes = t.quotaBytes?.value ?? AGENT_DEFAULTS.quotaBytes;
  if (quotaBytes < MIN_QUOTA_BYTES) {
    problems.push(`--quota-bytes must be at least ${MIN_QUOTA_BYTES} (1 MiB: a resource at the size limit must fit), got ${quotaBytes} (${where(t.quotaBytes)})`);
  }
  const heapGrowingPercent = t.heapGrowingPercent?.value ?? AGENT_DEFAULTS.heapGrowingPercent;
  if (heapGrowingPercent > MAX_HEAP_GROWING_PERCENT) {
    problems.push(`--heap-growing-percent must be from 0 (V8's own) to ${MAX_HEAP_GROWING_PERCENT}, got ${heapGrowingPercent} (${where(t.heapGrowingPercent)})`);
  }
  const watchWindowBytes = t.watchWindowBytes?.value ?? AGENT_DEFAULTS.watchWindowBytes;
  if (watchWindowBytes < MIN_QUOTA_BYTES) {
    problems.push(`--watch-window-bytes must be at least ${MIN_QUOTA_BYTES} (1 MiB: an event of a resource at the size limit must fit), got ${watchWindowBytes} (${where(t.watchWindowBytes)})`);
  }
  const walSegmentBytes = t.walSegmentBytes?.value ?? AGENT_DEFAULTS.walSegmentBytes;
  if (walSegmentBytes % 4096 !== 0 || walSegmentBytes < MIN_WAL_SEGMENT_BYTES || walSegmentBytes > MAX_WAL_SEGMENT_BYTES) {
    problems.push(`--wal-segment-bytes must be a multiple of 4096 from ${MIN_WAL_SEGMENT_BYTES} to ${MAX_WAL_SEGMENT_BYTES}, got ${walSegmentBytes} (${where(t.walSegmentBytes)})`);
  }

  const demoTypes = t.demoTypes?.value ?? dev;
  const demoControllers = t.demoControllers?.value ?? AGENT_DEFAULTS.demoControllers;
  if (demoControllers && !demoTypes) problems.push(`--demo-controllers needs the demo types: add --demo-types (or --dev) (${where(t.demoControllers)})`);

  // TLS, and secure by default (docs/security.md): without TLS material a node serves only on
  // loopback, unless --insecure says the operator accepts an open cluster.
  const tlsCaFile = t.tlsCaFile?.value;
  const tlsCertFile = t.tlsCertFile?.value;
  const tlsKeyFile = t.tlsKeyFile?.value;
  const tlsGiven = [tlsCaFile, tlsCertFile, tlsKeyFile].filter((v) => v !== undefined).length;
  const insecure = t.insecure?.value ?? AGENT_DEFAULTS.insecure;
  if (tlsGiven > 0 && tlsGiven < 3) {
    problems.push(`--tls-ca-file, --tls-cert-file and --tls-key-file go together: give all three (cairn tls ca create; cairn tls cert create --node ${nodeId ?? 'ID'}) or none`);
  }
  if (tlsGiven === 3 && insecure) problems.push(`--insecure (${where(t.insecure)}) contradicts the TLS material given: drop one`);
  if (tlsGiven === 0 && !insecure) {
    const open = [
      ...(grpc !== undefined && !isLoopback(grpc.host) ? [`--grpc-addr ${grpcAddr} (${where(t.grpcAddr)})`] : []),
      ...(http !== undefined && !isLoopback(http.host) ? [`--http-addr ${httpAddr} (${where(t.httpAddr)})`] : []),
    ];
    if (open.length > 0) {
      problems.push(
        `${open.join(' and ')} ${open.length > 1 ? 'are' : 'is'} not a loopback address and no TLS material is given: anyone who can reach it could join the cluster and read or rewrite every resource. ` +
          'Give --tls-ca-file, --tls-cert-file and --tls-key-file (docs/security.md: cairn tls ca create; cairn tls cert create --node ID), or --insecure to run open on purpose',
      );
    }
  }

  // Access control: on whenever the node runs securely (TLS), unless turned off on purpose.
  const acl = t.acl?.value ?? tlsGiven === 3;
  const aclInitialManagementTokenFile = t.aclInitialManagementTokenFile?.value;
  if (aclInitialManagementTokenFile !== undefined) {
    if (!acl) problems.push(`--acl-initial-management-token-file (${where(t.aclInitialManagementTokenFile)}) needs access control on (TLS material, or --acl)`);
    else {
      const problem = checkInitialTokenFile(aclInitialManagementTokenFile);
      if (problem !== undefined) problems.push(`--acl-initial-management-token-file ${aclInitialManagementTokenFile} (${where(t.aclInitialManagementTokenFile)}): ${problem}`);
    }
  }
  // Limits (docs/security.md "Limits").
  const httpHeadersTimeoutMs = t.httpHeadersTimeoutMs?.value ?? AGENT_DEFAULTS.httpHeadersTimeoutMs;
  const httpRequestTimeoutMs = t.httpRequestTimeoutMs?.value ?? AGENT_DEFAULTS.httpRequestTimeoutMs;
  // Node refuses a headers timeout longer than the request timeout.
  if (httpHeadersTimeoutMs > httpRequestTimeoutMs) {
    problems.push(`--http-headers-timeout-ms must not exceed --http-request-timeout-ms, got ${httpHeadersTimeoutMs} (${where(t.httpHeadersTimeoutMs)}) and ${httpRequestTimeoutMs} (${where(t.httpRequestTimeoutMs)})`);
  }
  const grpcMaxMessageBytes = t.grpcMaxMessageBytes?.value ?? AGENT_DEFAULTS.grpcMaxMessageBytes;
  if (grpcMaxMessageBytes < MIN_GRPC_MESSAGE_BYTES || grpcMaxMessageBytes > MAX_GRPC_MESSAGE_BYTES) {
    problems.push(`--grpc-max-message-bytes must be from ${MIN_GRPC_MESSAGE_BYTES} (a 1 MiB resource and its envelope) to ${MAX_GRPC_MESSAGE_BYTES}, got ${grpcMaxMessageBytes} (${where(t.grpcMaxMessageBytes)})`);
  }
  const grpcMaxConcurrentStreams = t.grpcMaxConcurrentStreams?.value ?? AGENT_DEFAULTS.grpcMaxConcurrentStreams;
  if (grpcMaxConcurrentStreams < MIN_GRPC_STREAMS) {
    problems.push(`--grpc-max-concurrent-streams must be at least ${MIN_GRPC_STREAMS} (peers forward writes and reads over one connection), got ${grpcMaxConcurrentStreams} (${where(t.grpcMaxConcurrentStreams)})`);
  }
  // Unset: `<data-dir>/audit.log` (config.ts auditLogPath); a relative path resolves like --data-dir.
  const auditLogFile = t.auditLogFile?.value;

  if (problems.length > 0 || nodeId === undefined || dataDir === undefined || advertiseAddr === undefined) return undefined;
  return {
    nodeId,
    dataDir,
    grpcAddr,
    advertiseAddr,
    httpAddr,
    bootstrap,
    bootstrapExpect,
    join,
    dev,
    demoTypes,
    demoControllers,
    controllers: t.controllers?.value ?? AGENT_DEFAULTS.controllers,
    spuTimeoutMs: t.spuTimeoutMs?.value ?? AGENT_DEFAULTS.spuTimeoutMs,
    logLevel,
    tickMs: t.tickMs?.value ?? AGENT_DEFAULTS.tickMs,
    electionTicks,
    heartbeatTicks,
    leaderLostTicks: t.leaderLostTicks?.value ?? AGENT_DEFAULTS.leaderLostTicks,
    writeStallMs: t.writeStallMs?.value ?? AGENT_DEFAULTS.writeStallMs,
    snapshotEntries: t.snapshotEntries?.value ?? AGENT_DEFAULTS.snapshotEntries,
    snapshotLogPercent: t.snapshotLogPercent?.value ?? AGENT_DEFAULTS.snapshotLogPercent,
    snapshotMaxLogBytes: t.snapshotMaxLogBytes?.value ?? AGENT_DEFAULTS.snapshotMaxLogBytes,
    snapshotRetainEntries: t.snapshotRetainEntries?.value ?? AGENT_DEFAULTS.snapshotRetainEntries,
    snapshotRetainBytes: t.snapshotRetainBytes?.value ?? AGENT_DEFAULTS.snapshotRetainBytes,
    logStore,
    walSegmentBytes,
    watchWindowEvents: t.watchWindowEvents?.value ?? AGENT_DEFAULTS.watchWindowEvents,
    watchWindowBytes,
    quotaBytes,
    watchBufferEvents: t.watchBufferEvents?.value ?? AGENT_DEFAULTS.watchBufferEvents,
    watchBookmarkMs: t.watchBookmarkMs?.value ?? AGENT_DEFAULTS.watchBookmarkMs,
    listMaxPage: t.listMaxPage?.value ?? AGENT_DEFAULTS.listMaxPage,
    txnMaxOps: t.txnMaxOps?.value ?? AGENT_DEFAULTS.txnMaxOps,
    maxLeases: t.maxLeases?.value ?? AGENT_DEFAULTS.maxLeases,
    leaseMaxAttached: t.leaseMaxAttached?.value ?? AGENT_DEFAULTS.leaseMaxAttached,
    listSnapshots: t.listSnapshots?.value ?? AGENT_DEFAULTS.listSnapshots,
    listSnapshotTtlMs: t.listSnapshotTtlMs?.value ?? AGENT_DEFAULTS.listSnapshotTtlMs,
    httpAllowedHosts,
    plantedBugs,
    ...(tlsGiven === 3 ? { tlsCaFile: tlsCaFile as string, tlsCertFile: tlsCertFile as string, tlsKeyFile: tlsKeyFile as string } : {}),
    insecure,
    acl,
    ...(aclInitialManagementTokenFile !== undefined ? { aclInitialManagementTokenFile } : {}),
    metricsAnonymous: t.metricsAnonymous?.value ?? AGENT_DEFAULTS.metricsAnonymous,
    httpMaxConnections: t.httpMaxConnections?.value ?? AGENT_DEFAULTS.httpMaxConnections,
    httpHeadersTimeoutMs,
    httpRequestTimeoutMs,
    httpKeepAliveTimeoutMs: t.httpKeepAliveTimeoutMs?.value ?? AGENT_DEFAULTS.httpKeepAliveTimeoutMs,
    grpcMaxConnections: t.grpcMaxConnections?.value ?? AGENT_DEFAULTS.grpcMaxConnections,
    grpcMaxConcurrentStreams,
    grpcMaxMessageBytes,
    grpcKeepaliveMs: t.grpcKeepaliveMs?.value ?? AGENT_DEFAULTS.grpcKeepaliveMs,
    grpcIdleTimeoutMs: t.grpcIdleTimeoutMs?.value ?? AGENT_DEFAULTS.grpcIdleTimeoutMs,
    watchMaxStreams: t.watchMaxStreams?.value ?? AGENT_DEFAULTS.watchMaxStreams,
    watchMaxStreamsPerConnection: t.watchMaxStreamsPerConnection?.value ?? AGENT_DEFAULTS.watchMaxStreamsPerConnection,
    rateLimitPerAddress: t.rateLimitPerAddress?.value ?? AGENT_DEFAULTS.rateLimitPerAddress,
    rateLimitPerAddressBurst: t.rateLimitPerAddressBurst?.value ?? AGENT_DEFAULTS.rateLimitPerAddressBurst,
    rateLimitPerToken: t.rateLimitPerToken?.value ?? AGENT_DEFAULTS.rateLimitPerToken,
    rateLimitPerTokenBurst: t.rateLimitPerTokenBurst?.value ?? AGENT_DEFAULTS.rateLimitPerTokenBurst,
    rateLimitMaxKeys: t.rateLimitMaxKeys?.value ?? AGENT_DEFAULTS.rateLimitMaxKeys,
    ...(auditLogFile !== undefined ? { auditLogFile } : {}),
    auditLogMaxBytes: t.auditLogMaxBytes?.value ?? AGENT_DEFAULTS.auditLogMaxBytes,
    heapGrowingPercent,
  };
}

/** The secret in an initial management token file, or undefined with the reason in `problem`. */
export function readInitialTokenFile(file: string): { secret: string; accessor: string } | { problem: string } {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    return { problem: `cannot be read: ${e instanceof Error ? e.message : String(e)}` };
  }
  const secret = text.trim();
  const accessor = secretAccessor(secret);
  if (accessor === undefined) return { problem: 'does not hold a token secret of the form cairn_<accessor>_<64 hex digits> (make one with: cairn acl token generate)' };
  return { secret, accessor };
}

function checkInitialTokenFile(file: string): string | undefined {
  const r = readInitialTokenFile(file);
  return 'problem' in r ? r.problem : undefined;
}
