/**
 * `cairn tls ca create` and `cairn tls cert create`: the cluster's TLS material in files, like
 * `consul tls`. Everything is made by `src/auth` (loaded only when a tls command runs); this
 * file parses flags, names the files and writes them.
 *
 * Files are written with mode 0600 (a missing --dir is created with mode 0700), each through a temporary file renamed into place, and
 * never over an existing file unless --force: a CA key that is overwritten by accident cannot be
 * recovered, and every certificate it signed would have to be replaced. All targets are checked
 * before anything is written, so a refused command writes nothing.
 */
import { mkdir, open, readFile, rename, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import { InvalidArgumentError, type Command } from 'commander';
import type { CliIo } from './context.js';
import { CliError, ExitCode, usageError } from './errors.js';

export const CA_CERT_FILE = 'cairn-ca.pem';
export const CA_KEY_FILE = 'cairn-ca-key.pem';

function days(value: string): number {
  if (!/^\d+$/.test(value) || Number(value) < 1 || Number(value) > 36500) throw new InvalidArgumentError(`must be a number of days from 1 to 36500, got '${value}'`);
  return Number(value);
}

const collect = (value: string, previous: string[] | undefined): string[] => [...(previous ?? []), ...value.split(',').map((s) => s.trim()).filter((s) => s !== '')];

interface OutFile {
  readonly path: string;
  readonly text: string;
  readonly what: string;
}

const exists = async (file: string): Promise<boolean> =>
  stat(file).then(
    () => true,
    (e: NodeJS.ErrnoException) => (e.code === 'ENOENT' ? false : Promise.reject(e)),
  );

/** Writes every file (mode 0600), refusing before writing anything if one exists and !force. */
export async function writeFiles(files: readonly OutFile[], force: boolean, io: CliIo): Promise<void> {
  if (!force) {
    const taken: string[] = [];
    for (const f of files) if (await exists(f.path)) taken.push(f.path);
    if (taken.length > 0) {
      throw usageError(`${taken.join(' and ')} already exist${taken.length === 1 ? 's' : ''}; nothing was written (pass --force to replace, or --dir to write elsewhere)`);
    }
  }
  for (const dir of new Set(files.map((f) => path.dirname(f.path)))) {
    try {
      await mkdir(dir, { recursive: true, mode: 0o700 }); // a new --dir is private; an existing one is left as it is
    } catch (e) {
      throw new CliError(ExitCode.GENERIC, `cannot create the directory ${dir}: ${(e as Error).message}`);
    }
  }
  for (const f of files) {
    const partial = `${f.path}.partial-${process.pid}`;
    try {
      // 'wx': a fresh file, created with mode 0600 (no window with wider permissions).
      const handle = await open(partial, 'wx', 0o600);
      try {
        await handle.writeFile(f.text);
        await handle.chmod(0o600); // against a umask that would have left less, or a stale mode
        await handle.sync();
      } finally {
        await handle.close();
      }
      await rename(partial, f.path);
    } catch (e) {
      await rm(partial, { force: true });
      throw new CliError(ExitCode.GENERIC, `cannot write ${f.path}: ${(e as Error).message}`);
    }
    io.stdout(`wrote ${f.path} (${f.what})\n`);
  }
}

async function readPem(file: string, what: string): Promise<string> {
  try {
    return await readFile(file, 'utf8');
  } catch (e) {
    throw usageError(`cannot read the ${what} ${file}: ${(e as Error).message} (create a CA with \`cairn tls ca create\`, or pass --ca and --ca-key)`);
  }
}

interface CaFlags {
  readonly dir?: string;
  readonly days?: number;
  readonly name?: string;
  readonly force?: boolean;
}

interface CertFlags {
  readonly node?: string;
  readonly client?: string;
  readonly host?: string[];
  readonly dir?: string;
  readonly days?: number;
  readonly ca?: string;
  readonly caKey?: string;
  readonly force?: boolean;
}

export function registerTlsCommands(program: Command, io: CliIo): void {
  const tls = program.command('tls').description('make the TLS material of a cluster: a CA, node and client certificates');
  const ca = tls.command('ca').description('the cluster certificate authority');
  ca.command('create')
    .description(`create a cluster CA: ${CA_CERT_FILE} (give to every node and client) and ${CA_KEY_FILE} (keep secret, offline if you can)`)
    .option('--dir <dir>', 'where to write the files (created if missing)', '.')
    .option('--days <n>', 'validity in days', days, 1825)
    .option('--name <name>', "the CA's common name (default: 'Cairn CA' and a random suffix)")
    .option('--force', 'replace existing files')
    .action(async (flags: CaFlags) => {
      const auth = await import('../auth/index.js');
      const dir = path.resolve(io.cwd, flags.dir ?? '.');
      let pair: Awaited<ReturnType<typeof auth.createCa>>;
      try {
        pair = await auth.createCa({ ...(flags.name !== undefined ? { name: flags.name } : {}), ...(flags.days !== undefined ? { days: flags.days } : {}) });
      } catch (e) {
        throw usageError(`cannot create the CA: ${(e as Error).message}`);
      }
      await writeFiles(
        [
          { path: path.join(dir, CA_CERT_FILE), text: pair.certPem, what: 'CA certificate' },
          { path: path.join(dir, CA_KEY_FILE), text: pair.keyPem, what: 'CA private key: keep it secret' },
        ],
        flags.force === true,
        io,
      );
    });

  const cert = tls.command('cert').description('node and client certificates signed by the cluster CA');
  cert
    .command('create')
    .description('create a node certificate (--node ID) or a client certificate (--client NAME) signed by the cluster CA')
    .option('--node <id>', "a node certificate for this node id (the agent's --node-id): server and client authentication")
    .option('--client <name>', 'a client certificate for this name: client authentication only')
    .option('--host <host>', 'with --node: a DNS name or IP address the node is reached at (its --advertise-addr host); repeat or separate with commas. localhost, 127.0.0.1 and ::1 are always included', collect)
    .option('--dir <dir>', 'where to write the files (created if missing) and, by default, find the CA', '.')
    .option('--days <n>', 'validity in days', days, 365)
    .option('--ca <file>', `the CA certificate (default: <dir>/${CA_CERT_FILE})`)
    .option('--ca-key <file>', `the CA private key (default: <dir>/${CA_KEY_FILE})`)
    .option('--force', 'replace existing files')
    .action(async (flags: CertFlags) => {
      if ((flags.node === undefined) === (flags.client === undefined)) throw usageError('give exactly one of --node <id> or --client <name>');
      if (flags.client !== undefined && flags.host !== undefined) throw usageError('--host applies to node certificates only (--node)');
      const auth = await import('../auth/index.js');
      if (flags.node !== undefined && !auth.isNodeId(flags.node)) {
        throw usageError(`--node must be a node id: a lowercase DNS label (a-z, 0-9 and '-', at most 63 characters), got '${flags.node}'`);
      }
      if (flags.client !== undefined && !auth.isClientName(flags.client)) {
        throw usageError(`--client must be 1 to 63 of a-z, 0-9, '.', '_' and '-', starting and ending with a letter or digit, got '${flags.client}'`);
      }
      const dir = path.resolve(io.cwd, flags.dir ?? '.');
      const caFile = path.resolve(io.cwd, flags.ca ?? path.join(dir, CA_CERT_FILE));
      const caKeyFile = path.resolve(io.cwd, flags.caKey ?? path.join(dir, CA_KEY_FILE));
      const caPair = { certPem: await readPem(caFile, 'CA certificate'), keyPem: await readPem(caKeyFile, 'CA private key') };
      const daysOpt = flags.days !== undefined ? { days: flags.days } : {};
      let pair: Awaited<ReturnType<typeof auth.createNodeCert>>;
      let base: string;
      let what: string;
      try {
        if (flags.node !== undefined) {
          pair = await auth.createNodeCert(caPair, { nodeId: flags.node, hosts: flags.host ?? [], ...daysOpt });
          base = `node-${flags.node}`;
          what = `node ${flags.node}`;
        } else {
          const name = flags.client as string;
          pair = await auth.createClientCert(caPair, { name, ...daysOpt });
          base = `client-${name}`;
          what = `client ${name}`;
        }
      } catch (e) {
        throw usageError(`cannot create the certificate with the CA ${caFile} and ${caKeyFile}: ${(e as Error).message}`);
      }
      await writeFiles(
        [
          { path: path.join(dir, `${base}.pem`), text: pair.certPem, what: `${what} certificate` },
          { path: path.join(dir, `${base}-key.pem`), text: pair.keyPem, what: `${what} private key` },
        ],
        flags.force === true,
        io,
      );
    });
}
