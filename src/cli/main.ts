/**
 * The `cairn` executable's entry (bin/cairn imports this module): runs the command line in this
 * process and exits with its code.
 */
import os from 'node:os';
import { processAgentDeps } from './agent.js';
import { runCli } from './program.js';

// grpc-js sets the TLS server name (SNI) to the dialled host even when it is an IP address, and
// Node warns about that (DEP0123) once per process: noise for someone who typed
// `--endpoint 127.0.0.1:7500`. The certificate is still checked against the IP (its SANs);
// only that one warning is dropped.
const emitWarning = process.emitWarning.bind(process);
process.emitWarning = ((warning: string | Error, ...rest: unknown[]) => {
  const code = typeof rest[0] === 'object' && rest[0] !== null ? (rest[0] as { code?: unknown }).code : rest[1];
  if (code === 'DEP0123') return;
  (emitWarning as (w: string | Error, ...r: unknown[]) => void)(warning, ...rest);
}) as typeof process.emitWarning;

// A reader that went away (`cairn ... | head`) is not an error: stop quietly, as Unix tools do.
for (const stream of [process.stdout, process.stderr]) {
  stream.on('error', (e: NodeJS.ErrnoException) => {
    if (e.code === 'EPIPE') process.exit(0);
    throw e;
  });
}

const code = await runCli(
  process.argv.slice(2),
  {
    stdout: (s) => void process.stdout.write(s),
    stderr: (s) => void process.stderr.write(s),
    stderrIsTTY: process.stderr.isTTY === true,
    env: process.env,
    cwd: process.cwd(),
  },
  () => processAgentDeps(os.hostname()),
);
// Let both streams drain (they may be pipes) before ending the process: idle keep-alive
// sockets from fetch must not hold it open.
await new Promise<void>((resolve) => process.stdout.write('', () => resolve()));
await new Promise<void>((resolve) => process.stderr.write('', () => resolve()));
process.exit(code);
