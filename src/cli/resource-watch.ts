/**
 * `cairn resource watch <type>`: follows the changes of one type through the client library's
 * gRPC watch (CairnClient.watch), so the command resumes by itself across lost streams and
 * failed nodes (every `--endpoint` is a candidate) with no gap and no duplicate, and says so
 * when a watch had to start over (`reset`). It prints one line per event (a table, or NDJSON
 * with --json) as the events arrive, and runs until interrupted: SIGINT or SIGTERM ends it
 * cleanly with exit 0. `--timeout` bounds how long no node may serve the watch (exit 5).
 */
import type { CairnClient, WatchEvent, WatchSpec } from '../client/index.js';
import type { CliIo } from './context.js';
import { usageError } from './errors.js';

export interface WatchFlags {
  readonly partition?: string;
  readonly namespace?: string;
  readonly namePrefix?: string;
  readonly prefix?: string;
  readonly gtRevision?: string;
  readonly atTail?: boolean;
}

const REVISION = /^(0|[1-9][0-9]{0,15})$/;

/** The watch a command line asks for. */
export function watchSpecOf(type: string, flags: WatchFlags): WatchSpec {
  if (flags.namePrefix !== undefined && flags.prefix !== undefined && flags.namePrefix !== flags.prefix) {
    throw usageError('--name-prefix and --prefix are the same option; give one');
  }
  const namePrefix = flags.namePrefix ?? flags.prefix;
  if (flags.gtRevision !== undefined && !REVISION.test(flags.gtRevision)) throw usageError(`--gt-revision must be a revision: a decimal number such as 42, got '${flags.gtRevision}'`);
  return {
    type,
    ...(flags.partition !== undefined ? { partition: flags.partition } : {}),
    ...(flags.namespace !== undefined ? { namespace: flags.namespace } : {}),
    ...(namePrefix !== undefined ? { namePrefix } : {}),
    ...(flags.gtRevision !== undefined ? { gtRevision: flags.gtRevision } : {}),
    ...(flags.atTail === true ? { atTail: true } : {}),
  };
}

const COLUMNS = { revision: 8, event: 6, name: 32 } as const;

function row(revision: string, event: string, name: string, version: string): string {
  return `${revision.padStart(COLUMNS.revision)}  ${event.padEnd(COLUMNS.event)}  ${name.padEnd(COLUMNS.name)}  ${version}`.trimEnd() + '\n';
}

/** The table's header line (widths are fixed: the rows are printed as they come). */
export function formatWatchHeader(): string {
  return row('REVISION', 'EVENT', 'NAME', 'VERSION');
}

/** One table line for an event; bookmarks print nothing (they are for --json consumers). */
export function formatWatchEvent(e: WatchEvent): string {
  switch (e.type) {
    case 'change':
    case 'delete': {
      const id = e.resource.id;
      const name = [id.tenancy.partition, id.tenancy.namespace, id.name].filter((p, i) => i === 2 || p !== '').join('/');
      return row(e.revision, e.type, name + (e.type === 'change' && e.resource.deletion_timestamp !== null ? ' (deleting)' : ''), e.resource.version);
    }
    case 'tail':
      return row(e.revision, 'tail', '(caught up: live changes follow)', '');
    case 'reset':
      return row('-', 'reset', `(${e.reason}: ${e.message}; the current state follows)`, '');
    case 'bookmark':
      return '';
  }
}

/** One NDJSON line, shaped as the HTTP API's `POST /v1/watch` lines (plus `reset`). */
export function watchEventJson(e: WatchEvent): string {
  switch (e.type) {
    case 'change':
    case 'delete':
      return `${JSON.stringify({ type: e.type, watch: e.watch, revision: e.revision, value: e.resource })}\n`;
    case 'tail':
      return `${JSON.stringify({ type: 'tail', watch: e.watch, revision: e.revision })}\n`;
    case 'bookmark':
      return `${JSON.stringify({ type: 'bookmark', revision: e.revision })}\n`;
    case 'reset':
      return `${JSON.stringify({ type: 'reset', watch: e.watch, reason: e.reason, message: e.message })}\n`;
  }
}

export interface WatchRun {
  readonly json: boolean;
  /** No node serving the watch for this long ends it (UNAVAILABLE). */
  readonly timeoutMs: number;
  /** Calls `stop` on SIGINT/SIGTERM; returns a function that unregisters it. */
  readonly onInterrupt: (stop: () => void) => () => void;
}

/** Prints the watch's events until interrupted (resolves) or an error retrying cannot fix (throws the client's error). */
export async function runWatch(client: CairnClient, spec: WatchSpec, run: WatchRun, io: CliIo): Promise<void> {
  const stream = client.watch(spec, { unavailableTimeoutMs: run.timeoutMs });
  const off = run.onInterrupt(() => stream.close());
  try {
    if (!run.json) io.stdout(formatWatchHeader());
    for await (const e of stream) {
      const line = run.json ? watchEventJson(e) : formatWatchEvent(e);
      if (line !== '') io.stdout(line);
    }
  } finally {
    off();
    stream.close();
  }
}
