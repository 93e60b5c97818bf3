import { hashSecret, MANAGEMENT_ROLE, newSecret, parseRules, ruleToJson, ACL_LIMITS, type Identity } from '../auth/index.js';
import { CairnError, ErrorCode, isCairnError, type Clock } from '../base/index.js';
import { BOOTSTRAP_ACCESSOR, BOOTSTRAP_FINALIZER, ROLE_TYPE, TOKEN_TYPE, type TokenData } from './acl.js';
import type { HttpRequest, Router } from './http-server.js';
import { ulid } from './ids.js';
import type { ResourceJson } from './resource-json.js';
import { httpCallContext } from './resource-routes.js';
import type { CallContext, ResourceService } from './resource-service.js';

/**
 * The ACL endpoints (docs/security.md "Tokens and roles"): thin wrappers over the resource API
 * on the built-in types cairn.v1.ACLToken and cairn.v1.ACLRole, so every rule of that API holds
 * (each needs `admin` on those types), plus what a resource write cannot do: make a secret
 * (shown once, stored only as its hash) and bootstrap the first management token.
 */

function invalid(msg: string): CairnError {
  return new CairnError(ErrorCode.INVALID_ARGUMENT, msg);
}

function body(req: HttpRequest, allowed: readonly string[], what: string): Record<string, unknown> {
  if (req.body.length === 0) return {};
  const v = req.json();
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw invalid(`${what} must be a JSON object`);
  const o = v as Record<string, unknown>;
  for (const k of Object.keys(o)) if (!allowed.includes(k)) throw invalid(`unknown field ${JSON.stringify(k)} in ${what}; allowed: ${allowed.join(', ')}`);
  return o;
}

function noQuery(req: HttpRequest): void {
  const extra = [...req.query.keys()][0];
  if (extra !== undefined) throw invalid(`unknown query parameter ${JSON.stringify(extra)}`);
}

/** A token as the API shows it: never its hash. */
export function tokenToJson(r: ResourceJson): Record<string, unknown> {
  const d = r.data as unknown as TokenData;
  return {
    accessor_id: r.id.name,
    roles: Array.isArray(d.roles) ? [...d.roles] : [],
    description: d.description ?? '',
    expires_at: d.expires_at ?? null,
    created_at: d.created_at ?? null,
    revoked: r.deletion_timestamp !== null,
  };
}

function roleToJson(r: ResourceJson): Record<string, unknown> {
  const d = r.data as { description?: string; rules?: unknown };
  const rules = parseRules(d.rules);
  return { name: r.id.name, description: d.description ?? '', rules: typeof rules === 'string' ? [] : rules.map(ruleToJson), version: r.version };
}

function parseRoles(v: unknown): string[] {
  if (!Array.isArray(v) || v.length === 0 || v.length > ACL_LIMITS.rolesPerToken) throw invalid(`roles must be a non-empty array of at most ${ACL_LIMITS.rolesPerToken} role names`);
  for (const r of v) if (typeof r !== 'string' || !/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/.test(r)) throw invalid(`role ${JSON.stringify(r)} is not a role name (a lowercase DNS label)`);
  return [...new Set(v as string[])];
}

function parseDescription(v: unknown): string | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'string' || v.length > ACL_LIMITS.descriptionLength) throw invalid(`description must be a string of at most ${ACL_LIMITS.descriptionLength} characters`);
  return v;
}

function parseExpiry(v: unknown, nowMs: number): string | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'string' || Number.isNaN(Date.parse(v))) throw invalid('expires_at must be an RFC 3339 time, e.g. 2027-01-01T00:00:00Z');
  if (Date.parse(v) <= nowMs) throw invalid('expires_at is in the past');
  return new Date(Date.parse(v)).toISOString();
}

export interface AclRouteDeps {
  readonly resources: ResourceService;
  readonly clock: Clock;
}

/**
 * Creates a management token with a known secret unless its accessor exists: the bootstrap
 * route, and a node given `--acl-initial-management-token-file` (as Consul's
 * `initial_management`). Returns false when it already existed.
 */
export async function createManagementToken(resources: ResourceService, secret: string, accessor: string, description: string, clock: Clock, timeoutMs?: number): Promise<boolean> {
  const ctx: CallContext = { asIdentity: SYSTEM, ...(timeoutMs !== undefined ? { timeoutMs } : {}) };
  try {
    await resources.write(
      {
        type: TOKEN_TYPE,
        name: accessor,
        data: { secret_hash: hashSecret(secret), roles: [MANAGEMENT_ROLE], description, created_at: new Date(clock.nowMs()).toISOString() },
        // A management token made this way keeps a finalizer: deleting it revokes it but keeps
        // its name taken, so bootstrap cannot be done again by whoever reaches the node next,
        // and a node started with the same initial token file does not bring it back.
        finalizers: [BOOTSTRAP_FINALIZER],
        version: '0',
      },
      ctx,
    );
    return true;
  } catch (e) {
    if (isCairnError(e, ErrorCode.CAS_FAILED)) return false;
    throw e;
  }
}

/**
 * Every page of a list of ACL objects (lists are paged: docs/api.md "Paging"), at the first
 * page's revision. There are few of them; the answer is one array.
 */
async function listEvery(resources: ResourceService, type: string, ctx: CallContext): Promise<ResourceJson[]> {
  const out: ResourceJson[] = [];
  let cont: string | undefined;
  do {
    const r = await resources.list({ type, ...(cont !== undefined ? { continue: cont } : {}) }, ctx);
    out.push(...r.resources);
    cont = r.continue;
  } while (cont !== undefined);
  return out;
}

/** The server acting on its own authority (never derived from a request). */
const SYSTEM: Identity = { kind: 'node', nodeId: 'self' };

export function addAclRoutes(router: Router, deps: AclRouteDeps): void {
  const { resources, clock } = deps;

  router.add(
    'POST',
    '/v1/acl/bootstrap',
    async (req) => {
      noQuery(req);
      body(req, [], 'the bootstrap request');
      if (!resources.access.enabled) throw invalid('access control is off on this node (start it with TLS, or --acl); there is nothing to bootstrap');
      // Once: the bootstrap token's name stays taken (see createManagementToken), and a cluster
      // that already has tokens (an initial management token) is bootstrapped.
      const existing = await resources.list({ type: TOKEN_TYPE }, { asIdentity: SYSTEM });
      const done = new CairnError(ErrorCode.PERMISSION_DENIED, 'ACL bootstrap has already been done; use a management token to make more tokens');
      if (existing.resources.length > 0) throw done;
      const secret = newSecret(BOOTSTRAP_ACCESSOR);
      if (!(await createManagementToken(resources, secret, BOOTSTRAP_ACCESSOR, 'bootstrap token (cairn acl bootstrap)', clock))) throw done;
      return { status: 200, json: { accessor_id: BOOTSTRAP_ACCESSOR, secret_id: secret, roles: [MANAGEMENT_ROLE], description: 'bootstrap token (cairn acl bootstrap)' } };
    },
    { access: 'public', audit: 'acl.bootstrap' },
  );

  router.add(
    'POST',
    '/v1/acl/tokens',
    async (req) => {
      noQuery(req);
      const o = body(req, ['roles', 'description', 'expires_at'], 'the token');
      const roles = parseRoles(o['roles']);
      const description = parseDescription(o['description']);
      const expiresAt = parseExpiry(o['expires_at'], clock.nowMs());
      const accessor = ulid().toLowerCase();
      const secret = newSecret(accessor);
      const createdAt = new Date(clock.nowMs()).toISOString();
      const r = await resources.write(
        {
          type: TOKEN_TYPE,
          name: accessor,
          data: {
            secret_hash: hashSecret(secret),
            roles,
            ...(description !== undefined ? { description } : {}),
            ...(expiresAt !== undefined ? { expires_at: expiresAt } : {}),
            created_at: createdAt,
          },
          version: '0',
        },
        httpCallContext(req),
      );
      return { status: 200, json: { ...tokenToJson(r), secret_id: secret } };
    },
    { access: 'service', audit: 'acl.token.create' },
  );

  router.add(
    'GET',
    '/v1/acl/tokens',
    async (req) => {
      noQuery(req);
      const all = await listEvery(resources, TOKEN_TYPE, httpCallContext(req));
      return { status: 200, json: { tokens: all.map(tokenToJson) } };
    },
    { access: 'service' },
  );

  router.add(
    'GET',
    '/v1/acl/tokens/:accessor',
    async (req) => {
      noQuery(req);
      const r = await resources.read({ type: TOKEN_TYPE, name: req.params['accessor'] ?? '' }, httpCallContext(req));
      return { status: 200, json: tokenToJson(r.resource) };
    },
    { access: 'service' },
  );

  router.add(
    'DELETE',
    '/v1/acl/tokens/:accessor',
    async (req) => {
      noQuery(req);
      const accessor = req.params['accessor'] ?? '';
      const r = await resources.delete({ type: TOKEN_TYPE, name: accessor }, httpCallContext(req));
      // The bootstrap token is marked (revoked) rather than removed: say it is gone all the same.
      const revoked = r.deleted || (r.resource !== null && r.resource.deletion_timestamp !== null);
      return { status: 200, json: { deleted: revoked } };
    },
    { access: 'service', audit: (req) => ({ action: 'acl.token.delete', target: { accessor_id: req.params['accessor'] ?? '' } }) },
  );

  router.add(
    'GET',
    '/v1/acl/token/self',
    async (req) => {
      noQuery(req);
      const id = await resources.identifyCall(httpCallContext(req));
      switch (id.kind) {
        case 'token':
          return { status: 200, json: { accessor_id: id.accessorId, roles: [...id.roles], management: id.management, anonymous: false, acl: true } };
        case 'anonymous':
          return { status: 200, json: { accessor_id: null, roles: [], management: false, anonymous: true, acl: true } };
        case 'node':
          return { status: 200, json: { accessor_id: null, roles: [MANAGEMENT_ROLE], management: true, anonymous: false, acl: true } };
        case 'open':
          return { status: 200, json: { accessor_id: null, roles: [], management: true, anonymous: true, acl: false } };
      }
    },
    { access: 'service' },
  );

  router.add(
    'PUT',
    '/v1/acl/roles/:name',
    async (req) => {
      noQuery(req);
      const o = body(req, ['description', 'rules', 'version'], 'the role');
      const rules = parseRules(o['rules']);
      if (typeof rules === 'string') throw invalid(rules);
      const description = parseDescription(o['description']);
      const version = o['version'];
      if (version !== undefined && typeof version !== 'string') throw invalid('version must be a decimal string');
      const name = req.params['name'] ?? '';
      const r = await resources.write(
        { type: ROLE_TYPE, name, data: { ...(description !== undefined ? { description } : {}), rules: rules.map(ruleToJson) }, ...(version !== undefined ? { version } : {}) },
        httpCallContext(req),
      );
      return { status: 200, json: roleToJson(r) };
    },
    { access: 'service', audit: (req) => ({ action: 'acl.role.write', target: { role: req.params['name'] ?? '' } }) },
  );

  router.add(
    'GET',
    '/v1/acl/roles',
    async (req) => {
      noQuery(req);
      const all = await listEvery(resources, ROLE_TYPE, httpCallContext(req));
      return { status: 200, json: { roles: all.map(roleToJson) } };
    },
    { access: 'service' },
  );

  router.add(
    'GET',
    '/v1/acl/roles/:name',
    async (req) => {
      noQuery(req);
      const r = await resources.read({ type: ROLE_TYPE, name: req.params['name'] ?? '' }, httpCallContext(req));
      return { status: 200, json: roleToJson(r.resource) };
    },
    { access: 'service' },
  );

  router.add(
    'DELETE',
    '/v1/acl/roles/:name',
    async (req) => {
      noQuery(req);
      const name = req.params['name'] ?? '';
      const r = await resources.delete({ type: ROLE_TYPE, name }, httpCallContext(req));
      return { status: 200, json: { deleted: r.deleted } };
    },
    { access: 'service', audit: (req) => ({ action: 'acl.role.delete', target: { role: req.params['name'] ?? '' } }) },
  );
}
