/**
 * `cairn snapshot save|restore`: a point-in-time copy of the cluster's state through any
 * node's HTTP API (`GET` / `PUT /v1/snapshot`, application/octet-stream).
 *
 * `save` streams into `<file>.partial-<pid>` beside the target, fsyncs it and renames it into
 * place, so the file at the target path is always a whole snapshot: an interrupted save
 * leaves the previous file (if any) untouched.
 */
import { open, readFile, rename, rm } from 'node:fs/promises';
import path from 'node:path';
import type { Command } from 'commander';
import { clientOptions, connection, printJson, withClientOptions, type CliIo } from './context.js';
import { CliError, ExitCode } from './errors.js';
import { readBody, request, requestJson, type RequestOptions } from './http.js';
import { formatFields } from './table.js';

/** Snapshots can be large: a longer default deadline than single requests. */
const TIMEOUT_MS = 120_000;
const PROGRESS_EVERY_MS = 250;

const mib = (bytes: number): string => `${(bytes / (1024 * 1024)).toFixed(1)} MiB`;

export function registerSnapshotCommands(program: Command, io: CliIo): void {
  const snapshot = program.command('snapshot').description('save or restore a point-in-time snapshot of the cluster');

  withClientOptions(
    snapshot.command('save').description('save a snapshot of the cluster to a file (replacing it atomically)').argument('<file>', 'where to write it'),
    io,
    TIMEOUT_MS,
  ).action(async (file: string, _opts: unknown, cmd: Command) => {
    const options = clientOptions(cmd, io);
    const target = path.resolve(io.cwd, file);
    const req: RequestOptions = { ...connection(options), method: 'GET', path: '/v1/snapshot', write: false };
    const response = await request(req);
    const bytes = await saveBody(response, target, req, io);
    if (options.json) printJson(io, { file: target, bytes });
    else io.stdout(`saved snapshot to ${target} (${bytes} bytes)\n`);
  });

  withClientOptions(
    snapshot
      .command('restore')
      .description("replace the whole cluster's state with a snapshot file (committed through Raft)")
      .argument('<file>', 'a file written by cairn snapshot save'),
    io,
    TIMEOUT_MS,
  ).action(async (file: string, _opts: unknown, cmd: Command) => {
    const options = clientOptions(cmd, io);
    const source = path.resolve(io.cwd, file);
    let data: Buffer;
    try {
      // Read whole: fetch needs `duplex: 'half'` to stream a request body, and a snapshot
      // the cluster holds in memory fits in the CLI's memory too.
      data = await readFile(source);
    } catch (e) {
      throw new CliError(ExitCode.USAGE, `cannot read snapshot file ${source}: ${(e as Error).message}`);
    }
    const body = await requestJson({ ...connection(options), method: 'PUT', path: '/v1/snapshot', body: data, write: true });
    if (options.json) {
      printJson(io, body);
      return;
    }
    io.stdout(`restored snapshot from ${source} (${data.length} bytes)\n`);
    if (typeof body === 'object' && body !== null && !Array.isArray(body)) {
      const fields = Object.entries(body).map(([k, v]) => [k, typeof v === 'string' ? v : JSON.stringify(v)] as const);
      io.stdout(formatFields(fields));
    }
  });
}

/** Streams the response body to `target` via a temporary file; returns the byte count. */
async function saveBody(response: Response, target: string, req: RequestOptions, io: CliIo): Promise<number> {
  const partial = `${target}.partial-${process.pid}`;
  let handle: Awaited<ReturnType<typeof open>>;
  try {
    handle = await open(partial, 'w');
  } catch (e) {
    await response.body?.cancel();
    throw new CliError(ExitCode.GENERIC, `cannot write snapshot file ${partial}: ${(e as Error).message}`);
  }
  let bytes = 0;
  let lastProgress = Date.now();
  const progress = io.stderrIsTTY ? (final: boolean): void => io.stderr(`\rsaving snapshot: ${mib(bytes)}${final ? '\n' : ''}`) : undefined;
  try {
    if (response.body !== null) {
      const reader = response.body.getReader();
      for (;;) {
        const chunk = await readBody(() => reader.read(), req);
        if (chunk.done) break;
        await writeAll(handle, chunk.value, partial);
        bytes += chunk.value.length;
        if (progress !== undefined && Date.now() - lastProgress >= PROGRESS_EVERY_MS) {
          lastProgress = Date.now();
          progress(false);
        }
      }
    }
    progress?.(true);
    await handle.sync();
    await handle.close();
    await rename(partial, target);
  } catch (e) {
    await handle.close().catch(() => undefined);
    await rm(partial, { force: true });
    throw e instanceof CliError ? e : new CliError(ExitCode.GENERIC, `cannot write snapshot file ${target}: ${(e as Error).message}`);
  }
  return bytes;
}

async function writeAll(handle: Awaited<ReturnType<typeof open>>, chunk: Uint8Array, file: string): Promise<void> {
  let offset = 0;
  while (offset < chunk.length) {
    const { bytesWritten } = await handle.write(chunk, offset, chunk.length - offset);
    if (bytesWritten === 0) throw new Error(`wrote nothing to ${file}`);
    offset += bytesWritten;
  }
}
