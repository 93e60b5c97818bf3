/**
 * `cairn spu|spu-group|topic|partition ...`: the streaming.v1 domain (src/types/README.md) as
 * short commands over the same client calls as `cairn resource` (and the same --endpoint,
 * --json, --timeout and exit codes). They read the controllers' reports from `status`; until a
 * controller has reported, a resource shows `Init`.
 *
 * The CLI may not import src/types, so the few names it needs are repeated here; they are the
 * streaming.v1 wire contract (src/types/streaming-model.ts) and cannot change silently.
 */
import type { Command } from 'commander';
import type { CairnClient, Condition, Resource } from '../client/index.js';
import { printJson, type CliIo } from './context.js';
import { CliError, ExitCode, usageError } from './errors.js';
import { dash, displayName, formatResource, resourceOptions, withClient, withResourceOptions, type ResourceOptions } from './resource.js';
import { formatTable } from './table.js';

const SPU = 'streaming.v1.Spu';
const SPU_GROUP = 'streaming.v1.SpuGroup';
const TOPIC = 'streaming.v1.Topic';
const PARTITION = 'streaming.v1.Partition';
const KEY = {
  spu: 'streaming.v1.spu-controller',
  spuGroup: 'streaming.v1.spu-group-controller',
  topic: 'streaming.v1.topic-controller',
  partition: 'streaming.v1.partition-controller',
  heartbeat: 'streaming.v1.spu-heartbeat',
} as const;

interface Endpoint {
  host: string;
  port: number;
}
interface SpuData {
  id: number;
  type: string;
  rack?: string;
  publicEndpoint: Endpoint;
  privateEndpoint: Endpoint;
}
interface SpuGroupData {
  replicas: number;
  minId: number;
  storageSize: string;
  rack?: string;
}
interface TopicData {
  partitions?: number;
  replicationFactor?: number;
  replicaAssignment?: number[][];
}
interface PartitionData {
  topic: string;
  index: number;
  leader: number;
  replicas: number[];
}

const condition = (r: Resource, key: string, type: string): Condition | undefined => r.status[key]?.conditions.find((c) => c.type === type);
/** The resolution a controller reported (`Init` until it has). */
export const resolutionOf = (r: Resource, key: string): string => condition(r, key, 'Resolution')?.reason ?? 'Init';
const reasonOf = (r: Resource, key: string): string => condition(r, key, 'Resolution')?.message ?? '';
const endpointText = (e: Endpoint): string => `${e.host.includes(':') ? `[${e.host}]` : e.host}:${e.port}`;

// ---- Tables -------------------------------------------------------------------------------------

export function formatSpus(spus: ReadonlyArray<Resource<SpuData>>): string {
  if (spus.length === 0) return 'no SPUs\n';
  const rows = [...spus].sort((a, b) => a.data.id - b.data.id || (a.id.name < b.id.name ? -1 : 1));
  return formatTable(
    [
      { header: 'name', cell: (r: Resource<SpuData>) => r.id.name },
      { header: 'id', cell: (r) => String(r.data.id), align: 'right' },
      { header: 'type', cell: (r) => r.data.type },
      { header: 'resolution', cell: (r) => resolutionOf(r, KEY.spu) },
      { header: 'rack', cell: (r) => dash(r.data.rack ?? '') },
      { header: 'public', cell: (r) => endpointText(r.data.publicEndpoint) },
      { header: 'private', cell: (r) => endpointText(r.data.privateEndpoint) },
      { header: 'group', cell: (r) => (r.owner === null ? '-' : r.owner.name) },
    ],
    rows,
  );
}

export function formatSpuGroups(groups: ReadonlyArray<Resource<SpuGroupData>>): string {
  if (groups.length === 0) return 'no SPU groups\n';
  return formatTable(
    [
      { header: 'name', cell: (r: Resource<SpuGroupData>) => r.id.name },
      { header: 'replicas', cell: (r) => String(r.data.replicas), align: 'right' },
      { header: 'min id', cell: (r) => String(r.data.minId), align: 'right' },
      { header: 'storage', cell: (r) => r.data.storageSize },
      { header: 'resolution', cell: (r) => resolutionOf(r, KEY.spuGroup) },
      { header: 'reason', cell: (r) => dash(reasonOf(r, KEY.spuGroup)) },
    ],
    groups,
  );
}

const rowsText = (rows: readonly number[][]): string => rows.map((r) => `[${r.join(',')}]`).join(' ');

export function formatTopics(topics: ReadonlyArray<Resource<TopicData>>): string {
  if (topics.length === 0) return 'no topics\n';
  return formatTable(
    [
      { header: 'name', cell: (r: Resource<TopicData>) => r.id.name },
      { header: 'partitions', cell: (r) => String(r.data.replicaAssignment?.length ?? r.data.partitions ?? 0), align: 'right' },
      { header: 'replication', cell: (r) => (r.data.replicaAssignment !== undefined ? `manual ${rowsText(r.data.replicaAssignment)}` : String(r.data.replicationFactor ?? '')) },
      { header: 'resolution', cell: (r) => resolutionOf(r, KEY.topic) },
      // The Provisioned summary repeats the replica map, which `partition list` shows better.
      { header: 'reason', cell: (r) => (resolutionOf(r, KEY.topic) === 'Provisioned' ? '-' : dash(reasonOf(r, KEY.topic))) },
    ],
    topics,
  );
}

const liveText = (c: Condition | undefined): string => (c === undefined ? '-' : `[${c.message}]`);

export function formatPartitions(partitions: ReadonlyArray<Resource<PartitionData>>): string {
  if (partitions.length === 0) return 'no partitions\n';
  const rows = [...partitions].sort((a, b) => (a.data.topic < b.data.topic ? -1 : a.data.topic > b.data.topic ? 1 : a.data.index - b.data.index));
  return formatTable(
    [
      { header: 'topic', cell: (r: Resource<PartitionData>) => r.data.topic },
      { header: 'partition', cell: (r) => String(r.data.index), align: 'right' },
      // The elected leader once reported; the assigned one until then.
      { header: 'leader', cell: (r) => condition(r, KEY.partition, 'Leader')?.message ?? String(r.data.leader), align: 'right' },
      { header: 'replicas', cell: (r) => `[${r.data.replicas.join(',')}]` },
      { header: 'live', cell: (r) => liveText(condition(r, KEY.partition, 'LiveReplicas')) },
      { header: 'resolution', cell: (r) => resolutionOf(r, KEY.partition) },
    ],
    rows,
  );
}

function describe(r: Resource, key: string): string {
  const why = reasonOf(r, key);
  return `resolution: ${resolutionOf(r, key)}${why === '' ? '' : ` (${why})`}\n${formatResource(r)}`;
}

// ---- Parsing ------------------------------------------------------------------------------------

function nonNegativeInteger(v: string, what: string): number {
  if (!/^[0-9]{1,10}$/.test(v)) throw usageError(`${what} must be a non-negative integer, got '${v}'`);
  return Number(v);
}

/** `0,1,2;1,2,0`: one row of SPU ids per partition, leader first. */
export function parseReplicaAssignment(v: string): number[][] {
  const rows = v.split(';').map((row) => row.trim());
  if (rows.some((r) => r === '')) throw usageError(`--replica-assignment must be rows of SPU ids separated by ';', ids by ',' (e.g. '0,1;1,0'), got '${v}'`);
  return rows.map((row) => row.split(',').map((id) => nonNegativeInteger(id.trim(), '--replica-assignment: an SPU id')));
}

// ---- Commands -----------------------------------------------------------------------------------

function withNameDelete(parent: Command, io: CliIo, type: string, what: string): void {
  withResourceOptions(
    parent
      .command('delete')
      .description(`delete ${what} (and everything it owns)`)
      .argument('<name>', `the ${what}'s name`),
    io,
  ).action(async (name: string, _opts: unknown, cmd: Command) => {
    const options = resourceOptions(cmd, io);
    const r = await withClient({ options, write: true }, (c) => c.delete({ type, name }));
    if (options.json) printJson(io, r.resource === null ? { deleted: r.deleted } : { deleted: r.deleted, resource: r.resource });
    else if (r.resource === null) io.stdout(`${what} ${name} does not exist: nothing to delete\n`);
    else io.stdout(`${displayName(r.resource.id)} deleted, with everything it owned\n`);
  });
}

function withList<D>(parent: Command, io: CliIo, type: string, what: string, format: (rs: ReadonlyArray<Resource<D>>) => string, filter?: (cmd: Command) => (r: Resource<D>) => boolean): Command {
  return withResourceOptions(parent.command('list').description(`list ${what}`), io).action(async (_opts: unknown, cmd: Command) => {
    const options = resourceOptions(cmd, io);
    const r = await withClient({ options, write: false }, (c) => c.list<D>(type));
    const keep = filter?.(cmd) ?? (() => true);
    const resources = r.resources.filter(keep);
    if (options.json) printJson(io, { resources, revision: r.revision });
    else io.stdout(format(resources));
  });
}

/** Creates `type/name` with `data`; an existing name is a conflict (exit 4), not a replacement. */
async function create(options: ResourceOptions, type: string, what: string, name: string, data: unknown): Promise<Resource> {
  return withClient({ options, write: true }, async (c: CairnClient) => {
    try {
      return await c.write({ type, name }, { data, version: '0' });
    } catch (e) {
      if ((e as { code?: unknown }).code === 'CAS_FAILED') throw new CliError(ExitCode.CONFLICT, `${what} ${name} already exists: delete it first, or change it with cairn resource write ${type} ${name}`);
      throw e;
    }
  });
}

async function read(options: ResourceOptions, type: string, name: string): Promise<Resource> {
  return withClient({ options, write: false }, async (c) => (await c.read({ type, name })).resource);
}

function registerSpu(program: Command, io: CliIo): void {
  const spu = program.command('spu').description('streaming processing units (SPUs): list, describe, heartbeat');
  withList<SpuData>(spu, io, SPU, 'SPUs with their resolution (Init, Online, Offline)', formatSpus);
  withResourceOptions(spu.command('describe').description('one SPU, with its status').argument('<name>', "the SPU's name"), io).action(async (name: string, _o: unknown, cmd: Command) => {
    const options = resourceOptions(cmd, io);
    const r = await read(options, SPU, name);
    if (options.json) printJson(io, r);
    else io.stdout(describe(r, KEY.spu));
  });
  withResourceOptions(
    spu
      .command('heartbeat')
      .description(`send one heartbeat for an SPU (what an SPU process does every few seconds; status key ${KEY.heartbeat})`)
      .argument('<name>', "the SPU's name"),
    io,
  ).action(async (name: string, _o: unknown, cmd: Command) => {
    const options = resourceOptions(cmd, io);
    const written = await withClient({ options, write: true }, async (c) => {
      const r = (await c.read({ type: SPU, name })).resource;
      return c.writeStatus({ type: SPU, name, uid: r.id.uid }, KEY.heartbeat, {
        observed_generation: r.generation,
        conditions: [{ type: 'Heartbeat', state: 'TRUE', reason: 'Alive', message: '' }],
      });
    });
    if (options.json) printJson(io, written);
    else io.stdout(`${displayName(written.id)} heartbeat sent (version ${written.version})\n`);
  });
}

function registerSpuGroup(program: Command, io: CliIo): void {
  const group = program.command('spu-group').description('SPU groups: sets of managed SPUs the controllers create and scale');
  withResourceOptions(
    group
      .command('create')
      .description('create an SPU group; its controller makes SPUs <name>-<id> for ids min-id .. min-id + replicas - 1')
      .argument('<name>', "the group's name")
      .requiredOption('--replicas <n>', 'how many SPUs')
      .option('--min-id <n>', 'the first SPU id (default 0)')
      .option('--storage-size <size>', 'storage per SPU, e.g. 10Gi (default 1Gi)')
      .option('--rack <rack>', 'the rack of every SPU of the group'),
    io,
  ).action(async (name: string, _o: unknown, cmd: Command) => {
    const options = resourceOptions(cmd, io);
    const o = cmd.opts<{ replicas: string; minId?: string; storageSize?: string; rack?: string }>();
    const data = {
      replicas: nonNegativeInteger(o.replicas, '--replicas'),
      ...(o.minId !== undefined ? { minId: nonNegativeInteger(o.minId, '--min-id') } : {}),
      ...(o.storageSize !== undefined ? { storageSize: o.storageSize } : {}),
      ...(o.rack !== undefined ? { rack: o.rack } : {}),
    };
    const r = await create(options, SPU_GROUP, 'SPU group', name, data);
    if (options.json) printJson(io, r);
    else io.stdout(`SPU group ${name} created (uid ${r.id.uid}): ${JSON.stringify(r.data)}\n`);
  });
  withList<SpuGroupData>(group, io, SPU_GROUP, 'SPU groups with their resolution (Init, Invalid, Reserved)', formatSpuGroups);
  withNameDelete(group, io, SPU_GROUP, 'SPU group');
  withResourceOptions(group.command('describe').description('one SPU group, with its status and SPUs').argument('<name>', "the group's name"), io).action(
    async (name: string, _o: unknown, cmd: Command) => {
      const options = resourceOptions(cmd, io);
      const { r, spus } = await withClient({ options, write: false }, async (c) => {
        const r = (await c.read({ type: SPU_GROUP, name })).resource;
        const owned = await c.list<SpuData>(SPU, { ownerUid: r.id.uid });
        return { r, spus: owned.resources };
      });
      if (options.json) printJson(io, { resource: r, spus });
      else io.stdout(`${describe(r, KEY.spuGroup)}spus:\n${formatSpus(spus).replace(/^/gm, '  ')}`);
    },
  );
}

function registerTopic(program: Command, io: CliIo): void {
  const topic = program.command('topic').description('topics: partitions placed on SPUs by the topic controller');
  withResourceOptions(
    topic
      .command('create')
      .description('create a topic: --partitions and --replication (placed by the scheduler), or --replica-assignment')
      .argument('<name>', "the topic's name")
      .option('-p, --partitions <n>', 'number of partitions (default 1)')
      .option('-r, --replication <n>', 'replication factor (default 1)')
      .option('--replica-assignment <rows>', "manual placement: SPU ids per partition, leader first, e.g. '0,1;1,0'"),
    io,
  ).action(async (name: string, _o: unknown, cmd: Command) => {
    const options = resourceOptions(cmd, io);
    const o = cmd.opts<{ partitions?: string; replication?: string; replicaAssignment?: string }>();
    let data: TopicData;
    if (o.replicaAssignment !== undefined) {
      if (o.partitions !== undefined || o.replication !== undefined) throw usageError('--replica-assignment cannot be combined with --partitions or --replication');
      data = { replicaAssignment: parseReplicaAssignment(o.replicaAssignment) };
    } else {
      data = {
        ...(o.partitions !== undefined ? { partitions: nonNegativeInteger(o.partitions, '--partitions') } : {}),
        ...(o.replication !== undefined ? { replicationFactor: nonNegativeInteger(o.replication, '--replication') } : {}),
      };
    }
    const r = await create(options, TOPIC, 'topic', name, data);
    if (options.json) printJson(io, r);
    else io.stdout(`topic ${name} created (uid ${r.id.uid}): ${JSON.stringify(r.data)}\n`);
  });
  withList<TopicData>(topic, io, TOPIC, 'topics with their resolution (Init, Pending, InsufficientResources, InvalidConfig, Provisioned)', formatTopics);
  withNameDelete(topic, io, TOPIC, 'topic');
  withResourceOptions(topic.command('describe').description('one topic, with its status and partitions').argument('<name>', "the topic's name"), io).action(
    async (name: string, _o: unknown, cmd: Command) => {
      const options = resourceOptions(cmd, io);
      const { r, partitions } = await withClient({ options, write: false }, async (c) => {
        const r = (await c.read({ type: TOPIC, name })).resource;
        const owned = await c.list<PartitionData>(PARTITION, { ownerUid: r.id.uid });
        return { r, partitions: owned.resources };
      });
      if (options.json) printJson(io, { resource: r, partitions });
      else io.stdout(`${describe(r, KEY.topic)}partitions:\n${formatPartitions(partitions).replace(/^/gm, '  ')}`);
    },
  );
}

function registerPartition(program: Command, io: CliIo): void {
  const partition = program.command('partition').description("topics' partitions: replicas, leader, live replicas");
  withList<PartitionData>(partition, io, PARTITION, 'partitions with their leader and resolution (Online, Offline, LeaderOffline)', formatPartitions, (cmd) => {
    const topic = cmd.opts<{ topic?: string }>().topic;
    return (r) => topic === undefined || r.data.topic === topic;
  }).option('--topic <name>', "only this topic's partitions");
}

export function registerStreamingCommands(program: Command, io: CliIo): void {
  registerSpu(program, io);
  registerSpuGroup(program, io);
  registerTopic(program, io);
  registerPartition(program, io);
}
