import fc from 'fast-check';
import t, { type Test } from 'tap';
import { CairnError, ErrorCode, isCairnError, type Clock, type Revision } from '../base/index.js';
import type { Coordinator } from '../replica/index.js';
import { LocalCluster } from '../replica/testing/index.js';
import { ResourceStore } from '../store/index.js';
import { registerDemoTypes } from './demo-types.js';
import { PAGING_DEFAULTS, SnapshotCache, decodeContinue, encodeContinue, filterHash, pageLimit, pagingLimits } from './paging.js';
import { TypeRegistry } from './registry.js';
import { registryWriteHooks } from './write-hooks.js';
import { LIMITS, ResourceService, type ListResult, type PagingOptions } from './index.js';

/**
 * Paged lists (issue 16, item 5): the continue token (opaque, strict, never a crash), the
 * snapshot cache's bounds (count and age, on a clock the test drives), and ResourceService's
 * paging over a real single-node replica: pages at the first page's revision while writes go
 * on, a token of another filter, garbled, expired, dropped or from before a restart.
 */

class ManualClock implements Clock {
  ms = 1_000_000;
  nowMs(): number {
    return this.ms;
  }
  monotonicMs(): number {
    return this.ms;
  }
}

function codeOf(e: unknown): string {
  return isCairnError(e) ? e.code : `not a CairnError: ${String(e)}`;
}

async function rejects(t: Test, p: Promise<unknown>, code: string, what: string): Promise<CairnError | undefined> {
  try {
    await p;
    t.fail(`${what}: expected ${code}, got an answer`);
    return undefined;
  } catch (e) {
    t.equal(codeOf(e), code, what);
    return e as CairnError;
  }
}

t.test('a continue token round-trips and is opaque base64url', async (t) => {
  const tok = { revision: 42 as Revision, after: 'demo\u0000Artist\u0000default\u0000default\u0000korn', filter: filterHash({ list: { a: 1 } }) };
  const s = encodeContinue(tok);
  t.match(s, /^[A-Za-z0-9_-]+$/);
  t.same(decodeContinue(s), tok);
  t.equal(filterHash({ a: 1, b: 'x' }), filterHash({ b: 'x', a: 1 }), 'key order does not change the hash');
  t.not(filterHash({ a: 1 }), filterHash({ a: 2 }));
  t.equal(filterHash({ a: 1, b: undefined }), filterHash({ a: 1 }), 'an undefined field is the same as none');
});

t.test('a garbled or forged token is INVALID_ARGUMENT, never a crash', async (t) => {
  const good = JSON.parse(Buffer.from(encodeContinue({ revision: 7 as Revision, after: 'k', filter: filterHash('f') }), 'base64url').toString()) as Record<string, unknown>;
  const b64 = (o: unknown): string => Buffer.from(typeof o === 'string' ? o : JSON.stringify(o)).toString('base64url');
  const bad: Array<[unknown, string]> = [
    ['', 'empty'],
    [42, 'not a string'],
    ['!!!', 'not base64url'],
    ['a'.repeat(5000), 'too long'],
    [b64('not json'), 'not JSON'],
    [b64([1, 2]), 'an array'],
    [b64(null), 'null'],
    [b64({ ...good, v: 2 }), 'another version'],
    [b64({ ...good, r: '0' }), 'revision 0'],
    [b64({ ...good, r: 7 }), 'a numeric revision'],
    [b64({ ...good, r: '99999999999999999999' }), 'a revision out of range'],
    [b64({ ...good, r: '-1' }), 'a negative revision'],
    [b64({ ...good, k: '' }), 'an empty key'],
    [b64({ ...good, k: 5 }), 'a numeric key'],
    [b64({ ...good, f: 'short' }), 'a bad filter hash'],
    [b64({ ...good, extra: 1 }), 'an unknown field'],
    [b64(`${JSON.stringify(good).slice(0, -1)},"__proto__":{"v":1}}`), 'a __proto__ key'],
  ];
  for (const [tok, what] of bad) {
    try {
      decodeContinue(tok);
      t.fail(`${what}: accepted`);
    } catch (e) {
      t.equal(codeOf(e), ErrorCode.INVALID_ARGUMENT, `${what}: INVALID_ARGUMENT`);
      t.match((e as Error).message, /continue token is not valid/, `${what}: the message says what is wrong`);
    }
  }
  fc.assert(
    fc.property(fc.oneof(fc.string(), fc.base64String(), fc.json().map((j) => Buffer.from(j).toString('base64url'))), (s) => {
      try {
        decodeContinue(s);
      } catch (e) {
        if (!isCairnError(e, ErrorCode.INVALID_ARGUMENT)) throw e;
      }
    }),
    { numRuns: 2_000 },
  );
});

t.test('page size: absent or 0 is the maximum, larger is clamped, negative or fractional is refused', async (t) => {
  t.equal(pageLimit(undefined, 1000), 1000);
  t.equal(pageLimit(0, 1000), 1000);
  t.equal(pageLimit(5, 1000), 5);
  t.equal(pageLimit(5_000_000, 1000), 1000);
  for (const bad of [-1, 1.5, Number.NaN]) t.throws(() => pageLimit(bad, 1000), { code: ErrorCode.INVALID_ARGUMENT });
  t.equal(LIMITS.listLimit, PAGING_DEFAULTS.maxPageItems, 'the declared list limit is the page maximum');
  t.throws(() => pagingLimits({ maxPageItems: 0 }), /maxPageItems must be a positive integer/);
});

t.test('the snapshot cache holds at most N snapshots, one per revision, each for its time to live', async (t) => {
  const clock = new ManualClock();
  const cache = new SnapshotCache(clock, 3, 1_000);
  const store = new ResourceStore();
  const at = (rev: number): ReturnType<ResourceStore['snapshot']> => {
    store.setRevision(rev as Revision);
    return store.snapshot();
  };
  const s1 = at(1);
  t.equal(cache.hold(s1), s1);
  t.equal(cache.hold(at(1)), s1, 'a second list at the same revision shares the first snapshot');
  clock.ms += 100;
  cache.hold(at(2));
  cache.hold(at(3));
  t.equal(cache.size, 3);
  clock.ms += 500;
  cache.hold(at(4));
  t.equal(cache.size, 3, 'never more than the bound');
  t.equal(cache.get(1 as Revision), undefined, 'the oldest was dropped to make room');
  t.ok(cache.get(4 as Revision));
  clock.ms += 450;
  t.equal(cache.get(2 as Revision)?.revision, 2, 'still within its time to live');
  clock.ms += 100;
  t.equal(cache.get(2 as Revision), undefined, 'expired');
  t.equal(cache.size, 1, 'expired snapshots are dropped on use');
  clock.ms += 1_000;
  cache.sweep();
  t.equal(cache.size, 0);
});

interface Harness {
  svc: ResourceService;
  coordinator: Coordinator;
  clock: ManualClock;
  write(name: string, data?: Record<string, unknown>, namespace?: string): Promise<void>;
  /** A new service over the same node: what a restarted API sees (no snapshots held). */
  restart(opts?: PagingOptions): ResourceService;
}

async function harness(t: Test, paging: PagingOptions = {}): Promise<Harness> {
  const registry = new TypeRegistry();
  registerDemoTypes(registry);
  const cluster = new LocalCluster({ writeHooks: registryWriteHooks(registry) });
  await cluster.bootstrap(['n1']);
  const leader = await cluster.waitForLeader();
  t.teardown(() => cluster.close());
  registry.register({ group: 'test', groupVersion: 'v1', kind: 'Secret', scope: 'namespace', schema: { type: 'object' }, access: (_v, _r, token) => token === 'open-sesame' });
  const clock = new ManualClock();
  const node = { coordinator: (): Promise<Coordinator> => Promise.resolve(leader.coordinator), coordinatorNow: (): Coordinator => leader.coordinator };
  const svc = new ResourceService(node, registry, clock, paging);
  return {
    svc,
    coordinator: leader.coordinator,
    clock,
    write: async (name, data = { name }, namespace = '') => {
      await svc.write({ type: 'demo.v1.Artist', name, namespace, data });
    },
    restart: (opts = paging) => new ResourceService(node, registry, clock, opts),
  };
}

async function readAll(svc: ResourceService, req: { type: string; namespace?: string; limit?: number }, between?: () => Promise<void>): Promise<{ pages: ListResult[]; names: string[] }> {
  const pages: ListResult[] = [];
  let cont: string | undefined;
  do {
    const p = await svc.list({ ...req, continue: cont });
    pages.push(p);
    cont = p.continue;
    if (cont !== undefined) await between?.();
  } while (cont !== undefined);
  return { pages, names: pages.flatMap((p) => p.resources.map((r) => r.id.name)) };
}

t.test('a list pages at the first page revision: writes between pages do not show, every page says that revision', async (t) => {
  const h = await harness(t);
  const names = Array.from({ length: 23 }, (_, i) => `a${String(i).padStart(2, '0')}`);
  for (const n of names) await h.write(n);
  let k = 0;
  const { pages, names: got } = await readAll(h.svc, { type: 'demo.v1.Artist', limit: 5 }, async () => {
    // Between pages: a create (sorts first and last), an update and a delete.
    await h.write(`a00-new-${k}`);
    await h.write(`z-new-${k}`);
    await h.write(names[20] as string, { name: 'renamed', genre: 'jazz' });
    await h.svc.delete({ type: 'demo.v1.Artist', name: names[22 - k] as string });
    k++;
  });
  t.same(got, names, 'exactly the resources of the first revision, once each, in order');
  t.same(pages.map((p) => p.resources.length), [5, 5, 5, 5, 3], 'full pages, then the rest');
  t.same(new Set(pages.map((p) => p.revision)).size, 1, 'every page carries the first page revision');
  t.ok(pages.every((p) => p.resources.every((r) => Number(r.version) <= Number(pages[0]?.revision))), 'no item is newer than that revision');
  t.equal(pages.at(-1)?.continue, undefined, 'the last page has no continue');
  const now = await h.svc.list({ type: 'demo.v1.Artist' });
  t.ok(now.resources.some((r) => r.id.name === 'z-new-0') && Number(now.revision) > Number(pages[0]?.revision), 'a new list sees the writes');
  t.equal(now.continue, undefined, 'a list within the maximum page has no continue');
  t.equal(h.svc.heldSnapshots, 1, 'one snapshot was held (the unfinished list holds it until it expires)');
});

t.test('a list of one page holds no snapshot; ListByOwner pages too', async (t) => {
  const h = await harness(t);
  const owner = await h.svc.write({ type: 'demo.v1.Artist', name: 'owner', data: { name: 'o' } });
  for (let i = 0; i < 7; i++) await h.svc.write({ type: 'demo.v1.Album', name: `al${i}`, data: { title: `t${i}` }, owner: owner.id });
  await h.svc.list({ type: 'demo.v1.Artist' });
  t.equal(h.svc.heldSnapshots, 0);
  const seen: string[] = [];
  let cont: string | undefined;
  let pages = 0;
  do {
    const p = await h.svc.listByOwner({ ownerUid: owner.id.uid, limit: 3, continue: cont });
    seen.push(...p.resources.map((r) => r.id.name));
    cont = p.continue;
    pages++;
  } while (cont !== undefined);
  t.same(seen, ['al0', 'al1', 'al2', 'al3', 'al4', 'al5', 'al6']);
  t.equal(pages, 3);
  const first = await h.svc.listByOwner({ ownerUid: owner.id.uid, limit: 3 });
  await rejects(t, h.svc.listByOwner({ ownerUid: 'someone-else', limit: 3, continue: first.continue }), ErrorCode.INVALID_ARGUMENT, 'a ListByOwner token for another owner');
  // Children of a type with an access hook: a page counts only what the caller may see, and a
  // token handed to another caller shows that caller only what it may see.
  const sesame = { token: 'open-sesame' };
  for (let i = 0; i < 4; i++) await h.svc.write({ type: 'test.v1.Secret', name: `s${i}`, data: {}, owner: owner.id }, sesame);
  const all: string[] = [];
  let c2: string | undefined;
  let first2: string | undefined;
  do {
    const p = await h.svc.listByOwner({ ownerUid: owner.id.uid, limit: 3, continue: c2 }, sesame);
    all.push(...p.resources.map((r) => r.id.name));
    c2 = p.continue;
    first2 ??= c2;
  } while (c2 !== undefined);
  t.same(all, ['al0', 'al1', 'al2', 'al3', 'al4', 'al5', 'al6', 's0', 's1', 's2', 's3'], 'with the right, every child');
  const anon = await h.svc.listByOwner({ ownerUid: owner.id.uid, limit: 3, continue: first2 });
  t.same(anon.resources.map((r) => r.id.name), ['al3', 'al4', 'al5'], 'another caller with the token: only what it may see');
  const anonRest = await h.svc.listByOwner({ ownerUid: owner.id.uid, limit: 3, continue: anon.continue });
  t.same([anonRest.resources.map((r) => r.id.name), anonRest.continue], [['al6'], undefined], 'the hidden children neither show nor count');
});

t.test('a token used with another filter is INVALID_ARGUMENT; a garbled one too; nothing changes', async (t) => {
  const h = await harness(t);
  for (let i = 0; i < 6; i++) await h.write(`n${i}`);
  const first = await h.svc.list({ type: 'demo.v1.Artist', limit: 2 });
  const cont = first.continue;
  t.ok(cont !== undefined);
  for (const [req, what] of [
    [{ type: 'demo.v1.Album' }, 'another type'],
    [{ type: 'demo.Artist' }, 'every version instead of one'],
    [{ type: 'demo.v1.Artist', namespace: 'other' }, 'another namespace'],
    [{ type: 'demo.v1.Artist', namespace: '*' }, 'a wildcard namespace'],
    [{ type: 'demo.v1.Artist', namePrefix: 'n' }, 'a name prefix'],
    [{ type: 'demo.v1.Artist', ownerUid: 'x' }, 'an owner'],
  ] as const) {
    const e = await rejects(t, h.svc.list({ ...req, limit: 2, continue: cont }), ErrorCode.INVALID_ARGUMENT, what);
    t.match(e?.message ?? '', /belongs to another list/);
  }
  await rejects(t, h.svc.list({ type: 'demo.v1.Artist', continue: `${cont ?? ''}x` }), ErrorCode.INVALID_ARGUMENT, 'a garbled token');
  await rejects(t, h.svc.list({ type: 'demo.v1.Artist', limit: -3 }), ErrorCode.INVALID_ARGUMENT, 'a negative limit');
  const again = await h.svc.list({ type: 'demo.v1.Artist', limit: 2, continue: cont });
  t.same(again.resources.map((r) => r.id.name), ['n2', 'n3'], 'the token still works with its own filter (a token may be replayed)');
  // A forged position outside the filter's range never leaks another range.
  const forged = encodeContinue({ ...decodeContinue(cont), after: 'demo\u0000Zebra' });
  t.same((await h.svc.list({ type: 'demo.v1.Artist', continue: forged })).resources, [], 'a position past the range gives nothing');
  const before = encodeContinue({ ...decodeContinue(cont), after: '\u0001' });
  t.same((await h.svc.list({ type: 'demo.v1.Artist', continue: before })).resources.length, 6, 'a position before the range gives the range');
});

t.test('once the revision is no longer held (expired, dropped, restarted), a continue is COMPACTED', async (t) => {
  const h = await harness(t, { snapshotTtlMs: 60_000, maxSnapshots: 2 });
  for (let i = 0; i < 6; i++) await h.write(`n${i}`);
  const first = await h.svc.list({ type: 'demo.v1.Artist', limit: 2 });
  await h.write('later'); // the live store moves on, so it cannot stand in for the held revision
  h.clock.ms += 59_000;
  t.equal((await h.svc.list({ type: 'demo.v1.Artist', limit: 2, continue: first.continue })).resources.length, 2, 'within the time to live');
  h.clock.ms += 1_001;
  const e = await rejects(t, h.svc.list({ type: 'demo.v1.Artist', limit: 2, continue: first.continue }), ErrorCode.COMPACTED, 'expired');
  t.equal(e?.details['revision'], first.revision.toString(), 'the error names the revision');
  t.match(e?.message ?? '', /start the list over/);

  const a = await h.svc.list({ type: 'demo.v1.Artist', limit: 2 });
  await h.write('b1');
  const b = await h.svc.list({ type: 'demo.v1.Artist', limit: 2 });
  await h.write('c1');
  await h.svc.list({ type: 'demo.v1.Artist', limit: 2 }); // a third revision: the first is dropped (at most 2)
  await h.write('d1');
  await rejects(t, h.svc.list({ type: 'demo.v1.Artist', limit: 2, continue: a.continue }), ErrorCode.COMPACTED, 'dropped to make room');
  t.ok((await h.svc.list({ type: 'demo.v1.Artist', limit: 2, continue: b.continue })).resources.length === 2, 'the newer ones are still held');
  t.equal(h.svc.heldSnapshots, 2);

  await rejects(t, h.restart().list({ type: 'demo.v1.Artist', limit: 2, continue: b.continue }), ErrorCode.COMPACTED, 'after a restart (or on a node that never held it)');
  const quiet = await h.svc.list({ type: 'demo.v1.Artist', limit: 2 });
  const fresh = await h.restart().list({ type: 'demo.v1.Artist', limit: 2, continue: quiet.continue });
  t.equal(fresh.resources.length, 2, 'a node whose store is still at exactly that revision serves it without having held it');
  t.equal(fresh.revision, quiet.revision);
});

t.test('the server bounds a page: a larger limit is clamped, and a page stops before the byte bound', async (t) => {
  const h = await harness(t, { maxPageItems: 4, maxPageBytes: 2_000 });
  for (let i = 0; i < 9; i++) await h.write(`n${i}`);
  const p = await h.svc.list({ type: 'demo.v1.Artist', limit: 1_000 });
  t.equal(p.resources.length, 4, 'clamped to the maximum page');
  const q = await h.svc.list({ type: 'demo.v1.Artist' });
  t.equal(q.resources.length, 4, 'no limit means the maximum page');
  t.ok(q.continue !== undefined, 'and says more remain');
  const big = 'x'.repeat(900);
  for (let i = 0; i < 5; i++) await h.svc.write({ type: 'demo.v1.Album', name: `big${i}`, data: { title: big } });
  const { pages, names } = await readAll(h.svc, { type: 'demo.v1.Album' });
  t.same(names, ['big0', 'big1', 'big2', 'big3', 'big4']);
  t.ok(pages.every((pg) => JSON.stringify(pg.resources).length <= 2_000 || pg.resources.length === 1), 'each page within the byte bound (or a single item)');
  t.ok(pages.length >= 3, `the byte bound split the list (${pages.length} pages)`);
});

t.test('a per-type access hook still guards paged lists', async (t) => {
  const h = await harness(t);
  await h.svc.write({ type: 'test.v1.Secret', name: 's1', data: {} }, { token: 'open-sesame' });
  await h.svc.write({ type: 'test.v1.Secret', name: 's2', data: {} }, { token: 'open-sesame' });
  const p = await h.svc.list({ type: 'test.v1.Secret', limit: 1 }, { token: 'open-sesame' });
  await rejects(t, h.svc.list({ type: 'test.v1.Secret', limit: 1, continue: p.continue }), ErrorCode.PERMISSION_DENIED, 'a continue without the right');
});
