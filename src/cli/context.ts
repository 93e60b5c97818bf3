/**
 * What every command gets: the process's streams and environment (injected, so commands run
 * in tests without a process), and the options shared by commands that talk to an agent:
 * `--endpoint`, `--json`, `--timeout`.
 */
import { InvalidArgumentError, type Command } from 'commander';
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
  return cmd
    .option(
      '--endpoint <host:port>',
      `HTTP address of any node (or an http(s):// URL); default $${ENDPOINT_ENV} or ${DEFAULT_ENDPOINT}`,
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
  return { endpoint: parseEndpoint(value, what), json: opts.json === true, timeoutMs: opts.timeout };
}

/** `--json` output: indented, one document, trailing newline. */
export function printJson(io: CliIo, value: unknown): void {
  io.stdout(`${JSON.stringify(value, null, 2)}\n`);
}
