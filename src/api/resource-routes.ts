import { CairnError, ErrorCode } from '../base/index.js';
import type { TxnResourceRef } from '../fsm/index.js';
import type { Consistency } from '../replica/index.js';
import { ACL_TYPES } from './audit.js';
import type { HttpRequest, Router } from './http-server.js';
import { atPart, bearerToken, checkRequestId, checkTxnSize, type CallContext, type ResourceService, type TxnAnswer, type TxnCompareRequest, type TxnOpRequest, type TxnRequest } from './resource-service.js';
import { idToJson } from './resource-json.js';
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

/** Fields of a transaction's parts in the JSON body (docs/api.md "Transactions"); anything else is refused. */
const TXN_FIELDS = {
  compare: ['target', 'type', 'partition', 'namespace', 'name', 'version', 'uid'],
  write: ['op', 'type', 'partition', 'namespace', 'name', 'data', 'metadata', 'owner', 'finalizers', 'version', 'status', 'uid', 'lease'],
  delete: ['op', 'type', 'partition', 'namespace', 'name', 'version', 'uid'],
  status: ['op', 'type', 'partition', 'namespace', 'name', 'key', 'uid', 'observed_generation', 'conditions', 'version'],
} as const;

function part(v: unknown, what: string, allowed: readonly string[] | ((o: Record<string, unknown>) => readonly string[])): Record<string, unknown> {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw invalid(`${what} must be a JSON object`);
  const o = v as Record<string, unknown>;
  const fields = typeof allowed === 'function' ? allowed(o) : allowed;
  for (const k of Object.keys(o)) if (!fields.includes(k)) throw invalid(`unknown field ${JSON.stringify(k)} in ${what}; allowed: ${fields.join(', ')}`);
  return o;
}

/**
 * A string field of a transaction's part (`compare[0]`, `then[1]`): a type error names the
 * part in its message and its `part` detail, as the service's checks of a part do.
 */
function partString(o: Record<string, unknown>, k: string, what: string, required: true): string;
function partString(o: Record<string, unknown>, k: string, what: string): string | undefined;
function partString(o: Record<string, unknown>, k: string, what: string, required = false): string | undefined {
  const v = o[k];
  if (!required && (v === undefined || v === null)) return undefined;
  if (typeof v !== 'string') throw atPart(what, invalid(`${k} must be a string`));
  return v;
}

function partArray(v: unknown, what: string): unknown[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v)) throw invalid(`${what} must be an array`);
  return v;
}

/** The body of POST /v1/txn, strictly: unknown fields at any level are refused, naming the part. */
export function parseTxnBody(body: Record<string, unknown>, svc: Pick<ResourceService, 'txnLimits'>): TxnRequest {
  const compare = partArray(body['compare'], 'compare');
  const then = partArray(body['then'], 'then');
  const els = partArray(body['else'], 'else');
  // The counts first: nothing larger than the limits is looked at.
  checkTxnSize(svc.txnLimits, compare.length, then.length, els.length);
  const where = (o: Record<string, unknown>, what: string) => ({ type: partString(o, 'type', what, true), partition: partString(o, 'partition', what), namespace: partString(o, 'namespace', what), name: partString(o, 'name', what, true) });
  const cmp = compare.map((v, i): TxnCompareRequest => {
    const what = `compare[${i}]`;
    const o = part(v, what, TXN_FIELDS.compare);
    return { target: partString(o, 'target', what, true), ...where(o, what), version: partString(o, 'version', what), uid: partString(o, 'uid', what) };
  });
  const ops = (list: unknown[], branch: string): TxnOpRequest[] =>
    list.map((v, i): TxnOpRequest => {
      const what = `${branch}[${i}]`;
      const o = part(v, what, (x) => {
        const op = x['op'];
        if (op !== 'write' && op !== 'delete' && op !== 'status') throw invalid(`${what}.op must be "write", "delete" or "status"`);
        return TXN_FIELDS[op];
      });
      switch (o['op']) {
        case 'write':
          return {
            op: 'write',
            ...where(o, what),
            data: o['data'],
            metadata: o['metadata'],
            owner: o['owner'] as ResourceIdJson | null | undefined,
            finalizers: o['finalizers'],
            version: partString(o, 'version', what),
            status: o['status'],
            uid: partString(o, 'uid', what),
            lease: partString(o, 'lease', what),
          };
        case 'delete':
          return { op: 'delete', ...where(o, what), version: partString(o, 'version', what), uid: partString(o, 'uid', what) };
        default: {
          const uid = partString(o, 'uid', what);
          if (uid === undefined) throw atPart(what, invalid('uid is required for a status write'));
          return {
            op: 'status',
            ...where(o, what),
            key: partString(o, 'key', what, true),
            uid,
            observedGeneration: partString(o, 'observed_generation', what) ?? '',
            conditions: o['conditions'] ?? [],
            version: partString(o, 'version', what),
          };
        }
      }
    });
  return { compare: cmp, then: ops(then, 'then'), else: ops(els, 'else') };
}

/**
 * A transaction's answer as JSON (docs/api.md "Transactions"): revision as a decimal string,
 * each op's resource slim (`{id, version, generation}`, no body).
 */
export function txnAnswerJson(r: TxnAnswer): Record<string, unknown> {
  return {
    succeeded: r.succeeded,
    revision: String(r.revision),
    ...(r.failedComparison !== undefined ? { failed_comparison: r.failedComparison } : {}),
    results: r.results.map((x) =>
      x.op === 'delete'
        ? { op: 'delete', deleted: x.deleted, deleting: x.deleting, ...(x.resource !== null ? { resource: txnRefJson(x.resource) } : {}) }
        : x.op === 'write'
          ? { op: 'write', changed: x.changed, resource: txnRefJson(x.resource) }
          : { op: 'status', resource: txnRefJson(x.resource) },
    ),
  };
}

function txnRefJson(r: TxnResourceRef): { id: ResourceIdJson; version: string; generation: string } {
  return { id: idToJson(r.id), version: String(r.version), generation: r.generation };
}

/** The resource endpoints of API.md ("Operations"), over ResourceService. */
export function addResourceRoutes(router: Router, svc: ResourceService): void {
  router.add('PUT', '/v1/resource/:type/:name', async (req) => {
    queryOnly(req, ['partition', 'namespace']);
    const o = bodyObject(req, ['data', 'metadata', 'owner', 'finalizers', 'version', 'status', 'uid', 'lease'], 'the write');
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
        lease: optString(o, 'lease'),
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

  router.add('POST', '/v1/txn', async (req) => {
    queryOnly(req, []);
    const o = bodyObject(req, ['compare', 'then', 'else'], 'the transaction');
    const r = await svc.txn(parseTxnBody(o, svc), httpCallContext(req));
    return { status: 200, json: txnAnswerJson(r), headers: { 'cairn-revision': String(r.revision) } };
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
