import { errorBody, httpStatusOf, toCairnError } from '../errors.js';
import type { ResourceIdJson } from '../resource-json.js';
import type { ResourceService } from '../resource-service.js';
import { JsonText, type ApiResult, type ResourceApiTarget } from './target.js';

async function settle<T>(p: () => Promise<T>): Promise<ApiResult<T>> {
  try {
    return { ok: true, value: await p() };
  } catch (e) {
    const err = toCairnError(e);
    // The same mapping the HTTP server applies (errors.ts), so in-process answers compare
    // one-to-one with the HTTP targets'.
    const { code, message, ...details } = errorBody(err).error;
    return { ok: false, error: { code: String(code), message: String(message), httpStatus: httpStatusOf(err), details } };
  }
}

/**
 * The resource API in-process: ResourceService calls, with the arguments an HTTP request would
 * carry, over whatever coordinator the service was built with. No HTTP parsing is involved, so
 * this target has no `raw`.
 */
export function serviceTarget(name: string, svc: ResourceService): ResourceApiTarget {
  return {
    name,
    write: (type, n, ten, b) =>
      settle(() =>
        svc.write({
          type,
          name: n,
          partition: ten.partition,
          namespace: ten.namespace,
          data: b.data instanceof JsonText ? (JSON.parse(b.data.text) as unknown) : b.data,
          metadata: b.metadata,
          owner: b.owner as ResourceIdJson | null | undefined,
          finalizers: b.finalizers,
          version: b.version,
          status: b.status,
          uid: b.uid,
        }),
      ),
    read: (type, n, q) =>
      settle(async () => (await svc.read({ type, name: n, partition: q.partition, namespace: q.namespace, uid: q.uid, consistency: q.consistency ?? 'linearizable' })).resource),
    delete: (type, n, q) =>
      settle(async () => {
        const r = await svc.delete({ type, name: n, partition: q.partition, namespace: q.namespace, version: q.version, uid: q.uid });
        // As resource-routes.ts shapes it: `resource` only when there is one.
        return r.resource ? { deleted: r.deleted, resource: r.resource } : { deleted: r.deleted };
      }),
    writeStatus: (type, n, key, ten, b) =>
      settle(() =>
        svc.writeStatus({
          type,
          name: n,
          key,
          partition: ten.partition,
          namespace: ten.namespace,
          uid: b.uid ?? '',
          observedGeneration: b.observed_generation ?? '',
          conditions: b.conditions ?? [],
          version: b.version,
        }),
      ),
    list: (type, q) =>
      settle(async () => {
        const r = await svc.list({
          type,
          partition: q.partition,
          namespace: q.namespace,
          namePrefix: q.name_prefix,
          ownerUid: q.owner_uid,
          consistency: q.consistency ?? 'linearizable',
          limit: q.limit === undefined ? undefined : Number(q.limit),
          continue: q.continue,
        });
        return { resources: r.resources, revision: String(r.revision), ...(r.continue !== undefined ? { continue: r.continue } : {}) };
      }),
  };
}
