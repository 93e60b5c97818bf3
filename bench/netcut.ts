/**
 * Cutting one server process off the network for the failover trials ("the leader's traffic
 * dropped"), on a single machine where every node listens on 127.0.0.1.
 *
 * Dropping by port is not enough: a Cairn node sends its Raft messages over connections it
 * opened itself (one client stream per peer, src/forwarding/grpc-transport.ts), from ephemeral
 * ports, and would open new ones after a keepalive timeout. So every server process is started
 * inside a cgroup (v2) of its own, made for the run, and the cut is an nftables table that drops
 * every packet whose socket belongs to that cgroup, in the output hook (what the process sends)
 * and the input hook (what is sent to it), whatever the port and whoever opened the connection:
 *
 *     table inet cairn_bench_<runpid> {
 *       chain input  { type filter hook input  priority 0; policy accept; socket cgroupv2 level 1 "unified/cairn-bench-<runpid>-n1" drop }
 *       chain output { type filter hook output priority 0; policy accept; socket cgroupv2 level 1 "unified/cairn-bench-<runpid>-n1" drop }
 *     }
 *
 * Packets stay unanswered (no RST, no ICMP): to the other nodes the process is a host that
 * dropped off the network, and its open TCP connections stay open. A socket takes its cgroup
 * when it is made (an accepted one from its listener), so the process must be in the cgroup
 * before it opens any: `spawnPrefix` starts it there (a shell writes its own pid into the
 * cgroup, then execs the server, which keeps the pid).
 *
 * The table is the run's own (its name carries this process's pid) and is deleted when the
 * cut is healed, when the program exits (also on an error or Ctrl-C: procs.ts's clean-up calls
 * `cleanupNetCut`), and before it is first made. The cgroup directories are removed at exit,
 * once their processes are gone.
 *
 * Needs root, nftables (`nft`; `bench/install-nft.sh` installs Debian's nftables package) and a
 * cgroup v2 hierarchy mounted under /sys/fs/cgroup (nft names a cgroup by its path there).
 * `netCutSupport()` says why not where any of these is missing; the "traffic dropped" rows are
 * then skipped with that reason.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmdirSync } from 'node:fs';
import path from 'node:path';

/** Where nft resolves `socket cgroupv2` paths from. */
const NFT_CGROUP_ROOT = '/sys/fs/cgroup';

/** The run's nftables table: one per bench process, so two runs never touch each other's. */
export function tableName(runPid: number = process.pid): string {
  return `cairn_bench_${runPid}`;
}

/** The name of node `node`'s cgroup directory (a direct child of the cgroup v2 root). */
export function cgroupName(node: string, runPid: number = process.pid): string {
  if (!/^[A-Za-z0-9_-]+$/.test(node)) throw new Error(`bad node name for a cgroup: ${JSON.stringify(node)}`);
  return `cairn-bench-${runPid}-${node}`;
}

/**
 * The nftables script that cuts off the processes of the cgroup at `cgroupPath` (relative to
 * /sys/fs/cgroup, e.g. `unified/cairn-bench-123-n1`; level 1 of the cgroup v2 hierarchy): drops
 * everything they send and everything sent to them. Replaces any earlier cut of the same table.
 * Pure, so the rule text is unit-tested.
 */
export function cutRules(table: string, cgroupPath: string): string {
  if (!/^[a-z0-9_]+$/.test(table)) throw new Error(`bad nftables table name ${JSON.stringify(table)}`);
  if (!/^[A-Za-z0-9_/-]+$/.test(cgroupPath) || cgroupPath.includes('..') || cgroupPath.startsWith('/')) throw new Error(`bad cgroup path ${JSON.stringify(cgroupPath)}`);
  const chain = (hook: 'input' | 'output'): string[] => [
    `  chain ${hook} {`,
    `    type filter hook ${hook} priority 0; policy accept;`,
    `    socket cgroupv2 level 1 "${cgroupPath}" drop`,
    '  }',
  ];
  return [`table inet ${table}`, `delete table inet ${table}`, `table inet ${table} {`, ...chain('input'), ...chain('output'), '}', ''].join('\n');
}

/** The nftables script that removes the table (nothing if it is absent: `table` makes sure it exists first). */
export function healRules(table: string): string {
  if (!/^[a-z0-9_]+$/.test(table)) throw new Error(`bad nftables table name ${JSON.stringify(table)}`);
  return `table inet ${table}\ndelete table inet ${table}\n`;
}

/**
 * The cgroup v2 mount point, from a /proc/mounts text: `/sys/fs/cgroup` (pure v2) or
 * `/sys/fs/cgroup/unified` (the hybrid layout of systemd hosts and many containers).
 */
export function cgroup2Mount(mounts: string): string | undefined {
  for (const line of mounts.split('\n')) {
    const f = line.split(' ');
    if (f[2] === 'cgroup2' && f[1] !== undefined) return f[1];
  }
  return undefined;
}

export interface NetCutSupport {
  readonly ok: boolean;
  /** Why not, when `ok` is false. */
  readonly reason: string;
  /** The cgroup v2 mount point, when `ok`. */
  readonly mount: string;
}

let support: NetCutSupport | undefined;

/** Whether this machine can cut a process off (root, nft, cgroup v2 under /sys/fs/cgroup), and why not. Checked once. */
export function netCutSupport(): NetCutSupport {
  if (support) return support;
  const no = (reason: string): NetCutSupport => (support = { ok: false, reason, mount: '' });
  if (process.platform !== 'linux') return no('needs Linux (nftables, cgroup v2)');
  if (process.getuid?.() !== 0) return no('needs root (nftables and cgroups)');
  const nft = spawnSync('nft', ['--version'], { encoding: 'utf8' });
  if (nft.error !== undefined || nft.status !== 0) return no('`nft` is not installed (bench/install-nft.sh installs Debian\'s nftables)');
  let mounts = '';
  try {
    mounts = readFileSync('/proc/mounts', 'utf8');
  } catch {
    return no('cannot read /proc/mounts');
  }
  const mount = cgroup2Mount(mounts);
  if (mount === undefined) return no('no cgroup v2 hierarchy is mounted');
  if (mount !== NFT_CGROUP_ROOT && !mount.startsWith(`${NFT_CGROUP_ROOT}/`)) return no(`the cgroup v2 hierarchy is mounted at ${mount}, not under ${NFT_CGROUP_ROOT} where nft looks`);
  // Prove it end to end: a cgroup can be made, and nft accepts a rule naming it.
  const probe = path.join(mount, cgroupName('probe'));
  try {
    mkdirSync(probe, { recursive: true });
    // A process can be started inside it, the way spawnPrefix starts the servers.
    const moved = spawnSync('/bin/sh', ['-c', 'echo $$ > "$0/cgroup.procs"', probe], { encoding: 'utf8' });
    if (moved.status !== 0) return no(`cannot start a process inside a cgroup under ${mount}: ${(moved.stderr ?? '').trim().split('\n')[0] ?? ''}`);
    const table = `${tableName()}_probe`;
    const r = spawnSync('nft', ['-f', '-'], { input: cutRules(table, path.relative(NFT_CGROUP_ROOT, probe)) + healRules(table), encoding: 'utf8' });
    if (r.status !== 0) return no(`nft rejects a socket cgroupv2 rule: ${(r.stderr ?? '').trim().split('\n')[0] ?? ''}`);
  } catch (e) {
    return no(`cannot make a cgroup under ${mount}: ${e instanceof Error ? e.message : String(e)}`);
  } finally {
    try {
      rmdirSync(probe);
    } catch {
      // not made
    }
  }
  return (support = { ok: true, reason: '', mount });
}

const made = new Set<string>();
let tableUp = false;

/**
 * Where node `node`'s process must run for it to be cut off later: its cgroup directory (made
 * here) and the command prefix that starts a process inside it. Undefined where cutting is not
 * supported (the process then starts as usual).
 */
export function spawnPrefix(node: string): { readonly command: string; readonly args: readonly string[] } | undefined {
  const s = netCutSupport();
  if (!s.ok) return undefined;
  const dir = path.join(s.mount, cgroupName(node));
  mkdirSync(dir, { recursive: true });
  made.add(dir);
  // $$ is the shell's pid, which the exec'd server keeps.
  return { command: '/bin/sh', args: ['-c', 'echo $$ > "$0/cgroup.procs" && exec "$@"', dir] };
}

/** Cuts node `node`'s process off: drops every packet it sends and every packet sent to it. */
export function cutOff(node: string): void {
  const s = netCutSupport();
  if (!s.ok) throw new Error(`cannot cut ${node} off the network: ${s.reason}`);
  const dir = path.join(s.mount, cgroupName(node));
  if (!existsSync(dir)) throw new Error(`cannot cut ${node} off the network: it was not started in a cgroup of its own (${dir})`);
  tableUp = true;
  execFileSync('nft', ['-f', '-'], { input: cutRules(tableName(), path.relative(NFT_CGROUP_ROOT, dir)), stdio: ['pipe', 'ignore', 'pipe'] });
}

/** Lets the traffic through again (deletes the run's table). */
export function heal(): void {
  if (!tableUp) return;
  execFileSync('nft', ['-f', '-'], { input: healRules(tableName()), stdio: ['pipe', 'ignore', 'pipe'] });
  tableUp = false;
}

/** At exit (procs.ts): the table is deleted, and every cgroup made here whose processes are gone is removed. Never throws. */
export function cleanupNetCut(): void {
  try {
    heal();
  } catch {
    // nft gone or the table already deleted
  }
  // A process SIGKILLed a moment ago stays in its cgroup until it is reaped, and the kernel
  // refuses to remove a cgroup with a process in it: a few tries, 25 ms apart (this runs at
  // exit, where nothing can be awaited).
  const pause = new Int32Array(new SharedArrayBuffer(4));
  for (let attempt = 0; attempt < 40 && made.size > 0; attempt++) {
    for (const dir of made) {
      try {
        rmdirSync(dir);
        made.delete(dir);
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code === 'ENOENT') made.delete(dir);
      }
    }
    if (made.size > 0) Atomics.wait(pause, 0, 0, 25);
  }
}
