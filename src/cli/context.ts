/**
 * What every command gets: the process's streams and environment (injected, so commands run
 * in tests without a process), and the options shared by commands that talk to an agent:
 * `--endpoint`, `--json`, `--timeout`.
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
}

/** The PEM material of `--tls-ca-file` (and `--tls-cert-file`, `--tls-key-file`). */
export interface ClientTls {
  readonly ca: Buffer;
  readonly cert?: Buffer;
  readonly key?: Buffer;
}

const TLS_OPTIONS = [
  ['caFile', '--tls-ca-file', 'CAIRN_TLS_CA_FILE'],
  ['certFile', '--tls-cert-file', 'CAIRN_TLS_CERT_FILE'],
  ['keyFile', '--tls-key-file', 'CAIRN_TLS_KEY_FILE'],
] as const;

/** Adds --tls-ca-file, --tls-cert-file and --tls-key-file (docs/security.md). */
export function withTlsOptions(cmd: Command): Command {
  return cmd
    .option('--tls-ca-file <file>', "the cluster CA certificate (PEM): talk TLS to the agent and check its certificate against it; default $CAIRN_TLS_CA_FILE")
    .option('--tls-cert-file <file>', 'a client certificate (PEM, cairn tls cert create --client NAME); default $CAIRN_TLS_CERT_FILE')
    .option('--tls-key-file <file>', "the client certificate's key (PEM); default $CAIRN_TLS_KEY_FILE");
}

/** Reads the TLS files named by the options (or their variables); undefined when none is named. */
export function clientTls(cmd: Command, io: CliIo): ClientTls | undefined {
  const opts = cmd.opts<{ tlsCaFile?: string; tlsCertFile?: string; tlsKeyFile?: string }>();
  const named: Partial<Record<'caFile' | 'certFile' | 'keyFile', { file: string; what: string }>> = {};
  for (const [key, flag, env] of TLS_OPTIONS) {
    const flagValue = key === 'caFile' ? opts.tlsCaFile : key === 'certFile' ? opts.tlsCertFile : opts.tlsKeyFile;
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
  return {
    ca: read(named.caFile),
    ...(named.certFile !== undefined && named.keyFile !== undefined ? { cert: read(named.certFile), key: read(named.keyFile) } : {}),
  };
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
  // With a CA, a bare host:port means HTTPS (an explicit http:// URL stays as it is).
  const hasScheme = /^[a-z][a-z0-9+.-]*:\/\//i.test(value);
  const endpoint = parseEndpoint(tls !== undefined && !hasScheme ? `https://${value}` : value, what);
  return { endpoint, json: opts.json === true, timeoutMs: opts.timeout, ...(tls !== undefined ? { tls } : {}) };
}

/** `--json` output: indented, one document, trailing newline. */
export function printJson(io: CliIo, value: unknown): void {
  io.stdout(`${JSON.stringify(value, null, 2)}\n`);
}
