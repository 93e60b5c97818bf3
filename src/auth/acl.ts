import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';

/**
 * Access control (docs/security.md "Tokens and roles"): who may do what, decided by one pure
 * function, `authorize(identity, verb, target)`, which every door of the API calls (HTTP, gRPC,
 * watches, operator routes). Nothing here reads the store or a clock: the api module resolves a
 * bearer secret to an `Identity` from the replicated ACL resources, and hands this module plain
 * data. The state machine never consults a token.
 *
 * The model follows Consul's ACLs and Kubernetes RBAC: default deny; a token names roles; a
 * role is a list of rules; a rule grants verbs on type patterns, in tenancies, on name prefixes.
 */

/** What a caller may do. `admin` covers operator routes, snapshots and the ACL objects themselves. */
export const ACL_VERBS = ['read', 'list', 'watch', 'write', 'delete', 'write-status', 'admin'] as const;
export type AclVerb = (typeof ACL_VERBS)[number];

/** The role every bootstrap token holds: every verb on everything. Built in; cannot be stored or changed. */
export const MANAGEMENT_ROLE = 'global-management';
/** The stored role whose rules apply to requests without a token (absent: anonymous may do nothing). */
export const ANONYMOUS_ROLE = 'anonymous';

/** The built-in types holding tokens and roles (cluster-scoped, replicated like any resource). */
export const ACL_GROUP = 'cairn';
export const TOKEN_KIND = 'ACLToken';
export const ROLE_KIND = 'ACLRole';
/**
 * Authorization targets that are not stored resources: the node's operator routes (`read` for
 * status, `admin` for changes), snapshots (`admin`) and metrics (`read`). Patterns match them as
 * they match types (`cairn.*`, `*`).
 */
export const OPERATOR_TARGET = { group: 'cairn', groupVersion: 'v1', kind: 'Operator' } as const;
export const SNAPSHOT_TARGET = { group: 'cairn', groupVersion: 'v1', kind: 'Snapshot' } as const;
export const METRICS_TARGET = { group: 'cairn', groupVersion: 'v1', kind: 'Metrics' } as const;

export interface AclRule {
  readonly verbs: readonly AclVerb[];
  /** `*`, `group.*`, `group.Kind` (every version) or `group.version.Kind`. */
  readonly types: readonly string[];
  /** `*` or partition names; default `*`. */
  readonly partitions: readonly string[];
  /** `*` or namespace names; default `*`. */
  readonly namespaces: readonly string[];
  /** Only names starting with this ('' = every name). */
  readonly namePrefix: string;
}

/** Who is calling, as the api resolved it. */
export type Identity =
  /** ACLs are off on this node: everything is allowed (a `--dev` or `--insecure` node). */
  | { readonly kind: 'open' }
  /** A node of the cluster, proven by its certificate (built-in controllers): management. */
  | { readonly kind: 'node'; readonly nodeId: string }
  /** A valid token. */
  | { readonly kind: 'token'; readonly accessorId: string; readonly roles: readonly string[]; readonly management: boolean; readonly rules: readonly AclRule[] }
  /** No token: the `anonymous` role's rules, if that role exists. */
  | { readonly kind: 'anonymous'; readonly rules: readonly AclRule[] };

/** What is acted on: a type (group version optional for lists of every version), a tenancy and a name ('' for a list). */
export interface AclTarget {
  readonly group: string;
  /** Undefined: a list or watch across every group version (`demo.Artist`). */
  readonly groupVersion: string | undefined;
  readonly kind: string;
  /** '' when the type's scope has none; `*` for a wildcard list. */
  readonly partition: string;
  readonly namespace: string;
  /** '' for a list or watch (then `namePrefix` narrows it). */
  readonly name: string;
  readonly namePrefix?: string;
}

/** Whether a type pattern covers a type. A target without a group version (a list of every version) needs a pattern that covers every version. */
export function typePatternMatches(pattern: string, t: { readonly group: string; readonly groupVersion: string | undefined; readonly kind: string }): boolean {
  if (pattern === '*') return true;
  const parts = pattern.split('.');
  if (parts.length === 2) {
    const [g, k] = parts as [string, string];
    return g === t.group && (k === '*' || k === t.kind);
  }
  if (parts.length === 3) {
    const [g, v, k] = parts as [string, string, string];
    return g === t.group && t.groupVersion !== undefined && v === t.groupVersion && k === t.kind;
  }
  return false;
}

function tenancyMatches(allowed: readonly string[], v: string): boolean {
  // A wildcard request (`*`) is covered only by a rule that allows every value; an item-level
  // check later narrows what a partial grant sees (`mayListSome` + `authorize` per item).
  return allowed.includes('*') || (v !== '*' && allowed.includes(v));
}

function ruleCovers(rule: AclRule, verb: AclVerb, target: AclTarget): boolean {
  if (!rule.verbs.includes(verb)) return false;
  if (!rule.types.some((p) => typePatternMatches(p, target))) return false;
  if (!tenancyMatches(rule.partitions, target.partition) || !tenancyMatches(rule.namespaces, target.namespace)) return false;
  if (rule.namePrefix === '') return true;
  if (target.name !== '') return target.name.startsWith(rule.namePrefix);
  return (target.namePrefix ?? '').startsWith(rule.namePrefix);
}

/** The one decision: may `identity` do `verb` on `target`? Default deny. */
export function authorize(identity: Identity, verb: AclVerb, target: AclTarget): boolean {
  switch (identity.kind) {
    case 'open':
    case 'node':
      return true;
    case 'token':
      if (identity.management) return true;
      return identity.rules.some((r) => ruleCovers(r, verb, target));
    case 'anonymous':
      return identity.rules.some((r) => ruleCovers(r, verb, target));
  }
}

/**
 * Whether a list or watch over `target` (with wildcards) could show this identity anything: some
 * rule grants `verb` on the type and overlaps the tenancy and name prefix. Items are then
 * checked one by one with `authorize` (a namespace-scoped token lists `*` and sees its namespace).
 */
export function mayListSome(identity: Identity, verb: AclVerb, target: AclTarget): boolean {
  if (authorize(identity, verb, target)) return true;
  if (identity.kind !== 'token' && identity.kind !== 'anonymous') return false;
  const overlaps = (allowed: readonly string[], v: string): boolean => v === '*' || allowed.includes('*') || allowed.includes(v);
  const prefix = target.namePrefix ?? '';
  return identity.rules.some(
    (r) =>
      r.verbs.includes(verb) &&
      r.types.some((p) => typePatternMatches(p, target) || (target.groupVersion === undefined && patternCoversSomeVersion(p, target))) &&
      overlaps(r.partitions, target.partition) &&
      overlaps(r.namespaces, target.namespace) &&
      (r.namePrefix.startsWith(prefix) || prefix.startsWith(r.namePrefix)),
  );
}

/** `group.version.Kind` patterns cover some versions of a `group.Kind` list. */
function patternCoversSomeVersion(pattern: string, t: { readonly group: string; readonly kind: string }): boolean {
  const parts = pattern.split('.');
  return parts.length === 3 && parts[0] === t.group && parts[2] === t.kind;
}

/** The missing grant, for an error message: what was asked, never what exists. */
export function describeGrant(verb: AclVerb, target: AclTarget): string {
  const type = target.groupVersion === undefined ? `${target.group}.${target.kind}` : `${target.group}.${target.groupVersion}.${target.kind}`;
  const where = target.partition === '' ? '' : target.namespace === '' ? ` in partition ${target.partition}` : ` in ${target.partition}/${target.namespace}`;
  const name = target.name !== '' ? ` ${target.name}` : target.namePrefix ? ` (names starting ${JSON.stringify(target.namePrefix)})` : '';
  return `"${verb}" on ${type}${name}${where}`;
}

export function formatIdentityForLog(identity: Identity): string {
  switch (identity.kind) {
    case 'open':
      return 'open';
    case 'node':
      return `node:${identity.nodeId}`;
    case 'token':
      return `token:${identity.accessorId}`;
    case 'anonymous':
      return 'anonymous';
  }
}

// ---- Secrets -----------------------------------------------------------------------------------

const ACCESSOR_RE = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;
const SECRET_RE = /^cairn_([a-z0-9-]{1,63})_([0-9a-f]{64})$/;

/**
 * A token secret names its accessor (`cairn_<accessor>_<64 hex>`, as GitHub's tokens carry a
 * prefix), so a node finds the token's record by name and compares hashes: no index of
 * secrets, no scan. The accessor is public; the 256 random bits are the secret.
 */
export function newSecret(accessorId: string): string {
  if (!ACCESSOR_RE.test(accessorId)) throw new Error(`accessor id ${JSON.stringify(accessorId)} is not a DNS label`);
  return `cairn_${accessorId}_${randomBytes(32).toString('hex')}`;
}

/** The accessor a secret names, or undefined when it is not a Cairn secret. */
export function secretAccessor(secret: string): string | undefined {
  if (secret.length > 140) return undefined;
  const m = SECRET_RE.exec(secret);
  if (m === null) return undefined;
  const accessor = m[1] as string;
  return ACCESSOR_RE.test(accessor) ? accessor : undefined;
}

/** What is stored: `sha256:<hex>`. The secret has 256 random bits, so a fast hash is enough (no offline guessing). */
export function hashSecret(secret: string): string {
  return `sha256:${createHash('sha256').update(secret, 'utf8').digest('hex')}`;
}

/** Constant-time comparison of a presented secret with a stored hash. */
export function secretMatches(secret: string, storedHash: string): boolean {
  const want = Buffer.from(storedHash, 'utf8');
  const got = Buffer.from(hashSecret(secret), 'utf8');
  return want.length === got.length && timingSafeEqual(want, got);
}

// ---- Parsing roles -----------------------------------------------------------------------------

const LABEL = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;
const TYPE_PATTERN = /^(\*|[a-z][a-z0-9]{0,62}\.(\*|[A-Z][A-Za-z0-9]{0,62})|[a-z][a-z0-9]{0,62}\.v[0-9]+((alpha|beta)[0-9]+)?\.[A-Z][A-Za-z0-9]{0,62})$/;
export const ACL_LIMITS = { rulesPerRole: 64, patternsPerRule: 64, rolesPerToken: 32, descriptionLength: 256 } as const;

/**
 * A role's rules from its stored (or requested) JSON, or the reason they are not valid. The
 * schema of the role type checks shapes; this checks meaning (verbs, patterns, labels).
 */
export function parseRules(v: unknown): AclRule[] | string {
  if (!Array.isArray(v)) return 'rules must be an array';
  if (v.length > ACL_LIMITS.rulesPerRole) return `at most ${ACL_LIMITS.rulesPerRole} rules`;
  const out: AclRule[] = [];
  for (const [i, r] of v.entries()) {
    if (typeof r !== 'object' || r === null || Array.isArray(r)) return `rules[${i}] must be an object`;
    const o = r as Record<string, unknown>;
    for (const k of Object.keys(o)) if (!['verbs', 'types', 'partitions', 'namespaces', 'name_prefix'].includes(k)) return `rules[${i}] has unknown field ${JSON.stringify(k)}`;
    const list = (k: string, dflt: string[] | undefined): string[] | string => {
      const x = o[k];
      if (x === undefined && dflt !== undefined) return dflt;
      if (!Array.isArray(x) || x.length === 0 || x.length > ACL_LIMITS.patternsPerRule || !x.every((e) => typeof e === 'string')) return `rules[${i}].${k} must be a non-empty array of at most ${ACL_LIMITS.patternsPerRule} strings`;
      return x as string[];
    };
    const verbs = list('verbs', undefined);
    if (typeof verbs === 'string') return verbs;
    for (const vb of verbs) if (!(ACL_VERBS as readonly string[]).includes(vb)) return `rules[${i}].verbs: unknown verb ${JSON.stringify(vb)}; verbs are ${ACL_VERBS.join(', ')}`;
    const types = list('types', undefined);
    if (typeof types === 'string') return types;
    for (const p of types) if (!TYPE_PATTERN.test(p)) return `rules[${i}].types: ${JSON.stringify(p)} is not a type pattern (*, group.*, group.Kind, group.version.Kind)`;
    const partitions = list('partitions', ['*']);
    if (typeof partitions === 'string') return partitions;
    const namespaces = list('namespaces', ['*']);
    if (typeof namespaces === 'string') return namespaces;
    for (const t of [...partitions, ...namespaces]) if (t !== '*' && !LABEL.test(t)) return `rules[${i}]: tenancy ${JSON.stringify(t)} must be * or a lowercase DNS label`;
    const np = o['name_prefix'];
    if (np !== undefined && (typeof np !== 'string' || !/^[a-z0-9-]{0,63}$/.test(np))) return `rules[${i}].name_prefix must be a prefix of a DNS label`;
    out.push({ verbs: verbs as AclVerb[], types, partitions, namespaces, namePrefix: (np as string | undefined) ?? '' });
  }
  return out;
}

/** A rule as it is stored and shown (snake_case JSON). */
export function ruleToJson(r: AclRule): { verbs: string[]; types: string[]; partitions: string[]; namespaces: string[]; name_prefix?: string } {
  return { verbs: [...r.verbs], types: [...r.types], partitions: [...r.partitions], namespaces: [...r.namespaces], ...(r.namePrefix !== '' ? { name_prefix: r.namePrefix } : {}) };
}
