import { CairnError, ErrorCode } from '../base/index.js';
import type { Consistency } from '../replica/index.js';
import { ACL_TYPES } from './audit.js';
import type { HttpRequest, Router } from './http-server.js';
import { bearerToken, checkRequestId, type CallContext, type ResourceService } from './resource-service.js';
import type { ResourceIdJson } from './resource-json.js';

function invalid(msg: string): CairnError {
  return new CairnError(ErrorCode.INVALID_ARGUMENT, msg);
}

function bodyObject(req: HttpRequest, allowed: readonly string[], what: string): Record<string, unknown> {
  const v = req.json();
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw invalid(`${what} must be a JSON object`);
  const o = v as Record<string, unknown>;
  for (const k of Object.keys(o)) {
    if (!allowed.includes(k)) throw invalid(`unknown field ${JSON.stringify(k)} in ${what}; allowed: ${allowed.join(', ')}`);
  }
  return o;
}

function queryOnly(req: HttpRequest, allowed: readonly string[]): void {
  for (const k of req.query.keys()) {
    if (!allowed.includes(k)) throw invalid(`unknown query parameter ${JSON.stringify(k)}; allowed: ${allowed.join(', ')}`);
  }
}

function q(req: HttpRequest, name: string): string | undefined {
  const all = req.query.getAll(name);
  if (all.length > 1) throw invalid(`query parameter ${name} is given ${all.length} times`);
  return all[0];
}

function consistency(req: HttpRequest): Consistency {
  const c = q(req, 'consistency') ?? 'linearizable';
  if (c !== 'linearizable' && c !== 'stale') throw invalid(`consistency must be linearizable or stale, got ${JSON.stringify(c)}`);
  return c;
}

function optString(o: Record<string, unknown>, k: string): string | undefined {
  const v = o[k];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'string') throw invalid(`${k} must be a string`);
  return v;
}

/** Per-request context: idempotency key (Idempotency-Key header) and bearer token. */
export function httpCallContext(req: HttpRequest): CallContext {
  const key = req.headers['idempotency-key'];
  const requestId = checkRequestId(typeof key === 'string' ? key : undefined);
  const auth = req.headers['authorization'];
  const token = bearerToken(auth);
  return { requestId, token };
}

/** Writes and deletes of the ACL types are admin actions (docs/security.md "Audit log"). */
function aclAudit(action: string): (req: HttpRequest) => { action: string; target: Record<string, unknown> } | undefined {
  return (req) => {
    const type = req.params['type'] ?? '';
    return ACL_TYPES.has(type) ? { action, target: { type, name: req.params['name'] ?? '' } } : undefined;
  };
}

function freshness(revision: number, lastContact: number | undefined): Record<string, string> {
  const h: Record<string, string> = { 'cairn-revision': String(revision) };
  if (lastContact !== undefined) h['cairn-last-contact-ms'] = String(Math.round(lastContact));
  return h;
}

/** `?limit=`: a decimal page size; empty or absent leaves the server's page maximum. */
function limitParam(v: string | undefined): number | undefined {
  if (v === undefined || v === '') return undefined;
  if (!/^[0-9]{1,9}$/.test(v)) throw invalid(`limit must be a non-negative decimal integer, got ${JSON.stringify(v.slice(0, 32))}`);
  return Number(v);
}

/** The resource endpoints of API.md ("Operations"), over ResourceService. */
export function addResourceRoutes(router: Router, svc: ResourceService): void {
  router.add('PUT', '/v1/resource/:type/:name', async (req) => {
    queryOnly(req, ['partition', 'namespace']);
    const o = bodyObject(req, ['data', 'metadata', 'owner', 'finalizers', 'version', 'status', 'uid'], 'the write');
    const resource = await svc.write(
      {
        type: req.params['type'] ?? '',
        partition: q(req, 'partition'),
        namespace: q(req, 'namespace'),
        name: req.params['name'] ?? '',
        data: o['data'],
        metadata: o['metadata'],
        owner: o['owner'] as ResourceIdJson | null | undefined,
        finalizers: o['finalizers'],
        version: optString(o, 'version'),
        status: o['status'],
        uid: optString(o, 'uid'),
      },
      httpCallContext(req),
    );
    return { status: 200, json: resource };
  }, { access: 'service', audit: aclAudit('acl.write') });

  router.add('GET', '/v1/resource/:type/:name', async (req) => {
    queryOnly(req, ['partition', 'namespace', 'uid', 'consistency']);
    const r = await svc.read(
      { type: req.params['type'] ?? '', partition: q(req, 'partition'), namespace: q(req, 'namespace'), name: req.params['name'] ?? '', uid: q(req, 'uid'), consistency: consistency(req) },
      httpCallContext(req),
    );
    return { status: 200, json: r.resource, headers: freshness(r.revision, r.lastLeaderContactMs) };
  }, { access: 'service' });

  router.add('DELETE', '/v1/resource/:type/:name', async (req) => {
    queryOnly(req, ['partition', 'namespace', 'version', 'uid']);
    const r = await svc.delete(
      { type: req.params['type'] ?? '', partition: q(req, 'partition'), namespace: q(req, 'namespace'), name: req.params['name'] ?? '', version: q(req, 'version'), uid: q(req, 'uid') },
      httpCallContext(req),
    );
    return { status: 200, json: r.resource ? { deleted: r.deleted, resource: r.resource } : { deleted: r.deleted } };
  }, { access: 'service', audit: aclAudit('acl.delete') });

  router.add('PUT', '/v1/resource/:type/:name/status/:key', async (req) => {
    queryOnly(req, ['partition', 'namespace']);
    const o = bodyObject(req, ['uid', 'observed_generation', 'conditions', 'version'], 'the status write');
    const uid = optString(o, 'uid');
    if (uid === undefined) throw invalid('uid is required');
    const resource = await svc.writeStatus(
      {
        type: req.params['type'] ?? '',
        partition: q(req, 'partition'),
        namespace: q(req, 'namespace'),
        name: req.params['name'] ?? '',
        key: req.params['key'] ?? '',
        uid,
        observedGeneration: optString(o, 'observed_generation') ?? '',
        conditions: o['conditions'] ?? [],
        version: optString(o, 'version'),
      },
      httpCallContext(req),
    );
    return { status: 200, json: resource };
  }, { access: 'service' });

  router.add('GET', '/v1/resources/:type', async (req) => {
    queryOnly(req, ['partition', 'namespace', 'name_prefix', 'owner_uid', 'consistency', 'limit', 'continue']);
    const r = await svc.list(
      {
        type: req.params['type'] ?? '',
        partition: q(req, 'partition'),
        namespace: q(req, 'namespace'),
        namePrefix: q(req, 'name_prefix'),
        ownerUid: q(req, 'owner_uid'),
        consistency: consistency(req),
        limit: limitParam(q(req, 'limit')),
        continue: q(req, 'continue'),
      },
      httpCallContext(req),
    );
    const json = { resources: r.resources, revision: String(r.revision), ...(r.continue !== undefined ? { continue: r.continue } : {}) };
    return { status: 200, json, headers: freshness(r.revision, r.lastLeaderContactMs) };
  }, { access: 'service' });
}
