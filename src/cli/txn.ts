/**
 * `cairn txn -f FILE`: one transaction (docs/api.md "Transactions") from a YAML or JSON file,
 * the same document as the body of `POST /v1/txn`: `compare`, `then`, `else`. Versions may be
 * numbers or strings. Sent through the client library (gRPC), like `cairn resource ...`.
 */
import { readFile } from 'node:fs/promises';
import * as path from 'node:path';
import type { Command } from 'commander';
import { parse as parseYaml } from 'yaml';
import { TXN_CLIENT_MAX_PARTS, type ResourceRef, type TxnCompare, type TxnOp, type TxnResult, type TxnSpec } from '../client/index.js';
import { printJson, type CliIo } from './context.js';
import { usageError } from './errors.js';
import {
  BODY_FIELDS,
  bodyDocumentOf,
  buildWriteBody,
  displayName,
  onlyKeys,
  parseConditionObject,
  parseVersionArg,
  resourceOptions,
  withClient,
  withResourceOptions,
  PROCESS_DEPS,
  type ResourceDeps,
} from './resource.js';

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

const WHERE = ['type', 'partition', 'namespace', 'name'] as const;
const COMPARE_FIELDS = ['target', ...WHERE, 'version', 'uid'] as const;
const OP_FIELDS = {
  write: ['op', ...WHERE, 'uid', ...BODY_FIELDS],
  delete: ['op', ...WHERE, 'uid', 'version'],
  status: ['op', ...WHERE, 'uid', 'key', 'observed_generation', 'conditions', 'version'],
} as const;

function str(o: Record<string, unknown>, k: string, what: string, required: boolean): string | undefined {
  const v = o[k];
  if (v === undefined || v === null) {
    if (required) throw usageError(`${what}.${k} is required`);
    return undefined;
  }
  if (typeof v !== 'string' || v === '') throw usageError(`${what}.${k} must be a non-empty string (quote it in YAML), got ${JSON.stringify(v)}`);
  return v;
}

function refOf(o: Record<string, unknown>, what: string, uid?: string): ResourceRef {
  const partition = str(o, 'partition', what, false);
  const namespace = str(o, 'namespace', what, false);
  return {
    type: str(o, 'type', what, true) as string,
    name: str(o, 'name', what, true) as string,
    tenancy: { ...(partition !== undefined ? { partition } : {}), ...(namespace !== undefined ? { namespace } : {}) },
    ...(uid !== undefined ? { uid } : {}),
  };
}

function list(v: unknown, what: string): unknown[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v)) throw usageError(`${what} must be a list`);
  // Checked before anything is built or spread into a call (RangeError near 100,000 items).
  if (v.length > TXN_CLIENT_MAX_PARTS) throw usageError(`${what} has ${v.length} items; at most ${TXN_CLIENT_MAX_PARTS} are sent (servers allow far fewer: --txn-max-ops, default 128)`);
  return v;
}

function compareOf(v: unknown, what: string): TxnCompare {
  if (!isRecord(v)) throw usageError(`${what} must be an object {target, type, name, ...}`);
  onlyKeys(v, COMPARE_FIELDS, what);
  const target = v['target'];
  const ref = refOf(v, what);
  switch (target) {
    case 'version':
      if (v['version'] === undefined) throw usageError(`${what}: a version comparison needs version (0 means absent)`);
      return { target, ref, version: parseVersionArg(v['version'], `${what}.version`) };
    case 'uid':
      return { target, ref, uid: str(v, 'uid', what, true) as string };
    case 'exists':
    case 'absent':
      return { target, ref };
    default:
      throw usageError(`${what}.target must be version, exists, absent or uid, got ${JSON.stringify(target)}`);
  }
}

function opOf(v: unknown, what: string): TxnOp {
  if (!isRecord(v)) throw usageError(`${what} must be an object {op, type, name, ...}`);
  const op = v['op'];
  switch (op) {
    case 'write': {
      const { op: _op, type: _t, partition: _p, namespace: _n, name: _name, uid: _uid, ...body } = v;
      onlyKeys(v, OP_FIELDS.write, what);
      const doc = bodyDocumentOf(body, BODY_FIELDS, what);
      return { op, ref: refOf(v, what, str(v, 'uid', what, false)), body: buildWriteBody(doc, {}) };
    }
    case 'delete': {
      onlyKeys(v, OP_FIELDS.delete, what);
      const version = v['version'] === undefined ? undefined : parseVersionArg(v['version'], `${what}.version`);
      return { op, ref: refOf(v, what, str(v, 'uid', what, false)), ...(version !== undefined ? { version } : {}) };
    }
    case 'status': {
      onlyKeys(v, OP_FIELDS.status, what);
      const conditions = list(v['conditions'], `${what}.conditions`).map((c, i) => parseConditionObject(c, `${what}.conditions[${i}]`));
      const version = v['version'] === undefined ? undefined : parseVersionArg(v['version'], `${what}.version`);
      return {
        op,
        ref: refOf(v, what, str(v, 'uid', what, true)),
        key: str(v, 'key', what, true) as string,
        body: { observed_generation: str(v, 'observed_generation', what, false) ?? '', conditions, ...(version !== undefined ? { version } : {}) },
      };
    }
    default:
      throw usageError(`${what}.op must be write, delete or status, got ${JSON.stringify(op)}`);
  }
}

/** A transaction document (YAML, or JSON when it starts with `{`): unknown fields at any level are an error. */
export function parseTxnDocument(text: string, source: string): TxnSpec {
  const json = text.trimStart().startsWith('{');
  let doc: unknown;
  try {
    doc = json ? JSON.parse(text) : parseYaml(text);
  } catch (e) {
    const first = ((e as Error).message.split('\n')[0] ?? '').trim();
    throw usageError(`${source} is not valid ${json ? 'JSON' : 'YAML'}: ${first}`);
  }
  if (!isRecord(doc)) throw usageError(`${source} must hold an object {compare, then, else}`);
  onlyKeys(doc, ['compare', 'then', 'else'], source);
  return {
    compare: list(doc['compare'], `${source}: compare`).map((c, i) => compareOf(c, `${source}: compare[${i}]`)),
    then: list(doc['then'], `${source}: then`).map((o, i) => opOf(o, `${source}: then[${i}]`)),
    else: list(doc['else'], `${source}: else`).map((o, i) => opOf(o, `${source}: else[${i}]`)),
  };
}

/** What the transaction did, one line per op. */
export function formatTxnResult(r: TxnResult): string {
  const head = r.succeeded
    ? `succeeded: every comparison held; the then branch applied at revision ${r.revision}`
    : `did not succeed: compare[${String(r.failedComparison)}] did not hold; the else branch applied at revision ${r.revision}`;
  const lines = r.results.map((x, i) => {
    const at = `  ${i}: ${x.op === 'status' ? 'status write' : x.op}`;
    if (x.op === 'delete') return x.resource === null ? `${at}: nothing to delete` : `${at} ${displayName(x.resource.id)} (uid ${x.resource.id.uid}): ${x.deleted ? 'deleted' : `marked for deletion (version ${x.resource.version}, generation ${x.resource.generation})`}`;
    const unchanged = x.op === 'write' && !x.changed ? ', unchanged' : '';
    return `${at} ${displayName(x.resource.id)} (uid ${x.resource.id.uid}): version ${x.resource.version}, generation ${x.resource.generation}${unchanged}`;
  });
  return `${[head, ...(r.results.length === 0 ? ['  (no ops)'] : lines)].join('\n')}\n`;
}

export function registerTxnCommand(program: Command, io: CliIo, deps: Pick<ResourceDeps, 'readStdin'> = PROCESS_DEPS): void {
  withResourceOptions(
    program
      .command('txn')
      .description('apply a transaction: compare resources, then apply one branch of writes, status writes and deletes, all or nothing, at one revision')
      .requiredOption('-f, --file <file>', "the transaction as YAML or JSON ('-' for standard input): {compare, then, else}, as the body of POST /v1/txn")
      .addHelpText(
        'after',
        `
Example file:
  compare:
    - {target: version, type: demo.v1.Artist, name: korn, version: 12}
    - {target: absent, type: demo.v1.Artist, name: tool}
  then:
    - {op: write, type: demo.v1.Artist, name: korn, data: {name: Korn, genre: metal}}
    - {op: write, type: demo.v1.Artist, name: tool, data: {name: Tool}}
  else:
    - {op: delete, type: demo.v1.Artist, name: korn}

A comparison that does not hold is not an error (exit 0, "did not succeed"); an op that fails
(CAS_FAILED, NOT_FOUND, ...) fails the command with that error and nothing of the branch applies.`,
      ),
    io,
  ).action(async (_opts: unknown, cmd: Command) => {
    const options = resourceOptions(cmd, io);
    const file = cmd.opts<{ file: string }>().file;
    const source = file === '-' ? 'standard input' : path.resolve(io.cwd, file);
    let text: string;
    try {
      text = file === '-' ? await deps.readStdin() : await readFile(source, 'utf8');
    } catch (e) {
      throw usageError(`cannot read ${source}: ${(e as Error).message}`);
    }
    const spec = parseTxnDocument(text, source);
    const r = await withClient({ options, write: true }, (c) => c.txn().if(...spec.compare).then(...spec.then).else(...spec.else).commit());
    if (options.json) printJson(io, r);
    else io.stdout(formatTxnResult(r));
  });
}
