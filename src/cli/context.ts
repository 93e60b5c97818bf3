/**
 * What every command gets: the process's streams and environment (injected, so commands run
 * in tests without a process), and the options shared by commands that talk to an agent:
 * `--endpoint`, `--json`, `--timeout`, the TLS files and the ACL token (`--token`,
 * `--token-file`, `CAIRN_TOKEN`, `CAIRN_TOKEN_FILE`).
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { InvalidArgumentError, type Command } from 'commander';
import { usageError } from './errors.js';
import { parseEndpoint } from './http.js';

export interface CliIo {
  readonly stdout: (text: string) => void;
  readonly stderr: (text: string) => void;
  /** Whether stderr is a terminal: progress lines are drawn only there. */
  readonly stderrIsTTY: boolean;
  readonly env: Readonly<Record<string, string | undefined>>;
  readonly cwd: string;
  /**
   * Secrets this run has read (the ACL token): runCli replaces each with `<redacted>` in
   * everything written to stderr, so no error message or log line can show one.
   */
  readonly secrets?: Set<string>;
}

/** The agent's HTTP address when neither --endpoint nor CAIRN_HTTP_ADDR says otherwise. */
export const DEFAULT_ENDPOINT = '127.0.0.1:7501';
export const ENDPOINT_ENV = 'CAIRN_HTTP_ADDR';

export interface ClientOptions {
  /** The base URL of the agent's HTTP API. */
  readonly endpoint: string;
  readonly json: boolean;
  readonly timeoutMs: number;
  /** TLS to the agent: the cluster CA, and a client certificate if given. */
  readonly tls?: ClientTls;
  /** The ACL token's secret, sent as `authorization: Bearer <secret>`. */
  readonly token?: string;
}

/** The PEM material of `--tls-ca-file` (and `--tls-cert-file`, `--tls-key-file`). */
export interface ClientTls {
  readonly ca: Buffer;
  readonly cert?: Buffer;
  readonly key?: Buffer;
}

const TLS_OPTIONS = [
  ['certFile', '--tls-cert-file', 'CAIRN_TLS_CERT_FILE'],
  ['keyFile', '--tls-key-file', 'CAIRN_TLS_KEY_FILE'],
] as const;

export const TOKEN_ENV = 'CAIRN_TOKEN';
export const TOKEN_FILE_ENV = 'CAIRN_TOKEN_FILE';
/** `--ca-file` and `CAIRN_CA_FILE` are aliases of `--tls-ca-file` and `CAIRN_TLS_CA_FILE` (the names Consul's CLI uses). */
export const CA_FILE_ENVS = ['CAIRN_TLS_CA_FILE', 'CAIRN_CA_FILE'] as const;

/**
 * Adds the options of a command that talks to an agent, besides the endpoint: --tls-ca-file
 * (alias --ca-file), --tls-cert-file, --tls-key-file (docs/security.md) and --token,
 * --token-file.
 */
export function withTlsOptions(cmd: Command): Command {
  return cmd
    .option('--tls-ca-file <file>', 'the cluster CA certificate (PEM): talk TLS to the agent and check its certificate against it; default $CAIRN_TLS_CA_FILE or $CAIRN_CA_FILE')
    .option('--ca-file <file>', 'the same as --tls-ca-file')
    .option('--tls-cert-file <file>', 'a client certificate (PEM, cairn tls cert create --client NAME); default $CAIRN_TLS_CERT_FILE')
    .option('--tls-key-file <file>', "the client certificate's key (PEM); default $CAIRN_TLS_KEY_FILE")
    .option('--token <secret>', `the ACL token's secret, sent as a bearer token (prefer --token-file or $${TOKEN_ENV}: a flag shows in the process list); default $${TOKEN_ENV}`)
    .option('--token-file <file>', `a file holding the ACL token's secret (trailing whitespace ignored); default $${TOKEN_FILE_ENV}`);
}

/** The CA file from --tls-ca-file/--ca-file, else CAIRN_TLS_CA_FILE/CAIRN_CA_FILE; two names for different files is a usage error. */
function caFileOf(opts: { tlsCaFile?: string; caFile?: string }, io: CliIo): { file: string; what: string } | undefined {
  if (opts.tlsCaFile !== undefined && opts.caFile !== undefined && opts.tlsCaFile !== opts.caFile) {
    throw usageError(`--tls-ca-file and --ca-file name different files (${opts.tlsCaFile}, ${opts.caFile}); they are one option: give one`);
  }
  if (opts.tlsCaFile !== undefined) return { file: opts.tlsCaFile, what: '--tls-ca-file' };
  if (opts.caFile !== undefined) return { file: opts.caFile, what: '--ca-file' };
  const [long, short] = CA_FILE_ENVS;
  const a = io.env[long];
  const b = io.env[short];
  const set = (v: string | undefined): v is string => v !== undefined && v !== '';
  if (set(a) && set(b) && a !== b) throw usageError(`${long} and ${short} name different files (${a}, ${b}); they are one setting: unset one`);
  if (set(a)) return { file: a, what: `--tls-ca-file (from ${long})` };
  if (set(b)) return { file: b, what: `--ca-file (from ${short})` };
  return undefined;
}

/** Reads the TLS files named by the options (or their variables); undefined when none is named. */
export function clientTls(cmd: Command, io: CliIo): ClientTls | undefined {
  const opts = cmd.opts<{ tlsCaFile?: string; caFile?: string; tlsCertFile?: string; tlsKeyFile?: string }>();
  const named: Partial<Record<'caFile' | 'certFile' | 'keyFile', { file: string; what: string }>> = {};
  const caFile = caFileOf(opts, io);
  if (caFile !== undefined) named.caFile = caFile;
  for (const [key, flag, env] of TLS_OPTIONS) {
    const flagValue = key === 'certFile' ? opts.tlsCertFile : opts.tlsKeyFile;
    const envValue = io.env[env];
    if (flagValue !== undefined) named[key] = { file: flagValue, what: flag };
    else if (envValue !== undefined && envValue !== '') named[key] = { file: envValue, what: `${flag} (from ${env})` };
  }
  if (named.caFile === undefined) {
    if (named.certFile !== undefined || named.keyFile !== undefined) throw usageError('--tls-cert-file and --tls-key-file need --tls-ca-file (the cluster CA the agent is checked against)');
    return undefined;
  }
  if ((named.certFile === undefined) !== (named.keyFile === undefined)) throw usageError('--tls-cert-file and --tls-key-file go together: give both or neither');
  const read = (n: { file: string; what: string }): Buffer => {
    try {
      return readFileSync(path.resolve(io.cwd, n.file));
    } catch (e) {
      throw usageError(`cannot read ${n.what} ${n.file}: ${e instanceof Error ? e.message : String(e)}`);
    }
  };
  const ca = read(named.caFile);
  // An empty or non-PEM file would otherwise surface as a TLS failure far from its cause.
  if (!ca.toString('latin1').includes('-----BEGIN CERTIFICATE-----')) {
    throw usageError(`${named.caFile.what} ${named.caFile.file} holds no PEM certificate (-----BEGIN CERTIFICATE-----): give the cluster CA, cairn-ca.pem`);
  }
  return {
    ca,
    ...(named.certFile !== undefined && named.keyFile !== undefined ? { cert: read(named.certFile), key: read(named.keyFile) } : {}),
  };
}

/** The visible ASCII a bearer token may hold (RFC 6750 b64token is narrower; this only keeps headers well-formed). */
const TOKEN_CHARS = /^[\x21-\x7e]+$/;

/**
 * The ACL token's secret, by precedence: --token, --token-file, $CAIRN_TOKEN,
 * $CAIRN_TOKEN_FILE (an empty variable counts as unset); undefined when none is given. The
 * secret is added to `io.secrets`, so stderr never shows it. Errors name where the token came
 * from, never the token.
 */
export function clientToken(cmd: Command, io: CliIo): string | undefined {
  const opts = cmd.opts<{ token?: string; tokenFile?: string }>();
  const envToken = io.env[TOKEN_ENV];
  const envFile = io.env[TOKEN_FILE_ENV];
  let raw: string;
  let what: string;
  const readTokenFile = (file: string, from: string): string => {
    const resolved = path.resolve(io.cwd, file);
    try {
      return readFileSync(resolved, 'utf8');
    } catch (e) {
      const errno = (e as NodeJS.ErrnoException).code;
      const why = errno === 'ENOENT' ? 'no such file' : errno === 'EACCES' ? 'permission denied' : errno === 'EISDIR' ? 'it is a directory' : (errno ?? (e as Error).message);
      throw usageError(`cannot read the token file ${resolved} (${from}): ${why}; nothing was sent`);
    }
  };
  if (opts.token !== undefined) {
    raw = opts.token;
    what = '--token';
  } else if (opts.tokenFile !== undefined) {
    raw = readTokenFile(opts.tokenFile, '--token-file');
    what = `the token file ${path.resolve(io.cwd, opts.tokenFile)}`;
  } else if (envToken !== undefined && envToken !== '') {
    raw = envToken;
    what = `$${TOKEN_ENV}`;
  } else if (envFile !== undefined && envFile !== '') {
    raw = readTokenFile(envFile, `from ${TOKEN_FILE_ENV}`);
    what = `the token file ${path.resolve(io.cwd, envFile)} (from ${TOKEN_FILE_ENV})`;
  } else {
    return undefined;
  }
  // Files end with a newline; a pasted token often carries blanks around it.
  const token = raw.trim();
  if (token === '') throw usageError(`${what} is empty: expected a token secret (cairn_<accessor>_<64 hex>); nothing was sent`);
  io.secrets?.add(token);
  if (raw !== token) io.secrets?.add(raw);
  if (!TOKEN_CHARS.test(token) || token.length > 4096) {
    throw usageError(`${what} does not hold a token secret: it has spaces, control or non-ASCII characters, or is over 4096 characters (expected cairn_<accessor>_<64 hex>); nothing was sent`);
  }
  return token;
}

function positiveInteger(value: string): number {
  if (!/^\d+$/.test(value) || !Number.isSafeInteger(Number(value)) || Number(value) < 1) {
    throw new InvalidArgumentError(`must be a positive integer (milliseconds), got '${value}'`);
  }
  return Number(value);
}

/** Adds --endpoint, --json and --timeout to a command that calls an agent. */
export function withClientOptions(cmd: Command, io: CliIo, defaultTimeoutMs: number): Command {
  const fromEnv = io.env[ENDPOINT_ENV];
  return withTlsOptions(cmd)
    .option(
      '--endpoint <host:port>',
      `HTTP address of any node (or an http(s):// URL; https when --tls-ca-file is given); default $${ENDPOINT_ENV} or ${DEFAULT_ENDPOINT}`,
    )
    .option('--json', 'print the response as JSON instead of a table')
    .option('--timeout <ms>', 'give up after this many milliseconds', positiveInteger, defaultTimeoutMs)
    .addHelpText('after', fromEnv === undefined || fromEnv === '' ? '' : `\n$${ENDPOINT_ENV} is set: the default endpoint is ${fromEnv}.`);
}

/** Whether a host (of a URL or host:port; IPv6 in brackets) is this machine's loopback. */
export function isLoopbackHost(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  return h === 'localhost' || h === '::1' || /^127(\.\d{1,3}){3}$/.test(h);
}

/**
 * Warns (stderr, once per command) when a token is about to travel in the clear to another
 * machine: anyone on the path could read and reuse it.
 */
export function warnPlaintextToken(io: CliIo, hosts: readonly string[], tls: boolean, token: string | undefined): void {
  if (token === undefined || tls) return;
  const remote = hosts.filter((h) => !isLoopbackHost(h));
  if (remote.length === 0) return;
  io.stderr(`cairn: warning: the token is sent without TLS to ${remote.join(', ')}: anyone on the path can read it; give --ca-file (or CAIRN_CA_FILE)\n`);
}

/** The request options every HTTP call of a command carries: endpoint, deadline, TLS, token. */
export function connection(o: ClientOptions): { endpoint: string; timeoutMs: number; tls?: ClientTls; token?: string } {
  return { endpoint: o.endpoint, timeoutMs: o.timeoutMs, ...(o.tls !== undefined ? { tls: o.tls } : {}), ...(o.token !== undefined ? { token: o.token } : {}) };
}

/** Reads the shared options of a command built with `withClientOptions`. */
export function clientOptions(cmd: Command, io: CliIo): ClientOptions {
  const opts = cmd.opts<{ endpoint?: string; json?: boolean; timeout: number }>();
  const fromEnv = io.env[ENDPOINT_ENV];
  const [value, what] =
    opts.endpoint !== undefined
      ? [opts.endpoint, '--endpoint']
      : fromEnv !== undefined && fromEnv !== ''
        ? [fromEnv, `--endpoint (from ${ENDPOINT_ENV})`]
        : [DEFAULT_ENDPOINT, '--endpoint'];
  const tls = clientTls(cmd, io);
  const token = clientToken(cmd, io);
  // With a CA, a bare host:port means HTTPS (an explicit http:// URL stays as it is).
  const hasScheme = /^[a-z][a-z0-9+.-]*:\/\//i.test(value);
  const endpoint = parseEndpoint(tls !== undefined && !hasScheme ? `https://${value}` : value, what);
  const url = new URL(endpoint);
  warnPlaintextToken(io, [url.hostname], url.protocol === 'https:', token);
  return { endpoint, json: opts.json === true, timeoutMs: opts.timeout, ...(tls !== undefined ? { tls } : {}), ...(token !== undefined ? { token } : {}) };
}

/** `--json` output: indented, one document, trailing newline. */
export function printJson(io: CliIo, value: unknown): void {
  io.stdout(`${JSON.stringify(value, null, 2)}\n`);
}
