/**
 * `cairn resource write|read|delete|list|status|watch`: resources through the public gRPC API
 * (proto/cairn/resource/v1/resource.proto) with `CairnClient`, so these commands get the
 * client's failover across `--endpoint`s, its request ids (a retried write applies at most
 * once) and its typed errors.
 *
 * Unlike the operator and snapshot commands, which speak HTTP, `--endpoint` here is a node's
 * gRPC address (its --grpc-addr, default 127.0.0.1:7500; `CAIRN_GRPC_ADDR`).
 *
 * The client module (and with it gRPC) is imported only when a resource command runs, so the
 * other commands do not pay for loading it.
 *
 * A write (write, delete, status) whose outcome is unknown (a TIMEOUT, a connection lost after
 * sending) is reported as such, exit 5, never as failed; one whose connection was never made
 * says that nothing was sent.
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { InvalidArgumentError, type Command } from 'commander';
import { parse as parseYaml } from 'yaml';
import type { CairnClient, CairnClientError, Condition, ConditionState, Resource, ResourceId, ResourceRef, Status, WriteBody } from '../client/index.js';
import { clientTls, clientToken, printJson, warnPlaintextToken, withTlsOptions, type CliIo, type ClientTls } from './context.js';
import { CliError, ExitCode, authHint, exitCodeFor, usageError } from './errors.js';
import { runWatch, watchSpecOf, type WatchFlags } from './resource-watch.js';
import { formatFields, formatTable } from './table.js';

/** The gRPC address when neither --endpoint nor CAIRN_GRPC_ADDR says otherwise (the agent's default --grpc-addr). */
export const DEFAULT_GRPC_ENDPOINT = '127.0.0.1:7500';
export const GRPC_ENDPOINT_ENV = 'CAIRN_GRPC_ADDR';
const TIMEOUT_MS = 10_000;
const OUTCOME_UNKNOWN = 'the outcome is unknown: the change may or may not have been applied';

/** What the commands need from outside the process's io; tests replace it. */
export interface ResourceDeps {
  /** The whole of standard input, for `-f -`. */
  readonly readStdin: () => Promise<string>;
  /** Calls `stop` on SIGINT or SIGTERM (`watch`); returns a function that unregisters it. */
  readonly onInterrupt: (stop: () => void) => () => void;
}

async function readProcessStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(typeof chunk === 'string' ? Buffer.from(chunk) : (chunk as Buffer));
  return Buffer.concat(chunks).toString('utf8');
}

function onProcessInterrupt(stop: () => void): () => void {
  const handler = (): void => stop();
  process.once('SIGINT', handler);
  process.once('SIGTERM', handler);
  return () => {
    process.off('SIGINT', handler);
    process.off('SIGTERM', handler);
  };
}

export const PROCESS_DEPS: ResourceDeps = { readStdin: readProcessStdin, onInterrupt: onProcessInterrupt };

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

// ---- Shared options ---------------------------------------------------------------------------

export interface ResourceOptions {
  readonly endpoints: readonly string[];
  readonly json: boolean;
  readonly timeoutMs: number;
  /** TLS to the nodes' gRPC port: the cluster CA, and a client certificate if given. */
  readonly tls?: ClientTls;
  /** The ACL token's secret (`--token`, `--token-file`, `CAIRN_TOKEN`, `CAIRN_TOKEN_FILE`). */
  readonly token?: string;
}

const HOST_PORT = /^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):([0-9]{1,5})$/;

/**
 * `host:port` addresses from repeated and comma-separated values. `what` names where they came
 * from, for the usage error.
 */
export function parseGrpcEndpoints(values: readonly string[], what: string): string[] {
  const out: string[] = [];
  for (const value of values) {
    for (const part of value.split(',')) {
      const e = part.trim();
      if (e === '') continue;
      const m = HOST_PORT.exec(e);
      const port = m ? Number(m[2]) : 0;
      if (!m || port < 1 || port > 65535) {
        const hint = /^[a-z][a-z0-9+.-]*:\/\//i.test(e) ? " (a node's gRPC host:port, not a URL)" : '';
        throw usageError(`${what} must be host:port${hint}, got '${e}'`);
      }
      if (!out.includes(e)) out.push(e);
    }
  }
  if (out.length === 0) throw usageError(`${what} names no address`);
  return out;
}

function positiveInteger(value: string): number {
  if (!/^\d+$/.test(value) || !Number.isSafeInteger(Number(value)) || Number(value) < 1) {
    throw new InvalidArgumentError(`must be a positive integer (milliseconds), got '${value}'`);
  }
  return Number(value);
}

const collect = (value: string, previous: string[] | undefined): string[] => [...(previous ?? []), value];

/** Adds --endpoint (repeatable), --json and --timeout. */
export function withResourceOptions(cmd: Command, io: CliIo): Command {
  const fromEnv = io.env[GRPC_ENDPOINT_ENV];
  return withTlsOptions(cmd)
    .option(
      '--endpoint <host:port>',
      `gRPC address of any node (its --grpc-addr); repeat it or separate with commas to fail over; default $${GRPC_ENDPOINT_ENV} or ${DEFAULT_GRPC_ENDPOINT}`,
      collect,
    )
    .option('--json', 'print the result as JSON instead of a table')
    .option('--timeout <ms>', 'give up after this many milliseconds, retries and failover included', positiveInteger, TIMEOUT_MS)
    .addHelpText('after', fromEnv === undefined || fromEnv === '' ? '' : `\n$${GRPC_ENDPOINT_ENV} is set: the default endpoint is ${fromEnv}.`);
}

export function resourceOptions(cmd: Command, io: CliIo): ResourceOptions {
  const opts = cmd.opts<{ endpoint?: string[]; json?: boolean; timeout: number }>();
  const fromEnv = io.env[GRPC_ENDPOINT_ENV];
  const endpoints =
    opts.endpoint !== undefined
      ? parseGrpcEndpoints(opts.endpoint, '--endpoint')
      : fromEnv !== undefined && fromEnv !== ''
        ? parseGrpcEndpoints([fromEnv], `--endpoint (from ${GRPC_ENDPOINT_ENV})`)
        : [DEFAULT_GRPC_ENDPOINT];
  const tls = clientTls(cmd, io);
  const token = clientToken(cmd, io);
  warnPlaintextToken(
    io,
    endpoints.map((e) => e.slice(0, e.lastIndexOf(':'))),
    tls !== undefined,
    token,
  );
  return { endpoints, json: opts.json === true, timeoutMs: opts.timeout, ...(tls !== undefined ? { tls } : {}), ...(token !== undefined ? { token } : {}) };
}

/** Adds --partition and --namespace. */
function withTenancy(cmd: Command, wildcard: boolean): Command {
  const wild = wildcard ? "; '*' for any" : '';
  return cmd
    .option('--partition <partition>', `the partition (default: default; none for cluster-scoped types)${wild}`)
    .option('-n, --namespace <namespace>', `the namespace (default: default; none unless the type is namespace-scoped)${wild}`);
}

function refOf(type: string, name: string, cmd: Command, uid?: string): ResourceRef {
  const o = cmd.opts<{ partition?: string; namespace?: string }>();
  return {
    type,
    name,
    tenancy: { ...(o.partition !== undefined ? { partition: o.partition } : {}), ...(o.namespace !== undefined ? { namespace: o.namespace } : {}) },
    ...(uid !== undefined ? { uid } : {}),
  };
}

// ---- Parsing what the user gives --------------------------------------------------------------

const VERSION = /^(0|[1-9][0-9]{0,15})$/;

/** A version: a decimal string ("0" = create only), or a non-negative integer from a YAML/JSON file. */
export function parseVersionArg(v: unknown, what: string): string {
  const s = typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 ? String(v) : v;
  if (typeof s !== 'string' || !VERSION.test(s)) throw usageError(`${what} must be a version: a decimal number such as 0 or 42, got ${JSON.stringify(v)}`);
  return s;
}

function stringField(o: Record<string, unknown>, key: string, what: string, required: boolean): string {
  const v = o[key];
  if (v === undefined && !required) return '';
  if (typeof v !== 'string' || (required && v === '')) throw usageError(`${what}.${key} must be a${required ? ' non-empty' : ''} string`);
  return v;
}

export function onlyKeys(o: Record<string, unknown>, allowed: readonly string[], what: string): void {
  for (const k of Object.keys(o)) {
    if (!allowed.includes(k)) throw usageError(`unknown field '${k}' in ${what} (allowed: ${allowed.join(', ')})`);
  }
}

/**
 * An owner reference: a JSON object `{type, tenancy?: {partition?, namespace?}, name, uid}`, or
 * `TYPE/NAME/UID`, `TYPE/NAMESPACE/NAME/UID` or `TYPE/PARTITION/NAMESPACE/NAME/UID` (an empty
 * part means the default, or none for a scope without it: `demo.v1.RecordLabel/p1//acme/UID`).
 */
export function parseOwner(v: unknown, what: string): ResourceId {
  let o: unknown = v;
  if (typeof v === 'string') {
    if (v.trimStart().startsWith('{')) {
      try {
        o = JSON.parse(v) as unknown;
      } catch (e) {
        throw usageError(`${what} is not valid JSON: ${(e as Error).message}`);
      }
    } else {
      const parts = v.split('/');
      const [type, a, b, c, d] = parts;
      const form = `${what} must be TYPE/NAME/UID, TYPE/NAMESPACE/NAME/UID, TYPE/PARTITION/NAMESPACE/NAME/UID or a JSON object, got '${v}'`;
      let id: ResourceId;
      if (parts.length === 3) id = { type: type ?? '', tenancy: { partition: '', namespace: '' }, name: a ?? '', uid: b ?? '' };
      else if (parts.length === 4) id = { type: type ?? '', tenancy: { partition: '', namespace: a ?? '' }, name: b ?? '', uid: c ?? '' };
      else if (parts.length === 5) id = { type: type ?? '', tenancy: { partition: a ?? '', namespace: b ?? '' }, name: c ?? '', uid: d ?? '' };
      else throw usageError(form);
      if (id.type === '' || id.name === '' || id.uid === '') throw usageError(form);
      return id;
    }
  }
  if (!isRecord(o)) throw usageError(`${what} must be an object {type, tenancy, name, uid} or TYPE/NAMESPACE/NAME/UID`);
  onlyKeys(o, ['type', 'tenancy', 'name', 'uid'], what);
  const tenancy = o['tenancy'] ?? {};
  if (!isRecord(tenancy)) throw usageError(`${what}.tenancy must be an object {partition, namespace}`);
  onlyKeys(tenancy, ['partition', 'namespace'], `${what}.tenancy`);
  return {
    type: stringField(o, 'type', what, true),
    tenancy: { partition: stringField(tenancy, 'partition', `${what}.tenancy`, false), namespace: stringField(tenancy, 'namespace', `${what}.tenancy`, false) },
    name: stringField(o, 'name', what, true),
    uid: stringField(o, 'uid', what, true),
  };
}

function parseState(v: string, what: string): ConditionState {
  const s = v.toUpperCase();
  if (s !== 'TRUE' && s !== 'FALSE' && s !== 'UNKNOWN') throw usageError(`${what}: the state must be TRUE, FALSE or UNKNOWN, got '${v}'`);
  return s;
}

/** `TYPE=STATE[:reason[:message]]`; the message may itself contain colons. */
export function parseCondition(v: string): Condition {
  const what = `--condition '${v}'`;
  const eq = v.indexOf('=');
  if (eq <= 0) throw usageError(`${what} must be TYPE=STATE[:reason[:message]], e.g. Ready=TRUE:Reconciled:all good`);
  const rest = v.slice(eq + 1);
  const [state = '', reason = '', ...message] = rest.split(':');
  return { type: v.slice(0, eq), state: parseState(state, what), reason, message: message.join(':') };
}

export function parseConditionObject(v: unknown, what: string): Condition {
  if (!isRecord(v)) throw usageError(`${what} must be an object {type, state, reason, message}`);
  onlyKeys(v, ['type', 'state', 'reason', 'message'], what);
  return {
    type: stringField(v, 'type', what, true),
    state: parseState(stringField(v, 'state', what, true), what),
    reason: stringField(v, 'reason', what, false),
    message: stringField(v, 'message', what, false),
  };
}

function parseStatusMap(v: unknown, what: string): Record<string, Status> {
  if (!isRecord(v)) throw usageError(`${what} must be an object keyed by controller (the stored status, passed back unchanged)`);
  const out: Record<string, Status> = {};
  for (const [key, s] of Object.entries(v)) {
    const w = `${what}.${key}`;
    if (!isRecord(s)) throw usageError(`${w} must be an object {observed_generation, conditions, updated_at}`);
    onlyKeys(s, ['observed_generation', 'conditions', 'updated_at'], w);
    const conditions = s['conditions'] ?? [];
    if (!Array.isArray(conditions)) throw usageError(`${w}.conditions must be a list`);
    out[key] = {
      observed_generation: stringField(s, 'observed_generation', w, true),
      conditions: conditions.map((c, i) => parseConditionObject(c, `${w}.conditions[${i}]`)),
      updated_at: stringField(s, 'updated_at', w, true),
    };
  }
  return out;
}

function parseMetadataMap(v: unknown, what: string): Record<string, string> {
  if (!isRecord(v)) throw usageError(`${what} must be a mapping of string keys to string values`);
  const out: Record<string, string> = {};
  for (const [k, val] of Object.entries(v)) {
    if (typeof val !== 'string') throw usageError(`${what}.${k} must be a string (quote it in YAML), got ${JSON.stringify(val)}`);
    out[k] = val;
  }
  return out;
}

function parseStringList(v: unknown, what: string): string[] {
  if (!Array.isArray(v) || v.some((f) => typeof f !== 'string')) throw usageError(`${what} must be a list of strings`);
  return v as string[];
}

/** The parts of a write body a file may give. */
export interface BodyDocument {
  data?: unknown;
  metadata?: Record<string, string>;
  owner?: ResourceId;
  finalizers?: string[];
  version?: string;
  status?: Record<string, Status>;
  /** A lease id to attach to, or '' to detach (docs/api.md "Leases"). */
  lease?: string;
}

export const BODY_FIELDS = ['data', 'metadata', 'owner', 'finalizers', 'version', 'status', 'lease'] as const;

/**
 * A write body from a file: JSON when the text starts with `{`, YAML otherwise. Unknown fields
 * are an error (as in the API: nothing the user wrote is silently dropped). `owner: null` and
 * `status: {}` mean the same as leaving them out.
 */
export function parseBodyDocument(text: string, source: string): BodyDocument {
  const json = text.trimStart().startsWith('{');
  let doc: unknown;
  try {
    doc = json ? JSON.parse(text) : parseYaml(text);
  } catch (e) {
    const first = ((e as Error).message.split('\n')[0] ?? '').trim();
    throw usageError(`${source} is not valid ${json ? 'JSON' : 'YAML'}: ${first}`);
  }
  if (!isRecord(doc)) throw usageError(`${source} must hold an object {data, metadata?, owner?, finalizers?, version?, status?, lease?}`);
  return bodyDocumentOf(doc, BODY_FIELDS, source);
}

/**
 * The write body fields of an object (a body file, a transaction's write op): `allowed` are
 * the fields it may have (the body's and, for an op, the op's own); the rest is an error.
 */
export function bodyDocumentOf(doc: Record<string, unknown>, allowed: readonly string[], source: string): BodyDocument {
  onlyKeys(doc, allowed, source);
  const out: BodyDocument = {};
  if ('data' in doc) out.data = doc['data'];
  if (doc['metadata'] !== undefined) out.metadata = parseMetadataMap(doc['metadata'], `${source}: metadata`);
  if (doc['owner'] !== undefined && doc['owner'] !== null) out.owner = parseOwner(doc['owner'], `${source}: owner`);
  if (doc['finalizers'] !== undefined) out.finalizers = parseStringList(doc['finalizers'], `${source}: finalizers`);
  if (doc['version'] !== undefined && doc['version'] !== null) out.version = parseVersionArg(doc['version'], `${source}: version`);
  if (doc['status'] !== undefined && doc['status'] !== null) {
    const status = parseStatusMap(doc['status'], `${source}: status`);
    if (Object.keys(status).length > 0) out.status = status;
  }
  if (doc['lease'] !== undefined && doc['lease'] !== null) {
    if (typeof doc['lease'] !== 'string') throw usageError(`${source}: lease must be a lease id (a string), or "" to detach`);
    out.lease = doc['lease'];
  }
  return out;
}

/** The write flags, as commander gives them. */
export interface WriteFlags {
  readonly data?: string;
  readonly metadata?: readonly string[];
  readonly owner?: string;
  readonly finalizer?: readonly string[];
  readonly version?: string;
  readonly lease?: string;
}

/**
 * The write body: the file's (if any), then the flags. `--data` and `--version` replace the
 * file's; `--metadata k=v` sets keys on top of the file's metadata; `--finalizer` adds to the
 * file's finalizers; `--owner` replaces the file's owner.
 */
export function buildWriteBody(file: BodyDocument | undefined, flags: WriteFlags): WriteBody {
  const body: BodyDocument = { ...file };
  if (flags.data !== undefined) {
    try {
      body.data = JSON.parse(flags.data) as unknown;
    } catch (e) {
      throw usageError(`--data is not valid JSON: ${(e as Error).message}`);
    }
  }
  if (!('data' in body)) throw usageError("a write needs the resource's data: --data '{...}' or -f FILE (JSON or YAML with a data field)");
  if (flags.metadata !== undefined && flags.metadata.length > 0) {
    const metadata = { ...body.metadata };
    for (const kv of flags.metadata) {
      const eq = kv.indexOf('=');
      if (eq <= 0) throw usageError(`--metadata must be KEY=VALUE, got '${kv}'`);
      metadata[kv.slice(0, eq)] = kv.slice(eq + 1);
    }
    body.metadata = metadata;
  }
  if (flags.finalizer !== undefined && flags.finalizer.length > 0) {
    const finalizers = [...(body.finalizers ?? [])];
    for (const f of flags.finalizer) if (!finalizers.includes(f)) finalizers.push(f);
    body.finalizers = finalizers;
  }
  if (flags.owner !== undefined) body.owner = parseOwner(flags.owner, '--owner');
  if (flags.version !== undefined) body.version = parseVersionArg(flags.version, '--version');
  if (flags.lease !== undefined) body.lease = flags.lease;
  return {
    data: body.data,
    ...(body.metadata !== undefined ? { metadata: body.metadata } : {}),
    ...(body.owner !== undefined ? { owner: body.owner } : {}),
    ...(body.finalizers !== undefined ? { finalizers: body.finalizers } : {}),
    ...(body.version !== undefined ? { version: body.version } : {}),
    ...(body.status !== undefined ? { status: body.status } : {}),
    ...(body.lease !== undefined ? { lease: body.lease } : {}),
  };
}

// ---- Output -----------------------------------------------------------------------------------

/** `demo.v1.Artist default/default/korn`, leaving out the tenancy fields the scope lacks (as the server names resources). */
export function displayName(id: ResourceId): string {
  const where = [id.tenancy.partition, id.tenancy.namespace, id.name].filter((p, i) => i === 2 || p !== '').join('/');
  return `${id.type} ${where}`;
}

/** Generations are ULIDs whose first 10 characters are a timestamp: the random tail tells them apart. */
export const shortGeneration = (g: string): string => (g.length > 10 ? g.slice(-8) : g);

export const dash = (s: string): string => (s === '' ? '-' : s);

function contactText(ms: number | undefined): string {
  return ms === undefined ? 'no leader known' : `${ms} ms ago${ms === 0 ? ' (this node leads)' : ''}`;
}

function conditionText(c: Condition): string {
  const why = [c.reason, c.message].filter((s) => s !== '').join(': ');
  return `${c.type}=${c.state}${why === '' ? '' : ` (${why})`}`;
}

/** One resource as `field: value` lines, then its data as indented JSON. */
export function formatResource(r: Resource, freshness?: { revision: string; lastLeaderContactMs: number | undefined }): string {
  const fields: [string, string][] = [['type', r.id.type]];
  if (r.id.tenancy.partition !== '') fields.push(['partition', r.id.tenancy.partition]);
  if (r.id.tenancy.namespace !== '') fields.push(['namespace', r.id.tenancy.namespace]);
  fields.push(['name', r.id.name], ['uid', r.id.uid], ['version', r.version], ['generation', r.generation]);
  fields.push(['owner', r.owner === null ? '-' : `${displayName(r.owner)} (uid ${r.owner.uid})`]);
  const meta = Object.entries(r.metadata);
  fields.push(['metadata', meta.length === 0 ? '-' : meta.map(([k, v]) => `${k}=${v}`).join(', ')]);
  fields.push(['finalizers', r.finalizers.length === 0 ? '-' : r.finalizers.join(', ')]);
  // Only when attached: the output of resources without a lease is as it was.
  if (r.lease !== undefined) fields.push(['lease', r.lease]);
  if (r.deletion_timestamp !== null) fields.push(['deleting', `since ${r.deletion_timestamp}, waiting for its finalizers`]);
  for (const [key, s] of Object.entries(r.status)) {
    const seen = s.observed_generation === r.generation ? 'current' : `behind: observed ${s.observed_generation}`;
    const conditions = s.conditions.length === 0 ? 'no conditions' : s.conditions.map(conditionText).join(', ');
    fields.push([`status ${key}`, `${conditions}; generation ${seen}; updated ${s.updated_at}`]);
  }
  if (freshness !== undefined) {
    fields.push(['revision', freshness.revision], ['leader contact', contactText(freshness.lastLeaderContactMs)]);
  }
  const data = (JSON.stringify(r.data, null, 2) ?? 'null').replace(/^/gm, '  ');
  return `${formatFields(fields)}data:\n${data}\n`;
}

/** The list table: one row per resource, then a line with the count and the list's revision. */
export function formatList(resources: readonly Resource[], revision: string, lastLeaderContactMs?: number | undefined, stale = false): string {
  const n = resources.length;
  const contact = stale ? `; this node's last leader contact: ${contactText(lastLeaderContactMs)}` : '';
  const summary = `${n === 0 ? 'no resources' : `${n} resource${n === 1 ? '' : 's'}`} at revision ${revision}${contact}\n`;
  if (n === 0) return summary;
  const table = formatTable(
    [
      { header: 'type', cell: (r: Resource) => r.id.type },
      { header: 'partition', cell: (r) => dash(r.id.tenancy.partition) },
      { header: 'namespace', cell: (r) => dash(r.id.tenancy.namespace) },
      { header: 'name', cell: (r) => r.id.name + (r.deletion_timestamp === null ? '' : ' (deleting)') },
      { header: 'version', cell: (r) => r.version, align: 'right' },
      { header: 'generation', cell: (r) => shortGeneration(r.generation) },
    ],
    resources,
  );
  return `${table}${summary}`;
}

// ---- Calls and their failures -----------------------------------------------------------------

export interface Call {
  readonly options: ResourceOptions;
  /** Whether the call changes state: an unknown outcome is then reported as such. */
  readonly write: boolean;
}

/** The exit code and one-line message for a failed client call. */
export function clientFailure(e: CairnClientError, call: Call): CliError {
  const { endpoints, timeoutMs } = call.options;
  if (call.write && (e.outcomeUnknown || e.code === 'TIMEOUT')) {
    const message = e.message.replace(/; the write may or may not have been applied$/, '');
    return new CliError(ExitCode.UNAVAILABLE, `${e.code}: ${message}; ${OUTCOME_UNKNOWN}: read the resource before retrying`);
  }
  if (e.code === 'UNAVAILABLE' && e.message.includes('No connection established')) {
    const why = /connect (E[A-Z]+)/.exec(e.message)?.[1] ?? 'no connection';
    return new CliError(
      ExitCode.UNAVAILABLE,
      `UNAVAILABLE: cannot connect to ${endpoints.join(', ')} within ${timeoutMs} ms (${why}); is a cairn agent's gRPC API listening there? Set --endpoint or ${GRPC_ENDPOINT_ENV}${call.write ? '; nothing was sent' : ''}`,
    );
  }
  let hint = '';
  if (e.code === 'CAS_FAILED') {
    // Versions arrive as decimal strings (the client reads older servers' numbers into strings).
    const expected = typeof e.details['expected'] === 'string' ? e.details['expected'] : undefined;
    const actual = typeof e.details['actual'] === 'string' ? e.details['actual'] : undefined;
    if (expected === '0' && actual !== undefined && actual !== '0') hint = `; it already exists (version ${actual}): leave out --version to replace it, or pass --version ${actual}`;
    else if (actual === '0') hint = '; it does not exist: --version 0 creates it';
    else hint = '; it changed since that version: read it again and retry with its current version';
  } else if (e.code === 'GROUP_VERSION_MISMATCH' && typeof e.details['stored_type'] === 'string') {
    hint = `; use ${e.details['stored_type']}`;
  } else if (e.code === 'TIMEOUT') {
    hint = ` (--timeout ${timeoutMs} ms)`;
  } else if (e.code === 'UNAUTHENTICATED' || e.code === 'PERMISSION_DENIED') {
    hint = authHint(e.code, call.options.token, e.message);
  }
  return new CliError(exitCodeFor(e.code, 0), `${e.code}: ${e.message}${hint}`);
}

type ClientModule = typeof import('../client/index.js');

/** Runs `fn` with a client of the command's endpoints, closing it after; client errors become CliErrors. */
export async function withClient<T>(call: Call, fn: (client: CairnClient) => Promise<T>): Promise<T> {
  const mod: ClientModule = await import('../client/index.js');
  const { endpoints, timeoutMs, tls, token } = call.options;
  let client: CairnClient;
  try {
    client = new mod.CairnClient({ endpoints, timeoutMs, ...(tls !== undefined ? { tls } : {}), ...(token !== undefined ? { token } : {}) });
  } catch (e) {
    // Options the client refuses (bad TLS material): nothing was sent.
    if (mod.isCairnClientError(e)) throw usageError(`${e.message}; nothing was sent`);
    throw e;
  }
  try {
    return await fn(client);
  } catch (e) {
    throw mod.isCairnClientError(e) ? clientFailure(e, call) : e;
  } finally {
    client.close();
  }
}

// ---- The commands -----------------------------------------------------------------------------

export function registerResourceCommands(program: Command, io: CliIo, deps: ResourceDeps = PROCESS_DEPS): void {
  const resource = program
    .command('resource')
    .description('write, read, delete, list and watch resources and set their status, through any node (gRPC)')
    .addHelpText(
      'after',
      `\n--endpoint here is a node's gRPC address (its --grpc-addr: $${GRPC_ENDPOINT_ENV}, else ${DEFAULT_GRPC_ENDPOINT}),\nnot the HTTP address the operator and snapshot commands use.`,
    );

  withResourceOptions(
    withTenancy(
      resource
        .command('write')
        .description('create or replace a resource (compare-and-swap with --version; --version 0 creates only)')
        .argument('<type>', 'group.version.Kind, e.g. demo.v1.Artist')
        .argument('<name>', 'the resource name (a lowercase DNS label)')
        .option('-f, --file <file>', "the body from a JSON or YAML file ('-' for standard input): {data, metadata, owner, finalizers, version, status, lease}")
        .option('--data <json>', "the resource's data as JSON (replaces the file's)")
        .option('--metadata <key=value>', 'a metadata entry (repeatable); metadata given replaces the stored metadata', collect)
        .option('--owner <owner>', 'the owner (on create only): TYPE/NAMESPACE/NAME/UID, TYPE/PARTITION/NAMESPACE/NAME/UID, TYPE/NAME/UID or JSON')
        .option('--finalizer <name>', 'a finalizer (repeatable); finalizers given replace the stored ones', collect)
        .option('--version <n>', 'write only if the stored version is n (0: only if absent)')
        .option('--uid <uid>', 'write only if the stored resource has this uid (UID_MISMATCH otherwise)')
        .option('--lease <id>', "attach the resource to this lease (cairn lease grant): it is deleted when the lease expires or is revoked; '' detaches; left out, the attachment stays as it is"),
      false,
    ),
    io,
  ).action(async (type: string, name: string, _opts: unknown, cmd: Command) => {
    const options = resourceOptions(cmd, io);
    const flags = cmd.opts<WriteFlags & { file?: string; uid?: string }>();
    let file: BodyDocument | undefined;
    if (flags.file !== undefined) {
      const source = flags.file === '-' ? 'standard input' : path.resolve(io.cwd, flags.file);
      let text: string;
      try {
        text = flags.file === '-' ? await deps.readStdin() : await readFile(source, 'utf8');
      } catch (e) {
        throw usageError(`cannot read ${source}: ${(e as Error).message}`);
      }
      file = parseBodyDocument(text, source);
    }
    const body = buildWriteBody(file, flags);
    const ref = refOf(type, name, cmd, flags.uid);
    const written = await withClient({ options, write: true }, (c) => c.write(ref, body));
    if (options.json) printJson(io, written);
    else if (body.version !== undefined && body.version === written.version) io.stdout(`${displayName(written.id)} unchanged: the write changed nothing (version ${written.version})\n`);
    else if (written.deletion_timestamp !== null && written.finalizers.length === 0) {
      // Removing the last finalizer of a resource marked for deletion completes the delete.
      io.stdout(`${displayName(written.id)} deleted: its last finalizer was removed (version ${written.version})\n`);
    } else io.stdout(`${displayName(written.id)} written: version ${written.version}, generation ${written.generation}, uid ${written.id.uid}\n`);
  });

  withResourceOptions(
    withTenancy(
      resource
        .command('read')
        .description('read one resource')
        .argument('<type>', 'group.version.Kind, e.g. demo.v1.Artist')
        .argument('<name>', 'the resource name')
        .option('--uid <uid>', 'only this incarnation (NOT_FOUND if the name now has another uid)')
        .option('--stale', "answer from the node's local state without asking the leader; shows how fresh it is"),
      false,
    ),
    io,
  ).action(async (type: string, name: string, _opts: unknown, cmd: Command) => {
    const options = resourceOptions(cmd, io);
    const o = cmd.opts<{ uid?: string; stale?: boolean }>();
    const stale = o.stale === true;
    const r = await withClient({ options, write: false }, (c) => c.read(refOf(type, name, cmd, o.uid), { consistency: stale ? 'stale' : 'linearizable' }));
    if (options.json) printJson(io, { resource: r.resource, revision: r.revision, last_leader_contact_ms: r.lastLeaderContactMs ?? null });
    else io.stdout(formatResource(r.resource, stale ? { revision: r.revision, lastLeaderContactMs: r.lastLeaderContactMs } : undefined));
  });

  withResourceOptions(
    withTenancy(
      resource
        .command('delete')
        .description('delete a resource and what it owns (with finalizers: mark it for deletion)')
        .argument('<type>', 'group.version.Kind, e.g. demo.v1.Artist')
        .argument('<name>', 'the resource name')
        .option('--version <n>', 'delete only if the stored version is n')
        .option('--uid <uid>', 'delete only this incarnation (nothing is deleted if the name has another uid)'),
      false,
    ),
    io,
  ).action(async (type: string, name: string, _opts: unknown, cmd: Command) => {
    const options = resourceOptions(cmd, io);
    const o = cmd.opts<{ version?: string; uid?: string }>();
    const version = o.version === undefined ? undefined : parseVersionArg(o.version, '--version');
    const ref = refOf(type, name, cmd, o.uid);
    const r = await withClient({ options, write: true }, (c) => c.delete(ref, version === undefined ? {} : { version }));
    if (options.json) {
      printJson(io, r.resource === null ? { deleted: r.deleted } : { deleted: r.deleted, resource: r.resource });
      return;
    }
    // The store answers deleted: false both when there was nothing to delete (no resource) and
    // when finalizers hold the delete back (the resource, marked).
    const res = r.resource;
    if (res === null) {
      const which = o.uid === undefined ? '' : ` with uid ${o.uid}`;
      io.stdout(`${type} ${name}${which} does not exist: nothing to delete\n`);
    } else if (!r.deleted && res.deletion_timestamp !== null) {
      io.stdout(`${displayName(res.id)} is marked for deletion (since ${res.deletion_timestamp}, version ${res.version}); it goes once these finalizers are removed: ${res.finalizers.join(', ')}\n`);
    } else {
      io.stdout(`${displayName(res.id)} deleted (uid ${res.id.uid}), with everything it owned\n`);
    }
  });

  withResourceOptions(
    withTenancy(
      resource
        .command('list')
        .description('list resources of a type (demo.Artist, without the version, lists every version)')
        .argument('<type>', 'group.version.Kind or group.Kind')
        .option('--prefix <prefix>', 'only names starting with this')
        .option('--owner-uid <uid>', 'only resources owned by this uid')
        .option('--stale', "answer from the node's local state without asking the leader; shows how fresh it is")
        .option('--limit <n>', "resources per request (default: the server's page maximum); the list is still read whole, every page at the first page's revision", positiveInteger),
      true,
    ),
    io,
  ).action(async (type: string, _opts: unknown, cmd: Command) => {
    const options = resourceOptions(cmd, io);
    const o = cmd.opts<{ partition?: string; namespace?: string; prefix?: string; ownerUid?: string; stale?: boolean; limit?: number }>();
    const stale = o.stale === true;
    const r = await withClient({ options, write: false }, (c) =>
      c.list(type, {
        consistency: stale ? 'stale' : 'linearizable',
        ...(o.partition !== undefined ? { partition: o.partition } : {}),
        ...(o.namespace !== undefined ? { namespace: o.namespace } : {}),
        ...(o.prefix !== undefined ? { namePrefix: o.prefix } : {}),
        ...(o.ownerUid !== undefined ? { ownerUid: o.ownerUid } : {}),
        ...(o.limit !== undefined ? { limit: o.limit } : {}),
      }),
    );
    if (options.json) printJson(io, { resources: r.resources, revision: r.revision, last_leader_contact_ms: r.lastLeaderContactMs ?? null });
    else io.stdout(formatList(r.resources, r.revision, r.lastLeaderContactMs, stale));
  });

  withResourceOptions(
    withTenancy(
      resource
        .command('watch')
        .description('print changes as they are committed, one line per event, until interrupted (Ctrl-C exits 0)')
        .argument('<type>', 'group.version.Kind or group.Kind')
        .option('--name-prefix <prefix>', 'only names starting with this')
        .option('--prefix <prefix>', 'the same as --name-prefix (as for list)')
        .option('--gt-revision <n>', 'resume: every change after revision n, then live changes (no initial state)')
        .option('--at-tail', 'live changes only: no initial state; with --gt-revision: the changes after it without the tail line')
        .addHelpText(
          'after',
          '\nWithout --gt-revision or --at-tail the current state comes first (one change per resource), then a tail\nline, then live changes. A lost stream or node is resumed on any --endpoint with nothing missed or repeated;\n"reset" means the watch had to start over (its resume point was compacted): the current state follows.\n--timeout: give up (exit 5) when no node has served the watch for this long. --json prints NDJSON.',
        ),
      true,
    ),
    io,
  ).action(async (type: string, _opts: unknown, cmd: Command) => {
    const options = resourceOptions(cmd, io);
    const spec = watchSpecOf(type, cmd.opts<WatchFlags>());
    await withClient({ options, write: false }, (c) => runWatch(c, spec, { json: options.json, timeoutMs: options.timeoutMs, onInterrupt: deps.onInterrupt }, io));
  });

  withResourceOptions(
    withTenancy(
      resource
        .command('status')
        .description("set one status key of a resource (a controller's report); other keys are kept")
        .argument('<type>', 'group.version.Kind, e.g. demo.v1.Artist')
        .argument('<name>', 'the resource name')
        .argument('<key>', "the status key, usually the controller's name (e.g. demo.v1.artist-controller)")
        .requiredOption('--uid <uid>', 'the uid of the resource (required: a status belongs to one incarnation)')
        .requiredOption('--observed-generation <generation>', 'the generation the controller acted on')
        .option('--condition <TYPE=STATE[:reason[:message]]>', 'a condition; STATE is TRUE, FALSE or UNKNOWN (repeatable; none clears them)', collect)
        .option('--version <n>', 'write only if the stored version is n'),
      false,
    ),
    io,
  ).action(async (type: string, name: string, key: string, _opts: unknown, cmd: Command) => {
    const options = resourceOptions(cmd, io);
    const o = cmd.opts<{ uid: string; observedGeneration: string; condition?: string[]; version?: string }>();
    const conditions = (o.condition ?? []).map(parseCondition);
    const version = o.version === undefined ? undefined : parseVersionArg(o.version, '--version');
    const ref = refOf(type, name, cmd, o.uid);
    const written = await withClient({ options, write: true }, (c) =>
      c.writeStatus(ref, key, { observed_generation: o.observedGeneration, conditions, ...(version !== undefined ? { version } : {}) }),
    );
    if (options.json) printJson(io, written);
    else io.stdout(`${displayName(written.id)} status ${key} set: version ${written.version} (generation unchanged: ${written.generation})\n`);
  });
}
