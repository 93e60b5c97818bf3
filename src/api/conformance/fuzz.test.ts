import t from 'tap';
import { mkdtemp, rm } from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { SeededRandom } from '../../base/index.js';
import { startSingleAgent, type AgentProcess } from './agent-process.js';
import { httpTarget, rawHttp } from './http-target.js';
import { HTTP2_PREFACE, exchange, http2Frame, parseHttpResponse, startsWithSettingsFrame, type Exchange } from './raw-socket.js';
import { errorShapeProblem } from './target.js';

/**
 * Fuzzing one agent's front doors: thousands of malformed and random HTTP requests, raw TCP
 * garbage to the HTTP port, and garbage to the gRPC (cluster) port.
 *
 * Every generated HTTP request is invalid by construction (each carries at least one defect
 * that alone makes the server refuse it), so the oracle is simple: every answer is a 4xx with
 * the JSON error shape of API.md, nothing hangs, the node stays up, and the store is exactly
 * what it was before. A 2xx is a bug (a request that should have been refused was applied),
 * a 5xx is a bug, silence is a bug.
 *
 * Environment: FUZZ_N (requests, default 3000), FUZZ_MS (time budget, default 60000),
 * FUZZ_SEED (default: random, printed first), FUZZ_ONLY (comma-separated request numbers, to
 * replay just those with the same seed).
 */

const N = Number(process.env['FUZZ_N'] ?? 3000);
const BUDGET_MS = Number(process.env['FUZZ_MS'] ?? 60_000);
const SEED = process.env['FUZZ_SEED'] !== undefined ? Number(process.env['FUZZ_SEED']) : Math.floor(Math.random() * 2 ** 31);
const ONLY = process.env['FUZZ_ONLY']?.split(',').map(Number);
const CONCURRENCY = 8;
const REQUEST_TIMEOUT_MS = 10_000;

t.comment(`fuzz seed ${SEED} (replay: FUZZ_SEED=${SEED} npx tap dist/src/api/conformance/fuzz.test.js; one request: add FUZZ_ONLY=<n>)`);

const rngFor = (n: number, salt: number): SeededRandom => new SeededRandom((SEED % 2 ** 31) * 4096 + salt * 1_000_000_007 + n);

// ---- Vocabulary ---------------------------------------------------------------------------

const VALID_TYPES = ['demo.v1.Artist', 'demo.v2.Artist', 'demo.v1.Album', 'demo.v1.RecordLabel', 'demo.v1.Executive'] as const;
type ValidType = (typeof VALID_TYPES)[number];
const SCOPE: Record<ValidType, 'namespace' | 'partition' | 'cluster'> = {
  'demo.v1.Artist': 'namespace',
  'demo.v2.Artist': 'namespace',
  'demo.v1.Album': 'namespace',
  'demo.v1.RecordLabel': 'partition',
  'demo.v1.Executive': 'cluster',
};
const BAD_TYPES = ['demo.Artist', 'demo.v9.Artist', 'Demo.v1.Artist', 'demo.v1.artist', 'x', 'demo..Artist', 'demo.v1.Artist.x', '%zz', 'demo.v1.Artist%00', 'demo.v1.Nothing', '*'];
const PERCENT_GARBAGE = ['%', '%z', '%zz', '%0', '%c0%af', '%e0%a4%a', '%ff', '%00', '%2e%2e', '%2E%2E', '%2f', '%5c', '%25', '%25%32%66', '%u0041', '%%', '%E2%98%83', '%F0%9F%8E%B8'];
const PATH_SAFE = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~!$&\'()*+,;=:@';
const CONTENT_TYPES = ['application/json', 'text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=zz', 'application/json; charset=utf-16', 'x/y', '', 'application/octet-stream', 'application/json;stream=watch'];
const METHODS_NO_ROUTE = ['POST', 'PATCH', 'OPTIONS', 'HEAD', 'TRACE'];
const EXISTING = { namespaced: ['fz-korn', 'fz-tool', 'fz-album', 'fz-status'], label: 'fz-label', exec: 'fz-boss' };

function chars(r: SeededRandom, alphabet: string, n: number): string {
  let s = '';
  for (let i = 0; i < n; i++) s += alphabet[r.int(alphabet.length)];
  return s;
}
const lower = (r: SeededRandom, n: number): string => chars(r, 'abcdefghijklmnopqrstuvwxyz0123456789', n);
const zz = (r: SeededRandom): string => `zz${lower(r, r.range(1, 12))}`;

function randomBytes(r: SeededRandom, n: number): Buffer {
  const b = Buffer.alloc(n);
  for (let i = 0; i < n; i++) b[i] = r.int(256);
  return b;
}

/** A path segment with no route meaning (never an operator word, so no request reaches the operator API). */
function garbageSegment(r: SeededRandom): string {
  switch (r.int(8)) {
    case 0:
      return zz(r);
    case 1:
      return r.pick(PERCENT_GARBAGE) + (r.chance(0.5) ? zz(r) : '');
    case 2:
      return r.pick(['..', '.', '%2e%2e', '.%2e', '...', '..;']);
    case 3:
      return `zz${'a'.repeat(r.range(200, 6000))}`;
    case 4:
      return `zz${chars(r, PATH_SAFE, r.range(1, 40))}`;
    case 5:
      return r.pick(['v1', 'resource', 'resources', 'status', 'v2', 'api']);
    case 6:
      return r.pick([...VALID_TYPES, ...BAD_TYPES]);
    default:
      return `zz${encodeURIComponent(String.fromCodePoint(r.range(0x80, 0x10ffff)).replace(/[\ud800-\udfff]/g, 'x'))}`;
  }
}

function typeSegment(r: SeededRandom): { seg: string; valid: ValidType | undefined } {
  if (r.chance(0.75)) {
    const v = r.pick(VALID_TYPES);
    return { seg: v, valid: v };
  }
  return { seg: r.chance(0.8) ? r.pick(BAD_TYPES) : garbageSegment(r), valid: undefined };
}

function nameSegment(r: SeededRandom, type: ValidType | undefined): string {
  const x = r.int(10);
  if (x < 4) {
    if (type === 'demo.v1.RecordLabel') return EXISTING.label;
    if (type === 'demo.v1.Executive') return EXISTING.exec;
    return r.pick(EXISTING.namespaced);
  }
  if (x < 7) return zz(r);
  return r.pick(['Korn', 'a_b', 'a.b', '-a', 'a-', `a${'b'.repeat(63)}`, '%2e%2e', '..', '%2F', 'a%20b', '%00', '*', `zz${'x'.repeat(r.range(64, 3000))}`, r.pick(PERCENT_GARBAGE)]);
}

/** Query parts for a tenancy: mostly valid for the type's scope, sometimes not. */
function tenancyParts(r: SeededRandom, type: ValidType | undefined): string[] {
  const scope = type === undefined ? 'namespace' : SCOPE[type];
  const parts: string[] = [];
  const val = (): string => r.pick(['default', 'fz', 'fz-p', '', zz(r), '*', 'Bad', '%00', 'a'.repeat(70), '%zz']);
  if (scope !== 'cluster' && r.chance(0.6)) parts.push(`partition=${r.chance(0.8) ? r.pick(['default', 'fz-p', '']) : val()}`);
  if (scope === 'namespace' && r.chance(0.7)) parts.push(`namespace=${r.chance(0.8) ? r.pick(['default', 'fz', '']) : val()}`);
  if (r.chance(0.05)) parts.push(`namespace=${val()}`);
  return parts;
}

function validData(r: SeededRandom, type: ValidType | undefined): Record<string, unknown> {
  switch (type) {
    case 'demo.v1.Artist':
      return { name: zz(r), ...(r.chance(0.5) ? { genre: r.pick(['rock', 'jazz', 'pop', 'metal', 'unknown']) } : {}) };
    case 'demo.v2.Artist':
      return { name: zz(r), ...(r.chance(0.5) ? { members: r.int(10) } : {}) };
    case 'demo.v1.Album':
      return { title: zz(r), ...(r.chance(0.5) ? { year: r.range(1900, 2100) } : {}), ...(r.chance(0.3) ? { tracks: [zz(r), zz(r)] } : {}) };
    case 'demo.v1.RecordLabel':
      return { name: zz(r) };
    case 'demo.v1.Executive':
      return { name: zz(r), ...(r.chance(0.5) ? { position: zz(r) } : {}) };
    default:
      return { name: zz(r) };
  }
}

/** A JSON value of a random type, never an object (so never a valid `data`). */
function wrongScalar(r: SeededRandom): unknown {
  return r.pick([0, -1, 1.5, 1e308, true, false, 'x', '', [], [1, 'a'], [{}]]);
}

function deepJson(r: SeededRandom): string {
  const n = r.range(50, 60_000);
  return r.chance(0.5) ? `${'['.repeat(n)}${']'.repeat(n)}` : `${'{"a":'.repeat(n)}1${'}'.repeat(n)}`;
}

/** JSON text that does not parse. */
function notJson(r: SeededRandom, valid: string): string {
  switch (r.int(9)) {
    case 0:
      return valid.slice(0, r.int(Math.max(1, valid.length - 1)));
    case 1:
      return `${valid.slice(0, -1)},}`;
    case 2:
      return valid.replace(/"/g, "'");
    case 3:
      return `{"data": NaN}`;
    case 4:
      return `${valid} ${valid}`;
    case 5:
      return `}${randomBytes(r, r.range(0, 200)).toString('latin1')}`;
    case 6:
      return `\ufeff${valid}x`;
    case 7:
      return '{"data":{"name":"x"}'.repeat(r.range(1, 50));
    default:
      return `{"data": {"name": "\\u12"}}`;
  }
}

// ---- Requests -----------------------------------------------------------------------------

interface FuzzRequest {
  readonly n: number;
  /** category/defect, for the summary. */
  readonly kind: string;
  readonly method: string;
  readonly target: string;
  readonly headers: ReadonlyArray<readonly [string, string]>;
  readonly body?: Buffer;
  readonly chunked?: boolean;
  /** Send `Connection: close` (else the connection is kept alive and we close it after the answer). */
  readonly close?: boolean;
}

const WRITE_FIELDS = ['data', 'metadata', 'owner', 'finalizers', 'version', 'status', 'uid'];

/** A write body with exactly the defect named, on top of a body that would otherwise be valid for `type`. */
function writeBody(r: SeededRandom, type: ValidType | undefined, defect: string): Buffer {
  const base: Record<string, unknown> = { data: validData(r, type) };
  if (r.chance(0.2)) base['metadata'] = { team: zz(r) };
  if (r.chance(0.1)) base['finalizers'] = ['cairn.test/fz'];
  if (r.chance(0.1)) base['version'] = r.pick(['0', '1', '999999']);
  const json = (o: unknown): Buffer => Buffer.from(JSON.stringify(o));
  switch (defect) {
    case 'unknown-field':
      return json({ ...base, [r.chance(0.5) ? zz(r) : r.pick(['id', 'type', 'name', 'generation', 'deletion_timestamp', 'Data', 'DATA', 'updated_at', '__proto__x'])]: wrongScalar(r) });
    case 'not-json':
      return Buffer.from(notJson(r, JSON.stringify(base)));
    case 'not-object':
      return Buffer.from(r.pick(['[]', '[{"data":{"name":"x"}}]', '"data"', '0', 'null', 'true', '""']));
    case 'wrong-type': {
      const field = r.pick(WRITE_FIELDS);
      const bad: Record<string, unknown[]> = {
        data: [0, 'x', [], true, null, [1]],
        metadata: [[], 0, 'k=v', null, true, { k: 1 }, { k: {} }, { k: null }, { 'bad key': 'v' }],
        owner: [0, 'fz-korn', true, [], {}, { type: 'demo.v1.Artist' }, { type: 0, name: 'x', uid: 'x' }],
        finalizers: ['f', 0, {}, null, [1], [null], [{}], ['bad finalizer'], ['cairn.test/a', 'cairn.test/a']],
        version: [0, 1, true, {}, [], 'abc', '-1', '1e3', ' 1', '01', '0x10', '99999999999999999999'],
        status: [[], 0, 'x', true, { k: 1 }, { k: {} }, { k: [] }],
        uid: [0, true, {}, []],
      };
      return json({ ...base, [field]: r.pick(bad[field] ?? [0]) });
    }
    case 'schema': {
      const data = r.chance(0.5) ? {} : { ...validData(r, type), [zz(r)]: wrongScalar(r) };
      return json({ ...base, data });
    }
    case 'deep': {
      // The deep value replaces one field; the others stay valid, so depth is the defect.
      const where = r.pick(['data', 'data', 'metadata', 'owner', 'finalizers', 'status']);
      const rest = JSON.stringify({ ...base, [where]: undefined }).slice(1, -1);
      return Buffer.from(`{"${where}":${deepJson(r)}${rest === '' ? '' : `,${rest}`}}`);
    }
    case 'huge-string':
      // Big but under the limit, with an unknown field so it is still refused.
      return json({ ...base, data: { ...validData(r, type), name: 'x'.repeat(r.range(100_000, 900_000)) }, [zz(r)]: 1 });
    case 'random-bytes':
      return Buffer.concat([Buffer.from('}'), randomBytes(r, r.range(0, 4000))]);
    default:
      throw new Error(`unknown write defect ${defect}`);
  }
}

function statusBody(r: SeededRandom, defect: string): Buffer {
  const base: Record<string, unknown> = { uid: zz(r), observed_generation: zz(r), conditions: r.chance(0.5) ? [] : [{ type: 'Ready', state: 'TRUE' }] };
  const json = (o: unknown): Buffer => Buffer.from(JSON.stringify(o));
  switch (defect) {
    case 'unknown-field':
      return json({ ...base, [r.pick(['updated_at', 'key', 'status', zz(r)])]: wrongScalar(r) });
    case 'missing-uid': {
      const { uid: _uid, ...rest } = base;
      return json(r.chance(0.5) ? rest : { ...rest, uid: r.pick([null, '']) });
    }
    case 'wrong-type': {
      const field = r.pick(['uid', 'observed_generation', 'conditions', 'version']);
      const bad: Record<string, unknown[]> = {
        uid: [0, true, {}, []],
        observed_generation: [0, true, {}, []],
        conditions: [0, 'x', {}, [0], [{}], [{ type: 'A', state: 'MAYBE' }], [{ type: '', state: 'TRUE' }], [{ type: 'A', state: 'TRUE', zz: 1 }]],
        version: [0, true, {}, 'abc', '-1'],
      };
      return json({ ...base, [field]: r.pick(bad[field] ?? [0]) });
    }
    case 'foreign-uid':
      // Every other field valid; the uid is never one the server handed out: NOT_FOUND.
      return json(base);
    case 'not-json':
      return Buffer.from(notJson(r, JSON.stringify(base)));
    case 'deep':
      return Buffer.from(`{"uid":"zz","observed_generation":"g","conditions":${deepJson(r)}}`);
    default:
      throw new Error(`unknown status defect ${defect}`);
  }
}

function randomQueryJunk(r: SeededRandom): string[] {
  const parts: string[] = [];
  for (let i = r.int(2); i > 0; i--) parts.push(r.pick(['', '&', '=', '==', `${zz(r)}`, `a=${r.pick(PERCENT_GARBAGE)}`, `${r.pick(PERCENT_GARBAGE)}=1`, `x=${'q'.repeat(r.range(1, 1500))}`]));
  return parts;
}

function withQuery(path: string, parts: readonly string[]): string {
  return parts.length === 0 ? path : `${path}?${parts.join('&')}`;
}

function unknownParam(r: SeededRandom, allowed: readonly string[]): string {
  const candidates = ['uid', 'version', 'consistency', 'name_prefix', 'owner_uid', 'data', 'type', 'name', 'limit', 'watch', 'partition[]', 'Namespace'].filter((k) => !allowed.includes(k));
  return `${r.chance(0.5) ? zz(r) : r.pick(candidates)}=${r.chance(0.5) ? '' : zz(r)}`;
}

function generate(n: number): FuzzRequest {
  const r = rngFor(n, 1);
  const headers: Array<[string, string]> = [];
  if (r.chance(0.5)) {
    const ct = r.pick(CONTENT_TYPES);
    if (ct !== '') headers.push(['Content-Type', ct]);
  }
  if (r.chance(0.05)) headers.push(['Idempotency-Key', r.chance(0.5) ? zz(r) : 'k'.repeat(200)]);
  if (r.chance(0.03)) headers.push(['Expect', '100-continue']);
  if (r.chance(0.05)) headers.push(['Authorization', `Bearer ${zz(r)}`]);
  const chunked = r.chance(0.1);
  const category = r.pick(['write', 'write', 'write', 'status', 'status', 'delete', 'read', 'list', 'method', 'path', 'oversize']);
  const { seg: typeSeg, valid: type } = typeSegment(r);
  const name = nameSegment(r, type);
  const ten = tenancyParts(r, type);
  const junk = r.chance(0.2) ? randomQueryJunk(r) : [];
  switch (category) {
    case 'write': {
      // Query junk could contain an unknown key (a defect on its own): keep it only with the query defect.
      const defect = r.pick(['unknown-query', 'unknown-field', 'not-json', 'not-object', 'wrong-type', 'wrong-type', 'schema', 'deep', 'huge-string', 'random-bytes']);
      const query = defect === 'unknown-query' ? [unknownParam(r, ['partition', 'namespace']), ...ten, ...junk] : ten;
      const body = defect === 'unknown-query' ? Buffer.from(JSON.stringify({ data: validData(r, type) })) : writeBody(r, type, defect);
      return { n, kind: `write/${defect}`, method: 'PUT', target: withQuery(`/v1/resource/${typeSeg}/${name}`, query), headers, body, chunked };
    }
    case 'status': {
      const defect = r.pick(['unknown-query', 'unknown-field', 'missing-uid', 'wrong-type', 'foreign-uid', 'not-json', 'deep']);
      const key = r.chance(0.8) ? r.pick(['demo.v1.artist-controller', 'cairn.test%2Fc', 'k']) : r.pick(['bad%20key', '%zz', '..', 'a'.repeat(300), zz(r)]);
      const query = defect === 'unknown-query' ? [unknownParam(r, ['partition', 'namespace']), ...ten, ...junk] : ten;
      const body = defect === 'unknown-query' ? statusBody(r, 'foreign-uid') : statusBody(r, defect);
      return { n, kind: `status/${defect}`, method: 'PUT', target: withQuery(`/v1/resource/${typeSeg}/${name}/status/${key}`, query), headers, body, chunked };
    }
    case 'delete': {
      const defect = r.pick(['unknown-query', 'bad-version', 'bad-name', 'bad-type', 'bad-tenancy', 'duplicate-param']);
      let t = typeSeg;
      let nm = name;
      let query = [...ten];
      if (defect === 'unknown-query') query.push(unknownParam(r, ['partition', 'namespace', 'version', 'uid']), ...junk);
      if (defect === 'bad-version') query.push(`version=${r.pick(['abc', '-1', '1.0', '0x1', '%zz', '01', '%201', '99999999999999999999'])}`);
      if (defect === 'bad-name') nm = r.pick(['Korn', 'a_b', '-a', `a${'b'.repeat(63)}`, '%2F', '*', 'a%20b']);
      if (defect === 'bad-type') t = r.pick(BAD_TYPES);
      if (defect === 'bad-tenancy') query = type !== undefined && SCOPE[type] === 'cluster' ? [`namespace=${zz(r)}`] : [`partition=${r.pick(['*', 'Bad', '%00', 'a'.repeat(70)])}`];
      if (defect === 'duplicate-param') query.push('version=1', 'version=1');
      return { n, kind: `delete/${defect}`, method: 'DELETE', target: withQuery(`/v1/resource/${t}/${nm}`, query), headers, ...(r.chance(0.2) ? { body: writeBody(r, type, 'unknown-field') } : {}) };
    }
    case 'read': {
      const defect = r.pick(['unknown-query', 'bad-consistency', 'bad-name', 'bad-type', 'duplicate-param']);
      let t = typeSeg;
      let nm = name;
      const query = [...ten];
      if (defect === 'unknown-query') query.push(unknownParam(r, ['partition', 'namespace', 'uid', 'consistency']), ...junk);
      if (defect === 'bad-consistency') query.push(`consistency=${r.pick(['', 'eventual', 'LINEARIZABLE', 'stale%20', zz(r)])}`);
      if (defect === 'bad-name') nm = r.pick(['Korn', 'a_b', '-a', `a${'b'.repeat(63)}`, '%2F', '*']);
      if (defect === 'bad-type') t = r.pick(BAD_TYPES);
      if (defect === 'duplicate-param') query.push('uid=a', 'uid=b');
      return { n, kind: `read/${defect}`, method: 'GET', target: withQuery(`/v1/resource/${t}/${nm}`, query), headers };
    }
    case 'list': {
      const defect = r.pick(['unknown-query', 'bad-consistency', 'bad-prefix', 'bad-type', 'duplicate-param', 'scope', 'bad-limit', 'bad-continue']);
      const t = defect === 'bad-type' ? r.pick(BAD_TYPES.filter((x) => x !== 'demo.Artist')) : r.chance(0.3) ? r.pick(['demo.Artist', 'demo.Album', 'demo.RecordLabel', 'demo.Executive']) : typeSeg;
      const query = [...ten];
      if (defect === 'unknown-query') query.push(unknownParam(r, ['partition', 'namespace', 'name_prefix', 'owner_uid', 'consistency', 'limit', 'continue']), ...junk);
      if (defect === 'bad-consistency') query.push(`consistency=${r.pick(['', 'eventual', zz(r)])}`);
      if (defect === 'bad-prefix') query.push(`name_prefix=${r.pick(['A', 'a_', 'a.b', '%00', 'x'.repeat(64), '*'])}`);
      if (defect === 'duplicate-param') query.push('name_prefix=a', 'name_prefix=b');
      if (defect === 'scope') query.push(`namespace=${r.pick(['Bad', '%00', 'a*', '**'])}`);
      if (defect === 'bad-limit') query.push(`limit=${r.pick(['-1', '1.5', 'abc', '99999999999', '%00', '1e3', '0x10', ' 5'])}`);
      if (defect === 'bad-continue') {
        const json = r.pick(['{}', '[]', 'null', '{"v":1}', '{"v":1,"r":"1","k":"x","f":"short"}', '{"v":2,"r":"1","k":"x","f":"aaaaaaaaaaaaaaaaaaaaaa"}', zz(r)]);
        query.push(`continue=${r.pick([zz(r), Buffer.from(json).toString('base64url'), 'A'.repeat(r.range(4097, 6000)), '%00', '!!'])}`);
      }
      return { n, kind: `list/${defect}`, method: 'GET', target: withQuery(`/v1/resources/${t}`, query), headers };
    }
    case 'method': {
      const m = r.pick(METHODS_NO_ROUTE);
      const p = r.pick([`/v1/resource/${typeSeg}/${name}`, `/v1/resources/${typeSeg}`, `/v1/resource/${typeSeg}/${name}/status/k`]);
      return { n, kind: `method/${m}`, method: m, target: withQuery(p, [...ten, ...junk]), headers, ...(m === 'POST' || m === 'PATCH' ? { body: Buffer.from(JSON.stringify({ data: validData(r, type) })) } : {}), chunked };
    }
    case 'path': {
      // Random segments; an unknown query parameter and an unknown body field make any route it
      // happens to reach (after dot-segment resolution) refuse it.
      // (Kept under 10 KB so the request head stays within Node's 16 KiB header limit: an
      // over-long head is a protocol error, fuzzed with the raw garbage below.)
      const segs: string[] = [];
      for (let i = r.range(0, 7), len = 0; i > 0 && len < 10_000; i--) {
        const g = garbageSegment(r);
        segs.push(g);
        len += g.length;
      }
      if (r.chance(0.5)) segs.unshift('v1', r.pick(['resource', 'resources']));
      const m = r.pick(['GET', 'PUT', 'POST', 'DELETE', 'PATCH', 'OPTIONS', 'HEAD']);
      const target = withQuery(`/${segs.join('/')}${r.chance(0.2) ? '/' : ''}`, [`${zz(r)}=1`, ...randomQueryJunk(r)]);
      return { n, kind: `path/${m}`, method: m, target, headers, ...(m === 'GET' || m === 'HEAD' ? {} : { body: writeBody(r, type, 'unknown-field') }), chunked };
    }
    default: {
      // Over 1 MiB, declared (Content-Length) or not (chunked); valid JSON or not.
      const size = r.range(1024 * 1024 + 1, 3 * 1024 * 1024);
      const body = r.chance(0.5) ? Buffer.from(JSON.stringify({ data: { name: 'x'.repeat(size) } })) : Buffer.alloc(size, 0x61);
      const p = r.chance(0.8) ? `/v1/resource/${typeSeg}/${name}` : `/v1/resource/${typeSeg}/${name}/status/k`;
      const close = r.chance(0.5);
      return { n, kind: `oversize/${chunked ? 'chunked' : 'content-length'}${close ? '+close' : ''}`, method: 'PUT', target: withQuery(p, ten), headers, body, chunked, close };
    }
  }
}

function serialize(req: FuzzRequest, r: SeededRandom): Uint8Array[] {
  const lines = [`${req.method} ${req.target} HTTP/1.1`, 'Host: 127.0.0.1', ...(req.close === true ? ['Connection: close'] : []), ...req.headers.map(([k, v]) => `${k}: ${v}`)];
  if (req.body !== undefined && req.chunked !== true) lines.push(`Content-Length: ${req.body.length}`);
  if (req.body !== undefined && req.chunked === true) lines.push('Transfer-Encoding: chunked');
  const head = Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1');
  if (req.body === undefined) return [head];
  if (req.chunked !== true) return [head, req.body];
  const out: Uint8Array[] = [head];
  for (let i = 0; i < req.body.length; ) {
    const size = Math.min(req.body.length - i, r.range(1, 256 * 1024));
    out.push(Buffer.from(`${size.toString(16)}\r\n`, 'latin1'), req.body.subarray(i, i + size), Buffer.from('\r\n', 'latin1'));
    i += size;
  }
  out.push(Buffer.from('0\r\n\r\n', 'latin1'));
  return out;
}

function describe(req: FuzzRequest): string {
  const body = req.body === undefined ? '' : ` body(${req.body.length}${req.chunked === true ? ', chunked' : ''}): ${JSON.stringify(req.body.subarray(0, 160).toString('latin1'))}`;
  const headers = req.headers.length > 0 ? ` headers ${JSON.stringify(req.headers)}` : '';
  return `#${req.n} [${req.kind}]${req.close === true ? ' (Connection: close)' : ''} ${req.method} ${req.target.slice(0, 240)}${req.target.length > 240 ? `...(${req.target.length})` : ''}${headers}${body}`;
}

/** What is wrong with the answer to an invalid request, or undefined when it is right. */
function judge(req: FuzzRequest, ex: Exchange): { verdict: string; problem: string | undefined } {
  if (ex.timedOut) return { verdict: 'hang', problem: `no complete answer within ${REQUEST_TIMEOUT_MS} ms (received ${ex.received.length} bytes)` };
  const res = parseHttpResponse(ex.received);
  if (res === undefined) return { verdict: 'no-response', problem: `the connection ended without an HTTP response (${ex.error ?? 'closed'}; ${ex.received.length} bytes: ${JSON.stringify(ex.received.subarray(0, 80).toString('latin1'))})` };
  const verdict = String(res.status);
  if (res.status < 400 || res.status >= 500) return { verdict, problem: `HTTP ${res.status}: ${res.body.subarray(0, 300).toString('utf8')}` };
  if (req.method === 'HEAD') return { verdict, problem: undefined };
  if (!res.complete) return { verdict, problem: `HTTP ${res.status} with a truncated body` };
  if (!(res.headers['content-type'] ?? '').startsWith('application/json')) return { verdict, problem: `HTTP ${res.status} with content-type ${JSON.stringify(res.headers['content-type'])}: ${res.body.subarray(0, 200).toString('utf8')}` };
  let json: unknown;
  try {
    json = JSON.parse(res.body.toString('utf8')) as unknown;
  } catch {
    return { verdict, problem: `HTTP ${res.status} with a body that is not JSON: ${res.body.subarray(0, 200).toString('utf8')}` };
  }
  const shape = errorShapeProblem(json);
  return { verdict, problem: shape === undefined ? undefined : `HTTP ${res.status}: ${shape}` };
}

// ---- Raw TCP garbage ----------------------------------------------------------------------

/** Bytes that are not a well-formed HTTP/1.1 request (or are one cut short). */
function httpGarbage(n: number): { kind: string; payload: Uint8Array[] } {
  const r = rngFor(n, 2);
  const crlf = '\r\n';
  const kind = r.pick(['random-bytes', 'random-bytes-crlf', 'bad-method', 'connect', 'non-ascii-url', 'space-in-url', 'header-no-colon', 'long-url', 'long-header', 'cl-and-te', 'bad-cl', 'bad-chunk', 'h2-preface', 'http09', 'lf-only', 'truncated-head', 'truncated-body', 'pipelined', 'null-bytes', 'http-version']);
  const s = (x: string): Uint8Array[] => [Buffer.from(x, 'latin1')];
  const okBody = '{"data":{"name":"x"},"zz":1}';
  const req = (line: string, headers: string[] = [], body = ''): string => `${line}${crlf}Host: x${crlf}${headers.map((h) => `${h}${crlf}`).join('')}${crlf}${body}`;
  switch (kind) {
    case 'random-bytes':
      return { kind, payload: [randomBytes(r, r.range(1, 5000))] };
    case 'random-bytes-crlf':
      return { kind, payload: [randomBytes(r, r.range(1, 500)), Buffer.from('\r\n\r\n')] };
    case 'bad-method':
      return { kind, payload: s(req(`${r.pick(['FOO', 'G ET', 'get', 'PUTT', '', '\x00GET', 'GETGETGETGETGETGETGETGET'])} /v1/resources/demo.v1.Artist?zz=1 HTTP/1.1`)) };
    case 'connect':
      return { kind, payload: s(req('CONNECT 127.0.0.1:22 HTTP/1.1')) };
    case 'non-ascii-url':
      return { kind, payload: [Buffer.from('GET /v1/resource/demo.v1.Artist/'), Buffer.from(randomBytes(r, r.range(1, 40)).map((b) => b | 0x80)), Buffer.from(`?zz=1 HTTP/1.1${crlf}Host: x${crlf}${crlf}`)] };
    case 'space-in-url':
      return { kind, payload: s(req('GET /v1/resource/demo.v1.Artist/a b?zz=1 HTTP/1.1')) };
    case 'header-no-colon':
      return { kind, payload: s(req('GET /v1/resources/demo.v1.Artist?zz=1 HTTP/1.1', ['NoColonHere', `X-${zz(r)} ${zz(r)}`])) };
    case 'long-url':
      return { kind, payload: s(req(`GET /v1/resource/demo.v1.Artist/${'a'.repeat(r.range(17_000, 100_000))}?zz=1 HTTP/1.1`)) };
    case 'long-header':
      return { kind, payload: s(req('GET /v1/resources/demo.v1.Artist?zz=1 HTTP/1.1', [`X-Big: ${'b'.repeat(r.range(17_000, 100_000))}`])) };
    case 'cl-and-te':
      return { kind, payload: s(req('PUT /v1/resource/demo.v1.Artist/zzx HTTP/1.1', [`Content-Length: ${okBody.length}`, 'Transfer-Encoding: chunked'], okBody)) };
    case 'bad-cl':
      return { kind, payload: s(req('PUT /v1/resource/demo.v1.Artist/zzx HTTP/1.1', [`Content-Length: ${r.pick(['-1', 'abc', '1e3', '99999999999999999999999', ' ', '10, 20', '0x10'])}`], okBody)) };
    case 'bad-chunk':
      return { kind, payload: s(req('PUT /v1/resource/demo.v1.Artist/zzx HTTP/1.1', ['Transfer-Encoding: chunked'], `${r.pick(['zz', '-1', 'fffffffffffffffff', '5;'])}${crlf}${okBody}${crlf}0${crlf}${crlf}`)) };
    case 'h2-preface':
      return { kind, payload: [HTTP2_PREFACE, http2Frame(4, 0, 0)] };
    case 'http09':
      return { kind, payload: s(`GET /v1/resources/demo.v1.Artist?zz=1${crlf}`) };
    case 'lf-only':
      return { kind, payload: s('GET /v1/resources/demo.v1.Artist?zz=1 HTTP/1.1\nHost: x\n\n') };
    case 'truncated-head':
      return { kind, payload: s(req('PUT /v1/resource/demo.v1.Artist/zzx HTTP/1.1', ['Content-Type: application/json']).slice(0, r.range(1, 60))) };
    case 'truncated-body': {
      const full = r.chance(0.5) ? okBody : JSON.stringify({ data: { name: 'x'.repeat(r.range(1000, 500_000)) }, zz: 1 });
      return { kind, payload: s(req('PUT /v1/resource/demo.v1.Artist/zzx HTTP/1.1', [`Content-Length: ${full.length + r.range(1, 1000)}`], full)) };
    }
    case 'pipelined':
      return { kind, payload: s(`${req('GET /v1/resources/demo.v1.Artist?zz=1 HTTP/1.1')}${randomBytes(r, r.range(1, 300)).toString('latin1')}`) };
    case 'null-bytes':
      return { kind, payload: s(req('GET /v1/resources/demo.v1.Artist?zz=1 HTTP/1.1', [`X-Null: a\x00b`])) };
    default:
      return { kind, payload: s(req(`GET /v1/resources/demo.v1.Artist?zz=1 ${r.pick(['HTTP/2.0', 'HTTP/3', 'HTTP/1.2', 'HTTP/0.9', 'HTTPS/1.1', 'HTTP/1.1x'])}`)) };
  }
}

/** Bytes for the gRPC (HTTP/2) port that are not a well-behaved gRPC client. */
function grpcGarbage(n: number): { kind: string; payload: Uint8Array[] } {
  const r = rngFor(n, 3);
  const kind = r.pick(['random-bytes', 'http1-request', 'truncated-preface', 'preface-random-frames', 'preface-bad-headers', 'preface-huge-frame', 'preface-only', 'bad-preface', 'preface-goaway', 'preface-data-stream0']);
  switch (kind) {
    case 'random-bytes':
      return { kind, payload: [randomBytes(r, r.range(1, 5000))] };
    case 'http1-request':
      return { kind, payload: [Buffer.from(`${r.pick(['GET', 'POST', 'PRI'])} /cairn.cluster.v1.Cluster/Hello HTTP/1.1\r\nHost: x\r\nContent-Type: application/grpc\r\nContent-Length: 5\r\n\r\n\x00\x00\x00\x00\x00`, 'latin1')] };
    case 'truncated-preface':
      return { kind, payload: [HTTP2_PREFACE.subarray(0, r.range(1, HTTP2_PREFACE.length - 1))] };
    case 'preface-random-frames': {
      const frames: Uint8Array[] = [HTTP2_PREFACE, http2Frame(4, 0, 0)];
      for (let i = r.range(1, 10); i > 0; i--) frames.push(http2Frame(r.int(12), r.int(256), r.int(8), randomBytes(r, r.range(0, 300))));
      return { kind, payload: frames };
    }
    case 'preface-bad-headers':
      return { kind, payload: [HTTP2_PREFACE, http2Frame(4, 0, 0), http2Frame(1, 0x4 | 0x1, 1, randomBytes(r, r.range(1, 200)))] };
    case 'preface-huge-frame': {
      const h = Buffer.alloc(9);
      h.writeUIntBE(0xffffff, 0, 3);
      h.writeUInt8(0, 3);
      h.writeUInt32BE(1, 5);
      return { kind, payload: [HTTP2_PREFACE, http2Frame(4, 0, 0), h, randomBytes(r, 1000)] };
    }
    case 'preface-only':
      return { kind, payload: [HTTP2_PREFACE] };
    case 'bad-preface':
      return { kind, payload: [Buffer.from('PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n', 'latin1'), randomBytes(r, r.range(0, 100))] };
    case 'preface-goaway':
      return { kind, payload: [HTTP2_PREFACE, http2Frame(4, 0, 0), http2Frame(7, 0, 0, randomBytes(r, 8))] };
    default:
      return { kind, payload: [HTTP2_PREFACE, http2Frame(4, 0, 0), http2Frame(0, 1, 0, randomBytes(r, r.range(0, 100)))] };
  }
}

// ---- The run ------------------------------------------------------------------------------

const dir = await mkdtemp(path.join(os.tmpdir(), 'cairn-fuzz-'));
let started: AgentProcess | undefined;
t.teardown(async () => {
  await started?.stop();
  await rm(dir, { recursive: true, force: true });
});
const agent = await startSingleAgent(path.join(dir, 'n1'));
started = agent;
const httpPort = Number(agent.httpAddress.split(':')[1]);
const grpcPort = Number(agent.grpcAddress.split(':')[1]);
const api = httpTarget('fuzz target', agent.httpAddress);

async function mustOk<T>(p: Promise<{ ok: true; value: T } | { ok: false; error: { code: string; message: string } }>, what: string): Promise<T> {
  const r = await p;
  if (!r.ok) throw new Error(`${what}: ${r.error.code}: ${r.error.message}`);
  return r.value;
}

/** Every resource of every demo type in every tenancy, as JSON text. */
async function storeContents(): Promise<string> {
  const parts: string[] = [];
  for (const [type, q] of [
    ['demo.Artist', { partition: '*', namespace: '*' }],
    ['demo.Album', { partition: '*', namespace: '*' }],
    ['demo.RecordLabel', { partition: '*' }],
    ['demo.Executive', {}],
  ] as const) {
    parts.push(`${type}: ${JSON.stringify((await mustOk(api.list(type, q), `list ${type}`)).resources)}`);
  }
  return parts.join('\n');
}

// Something for fuzzed requests to aim at: resources of every scope, an owner, a finalizer, a status.
const korn = await mustOk(api.write('demo.v1.Artist', 'fz-korn', {}, { data: { name: 'Korn', genre: 'metal' }, metadata: { team: 'a' } }), 'seed korn');
await mustOk(api.write('demo.v2.Artist', 'fz-tool', { namespace: 'fz' }, { data: { name: 'Tool', members: 4 } }), 'seed tool');
await mustOk(api.write('demo.v1.Album', 'fz-album', {}, { data: { title: 'Issues', year: 1999 }, owner: korn.id, finalizers: ['cairn.test/hold'] }), 'seed album');
const st = await mustOk(api.write('demo.v1.Artist', 'fz-status', { partition: 'fz-p', namespace: 'fz' }, { data: { name: 'S' } }), 'seed status');
await mustOk(api.writeStatus('demo.v1.Artist', 'fz-status', 'demo.v1.artist-controller', { partition: 'fz-p', namespace: 'fz' }, { uid: st.id.uid, observed_generation: st.generation, conditions: [{ type: 'Accepted', state: 'TRUE' }] }), 'seed status key');
await mustOk(api.write('demo.v1.RecordLabel', 'fz-label', { partition: 'fz-p' }, { data: { name: 'L' } }), 'seed label');
await mustOk(api.write('demo.v1.Executive', 'fz-boss', {}, { data: { name: 'Boss' } }), 'seed exec');
const before = await storeContents();

t.test('the oracles catch what they must (planted successes)', async (t) => {
  // The store comparison sees a change...
  const canary = await api.write('demo.v1.Executive', 'fz-canary', {}, { data: { name: 'Canary' } });
  t.ok(canary.ok, 'a canary write');
  t.not(await storeContents(), before, 'the store comparison notices one applied write');
  t.ok((await api.delete('demo.v1.Executive', 'fz-canary', {})).ok, 'the canary is deleted');
  t.equal(await storeContents(), before, 'and notices nothing once it is gone');
  // ...and the judge refuses a request that succeeds, and a 5xx.
  const legit: FuzzRequest = { n: -1, kind: 'control', method: 'GET', target: '/v1/resources/demo.v1.Artist', headers: [], close: true };
  const ex = await exchange(httpPort, serialize(legit, rngFor(0, 0)), { timeoutMs: REQUEST_TIMEOUT_MS });
  t.match(judge(legit, ex).problem ?? '', /^HTTP 200/, 'the judge flags a request that succeeded');
  const fake500 = Buffer.from('HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}', 'latin1');
  t.match(judge(legit, { received: fake500, closed: true, timedOut: false, error: undefined }).problem ?? '', /^HTTP 500/, 'the judge flags a 5xx');
  const bare400 = Buffer.from('HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n', 'latin1');
  t.not(judge(legit, { received: bare400, closed: true, timedOut: false, error: undefined }).problem, undefined, 'the judge flags a 4xx without the JSON error body');
  t.match(judge(legit, { received: Buffer.alloc(0), closed: false, timedOut: true, error: undefined }).verdict, 'hang', 'the judge flags a hang');
});

interface Failure {
  readonly what: string;
  readonly problem: string;
}

t.test('HTTP: malformed and random requests are all refused with a 4xx and the JSON error shape', async (t) => {
  const started = Date.now();
  const failures: Failure[] = [];
  const byKind = new Map<string, Map<string, number>>();
  let next = 0;
  let sent = 0;
  const indices = ONLY ?? Array.from({ length: N }, (_, i) => i);
  const worker = async (): Promise<void> => {
    for (;;) {
      if (next >= indices.length || Date.now() - started > BUDGET_MS) return;
      const n = indices[next++] as number;
      const generated = generate(n);
      const req = generated.close !== undefined ? generated : { ...generated, close: rngFor(n, 6).chance(0.5) };
      const ex = await exchange(httpPort, serialize(req, rngFor(n, 4)), {
        timeoutMs: REQUEST_TIMEOUT_MS,
        complete: (b) => {
          const p = parseHttpResponse(b);
          return p !== undefined && (req.method === 'HEAD' || p.complete);
        },
      });
      sent++;
      const { verdict, problem } = judge(req, ex);
      const kinds = byKind.get(req.kind) ?? new Map<string, number>();
      kinds.set(verdict, (kinds.get(verdict) ?? 0) + 1);
      byKind.set(req.kind, kinds);
      if (problem !== undefined) failures.push({ what: describe(req), problem });
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  const secs = ((Date.now() - started) / 1000).toFixed(1);
  t.comment(`${sent} requests in ${secs} s (seed ${SEED})`);
  for (const [kind, verdicts] of [...byKind].sort()) t.comment(`  ${kind.padEnd(28)} ${[...verdicts].sort().map(([v, c]) => `${v}:${c}`).join(' ')}`);
  t.ok(sent >= Math.min(indices.length, 500), `enough requests were sent (${sent})`);
  // Group failures by kind and problem class, with a few examples each, so one bug is one line.
  const groups = new Map<string, Failure[]>();
  for (const f of failures) {
    const key = `${/\[([^\]]+)\]/.exec(f.what)?.[1] ?? '?'}: ${f.problem.replace(/[0-9]+/g, 'N').slice(0, 90)}`;
    groups.set(key, [...(groups.get(key) ?? []), f]);
  }
  for (const [key, fs] of groups) {
    t.fail(`${fs.length} x ${key}`, { examples: fs.slice(0, 3).map((f) => `${f.what}\n  -> ${f.problem.slice(0, 400)}`) });
  }
  t.equal(failures.length, 0, `every answer was a 4xx with the JSON error shape (${failures.length} were not)`);
});

t.test('HTTP port: raw TCP garbage gets a 4xx or a closed connection, never a 5xx or a hang', async (t) => {
  const failures: Failure[] = [];
  const counts = new Map<string, Map<string, number>>();
  let jsonShaped = 0;
  let answered = 0;
  const total = Math.max(50, Math.floor(N / 10));
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < total) {
      const n = next++;
      const g = httpGarbage(n);
      const ex = await exchange(httpPort, g.payload, { halfClose: true, timeoutMs: 5000 });
      const res = parseHttpResponse(ex.received);
      let verdict: string;
      if (ex.timedOut) {
        verdict = 'hang';
        failures.push({ what: `#${n} [${g.kind}]`, problem: `neither answered nor closed within 5 s of the client's FIN (received ${ex.received.length} bytes)` });
      } else if (ex.received.length === 0) {
        verdict = 'closed';
      } else if (res === undefined) {
        verdict = 'not-http';
        failures.push({ what: `#${n} [${g.kind}]`, problem: `answered with bytes that are not an HTTP response: ${JSON.stringify(ex.received.subarray(0, 80).toString('latin1'))}` });
      } else {
        verdict = String(res.status);
        answered++;
        if (errorShapeProblem(safeJson(res.body)) === undefined) jsonShaped++;
        if (res.status < 400 || res.status >= 500) failures.push({ what: `#${n} [${g.kind}]`, problem: `HTTP ${res.status}: ${res.body.subarray(0, 200).toString('utf8')}` });
      }
      const c = counts.get(g.kind) ?? new Map<string, number>();
      c.set(verdict, (c.get(verdict) ?? 0) + 1);
      counts.set(g.kind, c);
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  for (const [kind, verdicts] of [...counts].sort()) t.comment(`  ${kind.padEnd(20)} ${[...verdicts].sort().map(([v, c]) => `${v}:${c}`).join(' ')}`);
  t.comment(`${answered} of ${total} garbage payloads got an HTTP answer; ${jsonShaped} of those had the JSON error body`);
  for (const f of failures.slice(0, 20)) t.fail(`${f.what}: ${f.problem}`);
  t.equal(failures.length, 0, `${total} garbage payloads: no 5xx, no hang, nothing but HTTP`);
});

t.test('HTTP port: malformed HTTP that Node refuses before routing is still answered with the JSON error shape', async (t) => {
  // http-server.ts promises "every failure ... is answered with the error shape of API.md";
  // its clientError handler answers protocol errors with an empty 400.
  for (const [what, payload] of [
    ['an over-long URL', `GET /v1/resource/demo.v1.Artist/${'a'.repeat(20_000)} HTTP/1.1\r\nHost: x\r\n\r\n`],
    ['a header without a colon', 'GET /v1/resources/demo.v1.Artist HTTP/1.1\r\nHost: x\r\nNoColon\r\n\r\n'],
    ['an invalid Content-Length', 'PUT /v1/resource/demo.v1.Artist/x HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{}'],
  ] as const) {
    const ex = await exchange(httpPort, [Buffer.from(payload, 'latin1')], { halfClose: true, timeoutMs: 5000 });
    const res = parseHttpResponse(ex.received);
    t.ok(res !== undefined && res.status >= 400 && res.status < 500, `${what}: a 4xx (got ${res?.status ?? 'no answer'})`);
    t.equal(res === undefined ? 'no answer' : errorShapeProblem(safeJson(res.body)), undefined, `${what}: the JSON error shape (body: ${JSON.stringify(res?.body.toString('utf8').slice(0, 100))})`);
  }
});

t.test('gRPC port: garbage, HTTP/1.1 and truncated HTTP/2 prefaces do not take the node down', async (t) => {
  const counts = new Map<string, Map<string, number>>();
  const total = Math.max(30, Math.floor(N / 30));
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < total) {
      const n = next++;
      const g = grpcGarbage(n);
      const ex = await exchange(grpcPort, g.payload, { halfClose: rngFor(n, 5).chance(0.5), timeoutMs: 1000 });
      const goaway = http2FrameTypes(ex.received).includes(7) ? '+goaway' : '';
      const verdict = `${ex.timedOut ? 'still-open-after-1s' : ex.received.length > 0 ? 'answered-then-closed' : 'closed'}${goaway}`;
      const c = counts.get(g.kind) ?? new Map<string, number>();
      c.set(verdict, (c.get(verdict) ?? 0) + 1);
      counts.set(g.kind, c);
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  for (const [kind, verdicts] of [...counts].sort()) t.comment(`  ${kind.padEnd(22)} ${[...verdicts].sort().map(([v, c]) => `${v}:${c}`).join(' ')}`);
  t.equal(agent.exitStatus(), undefined, `the agent is running after ${total} garbage connections to the gRPC port`);
  const ex = await exchange(grpcPort, [HTTP2_PREFACE, http2Frame(4, 0, 0)], { timeoutMs: 5000, complete: startsWithSettingsFrame });
  t.ok(startsWithSettingsFrame(ex.received), 'the gRPC port still speaks HTTP/2: a client preface gets the server SETTINGS frame');
});

t.test('afterwards: the node is up, ready, the store is unchanged, and a legitimate write works', async (t) => {
  t.equal(agent.exitStatus(), undefined, 'the agent process is running');
  const ready = await rawHttp(`http://${agent.httpAddress}`, { method: 'GET', path: '/readyz' });
  t.equal(ready.status, 200, 'readyz 200');
  const after = await storeContents();
  t.equal(after, before, 'every resource of every demo type in every tenancy is exactly as before: no fuzzed request was applied');
  const w = await api.write('demo.v1.Artist', 'fz-after', {}, { data: { name: 'After' } });
  t.ok(w.ok, `a legitimate write succeeds${w.ok ? '' : `: ${w.error.code} ${w.error.message}`}`);
  const r = await api.read('demo.v1.Artist', 'fz-after', {});
  t.ok(r.ok && w.ok && r.value.version === w.value.version, 'and reads back');
  const errors = agent.errorLines();
  t.comment(`${errors.length} error-level log lines from the agent; distinct messages: ${JSON.stringify([...new Set(errors.map((l) => `${(safeJson(Buffer.from(l)) as { msg?: string; err?: string } | undefined)?.msg}: ${String((safeJson(Buffer.from(l)) as { err?: string } | undefined)?.err).replace(/[0-9]+/g, 'N')}`))].slice(0, 10))}`);
});

/** The types of the HTTP/2 frames in what a server sent (its SETTINGS, GOAWAY = 7, ...). */
function http2FrameTypes(buf: Buffer): number[] {
  const types: number[] = [];
  for (let at = 0; at + 9 <= buf.length; at += 9 + buf.readUIntBE(at, 3)) types.push(buf.readUInt8(at + 3));
  return types;
}

function safeJson(b: Buffer): unknown {
  try {
    return JSON.parse(b.toString('utf8')) as unknown;
  } catch {
    return undefined;
  }
}
