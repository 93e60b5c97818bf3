import type { Test } from 'tap';
import type { ResourceJson } from '../resource-json.js';
import { HTTP_STATUS_OF_CODE, JsonText, errorShapeProblem, type ApiError, type ApiResult, type ListQuery, type RawResponse, type ResourceApiTarget } from './target.js';

/**
 * The resource API of API.md as a conformance suite, written once against `ResourceApiTarget`
 * and run against every target (conformance/*.test.ts). Each case works in its own names or
 * tenancies, so cases share one target and run in order. Where API.md is silent, the
 * assertions follow the choices documented in src/store/README.md and say so.
 */

const A1 = 'demo.v1.Artist';
const A2 = 'demo.v2.Artist';
const ALBUM = 'demo.v1.Album';
const LABEL = 'demo.v1.RecordLabel';
const EXEC = 'demo.v1.Executive';
const ULID = /^[0-9A-HJKMNP-TV-Z]{26}$/;
const DECIMAL = /^[1-9][0-9]*$/;
/** A well-formed ULID that no server has handed out. */
const FOREIGN_UID = '01ARZ3NDEKTSV4RRFFQ69G5FAV';

class Unexpected extends Error {}

/** The value of a successful call; a refusal aborts the case with the error it got. */
function must<T>(r: ApiResult<T>, what: string): T {
  if (!r.ok) throw new Unexpected(`${what}: expected success, got ${r.error.code} (HTTP ${r.error.httpStatus}): ${r.error.message}`);
  return r.value;
}

/** Asserts a refusal with `code` and the HTTP status API.md gives it; returns the error. */
function refused<T>(t: Test, r: ApiResult<T>, code: string, what: string): ApiError | undefined {
  if (r.ok) {
    t.fail(`${what}: expected ${code}, but it succeeded with ${JSON.stringify(r.value).slice(0, 300)}`);
    return undefined;
  }
  t.equal(r.error.code, code, `${what}: ${code}${r.error.code === code ? '' : ` (got: ${r.error.message})`}`);
  t.equal(r.error.httpStatus, HTTP_STATUS_OF_CODE[code], `${what}: HTTP ${HTTP_STATUS_OF_CODE[code]}`);
  t.ok(r.error.message.length > 0, `${what}: the error has a message`);
  return r.error;
}

const num = (v: string): number => Number(v);

function isoNear(t: Test, v: unknown, fromMs: number, toMs: number, what: string): void {
  if (typeof v !== 'string' || Number.isNaN(Date.parse(v)) || new Date(Date.parse(v)).toISOString() !== v) {
    t.fail(`${what}: ${JSON.stringify(v)} is not an ISO-8601 UTC timestamp`);
    return;
  }
  const ms = Date.parse(v);
  // The server's clock and ours are the same host's; allow for scheduling slack.
  t.ok(ms >= fromMs - 2000 && ms <= toMs + 2000, `${what}: ${v} is the server's time of the write`);
}

interface Placed {
  readonly type: string;
  readonly partition: string;
  readonly namespace: string;
  readonly name: string;
}

const placed = (r: ResourceJson): Placed => ({ type: r.id.type, partition: r.id.tenancy.partition, namespace: r.id.tenancy.namespace, name: r.id.name });
const show = (p: Placed): string => `${p.type} ${p.partition}/${p.namespace}/${p.name}`;
const byListOrder = (a: Placed, b: Placed): number =>
  a.partition < b.partition ? -1 : a.partition > b.partition ? 1 : a.namespace < b.namespace ? -1 : a.namespace > b.namespace ? 1 : a.name < b.name ? -1 : a.name > b.name ? 1 : 0;

type Scope = 'namespace' | 'partition' | 'cluster';
const SCOPE: Record<string, Scope> = { Artist: 'namespace', Album: 'namespace', RecordLabel: 'partition', Executive: 'cluster' };

/** The naive reference for a list filter (API.md "List"). */
function listMatches(p: Placed, type: string, q: ListQuery): boolean {
  const want = type.split('.');
  const have = p.type.split('.');
  const [group, gv, kind] = want.length === 2 ? [want[0], undefined, want[1]] : [want[0], want[1], want[2]];
  if (have[0] !== group || have[2] !== kind || (gv !== undefined && have[1] !== gv)) return false;
  const scope = SCOPE[kind ?? ''] ?? 'namespace';
  const norm = (v: string | undefined): string => (v === undefined || v === '' ? 'default' : v);
  if (scope !== 'cluster' && q.partition !== '*' && p.partition !== norm(q.partition)) return false;
  if (scope === 'namespace' && q.namespace !== '*' && p.namespace !== norm(q.namespace)) return false;
  return q.name_prefix === undefined || q.name_prefix === '' || p.name.startsWith(q.name_prefix);
}

async function eventually<T>(probe: () => Promise<T>, done: (v: T) => boolean, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (done(v) || Date.now() > deadline) return v;
    await new Promise((r) => setTimeout(r, 20));
  }
}

export function resourceApiConformance(t: Test, api: ResourceApiTarget): void {
  const listRevision = async (): Promise<number> => num(must(await api.list(EXEC, {}), 'list for the revision').revision);

  t.test('Read: by name, by uid; a uid that does not match is NOT_FOUND; stale reads converge', async (t) => {
    const ns = { namespace: 'read' };
    const w = must(await api.write(A1, 'korn', ns, { data: { name: 'Korn', genre: 'metal' } }), 'create');
    t.equal(w.id.type, A1);
    t.same(w.id.tenancy, { partition: 'default', namespace: 'read' }, 'an empty partition is default');
    t.equal(w.id.name, 'korn');
    t.match(w.id.uid, ULID, 'the server assigns a ULID');
    t.match(w.version, DECIMAL, 'version is a decimal string');
    t.ok(typeof w.generation === 'string' && w.generation !== '', 'generation is set');
    t.equal(w.owner, null);
    t.same(w.metadata, {});
    t.same(w.finalizers, []);
    t.equal(w.deletion_timestamp, null);
    t.same(w.status, {});
    t.same(w.data, { name: 'Korn', genre: 'metal' });
    t.same(must(await api.read(A1, 'korn', ns), 'read by name'), w, 'read by name returns the stored resource');
    t.same(must(await api.read(A1, 'korn', { ...ns, uid: w.id.uid }), 'read by uid'), w, 'read with the right uid');
    t.same(must(await api.read(A1, 'korn', { ...ns, uid: '' }), 'read with an empty uid'), w, 'an empty uid means no uid');
    refused(t, await api.read(A1, 'korn', { ...ns, uid: FOREIGN_UID }), 'NOT_FOUND', 'read with a uid that is not the stored one');
    refused(t, await api.read(A1, 'nobody', ns), 'NOT_FOUND', 'read of an absent name');
    refused(t, await api.read(A1, 'korn', { namespace: 'elsewhere' }), 'NOT_FOUND', 'read in another namespace');
    refused(t, await api.read(A1, 'korn', {}), 'NOT_FOUND', 'read in the default namespace');
    const stale = await eventually(
      () => api.read(A1, 'korn', { ...ns, consistency: 'stale' }),
      (r) => r.ok && r.value.version === w.version,
      5000,
    );
    t.same(must(stale, 'stale read'), w, 'a stale read returns the write once the node has applied it');
    t.same(must(await api.read(A1, 'korn', { ...ns, consistency: 'linearizable' }), 'linearizable read'), w);
  });

  t.test('Write: create only (version "0") when absent and when present', async (t) => {
    const ns = { namespace: 'create-only' };
    const c = must(await api.write(A1, 'once', ns, { data: { name: 'Once' }, version: '0' }), 'create-only when absent');
    t.same(c.data, { name: 'Once', genre: 'unknown' }, 'the mutate hook set the default genre');
    const e = refused(t, await api.write(A1, 'once', ns, { data: { name: 'Twice' }, version: '0' }), 'CAS_FAILED', 'create-only when present');
    t.equal(String(e?.details['actual']), c.version, 'details.actual is the stored version (store README)');
    t.same(must(await api.read(A1, 'once', ns), 'read'), c, 'the refused write changed nothing');
  });

  t.test('Write: compare-and-swap with the current, a stale and an absent version', async (t) => {
    const ns = { namespace: 'cas' };
    const v1 = must(await api.write(A1, 'swap', ns, { data: { name: 'V1' } }), 'create');
    const v2 = must(await api.write(A1, 'swap', ns, { data: { name: 'V2' }, version: v1.version }), 'CAS with the current version');
    t.ok(num(v2.version) > num(v1.version), 'the version increased');
    t.equal(v2.id.uid, v1.id.uid, 'same resource');
    const e = refused(t, await api.write(A1, 'swap', ns, { data: { name: 'V3' }, version: v1.version }), 'CAS_FAILED', 'CAS with a stale version');
    t.equal(String(e?.details['expected']), v1.version, 'details.expected is the version sent');
    t.equal(String(e?.details['actual']), v2.version, 'details.actual is the stored version');
    refused(t, await api.write(A1, 'swap', ns, { data: { name: 'V3' }, version: String(num(v2.version) + 1000) }), 'CAS_FAILED', 'CAS with a future version');
    t.same(must(await api.read(A1, 'swap', ns), 'read'), v2, 'refused CAS writes changed nothing');
    refused(t, await api.write(A1, 'never', ns, { data: { name: 'N' }, version: '5' }), 'CAS_FAILED', 'CAS on an absent resource');
    refused(t, await api.read(A1, 'never', ns), 'NOT_FOUND', 'a refused CAS does not create');
    for (const bad of ['abc', '-1', '01', '1.5', ' 1', '99999999999999999999']) {
      refused(t, await api.write(A1, 'swap', ns, { data: { name: 'V4' }, version: bad }), 'INVALID_ARGUMENT', `version ${JSON.stringify(bad)}`);
    }
  });

  t.test('Delete: compare-and-swap, unconditional, uid, and deleting what does not exist', async (t) => {
    const ns = { namespace: 'del' };
    const v1 = must(await api.write(A1, 'gone', ns, { data: { name: 'G1' } }), 'create');
    const v2 = must(await api.write(A1, 'gone', ns, { data: { name: 'G2' } }), 'update');
    refused(t, await api.delete(A1, 'gone', { ...ns, version: v1.version }), 'CAS_FAILED', 'delete with a stale version');
    t.same(must(await api.read(A1, 'gone', ns), 'read'), v2, 'still there');
    const d = must(await api.delete(A1, 'gone', { ...ns, version: v2.version }), 'delete with the current version');
    t.equal(d.deleted, true);
    t.same(d.resource, v2, 'the answer carries the last stored state');
    refused(t, await api.read(A1, 'gone', ns), 'NOT_FOUND', 'read after delete');
    t.same(must(await api.delete(A1, 'gone', ns), 'delete again'), { deleted: false }, 'deleting what does not exist succeeds with deleted: false');
    t.same(must(await api.delete(A1, 'gone', { ...ns, version: '7' }), 'CAS delete of an absent resource'), { deleted: false }, 'absent before any version check (store README)');
    const r = must(await api.write(A1, 'gone', ns, { data: { name: 'G3' } }), 're-create');
    t.same(must(await api.delete(A1, 'gone', { ...ns, uid: FOREIGN_UID }), 'delete naming another uid'), { deleted: false }, 'another uid: what the caller meant is gone');
    t.same(must(await api.read(A1, 'gone', ns), 'read'), r, 'not deleted');
    t.equal(must(await api.delete(A1, 'gone', { ...ns, uid: r.id.uid }), 'delete naming the uid').deleted, true);
    const u = must(await api.write(A1, 'plain', ns, { data: { name: 'P' } }), 'create');
    t.equal(must(await api.delete(A1, 'plain', ns), 'unconditional delete').deleted, true);
    refused(t, await api.read(A1, 'plain', { ...ns, uid: u.id.uid }), 'NOT_FOUND', 'gone');
  });

  t.test('Write: unconditional upsert creates, then updates', async (t) => {
    const ns = { namespace: 'upsert' };
    const w1 = must(await api.write(A2, 'up', ns, { data: { name: 'Up', members: 3 } }), 'upsert when absent');
    const w2 = must(await api.write(A2, 'up', ns, { data: { name: 'Up', members: 4 } }), 'upsert when present');
    t.equal(w2.id.uid, w1.id.uid, 'same resource');
    t.ok(num(w2.version) > num(w1.version), 'new version');
    t.not(w2.generation, w1.generation, 'data changed: new generation');
    t.same(w2.data, { name: 'Up', members: 4, genre: 'unknown' });
    t.same(must(await api.read(A2, 'up', ns), 'read'), w2);
  });

  t.test('uid: a client uid on create is ignored; a write naming another uid is UID_MISMATCH; re-creation gives a new uid', async (t) => {
    const ns = { namespace: 'uid' };
    const w1 = must(await api.write(A1, 'u', ns, { data: { name: 'U1' }, uid: FOREIGN_UID }), 'create naming a uid');
    t.not(w1.id.uid, FOREIGN_UID, 'the client uid was ignored');
    t.match(w1.id.uid, ULID);
    const e = refused(t, await api.write(A1, 'u', ns, { data: { name: 'U2' }, uid: FOREIGN_UID }), 'UID_MISMATCH', 'update naming another uid');
    t.ok(e?.message.includes(w1.id.uid), 'the message names the stored uid');
    t.same(must(await api.read(A1, 'u', ns), 'read'), w1, 'unchanged');
    const w2 = must(await api.write(A1, 'u', ns, { data: { name: 'U2' }, uid: w1.id.uid }), 'update naming the stored uid');
    t.equal(w2.id.uid, w1.id.uid);
    refused(t, await api.write(A1, 'u', ns, { data: { name: 'U3' }, uid: FOREIGN_UID, version: w2.version }), 'UID_MISMATCH', 'uid is checked before the version');
    must(await api.delete(A1, 'u', ns), 'delete');
    const w3 = must(await api.write(A1, 'u', ns, { data: { name: 'U3' } }), 're-create');
    t.not(w3.id.uid, w1.id.uid, 're-creation gives a new uid');
    refused(t, await api.write(A1, 'u', ns, { data: { name: 'U4' }, uid: w1.id.uid }), 'UID_MISMATCH', 'a write naming the old uid');
    refused(t, await api.read(A1, 'u', { ...ns, uid: w1.id.uid }), 'NOT_FOUND', 'a read naming the old uid');
  });

  t.test('group version: read with another is GROUP_VERSION_MISMATCH carrying the stored type; a write may change it', async (t) => {
    const ns = { namespace: 'gv' };
    const w1 = must(await api.write(A1, 'shift', ns, { data: { name: 'Shift', genre: 'rock' } }), 'create as v1');
    const e1 = refused(t, await api.read(A2, 'shift', ns), 'GROUP_VERSION_MISMATCH', 'read as v2');
    t.ok(e1 !== undefined && Object.values(e1.details).includes(A1), `the error carries the stored type ${A1} (details: ${JSON.stringify(e1?.details)})`);
    const w2 = must(await api.write(A2, 'shift', ns, { data: { name: 'Shift', genre: 'rock', members: 4 } }), 'write as v2');
    t.equal(w2.id.type, A2, 'the stored type is now v2');
    t.equal(w2.id.uid, w1.id.uid, 'same identity (same uid)');
    t.ok(num(w2.version) > num(w1.version));
    t.not(w2.generation, w1.generation, 'data changed: new generation');
    t.same(must(await api.read(A2, 'shift', ns), 'read as v2'), w2);
    const e2 = refused(t, await api.read(A1, 'shift', ns), 'GROUP_VERSION_MISMATCH', 'read as v1 after the change');
    t.ok(e2 !== undefined && Object.values(e2.details).includes(A2), 'the error carries the new stored type');
    const w3 = must(await api.write(A1, 'shift', ns, { data: { name: 'Shift', genre: 'rock' } }), 'write back as v1');
    const w4 = must(await api.write(A2, 'shift', ns, { data: { name: 'Shift', genre: 'rock' } }), 'a group-version-only change');
    t.equal(w4.id.type, A2);
    t.ok(num(w4.version) > num(w3.version), 'a group-version-only change is a new version');
    t.equal(w4.generation, w3.generation, 'but the same generation (store README)');
    const listed = must(await api.list('demo.Artist', ns), 'list demo.Artist');
    t.same(listed.resources.map((r) => r.id.type), [A2], 'one resource, listed once, with its stored type');
    refused(t, await api.write(A2, 'shift', ns, { data: { name: 'S', members: 2 }, version: w3.version }), 'CAS_FAILED', 'CAS across group versions uses the one version');
  });

  t.test('List: every combination of tenancy wildcards and name prefixes, versionless types, and the revision', async (t) => {
    const mine: Placed[] = [];
    const parts = ['default', 'lst-pa', 'lst-pb'];
    const nss = ['default', 'lst-n1', 'lst-n2'];
    let last = 0;
    for (const p of parts) {
      for (const n of nss) {
        for (const [type, name] of [[A1, 'lst-a1'], [A2, 'lst-a2'], [A1, 'lstb-x']] as const) {
          last = num(must(await api.write(type, name, { partition: p, namespace: n }, { data: { name: `${name} in ${p}/${n}` } }), `write ${name}`).version);
          mine.push({ type, partition: p, namespace: n, name });
        }
      }
      for (const name of ['lst-l1', 'lstb-l2']) {
        last = num(must(await api.write(LABEL, name, { partition: p }, { data: { name } }), `write label ${name}`).version);
        mine.push({ type: LABEL, partition: p, namespace: '', name });
      }
    }
    for (const name of ['lst-e1', 'lst-e2', 'lstb-e3']) {
      last = num(must(await api.write(EXEC, name, {}, { data: { name } }), `write executive ${name}`).version);
      mine.push({ type: EXEC, partition: '', namespace: '', name });
    }
    const prefixes = [undefined, '', 'lst', 'lst-', 'lst-a2', 'lstb', 'nomatch'];
    const queries: Array<{ type: string; q: ListQuery }> = [];
    const tenancyValues = [undefined, '', 'default', 'lst-pa', '*'];
    for (const name_prefix of prefixes) {
      const pre = name_prefix === undefined ? {} : { name_prefix };
      for (const type of ['demo.Artist', A1, A2]) {
        for (const partition of tenancyValues) {
          for (const namespace of [undefined, '', 'lst-n1', '*']) {
            queries.push({ type, q: { ...pre, ...(partition !== undefined ? { partition } : {}), ...(namespace !== undefined ? { namespace } : {}) } });
          }
        }
      }
      for (const type of ['demo.RecordLabel', LABEL]) {
        for (const partition of tenancyValues) queries.push({ type, q: { ...pre, ...(partition !== undefined ? { partition } : {}) } });
      }
      for (const type of ['demo.Executive', EXEC]) queries.push({ type, q: pre });
    }
    let failures = 0;
    for (const { type, q } of queries) {
      const what = `list ${type} ${JSON.stringify(q)}`;
      const r = must(await api.list(type, q), what);
      const got = r.resources.map(placed);
      const stray = got.filter((p) => !listMatches(p, type, q));
      const sorted = [...got].sort(byListOrder);
      const expected = mine.filter((p) => listMatches(p, type, q)).sort(byListOrder).map(show);
      const gotMine = got.filter((p) => p.name.startsWith('lst')).map(show);
      const maxVersion = Math.max(0, ...r.resources.map((x) => num(x.version)));
      const ok =
        stray.length === 0 &&
        JSON.stringify(gotMine) === JSON.stringify(expected) &&
        JSON.stringify(sorted.map(show)) === JSON.stringify(got.map(show)) &&
        DECIMAL.test(r.revision) &&
        num(r.revision) >= maxVersion &&
        num(r.revision) >= last;
      if (!ok) {
        failures++;
        t.same({ stray: stray.map(show), gotMine, order: got.map(show), revision: r.revision }, { stray: [], gotMine: expected, order: sorted.map(show), revision: `>= ${Math.max(maxVersion, last)}` }, what);
      }
    }
    t.equal(failures, 0, `${queries.length} list queries match the reference filter, in (partition, namespace, name) order, with a revision at or after every write`);
    const before = must(await api.list(A1, { partition: '*', namespace: '*' }), 'list');
    const w = must(await api.write(A1, 'lst-a1', {}, { data: { name: 'changed' } }), 'another write');
    const after = must(await api.list(A1, { partition: '*', namespace: '*' }), 'list again');
    t.ok(num(after.revision) >= num(w.version) && num(w.version) > num(before.revision), 'the revision moves past a new write');
    t.equal(after.resources.find((r) => r.id.name === 'lst-a1' && r.id.tenancy.namespace === 'default' && r.id.tenancy.partition === 'default')?.version, w.version, 'the list reflects it');
    refused(t, await api.list(A1, { name_prefix: 'LST' }), 'INVALID_ARGUMENT', 'a name prefix that is not a DNS-label prefix');
    refused(t, await api.list(A1, { partition: 'Bad_P' }), 'INVALID_ARGUMENT', 'a bad partition');
    refused(t, await api.list(A1, { namespace: 'a*' }), 'INVALID_ARGUMENT', 'a wildcard is only "*"');
    refused(t, await api.list('demo.Nothing', {}), 'INVALID_ARGUMENT', 'an unknown versionless type');
    refused(t, await api.list('demo.v9.Artist', {}), 'INVALID_ARGUMENT', 'an unknown group version');
    refused(t, await api.list(EXEC, { namespace: 'x' }), 'INVALID_ARGUMENT', 'a namespace for a cluster-scoped type');
    refused(t, await api.list(LABEL, { namespace: 'x' }), 'INVALID_ARGUMENT', 'a namespace for a partition-scoped type');
    const stale = await eventually(() => api.list(A1, { partition: '*', namespace: '*', name_prefix: 'lst', consistency: 'stale' }), (r) => r.ok && num(r.value.revision) >= num(w.version), 5000);
    t.ok(must(stale, 'stale list').resources.length > 0, 'a stale list works');
  });

  t.test('List pages: limit, continue, every page at the first page revision; another list\'s token, a garbled one, a lost revision', async (t) => {
    const ns = { namespace: 'pg' };
    const names = Array.from({ length: 11 }, (_, i) => `pg-${String(i).padStart(2, '0')}`);
    for (const name of names) must(await api.write(A1, name, ns, { data: { name } }), `write ${name}`);
    const got: string[] = [];
    const revisions = new Set<string>();
    const sizes: number[] = [];
    let cont: string | undefined;
    let pages = 0;
    do {
      const r = must(await api.list(A1, { ...ns, limit: '4', ...(cont !== undefined ? { continue: cont } : {}) }), `page ${pages}`);
      got.push(...r.resources.map((x) => x.id.name));
      revisions.add(r.revision);
      sizes.push(r.resources.length);
      cont = r.continue;
      if (pages === 0) {
        // Between pages: a create, an update and a delete; none shows in the later pages.
        must(await api.write(A1, 'pg-05', ns, { data: { name: 'changed' } }), 'update');
        must(await api.write(A1, 'pg-99', ns, { data: { name: 'new' } }), 'create');
        must(await api.delete(A1, 'pg-10', ns), 'delete');
      }
      if (++pages > 10) break;
    } while (cont !== undefined);
    t.same(got, names, 'each resource of the first revision once, in list order');
    t.same(sizes, [4, 4, 3], 'full pages, then the rest; the last has no continue');
    t.equal(revisions.size, 1, 'every page carries the first page revision');
    const whole = must(await api.list(A1, ns), 'a list without a limit');
    t.equal(whole.continue, undefined, 'a list within the page maximum has no continue');
    t.same(whole.resources.map((x) => x.id.name), [...names.slice(0, 10), 'pg-99'], 'and sees the later writes');
    const first = must(await api.list(A1, { ...ns, limit: '2' }), 'first page');
    const token = first.continue ?? '';
    t.ok(token !== '', 'the first page of a longer list has a continue');
    refused(t, await api.list(A1, { namespace: 'pg-other', limit: '2', continue: token }), 'INVALID_ARGUMENT', 'the token with another namespace');
    refused(t, await api.list(A2, { ...ns, limit: '2', continue: token }), 'INVALID_ARGUMENT', 'the token with another type');
    refused(t, await api.list(A1, { ...ns, continue: `${token.slice(0, -3)}@@@` }), 'INVALID_ARGUMENT', 'a garbled token');
    refused(t, await api.list(A1, { ...ns, continue: Buffer.from('{"v":1,"r":"5","k":"x","f":"aaaaaaaaaaaaaaaaaaaaaa"}').toString('base64url') }), 'INVALID_ARGUMENT', 'a forged token for another filter');
    const decoded = JSON.parse(Buffer.from(token, 'base64url').toString('utf8')) as Record<string, unknown>;
    const lost = Buffer.from(JSON.stringify({ ...decoded, r: '1' })).toString('base64url');
    const e = refused(t, await api.list(A1, { ...ns, limit: '2', continue: lost }), 'COMPACTED', 'a revision the node does not hold');
    t.equal(e?.details?.['revision'], '1', 'COMPACTED names the revision');
    refused(t, await api.list(A1, { ...ns, limit: '-1' }), 'INVALID_ARGUMENT', 'a negative limit');
    const next = must(await api.list(A1, { ...ns, limit: '2', continue: token }), 'the token with its own list');
    t.same(next.resources.map((x) => x.id.name), ['pg-02', 'pg-03'], 'still reads the next page');
  });

  t.test('List by owner (owner_uid)', async (t) => {
    const ns = { namespace: 'lbo' };
    const owner = must(await api.write(A1, 'lbo-owner', ns, { data: { name: 'Owner' } }), 'owner');
    const other = must(await api.write(A1, 'lbo-other-owner', ns, { data: { name: 'Other' } }), 'another owner');
    for (const [name, namespace, o] of [
      ['lbo-c1', 'lbo', owner],
      ['lbo-c2', 'lbo', owner],
      ['lbo-c3', 'lbo-elsewhere', owner],
      ['lbo-x', 'lbo', other],
      ['lbo-free', 'lbo', undefined],
    ] as const) {
      const w = must(await api.write(ALBUM, name, { namespace }, { data: { title: name }, ...(o ? { owner: o.id } : {}) }), `album ${name}`);
      t.same(w.owner, o ? o.id : null, `${name} has its owner`);
    }
    const names = async (type: string, q: ListQuery): Promise<string[]> => must(await api.list(type, q), `list ${type} ${JSON.stringify(q)}`).resources.map((r) => r.id.name);
    t.same(await names(ALBUM, { namespace: '*', owner_uid: owner.id.uid }), ['lbo-c1', 'lbo-c2', 'lbo-c3'], 'every album the owner owns, in list order');
    t.same(await names(ALBUM, { namespace: 'lbo', owner_uid: owner.id.uid }), ['lbo-c1', 'lbo-c2'], 'owner and namespace');
    t.same(await names(ALBUM, { namespace: '*', owner_uid: owner.id.uid, name_prefix: 'lbo-c3' }), ['lbo-c3'], 'owner and name prefix');
    t.same(await names('demo.Album', { partition: '*', namespace: '*', owner_uid: other.id.uid }), ['lbo-x'], 'the other owner');
    t.same(await names(ALBUM, { namespace: '*', owner_uid: FOREIGN_UID }), [], 'an owner uid that owns nothing');
    t.same(await names(A1, { namespace: '*', owner_uid: owner.id.uid }), [], 'owned resources of another type are not listed');
  });

  t.test('Owners: must exist at creation, never change; owner references checked', async (t) => {
    const ns = { namespace: 'own' };
    const o = must(await api.write(A1, 'own-a', ns, { data: { name: 'A' } }), 'owner');
    const o2 = must(await api.write(A1, 'own-b', ns, { data: { name: 'B' } }), 'another');
    const c = must(await api.write(ALBUM, 'own-c', ns, { data: { title: 'C' }, owner: o.id }), 'child');
    t.same(c.owner, o.id);
    const missing: Array<[string, unknown]> = [
      ['an owner that does not exist', { ...o.id, name: 'own-nobody' }],
      ['an owner with another uid', { ...o.id, uid: FOREIGN_UID }],
      ['an owner in another namespace', { ...o.id, tenancy: { partition: 'default', namespace: 'own-other' } }],
    ];
    for (const [what, owner] of missing) {
      refused(t, await api.write(ALBUM, 'own-d', ns, { data: { title: 'D' }, owner }), 'INVALID_ARGUMENT', `create with ${what}`);
      refused(t, await api.read(ALBUM, 'own-d', ns), 'NOT_FOUND', `not created (${what})`);
    }
    const malformed: Array<[string, unknown]> = [
      ['no uid', { type: o.id.type, tenancy: o.id.tenancy, name: o.id.name }],
      ['an unknown field', { ...o.id, kind: 'x' }],
      ['an unknown type', { ...o.id, type: 'demo.v1.Nothing' }],
      ['a bad name', { ...o.id, name: 'Own A' }],
      ['a string', 'own-a'],
    ];
    for (const [what, owner] of malformed) refused(t, await api.write(ALBUM, 'own-d', ns, { data: { title: 'D' }, owner }), 'INVALID_ARGUMENT', `an owner reference with ${what}`);
    const sameAgain = must(await api.write(ALBUM, 'own-c', ns, { data: { title: 'C' }, owner: o.id }), 'the same owner again');
    t.equal(sameAgain.version, c.version, 'naming the same owner is no change');
    const omitted = must(await api.write(ALBUM, 'own-c', ns, { data: { title: 'C2' } }), 'owner omitted');
    t.same(omitted.owner, o.id, 'an omitted owner keeps the stored one');
    refused(t, await api.write(ALBUM, 'own-c', ns, { data: { title: 'C3' }, owner: o2.id }), 'INVALID_ARGUMENT', 'changing the owner');
    const nulled = await api.write(ALBUM, 'own-c', ns, { data: { title: 'C3' }, owner: null });
    if (nulled.ok) t.same(nulled.value.owner, o.id, 'owner: null did not remove the owner');
    else refused(t, nulled, 'INVALID_ARGUMENT', 'owner: null (removing the owner)');
    t.same(must(await api.read(ALBUM, 'own-c', ns), 'read').owner, o.id, 'the owner never changed');
    must(await api.write(ALBUM, 'own-free', ns, { data: { title: 'F' } }), 'an album without owner');
    refused(t, await api.write(ALBUM, 'own-free', ns, { data: { title: 'F' }, owner: o.id }), 'INVALID_ARGUMENT', 'adding an owner after creation');
    const v2owner = { ...o.id, type: A2 };
    const c4 = await api.write(ALBUM, 'own-e', ns, { data: { title: 'E' }, owner: v2owner });
    t.ok(c4.ok, 'an owner reference naming another group version of the owner is the same owner (store README)');
  });

  t.test('Owners: deleting an owner deletes what it owns, recursively, in one committed entry', async (t) => {
    const ns = { namespace: 'casc' };
    const root = must(await api.write(A1, 'root', ns, { data: { name: 'Root' } }), 'root');
    const c1 = must(await api.write(ALBUM, 'c1', ns, { data: { title: 'C1' }, owner: root.id }), 'child');
    const g1 = must(await api.write(ALBUM, 'g1', ns, { data: { title: 'G1' }, owner: c1.id }), 'grandchild');
    must(await api.write(ALBUM, 'gg1', ns, { data: { title: 'GG1' }, owner: g1.id }), 'great-grandchild');
    const held = must(await api.write(ALBUM, 'c2', ns, { data: { title: 'C2' }, owner: root.id, finalizers: ['cairn.test/hold'] }), 'child with a finalizer');
    must(await api.write(ALBUM, 'g2', ns, { data: { title: 'G2' }, owner: held.id }), 'grandchild under the finalizer');
    must(await api.write(LABEL, 'c3', { partition: 'casc-p' }, { data: { name: 'C3' }, owner: root.id }), 'a child of another type and tenancy');
    const bystander = must(await api.write(ALBUM, 'bystander', ns, { data: { title: 'B' } }), 'unrelated');
    const before = await listRevision();
    const d = must(await api.delete(A1, 'root', ns), 'delete the owner');
    const after = await listRevision();
    t.equal(d.deleted, true);
    t.equal(after, before + 1, 'the whole cascade is one committed entry');
    for (const [type, name, ten] of [[ALBUM, 'c1', ns], [ALBUM, 'g1', ns], [ALBUM, 'gg1', ns], [LABEL, 'c3', { partition: 'casc-p' }]] as const) {
      refused(t, await api.read(type, name, ten), 'NOT_FOUND', `${name} was deleted with its owner`);
    }
    const marked = must(await api.read(ALBUM, 'c2', ns), 'the child with a finalizer');
    t.not(marked.deletion_timestamp, null, 'a child with finalizers is marked for deletion instead');
    t.equal(num(marked.version), after, 'marked by the same entry');
    t.same(must(await api.read(ALBUM, 'g2', ns), 'its child').owner, held.id, "the marked child's children stay until it is removed");
    t.same(must(await api.read(ALBUM, 'bystander', ns), 'bystander'), bystander, 'unrelated resources are untouched');
    const owned = must(await api.list(ALBUM, { namespace: '*', owner_uid: root.id.uid }), 'list by the deleted owner');
    t.same(owned.resources.map((r) => r.id.name), ['c2'], 'only the finalizer-held child still names the deleted owner');
    const last = must(await api.write(ALBUM, 'c2', ns, { data: { title: 'C2' }, finalizers: [] }), 'remove the last finalizer');
    t.same(last.finalizers, [], 'the answer is the final state');
    refused(t, await api.read(ALBUM, 'c2', ns), 'NOT_FOUND', 'removing the last finalizer deleted it');
    refused(t, await api.read(ALBUM, 'g2', ns), 'NOT_FOUND', 'and its children with it');
  });

  t.test('Finalizers: delete marks; only finalizer-removing writes; the last removal deletes', async (t) => {
    const ns = { namespace: 'fin' };
    const f1 = 'cairn.test/f1';
    const f2 = 'cairn.test/f2';
    const w = must(await api.write(ALBUM, 'held', ns, { data: { title: 'T' }, metadata: { team: 'a' }, finalizers: [f1, f2] }), 'create');
    t.same(w.finalizers, [f1, f2]);
    const t0 = Date.now();
    const d = must(await api.delete(ALBUM, 'held', ns), 'delete');
    t.equal(d.deleted, false, 'not deleted yet');
    const ts = d.resource?.deletion_timestamp;
    isoNear(t, ts, t0, Date.now(), 'deletion_timestamp');
    const m = must(await api.read(ALBUM, 'held', ns), 'read');
    t.equal(m.deletion_timestamp, ts, 'the resource is marked');
    t.same(m.finalizers, [f1, f2]);
    t.ok(num(m.version) > num(w.version), 'marking is a new version');
    const again = must(await api.delete(ALBUM, 'held', ns), 'delete again');
    t.equal(again.deleted, false);
    t.equal(must(await api.read(ALBUM, 'held', ns), 'read').deletion_timestamp, ts, 'the first deletion timestamp stands');
    for (const [what, body] of [
      ['changing data', { data: { title: 'T2' }, finalizers: [f1, f2] }],
      ['adding a finalizer', { data: { title: 'T' }, finalizers: [f1, f2, 'cairn.test/f3'] }],
      ['replacing a finalizer', { data: { title: 'T' }, finalizers: [f1, 'cairn.test/f3'] }],
      ['changing metadata', { data: { title: 'T' }, metadata: { team: 'b' } }],
    ] as const) {
      refused(t, await api.write(ALBUM, 'held', ns, body), 'INVALID_ARGUMENT', `while being deleted: ${what}`);
    }
    const art = must(await api.write(A1, 'held-gv', ns, { data: { name: 'H' }, finalizers: [f1] }), 'an artist with a finalizer');
    must(await api.delete(A1, 'held-gv', ns), 'mark it');
    refused(t, await api.write(A2, 'held-gv', ns, { data: { name: 'H', genre: 'unknown' }, finalizers: [f1] }), 'INVALID_ARGUMENT', 'while being deleted: changing the group version');
    must(await api.write(A1, 'held-gv', ns, { data: { name: 'H' }, finalizers: [], uid: art.id.uid }), 'release it');
    const st = must(
      await api.writeStatus(ALBUM, 'held', 'cairn.test/ctl', ns, { uid: w.id.uid, observed_generation: m.generation, conditions: [{ type: 'Finalizing', state: 'TRUE' }] }),
      'a status write while being deleted (store README: accepted)',
    );
    t.equal(st.deletion_timestamp, ts);
    const nochange = must(await api.write(ALBUM, 'held', ns, { data: { title: 'T' } }), 'a write that changes nothing');
    t.equal(nochange.version, st.version, 'is fine and changes nothing');
    const one = must(await api.write(ALBUM, 'held', ns, { data: { title: 'T' }, finalizers: [f2] }), 'remove one finalizer');
    t.same(one.finalizers, [f2]);
    t.equal(one.deletion_timestamp, ts);
    t.ok(must(await api.read(ALBUM, 'held', ns), 'read').finalizers.length === 1, 'still there');
    const gone = must(await api.write(ALBUM, 'held', ns, { data: { title: 'T' }, finalizers: [] }), 'remove the last finalizer');
    t.same(gone.finalizers, []);
    refused(t, await api.read(ALBUM, 'held', ns), 'NOT_FOUND', 'the last removal deleted it');
    const re = must(await api.write(ALBUM, 'held', ns, { data: { title: 'T' } }), 're-create');
    t.equal(re.deletion_timestamp, null);
    t.not(re.id.uid, w.id.uid, 'a new resource');
  });

  t.test('WriteStatus: one key, others kept, server time, generation unchanged, version changed, uid required', async (t) => {
    const ns = { namespace: 'status' };
    const k1 = 'demo.v1.artist-controller';
    const k2 = 'example.com/other';
    const w = must(await api.write(A1, 'st', ns, { data: { name: 'St' } }), 'create');
    const cond = [{ type: 'Accepted', state: 'TRUE', reason: 'Ok', message: '' }];
    const t0 = Date.now();
    const s1 = must(await api.writeStatus(A1, 'st', k1, ns, { uid: w.id.uid, observed_generation: w.generation, conditions: cond }), 'status k1');
    const t1 = Date.now();
    t.same(Object.keys(s1.status), [k1]);
    t.equal(s1.status[k1]?.observed_generation, w.generation);
    t.same(s1.status[k1]?.conditions, cond);
    isoNear(t, s1.status[k1]?.updated_at, t0, t1, 'updated_at');
    t.equal(s1.generation, w.generation, 'generation unchanged');
    t.ok(num(s1.version) > num(w.version), 'version changed');
    t.same(s1.data, w.data, 'data unchanged');
    const s2 = must(await api.writeStatus(A1, 'st', k2, ns, { uid: w.id.uid, observed_generation: 'g', conditions: [{ type: 'Ready', state: 'UNKNOWN' }] }), 'status k2');
    t.same(s2.status[k1], s1.status[k1], 'the other key is kept');
    t.same(s2.status[k2]?.conditions, [{ type: 'Ready', state: 'UNKNOWN', reason: '', message: '' }], 'reason and message default to empty');
    const s3 = must(await api.writeStatus(A1, 'st', k1, ns, { uid: w.id.uid, observed_generation: w.generation, conditions: [] }), 'status k1 again');
    t.same(s3.status[k1]?.conditions, [], 'k1 replaced');
    t.same(s3.status[k2], s2.status[k2], 'k2 kept');
    t.ok(num(s3.version) > num(s2.version));
    t.equal(s3.generation, w.generation);
    t.same(must(await api.read(A1, 'st', ns), 'read'), s3);
    refused(t, await api.writeStatus(A1, 'st', k1, ns, { observed_generation: 'g', conditions: [] }), 'INVALID_ARGUMENT', 'no uid');
    refused(t, await api.writeStatus(A1, 'st', k1, ns, { uid: '', observed_generation: 'g', conditions: [] }), 'INVALID_ARGUMENT', 'an empty uid');
    refused(t, await api.writeStatus(A1, 'st', k1, ns, { uid: FOREIGN_UID, observed_generation: 'g', conditions: [] }), 'NOT_FOUND', 'another uid');
    refused(t, await api.writeStatus(A1, 'absent', k1, ns, { uid: w.id.uid, observed_generation: 'g', conditions: [] }), 'NOT_FOUND', 'an absent resource');
    refused(t, await api.writeStatus(A1, 'st', k1, ns, { uid: w.id.uid, observed_generation: 'g', conditions: [], version: s1.version }), 'CAS_FAILED', 'a stale version');
    const s4 = must(await api.writeStatus(A1, 'st', k1, ns, { uid: w.id.uid, observed_generation: 'g', conditions: [], version: s3.version }), 'the current version');
    t.ok(num(s4.version) > num(s3.version));
    for (const [what, conditions] of [
      ['a bad state', [{ type: 'A', state: 'MAYBE' }]],
      ['an unknown condition field', [{ type: 'A', state: 'TRUE', severity: 'high' }]],
      ['an empty condition type', [{ type: '', state: 'TRUE' }]],
      ['conditions that are not an array', { type: 'A', state: 'TRUE' }],
      ['too many conditions', Array.from({ length: 33 }, (_, i) => ({ type: `c${i}`, state: 'TRUE' }))],
      ['an over-long message', [{ type: 'A', state: 'TRUE', message: 'm'.repeat(1025) }]],
    ] as const) {
      refused(t, await api.writeStatus(A1, 'st', k1, ns, { uid: w.id.uid, observed_generation: 'g', conditions }), 'INVALID_ARGUMENT', what);
    }
    refused(t, await api.writeStatus(A1, 'st', 'bad key!', ns, { uid: w.id.uid, observed_generation: 'g', conditions: [] }), 'INVALID_ARGUMENT', 'a status key that is not a qualified name');
    refused(t, await api.writeStatus(A1, 'st', k1, { namespace: 'BAD' }, { uid: w.id.uid, observed_generation: 'g', conditions: [] }), 'INVALID_ARGUMENT', 'a bad namespace');
    // Status through Write: pass it back unchanged or leave it out; changing it is refused.
    const cur = must(await api.read(A1, 'st', ns), 'read');
    const passed = must(await api.write(A1, 'st', ns, { data: { name: 'St2' }, status: cur.status }), 'a write passing the status back');
    t.same(passed.status, cur.status, 'status kept');
    const left = must(await api.write(A1, 'st', ns, { data: { name: 'St3' } }), 'a write leaving status out');
    t.same(left.status, cur.status, 'status kept');
    const changed = { ...cur.status, [k1]: { ...cur.status[k1], conditions: [{ type: 'Forged', state: 'TRUE', reason: '', message: '' }] } };
    refused(t, await api.write(A1, 'st', ns, { data: { name: 'St4' }, status: changed }), 'INVALID_ARGUMENT', 'a write changing the status');
    refused(t, await api.write(A1, 'st', ns, { data: { name: 'St4' }, status: {} }), 'INVALID_ARGUMENT', 'a write clearing the status');
    refused(t, await api.write(A1, 'st-new', ns, { data: { name: 'N' }, status: { [k1]: cur.status[k1] } }), 'INVALID_ARGUMENT', 'a create with a status');
    t.same(must(await api.read(A1, 'st', ns), 'read').status, cur.status, 'status unchanged by writes');
  });

  t.test('No-op writes: the same data returns the stored resource, same version', async (t) => {
    const ns = { namespace: 'noop' };
    const w1 = must(await api.write(A1, 'same', ns, { data: { name: 'N', genre: 'jazz' }, metadata: { a: '1', b: '2' }, finalizers: ['cairn.test/f'] }), 'create');
    t.same(must(await api.write(A1, 'same', ns, { data: { name: 'N', genre: 'jazz' }, metadata: { a: '1', b: '2' }, finalizers: ['cairn.test/f'] }), 'same again'), w1, 'the same write: unchanged');
    t.same(must(await api.write(A1, 'same', ns, { data: { genre: 'jazz', name: 'N' }, metadata: { b: '2', a: '1' } }), 'reordered keys'), w1, 'object key order does not matter');
    t.same(must(await api.write(A1, 'same', ns, { data: { name: 'N', genre: 'jazz' }, version: w1.version }), 'CAS no-op'), w1, 'a CAS write that changes nothing');
    t.same(must(await api.write(A1, 'same', ns, { data: { name: 'N', genre: 'jazz' }, uid: w1.id.uid }), 'no-op naming the uid'), w1);
    const d1 = must(await api.write(A1, 'defaults', ns, { data: { name: 'D' } }), 'create with a defaulted field');
    t.same(must(await api.write(A1, 'defaults', ns, { data: { name: 'D' } }), 'again'), d1, 'defaults applied by mutate make the same stored data');
    t.same(must(await api.read(A1, 'same', ns), 'read'), w1);
  });

  t.test('Generation: data, metadata and finalizers change it; status and no-ops do not', async (t) => {
    const ns = { namespace: 'gen' };
    const w0 = must(await api.write(ALBUM, 'g', ns, { data: { title: 'A' } }), 'create');
    const steps: Array<[string, () => Promise<ApiResult<ResourceJson>>, boolean]> = [
      ['data changes', () => api.write(ALBUM, 'g', ns, { data: { title: 'B' } }), true],
      ['metadata changes', () => api.write(ALBUM, 'g', ns, { data: { title: 'B' }, metadata: { k: 'v' } }), true],
      ['metadata cleared', () => api.write(ALBUM, 'g', ns, { data: { title: 'B' }, metadata: {} }), true],
      ['a finalizer added', () => api.write(ALBUM, 'g', ns, { data: { title: 'B' }, finalizers: ['cairn.test/x'] }), true],
      ['finalizers reordered', () => api.write(ALBUM, 'g', ns, { data: { title: 'B' }, finalizers: ['cairn.test/y', 'cairn.test/x'] }), true],
      ['finalizers removed', () => api.write(ALBUM, 'g', ns, { data: { title: 'B' }, finalizers: [] }), true],
      ['array order in data', () => api.write(ALBUM, 'g', ns, { data: { title: 'B', tracks: ['1', '2'] } }), true],
      ['array order in data, reversed', () => api.write(ALBUM, 'g', ns, { data: { title: 'B', tracks: ['2', '1'] } }), true],
      ['a status write', () => api.writeStatus(ALBUM, 'g', 'cairn.test/c', ns, { uid: w0.id.uid, observed_generation: 'x', conditions: [] }), false],
    ];
    let prev = w0;
    for (const [what, step, changes] of steps) {
      const next = must(await step(), what);
      t.ok(num(next.version) > num(prev.version), `${what}: new version`);
      if (changes) t.not(next.generation, prev.generation, `${what}: new generation`);
      else t.equal(next.generation, prev.generation, `${what}: same generation`);
      prev = next;
    }
    const same = must(await api.write(ALBUM, 'g', ns, { data: { title: 'B', tracks: ['2', '1'] } }), 'no change');
    t.equal(same.generation, prev.generation, 'a no-op: same generation');
    t.equal(same.version, prev.version, 'a no-op: same version');
  });

  t.test('Absent metadata and finalizers keep the stored ones, also right after a write (read-your-writes in the server)', async (t) => {
    const ns = { namespace: 'keep' };
    let w = must(await api.write(A1, 'keep', ns, { data: { name: 'K0' }, metadata: { n: '0' }, finalizers: ['cairn.test/k0'] }), 'create');
    let bad = 0;
    for (let i = 1; i <= 30; i++) {
      const m = must(await api.write(A1, 'keep', ns, { data: { name: `K${i}` }, metadata: { n: String(i) }, finalizers: [`cairn.test/k${i}`], version: w.version }), `write ${i}`);
      // Immediately: a CAS write on that version that leaves metadata and finalizers out.
      w = must(await api.write(A1, 'keep', ns, { data: { name: `K${i}b` }, version: m.version }), `write ${i}b`);
      if (w.metadata['n'] !== String(i) || w.finalizers[0] !== `cairn.test/k${i}`) {
        bad++;
        t.same({ metadata: w.metadata, finalizers: w.finalizers }, { metadata: { n: String(i) }, finalizers: [`cairn.test/k${i}`] }, `round ${i}: the write kept what version ${m.version} stored`);
      }
    }
    t.equal(bad, 0, '30 rounds: an omitted field always kept the state of the version the write named');
    must(await api.write(A1, 'keep', ns, { data: { name: 'K' }, finalizers: [] }), 'clear the finalizers');
  });

  t.test('Errors: INVALID_ARGUMENT for bad types, names, tenancies and data', async (t) => {
    const ns = { namespace: 'err' };
    for (const type of ['nope', 'demo.Artist', 'demo.v9.Artist', 'Demo.v1.Artist', 'demo.v1.artist', 'demo.v1.Nothing', 'demo..Artist', 'a.b.c.d']) {
      refused(t, await api.write(type, 'x', ns, { data: { name: 'X' } }), 'INVALID_ARGUMENT', `write type ${JSON.stringify(type)}`);
      refused(t, await api.read(type, 'x', ns), 'INVALID_ARGUMENT', `read type ${JSON.stringify(type)}`);
      refused(t, await api.delete(type, 'x', ns), 'INVALID_ARGUMENT', `delete type ${JSON.stringify(type)}`);
    }
    const badData: Array<[string, string, unknown]> = [
      ['missing required field', A1, { genre: 'rock' }],
      ['empty name', A1, { name: '' }],
      ['enum violation', A1, { name: 'X', genre: 'polka' }],
      ['unknown data field', A1, { name: 'X', members: 3 }],
      ['wrong field type', A1, { name: 7 }],
      ['negative members', A2, { name: 'X', members: -1 }],
      ['non-integer members', A2, { name: 'X', members: 1.5 }],
      ['non-integer year', ALBUM, { title: 'T', year: 'nineteen' }],
      ['tracks not strings', ALBUM, { title: 'T', tracks: [1, 2] }],
      ['data a string', A1, 'Korn'],
      ['data an array', A1, [{ name: 'X' }]],
      ['data null', A1, null],
    ];
    for (const [what, type, data] of badData) {
      refused(t, await api.write(type, 'bad-data', ns, { data }), 'INVALID_ARGUMENT', `data: ${what}`);
    }
    refused(t, await api.write(A1, 'bad-data', ns, {}), 'INVALID_ARGUMENT', 'no data');
    refused(t, await api.read(A1, 'bad-data', ns), 'NOT_FOUND', 'nothing was created by refused writes');
    const e = refused(t, await api.write(A1, 'bad-data', ns, { data: { name: 'X', genre: 'polka' } }), 'INVALID_ARGUMENT', 'schema error');
    t.ok(e?.message.includes('genre'), 'the message names the field');
  });

  t.test('Errors: data nested deeper than the store allows is INVALID_ARGUMENT, never INTERNAL', async (t) => {
    // The store refuses nesting deeper than 100 levels (store README "Inputs"); the API must
    // refuse it as the caller's mistake at any depth that fits in a request.
    const ns = { namespace: 'deep' };
    const arrays = (n: number): string => `${'['.repeat(n)}${']'.repeat(n)}`;
    const objects = (n: number): string => `${'{"a":'.repeat(n)}1${'}'.repeat(n)}`;
    for (const depth of [150, 2_000, 10_000, 100_000]) {
      for (const [what, type, text] of [
        ['data itself', A1, arrays(depth)],
        ['data.name', A1, `{"name":${arrays(depth)}}`],
        ['data.tracks', ALBUM, `{"title":"t","tracks":${arrays(depth)}}`],
        ['nested objects in data', ALBUM, `{"title":"t","year":${objects(depth)}}`],
      ] as const) {
        refused(t, await api.write(type, 'deep', ns, { data: new JsonText(text) }), 'INVALID_ARGUMENT', `${what} nested ${depth} levels deep`);
      }
    }
    refused(t, await api.read(A1, 'deep', ns), 'NOT_FOUND', 'nothing was created');
  });

  t.test('Data round-trips exactly: what a write returns and a read gives back is what was sent', async (t) => {
    const ns = { namespace: 'unicode' };
    for (const [what, name] of [
      ['ASCII', 'plain'],
      ['non-Latin scripts', 'Motörhead 東京事変 Ранетки'],
      ['an astral-plane character', 'band \u{1F3B8}'],
      ['escapes', 'quote " backslash \\ tab \t newline \n nul \u0000'],
    ] as const) {
      const w = must(await api.write(A1, 'u1', ns, { data: { name } }), what);
      t.equal((w.data as { name?: unknown }).name, name, `${what}: the write returns it as sent`);
      t.equal((must(await api.read(A1, 'u1', ns), 'read').data as { name?: unknown }).name, name, `${what}: a read returns it as sent`);
    }
    // A lone surrogate is valid JSON (an escape) but not Unicode text: refuse it or keep it, never change it silently.
    const lone = 'a\ud800b';
    const r = await api.write(A1, 'u2', ns, { data: { name: lone } });
    if (r.ok) t.equal((r.value.data as { name?: unknown }).name, lone, 'a lone surrogate is stored as sent (or refused), not replaced');
    else refused(t, r, 'INVALID_ARGUMENT', 'a lone surrogate');
  });

  t.test('Limits: names, tenancies, metadata, finalizers, data size', async (t) => {
    const ns = { namespace: 'limits' };
    const n63 = `a${'b'.repeat(61)}c`;
    must(await api.write(A1, n63, ns, { data: { name: 'long' } }), 'a 63-character name');
    refused(t, await api.write(A1, `${n63}d`, ns, { data: { name: 'long' } }), 'INVALID_ARGUMENT', 'a 64-character name');
    refused(t, await api.read(A1, `${n63}d`, ns), 'INVALID_ARGUMENT', 'read with a 64-character name');
    // ('..' is not here: a URL client resolves it as a dot segment before sending; the fuzz test sends it raw.)
    for (const name of ['Korn', 'a_b', 'a.b', '-a', 'a-', 'a b', 'ä', 'a/b', '.a', '*', 'a%2Fb', 'a\u0000b']) {
      refused(t, await api.write(A1, name, ns, { data: { name: 'X' } }), 'INVALID_ARGUMENT', `name ${JSON.stringify(name)}`);
    }
    for (const [what, ten] of [
      ['a 64-character namespace', { namespace: `${n63}d` }],
      ['an uppercase namespace', { namespace: 'Limits' }],
      ['a partition with a dot', { partition: 'a.b', namespace: 'limits' }],
      ['a wildcard partition in a write', { partition: '*', namespace: 'limits' }],
      ['a wildcard namespace in a write', { namespace: '*' }],
    ] as const) {
      refused(t, await api.write(A1, 'x', ten, { data: { name: 'X' } }), 'INVALID_ARGUMENT', `write with ${what}`);
    }
    refused(t, await api.read(A1, 'x', { namespace: '*' }), 'INVALID_ARGUMENT', 'read with a wildcard namespace');
    refused(t, await api.delete(A1, 'x', { partition: '*' }), 'INVALID_ARGUMENT', 'delete with a wildcard partition');
    const many = Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`k${i}`, 'v']));
    const big = Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, 'v'.repeat(1000)]));
    for (const [what, metadata] of [
      ['65 entries', many],
      ['over 16 KiB', big],
      ['a value over 1024 characters', { k: 'v'.repeat(1025) }],
      ['a bad key', { 'bad key': 'v' }],
      ['an empty key', { '': 'v' }],
      ['a key over 253 characters', { [`k${'e'.repeat(253)}`]: 'v' }],
      ['a number value', { k: 1 }],
      ['an array', ['k']],
      ['a string', 'k=v'],
    ] as const) {
      refused(t, await api.write(A1, 'meta', ns, { data: { name: 'X' }, metadata }), 'INVALID_ARGUMENT', `metadata: ${what}`);
    }
    must(await api.write(A1, 'meta', ns, { data: { name: 'X' }, metadata: Object.fromEntries(Array.from({ length: 64 }, (_, i) => [`k${i}`, 'v'])) }), 'metadata: 64 entries');
    for (const [what, finalizers] of [
      ['33 finalizers', Array.from({ length: 33 }, (_, i) => `cairn.test/f${i}`)],
      ['a bad finalizer', ['bad finalizer']],
      ['an empty finalizer', ['']],
      ['a duplicate', ['cairn.test/f', 'cairn.test/f']],
      ['not an array', 'cairn.test/f'],
      ['a number', [1]],
    ] as const) {
      refused(t, await api.write(A1, 'fins', ns, { data: { name: 'X' }, finalizers }), 'INVALID_ARGUMENT', `finalizers: ${what}`);
    }
    refused(t, await api.write(A1, 'huge', ns, { data: { name: 'x'.repeat(1024 * 1024 + 10) } }), 'TOO_LARGE', 'data over 1 MiB');
    refused(t, await api.read(A1, 'huge', ns), 'NOT_FOUND', 'not created');
  });

  t.test('Scope: tenancy fields a type does not have are refused; empty fields default to "default"', async (t) => {
    const e = must(await api.write(EXEC, 'boss', {}, { data: { name: 'Boss', position: 'CEO' } }), 'a cluster-scoped resource');
    t.same(e.id.tenancy, { partition: '', namespace: '' }, 'a cluster-scoped resource has no partition and no namespace');
    t.same(must(await api.read(EXEC, 'boss', {}), 'read'), e);
    t.same(must(await api.read(EXEC, 'boss', { partition: '', namespace: '' }), 'read with empty fields'), e);
    const l = must(await api.write(LABEL, 'label', {}, { data: { name: 'L' } }), 'a partition-scoped resource');
    t.same(l.id.tenancy, { partition: 'default', namespace: '' }, 'a partition-scoped resource: partition default, no namespace');
    const a = must(await api.write(A1, 'scoped', { partition: 'scope-p' }, { data: { name: 'S' } }), 'a namespace-scoped resource in a partition');
    t.same(a.id.tenancy, { partition: 'scope-p', namespace: 'default' });
    const ten = { namespace: 'x' };
    refused(t, await api.write(EXEC, 'boss', ten, { data: { name: 'B' } }), 'INVALID_ARGUMENT', 'write: a namespace for a cluster-scoped type');
    refused(t, await api.write(EXEC, 'boss', { partition: 'x' }, { data: { name: 'B' } }), 'INVALID_ARGUMENT', 'write: a partition for a cluster-scoped type');
    refused(t, await api.read(EXEC, 'boss', ten), 'INVALID_ARGUMENT', 'read: a namespace for a cluster-scoped type');
    refused(t, await api.delete(EXEC, 'boss', ten), 'INVALID_ARGUMENT', 'delete: a namespace for a cluster-scoped type');
    refused(t, await api.writeStatus(EXEC, 'boss', 'cairn.test/c', ten, { uid: e.id.uid, observed_generation: 'g', conditions: [] }), 'INVALID_ARGUMENT', 'status: a namespace for a cluster-scoped type');
    refused(t, await api.list(EXEC, ten), 'INVALID_ARGUMENT', 'list: a namespace for a cluster-scoped type');
    refused(t, await api.write(LABEL, 'label', ten, { data: { name: 'L' } }), 'INVALID_ARGUMENT', 'write: a namespace for a partition-scoped type');
    refused(t, await api.read(LABEL, 'label', ten), 'INVALID_ARGUMENT', 'read: a namespace for a partition-scoped type');
    t.same(must(await api.read(EXEC, 'boss', {}), 'read'), e, 'unchanged');
  });

  if (api.raw !== undefined) httpOnly(t, api, api.raw);
}

/** Cases only a wire protocol has: what a JSON body or a query string can get wrong. */
function httpOnly(t: Test, api: ResourceApiTarget, raw: NonNullable<ResourceApiTarget['raw']>): void {
  const expectHttpError = (t: Test, r: RawResponse, status: number, code: string, what: string): void => {
    t.equal(r.status, status, `${what}: HTTP ${status}${r.status === status ? '' : ` (got ${r.status}: ${r.text.slice(0, 200)})`}`);
    t.match(r.contentType, /^application\/json/, `${what}: JSON`);
    const problem = errorShapeProblem(r.json);
    t.equal(problem, undefined, `${what}: the error shape of API.md`);
    t.equal((r.json as { error?: { code?: unknown } } | undefined)?.error?.code, code, `${what}: ${code}`);
  };
  const put = (path: string, body: string | Uint8Array, headers: Record<string, string> = {}): Promise<RawResponse> => raw({ method: 'PUT', path, body, headers });

  t.test('HTTP: unknown body fields, unknown and repeated query parameters, wrong JSON types', async (t) => {
    const p = '/v1/resource/demo.v1.Artist/http-x?namespace=http';
    for (const [what, body] of [
      ['an unknown field', { data: { name: 'X' }, colour: 'red' }],
      ['a misspelled field', { data: { name: 'X' }, finaliser: [] }],
      ['id in the body', { data: { name: 'X' }, id: { name: 'http-x' } }],
      ['version a number', { data: { name: 'X' }, version: 0 }],
      ['uid a number', { data: { name: 'X' }, uid: 5 }],
      ['metadata an array', { data: { name: 'X' }, metadata: [] }],
      ['finalizers a string', { data: { name: 'X' }, finalizers: 'f' }],
      ['owner a number', { data: { name: 'X' }, owner: 1 }],
      ['status an array', { data: { name: 'X' }, status: [] }],
      ['the body an array', [{ data: { name: 'X' } }]],
      ['the body a string', 'data'],
      ['the body null', null],
    ] as const) {
      expectHttpError(t, await put(p, JSON.stringify(body)), 400, 'INVALID_ARGUMENT', `write: ${what}`);
    }
    for (const [what, body] of [
      ['not JSON', '{data: {name: "X"}}'],
      ['truncated JSON', '{"data": {"name": "X"'],
      ['empty', ''],
      ['trailing garbage', '{"data":{"name":"X"}} x'],
    ] as const) {
      expectHttpError(t, await put(p, body), 400, 'INVALID_ARGUMENT', `write: a body that is ${what}`);
    }
    // JSON.parse makes "__proto__" an own key; a status passed under it is still a status.
    const proto = '{"data":{"name":"X"},"status":{"__proto__":{"observed_generation":"g","updated_at":"2000-01-01T00:00:00.000Z","conditions":[{"type":"Forged","state":"TRUE"}]}}}';
    expectHttpError(t, await put('/v1/resource/demo.v1.Artist/http-proto?namespace=http', proto), 400, 'INVALID_ARGUMENT', 'write: a create with a status keyed "__proto__"');
    const r = await raw({ method: 'GET', path: '/v1/resource/demo.v1.Artist/http-x?namespace=http' });
    expectHttpError(t, r, 404, 'NOT_FOUND', 'none of the refused writes created the resource');
    const w = must(await api.write(A1, 'http-x', { namespace: 'http' }, { data: { name: 'X' } }), 'a valid write');
    const s = '/v1/resource/demo.v1.Artist/http-x/status/cairn.test%2Fc?namespace=http';
    for (const [what, body] of [
      ['updated_at from the client', { uid: w.id.uid, observed_generation: 'g', conditions: [], updated_at: '2000-01-01T00:00:00.000Z' }],
      ['an unknown field', { uid: w.id.uid, observed_generation: 'g', conditions: [], key: 'x' }],
      ['uid a number', { uid: 1, observed_generation: 'g', conditions: [] }],
      ['observed_generation a number', { uid: w.id.uid, observed_generation: 1, conditions: [] }],
      ['version a number', { uid: w.id.uid, observed_generation: 'g', conditions: [], version: 1 }],
    ] as const) {
      expectHttpError(t, await put(s, JSON.stringify(body)), 400, 'INVALID_ARGUMENT', `status: ${what}`);
    }
    const okBody = JSON.stringify({ data: { name: 'X' } });
    const routes: Array<[string, string, string | undefined]> = [
      ['PUT', '/v1/resource/demo.v1.Artist/http-x?namespace=http&foo=1', okBody],
      ['PUT', '/v1/resource/demo.v1.Artist/http-x?namespace=http&version=0', okBody],
      ['PUT', '/v1/resource/demo.v1.Artist/http-x?namespace=http&uid=x', okBody],
      ['GET', '/v1/resource/demo.v1.Artist/http-x?namespace=http&foo=1', undefined],
      ['GET', '/v1/resource/demo.v1.Artist/http-x?namespace=http&name_prefix=h', undefined],
      ['DELETE', '/v1/resource/demo.v1.Artist/http-x?namespace=http&foo=1', undefined],
      ['DELETE', '/v1/resource/demo.v1.Artist/http-x?namespace=http&consistency=stale', undefined],
      ['PUT', `/v1/resource/demo.v1.Artist/http-x/status/cairn.test%2Fc?namespace=http&foo=1`, JSON.stringify({ uid: w.id.uid, observed_generation: 'g', conditions: [] })],
      ['GET', '/v1/resources/demo.v1.Artist?namespace=http&foo=1', undefined],
      ['GET', '/v1/resources/demo.v1.Artist?namespace=http&uid=x', undefined],
      ['GET', '/v1/resources/demo.v1.Artist?namespace=http&namespace=other', undefined],
      ['GET', '/v1/resource/demo.v1.Artist/http-x?namespace=http&namespace=http', undefined],
      ['GET', '/v1/resource/demo.v1.Artist/http-x?namespace=http&consistency=eventual', undefined],
      ['GET', '/v1/resources/demo.v1.Artist?consistency=', undefined],
    ];
    for (const [method, path, body] of routes) {
      expectHttpError(t, await raw({ method, path, ...(body !== undefined ? { body } : {}) }), 400, 'INVALID_ARGUMENT', `${method} ${path}`);
    }
    t.same(must(await api.read(A1, 'http-x', { namespace: 'http' }), 'read'), w, 'nothing changed it');
  });

  t.test('HTTP: bodies over 1 MiB are 413 TOO_LARGE, with or without Content-Length; 1 MiB is accepted', async (t) => {
    const path = '/v1/resource/demo.v1.Artist/http-big?namespace=http';
    const exactly = (bytes: number): string => {
      const frame = JSON.stringify({ data: { name: '' } });
      return JSON.stringify({ data: { name: 'x'.repeat(bytes - frame.length) } });
    };
    const over = exactly(1024 * 1024 + 1);
    t.equal(Buffer.byteLength(over), 1024 * 1024 + 1);
    expectHttpError(t, await put(path, over), 413, 'TOO_LARGE', 'a body of 1 MiB + 1 byte');
    expectHttpError(t, await put(path, exactly(4 * 1024 * 1024)), 413, 'TOO_LARGE', 'a body of 4 MiB');
    // Without Content-Length (chunked): the server finds out while reading.
    const chunked = async (bytes: number): Promise<RawResponse> => {
      try {
        return await raw({ method: 'PUT', path, body: exactly(bytes), chunked: true });
      } catch (e) {
        const cause = e instanceof Error ? (e as { cause?: unknown }).cause : undefined;
        return { status: 0, contentType: '', text: `the request failed: ${e instanceof Error ? e.message : String(e)} ${cause instanceof Error ? cause.message : ''}`, json: undefined };
      }
    };
    expectHttpError(t, await chunked(2 * 1024 * 1024), 413, 'TOO_LARGE', 'a chunked body of 2 MiB');
    const r = await put(path, exactly(1024 * 1024));
    t.equal(r.status, 200, `a body of exactly 1 MiB is accepted (got ${r.status}: ${r.text.slice(0, 200)})`);
    must(await api.delete(A1, 'http-big', { namespace: 'http' }), 'clean up');
    const alive = await raw({ method: 'GET', path: '/readyz' });
    t.equal(alive.status, 200, 'the node is fine');
  });

  t.test('HTTP: unknown endpoints are 404 and wrong methods 405, with the error shape', async (t) => {
    for (const [method, path] of [
      ['GET', '/v1/nope'],
      ['GET', '/v1/resource/demo.v1.Artist'],
      ['GET', '/v1/resource/demo.v1.Artist/a/b'],
      ['GET', '/v2/resources/demo.v1.Artist'],
      ['PUT', '/'],
    ] as const) {
      expectHttpError(t, await raw({ method, path }), 404, 'NOT_FOUND', `${method} ${path}`);
    }
    for (const [method, path] of [
      ['POST', '/v1/resource/demo.v1.Artist/a'],
      ['PATCH', '/v1/resource/demo.v1.Artist/a'],
      ['DELETE', '/v1/resources/demo.v1.Artist'],
      ['GET', '/v1/resource/demo.v1.Artist/a/status/k'],
    ] as const) {
      const r = await raw({ method, path, ...(method === 'POST' || method === 'PATCH' ? { body: '{}' } : {}) });
      t.equal(r.status, 405, `${method} ${path}: 405`);
      t.equal(errorShapeProblem(r.json), undefined, `${method} ${path}: the error shape`);
    }
  });
}
