import { pino, type DestinationStream, type Logger as PinoLogger, type LevelWithSilentOrString } from 'pino';
import type { NodeId } from '../base/index.js';

export type { PinoLogger };

export interface CreateLoggerOptions {
  /** Minimum level: 'trace' | 'debug' | 'info' | 'warn' | 'error' | 'fatal' | 'silent'. Default 'info'. */
  readonly level?: LevelWithSilentOrString;
  /** Added to every event as the `node` field. */
  readonly nodeId: NodeId | string;
  /**
   * Where lines go: a stream (tests), a file path (appended to) or a file descriptor.
   * Default: standard output.
   */
  readonly destination?: DestinationStream | string | number;
  /**
   * Write each line before returning (for a path, fd or the default stdout). Default true:
   * a node that crashes or is killed keeps its last lines, which is when they matter most.
   */
  readonly sync?: boolean;
}

const LEVELS = new Set(['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent']);

/**
 * A pino logger: structured JSON, one event per line, with `node` (the node id) and `pid` on
 * every line and ISO timestamps. It satisfies the replica's `Logger` port.
 */
export function createLogger(options: CreateLoggerOptions): PinoLogger {
  const level = options.level ?? 'info';
  if (!LEVELS.has(level)) {
    throw new TypeError(`logger option level must be one of ${[...LEVELS].join(', ')}, got ${JSON.stringify(level)}`);
  }
  const sync = options.sync ?? true;
  const destination =
    options.destination === undefined
      ? pino.destination({ dest: 1, sync })
      : typeof options.destination === 'string' || typeof options.destination === 'number'
        ? pino.destination({ dest: options.destination, mkdir: true, sync })
        : options.destination;
  return pino(
    {
      level,
      base: { node: options.nodeId, pid: process.pid },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
    },
    destination,
  );
}
