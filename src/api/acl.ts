import {
  ACL_LIMITS,
  ANONYMOUS_ROLE,
  MANAGEMENT_ROLE,
  authorize,
  describeGrant,
  mayListSome,
  parseRules,
  hashSecret,
  secretAccessor,
  secretMatches,
  type AclRule,
  type AclTarget,
  type AclVerb,
  type Identity,
  type PeerIdentity,
} from '../auth/index.js';
import { CairnError, ErrorCode, type Clock } from '../base/index.js';
import type { Resource, StoreReader } from '../store/index.js';
import type { TypeRegistry } from './registry.js';

/** The built-in types of access control (docs/security.md "Tokens and roles"), cluster-scoped. */
export const TOKEN_TYPE = 'cairn.v1.ACLToken';
export const ROLE_TYPE = 'cairn.v1.ACLRole';
/** The bootstrap token's name (its accessor id) and the finalizer that keeps `cairn acl bootstrap` from working twice. */
export const BOOTSTRAP_ACCESSOR = 'bootstrap';
export const BOOTSTRAP_FINALIZER = 'cairn.io/acl-bootstrap';

/** `data` of a cairn.v1.ACLToken. The secret itself is never stored. */
export interface TokenData {
  readonly secret_hash: string;
  readonly roles: readonly string[];
  readonly description?: string;
  /** RFC 3339; absent or null: never expires. */
  readonly expires_at?: string | null;
  readonly created_at?: string;
}

const LABEL = '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$';

/** Registers cairn.v1.ACLToken and cairn.v1.ACLRole; every agent does, whether ACLs are on or not. */
export function registerAclTypes(registry: TypeRegistry): void {
  registry.register({
    group: 'cairn',
    groupVersion: 'v1',
    kind: 'ACLToken',
    scope: 'cluster',
    schema: {
      type: 'object',
      properties: {
        secret_hash: { type: 'string', pattern: '^sha256:[0-9a-f]{64}$' },
        roles: { type: 'array', items: { type: 'string', pattern: LABEL }, maxItems: ACL_LIMITS.rolesPerToken },
        description: { type: 'string', maxLength: ACL_LIMITS.descriptionLength },
        expires_at: { type: ['string', 'null'], maxLength: 64 },
        created_at: { type: 'string', maxLength: 64 },
      },
      required: ['secret_hash', 'roles'],
      additionalProperties: false,
    },
    validate: (res) => {
      const d = res.data as unknown as TokenData;
      if (d.expires_at !== undefined && d.expires_at !== null && Number.isNaN(Date.parse(d.expires_at))) return 'expires_at must be an RFC 3339 time';
      return undefined;
    },
  });
  registry.register({
    group: 'cairn',
    groupVersion: 'v1',
    kind: 'ACLRole',
    scope: 'cluster',
    schema: {
      type: 'object',
      properties: {
        description: { type: 'string', maxLength: ACL_LIMITS.descriptionLength },
        rules: { type: 'array', maxItems: ACL_LIMITS.rulesPerRole },
      },
      required: ['rules'],
      additionalProperties: false,
    },
    validate: (res) => {
      if (res.name === MANAGEMENT_ROLE) return `the role ${MANAGEMENT_ROLE} is built in and cannot be stored`;
      const rules = parseRules((res.data as { rules?: unknown }).rules);
      return typeof rules === 'string' ? rules : undefined;
    },
  });
}

export interface AccessControlOptions {
  /** Access control is on (docs/security.md): default deny. Off: every caller may do everything. */
  readonly enabled: boolean;
  readonly clock: Clock;
  /** `/metrics` answers without a token (for a scraper on a trusted network). Default false. */
  readonly metricsAnonymous?: boolean;
  /**
   * A secret known only to this process, which makes its bearer this node (built-in controllers
   * calling their own node on loopback where there is no TLS certificate to prove it). Never
   * stored, never replicated: other nodes refuse it like any unknown token.
   */
  readonly internalSecret?: string;
}

/** Parsed rules per stored role version (stored resources are frozen: a new version is a new object). */
const rulesOf = new WeakMap<Resource, readonly AclRule[]>();

function storedRules(role: Resource): readonly AclRule[] {
  let rules = rulesOf.get(role);
  if (rules === undefined) {
    const parsed = parseRules((role.data as { rules?: unknown } | null)?.rules);
    // A role stored by an older or looser node that no longer parses grants nothing.
    rules = typeof parsed === 'string' ? [] : parsed;
    rulesOf.set(role, rules);
  }
  return rules;
}

const ACL_KEY = (kind: string, name: string): { group: string; kind: string; tenancy: { partition: string; namespace: string }; name: string } => ({
  group: 'cairn',
  kind,
  tenancy: { partition: '', namespace: '' },
  name,
});

/** One message for every bad token, so an answer never tells which part was wrong (unknown, revoked, expired). */
const BAD_TOKEN = 'the token is not valid (unknown, revoked or expired)';

/**
 * Resolves callers to identities from this node's replicated ACL resources, and turns `authorize`
 * verdicts into errors. Reads the local store as it is: a revoked token is refused on a node as
 * soon as the node has applied the revocation (docs/security.md gives the measured delay).
 */
export class AccessControl {
  readonly enabled: boolean;
  readonly metricsAnonymous: boolean;

  constructor(private readonly opts: AccessControlOptions) {
    this.enabled = opts.enabled;
    this.metricsAnonymous = opts.metricsAnonymous ?? false;
  }

  /**
   * Who is calling: a verified node certificate (gRPC) is a node of the cluster; a bearer token
   * must be valid (UNAUTHENTICATED otherwise); no token is anonymous.
   */
  identify(store: StoreReader, token: string | undefined, peer: PeerIdentity | undefined): Identity {
    if (!this.enabled) return { kind: 'open' };
    if (peer?.kind === 'node' && token === undefined) return { kind: 'node', nodeId: peer.id };
    if (token === undefined) {
      const role = store.get(ACL_KEY('ACLRole', ANONYMOUS_ROLE));
      return { kind: 'anonymous', rules: role === undefined ? [] : storedRules(role) };
    }
    const internal = this.opts.internalSecret;
    if (internal !== undefined && token.length === internal.length && secretMatches(token, hashSecret(internal))) return { kind: 'node', nodeId: 'self' };
    const accessor = secretAccessor(token);
    const rec = accessor === undefined ? undefined : store.get(ACL_KEY('ACLToken', accessor));
    if (rec === undefined || rec.deletionTimestamp !== null) throw new CairnError(ErrorCode.UNAUTHENTICATED, BAD_TOKEN);
    const data = rec.data as unknown as TokenData;
    if (typeof data?.secret_hash !== 'string' || !secretMatches(token, data.secret_hash)) throw new CairnError(ErrorCode.UNAUTHENTICATED, BAD_TOKEN);
    if (typeof data.expires_at === 'string' && !(Date.parse(data.expires_at) > this.opts.clock.nowMs())) throw new CairnError(ErrorCode.UNAUTHENTICATED, BAD_TOKEN);
    const roles = Array.isArray(data.roles) ? data.roles.filter((r): r is string => typeof r === 'string') : [];
    const rules: AclRule[] = [];
    for (const name of roles) {
      if (name === MANAGEMENT_ROLE) continue;
      const role = store.get(ACL_KEY('ACLRole', name));
      if (role !== undefined) rules.push(...storedRules(role));
    }
    return { kind: 'token', accessorId: rec.id.name, roles, management: roles.includes(MANAGEMENT_ROLE), rules };
  }

  /** Throws unless `identity` may do `verb` on `target`: UNAUTHENTICATED for anonymous callers, PERMISSION_DENIED for tokens. */
  check(identity: Identity, verb: AclVerb, target: AclTarget): void {
    if (authorize(identity, verb, target)) return;
    throw denied(identity, verb, target);
  }

  /** As `check`, for a list or watch: passes when the identity may see some of what the filter covers (items are then filtered). */
  checkList(identity: Identity, verb: AclVerb, target: AclTarget): void {
    if (mayListSome(identity, verb, target)) return;
    throw denied(identity, verb, target);
  }
}

export function denied(identity: Identity, verb: AclVerb, target: AclTarget): CairnError {
  const grant = describeGrant(verb, target);
  if (identity.kind === 'anonymous') {
    return new CairnError(ErrorCode.UNAUTHENTICATED, `this request needs a token: anonymous requests may not ${grant}`, { missing_grant: grant });
  }
  const who = identity.kind === 'token' ? `token ${identity.accessorId}` : 'the caller';
  return new CairnError(ErrorCode.PERMISSION_DENIED, `${who} lacks ${grant}`, { missing_grant: grant });
}

/** A resource as an authorization target. */
export function targetOf(r: Resource): AclTarget {
  return { group: r.id.type.group, groupVersion: r.id.type.groupVersion, kind: r.id.type.kind, partition: r.id.tenancy.partition, namespace: r.id.tenancy.namespace, name: r.id.name };
}

/** Whether a stored resource is one of the ACL types (touching them needs `admin`). */
export function isAclType(group: string, kind: string): boolean {
  return group === 'cairn' && (kind === 'ACLToken' || kind === 'ACLRole');
}
