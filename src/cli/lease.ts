/**
 * `cairn lease grant|revoke|keepalive|ttl|list` (docs/api.md "Leases"), through the client
 * library (gRPC), like `cairn resource ...`; `cairn resource write --lease ID` attaches a
 * resource. `keepalive` keeps a lease alive until interrupted (SIGINT/SIGTERM: it stops
 * renewing and leaves the lease to expire) or until the lease is lost (exit 3 when it is gone).
 */
import type { Command } from 'commander';
import { InvalidArgumentError } from 'commander';
import { printJson, type CliIo } from './context.js';
import { CliError, ExitCode } from './errors.js';
import { resourceOptions, withClient, withResourceOptions, PROCESS_DEPS, type ResourceDeps } from './resource.js';
import { formatTable } from './table.js';

function ttlArg(value: string): number {
  if (!/^[0-9]{1,10}$/.test(value) || Number(value) < 1) throw new InvalidArgumentError(`must be a whole number of seconds (1 or more), got '${value}'`);
  return Number(value);
}

export function registerLeaseCommands(program: Command, io: CliIo, deps: ResourceDeps = PROCESS_DEPS): void {
  const lease = program
    .command('lease')
    .description('grant, keep alive, inspect and revoke leases; resources attached to a lease (resource write --lease) are deleted when it expires or is revoked');

  withResourceOptions(
    lease
      .command('grant')
      .description("grant a lease of TTL seconds (raised to the server's minimum); prints its id")
      .argument('<ttl>', 'the TTL in whole seconds', ttlArg)
      .option('--id <id>', 'the lease id (a lowercase DNS label); default: the server chooses one'),
    io,
  ).action(async (ttl: number, _opts: unknown, cmd: Command) => {
    const options = resourceOptions(cmd, io);
    const flags = cmd.opts<{ id?: string }>();
    const r = await withClient({ options, write: true }, (c) => c.leases.grant(ttl, flags.id !== undefined ? { id: flags.id } : {}));
    if (options.json) printJson(io, { id: r.id, ttl_seconds: r.ttlSeconds });
    else io.stdout(`lease ${r.id} granted with TTL ${r.ttlSeconds}s\n`);
  });

  withResourceOptions(lease.command('revoke').description('revoke a lease: every resource attached to it is deleted, at one revision').argument('<id>', 'the lease id'), io).action(
    async (id: string, _opts: unknown, cmd: Command) => {
      const options = resourceOptions(cmd, io);
      const r = await withClient({ options, write: true }, (c) => c.leases.revoke(id));
      if (options.json) printJson(io, { id: r.id, deleted: r.deleted, revision: r.revision });
      else io.stdout(`lease ${r.id} revoked: ${r.deleted} resource(s) deleted at revision ${r.revision}\n`);
    },
  );

  withResourceOptions(
    lease.command('ttl').description("a lease's granted TTL and the time left on the leader's clock").argument('<id>', 'the lease id').option('--attached', 'also list the attached resources'),
    io,
  ).action(async (id: string, _opts: unknown, cmd: Command) => {
    const options = resourceOptions(cmd, io);
    const attached = cmd.opts<{ attached?: boolean }>().attached === true;
    const r = await withClient({ options, write: false }, (c) => c.leases.timeToLive(id, { attached }));
    if (options.json) {
      printJson(io, { id: r.id, ttl_seconds: r.ttlSeconds, remaining_seconds: r.remainingSeconds, remaining_ms: r.remainingMs, ...(attached ? { attached: r.attached } : {}) });
      return;
    }
    io.stdout(`lease ${r.id}: granted TTL ${r.ttlSeconds}s, remaining ${r.remainingSeconds}s\n`);
    if (attached) {
      if (r.attached.length === 0) io.stdout('no resources attached\n');
      for (const a of r.attached) io.stdout(`  ${a.type} ${[a.tenancy.partition, a.tenancy.namespace].filter((x) => x !== '').join('/')}${a.tenancy.partition !== '' || a.tenancy.namespace !== '' ? '/' : ''}${a.name}\n`);
    }
  });

  withResourceOptions(lease.command('list').description('every lease you may list, with its granted TTL'), io).action(async (_opts: unknown, cmd: Command) => {
    const options = resourceOptions(cmd, io);
    const r = await withClient({ options, write: false }, (c) => c.leases.list());
    if (options.json) printJson(io, { leases: r.map((l) => ({ id: l.id, ttl_seconds: l.ttlSeconds })) });
    else if (r.length === 0) io.stdout('no leases\n');
    else io.stdout(formatTable([{ header: 'id', cell: (l) => l.id }, { header: 'ttl', cell: (l) => `${l.ttlSeconds}s` }], r));
  });

  withResourceOptions(
    lease
      .command('keepalive')
      .description('keep a lease alive (a renewal every TTL/3, across node failures) until interrupted or until it is lost'),
    io,
  )
    .argument('<id>', 'the lease id')
    .action(async (id: string, _opts: unknown, cmd: Command) => {
      const options = resourceOptions(cmd, io);
      const lost = await withClient({ options, write: false }, async (c) => {
        const ka = c.leases.keepAlive(id, {
          onRenewed: (ttl) => {
            if (options.json) printJson(io, { id, ttl_seconds: ttl });
            else io.stdout(`lease ${id} kept alive with TTL ${ttl}s\n`);
          },
        });
        const unregister = deps.onInterrupt(() => ka.stop());
        try {
          return await ka.lost;
        } finally {
          unregister();
        }
      });
      if (lost.reason === 'stopped') return;
      const code = lost.reason === 'gone' ? ExitCode.NOT_FOUND : lost.reason === 'refused' ? ExitCode.AUTH : ExitCode.UNAVAILABLE;
      throw new CliError(code, `lease ${id} lost (${lost.reason}): ${lost.message}`);
    });
}
