import t from 'tap';
import { CairnError, ErrorCode } from '../base/index.js';
import type { Coordinator } from '../replica/index.js';
import { LocalCluster } from '../replica/testing/index.js';
import { AccessControl, registerAclTypes } from './acl.js';
import { addAclRoutes } from './acl-routes.js';
import { Router, type HttpRequest, type HttpResponse } from './http-server.js';
import { TypeRegistry } from './registry.js';
import { registryWriteHooks } from './write-hooks.js';
import { ResourceService } from './resource-service.js';

const clock = { nowMs: () => Date.now(), monotonicMs: () => performance.now() };

/** Calls a route's handler as the HTTP server would, with a management identity's token. */
async function call(router: Router, method: string, path: string, token: string, body?: unknown): Promise<HttpResponse> {
  const m = router.match(method, path);
  if (m === undefined || m === 'method-not-allowed') throw new Error(`no route ${method} ${path}`);
  const bytes = body === undefined ? Buffer.alloc(0) : Buffer.from(JSON.stringify(body));
  const req = {
    method,
    path,
    params: m.params,
    query: new URLSearchParams(),
    headers: { authorization: `Bearer ${token}` },
    body: bytes,
    remoteAddress: '127.0.0.1',
    connection: {},
    json: () => JSON.parse(bytes.toString('utf8')) as unknown,
  } as unknown as HttpRequest;
  return m.handler(req, undefined as never);
}

t.test('GET /v1/acl/roles and /v1/acl/tokens answer every object, across list pages', async (t) => {
  const registry = new TypeRegistry();
  registerAclTypes(registry);
  const cluster = new LocalCluster({ writeHooks: registryWriteHooks(registry) });
  await cluster.bootstrap(['n1']);
  const leader = await cluster.waitForLeader();
  t.teardown(() => cluster.close());
  const node = { coordinator: (): Promise<Coordinator> => Promise.resolve(leader.coordinator), coordinatorNow: (): Coordinator => leader.coordinator };
  // Pages of two: five roles and three tokens take several pages each.
  const svc = new ResourceService(node, registry, clock, { access: new AccessControl({ enabled: true, clock }), maxPageItems: 2 });
  const router = new Router();
  addAclRoutes(router, { resources: svc, clock });
  const boot = await call(router, 'POST', '/v1/acl/bootstrap', '');
  if (!('json' in boot)) throw new CairnError(ErrorCode.INTERNAL, 'bootstrap answered no JSON');
  const secret = (boot.json as { secret_id: string }).secret_id;
  for (const name of ['r1', 'r2', 'r3', 'r4', 'r5']) {
    const r = await call(router, 'PUT', `/v1/acl/roles/${name}`, secret, { rules: [{ verbs: ['read'], types: ['demo.*'] }] });
    t.equal(r.status, 200, `role ${name} written`);
  }
  for (let i = 0; i < 2; i++) t.equal((await call(router, 'POST', '/v1/acl/tokens', secret, { roles: ['r1'] })).status, 200);
  const roles = await call(router, 'GET', '/v1/acl/roles', secret);
  t.same(((roles as { json: { roles: Array<{ name: string }> } }).json.roles).map((r) => r.name), ['r1', 'r2', 'r3', 'r4', 'r5'], 'every role, though a page holds two');
  const tokens = await call(router, 'GET', '/v1/acl/tokens', secret);
  t.equal((tokens as { json: { tokens: unknown[] } }).json.tokens.length, 3, 'every token (bootstrap and two more)');
});
