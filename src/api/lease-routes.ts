import { CairnError, ErrorCode } from '../base/index.js';
import type { HttpRequest, Router } from './http-server.js';
import { checkTtlSeconds, type LeaseTtlAnswer, type LeaseService } from './lease-service.js';
import { httpCallContext } from './resource-routes.js';

function invalid(msg: string): CairnError {
  return new CairnError(ErrorCode.INVALID_ARGUMENT, msg);
}

function queryOnly(req: HttpRequest, allowed: readonly string[]): void {
  for (const k of req.query.keys()) {
    if (!allowed.includes(k)) throw invalid(`unknown query parameter ${JSON.stringify(k)}; allowed: ${allowed.length > 0 ? allowed.join(', ') : 'none'}`);
  }
}

/** A JSON object body with only `allowed` fields; an empty body is `{}` when `emptyOk`. */
function bodyObject(req: HttpRequest, allowed: readonly string[], what: string, emptyOk = false): Record<string, unknown> {
  if (emptyOk && req.body.length === 0) return {};
  const v = req.json();
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw invalid(`${what} must be a JSON object`);
  const o = v as Record<string, unknown>;
  for (const k of Object.keys(o)) if (!allowed.includes(k)) throw invalid(`unknown field ${JSON.stringify(k)} in ${what}; allowed: ${allowed.join(', ') || 'none'}`);
  return o;
}

function ttlJson(r: LeaseTtlAnswer): Record<string, unknown> {
  return {
    id: r.id,
    ttl_seconds: r.ttlSeconds,
    remaining_seconds: r.remainingSeconds,
    // Whole milliseconds, rounded down (never more than the leader's clock has left).
    remaining_ms: Math.floor(r.remainingMs),
    ...(r.attached !== undefined ? { attached: r.attached } : {}),
  };
}

/** The lease endpoints (docs/api.md "Leases"), over LeaseService. */
export function addLeaseRoutes(router: Router, svc: LeaseService): void {
  router.add('POST', '/v1/leases', async (req) => {
    queryOnly(req, []);
    const o = bodyObject(req, ['ttl_seconds', 'id'], 'the lease grant');
    if (o['ttl_seconds'] === undefined) throw invalid('ttl_seconds is required');
    checkTtlSeconds(o['ttl_seconds'], 'ttl_seconds');
    if (o['id'] !== undefined && o['id'] !== null && typeof o['id'] !== 'string') throw invalid('id must be a string');
    const r = await svc.grant({ ttlSeconds: o['ttl_seconds'], id: o['id'] }, httpCallContext(req));
    return { status: 200, json: { id: r.id, ttl_seconds: r.ttlSeconds } };
  }, { access: 'service' });

  router.add('GET', '/v1/leases', async (req) => {
    queryOnly(req, []);
    const r = await svc.list(httpCallContext(req));
    return { status: 200, json: { leases: r.leases.map((l) => ({ id: l.id, ttl_seconds: l.ttlSeconds })) } };
  }, { access: 'service' });

  router.add('GET', '/v1/leases/:id', async (req) => {
    queryOnly(req, ['attached']);
    const a = req.query.getAll('attached');
    if (a.length > 1 || (a[0] !== undefined && a[0] !== 'true' && a[0] !== 'false')) throw invalid('attached must be true or false, once');
    const r = await svc.timeToLive(req.params['id'] ?? '', a[0] === 'true', httpCallContext(req));
    return { status: 200, json: ttlJson(r) };
  }, { access: 'service' });

  router.add('POST', '/v1/leases/:id/keepalive', async (req) => {
    queryOnly(req, []);
    bodyObject(req, [], 'the keep-alive', true);
    const r = await svc.keepAlive(req.params['id'] ?? '', httpCallContext(req));
    return { status: 200, json: ttlJson(r) };
  }, { access: 'service' });

  router.add('DELETE', '/v1/leases/:id', async (req) => {
    queryOnly(req, []);
    const r = await svc.revoke(req.params['id'] ?? '', httpCallContext(req));
    return { status: 200, json: { id: r.id, deleted: r.deleted, revision: String(r.revision) }, headers: { 'cairn-revision': String(r.revision) } };
  }, { access: 'service' });
}
