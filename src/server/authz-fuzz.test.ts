import * as grpc from '@grpc/grpc-js';
import fc from 'fast-check';
import * as https from 'node:https';
import t from 'tap';
import { refAuthorize, type RefIdentity } from '../auth/testing/index.js';
import type { Resource } from '../store/index.js';
import { closeHttpsAgents, grpcKeepAlive, grpcUnary, makeSuiteIdentities, makeToken, pb, startSecureNode, SCOPED_RULES, type SecureNode, type SuiteIdentities } from './testing/index.js';

/**
 * Issue 16's fuzzer: random tokens (absent, garbage, well-formed but unknown, forged, revoked,
 * valid read-only, valid namespace-scoped), random methods and paths (every real route pattern
 * with random parameters, percent-encoding, traversal, huge values), random headers and bodies,
 * over HTTPS and gRPC, against one in-process node with TLS and ACLs on. After every request:
 * the answer is well-formed (JSON error or success; a gRPC status), the node still answers, and
 * the store changed only if the caller was allowed to change what changed, judged by the naive
 * reference model (src/auth/testing/acl-reference.ts), not by the server's own `authorize`.
 *
 * FUZZ_RUNS (default 10,000 requests: 7,000 HTTP, 3,000 gRPC) and FC_SEED replay a run; the
 * seed is printed first.
 */

const RUNS = Number(process.env['FUZZ_RUNS'] ?? 10_000);
const SEED = process.env['FC_SEED'] !== undefined ? Number(process.env['FC_SEED']) : Date.now() % 2 ** 31;
const HTTP_RUNS = Math.round(RUNS * 0.7);
const GRPC_RUNS = RUNS - HTTP_RUNS;

let node: SecureNode;
let ids: SuiteIdentities;
let revoked: string;
let routes: Array<{ method: string; pattern: string }>;

type TokenKind = 'absent' | 'empty' | 'garbage' | 'unknown' | 'forged' | 'revoked' | 'reader' | 'scoped';
const TOKEN_KINDS: TokenKind[] = ['absent', 'empty', 'garbage', 'unknown', 'forged', 'revoked', 'reader', 'scoped'];
const SCOPED_MODEL: RefIdentity = { kind: 'token', accessorId: 's', roles: ['team-a'], management: false, rules: SCOPED_RULES.map((r) => ({ partitions: ['*'], namePrefix: '', ...r })) };

function tokenFor(kind: TokenKind, garbage: string): string | undefined {
  switch (kind) {
    case 'absent':
      return undefined;
    case 'empty':
      return '';
    case 'garbage':
      return garbage;
    case 'unknown':
      return `cairn_nobody-here_${'ab'.repeat(32)}`;
    case 'forged':
      return `cairn_${ids.scopedAccessor}_${'0'.repeat(64)}`;
    case 'revoked':
      return revoked;
    case 'reader':
      return ids.reader;
    case 'scoped':
      return ids.scoped;
  }
}

// ---- The store, before and after ------------------------------------------------------------------

function snapshotStore(): Map<string, Resource> {
  const c = node.agent.coordinator();
  if (c === undefined) throw new Error('the node is not running');
  const out = new Map<string, Resource>();
  for (const r of c.storeNow().all()) out.set(`${r.id.type.group}/${r.id.type.kind}/${r.id.tenancy.partition}/${r.id.tenancy.namespace}/${r.id.name}`, r);
  return out;
}

/** What changed between two snapshots: resources added, removed or at another version. */
function changed(before: Map<string, Resource>, after: Map<string, Resource>): Resource[] {
  const out: Resource[] = [];
  for (const [k, r] of after) {
    const b = before.get(k);
    if (b === undefined || b.version !== r.version) out.push(r);
  }
  for (const [k, r] of before) if (!after.has(k)) out.push(r);
  return out;
}

/** Whether the scoped token (by the naive model) could have made this change: write, write-status or delete on it. */
function scopedMay(r: Resource): boolean {
  const target = { group: r.id.type.group, groupVersion: r.id.type.groupVersion, kind: r.id.type.kind, partition: r.id.tenancy.partition, namespace: r.id.tenancy.namespace, name: r.id.name };
  return ['write', 'write-status', 'delete'].some((v) => refAuthorize(SCOPED_MODEL, v, target));
}

/**
 * The lease table (ids, TTLs and attached uids): no caller of the fuzz holds a grant on leases,
 * so it never changes after the fixture's, nor may any caller attach a resource to a lease
 * (attaching needs write on the lease; docs/security.md "Leases").
 */
function leaseTable(): string {
  return JSON.stringify([...(node.agent.coordinator()?.leaseTable().leases.entries() ?? [])].map(([id, l]) => [id, l.ttlSeconds, [...l.attached]]));
}
let fixtureLeases = '';

function checkStore(kind: TokenKind, before: Map<string, Resource>, what: string): void {
  if (leaseTable() !== fixtureLeases) throw new Error(`${what}: a ${kind} caller changed the lease table: ${leaseTable()}`);
  const diff = changed(before, snapshotStore());
  if (diff.length === 0) return;
  const names = diff.map((r) => `${r.id.type.group}.${r.id.type.kind} ${r.id.tenancy.partition}/${r.id.tenancy.namespace}/${r.id.name}`);
  if (kind !== 'scoped') throw new Error(`${what}: a ${kind} caller changed the store: ${names.join(', ')}`);
  const bad = diff.filter((r) => !scopedMay(r));
  if (bad.length > 0) throw new Error(`${what}: the team-a token changed what it may not: ${names.join(', ')}`);
}

// ---- HTTP -----------------------------------------------------------------------------------------

interface Answer {
  status: number;
  contentType: string;
  body: Buffer;
}

/** One request; a watch stream that opens is read for a moment, then cut. */
function send(method: string, path: string, headers: Record<string, string>, body: Buffer | undefined): Promise<Answer> {
  const addr = node.agent.httpAddress;
  const host = addr.slice(0, addr.lastIndexOf(':'));
  const port = Number(addr.slice(addr.lastIndexOf(':') + 1));
  return new Promise((resolve, reject) => {
    const req = https.request({ host, port, method, path, headers, ca: node.ca, agent: keepAlive }, (res) => {
      const chunks: Buffer[] = [];
      const ct = String(res.headers['content-type'] ?? '');
      const done = (): void => resolve({ status: res.statusCode ?? 0, contentType: ct, body: Buffer.concat(chunks) });
      if (ct.includes('stream=watch')) {
        // An open watch: take what comes for a moment (its initial state), then hang up.
        const cut = setTimeout(() => {
          req.destroy();
          done();
        }, 30);
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          clearTimeout(cut);
          done();
        });
        res.on('error', () => undefined);
        return;
      }
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', done);
      res.on('error', reject);
    });
    req.on('error', (e) => (req.destroyed ? undefined : reject(e)));
    req.setTimeout(10_000, () => req.destroy(new Error(`${method} ${path.slice(0, 100)}: no answer in 10 s`)));
    if (body !== undefined) req.write(body);
    req.end();
  });
}
let keepAlive: https.Agent;
let requestIds = 0;

const TYPES = ['demo.v1.Artist', 'demo.v2.Artist', 'demo.Artist', 'demo.v1.Album', 'demo.v1.Executive', 'demo.v1.RecordLabel', 'cairn.v1.ACLToken', 'cairn.v1.ACLRole', 'cairn.v1.Nope', 'Demo.V1.Artist'];
const NAMES = ['a1', 'b1', 'x', 'team-a', 'anonymous', 'bootstrap', 'global-management', 'reader', 'fz'];
const hostile = fc.oneof(
  fc.constantFrom('..', '%2e%2e', '%2E%2E%2F', '.', '%00', '%', '%zz', '%2F', '%2f..%2f', '\u00e9', '%C3%A9', '*', '%2A', '?', '#', ' ', '%20', 'a'.repeat(300), '-', '_', '~'),
  fc.string({ maxLength: 20 }).map((s) => encodeURIComponent(s)),
  fc.nat(20_000).map((n) => 'x'.repeat(n)),
);
const paramArb = (name: string): fc.Arbitrary<string> =>
  name === 'type' ? fc.oneof(fc.constantFrom(...TYPES), hostile) : fc.oneof({ weight: 3, arbitrary: fc.constantFrom(...NAMES) }, { weight: 2, arbitrary: hostile });
const queryArb = fc.oneof(
  { weight: 3, arbitrary: fc.constant('') },
  { weight: 4, arbitrary: fc.tuple(fc.constantFrom('team-a', 'team-b', '*', '', '%2A', 'team-a/../team-b', 'TEAM-A'), fc.constantFrom('', 'default', '*', 'other')).map(([n, p]) => `?namespace=${n}${p !== '' ? `&partition=${p}` : ''}`) },
  { weight: 1, arbitrary: fc.constantFrom('?namespace=team-a&namespace=team-b', '?owner_uid=x&namespace=*', '?name_prefix=a&namespace=*', '?uid=1', '?version=0&namespace=team-a', '?consistency=stale', '?&&&=', '?namespace') },
  { weight: 1, arbitrary: fc.string({ maxLength: 30 }).map((s) => `?${encodeURIComponent(s)}=${encodeURIComponent(s)}`) },
);

const segmentArb = (p: string): fc.Arbitrary<string> =>
  p.startsWith(':') ? paramArb(p.slice(1)) : fc.oneof({ weight: 19, arbitrary: fc.constant(p) }, { weight: 1, arbitrary: fc.constantFrom(p.toUpperCase(), `${p}%2F`, `${p}/`, `/${p}`, '..', '%2e%2e') });

/** A route (its method, mostly) with random parameters, or a random path; then a query. */
function routeArb(): fc.Arbitrary<{ method: string; pattern: string; path: string }> {
  const fromRoute = fc.constantFrom(...routes).chain((r) => {
    const parts = r.pattern.split('/').filter((p) => p !== '');
    return fc.tuple(fc.oneof({ weight: 8, arbitrary: fc.constant(r.method) }, { weight: 1, arbitrary: fc.constantFrom('GET', 'PUT', 'POST', 'DELETE', 'PATCH', 'OPTIONS') }), ...parts.map(segmentArb)).map(([m, ...segs]) => ({ method: m, pattern: r.pattern, path: `/${segs.join('/')}` }));
  });
  const random = fc.tuple(fc.constantFrom('GET', 'PUT', 'POST', 'DELETE'), fc.array(hostile, { minLength: 0, maxLength: 5 })).map(([m, s]) => ({ method: m, pattern: '', path: `/${s.join('/')}` }));
  return fc.tuple(fc.oneof({ weight: 9, arbitrary: fromRoute }, { weight: 1, arbitrary: random }), queryArb).map(([r, q]) => ({ ...r, path: r.path + q }));
}

const ownerArb = fc.record({ type: fc.constantFrom('demo.v1.Artist', 'demo.v1.Album'), tenancy: fc.record({ partition: fc.constantFrom('default'), namespace: fc.constantFrom('team-a', 'team-b') }), name: fc.constantFrom('a1', 'b1', 'x'), uid: fc.constantFrom('', 'x') });
/** Bodies shaped for each route, so requests get past parsing to the access checks and the store. */
const routeBodyArb = (pattern: string): fc.Arbitrary<unknown> => {
  switch (pattern) {
    case '/v1/leases':
      return fc.record({ ttl_seconds: fc.constantFrom(0, 1, 10, -1, 1.5, 9_000_000_001, '10'), id: fc.option(fc.constantFrom('fz', 'new', 'UP', '', 'x'.repeat(70)), { nil: undefined }) }, { requiredKeys: [] });
    case '/v1/leases/:id/keepalive':
      return fc.constantFrom({}, { x: 1 });
    case '/v1/resource/:type/:name':
      return fc.record({ lease: fc.option(fc.constantFrom('fz', 'nope', '', 'UP'), { nil: undefined }), data: fc.oneof(fc.record({ name: fc.constantFrom('n', 'm') }), fc.record({ title: fc.constant('t') }), fc.constant({ rules: [{ verbs: ['admin'], types: ['*'] }] }), fc.constant({ secret_hash: `sha256:${'0'.repeat(64)}`, roles: ['global-management'] })), owner: fc.option(ownerArb, { nil: undefined }), finalizers: fc.option(fc.constantFrom([], ['a.io/x']), { nil: undefined }), version: fc.option(fc.constantFrom('0', '1'), { nil: undefined }) }, { requiredKeys: ['data'] });
    case '/v1/resource/:type/:name/status/:key':
      return fc.record({ uid: fc.constantFrom('x', ''), observed_generation: fc.constant('g'), conditions: fc.constant([{ type: 'Ready', state: 'TRUE', reason: '', message: '' }]) });
    case '/v1/watch':
      return fc.array(fc.record({ type: fc.constantFrom(...TYPES), namespace: fc.constantFrom('team-a', 'team-b', '*') }), { minLength: 1, maxLength: 3 });
    case '/v1/acl/tokens':
      return fc.record({ roles: fc.array(fc.constantFrom('global-management', 'team-a', 'reader'), { minLength: 1, maxLength: 2 }) });
    case '/v1/acl/roles/:name':
      return fc.record({ rules: fc.constant([{ verbs: ['admin'], types: ['*'] }]) });
    default:
      return fc.jsonValue({ maxDepth: 2 });
  }
};

const bodyArb: fc.Arbitrary<Buffer | undefined> = fc.oneof(
  { weight: 2, arbitrary: fc.constant(undefined) },
  { weight: 1, arbitrary: fc.constant(Buffer.alloc(0)) },
  { weight: 4, arbitrary: fc.jsonValue({ maxDepth: 3 }).map((v) => Buffer.from(JSON.stringify(v))) },
  {
    weight: 6,
    arbitrary: fc
      .record({
        data: fc.oneof(fc.record({ name: fc.string({ maxLength: 10 }) }), fc.record({ title: fc.string({ maxLength: 5 }) }), fc.record({ rules: fc.constant([{ verbs: ['admin'], types: ['*'] }]) }), fc.jsonValue({ maxDepth: 2 })),
        owner: fc.option(fc.record({ type: fc.constantFrom(...TYPES), tenancy: fc.record({ partition: fc.constantFrom('default', ''), namespace: fc.constantFrom('team-a', 'team-b', '') }), name: fc.constantFrom(...NAMES), uid: fc.string({ maxLength: 5 }) }), { nil: undefined }),
        finalizers: fc.option(fc.array(fc.constantFrom('a.io/x', '', 'cairn.io/acl-bootstrap')), { nil: undefined }),
        version: fc.option(fc.constantFrom('0', '1', 'x', '-1', '99999999999999999999'), { nil: undefined }),
        roles: fc.option(fc.array(fc.constantFrom('global-management', 'team-a', 'reader', 'X')), { nil: undefined }),
        rules: fc.option(fc.constant([{ verbs: ['admin'], types: ['*'] }]), { nil: undefined }),
        uid: fc.option(fc.string({ maxLength: 8 }), { nil: undefined }),
        observed_generation: fc.option(fc.string({ maxLength: 8 }), { nil: undefined }),
        conditions: fc.option(fc.constant([{ type: 'Ready', state: 'TRUE', reason: '', message: '' }]), { nil: undefined }),
      }, { requiredKeys: [] })
      .map((o) => Buffer.from(JSON.stringify(o))),
  },
  { weight: 2, arbitrary: fc.array(fc.record({ type: fc.constantFrom(...TYPES), namespace: fc.constantFrom('team-a', 'team-b', '*'), gt_revision: fc.option(fc.constantFrom('0', '1', 'x'), { nil: undefined }) }), { maxLength: 3 }).map((w) => Buffer.from(JSON.stringify(w))) },
  { weight: 1, arbitrary: fc.uint8Array({ maxLength: 64 }).map((b) => Buffer.from(b)) },
  { weight: 1, arbitrary: fc.constantFrom(Buffer.from('{"data":'), Buffer.from('\u0000'), Buffer.from('[]'), Buffer.from('null'), Buffer.from('{"__proto__":{"admin":true},"data":{"name":"p"}}')) },
);

const httpRequestArb = (): fc.Arbitrary<{ method: string; path: string; token: TokenKind; garbage: string; contentType: string | undefined; body: Buffer | undefined }> =>
  routeArb().chain((r) =>
    fc.record({
      method: fc.constant(r.method),
      path: fc.constant(r.path),
      token: fc.constantFrom(...TOKEN_KINDS),
      garbage: fc.oneof(fc.string({ minLength: 1, maxLength: 40 }).filter((s) => /^[\x21-\x7e]+$/.test(s)), fc.constantFrom(`cairn_${'a'.repeat(64)}_${'0'.repeat(64)}`, 'cairn_a_b', 'x'.repeat(3000))),
      contentType: fc.oneof({ weight: 12, arbitrary: fc.constant('application/json') }, { weight: 1, arbitrary: fc.constantFrom(undefined, 'text/plain', 'application/octet-stream', 'application/json; charset=utf-8') }),
      body: fc.oneof({ weight: 6, arbitrary: routeBodyArb(r.pattern).map((v) => Buffer.from(JSON.stringify(v))) }, { weight: 3, arbitrary: bodyArb }),
    }),
  );

/** Answers a caller without a valid token may get a 2xx for: the public routes. */
function publicAnswer(json: unknown): boolean {
  if (typeof json !== 'object' || json === null) return false;
  const o = json as Record<string, unknown>;
  return o['status'] === 'ok' || 'ready' in o || ('grpc_address' in o && 'http_address' in o) || (o['anonymous'] === true && o['acl'] === true);
}

t.before(async () => {
  node = await startSecureNode();
  ids = await makeSuiteIdentities(node);
  keepAlive = new https.Agent({ keepAlive: true, maxSockets: 4, ca: node.ca });
  routes = node.routes;
  const gone = await makeToken(node, ids.management, ['team-a']);
  const d = await node.http('DELETE', `/v1/acl/tokens/${gone.accessor}`, { token: ids.management });
  if (d.status !== 200) throw new Error(`revoke: ${d.status}`);
  revoked = gone.secret;
  // Something to find: items in both namespaces, an owner with a child in the other one.
  for (const [space, name] of [['team-a', 'a1'], ['team-b', 'b1'], ['team-a', 'x'], ['team-b', 'x']] as const) {
    const r = await node.http('PUT', `/v1/resource/demo.v1.Artist/${name}?namespace=${space}`, { token: ids.management, body: JSON.stringify({ data: { name } }) });
    if (r.status !== 200) throw new Error(`fixture: ${r.status} ${r.text}`);
  }
  const owner = (await node.http('GET', '/v1/resource/demo.v1.Artist/a1?namespace=team-a', { token: ids.management })).json as { id: unknown };
  // A lease to find (and to try to revoke, keep alive, attach to).
  const l = await node.http('POST', '/v1/leases', { token: ids.management, body: JSON.stringify({ ttl_seconds: 3600, id: 'fz' }) });
  if (l.status !== 200) throw new Error(`lease fixture: ${l.status} ${l.text}`);
  fixtureLeases = leaseTable();
  await node.http('PUT', '/v1/resource/demo.v1.Album/b-child?namespace=team-b', { token: ids.management, body: JSON.stringify({ data: { title: 't' }, owner: owner.id }) });
});

t.teardown(async () => {
  keepAlive?.destroy();
  await node?.close();
  closeHttpsAgents();
});

const stats = { http: 0, grpc: 0, statuses: new Map<string, number>() };
const count = (k: string): void => void stats.statuses.set(k, (stats.statuses.get(k) ?? 0) + 1);

t.test(`HTTP: ${HTTP_RUNS} random requests (seed ${SEED}): well-formed answers, no crash, no unauthorized change`, async (t) => {
  t.comment(`fast-check seed ${SEED} (replay: FC_SEED=${SEED} FUZZ_RUNS=${RUNS})`);
  const started = performance.now();
  await fc.assert(
    fc.asyncProperty(httpRequestArb(), async (r) => {
      const token = tokenFor(r.token, r.garbage);
      const headers: Record<string, string> = {};
      if (token !== undefined) headers['authorization'] = `Bearer ${token}`;
      if (r.contentType !== undefined && r.body !== undefined) headers['content-type'] = r.contentType;
      // Node's client sends a GET or DELETE body without a length unless told: say it, or the
      // body would reach the server as the start of the next request on the kept-alive socket.
      if (r.body !== undefined) headers['content-length'] = String(r.body.length);
      const what = `${r.method} ${r.path.slice(0, 120)} (token ${r.token})`;
      const before = snapshotStore();
      // Characters a client cannot put in a request line raw go percent-encoded (Node's client refuses them).
      const a = await send(r.method, r.path.replace(/[^\x21-\x7e]/g, (c) => encodeURIComponent(c)), headers, r.body);
      stats.http++;
      count(`http ${a.status}`);
      if (a.status >= 500 && a.status !== 503) throw new Error(`${what}: ${a.status} ${a.body.toString('utf8').slice(0, 300)}`);
      // Well-formed: JSON (an error body with a code, or a result), except the known non-JSON answers.
      const text = a.body.toString('utf8');
      const json = r.method === 'HEAD' || a.contentType.includes('stream=watch') || a.contentType.startsWith('text/plain') || a.contentType === 'application/octet-stream' ? undefined : (JSON.parse(text) as unknown);
      if (a.status >= 400 && r.method !== 'HEAD' && typeof (json as { error?: { code?: unknown } } | undefined)?.error?.code !== 'string') throw new Error(`${what}: ${a.status} without a JSON error body: ${text.slice(0, 200)}`);
      // A caller without a valid token gets a 2xx only from a public route.
      if (['garbage', 'unknown', 'forged', 'revoked'].includes(r.token) && a.status < 300 && !publicAnswer(json)) throw new Error(`${what}: an invalid token got ${a.status}: ${text.slice(0, 200)}`);
      if (a.status < 300 && (a.contentType === 'application/octet-stream' || a.contentType.startsWith('text/plain'))) throw new Error(`${what}: a non-management caller got the snapshot or the metrics`);
      checkStore(r.token, before, what);
    }),
    { numRuns: HTTP_RUNS, seed: SEED, endOnFailure: true },
  );
  const h = await node.http('GET', '/healthz');
  t.equal(h.status, 200, 'the node still answers /healthz');
  t.comment(`${stats.http} HTTP requests in ${((performance.now() - started) / 1000).toFixed(1)} s; statuses ${JSON.stringify(Object.fromEntries([...stats.statuses].filter(([k]) => k.startsWith('http'))))}`);
});

// ---- gRPC -----------------------------------------------------------------------------------------

const METHODS = ['Read', 'Write', 'WriteStatus', 'Delete', 'List', 'ListByOwner', 'WatchList', 'WatchListBatched', 'LeaseGrant', 'LeaseRevoke', 'LeaseTimeToLive', 'LeaseList', 'LeaseKeepAlive', 'Nope'];
const GRPC_CODES = new Set([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 14, 15, 16]); // 13 INTERNAL is a bug

const idArb = fc.record({
  type: fc.oneof({ weight: 6, arbitrary: fc.constantFrom('demo.v1.Artist', 'demo.v1.Album', 'demo.v1.Artist', 'cairn.v1.ACLToken', 'cairn.v1.ACLRole') }, { weight: 1, arbitrary: fc.constantFrom(...TYPES) }, { weight: 1, arbitrary: fc.string({ maxLength: 20 }) }),
  tenancy: fc.option(fc.record({ partition: fc.constantFrom('default', 'default', 'default', '', 'other'), namespace: fc.constantFrom('team-a', 'team-b', 'team-a', 'team-b', '', '..') }), { freq: 8, nil: undefined }),
  name: fc.oneof({ weight: 6, arbitrary: fc.constantFrom(...NAMES) }, { weight: 1, arbitrary: fc.string({ maxLength: 70 }) }),
  uid: fc.constantFrom('', 'x'),
});
const grpcRequestArb = fc.record({
  method: fc.constantFrom(...METHODS),
  token: fc.constantFrom(...TOKEN_KINDS),
  garbage: fc.string({ minLength: 1, maxLength: 40 }).filter((s) => /^[\x21-\x7e]+$/.test(s)),
  raw: fc.oneof({ weight: 5, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: fc.uint8Array({ maxLength: 80 }) }),
  message: fc.record({
    id: idArb,
    dataJson: fc.oneof({ weight: 6, arbitrary: fc.constantFrom('{"name":"g"}', '{"title":"t"}', '{"rules":[{"verbs":["admin"],"types":["*"]}]}', '{"secret_hash":"sha256:0000000000000000000000000000000000000000000000000000000000000000","roles":["global-management"]}') }, { weight: 1, arbitrary: fc.constantFrom('', '{', 'null') }, { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 2 }).map((v) => JSON.stringify(v)) }),
    version: fc.constantFrom('', '', '', '0', '1', 'x'),
    key: fc.constantFrom('demo.v1.fuzz', 'demo.v1.fuzz', 'demo.v1.fuzz', '', 'X'),
    observedGeneration: fc.constantFrom('', 'g'),
    conditions: fc.constant([{ type: 'Ready', state: 'TRUE' }]),
    type: fc.oneof({ weight: 8, arbitrary: fc.constantFrom(...TYPES) }, { weight: 1, arbitrary: fc.string({ maxLength: 20 }) }),
    tenancy: fc.record({ partition: fc.constantFrom('*', '*', 'default', ''), namespace: fc.constantFrom('*', 'team-a', 'team-b', '') }),
    namePrefix: fc.constantFrom('', 'a', 'A', '-'),
    ownerUid: fc.constantFrom('', 'x', 'zzzz'),
    // A write's lease: absent, the fixture's lease (attaching needs write on it: none may), or detach.
    lease: fc.option(fc.constantFrom('fz', ''), { nil: undefined }),
    // Never a key another request used: a caller reusing its own key for another operation gets
    // 500 INTERNAL (a bug, a todo test in authz-table.test.ts), which would end every run here.
    // (Reuse across callers, which leaked the first caller's result, is fixed and tested there.)
    requestId: fc.constantFrom('', '', '', '', 'fresh', 'x'.repeat(200)),
    // The lease methods' fields (their `id` is a lease id, not a ResourceId).
    leaseId: fc.oneof({ weight: 4, arbitrary: fc.constantFrom('fz', 'new', 'svc-1', '') }, { weight: 1, arbitrary: fc.string({ maxLength: 70 }) }),
    ttlSeconds: fc.constantFrom(0, 1, 60, -1, 9_000_000_001),
    attached: fc.boolean(),
    watches: fc.array(fc.record({ type: fc.constantFrom(...TYPES), tenancy: fc.record({ partition: fc.constantFrom('*', 'default'), namespace: fc.constantFrom('*', 'team-a', 'team-b') }), gtRevision: fc.constantFrom('', '1', 'x') }), { maxLength: 3 }),
  }),
});

function watchOnce(method: string, bytes: Buffer, md: grpc.Metadata): Promise<number> {
  return new Promise((resolve) => {
    const call = node.grpc.makeServerStreamRequest(`/cairn.resource.v1.ResourceService/${method}`, (b: Buffer) => b, (b: Buffer) => b, bytes, md, { deadline: Date.now() + 10_000 });
    let settled = false;
    const finish = (code: number): void => {
      if (settled) return;
      settled = true;
      clearTimeout(cut);
      call.cancel();
      resolve(code);
    };
    // An open watch sends its initial state at once: the first message means "open".
    const cut = setTimeout(() => finish(0), 3_000);
    call.on('data', () => finish(0));
    call.on('error', (e: grpc.ServiceError) => finish(e.code));
    call.on('status', (s: grpc.StatusObject) => finish(s.code));
  });
}

t.test(`gRPC: ${GRPC_RUNS} random calls (seed ${SEED}): a status for each, no crash, no unauthorized change`, async (t) => {
  const started = performance.now();
  await fc.assert(
    fc.asyncProperty(grpcRequestArb, async (r) => {
      const token = tokenFor(r.token, r.garbage);
      const what = `gRPC ${r.method} (token ${r.token}) ${r.raw !== undefined ? `raw ${Buffer.from(r.raw).toString('hex').slice(0, 80)}` : JSON.stringify(r.message).slice(0, 200)}`;
      const before = snapshotStore();
      let code: number;
      if (r.method === 'WatchList' || r.method === 'WatchListBatched') {
        const md = new grpc.Metadata();
        if (token !== undefined) md.set('authorization', `Bearer ${token}`);
        const bytes = r.raw !== undefined ? Buffer.from(r.raw) : Buffer.from(pb.WatchListRequest.encode(pb.WatchListRequest.fromObject({ watches: r.message.watches })).finish());
        code = await watchOnce(r.method, bytes, md);
      } else if (r.method === 'LeaseKeepAlive') {
        // A refusal is an answer on the stream (error_code); a renewal by these tokens would be a bug.
        const k = await grpcKeepAlive(node.grpc, [r.message.leaseId], token);
        // The stream's status, or the answer's refusal as the status a unary call would have had.
        const refusal = k.answers[0]?.['errorCode'];
        const ANSWER_CODES: Record<string, number> = { INVALID_ARGUMENT: 3, NOT_FOUND: 5, PERMISSION_DENIED: 7, RATE_LIMITED: 8, UNAVAILABLE: 14, UNAUTHENTICATED: 16 };
        code = typeof refusal === 'string' && refusal !== '' ? (ANSWER_CODES[refusal] ?? 2) : (k.code ?? 0);
        const ttl = k.answers[0]?.['ttlSeconds'];
        if (ttl !== undefined && ttl !== '0') throw new Error(`${what}: a ${r.token} caller kept a lease alive`);
      } else if (r.method.startsWith('Lease')) {
        const { leaseId, ttlSeconds, attached, requestId } = r.message;
        const a = await grpcUnary(node.grpc, r.method, r.raw !== undefined ? Buffer.from(r.raw) : { id: leaseId, ttlSeconds, attached, requestId: requestId === 'fresh' ? `fz-${++requestIds}` : requestId }, token);
        code = a.code;
        if (code !== 0 && code !== 12 && a.cairnCode === undefined && code !== 4) throw new Error(`${what}: status ${code} without a cairn-error-code trailer (${a.details})`);
      } else {
        const message = r.message.requestId === 'fresh' ? { ...r.message, requestId: `fz-${++requestIds}` } : r.message;
        const a = await grpcUnary(node.grpc, r.method, r.raw !== undefined ? Buffer.from(r.raw) : message, token);
        code = a.code;
        if (code !== 0 && code !== 12 && a.cairnCode === undefined && code !== 4) throw new Error(`${what}: status ${code} without a cairn-error-code trailer (${a.details})`);
      }
      stats.grpc++;
      count(`grpc ${code}`);
      if (!GRPC_CODES.has(code)) throw new Error(`${what}: status ${code}`);
      if (['garbage', 'unknown', 'forged', 'revoked'].includes(r.token) && code === 0) throw new Error(`${what}: an invalid token got OK`);
      checkStore(r.token, before, what);
    }),
    { numRuns: GRPC_RUNS, seed: SEED + 1, endOnFailure: true },
  );
  t.equal((await node.http('GET', '/healthz')).status, 200, 'the node still answers /healthz');
  t.comment(`${stats.grpc} gRPC calls in ${((performance.now() - started) / 1000).toFixed(1)} s; statuses ${JSON.stringify(Object.fromEntries([...stats.statuses].filter(([k]) => k.startsWith('grpc'))))}`);
  t.ok(stats.http + stats.grpc >= RUNS, `${stats.http + stats.grpc} requests in all`);
});
