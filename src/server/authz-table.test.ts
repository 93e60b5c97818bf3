import * as grpc from '@grpc/grpc-js';
import * as https from 'node:https';
import t, { type Test } from 'tap';
import { resourceServiceDefinition } from '../api/index.js';
import {
  appliedIndex,
  closeHttpsAgents,
  grpcUnary,
  grpcKeepAlive,
  grpcWatch,
  httpWatch,
  makeRole,
  makeSuiteIdentities,
  makeToken,
  pollUntil,
  startSecureNode,
  type GrpcAnswer,
  type HttpAnswer,
  type SecureNode,
  type SuiteIdentities,
} from './testing/index.js';

/**
 * Issue 16 items 1-2, "every door checks", as a table: one in-process node with TLS and ACLs on,
 * four identities (anonymous, a read-only token on demo.*, a token with every resource verb on
 * demo.* in namespace team-a, the management token), and for every HTTP route of the server's
 * Router and every method of cairn.resource.v1.ResourceService, what each may and may not do.
 * A route or method that the table does not cover fails the suite: a new door must say who may
 * pass it. Denied requests are checked to change nothing.
 */

type Who = 'anonymous' | 'reader' | 'scoped' | 'management';
const WHO: readonly Who[] = ['anonymous', 'reader', 'scoped', 'management'];

let node: SecureNode;
let ids: SuiteIdentities;
const tok = (w: Who): string | undefined => (w === 'anonymous' ? undefined : w === 'reader' ? ids.reader : w === 'scoped' ? ids.scoped : ids.management);
/** What a refusal looks like: 401 without a token, 403 with one (HTTP); UNAUTHENTICATED / PERMISSION_DENIED (gRPC). */
const deniedHttp = (w: Who): number => (w === 'anonymous' ? 401 : 403);
const deniedGrpc = (w: Who): number => (w === 'anonymous' ? 16 : 7);

const ARTIST = 'demo.v1.Artist';
const ALBUM = 'demo.v1.Album';
const ns = (n: string): string => `?namespace=${n}`;

interface Res {
  id: { type: string; tenancy: { partition: string; namespace: string }; name: string; uid: string };
  generation: string;
  version: string;
}

function req(w: Who, method: string, p: string, body?: unknown): Promise<HttpAnswer> {
  return node.http(method, p, { token: tok(w), ...(body !== undefined ? { body: typeof body === 'string' ? body : JSON.stringify(body) } : {}) });
}

async function put(type: string, namespace: string, name: string, data: unknown, owner?: Res): Promise<Res> {
  const r = await req('management', 'PUT', `/v1/resource/${type}/${name}${ns(namespace)}`, { data, ...(owner ? { owner: owner.id } : {}) });
  if (r.status !== 200) throw new Error(`fixture ${type} ${namespace}/${name}: ${r.status} ${r.text}`);
  return r.json as Res;
}

/** The store as management sees it (every resource of every type), to show a denied request changed nothing. */
async function everything(): Promise<string> {
  const c = node.agent.coordinator();
  if (c === undefined) throw new Error('not running');
  const r = await c.read('linearizable', (s) => JSON.stringify([...s.all()].map((x) => [x.id, x.version, x.deletionTimestamp])));
  return r.value;
}

async function exists(type: string, namespace: string, name: string): Promise<boolean> {
  const r = await req('management', 'GET', `/v1/resource/${type}/${name}${ns(namespace)}`);
  if (r.status !== 200 && r.status !== 404) throw new Error(`exists ${name}: ${r.status} ${r.text}`);
  return r.status === 200;
}

function status(t: Test, w: Who, a: HttpAnswer, want: number | 'allowed', what: string): void {
  if (want === 'allowed') t.ok(a.status !== 401 && a.status !== 403 && a.status < 500, `${w}: ${what} passes the access check (got ${a.status})`);
  else t.equal(a.status, want, `${w}: ${what} -> ${want}${a.status !== want ? ` (body ${a.text.slice(0, 200)})` : ''}`);
  // Every answer is JSON (an error body or a result), except the metrics text and snapshot bytes.
  if (a.status >= 400) t.ok(typeof (a.json as { error?: { code?: unknown } } | undefined)?.error?.code === 'string', `${w}: ${what}: the error is a JSON error body`);
}

function grpcStatus(t: Test, w: Who, a: GrpcAnswer, want: number, what: string): void {
  t.equal(a.code, want, `${w}: gRPC ${what} -> ${want}${a.code !== want ? ` (${a.details})` : ''}`);
}

/** Asserts the denied identities get 401/403 and nothing changes; returns nothing. */
async function deniedFor(t: Test, who: readonly Who[], method: string, p: string, body?: unknown): Promise<void> {
  for (const w of who) {
    const before = await everything();
    status(t, w, await req(w, method, p, body), deniedHttp(w), `${method} ${p}`);
    t.equal(await everything(), before, `${w}: ${method} ${p} changed nothing`);
  }
}

/** The lease table as this node has applied it: ids and TTLs. */
function leaseTable(): string {
  return JSON.stringify([...(node.agent.coordinator()?.leaseTable().leases.entries() ?? [])].map(([id, l]) => [id, l.ttlSeconds]));
}

/** As `deniedFor`, showing the lease table unchanged too. */
async function leaseDeniedFor(t: Test, who: readonly Who[], method: string, p: string, body?: unknown): Promise<void> {
  const before = leaseTable();
  await deniedFor(t, who, method, p, body);
  t.equal(leaseTable(), before, `${method} ${p}: the lease table unchanged`);
}

/** A token whose role may write, read and list leases named svc-* (made by the first lease case). */
let leaser: string;

const names = (a: HttpAnswer): string[] => ((a.json as { resources?: Res[] } | undefined)?.resources ?? []).map((r) => `${r.id.tenancy.namespace}/${r.id.name}`).sort();

// Fixtures, made by the management token before the table runs.
let a1: Res;
let b1: Res;
let mixedOwner: Res;
let mixedChildA: Res;
let mixedChildB: Res;

type Case = (t: Test) => Promise<void>;

/** Every HTTP route: `METHOD pattern` -> what each identity may do. Runs in this order. */
const HTTP_TABLE: Record<string, Case> = {
  'GET /healthz': async (t) => {
    for (const w of WHO) status(t, w, await req(w, 'GET', '/healthz'), 200, 'healthz (public)');
  },
  'GET /readyz': async (t) => {
    for (const w of WHO) status(t, w, await req(w, 'GET', '/readyz'), 200, 'readyz (public)');
  },
  'GET /v1/status/leader': async (t) => {
    for (const w of WHO) status(t, w, await req(w, 'GET', '/v1/status/leader'), 200, 'leader (public)');
  },
  'POST /v1/acl/bootstrap': async (t) => {
    // Done once in setup: nobody, not even management, bootstraps twice, and no token appears.
    for (const w of WHO) {
      const before = await everything();
      status(t, w, await req(w, 'POST', '/v1/acl/bootstrap', ''), 403, 'a second bootstrap');
      t.equal(await everything(), before, `${w}: a second bootstrap changed nothing`);
    }
  },
  'GET /metrics': async (t) => {
    status(t, 'management', await req('management', 'GET', '/metrics'), 200, 'metrics');
    await deniedFor(t, ['anonymous', 'reader', 'scoped'], 'GET', '/metrics');
    // `read` on cairn.v1.Metrics is the grant: a scraper token holds it and nothing else.
    await makeRole(node, ids.management, 'scraper', [{ verbs: ['read'], types: ['cairn.v1.Metrics'] }]);
    const scraper = await makeToken(node, ids.management, ['scraper']);
    t.equal((await node.http('GET', '/metrics', { token: scraper.secret })).status, 200, 'a scraper token reads metrics');
    t.equal((await node.http('GET', '/v1/agent/self', { token: scraper.secret })).status, 403, '... and nothing else');
    t.equal((await node.http('GET', `/v1/resource/${ARTIST}/a1${ns('team-a')}`, { token: scraper.secret })).status, 403);
  },
  'GET /v1/agent/self': async (t) => {
    status(t, 'management', await req('management', 'GET', '/v1/agent/self'), 200, 'agent self');
    await deniedFor(t, ['anonymous', 'reader', 'scoped'], 'GET', '/v1/agent/self');
  },
  'GET /v1/operator/raft/configuration': async (t) => {
    status(t, 'management', await req('management', 'GET', '/v1/operator/raft/configuration'), 200, 'raft configuration');
    await deniedFor(t, ['anonymous', 'reader', 'scoped'], 'GET', '/v1/operator/raft/configuration');
  },
  'POST /v1/operator/raft/peers': async (t) => {
    // Checked before the handler: a malformed body is refused as 401/403 for the others, 400 for management.
    await deniedFor(t, ['anonymous', 'reader', 'scoped'], 'POST', '/v1/operator/raft/peers', '{"id":"n9","address":"127.0.0.1:1"}');
    status(t, 'management', await req('management', 'POST', '/v1/operator/raft/peers', 'not json'), 'allowed', 'add peer (malformed)');
  },
  'DELETE /v1/operator/raft/peers/:id': async (t) => {
    await deniedFor(t, ['anonymous', 'reader', 'scoped'], 'DELETE', '/v1/operator/raft/peers/dev');
    status(t, 'management', await req('management', 'DELETE', '/v1/operator/raft/peers/Not_A_Node'), 'allowed', 'remove peer (bad id)');
  },
  'POST /v1/operator/raft/transfer-leader': async (t) => {
    await deniedFor(t, ['anonymous', 'reader', 'scoped'], 'POST', '/v1/operator/raft/transfer-leader', '{}');
    status(t, 'management', await req('management', 'POST', '/v1/operator/raft/transfer-leader', 'not json'), 'allowed', 'transfer leader (malformed)');
  },
  'GET /v1/acl/token/self': async (t) => {
    const self = async (w: Who): Promise<Record<string, unknown>> => {
      const a = await req(w, 'GET', '/v1/acl/token/self');
      status(t, w, a, 200, 'token self');
      return a.json as Record<string, unknown>;
    };
    t.match(await self('anonymous'), { anonymous: true, management: false, accessor_id: null, acl: true });
    t.match(await self('reader'), { accessor_id: ids.readerAccessor, roles: ['reader'], management: false });
    t.match(await self('scoped'), { accessor_id: ids.scopedAccessor, roles: ['team-a'], management: false });
    t.match(await self('management'), { management: true, roles: ['global-management'] });
    const bad = await node.http('GET', '/v1/acl/token/self', { token: `cairn_${ids.readerAccessor}_${'0'.repeat(64)}` });
    t.equal(bad.status, 401, 'a forged secret of a real accessor is refused');
  },
  'POST /v1/acl/tokens': async (t) => {
    await deniedFor(t, ['anonymous', 'reader', 'scoped'], 'POST', '/v1/acl/tokens', { roles: ['reader'] });
    await deniedFor(t, ['scoped'], 'POST', '/v1/acl/tokens', { roles: ['global-management'] });
    const a = await req('management', 'POST', '/v1/acl/tokens', { roles: ['reader'], description: 'table' });
    status(t, 'management', a, 200, 'create token');
    t.match((a.json as { secret_id: string }).secret_id, /^cairn_[a-z0-9]+_[0-9a-f]{64}$/);
  },
  'GET /v1/acl/tokens': async (t) => {
    const a = await req('management', 'GET', '/v1/acl/tokens');
    status(t, 'management', a, 200, 'list tokens');
    t.notOk(a.text.includes('sha256:'), 'no secret hash is shown');
    t.notOk(a.text.includes(ids.reader.slice(-64)), 'no secret is shown');
    await deniedFor(t, ['anonymous', 'reader', 'scoped'], 'GET', '/v1/acl/tokens');
  },
  'GET /v1/acl/tokens/:accessor': async (t) => {
    status(t, 'management', await req('management', 'GET', `/v1/acl/tokens/${ids.scopedAccessor}`), 200, 'read token');
    await deniedFor(t, ['anonymous', 'reader', 'scoped'], 'GET', `/v1/acl/tokens/${ids.scopedAccessor}`);
    await deniedFor(t, ['anonymous', 'reader', 'scoped'], 'GET', '/v1/acl/tokens/no-such-token');
  },
  'DELETE /v1/acl/tokens/:accessor': async (t) => {
    await deniedFor(t, ['anonymous', 'reader', 'scoped'], 'DELETE', `/v1/acl/tokens/${ids.readerAccessor}`);
    const victim = await makeToken(node, ids.management, ['reader']);
    t.equal((await node.http('GET', '/v1/acl/token/self', { token: victim.secret })).status, 200);
    status(t, 'management', await req('management', 'DELETE', `/v1/acl/tokens/${victim.accessor}`), 200, 'delete token');
    t.equal((await node.http('GET', '/v1/acl/token/self', { token: victim.secret })).status, 401, 'the deleted token is refused at once on this node');
    t.equal((await node.http('GET', `/v1/resource/${ARTIST}/a1${ns('team-a')}`, { token: victim.secret })).status, 401);
  },
  'PUT /v1/acl/roles/:name': async (t) => {
    // The scoped token may not widen its own role.
    await deniedFor(t, ['anonymous', 'reader', 'scoped'], 'PUT', '/v1/acl/roles/team-a', { rules: [{ verbs: ['admin'], types: ['*'] }] });
    await deniedFor(t, ['anonymous', 'reader', 'scoped'], 'PUT', '/v1/acl/roles/anonymous', { rules: [{ verbs: ['read'], types: ['*'] }] });
    status(t, 'management', await req('management', 'PUT', '/v1/acl/roles/extra', { rules: [{ verbs: ['read'], types: ['demo.v1.Album'] }] }), 200, 'write role');
    status(t, 'management', await req('management', 'PUT', '/v1/acl/roles/global-management', { rules: [] }), 400, 'the built-in role cannot be stored');
  },
  'GET /v1/acl/roles': async (t) => {
    status(t, 'management', await req('management', 'GET', '/v1/acl/roles'), 200, 'list roles');
    await deniedFor(t, ['anonymous', 'reader', 'scoped'], 'GET', '/v1/acl/roles');
  },
  'GET /v1/acl/roles/:name': async (t) => {
    status(t, 'management', await req('management', 'GET', '/v1/acl/roles/team-a'), 200, 'read role');
    await deniedFor(t, ['anonymous', 'reader', 'scoped'], 'GET', '/v1/acl/roles/team-a');
  },
  'DELETE /v1/acl/roles/:name': async (t) => {
    await deniedFor(t, ['anonymous', 'reader', 'scoped'], 'DELETE', '/v1/acl/roles/team-a');
    status(t, 'management', await req('management', 'DELETE', '/v1/acl/roles/extra'), 200, 'delete role');
  },
  'PUT /v1/resource/:type/:name': async (t) => {
    const body = (name: string): unknown => ({ data: { name } });
    await deniedFor(t, ['anonymous', 'reader'], 'PUT', `/v1/resource/${ARTIST}/w-a${ns('team-a')}`, body('w'));
    status(t, 'scoped', await req('scoped', 'PUT', `/v1/resource/${ARTIST}/w-a${ns('team-a')}`, body('w')), 200, 'write in team-a');
    status(t, 'scoped', await req('scoped', 'PUT', `/v1/resource/${ARTIST}/a1${ns('team-a')}`, body('changed')), 200, 'update in team-a');
    status(t, 'management', await req('management', 'PUT', `/v1/resource/${ARTIST}/w-m${ns('team-b')}`, body('m')), 200, 'write anywhere');
    await deniedFor(t, ['scoped'], 'PUT', `/v1/resource/${ARTIST}/w-b${ns('team-b')}`, body('w'));
    await deniedFor(t, ['scoped'], 'PUT', `/v1/resource/${ARTIST}/b1${ns('team-b')}`, body('hijack'));
    await deniedFor(t, ['scoped'], 'PUT', '/v1/resource/demo.v1.Executive/boss', body('boss'));
    // The team-a rule names no partition (every partition): team-a of another partition is covered.
    status(t, 'scoped', await req('scoped', 'PUT', `/v1/resource/${ARTIST}/w-x?partition=other&namespace=team-a`, body('w')), 200, 'team-a of another partition');
    // The ACL types need admin, whatever else a token holds.
    await deniedFor(t, ['anonymous', 'reader', 'scoped'], 'PUT', '/v1/resource/cairn.v1.ACLRole/team-a', { data: { rules: [{ verbs: ['admin'], types: ['*'] }] } });
    await deniedFor(t, ['anonymous', 'reader', 'scoped'], 'PUT', '/v1/resource/cairn.v1.ACLToken/evil', { data: { secret_hash: `sha256:${'0'.repeat(64)}`, roles: ['global-management'] } });
  },
  // Leases (docs/api.md "Leases"): the pseudo-type cairn.v1.ClusterLease, named by the lease id;
  // `write` grants, revokes and keeps alive, `read` reads the time to live, `list` lists. The
  // suite's reader and scoped roles hold nothing on it; a role with a name prefix holds its own.
  'POST /v1/leases': async (t) => {
    await leaseDeniedFor(t, ['anonymous', 'reader', 'scoped'], 'POST', '/v1/leases', { ttl_seconds: 60, id: 'svc-denied' });
    status(t, 'management', await req('management', 'POST', '/v1/leases', { ttl_seconds: 60, id: 'tbl' }), 200, 'grant');
    await makeRole(node, ids.management, 'leaser', [{ verbs: ['write', 'read', 'list'], types: ['cairn.v1.ClusterLease'], name_prefix: 'svc-' }]);
    leaser = (await makeToken(node, ids.management, ['leaser'])).secret;
    t.equal((await node.http('POST', '/v1/leases', { token: leaser, body: JSON.stringify({ ttl_seconds: 60, id: 'svc-1' }) })).status, 200, 'leaser: its own prefix');
    t.equal((await node.http('POST', '/v1/leases', { token: leaser, body: JSON.stringify({ ttl_seconds: 60, id: 'other' }) })).status, 403, 'leaser: another name');
    t.equal((await node.http('POST', '/v1/leases', { token: leaser, body: JSON.stringify({ ttl_seconds: 60 }) })).status, 403, 'leaser: a server-chosen id is outside its prefix');
  },
  'GET /v1/leases': async (t) => {
    await leaseDeniedFor(t, ['anonymous', 'reader', 'scoped'], 'GET', '/v1/leases');
    const all = await req('management', 'GET', '/v1/leases');
    t.same(((all.json as { leases: Array<{ id: string }> }).leases).map((l) => l.id), ['svc-1', 'tbl']);
    const own = await node.http('GET', '/v1/leases', { token: leaser });
    t.same(((own.json as { leases: Array<{ id: string }> }).leases).map((l) => l.id), ['svc-1'], 'leaser: filtered to its own');
  },
  'GET /v1/leases/:id': async (t) => {
    await leaseDeniedFor(t, ['anonymous', 'reader', 'scoped'], 'GET', '/v1/leases/tbl');
    status(t, 'management', await req('management', 'GET', '/v1/leases/tbl?attached=true'), 200, 'time to live');
    t.equal((await node.http('GET', '/v1/leases/tbl', { token: leaser })).status, 403, 'leaser: another name');
    t.equal((await node.http('GET', '/v1/leases/svc-1', { token: leaser })).status, 200, 'leaser: its own');
  },
  'POST /v1/leases/:id/keepalive': async (t) => {
    await leaseDeniedFor(t, ['anonymous', 'reader', 'scoped'], 'POST', '/v1/leases/tbl/keepalive', {});
    status(t, 'management', await req('management', 'POST', '/v1/leases/tbl/keepalive', {}), 200, 'keep-alive');
    t.equal((await node.http('POST', '/v1/leases/svc-1/keepalive', { token: leaser, body: '{}' })).status, 200, 'leaser: its own');
  },
  'DELETE /v1/leases/:id': async (t) => {
    await leaseDeniedFor(t, ['anonymous', 'reader', 'scoped'], 'DELETE', '/v1/leases/tbl');
    t.equal((await node.http('DELETE', '/v1/leases/tbl', { token: leaser })).status, 403, 'leaser: another name');
    status(t, 'management', await req('management', 'DELETE', '/v1/leases/tbl'), 200, 'revoke');
    t.equal((await node.http('DELETE', '/v1/leases/svc-1', { token: leaser })).status, 200, 'leaser: its own');
  },
  'POST /v1/txn': async (t) => {
    const cmp = (name: string, namespace: string): object => ({ target: 'exists', type: ARTIST, namespace, name });
    const wr = (name: string, namespace: string): object => ({ op: 'write', type: ARTIST, namespace, name, data: { name } });
    const ok = { compare: [cmp('a1', 'team-a')], then: [wr('t-a', 'team-a')] };
    await deniedFor(t, ['anonymous', 'reader'], 'POST', '/v1/txn', ok);
    const reader = await req('reader', 'POST', '/v1/txn', ok);
    t.match((reader.json as { error: { message: string } }).error.message, /^then\[0\]: /, 'reader: the denied part is named');
    status(t, 'scoped', await req('scoped', 'POST', '/v1/txn', ok), 200, 'a transaction in team-a');
    // A denied part denies the whole transaction: a comparison it may not read, an op of either branch it may not do.
    for (const [what, body, part] of [
      ['compare team-b', { compare: [cmp('a1', 'team-a'), cmp('b1', 'team-b')], then: [wr('t-a2', 'team-a')] }, /^compare\[1\]: /],
      ['an else op in team-b', { compare: [cmp('a1', 'team-a')], then: [wr('t-a3', 'team-a')], else: [wr('t-b', 'team-b')] }, /^else\[0\]: /],
      ['a delete in team-b', { then: [wr('t-a4', 'team-a'), { op: 'delete', type: ARTIST, namespace: 'team-b', name: 'b1' }] }, /^then\[1\]: /],
      // The cascade guard (docs/security.md "Cascades"): mixed (team-a) owns child-b in team-b.
      ['a delete whose cascade reaches team-b', { then: [{ op: 'delete', type: ARTIST, namespace: 'team-a', name: 'mixed' }] }, /^then\[0\]: deleting mixed would also delete owned resources/],
    ] as const) {
      const before = await everything();
      const a = await req('scoped', 'POST', '/v1/txn', body);
      status(t, 'scoped', a, 403, what);
      t.match((a.json as { error: { message: string } }).error.message, part, `scoped: ${what}: the denied part is named`);
      t.equal(await everything(), before, `scoped: ${what} changed nothing`);
    }
    status(t, 'management', await req('management', 'POST', '/v1/txn', { compare: [cmp('b1', 'team-b')], then: [wr('t-m', 'team-b')] }), 200, 'a transaction anywhere');
    // Issue 19 review, item 6: a restricted token's branch that gives P a new owned resource
    // and then deletes P: the cascade checked before the transaction cannot include it, so the
    // state machine refuses the delete; re-read, the cascade is unchanged: a clear error after
    // at most one more read, not eight log entries ending in a misleading CAS_FAILED.
    const parent = await put(ARTIST, 'team-a', 'cascade-p', { name: 'p' });
    const beforeCascade = appliedIndex(node);
    const grown = await req('scoped', 'POST', '/v1/txn', {
      then: [
        { op: 'write', type: ARTIST, namespace: 'team-a', name: 'cascade-c', data: { name: 'c' }, owner: parent.id },
        { op: 'delete', type: ARTIST, namespace: 'team-a', name: 'cascade-p' },
      ],
    });
    status(t, 'scoped', grown, 400, 'a delete whose cascade an earlier op grows');
    const ge = (grown.json as { error: { message: string; part?: string; failed_op?: number } }).error;
    t.match(ge.message, /^transaction then\[1\] cannot be checked for this token: the cascade of its delete .* would include resources an earlier op of the then branch creates or changes/, 'scoped: says why');
    t.same([ge.part, ge.failed_op], ['then[1]', 1], 'scoped: names the op');
    t.ok(appliedIndex(node) - beforeCascade <= 1, `scoped: one refused entry at most, not eight (${appliedIndex(node) - beforeCascade})`);
    t.notOk(await exists(ARTIST, 'team-a', 'cascade-c'), 'scoped: nothing applied');
    t.ok(await exists(ARTIST, 'team-a', 'cascade-p'), 'scoped: nothing applied');
    // No ops (issue 19 review, item 1): answered by a linearizable read, never a log entry,
    // for anyone; the comparisons still need read on each compared resource.
    const compareOnly = { compare: [cmp('a1', 'team-a'), { target: 'absent', type: ARTIST, namespace: 'team-a', name: 'no-such' }] };
    const failing = { compare: [cmp('a1', 'team-a'), cmp('no-such', 'team-a')] };
    for (const [who, body, want, succeeded] of [
      ['anonymous', {}, 200, true],
      ['anonymous', compareOnly, 401, undefined],
      ['reader', {}, 200, true],
      ['reader', compareOnly, 200, true],
      ['reader', failing, 200, false],
      ['reader', { compare: [cmp('b1', 'team-b')], then: [], else: [] }, 200, true],
      ['scoped', { compare: [cmp('b1', 'team-b')] }, 403, undefined],
      ['scoped', compareOnly, 200, true],
    ] as const) {
      const before = appliedIndex(node);
      const a = await req(who, 'POST', '/v1/txn', body);
      status(t, who, a, want, `a transaction without ops ${JSON.stringify(body)}`);
      if (succeeded !== undefined) {
        const j = a.json as { succeeded: boolean; revision: string; failed_comparison?: number; results: unknown[] };
        t.equal(j.succeeded, succeeded, `${who}: succeeded is ${succeeded}`);
        t.same(j.results, [], `${who}: no results`);
        t.equal(j.failed_comparison, succeeded ? undefined : 1, `${who}: the failed comparison`);
        t.equal(Number(j.revision), before, `${who}: the revision is the read's (the applied index)`);
      }
      t.equal(appliedIndex(node), before, `${who}: ${JSON.stringify(body)} proposed nothing (the applied index did not move)`);
    }
  },
  'GET /v1/resource/:type/:name': async (t) => {
    for (const w of ['reader', 'scoped', 'management'] as const) status(t, w, await req(w, 'GET', `/v1/resource/${ARTIST}/a1${ns('team-a')}`), 200, 'read team-a');
    status(t, 'anonymous', await req('anonymous', 'GET', `/v1/resource/${ARTIST}/a1${ns('team-a')}`), 401, 'read team-a');
    status(t, 'reader', await req('reader', 'GET', `/v1/resource/${ARTIST}/b1${ns('team-b')}`), 200, 'read team-b');
    status(t, 'scoped', await req('scoped', 'GET', `/v1/resource/${ARTIST}/b1${ns('team-b')}`), 403, 'read team-b');
    // Existence is not leaked: a missing team-b name is 403 for scoped, as an existing one is.
    status(t, 'scoped', await req('scoped', 'GET', `/v1/resource/${ARTIST}/no-such${ns('team-b')}`), 403, 'read a missing team-b name');
    status(t, 'reader', await req('reader', 'GET', `/v1/resource/${ARTIST}/no-such${ns('team-b')}`), 404, 'read a missing name');
    for (const w of ['reader', 'scoped'] as const) status(t, w, await req(w, 'GET', `/v1/resource/cairn.v1.ACLToken/${ids.readerAccessor}`), 403, 'read a token record');
    status(t, 'anonymous', await req('anonymous', 'GET', `/v1/resource/cairn.v1.ACLToken/${ids.readerAccessor}`), 401, 'read a token record');
    status(t, 'management', await req('management', 'GET', `/v1/resource/cairn.v1.ACLToken/${ids.readerAccessor}`), 200, 'read a token record');
  },
  'PUT /v1/resource/:type/:name/status/:key': async (t) => {
    const cur = (await req('management', 'GET', `/v1/resource/${ARTIST}/a1${ns('team-a')}`)).json as Res;
    const body = (r: Res): unknown => ({ uid: r.id.uid, observed_generation: r.generation, conditions: [{ type: 'Ready', state: 'TRUE', reason: 'Test', message: '' }] });
    await deniedFor(t, ['anonymous', 'reader'], 'PUT', `/v1/resource/${ARTIST}/a1/status/demo.v1.table${ns('team-a')}`, body(cur));
    status(t, 'scoped', await req('scoped', 'PUT', `/v1/resource/${ARTIST}/a1/status/demo.v1.table${ns('team-a')}`, body(cur)), 200, 'status in team-a');
    await deniedFor(t, ['scoped'], 'PUT', `/v1/resource/${ARTIST}/b1/status/demo.v1.table${ns('team-b')}`, body(b1));
    status(t, 'management', await req('management', 'PUT', `/v1/resource/${ARTIST}/b1/status/demo.v1.table${ns('team-b')}`, body(b1)), 200, 'status anywhere');
    // write-status alone does not grant write, nor write write-status.
    await makeRole(node, ids.management, 'status-only', [{ verbs: ['write-status'], types: ['demo.*'] }]);
    const so = await makeToken(node, ids.management, ['status-only']);
    t.equal((await node.http('PUT', `/v1/resource/${ARTIST}/a1${ns('team-a')}`, { token: so.secret, body: JSON.stringify({ data: { name: 'x' } }) })).status, 403, 'write-status does not grant write');
    await makeRole(node, ids.management, 'write-only', [{ verbs: ['write'], types: ['demo.*'] }]);
    const wo = await makeToken(node, ids.management, ['write-only']);
    const fresh = (await req('management', 'GET', `/v1/resource/${ARTIST}/a1${ns('team-a')}`)).json as Res;
    t.equal((await node.http('PUT', `/v1/resource/${ARTIST}/a1/status/demo.v1.table${ns('team-a')}`, { token: wo.secret, body: JSON.stringify(body(fresh)) })).status, 403, 'write does not grant write-status');
  },
  'GET /v1/resources/:type': async (t) => {
    const all = names(await req('management', 'GET', `/v1/resources/${ARTIST}${ns('*')}`));
    t.ok(all.some((n) => n.startsWith('team-b/')) && all.some((n) => n.startsWith('team-a/')), 'management sees both namespaces');
    t.same(names(await req('reader', 'GET', `/v1/resources/${ARTIST}${ns('*')}`)), all, 'the reader sees everything of demo.*');
    const scoped = await req('scoped', 'GET', `/v1/resources/${ARTIST}${ns('*')}`);
    status(t, 'scoped', scoped, 200, 'list *');
    t.same(names(scoped), all.filter((n) => n.startsWith('team-a/')), 'the scoped token listing * sees team-a only, all of it');
    t.same(names(await req('scoped', 'GET', `/v1/resources/demo.Artist${ns('*')}`)), names(await req('management', 'GET', `/v1/resources/demo.Artist${ns('team-a')}`)), 'every version: team-a only');
    status(t, 'scoped', await req('scoped', 'GET', `/v1/resources/${ARTIST}${ns('team-b')}`), 403, 'list team-b');
    status(t, 'anonymous', await req('anonymous', 'GET', `/v1/resources/${ARTIST}${ns('*')}`), 401, 'list *');
    status(t, 'scoped', await req('scoped', 'GET', '/v1/resources/demo.v1.Executive'), 403, 'list a cluster-scoped type');
    // owner_uid: children in both namespaces, filtered item by item.
    const byOwner = (w: Who): Promise<HttpAnswer> => req(w, 'GET', `/v1/resources/${ALBUM}?namespace=*&owner_uid=${mixedOwner.id.uid}`);
    t.same(names(await byOwner('management')), ['team-a/child-a', 'team-b/child-b']);
    t.same(names(await byOwner('reader')), ['team-a/child-a', 'team-b/child-b']);
    t.same(names(await byOwner('scoped')), ['team-a/child-a'], 'owner_uid: scoped sees its namespace only');
    for (const w of ['anonymous', 'reader', 'scoped'] as const) status(t, w, await req(w, 'GET', '/v1/resources/cairn.v1.ACLToken'), deniedHttp(w), 'list tokens through the resource API');
    for (const w of ['anonymous', 'reader', 'scoped'] as const) status(t, w, await req(w, 'GET', '/v1/resources/cairn.v1.ACLRole'), deniedHttp(w), 'list roles through the resource API');
  },
  'DELETE /v1/resource/:type/:name': async (t) => {
    await deniedFor(t, ['anonymous', 'reader', 'scoped'], 'DELETE', `/v1/resource/${ARTIST}/b1${ns('team-b')}`);
    await deniedFor(t, ['anonymous', 'reader'], 'DELETE', `/v1/resource/${ARTIST}/a1${ns('team-a')}`);
    // Cascade: the owner is in team-a, one child is in team-b: the scoped token may not delete it.
    await deniedFor(t, ['scoped'], 'DELETE', `/v1/resource/${ARTIST}/mixed${ns('team-a')}`);
    t.ok((await exists(ARTIST, 'team-a', 'mixed')) && (await exists(ALBUM, 'team-a', 'child-a')) && (await exists(ALBUM, 'team-b', 'child-b')), 'owner and both children are still there');
    // Its own cascade (children in team-a only) it may delete.
    const clean = await put(ARTIST, 'team-a', 'clean', { name: 'clean' });
    await put(ALBUM, 'team-a', 'clean-child', { title: 'c' }, clean);
    status(t, 'scoped', await req('scoped', 'DELETE', `/v1/resource/${ARTIST}/clean${ns('team-a')}`), 200, 'delete an owner whose cascade is in team-a');
    t.notOk(await exists(ALBUM, 'team-a', 'clean-child'), 'its child went with it');
    const gone = await put(ARTIST, 'team-a', 'gone', { name: 'gone' });
    t.ok(gone);
    status(t, 'scoped', await req('scoped', 'DELETE', `/v1/resource/${ARTIST}/gone${ns('team-a')}`), 200, 'delete in team-a');
    // Management deletes the mixed owner and its whole cascade.
    status(t, 'management', await req('management', 'DELETE', `/v1/resource/${ARTIST}/mixed${ns('team-a')}`), 200, 'delete with a cross-namespace cascade');
    t.notOk(await exists(ALBUM, 'team-b', 'child-b'));
  },
  'POST /v1/watch': async (t) => {
    const w = [{ type: ARTIST, namespace: '*' }];
    status(t, 'anonymous', await req('anonymous', 'POST', '/v1/watch', w), 401, 'watch');
    status(t, 'scoped', await req('scoped', 'POST', '/v1/watch', [{ type: ARTIST, namespace: 'team-b' }]), 403, 'watch team-b');
    status(t, 'scoped', await req('scoped', 'POST', '/v1/watch', [{ type: ARTIST, namespace: 'team-a' }, { type: 'cairn.v1.ACLToken' }]), 403, 'a stream with one forbidden watch');
    status(t, 'reader', await req('reader', 'POST', '/v1/watch', [{ type: 'cairn.v1.ACLRole' }]), 403, 'watch roles');
    const watches = { reader: httpWatch(node.agent.httpAddress, node.ca, w, ids.reader), scoped: httpWatch(node.agent.httpAddress, node.ca, w, ids.scoped), management: httpWatch(node.agent.httpAddress, node.ca, w, ids.management) };
    const g = grpcWatch(node.grpc, [{ type: ARTIST, tenancy: { partition: '*', namespace: '*' } }], ids.scoped);
    try {
      const tailed = (x: { lines: Array<Record<string, unknown>> }): boolean => x.lines.some((l) => l['type'] === 'tail');
      await pollUntil(() => tailed(watches.reader) && tailed(watches.scoped) && tailed(watches.management) && g.events.some((e) => e['event'] === 'tail'), 5000, 'the initial states');
      await put(ARTIST, 'team-b', 'late-b', { name: 'late-b' });
      await put(ARTIST, 'team-a', 'late-a', { name: 'late-a' });
      const seen = (x: { lines: Array<Record<string, unknown>> }, n: string): boolean => x.lines.some((l) => (l['value'] as Res | undefined)?.id.name === n);
      await pollUntil(() => seen(watches.reader, 'late-a') && seen(watches.scoped, 'late-a') && seen(watches.management, 'late-a') && g.events.some((e) => (e['change'] as { id?: { name?: string } } | undefined)?.id?.name === 'late-a'), 5000, 'late-a on every watch');
      const spaces = (x: { lines: Array<Record<string, unknown>> }): string[] => [...new Set(x.lines.flatMap((l) => (l['value'] ? [(l['value'] as Res).id.tenancy.namespace] : [])))].sort();
      t.equal(watches.scoped.status, 200);
      t.same(spaces(watches.scoped), ['team-a'], 'the scoped HTTP watch over * never sent a team-b item (initial state or change)');
      t.same(spaces(watches.reader), ['team-a', 'team-b'], 'the reader saw both');
      t.same(spaces(watches.management), ['team-a', 'team-b']);
      t.ok(seen(watches.reader, 'late-b') && !seen(watches.scoped, 'late-b'));
      const gSpaces = [...new Set(g.events.flatMap((e) => (e['change'] ? [(e['change'] as { id: { tenancy: { namespace: string } } }).id.tenancy.namespace] : [])))];
      t.same(gSpaces, ['team-a'], 'the scoped gRPC watch over * never sent a team-b item');
    } finally {
      for (const x of Object.values(watches)) x.cancel();
      g.cancel();
    }
  },
  'GET /v1/snapshot': async (t) => {
    await deniedFor(t, ['anonymous', 'reader', 'scoped'], 'GET', '/v1/snapshot');
    const a = await node.http('GET', '/v1/snapshot', { token: ids.management });
    t.equal(a.status, 200, 'management saves a snapshot');
    t.ok(a.text.startsWith('CAIRNSV1'), 'a snapshot file');
  },
  'PUT /v1/snapshot': async (t) => {
    const saved = await new Promise<Buffer>((resolve, reject) => {
      // The raw bytes (the helper decodes text): fetch them again as a buffer.
      import('node:https')
        .then((https) => {
          const [host, port] = [node.agent.httpAddress.split(':')[0], Number(node.agent.httpAddress.split(':')[1])];
          https
            .get({ host, port, path: '/v1/snapshot', ca: node.ca, headers: { authorization: `Bearer ${ids.management}` } }, (res) => {
              const chunks: Buffer[] = [];
              res.on('data', (c: Buffer) => chunks.push(c));
              res.on('end', () => resolve(Buffer.concat(chunks)));
            })
            .on('error', reject);
        })
        .catch(reject);
    });
    t.ok(saved.subarray(0, 8).equals(Buffer.from('CAIRNSV1')));
    for (const w of ['anonymous', 'reader', 'scoped'] as const) {
      const before = await everything();
      const a = await node.http('PUT', '/v1/snapshot', { token: tok(w), body: saved, headers: { 'content-type': 'application/octet-stream' } });
      status(t, w, a, deniedHttp(w), 'restore a snapshot');
      t.equal(await everything(), before, `${w}: a refused restore changed nothing`);
    }
    const m = await node.http('PUT', '/v1/snapshot', { token: ids.management, body: saved, headers: { 'content-type': 'application/octet-stream' } });
    t.equal(m.status, 200, `management restores (${m.text.slice(0, 200)})`);
    t.equal((await node.http('GET', '/v1/acl/token/self', { token: ids.scoped })).status, 200, 'the tokens saved in the snapshot still work');
  },
};

/** WatchList and WatchListBatched are one door: the same checks, whichever framing is asked for. */
async function watchDoor(t: Test, method: 'WatchList' | 'WatchListBatched'): Promise<void> {
  const wl = (space: string): object[] => [{ type: ARTIST, tenancy: { partition: '*', namespace: space } }];
  const ends = async (w: ReturnType<typeof grpcWatch>): Promise<number> => {
    await pollUntil(() => w.end !== undefined, 5000, 'the watch to end');
    return (w.end as { code: number }).code;
  };
  t.equal(await ends(grpcWatch(node.grpc, wl('*'), undefined, method)), 16, `anonymous ${method} -> UNAUTHENTICATED`);
  t.equal(await ends(grpcWatch(node.grpc, wl('team-b'), ids.scoped, method)), 7, `scoped ${method} team-b -> PERMISSION_DENIED`);
  t.equal(await ends(grpcWatch(node.grpc, [{ type: 'cairn.v1.ACLToken' }], ids.reader, method)), 7, `reader ${method} tokens -> PERMISSION_DENIED`);
  const ok = grpcWatch(node.grpc, wl('*'), ids.scoped, method);
  try {
    await pollUntil(() => ok.events.some((e) => e['event'] === 'tail'), 5000, 'the scoped watch to reach its tail');
    t.ok(ok.events.some((e) => e['change']), 'initial state: not empty');
    t.ok(ok.events.filter((e) => e['change']).every((e) => (e['change'] as { id: { tenancy: { namespace: string } } }).id.tenancy.namespace === 'team-a'), 'initial state: team-a only');
    t.equal(ok.end, undefined, 'still open');
  } finally {
    ok.cancel();
  }
}

/** Every gRPC method of cairn.resource.v1.ResourceService. */
const GRPC_TABLE: Record<string, Case> = {
  Read: async (t) => {
    const id = (n: string, space: string): object => ({ id: { type: ARTIST, tenancy: { partition: 'default', namespace: space }, name: n } });
    for (const w of WHO) grpcStatus(t, w, await grpcUnary(node.grpc, 'Read', id('a1', 'team-a'), tok(w)), w === 'anonymous' ? 16 : 0, 'Read team-a');
    grpcStatus(t, 'scoped', await grpcUnary(node.grpc, 'Read', id('b1', 'team-b'), ids.scoped), 7, 'Read team-b');
    grpcStatus(t, 'scoped', await grpcUnary(node.grpc, 'Read', id('no-such', 'team-b'), ids.scoped), 7, 'Read a missing team-b name');
    grpcStatus(t, 'reader', await grpcUnary(node.grpc, 'Read', id('b1', 'team-b'), ids.reader), 0, 'Read team-b');
    grpcStatus(t, 'reader', await grpcUnary(node.grpc, 'Read', { id: { type: 'cairn.v1.ACLToken', name: ids.readerAccessor } }, ids.reader), 7, 'Read a token record');
    grpcStatus(t, 'anonymous', await grpcUnary(node.grpc, 'Read', id('a1', 'team-a'), 'garbage'), 16, 'Read with a garbage token');
  },
  Write: async (t) => {
    const w = (n: string, space: string): object => ({ id: { type: ARTIST, tenancy: { partition: 'default', namespace: space }, name: n }, dataJson: JSON.stringify({ name: n }) });
    for (const who of ['anonymous', 'reader'] as const) {
      const before = await everything();
      grpcStatus(t, who, await grpcUnary(node.grpc, 'Write', w('g-a', 'team-a'), tok(who)), deniedGrpc(who), 'Write team-a');
      t.equal(await everything(), before);
    }
    grpcStatus(t, 'scoped', await grpcUnary(node.grpc, 'Write', w('g-a', 'team-a'), ids.scoped), 0, 'Write team-a');
    const before = await everything();
    grpcStatus(t, 'scoped', await grpcUnary(node.grpc, 'Write', w('g-b', 'team-b'), ids.scoped), 7, 'Write team-b');
    grpcStatus(t, 'scoped', await grpcUnary(node.grpc, 'Write', { id: { type: 'cairn.v1.ACLRole', name: 'team-a' }, dataJson: '{"rules":[{"verbs":["admin"],"types":["*"]}]}' }, ids.scoped), 7, 'Write its own role');
    t.equal(await everything(), before, 'refused writes changed nothing');
    grpcStatus(t, 'management', await grpcUnary(node.grpc, 'Write', w('g-b', 'team-b'), ids.management), 0, 'Write team-b');
  },
  WriteStatus: async (t) => {
    const cur = (await req('management', 'GET', `/v1/resource/${ARTIST}/b1${ns('team-b')}`)).json as Res;
    const ws = (r: Res): object => ({ id: r.id, key: 'demo.v1.grpc', observedGeneration: r.generation, conditions: [{ type: 'Ready', state: 'TRUE' }] });
    for (const who of ['anonymous', 'reader', 'scoped'] as const) grpcStatus(t, who, await grpcUnary(node.grpc, 'WriteStatus', ws(cur), tok(who)), deniedGrpc(who), 'WriteStatus team-b');
    const a = (await req('management', 'GET', `/v1/resource/${ARTIST}/a1${ns('team-a')}`)).json as Res;
    grpcStatus(t, 'scoped', await grpcUnary(node.grpc, 'WriteStatus', ws(a), ids.scoped), 0, 'WriteStatus team-a');
  },
  Delete: async (t) => {
    const d = (type: string, n: string, space: string): object => ({ id: { type, tenancy: { partition: 'default', namespace: space }, name: n } });
    await put(ARTIST, 'team-a', 'gd', { name: 'gd' });
    for (const who of ['anonymous', 'reader'] as const) grpcStatus(t, who, await grpcUnary(node.grpc, 'Delete', d(ARTIST, 'gd', 'team-a'), tok(who)), deniedGrpc(who), 'Delete team-a');
    grpcStatus(t, 'scoped', await grpcUnary(node.grpc, 'Delete', d(ARTIST, 'b1', 'team-b'), ids.scoped), 7, 'Delete team-b');
    // The cascade guard through gRPC.
    const owner = await put(ARTIST, 'team-a', 'gowner', { name: 'gowner' });
    await put(ALBUM, 'team-b', 'gchild', { title: 'x' }, owner);
    const before = await everything();
    grpcStatus(t, 'scoped', await grpcUnary(node.grpc, 'Delete', d(ARTIST, 'gowner', 'team-a'), ids.scoped), 7, 'Delete an owner with a team-b child');
    t.equal(await everything(), before, 'nothing changed');
    grpcStatus(t, 'scoped', await grpcUnary(node.grpc, 'Delete', d(ARTIST, 'gd', 'team-a'), ids.scoped), 0, 'Delete team-a');
  },
  List: async (t) => {
    const l = (space: string): object => ({ type: ARTIST, tenancy: { partition: '*', namespace: space } });
    const spaces = (a: GrpcAnswer): string[] => [...new Set(((a.value?.['resources'] as Array<{ id: { tenancy: { namespace: string } } }>) ?? []).map((r) => r.id.tenancy.namespace))].sort();
    grpcStatus(t, 'anonymous', await grpcUnary(node.grpc, 'List', l('*')), 16, 'List *');
    const s = await grpcUnary(node.grpc, 'List', l('*'), ids.scoped);
    grpcStatus(t, 'scoped', s, 0, 'List *');
    t.same(spaces(s), ['team-a'], 'scoped List * sees team-a only');
    t.same(spaces(await grpcUnary(node.grpc, 'List', l('*'), ids.reader)), ['team-a', 'team-b']);
    grpcStatus(t, 'scoped', await grpcUnary(node.grpc, 'List', l('team-b'), ids.scoped), 7, 'List team-b');
    grpcStatus(t, 'reader', await grpcUnary(node.grpc, 'List', { type: 'cairn.v1.ACLToken' }, ids.reader), 7, 'List tokens');
  },
  ListByOwner: async (t) => {
    const owner = await put(ARTIST, 'team-a', 'lbo', { name: 'lbo' });
    await put(ALBUM, 'team-a', 'lbo-a', { title: 'a' }, owner);
    await put(ALBUM, 'team-b', 'lbo-b', { title: 'b' }, owner);
    const got = async (w: Who): Promise<{ code: number; names: string[] }> => {
      const a = await grpcUnary(node.grpc, 'ListByOwner', { ownerUid: owner.id.uid }, tok(w));
      return { code: a.code, names: ((a.value?.['resources'] as Array<{ id: { name: string } }>) ?? []).map((r) => r.id.name).sort() };
    };
    t.same(await got('management'), { code: 0, names: ['lbo-a', 'lbo-b'] });
    t.same(await got('reader'), { code: 0, names: ['lbo-a', 'lbo-b'] });
    t.same(await got('scoped'), { code: 0, names: ['lbo-a'] }, 'scoped sees its namespace only');
    const anon = await got('anonymous');
    t.same(anon.names, [], 'anonymous sees nothing');
    const bad = await grpcUnary(node.grpc, 'ListByOwner', { ownerUid: owner.id.uid }, `cairn_${ids.scopedAccessor}_${'f'.repeat(64)}`);
    t.equal(bad.code, 16, 'a forged token is refused');
  },
  Txn: async (t) => {
    const id = (n: string, space: string): object => ({ type: ARTIST, tenancy: { partition: 'default', namespace: space }, name: n });
    const tx = (space: string, cmpSpace = space): object => ({ compare: [{ id: id('a1', cmpSpace), target: 'TARGET_EXISTS' }], thenOps: [{ write: { id: id('gt', space), dataJson: '{"name":"gt"}' } }] });
    for (const who of ['anonymous', 'reader'] as const) {
      const before = await everything();
      grpcStatus(t, who, await grpcUnary(node.grpc, 'Txn', tx('team-a'), tok(who)), deniedGrpc(who), 'Txn team-a');
      t.equal(await everything(), before);
    }
    const before = await everything();
    grpcStatus(t, 'scoped', await grpcUnary(node.grpc, 'Txn', tx('team-b', 'team-a'), ids.scoped), 7, 'Txn writing team-b');
    grpcStatus(t, 'scoped', await grpcUnary(node.grpc, 'Txn', tx('team-a', 'team-b'), ids.scoped), 7, 'Txn comparing team-b');
    t.equal(await everything(), before, 'refused transactions changed nothing');
    grpcStatus(t, 'scoped', await grpcUnary(node.grpc, 'Txn', tx('team-a'), ids.scoped), 0, 'Txn team-a');
    // No ops (issue 19 review, item 1): a linearizable read, never a log entry.
    const compareOnly = { compare: [{ id: id('a1', 'team-a'), target: 'TARGET_EXISTS' }, { id: id('no-such', 'team-a'), target: 'TARGET_EXISTS' }] };
    for (const [who, body, code, succeeded] of [
      ['anonymous', {}, 0, true],
      ['anonymous', compareOnly, 16, undefined],
      ['reader', {}, 0, true],
      ['reader', compareOnly, 0, false],
      ['scoped', { compare: [{ id: id('b1', 'team-b'), target: 'TARGET_EXISTS' }] }, 7, undefined],
    ] as const) {
      const before = appliedIndex(node);
      const a = await grpcUnary(node.grpc, 'Txn', body, tok(who));
      grpcStatus(t, who, a, code, `Txn without ops ${JSON.stringify(body)}`);
      if (succeeded !== undefined) {
        t.equal(a.value?.['succeeded'], succeeded, `${who}: succeeded is ${succeeded}`);
        t.equal(Number(a.value?.['revision']), before, `${who}: the read's revision`);
        if (!succeeded) t.equal(a.value?.['failedComparison'], 1, `${who}: the failed comparison`);
      }
      t.equal(appliedIndex(node), before, `${who}: Txn without ops proposed nothing (the applied index did not move)`);
    }
  },
  // Leases: as their HTTP routes (cairn.v1.ClusterLease; the leaser token made there holds svc-*).
  LeaseGrant: async (t) => {
    for (const who of ['anonymous', 'reader', 'scoped'] as const) {
      const before = leaseTable();
      grpcStatus(t, who, await grpcUnary(node.grpc, 'LeaseGrant', { ttlSeconds: 60, id: 'g-denied' }, tok(who)), deniedGrpc(who), 'LeaseGrant');
      t.equal(leaseTable(), before, `${who}: LeaseGrant changed nothing`);
    }
    grpcStatus(t, 'management', await grpcUnary(node.grpc, 'LeaseGrant', { ttlSeconds: 60, id: 'g-tbl' }, ids.management), 0, 'LeaseGrant');
    t.equal((await grpcUnary(node.grpc, 'LeaseGrant', { ttlSeconds: 60, id: 'svc-g' }, leaser)).code, 0, 'leaser: its own prefix');
    t.equal((await grpcUnary(node.grpc, 'LeaseGrant', { ttlSeconds: 60, id: 'g-other' }, leaser)).code, 7, 'leaser: another name');
  },
  LeaseTimeToLive: async (t) => {
    for (const who of ['anonymous', 'reader', 'scoped'] as const) grpcStatus(t, who, await grpcUnary(node.grpc, 'LeaseTimeToLive', { id: 'g-tbl' }, tok(who)), deniedGrpc(who), 'LeaseTimeToLive');
    const a = await grpcUnary(node.grpc, 'LeaseTimeToLive', { id: 'g-tbl', attached: true }, ids.management);
    grpcStatus(t, 'management', a, 0, 'LeaseTimeToLive');
    t.equal(a.value?.['ttlSeconds'], '60');
  },
  LeaseList: async (t) => {
    for (const who of ['anonymous', 'reader', 'scoped'] as const) grpcStatus(t, who, await grpcUnary(node.grpc, 'LeaseList', {}, tok(who)), deniedGrpc(who), 'LeaseList');
    const own = await grpcUnary(node.grpc, 'LeaseList', {}, leaser);
    t.same((own.value?.['leases'] as Array<{ id: string }>).map((l) => l.id), ['svc-g'], 'leaser: filtered to its own');
  },
  LeaseKeepAlive: async (t) => {
    for (const who of ['anonymous', 'reader', 'scoped'] as const) {
      const r = await grpcKeepAlive(node.grpc, ['g-tbl'], tok(who));
      t.equal(r.answers[0]?.['errorCode'], who === 'anonymous' ? 'UNAUTHENTICATED' : 'PERMISSION_DENIED', `${who}: keep-alive refused in its answer`);
      t.equal(r.answers[0]?.['ttlSeconds'], '0');
    }
    const m = await grpcKeepAlive(node.grpc, ['g-tbl', 'svc-g', 'nope'], ids.management);
    t.same(m.answers.map((a) => [a['id'], a['ttlSeconds'], a['errorCode']]), [['g-tbl', '60', ''], ['svc-g', '60', ''], ['nope', '0', 'NOT_FOUND']]);
    const l = await grpcKeepAlive(node.grpc, ['svc-g', 'g-tbl'], leaser);
    t.same(l.answers.map((a) => a['errorCode']), ['', 'PERMISSION_DENIED'], 'leaser: its own only');
  },
  LeaseRevoke: async (t) => {
    for (const who of ['anonymous', 'reader', 'scoped'] as const) {
      const before = leaseTable();
      grpcStatus(t, who, await grpcUnary(node.grpc, 'LeaseRevoke', { id: 'g-tbl' }, tok(who)), deniedGrpc(who), 'LeaseRevoke');
      t.equal(leaseTable(), before, `${who}: LeaseRevoke changed nothing`);
    }
    t.equal((await grpcUnary(node.grpc, 'LeaseRevoke', { id: 'g-tbl' }, leaser)).code, 7, 'leaser: another name');
    grpcStatus(t, 'management', await grpcUnary(node.grpc, 'LeaseRevoke', { id: 'g-tbl' }, ids.management), 0, 'LeaseRevoke');
    t.equal((await grpcUnary(node.grpc, 'LeaseRevoke', { id: 'svc-g' }, leaser)).code, 0, 'leaser: its own');
  },
  WatchList: async (t) => watchDoor(t, 'WatchList'),
  WatchListBatched: async (t) => watchDoor(t, 'WatchListBatched'),
};

t.before(async () => {
  node = await startSecureNode();
  ids = await makeSuiteIdentities(node);
  a1 = await put(ARTIST, 'team-a', 'a1', { name: 'a1' });
  b1 = await put(ARTIST, 'team-b', 'b1', { name: 'b1' });
  await put('demo.v2.Artist', 'team-b', 'b2', { name: 'b2', members: 3 });
  mixedOwner = await put(ARTIST, 'team-a', 'mixed', { name: 'mixed' });
  mixedChildA = await put(ALBUM, 'team-a', 'child-a', { title: 'a' }, mixedOwner);
  mixedChildB = await put(ALBUM, 'team-b', 'child-b', { title: 'b' }, mixedOwner);
  t.ok(a1 && mixedChildA && mixedChildB);
});

t.teardown(async () => {
  await node?.close();
  closeHttpsAgents();
});

t.test('the table covers every HTTP route of the server and every gRPC method of ResourceService, and nothing else', async (t) => {
  const served = node.routes.map((r) => `${r.method} ${r.pattern}`).sort();
  t.ok(served.length >= 20, `the router lists its routes (${served.length})`);
  t.same(served.filter((r) => !(r in HTTP_TABLE)), [], 'every route the server has is in the table');
  t.same(Object.keys(HTTP_TABLE).filter((r) => !served.includes(r)).sort(), [], 'every route in the table exists');
  const methods = Object.values(resourceServiceDefinition).map((d) => d.path.split('/').pop() as string).sort();
  t.same(methods.filter((m) => !(m in GRPC_TABLE)), [], 'every gRPC method is in the table');
  t.same(Object.keys(GRPC_TABLE).filter((m) => !methods.includes(m)).sort(), []);
  // Routes that do not name a grant must be the ones meant to be public or checked by a service.
  const publicRoutes = node.routes.filter((r) => r.access === 'public').map((r) => `${r.method} ${r.pattern}`).sort();
  t.same(publicRoutes, ['GET /healthz', 'GET /readyz', 'GET /v1/status/leader', 'POST /v1/acl/bootstrap'], 'exactly these routes are public');
});

t.test('HTTP: every route, every identity', async (t) => {
  for (const [route, run] of Object.entries(HTTP_TABLE)) await t.test(route, run);
});

t.test('gRPC: every method of cairn.resource.v1.ResourceService, every identity', async (t) => {
  for (const [method, run] of Object.entries(GRPC_TABLE)) await t.test(method, run);
});

t.test('no token material reaches a refused caller: errors name the missing grant, never what exists', async (t) => {
  const a = await req('scoped', 'GET', `/v1/resource/${ARTIST}/b1${ns('team-b')}`);
  const b = await req('scoped', 'GET', `/v1/resource/${ARTIST}/no-such${ns('team-b')}`);
  t.equal(a.status, b.status);
  t.same((a.json as { error: { code: string } }).error.code, (b.json as { error: { code: string } }).error.code);
  t.notOk(a.text.includes(b1.id.uid), 'the uid of the hidden item is not in the error');
  const unknown = await node.http('GET', '/v1/acl/token/self', { token: `cairn_nobody_${'1'.repeat(64)}` });
  const forged = await node.http('GET', '/v1/acl/token/self', { token: `cairn_${ids.readerAccessor}_${'1'.repeat(64)}` });
  t.equal(unknown.text, forged.text, 'an unknown accessor and a wrong secret of a real one get the same answer');
});

t.test('a watch ends with PERMISSION_DENIED when its token is deleted (HTTP and gRPC)', async (t) => {
  const victim = await makeToken(node, ids.management, ['team-a']);
  const hw = httpWatch(node.agent.httpAddress, node.ca, [{ type: ARTIST, namespace: '*' }], victim.secret);
  const gw = grpcWatch(node.grpc, [{ type: ARTIST, tenancy: { partition: '*', namespace: '*' } }], victim.secret);
  try {
    await pollUntil(() => hw.lines.some((l) => l['type'] === 'tail') && gw.events.some((e) => e['event'] === 'tail'), 5000, 'both watches open');
    const start = performance.now();
    t.equal((await req('management', 'DELETE', `/v1/acl/tokens/${victim.accessor}`)).status, 200);
    const ackMs = performance.now() - start;
    const httpMs = await pollUntil(() => hw.ended, 3000, 'the HTTP watch to end', 2);
    const grpcMs = await pollUntil(() => gw.end !== undefined, 3000, 'the gRPC watch to end', 2);
    const last = hw.lines.at(-1) ?? {};
    t.match(last, { type: 'error', code: 'PERMISSION_DENIED' }, 'the HTTP stream ends with a PERMISSION_DENIED line');
    t.equal(gw.end?.code, 7, 'the gRPC stream ends with PERMISSION_DENIED');
    t.comment(`revocation -> watch end: delete acknowledged in ${ackMs.toFixed(0)} ms, HTTP watch ended ${(ackMs + httpMs).toFixed(0)} ms, gRPC ${(ackMs + Math.max(httpMs, grpcMs)).toFixed(0)} ms after the delete was sent`);
    t.ok(ackMs + httpMs < 1000, 'within one second');
  } finally {
    hw.cancel();
    gw.cancel();
  }
});

t.test('a role change that removes the grant ends a watch of that namespace; a narrowed grant narrows a watch of *', async (t) => {
  await makeRole(node, ids.management, 'team-a-2', [{ verbs: ['watch', 'read'], types: ['demo.*'], namespaces: ['team-a'] }]);
  const tk = await makeToken(node, ids.management, ['team-a-2']);
  const exact = httpWatch(node.agent.httpAddress, node.ca, [{ type: ARTIST, namespace: 'team-a' }], tk.secret);
  const wide = httpWatch(node.agent.httpAddress, node.ca, [{ type: ARTIST, namespace: '*' }], tk.secret);
  try {
    await pollUntil(() => exact.lines.some((l) => l['type'] === 'tail') && wide.lines.some((l) => l['type'] === 'tail'), 5000, 'both open');
    const start = performance.now();
    await makeRole(node, ids.management, 'team-a-2', [{ verbs: ['watch', 'read'], types: ['demo.*'], namespaces: ['team-c'] }]);
    const ms = await pollUntil(() => exact.ended, 3000, 'the team-a watch to end', 2);
    t.match(exact.lines.at(-1), { type: 'error', code: 'PERMISSION_DENIED' });
    t.comment(`role change -> watch end: ${(performance.now() - start).toFixed(0)} ms (poll ${ms.toFixed(0)} ms after the role write returned)`);
    // The * watch may go on (team-c is now watchable) but must send no team-a item from now on.
    // A team-c item arriving shows the re-check ran (under the old grant it was invisible).
    const named = (from: number, n: string): boolean => wide.lines.slice(from).some((l) => (l['value'] as Res | undefined)?.id.name === n);
    await put(ARTIST, 'team-c', 'in-c-1', { name: 'c' });
    await pollUntil(() => named(0, 'in-c-1') || wide.ended, 3000, 'the first team-c item');
    const n = wide.lines.length;
    await put(ARTIST, 'team-a', 'after-narrow', { name: 'x' });
    await put(ARTIST, 'team-c', 'in-c-2', { name: 'c' });
    await pollUntil(() => named(n, 'in-c-2') || wide.ended, 3000, 'the second team-c item or the end');
    t.notOk(named(n, 'after-narrow'), 'no team-a item after the grant narrowed');
  } finally {
    exact.cancel();
    wide.cancel();
  }
});

t.test('the stored role "anonymous" is what token-less requests may do; deleting it closes the door again', async (t) => {
  const path = `/v1/resource/${ARTIST}/a1${ns('team-a')}`;
  t.equal((await req('anonymous', 'GET', path)).status, 401, 'no anonymous role: refused');
  await makeRole(node, ids.management, 'anonymous', [{ verbs: ['read'], types: ['demo.v1.Artist'], namespaces: ['team-a'] }]);
  t.equal((await req('anonymous', 'GET', path)).status, 200, 'the anonymous role grants read in team-a');
  t.equal((await req('anonymous', 'GET', `/v1/resource/${ARTIST}/b1${ns('team-b')}`)).status, 401, '... and nothing else');
  t.equal((await req('anonymous', 'PUT', path, { data: { name: 'anon' } })).status, 401, '... not write');
  t.equal((await req('anonymous', 'GET', '/v1/acl/roles')).status, 401);
  t.equal((await req('management', 'DELETE', '/v1/acl/roles/anonymous')).status, 200);
  t.equal((await req('anonymous', 'GET', path)).status, 401, 'role deleted: refused again');
});

t.test('a token with an expiry is refused once it has passed', async (t) => {
  const r = await req('management', 'POST', '/v1/acl/tokens', { roles: ['reader'], expires_at: new Date(Date.now() + 1500).toISOString() });
  t.equal(r.status, 200);
  const secret = (r.json as { secret_id: string }).secret_id;
  const path = `/v1/resource/${ARTIST}/a1${ns('team-a')}`;
  t.equal((await node.http('GET', path, { token: secret })).status, 200, 'valid before');
  await pollUntil(async () => (await node.http('GET', path, { token: secret })).status === 401, 5000, 'the expired token to be refused', 50);
  t.pass('refused after its expiry');
  t.equal((await req('management', 'POST', '/v1/acl/tokens', { roles: ['reader'], expires_at: '2020-01-01T00:00:00Z' })).status, 400, 'an expiry in the past is refused');
});

t.test('a version-specific grant (demo.v1.Artist) is applied alike to reads and to lists of the same resource', async (t) => {
  // b2 was written as demo.v2.Artist in team-b. A token granted read and list on demo.v1.Artist only.
  await makeRole(node, ids.management, 'v1-only', [{ verbs: ['read', 'list'], types: ['demo.v1.Artist'] }]);
  const v1 = await makeToken(node, ids.management, ['v1-only']);
  const read = await node.http('GET', `/v1/resource/${ARTIST}/b2${ns('team-b')}`, { token: v1.secret });
  const list = await node.http('GET', `/v1/resources/${ARTIST}${ns('team-b')}`, { token: v1.secret });
  const listed = names(list).includes('team-b/b2');
  t.comment(`read b2 as demo.v1.Artist: ${read.status}; listed in demo.v1.Artist: ${listed}`);
  t.equal(read.status === 200, listed, 'b2 is readable exactly when it is listed');
});

t.test('a present but malformed Authorization header is refused, not taken for anonymous', async (t) => {
  await makeRole(node, ids.management, 'anonymous', [{ verbs: ['read'], types: ['demo.*'] }]);
  try {
    for (const h of ['Basic Zm9vOmJhcg==', `Token ${ids.reader}`, 'Bearer', 'Bearer ', ids.reader]) {
      const a = await node.http('GET', `/v1/resource/${ARTIST}/a1${ns('team-a')}`, { headers: { authorization: h } });
      t.equal(a.status, 401, `Authorization: ${h.slice(0, 20)}... -> 401 (got ${a.status})`);
    }
    // RFC 7235: the scheme is case-insensitive and one or more spaces may follow it.
    for (const h of [`bearer ${ids.reader}`, `Bearer  ${ids.reader}`]) {
      const a = await node.http('GET', `/v1/resource/${ARTIST}/a1${ns('team-a')}`, { headers: { authorization: h } });
      t.equal(a.status, 200, `Authorization: ${h.slice(0, 20)}... is the reader's token (got ${a.status})`);
    }
  } finally {
    await req('management', 'DELETE', '/v1/acl/roles/anonymous');
  }
});

t.test('an idempotency key is the caller\'s own: reusing another caller\'s key neither returns that caller\'s result nor skips the write', async (t) => {
  // Found by the fuzzer: the state machine's request-id table was global, so this returned the
  // team-b resource to the scoped token and did not apply its write. Fixed in resource-service.ts
  // (the key is scoped to the caller's token).
  const key = { 'idempotency-key': 'shared-key-1' };
  const m = await node.http('PUT', `/v1/resource/${ARTIST}/secret-b${ns('team-b')}`, { token: ids.management, body: JSON.stringify({ data: { name: 'secret of team-b' } }), headers: key });
  t.equal(m.status, 200);
  const s = await node.http('PUT', `/v1/resource/${ARTIST}/mine${ns('team-a')}`, { token: ids.scoped, body: JSON.stringify({ data: { name: 'mine' } }), headers: key });
  t.equal(s.status, 200);
  t.notOk(s.text.includes('secret of team-b'), 'the scoped token does not receive the team-b resource');
  t.equal((await req('scoped', 'GET', `/v1/resource/${ARTIST}/mine${ns('team-a')}`)).status, 200, 'its own write was applied');
  const again = await node.http('PUT', `/v1/resource/${ARTIST}/mine${ns('team-a')}`, { token: ids.scoped, body: JSON.stringify({ data: { name: 'mine' } }), headers: key });
  t.equal((again.json as Res).version, (s.json as Res).version, 'the same caller retrying with its key gets its first result (idempotency kept)');
  const g = await grpcUnary(node.grpc, 'Write', { id: { type: ARTIST, tenancy: { partition: 'default', namespace: 'team-a' }, name: 'mine-grpc' }, dataJson: '{"name":"g"}', requestId: 'shared-key-1' }, ids.reader);
  t.equal(g.code, 7, 'over gRPC too: the reader reusing the key is refused, not answered from the table');
});

t.test('a key the same caller reuses for another operation gets a clear error', async (t) => {
  const key = { 'idempotency-key': 'own-key-1' };
  t.equal((await node.http('PUT', `/v1/resource/${ARTIST}/reuse${ns('team-a')}`, { token: ids.scoped, body: JSON.stringify({ data: { name: 'r' } }), headers: key })).status, 200);
  const d = await node.http('DELETE', `/v1/resource/${ARTIST}/reuse${ns('team-a')}`, { token: ids.scoped, headers: key });
  t.equal(d.status, 400, `a key reused for another operation is INVALID_ARGUMENT (got ${d.status}: ${d.text.slice(0, 120)})`);
  t.equal((await req('scoped', 'GET', `/v1/resource/${ARTIST}/reuse${ns('team-a')}`)).status, 200, 'and nothing was deleted');
});

t.test('the finalizer path of a cascade: a scoped token may mark an owner, but not remove its last finalizer while a team-b child hangs below', async (t) => {
  const owner = await put(ARTIST, 'team-a', 'held-owner', { name: 'h' });
  await req('management', 'PUT', `/v1/resource/${ARTIST}/held-owner${ns('team-a')}`, { data: { name: 'h' }, finalizers: ['x.io/hold'] });
  await put(ALBUM, 'team-b', 'held-child', { title: 'c' }, owner);
  t.equal((await req('scoped', 'DELETE', `/v1/resource/${ARTIST}/held-owner${ns('team-a')}`)).status, 200, 'marking (finalizer present) deletes nothing: allowed');
  const before = await everything();
  const strip = await req('scoped', 'PUT', `/v1/resource/${ARTIST}/held-owner${ns('team-a')}`, { data: { name: 'h' }, finalizers: [] });
  t.equal(strip.status, 403, `removing the last finalizer would delete the team-b child: refused (${strip.text.slice(0, 160)})`);
  t.equal(await everything(), before, 'nothing changed');
  t.ok(await exists(ALBUM, 'team-b', 'held-child'));
  t.equal((await req('management', 'PUT', `/v1/resource/${ARTIST}/held-owner${ns('team-a')}`, { data: { name: 'h' }, finalizers: [] })).status, 200, 'management may');
  t.notOk(await exists(ALBUM, 'team-b', 'held-child'));
});

t.test('a watch resumed from an old revision replays only what the caller may see', async (t) => {
  // Changes in both namespaces after revision `from`, then watches resumed from it (inside the retained window).
  const from = (await req('management', 'GET', `/v1/resources/${ARTIST}${ns('*')}`)).json as { revision: string };
  await put(ARTIST, 'team-b', 'resume-b', { name: 'b' });
  await put(ARTIST, 'team-a', 'resume-a', { name: 'a' });
  const hw = httpWatch(node.agent.httpAddress, node.ca, [{ type: ARTIST, namespace: '*', gt_revision: from.revision }], ids.scoped);
  const all = httpWatch(node.agent.httpAddress, node.ca, [{ type: ARTIST, namespace: '*', gt_revision: from.revision }], ids.management);
  try {
    await put(ARTIST, 'team-a', 'resume-marker', { name: 'm' });
    const has = (w: typeof hw): boolean => w.lines.some((l) => (l['value'] as Res | undefined)?.id.name === 'resume-marker') || w.ended;
    await pollUntil(() => has(hw) && has(all), 5000, 'the marker on both replays');
    const spaces = (w: typeof hw): string[] => [...new Set(w.lines.flatMap((l) => (l['value'] ? [(l['value'] as Res).id.tenancy.namespace] : [])))].sort();
    t.same(spaces(all), ['team-a', 'team-b'], `the replay holds team-b changes (management sees them): ${JSON.stringify(all.lines[0] ?? {}).slice(0, 200)}`);
    t.same(spaces(hw), ['team-a'], 'the scoped replay holds team-a changes only');
  } finally {
    hw.cancel();
    all.cancel();
  }
});

t.test('certificates: a node certificate on gRPC acts as a cluster node; a client certificate does not; HTTPS ignores both', async (t) => {
  const nodeCert = await node.pki.node('n7');
  const clientCert = await node.pki.client('alice');
  const asNode = new grpc.Client(node.agent.grpcAddress, grpc.credentials.createSsl(node.ca, Buffer.from(nodeCert.keyPem), Buffer.from(nodeCert.certPem)));
  const asClient = new grpc.Client(node.agent.grpcAddress, grpc.credentials.createSsl(node.ca, Buffer.from(clientCert.keyPem), Buffer.from(clientCert.certPem)));
  try {
    const read = { id: { type: ARTIST, tenancy: { partition: 'default', namespace: 'team-b' }, name: 'b1' } };
    t.equal((await grpcUnary(asNode, 'Read', read)).code, 0, 'a node certificate without a token reads anything (a cluster node)');
    t.equal((await grpcUnary(asClient, 'Read', read)).code, 16, 'a client certificate without a token is anonymous');
    t.equal((await grpcUnary(asNode, 'Read', read, ids.scoped)).code, 7, 'a node certificate with a token is that token');
    const [host, port] = [node.agent.httpAddress.split(':')[0], Number(node.agent.httpAddress.split(':')[1])];
    const status = await new Promise<number>((resolve, reject) => {
      https
        .get({ host, port, path: `/v1/resource/${ARTIST}/b1${ns('team-b')}`, ca: node.ca, cert: nodeCert.certPem, key: nodeCert.keyPem, agent: false }, (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        })
        .on('error', reject);
    });
    t.equal(status, 401, 'over HTTPS a node certificate grants nothing');
  } finally {
    asNode.close();
    asClient.close();
  }
});

t.test('attaching to a lease is a scheduled delete: it needs write on the lease and delete on the resource and its cascade; detaching needs write only (review findings 4 and 6)', async (t) => {
  // The reviewer's scenario (scratch/authz-lease.mjs): management's Artist lp owns Album lc.
  const lp = await put(ARTIST, 'default', 'lp', { name: 'lp' });
  await put(ALBUM, 'default', 'lc', { title: 'lc' }, lp);
  await put(ARTIST, 'default', 'lq', { name: 'lq' });
  const leases = [{ verbs: ['write', 'read'], types: ['cairn.v1.ClusterLease'], name_prefix: 'svc-' }];
  await makeRole(node, ids.management, 'lease-writer', [{ verbs: ['read', 'write'], types: [ARTIST] }, ...leases]);
  await makeRole(node, ids.management, 'lease-artist-deleter', [{ verbs: ['read', 'write', 'delete'], types: [ARTIST] }, ...leases]);
  await makeRole(node, ids.management, 'lease-deleter', [{ verbs: ['read', 'write', 'delete'], types: [ARTIST, ALBUM] }, ...leases]);
  const writer = (await makeToken(node, ids.management, ['lease-writer'])).secret;
  const artistDeleter = (await makeToken(node, ids.management, ['lease-artist-deleter'])).secret;
  const deleter = (await makeToken(node, ids.management, ['lease-deleter'])).secret;
  t.equal((await req('management', 'POST', '/v1/leases', { ttl_seconds: 600, id: 'svc-att' })).status, 200);
  t.equal((await req('management', 'POST', '/v1/leases', { ttl_seconds: 600, id: 'ops-att' })).status, 200);
  const attach = (token: string, name: string, lease: string): Promise<HttpAnswer> =>
    node.http('PUT', `/v1/resource/${ARTIST}/${name}`, { token, body: JSON.stringify({ data: { name }, lease }) });
  const attachCas = async (token: string, name: string, lease: string): Promise<HttpAnswer> => {
    const cur = (await req('management', 'GET', `/v1/resource/${ARTIST}/${name}`)).json as Res;
    return node.http('PUT', `/v1/resource/${ARTIST}/${name}`, { token, body: JSON.stringify({ data: { name }, lease, version: cur.version }) });
  };
  const artistId = (n: string): object => ({ type: ARTIST, tenancy: { partition: 'default', namespace: 'default' }, name: n });
  const grpcAttach = (token: string, name: string, lease: string): Promise<GrpcAnswer> => grpcUnary(node.grpc, 'Write', { id: artistId(name), dataJson: JSON.stringify({ name }), lease }, token);
  const txnAttach = (token: string, name: string, lease: string): Promise<HttpAnswer> =>
    node.http('POST', '/v1/txn', { token, body: JSON.stringify({ then: [{ op: 'write', type: ARTIST, name, data: { name }, lease }] }) });
  const grpcTxnAttach = (token: string, name: string, lease: string): Promise<GrpcAnswer> => grpcUnary(node.grpc, 'Txn', { thenOps: [{ write: { id: artistId(name), dataJson: JSON.stringify({ name }), lease } }] }, token);
  const attached = (): string => JSON.stringify([...(node.agent.coordinator()?.leaseTable().leases.entries() ?? [])].map(([id, l]) => [id, l.attached]));

  const before = await everything();
  const leasesBefore = attached();
  // Finding 4: write without delete on the resource.
  for (const [what, a] of [
    ['PUT', await attach(writer, 'lq', 'svc-att')],
    ['PUT with a version', await attachCas(writer, 'lq', 'svc-att')],
    ['POST /v1/txn', await txnAttach(writer, 'lq', 'svc-att')],
  ] as const) t.equal(a.status, 403, `writer (no delete): ${what} attaching lq -> 403 (${a.text.slice(0, 160)})`);
  t.equal((await grpcAttach(writer, 'lq', 'svc-att')).code, 7, 'writer: gRPC Write attaching -> PERMISSION_DENIED');
  t.equal((await grpcTxnAttach(writer, 'lq', 'svc-att')).code, 7, 'writer: gRPC Txn attaching -> PERMISSION_DENIED');
  // Finding 4: delete on the resource but not on what it owns (lp owns Album lc).
  const cascade = await attach(artistDeleter, 'lp', 'svc-att');
  t.equal(cascade.status, 403, 'artist deleter: attaching lp, whose delete would delete Album lc -> 403');
  t.match(cascade.text, /schedules its delete, which would also delete owned resources/);
  t.equal((await txnAttach(artistDeleter, 'lp', 'svc-att')).status, 403, 'artist deleter: the same in a transaction');
  t.equal((await grpcTxnAttach(artistDeleter, 'lp', 'svc-att')).code, 7, 'artist deleter: the same in a gRPC transaction');
  // Finding 6: no write on the lease.
  t.equal((await attach(deleter, 'lq', 'ops-att')).status, 403, 'deleter: attaching to ops-att (no write on that lease) -> 403');
  t.equal((await grpcAttach(deleter, 'lq', 'ops-att')).code, 7, 'deleter: gRPC Write attaching to ops-att -> PERMISSION_DENIED');
  t.equal((await txnAttach(deleter, 'lq', 'ops-att')).status, 403, 'deleter: a transaction attaching to ops-att -> 403');
  t.equal(await everything(), before, 'the refused attachments changed nothing');
  t.equal(attached(), leasesBefore, 'nothing was attached');

  // Allowed: delete on the resource and its whole cascade, and write on the lease.
  t.equal((await attach(artistDeleter, 'lq', 'svc-att')).status, 200, 'artist deleter: lq owns nothing -> 200');
  t.equal((await grpcAttach(deleter, 'lp', 'svc-att')).code, 0, 'deleter: lp with its Album -> allowed');
  // Detaching needs write only.
  t.equal((await attach(writer, 'lq', '')).status, 200, 'writer: detaching lq -> 200');
  t.equal((await txnAttach(deleter, 'lq', 'svc-att')).status, 200, 'deleter: a transaction attaching lq -> 200');
  const revoked = await node.http('DELETE', '/v1/leases/svc-att', { token: writer });
  t.equal(revoked.status, 200, 'writer may revoke (write on the lease)');
  t.equal((revoked.json as { deleted: number }).deleted, 3, 'what the revoke deleted was allowed when attached: lp, its Album lc, lq');
  t.notOk(await exists(ALBUM, 'default', 'lc'));
  t.equal((await req('management', 'DELETE', '/v1/leases/ops-att')).status, 200);
});
