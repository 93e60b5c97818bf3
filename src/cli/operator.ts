/**
 * `cairn operator raft ...`: Raft membership and leadership through any node's HTTP API
 * (API.md "Cluster and operations"). Membership changes are committed through Raft one at a
 * time; the agent refuses a second one while the first is pending.
 */
import type { Command } from 'commander';
import { clientOptions, connection, printJson, withClientOptions, type CliIo } from './context.js';
import { requestJson, unexpected, type RequestOptions } from './http.js';
import { formatTable } from './table.js';

const TIMEOUT_MS = 10_000;

export interface RaftServer {
  readonly id: string;
  readonly address: string;
  readonly suffrage: 'voter' | 'learner';
  readonly leader: boolean;
}

export interface RaftConfiguration {
  /** The log index of the configuration entry in force. */
  readonly index: number;
  readonly servers: readonly RaftServer[];
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

function asServer(v: unknown): RaftServer | undefined {
  if (!isRecord(v)) return undefined;
  const { id, address, suffrage, leader } = v;
  if (typeof id !== 'string' || typeof address !== 'string' || typeof leader !== 'boolean') return undefined;
  if (suffrage !== 'voter' && suffrage !== 'learner') return undefined;
  return { id, address, suffrage, leader };
}

/** Narrows GET /v1/operator/raft/configuration's body, or says what is wrong with it. */
export function asConfiguration(v: unknown): RaftConfiguration | string {
  if (!isRecord(v)) return 'expected an object';
  const { index, servers } = v;
  if (typeof index !== 'number' || !Number.isSafeInteger(index)) return "expected an integer 'index'";
  if (!Array.isArray(servers)) return "expected a 'servers' list";
  const parsed: RaftServer[] = [];
  for (const [i, s] of servers.entries()) {
    const server = asServer(s);
    if (server === undefined) return `servers[${i}] is not {id, address, suffrage: "voter"|"learner", leader}: ${JSON.stringify(s)}`;
    parsed.push(server);
  }
  return { index, servers: parsed };
}

/** The peers table: one row per server, leader first, then by id. */
export function formatPeers(config: RaftConfiguration): string {
  const rows = [...config.servers].sort((a, b) => Number(b.leader) - Number(a.leader) || a.id.localeCompare(b.id));
  return formatTable(
    [
      { header: 'id', cell: (s: RaftServer) => s.id },
      { header: 'address', cell: (s) => s.address },
      { header: 'suffrage', cell: (s) => s.suffrage },
      { header: 'leader', cell: (s) => (s.leader ? 'yes' : 'no') },
    ],
    rows,
  );
}

export function registerOperatorCommands(program: Command, io: CliIo): void {
  const operator = program.command('operator').description('operate the cluster: Raft membership and leadership');
  const raft = operator.command('raft').description('Raft peers and leadership');

  withClientOptions(raft.command('list-peers').description('list the servers in the Raft configuration and which one leads'), io, TIMEOUT_MS).action(
    async (_opts: unknown, cmd: Command) => {
      const options = clientOptions(cmd, io);
      const req: RequestOptions = { ...base(options), method: 'GET', path: '/v1/operator/raft/configuration', write: false };
      const body = await requestJson(req);
      const config = asConfiguration(body);
      if (typeof config === 'string') throw unexpected(req, config);
      if (options.json) printJson(io, body);
      else io.stdout(formatPeers(config));
    },
  );

  withClientOptions(
    raft
      .command('add-peer')
      .description('add a server to the cluster (a voter unless --learner); one membership change at a time')
      .argument('<id>', "the new node's id (its --node-id)")
      .argument('<address>', "the new node's gRPC address, host:port (its --advertise-addr)")
      .option('--learner', 'add it as a non-voting learner that receives the log but does not count for quorum'),
    io,
    TIMEOUT_MS,
  ).action(async (id: string, address: string, _opts: unknown, cmd: Command) => {
    const options = clientOptions(cmd, io);
    const learner = cmd.opts<{ learner?: boolean }>().learner === true;
    const body = await requestJson({
      ...base(options),
      method: 'POST',
      path: '/v1/operator/raft/peers',
      json: { id, address, voter: !learner },
      write: true,
    });
    if (options.json) {
      printJson(io, body);
      return;
    }
    // The agent adds every node as a learner first and promotes it once it has caught up,
    // so the quorum never counts a node that cannot vote yet.
    const promoted = isRecord(body) && body['promote_when_caught_up'] === true;
    const as = learner ? 'as a learner' : promoted ? 'as a learner; it becomes a voter once it has caught up' : 'as a voter';
    io.stdout(`added ${id} (${address}) ${as}${atIndex(body)}\n`);
  });

  withClientOptions(
    raft.command('remove-peer').description('remove a server from the cluster').argument('<id>', 'the node id to remove'),
    io,
    TIMEOUT_MS,
  ).action(async (id: string, _opts: unknown, cmd: Command) => {
    const options = clientOptions(cmd, io);
    const body = await requestJson({
      ...base(options),
      method: 'DELETE',
      path: `/v1/operator/raft/peers/${encodeURIComponent(id)}`,
      write: true,
    });
    if (options.json) printJson(io, body);
    else io.stdout(`removed ${id}${atIndex(body)}\n`);
  });

  withClientOptions(
    raft
      .command('transfer-leader')
      .description('hand leadership to another voter (the most caught-up one if no id is given)')
      .argument('[id]', 'the node id to transfer leadership to'),
    io,
    TIMEOUT_MS,
  ).action(async (id: string | undefined, _opts: unknown, cmd: Command) => {
    const options = clientOptions(cmd, io);
    const body = await requestJson({
      ...base(options),
      method: 'POST',
      path: '/v1/operator/raft/transfer-leader',
      json: id === undefined ? {} : { id },
      write: true,
    });
    if (options.json) {
      printJson(io, body);
      return;
    }
    const requested = isRecord(body) && typeof body['requested'] === 'string' ? body['requested'] : id;
    io.stdout(`leadership transfer${requested === undefined ? '' : ` to ${requested}`} requested\n`);
  });
}

/** " (configuration index N)" when the response names the index of the change. */
const atIndex = (body: unknown): string =>
  isRecord(body) && typeof body['index'] === 'number' ? ` (configuration index ${body['index']})` : '';

const base = connection;
