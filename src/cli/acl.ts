/**
 * `cairn acl ...`: tokens and roles through any node's HTTP API (docs/security.md "Tokens and
 * roles"; docs/api.md "ACL"). Like `consul acl`:
 *
 * - `acl bootstrap` makes the first management token, once per cluster (no token needed).
 * - `acl token create|list|read|delete|self` manage tokens; a token's secret is shown only by
 *   `bootstrap` and `token create`, and is never written to stderr (runCli redacts it).
 * - `acl role create|update|list|read|delete` manage roles: rules that grant verbs on type
 *   patterns, tenancy and name prefixes, from `--rule 'verbs=...;types=...'` or `--rules-file`.
 *
 * Everything the command line says is checked before anything is sent: a refused command
 * changes nothing.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { InvalidArgumentError, type Command } from 'commander';
import { clientOptions, connection, printJson, withClientOptions, type CliIo, type ClientOptions } from './context.js';
import { CliError, ExitCode, SECRET_FORMAT, usageError } from './errors.js';
import { requestJson, unexpected, type RequestOptions } from './http.js';
import { formatFields, formatTable } from './table.js';

const TIMEOUT_MS = 10_000;

/** The verbs a role rule may grant (docs/security.md "Roles"). */
export const ACL_VERBS = ['read', 'list', 'watch', 'write', 'delete', 'write-status', 'admin'] as const;
export type AclVerb = (typeof ACL_VERBS)[number];

export interface RoleRule {
  readonly verbs: readonly string[];
  readonly types: readonly string[];
  readonly partitions?: readonly string[];
  readonly namespaces?: readonly string[];
  readonly name_prefix?: string;
}

export interface Role {
  readonly name: string;
  readonly description: string;
  readonly rules: readonly RoleRule[];
  /** The stored version, for a compare-and-swap update (absent from older servers). */
  readonly version?: string;
}

export interface TokenInfo {
  readonly accessor_id: string;
  readonly roles: readonly string[];
  readonly description: string;
  readonly expires_at: string | null;
  readonly created_at: string;
  /** A token deleted but kept by a finalizer (the bootstrap token): refused like a deleted one. */
  readonly revoked: boolean;
  /** Only in the answers of bootstrap and create. */
  readonly secret_id?: string;
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const isStrings = (v: unknown): v is string[] => Array.isArray(v) && v.every((x) => typeof x === 'string');

// ---- Parsing the command line -------------------------------------------------------------------

/** An accessor id: a lowercase DNS label. */
const ACCESSOR = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;

/**
 * Checks a token's accessor id argument. A secret passed by mistake is refused without being
 * sent (and without being printed: it is added to `io.secrets`).
 */
export function accessorArg(value: string, io: CliIo): string {
  if (SECRET_FORMAT.test(value) || value.startsWith('cairn_')) {
    io.secrets?.add(value);
    throw usageError('that is a token secret, not an accessor id: pass the accessor id (`cairn acl token list` shows them); the secret was not sent');
  }
  if (!ACCESSOR.test(value)) throw usageError(`an accessor id is a lowercase DNS label (a-z, 0-9, '-'), got '${value}'`);
  return value;
}

/** `24h`, `30m`, `7d`, `90s`, `1h30m` -> milliseconds. */
export function parseDuration(value: string): number {
  const v = value.trim();
  const re = /(\d+)(ms|s|m|h|d)/g;
  const unit: Readonly<Record<string, number>> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };
  let total = 0;
  let consumed = 0;
  for (const m of v.matchAll(re)) {
    if (m.index !== consumed) break;
    total += Number(m[1]) * (unit[m[2] as string] ?? 0);
    consumed += m[0].length;
  }
  if (v === '' || consumed !== v.length || !Number.isSafeInteger(total) || total <= 0) {
    throw new InvalidArgumentError(`must be a positive duration such as 90s, 30m, 24h, 7d or 1h30m, got '${value}'`);
  }
  return total;
}

/** `--expires-at`: an ISO-8601 time with a zone (`2026-12-01T00:00:00Z`), sent as UTC. */
export function parseExpiresAt(value: string): string {
  // A time without a zone would be read in the CLI's local zone: ambiguous, so refused.
  if (!/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})$/.test(value) || Number.isNaN(Date.parse(value))) {
    throw new InvalidArgumentError(`must be an ISO-8601 time with a zone, e.g. 2026-12-01T00:00:00Z, got '${value}'`);
  }
  return new Date(value).toISOString();
}

const RULE_KEYS: Readonly<Record<string, keyof RoleRule>> = {
  verbs: 'verbs',
  verb: 'verbs',
  types: 'types',
  type: 'types',
  partitions: 'partitions',
  partition: 'partitions',
  namespaces: 'namespaces',
  namespace: 'namespaces',
  name_prefix: 'name_prefix',
  'name-prefix': 'name_prefix',
};

/**
 * One `--rule`: `verbs=read,list;types=demo.*;namespaces=team-a;partitions=default;name_prefix=x`
 * (the singular key names work too). `verbs` and `types` are required.
 */
export function parseRule(text: string): RoleRule {
  const rule: { verbs?: string[]; types?: string[]; partitions?: string[]; namespaces?: string[]; name_prefix?: string } = {};
  for (const part of text.split(';')) {
    const p = part.trim();
    if (p === '') continue;
    const eq = p.indexOf('=');
    if (eq < 0) throw usageError(`--rule '${text}': '${p}' is not key=value (keys: verbs, types, partitions, namespaces, name_prefix)`);
    const rawKey = p.slice(0, eq).trim();
    const key = RULE_KEYS[rawKey];
    if (key === undefined) throw usageError(`--rule '${text}': unknown key '${rawKey}' (keys: verbs, types, partitions, namespaces, name_prefix)`);
    if (rule[key] !== undefined) throw usageError(`--rule '${text}': '${key}' is given twice`);
    const value = p.slice(eq + 1).trim();
    if (key === 'name_prefix') {
      rule.name_prefix = value;
      continue;
    }
    const list = value.split(',').map((s) => s.trim()).filter((s) => s !== '');
    if (list.length === 0) throw usageError(`--rule '${text}': '${key}' names nothing`);
    rule[key] = list;
  }
  return checkRule(rule, `--rule '${text}'`);
}

/** Checks a rule's shape (from --rule or a rules file); `where` names it in the error. */
export function checkRule(v: unknown, where: string): RoleRule {
  if (!isRecord(v)) throw usageError(`${where}: a rule is an object {verbs, types, partitions?, namespaces?, name_prefix?}`);
  for (const k of Object.keys(v)) {
    if (!['verbs', 'types', 'partitions', 'namespaces', 'name_prefix'].includes(k)) throw usageError(`${where}: unknown field '${k}' (fields: verbs, types, partitions, namespaces, name_prefix)`);
  }
  const { verbs, types, partitions, namespaces, name_prefix: namePrefix } = v;
  if (!isStrings(verbs) || verbs.length === 0) throw usageError(`${where}: 'verbs' is required: one or more of ${ACL_VERBS.join(', ')}`);
  const unknown = verbs.filter((x) => !(ACL_VERBS as readonly string[]).includes(x));
  if (unknown.length > 0) throw usageError(`${where}: unknown verb${unknown.length === 1 ? '' : 's'} ${unknown.map((x) => `'${x}'`).join(', ')} (verbs: ${ACL_VERBS.join(', ')})`);
  if (!isStrings(types) || types.length === 0 || types.some((x) => x.trim() === '')) {
    throw usageError(`${where}: 'types' is required: type patterns such as demo.*, demo.v1.Artist or *`);
  }
  for (const [name, list] of [['partitions', partitions], ['namespaces', namespaces]] as const) {
    if (list !== undefined && (!isStrings(list) || list.length === 0)) throw usageError(`${where}: '${name}' must be a non-empty list of names or '*'`);
  }
  if (namePrefix !== undefined && typeof namePrefix !== 'string') throw usageError(`${where}: 'name_prefix' must be a string`);
  return {
    verbs,
    types,
    ...(partitions !== undefined ? { partitions: partitions as string[] } : {}),
    ...(namespaces !== undefined ? { namespaces: namespaces as string[] } : {}),
    ...(namePrefix !== undefined ? { name_prefix: namePrefix } : {}),
  };
}

/** A rules file: a JSON list of rules, or `{"rules": [...], "description"?: "..."}`. */
export function readRulesFile(file: string, io: CliIo): { rules: RoleRule[]; description?: string } {
  const resolved = path.resolve(io.cwd, file);
  let text: string;
  try {
    text = readFileSync(resolved, 'utf8');
  } catch (e) {
    throw usageError(`cannot read the rules file ${resolved}: ${(e as Error).message}`);
  }
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (e) {
    throw usageError(`the rules file ${resolved} is not JSON: ${(e as Error).message}`);
  }
  const list = Array.isArray(doc) ? doc : isRecord(doc) ? doc['rules'] : undefined;
  if (!Array.isArray(list)) throw usageError(`the rules file ${resolved} must hold a list of rules or {"rules": [...]}`);
  if (isRecord(doc)) {
    const extra = Object.keys(doc).filter((k) => k !== 'rules' && k !== 'description' && k !== 'name');
    if (extra.length > 0) throw usageError(`the rules file ${resolved}: unknown field${extra.length === 1 ? '' : 's'} ${extra.join(', ')} (fields: rules, description)`);
    if (doc['description'] !== undefined && typeof doc['description'] !== 'string') throw usageError(`the rules file ${resolved}: 'description' must be a string`);
  }
  const rules = list.map((r, i) => checkRule(r, `the rules file ${resolved}, rule ${i + 1}`));
  const description = isRecord(doc) && typeof doc['description'] === 'string' ? doc['description'] : undefined;
  return { rules, ...(description !== undefined ? { description } : {}) };
}

// ---- Reading answers ----------------------------------------------------------------------------

function asToken(v: unknown): TokenInfo | undefined {
  if (!isRecord(v)) return undefined;
  const { accessor_id: accessor, roles, description, expires_at: expiresAt, created_at: createdAt, secret_id: secret } = v;
  if (typeof accessor !== 'string' || !isStrings(roles)) return undefined;
  return {
    accessor_id: accessor,
    roles,
    description: typeof description === 'string' ? description : '',
    expires_at: typeof expiresAt === 'string' && expiresAt !== '' ? expiresAt : null,
    created_at: typeof createdAt === 'string' ? createdAt : '',
    revoked: v['revoked'] === true,
    ...(typeof secret === 'string' ? { secret_id: secret } : {}),
  };
}

function asRole(v: unknown): Role | undefined {
  if (!isRecord(v) || typeof v['name'] !== 'string' || !Array.isArray(v['rules'])) return undefined;
  const rules: RoleRule[] = [];
  for (const r of v['rules']) {
    if (!isRecord(r) || !isStrings(r['verbs']) || !isStrings(r['types'])) return undefined;
    rules.push({
      verbs: r['verbs'],
      types: r['types'],
      ...(isStrings(r['partitions']) ? { partitions: r['partitions'] } : {}),
      ...(isStrings(r['namespaces']) ? { namespaces: r['namespaces'] } : {}),
      ...(typeof r['name_prefix'] === 'string' && r['name_prefix'] !== '' ? { name_prefix: r['name_prefix'] } : {}),
    });
  }
  return {
    name: v['name'],
    description: typeof v['description'] === 'string' ? v['description'] : '',
    rules,
    ...(typeof v['version'] === 'string' ? { version: v['version'] } : {}),
  };
}

function listOf<T>(body: unknown, key: string, item: (v: unknown) => T | undefined, req: RequestOptions): T[] {
  const list = isRecord(body) ? body[key] : undefined;
  if (!Array.isArray(list)) throw unexpected(req, `expected {"${key}": [...]}`);
  return list.map((v, i) => {
    const parsed = item(v);
    if (parsed === undefined) throw unexpected(req, `${key}[${i}] is malformed: ${JSON.stringify(v)}`);
    return parsed;
  });
}

function one<T>(body: unknown, item: (v: unknown) => T | undefined, req: RequestOptions, what: string): T {
  const parsed = item(body);
  if (parsed === undefined) throw unexpected(req, `expected ${what}, got ${JSON.stringify(body)}`);
  return parsed;
}

// ---- Output -------------------------------------------------------------------------------------

const orDash = (s: string): string => (s === '' ? '-' : s);
const listText = (l: readonly string[] | undefined, all: string): string => (l === undefined || l.length === 0 ? all : l.join(','));

/** One rule on one line: `read,list on demo.* in partitions * namespaces team-a, names x*`. */
export function ruleText(r: RoleRule): string {
  const prefix = r.name_prefix === undefined || r.name_prefix === '' ? '' : `, names ${r.name_prefix}*`;
  return `${r.verbs.join(',')} on ${r.types.join(',')} in partitions ${listText(r.partitions, '*')} namespaces ${listText(r.namespaces, '*')}${prefix}`;
}

export function formatToken(t: TokenInfo): string {
  return formatFields([
    ['accessor', t.accessor_id],
    ...(t.secret_id !== undefined ? ([['secret', t.secret_id]] as const) : []),
    ['roles', orDash(t.roles.join(', '))],
    ['description', orDash(t.description)],
    ['expires', t.expires_at ?? 'never'],
    ['created', orDash(t.created_at)],
    ...(t.revoked ? ([['revoked', 'yes: deleted, refused on every call']] as const) : []),
  ]);
}

export function formatTokens(tokens: readonly TokenInfo[]): string {
  if (tokens.length === 0) return 'no tokens\n';
  const rows = [...tokens].sort((a, b) => a.created_at.localeCompare(b.created_at) || a.accessor_id.localeCompare(b.accessor_id));
  return formatTable(
    [
      { header: 'accessor', cell: (t: TokenInfo) => t.accessor_id },
      { header: 'roles', cell: (t) => orDash(t.roles.join(',')) },
      { header: 'expires', cell: (t) => (t.revoked ? 'revoked' : (t.expires_at ?? 'never')) },
      { header: 'created', cell: (t) => orDash(t.created_at) },
      { header: 'description', cell: (t) => orDash(t.description) },
    ],
    rows,
  );
}

export function formatRole(r: Role): string {
  return formatFields([['name', r.name], ['description', orDash(r.description)], ...r.rules.map((rule, i) => [`rule ${i + 1}`, ruleText(rule)] as const)]);
}

export function formatRoles(roles: readonly Role[]): string {
  if (roles.length === 0) return 'no roles\n';
  return formatTable(
    [
      { header: 'name', cell: (r: Role) => r.name },
      { header: 'rules', cell: (r) => String(r.rules.length), align: 'right' },
      { header: 'description', cell: (r) => orDash(r.description) },
    ],
    [...roles].sort((a, b) => a.name.localeCompare(b.name)),
  );
}

const STORE_HINT =
  'The secret is shown only now. Store it where only you can read it, e.g. in a file with mode 0600,\nand use it with --token-file FILE or CAIRN_TOKEN_FILE=FILE (or CAIRN_TOKEN).\n';

// ---- The commands -------------------------------------------------------------------------------

const collect = (value: string, previous: string[] | undefined): string[] => [...(previous ?? []), value];
const collectList = (value: string, previous: string[] | undefined): string[] => [...(previous ?? []), ...value.split(',').map((s) => s.trim()).filter((s) => s !== '')];

function req(options: ClientOptions, method: RequestOptions['method'], p: string, write: boolean, json?: unknown): RequestOptions {
  return { ...connection(options), method, path: p, write, ...(json !== undefined ? { json } : {}) };
}

export function registerAclCommands(program: Command, io: CliIo): void {
  const acl = program.command('acl').description('access control: bootstrap, tokens and roles');

  withClientOptions(
    acl
      .command('bootstrap')
      .description('create the first management token (works once per cluster; no token needed) and print its secret'),
    io,
    TIMEOUT_MS,
  ).action(async (_opts: unknown, cmd: Command) => {
    const options = clientOptions(cmd, io);
    // No token is sent: bootstrap needs none, and a stale CAIRN_TOKEN must not get in its way.
    const { token: _unused, ...anonymous } = options;
    const r: RequestOptions = { ...req(anonymous, 'POST', '/v1/acl/bootstrap', true, {}), authHint: false };
    let body: unknown;
    try {
      body = await requestJson(r);
    } catch (e) {
      if (e instanceof CliError && e.message.startsWith('PERMISSION_DENIED') && !/already/.test(e.message)) {
        throw new CliError(e.exitCode, `${e.message}; the cluster's ACLs are already bootstrapped (bootstrap works once): use the management token, or a token from its holder`);
      }
      throw e;
    }
    const t = one(body, asToken, r, 'a token');
    if (t.secret_id === undefined) throw unexpected(r, 'the answer has no secret_id');
    io.secrets?.add(t.secret_id);
    if (options.json) {
      printJson(io, body);
      return;
    }
    io.stdout(formatToken(t));
    io.stdout(`\n${STORE_HINT}`);
  });

  // ---- tokens ----
  const token = acl.command('token').description('ACL tokens: a public accessor id and a secret, holding roles');

  withClientOptions(
    token
      .command('create')
      .description('create a token holding roles and print its secret (shown only now)')
      .option('--role <name>', 'a role the token holds (repeat, or separate with commas)', collectList)
      .option('--description <text>', 'what the token is for')
      .option('--expires-in <duration>', 'expire after this long: 90s, 30m, 24h, 7d, 1h30m', parseDuration)
      .option('--expires-at <time>', 'expire at this ISO-8601 time with a zone, e.g. 2026-12-01T00:00:00Z', parseExpiresAt),
    io,
    TIMEOUT_MS,
  ).action(async (_opts: unknown, cmd: Command) => {
    const flags = cmd.opts<{ role?: string[]; description?: string; expiresIn?: number; expiresAt?: string }>();
    if (flags.role === undefined || flags.role.length === 0) throw usageError('give at least one --role (`cairn acl role list` shows them)');
    if (flags.expiresIn !== undefined && flags.expiresAt !== undefined) throw usageError('give --expires-in or --expires-at, not both');
    const options = clientOptions(cmd, io);
    const expiresAt = flags.expiresIn !== undefined ? new Date(Date.now() + flags.expiresIn).toISOString() : flags.expiresAt;
    const r = req(options, 'POST', '/v1/acl/tokens', true, {
      roles: [...new Set(flags.role)],
      ...(flags.description !== undefined ? { description: flags.description } : {}),
      ...(expiresAt !== undefined ? { expires_at: expiresAt } : {}),
    });
    const body = await requestJson(r);
    const t = one(body, asToken, r, 'a token');
    if (t.secret_id === undefined) throw unexpected(r, 'the answer has no secret_id');
    io.secrets?.add(t.secret_id);
    if (options.json) {
      printJson(io, body);
      return;
    }
    io.stdout(formatToken(t));
    io.stdout(`\n${STORE_HINT}`);
  });

  withClientOptions(token.command('list').description('list the tokens (accessor ids, roles, expiry; never secrets)'), io, TIMEOUT_MS).action(async (_opts: unknown, cmd: Command) => {
    const options = clientOptions(cmd, io);
    const r = req(options, 'GET', '/v1/acl/tokens', false);
    const body = await requestJson(r);
    const tokens = listOf(body, 'tokens', asToken, r);
    if (options.json) printJson(io, body);
    else io.stdout(formatTokens(tokens));
  });

  withClientOptions(token.command('read').description('show one token').argument('<accessor>', "the token's accessor id"), io, TIMEOUT_MS).action(
    async (accessor: string, _opts: unknown, cmd: Command) => {
      const id = accessorArg(accessor, io);
      const options = clientOptions(cmd, io);
      const r = req(options, 'GET', `/v1/acl/tokens/${encodeURIComponent(id)}`, false);
      const body = await requestJson(r);
      const t = one(body, asToken, r, 'a token');
      if (options.json) printJson(io, body);
      else io.stdout(formatToken(t));
    },
  );

  withClientOptions(token.command('delete').description('delete a token: it is refused from then on').argument('<accessor>', "the token's accessor id"), io, TIMEOUT_MS).action(
    async (accessor: string, _opts: unknown, cmd: Command) => {
      const id = accessorArg(accessor, io);
      const options = clientOptions(cmd, io);
      const r = req(options, 'DELETE', `/v1/acl/tokens/${encodeURIComponent(id)}`, true);
      const body = await requestJson(r);
      if (!isRecord(body) || typeof body['deleted'] !== 'boolean') throw unexpected(r, `expected {"deleted": true|false}, got ${JSON.stringify(body)}`);
      if (options.json) printJson(io, body);
      else io.stdout(body['deleted'] ? `deleted token ${id}\n` : `no token ${id}: nothing deleted\n`);
    },
  );

  withClientOptions(token.command('self').description('show the token this command uses (its roles), or anonymous'), io, TIMEOUT_MS).action(async (_opts: unknown, cmd: Command) => {
    const options = clientOptions(cmd, io);
    const r = req(options, 'GET', '/v1/acl/token/self', false);
    const body = await requestJson(r);
    if (!isRecord(body) || !isStrings(body['roles'])) throw unexpected(r, `expected {accessor_id, roles, management, anonymous}, got ${JSON.stringify(body)}`);
    if (options.json) {
      printJson(io, body);
      return;
    }
    const accessor = typeof body['accessor_id'] === 'string' ? body['accessor_id'] : null;
    io.stdout(
      formatFields([
        ['accessor', accessor ?? (body['anonymous'] === true ? 'anonymous (no token)' : '-')],
        ['roles', orDash(body['roles'].join(', '))],
        ['management', body['management'] === true ? 'yes' : 'no'],
        ...(body['acl'] === false ? ([['access control', 'off on this node: every call is allowed']] as const) : []),
      ]),
    );
  });

  // ---- roles ----
  const role = acl.command('role').description('ACL roles: rules granting verbs on types, tenancy and name prefixes');

  const withRuleOptions = (c: Command): Command =>
    c
      .argument('<name>', "the role's name")
      .option('--rule <rule>', "a rule: 'verbs=read,list;types=demo.*;namespaces=team-a;partitions=default;name_prefix=x' (repeat for more)", collect)
      .option('--rules-file <file>', 'the rules from a JSON file: a list of {verbs, types, partitions?, namespaces?, name_prefix?}, or {"rules": [...], "description"?}')
      .option('--description <text>', 'what the role is for');

  interface RoleFlags {
    rule?: string[];
    rulesFile?: string;
    description?: string;
  }

  /** The rules and description the flags give (rules undefined: none given). */
  const fromFlags = (flags: RoleFlags): { rules?: RoleRule[]; description?: string } => {
    if (flags.rule !== undefined && flags.rulesFile !== undefined) throw usageError('give --rule or --rules-file, not both');
    if (flags.rulesFile !== undefined) {
      const f = readRulesFile(flags.rulesFile, io);
      return { rules: f.rules, ...(flags.description !== undefined ? { description: flags.description } : f.description !== undefined ? { description: f.description } : {}) };
    }
    return {
      ...(flags.rule !== undefined ? { rules: flags.rule.map(parseRule) } : {}),
      ...(flags.description !== undefined ? { description: flags.description } : {}),
    };
  };

  const printRole = (options: ClientOptions, r: RequestOptions, body: unknown, verb: string): void => {
    const parsed = one(body, asRole, r, 'a role');
    if (options.json) printJson(io, body);
    else io.stdout(`${verb} role ${parsed.name}\n${formatRole(parsed)}`);
  };

  withClientOptions(withRuleOptions(role.command('create').description('create a role (refused if it exists: use update)')), io, TIMEOUT_MS).action(
    async (name: string, _opts: unknown, cmd: Command) => {
      const given = fromFlags(cmd.opts<RoleFlags>());
      if (given.rules === undefined || given.rules.length === 0) throw usageError('give the role its rules: --rule ... (repeatable) or --rules-file FILE');
      const options = clientOptions(cmd, io);
      // version "0": create only, decided by the server (a compare-and-swap), so a role someone
      // else made is never overwritten.
      const r = req(options, 'PUT', `/v1/acl/roles/${encodeURIComponent(name)}`, true, {
        rules: given.rules,
        ...(given.description !== undefined ? { description: given.description } : {}),
        version: '0',
      });
      let body: unknown;
      try {
        body = await requestJson(r);
      } catch (e) {
        if (e instanceof CliError && e.message.startsWith('CAS_FAILED')) {
          throw new CliError(ExitCode.CONFLICT, `role ${name} already exists: use \`cairn acl role update ${name}\` to change it; nothing was changed`);
        }
        throw e;
      }
      printRole(options, r, body, 'created');
    },
  );

  withClientOptions(
    withRuleOptions(role.command('update').description('change a role: rules given replace its rules, a description replaces its description; what is not given is kept')),
    io,
    TIMEOUT_MS,
  ).action(async (name: string, _opts: unknown, cmd: Command) => {
    const given = fromFlags(cmd.opts<RoleFlags>());
    if (given.rules === undefined && given.description === undefined) throw usageError('nothing to change: give --rule, --rules-file or --description');
    if (given.rules !== undefined && given.rules.length === 0) throw usageError('a role needs at least one rule (delete it with `cairn acl role delete`)');
    const options = clientOptions(cmd, io);
    const p = `/v1/acl/roles/${encodeURIComponent(name)}`;
    const readReq = req(options, 'GET', p, false);
    const current = one(await requestJson(readReq), asRole, readReq, 'a role');
    // A compare-and-swap on the version read: a change made in between is not lost.
    const r = req(options, 'PUT', p, true, {
      rules: given.rules ?? current.rules,
      description: given.description ?? current.description,
      ...(current.version !== undefined ? { version: current.version } : {}),
    });
    let body: unknown;
    try {
      body = await requestJson(r);
    } catch (e) {
      if (e instanceof CliError && e.message.startsWith('CAS_FAILED')) {
        throw new CliError(ExitCode.CONFLICT, `role ${name} changed while it was being updated (or was deleted); nothing was changed: run the command again`);
      }
      throw e;
    }
    printRole(options, r, body, 'updated');
  });

  withClientOptions(role.command('list').description('list the roles'), io, TIMEOUT_MS).action(async (_opts: unknown, cmd: Command) => {
    const options = clientOptions(cmd, io);
    const r = req(options, 'GET', '/v1/acl/roles', false);
    const body = await requestJson(r);
    const roles = listOf(body, 'roles', asRole, r);
    if (options.json) printJson(io, body);
    else io.stdout(formatRoles(roles));
  });

  withClientOptions(role.command('read').description('show a role and its rules').argument('<name>', "the role's name"), io, TIMEOUT_MS).action(
    async (name: string, _opts: unknown, cmd: Command) => {
      const options = clientOptions(cmd, io);
      const r = req(options, 'GET', `/v1/acl/roles/${encodeURIComponent(name)}`, false);
      const body = await requestJson(r);
      const parsed = one(body, asRole, r, 'a role');
      if (options.json) printJson(io, body);
      else io.stdout(formatRole(parsed));
    },
  );

  withClientOptions(role.command('delete').description('delete a role (tokens holding it lose its grants)').argument('<name>', "the role's name"), io, TIMEOUT_MS).action(
    async (name: string, _opts: unknown, cmd: Command) => {
      const options = clientOptions(cmd, io);
      const r = req(options, 'DELETE', `/v1/acl/roles/${encodeURIComponent(name)}`, true);
      const body = await requestJson(r);
      if (options.json) {
        printJson(io, body);
        return;
      }
      const deleted = isRecord(body) && typeof body['deleted'] === 'boolean' ? body['deleted'] : true;
      io.stdout(deleted ? `deleted role ${name}\n` : `no role ${name}: nothing deleted\n`);
    },
  );
}
