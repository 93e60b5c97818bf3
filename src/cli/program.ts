/**
 * The `cairn` program: one commander tree, one file per command group (agent.ts,
 * operator.ts, snapshot.ts, acl.ts; `cairn resource ...` joins them as resource.ts). Every failure
 * ends here as one line on stderr, `cairn: <message>`, and an exit code from errors.ts.
 */
import { readFileSync } from 'node:fs';
import { Command, CommanderError } from 'commander';
import { registerAclCommands } from './acl.js';
import { registerAgentCommand, type AgentDeps } from './agent.js';
import type { CliIo } from './context.js';
import { CliError, ExitCode } from './errors.js';
import { registerInfoCommand } from './info.js';
import { registerOperatorCommands } from './operator.js';
import { registerResourceCommands } from './resource.js';
import { registerSnapshotCommands } from './snapshot.js';
import { registerStreamingCommands } from './streaming.js';
import { registerTlsCommands } from './tls.js';
import { registerTxnCommand } from './txn.js';
import { registerLeaseCommands } from './lease.js';

function packageVersion(): string {
  try {
    // dist/src/cli/program.js -> the package root.
    const pkg: unknown = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8'));
    const version = typeof pkg === 'object' && pkg !== null ? (pkg as { version?: unknown }).version : undefined;
    return typeof version === 'string' ? version : 'unknown';
  } catch {
    return 'unknown';
  }
}

/** `text` with every secret replaced by `<redacted>` (longest first, so one inside another is caught whole). */
export function redact(text: string, secrets: ReadonlySet<string>): string {
  let out = text;
  for (const s of [...secrets].sort((a, b) => b.length - a.length)) if (s.length >= 4) out = out.split(s).join('<redacted>');
  return out;
}

/** Builds the command tree. Actions report their exit code through `setExitCode`. */
export function buildProgram(io: CliIo, agentDeps: () => Promise<AgentDeps>, setExitCode: (code: number) => void): Command {
  const program = new Command('cairn')
    .description('Cairn: a Raft-replicated coordinator for control planes')
    .version(packageVersion(), '--version', 'print the version')
    // Settings made before the subcommands are created are inherited by them.
    .exitOverride()
    .configureOutput({
      writeOut: (s) => io.stdout(s),
      writeErr: (s) => io.stderr(s),
      outputError: (s, write) => write(`cairn: ${s.replace(/^error: /, '')}`),
    })
    .showSuggestionAfterError(true)
    // `--version` belongs to the program only before the command word, so subcommands (e.g.
    // `cairn resource write --version 3`) can have options of the same name.
    .enablePositionalOptions();
  registerAgentCommand(program, io, agentDeps, setExitCode);
  registerOperatorCommands(program, io);
  registerInfoCommand(program, io);
  registerSnapshotCommands(program, io);
  registerResourceCommands(program, io);
  registerTxnCommand(program, io);
  registerLeaseCommands(program, io);
  registerStreamingCommands(program, io);
  registerTlsCommands(program, io);
  registerAclCommands(program, io);
  return program;
}

/** Runs `cairn <argv...>`; resolves to the process's exit code. Never throws. */
export async function runCli(argv: readonly string[], processIo: CliIo, agentDeps: () => Promise<AgentDeps>): Promise<number> {
  // Secrets read during the run (the ACL token) never reach stderr, whatever prints there.
  const secrets = processIo.secrets ?? new Set<string>();
  const io: CliIo = { ...processIo, secrets, stderr: (s) => processIo.stderr(redact(s, secrets)) };
  let exitCode: number = ExitCode.OK;
  const program = buildProgram(io, agentDeps, (code) => {
    exitCode = code;
  });
  try {
    await program.parseAsync([...argv], { from: 'user' });
    return exitCode;
  } catch (e) {
    if (e instanceof CommanderError) {
      // Commander has printed its message or the help already.
      // Asked-for help and --version exit 0; help shown because a command was missing exits 1
      // in commander, a usage error here.
      return e.exitCode === 0 ? ExitCode.OK : ExitCode.USAGE;
    }
    if (e instanceof CliError) {
      io.stderr(`cairn: ${e.message}\n`);
      return e.exitCode;
    }
    io.stderr(`cairn: INTERNAL: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
    return ExitCode.GENERIC;
  }
}
