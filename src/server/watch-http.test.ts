import * as http from 'node:http';
import t, { type Test } from 'tap';
import type { ResourceJson } from '../api/index.js';
import type { Subscription } from '../stream/index.js';
import type { Agent } from './agent.js';
import { Agents, ChangeLog, Http, HttpWatch, filterMatches, heapUsedAfterGc, keyOf, until, type FilterJson, type ListJson, type WatchLine } from './testing/watch-harness.js';

/**
 * The HTTP watch (POST /v1/watch, API.md "Watch") against real agents in this process: the
 * event publisher as the agent feeds it from the replica, WatchService/WatchSession and the
 * NDJSON route. Each case states the behaviour it pins down; the reference for "what should
 * have been sent" is the replica's own change feed (ChangeLog) or List, never the publisher.
 * (In src/server rather than src/api: `api` may not import `server`.)
 */

const A1 = 'demo.v1.Artist';
const A2 = 'demo.v2.Artist';
const ALBUM = 'demo.v1.Album';
const LABEL = 'demo.v1.RecordLabel';
const EXEC = 'demo.v1.Executive';
const BOOKMARK_MS = 300;
const BUFFER = 200;

const agents = new Agents(t);
let main: Agent;
let api: Http;
let log: ChangeLog;

t.before(async () => {
  main = await agents.dev({ watchBookmarkMs: BOOKMARK_MS, watchBufferEvents: BUFFER });
  api = new Http(main);
  log = new ChangeLog(main);
});

const pub = (a: Agent = main): NonNullable<ReturnType<Agent['publisher']>> => {
  const p = a.publisher();
  if (!p) throw new Error('no publisher');
  return p;
};

/** Runs `jobs` with at most `n` at a time; results in order. */
async function pool<T>(n: number, jobs: Array<() => Promise<T>>): Promise<T[]> {
  const out: T[] = new Array<T>(jobs.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(n, jobs.length) }, async () => {
      while (next < jobs.length) {
        const i = next++;
        out[i] = await (jobs[i] as () => Promise<T>)();
      }
    }),
  );
  return out;
}

const mib = (b: number): string => (b / 2 ** 20).toFixed(1);
const listQuery = (f: FilterJson): Record<string, string | undefined> => ({ partition: f.partition, namespace: f.namespace, name_prefix: f.name_prefix });
const lineOf = (l: WatchLine): { type: string; revision: string; value: ResourceJson | undefined } => ({ type: l.type, revision: l.revision, value: l.value });

/** The lines of watch `i` after its tail (live events). */
function live(w: HttpWatch, i: number): WatchLine[] {
  const evs = w.of(i);
  const k = evs.findIndex((l) => l.type === 'tail');
  return k < 0 ? [] : evs.slice(k + 1);
}

/** The lines of watch `i` before its tail (initial state or replay). */
function initial(w: HttpWatch, i: number): WatchLine[] {
  const evs = w.of(i);
  const k = evs.findIndex((l) => l.type === 'tail');
  return k < 0 ? evs : evs.slice(0, k);
}

/** Waits for a bookmark at or past `revision`: every matching change up to it has been sent. */
const bookmarkedPast = (w: HttpWatch, revision: number): Promise<void> =>
  w.until((x) => x.lines.some((l) => l.type === 'bookmark' && Number(l.revision) >= revision), 15_000, `a bookmark at or after ${revision}`);

t.test('initial state, tail, live events in commit order; a delete carries the last state; several (overlapping) watches per stream', async (t) => {
  const ns = { namespace: 'init' };
  await pool(8, Array.from({ length: 25 }, (_, i) => () => api.write(A1, `a${i}`, ns, { data: { name: `A ${i}` } })));
  await api.write(A1, 'b1', ns, { data: { name: 'B1' } });
  await api.write(A2, 'a-v2', ns, { data: { name: 'v2', members: 3 } });
  await api.write(A1, 'a-other', { namespace: 'other' }, { data: { name: 'elsewhere' } });
  await api.write(ALBUM, 'alb1', ns, { data: { title: 'One' } });
  await api.write(ALBUM, 'alb2', ns, { data: { title: 'Two' } });
  const specs: FilterJson[] = [
    { type: A1, namespace: 'init' },
    { type: 'demo.Artist', namespace: '*', name_prefix: 'a' }, // overlaps watch 0
    { type: ALBUM, namespace: 'init' },
    { type: A1, namespace: 'init' }, // the same filter as watch 0
  ];
  const lists = await Promise.all(specs.map((s) => api.list(s.type, listQuery(s))));
  const w = await HttpWatch.open(api.base, specs);
  t.teardown(() => w.destroy());
  t.equal(w.status, 200);
  t.equal(w.contentType, 'application/json;stream=watch');
  await w.until((x) => specs.every((_, i) => x.tail(i) !== undefined), 10_000, 'every tail');
  specs.forEach((s, i) => {
    const list = lists[i] as ListJson;
    t.ok(list.resources.length > 0, `watch ${i} has an initial state to send`);
    t.same(initial(w, i).map(lineOf), list.resources.map((r) => ({ type: 'change', revision: r.version, value: r })), `watch ${i} (${JSON.stringify(s)}): the initial state is exactly List's, one change per resource at its version`);
    t.equal(w.tail(i)?.revision, list.revision, `watch ${i}: tail at the revision List reports (nothing written in between)`);
  });
  t.equal(initial(w, 1).filter((l) => l.value?.id.tenancy.namespace === 'other').length, 1, 'the wildcard watch sees the other namespace');
  t.equal(initial(w, 1).filter((l) => l.value?.id.type === A2).length, 1, 'the versionless watch sees both group versions');

  // Live: updates, a create, a plain delete, an update of another type, a cascading delete.
  const start = Number(w.tail(0)?.revision);
  const a3 = await api.write(A1, 'a3', ns, { data: { name: 'A 3 again' } });
  await api.write(A1, 'a-new', ns, { data: { name: 'new' } });
  const a5before = await api.write(A1, 'a5', ns, { data: { name: 'A 5 last state' } });
  const del = await api.del(A1, 'a5', ns);
  t.ok(del.deleted);
  await api.write(ALBUM, 'alb1', ns, { data: { title: 'One (remaster)' } });
  await api.write(A1, 'zz', ns, { data: { name: 'zz' } });
  await api.write(A1, 'a-x', { namespace: 'elsewhere' }, { data: { name: 'x' } });
  const owner = await api.write(A1, 'own', ns, { data: { name: 'owner' } });
  for (const c of ['child1', 'child2']) await api.write(ALBUM, c, ns, { data: { title: c }, owner: owner.id });
  await api.del(A1, 'own', ns);
  const last = await api.write(A1, 'b1', ns, { data: { name: 'B1 again' } });
  await bookmarkedPast(w, Number(last.version));

  specs.forEach((s, i) => {
    const want = log.expected(start, s);
    t.ok(want.length > 0, `watch ${i} has live events to get`);
    t.same(live(w, i).map(lineOf), want, `watch ${i}: exactly the matching changes after its tail, in commit order`);
  });
  const a5del = live(w, 0).find((l) => l.type === 'delete' && l.value?.id.name === 'a5');
  t.same(a5del?.value, a5before, 'the delete carries the last stored state (version, data, uid)');
  t.ok(Number(a5del?.revision) > Number(a5before.version), 'at the revision of the delete');
  const cascade = [...live(w, 0), ...live(w, 2)].filter((l) => l.type === 'delete' && ['own', 'child1', 'child2'].includes(l.value?.id.name ?? ''));
  t.equal(cascade.length, 3, 'the cascading delete: the owner (watch 0) and both children (watch 2)');
  t.equal(new Set(cascade.map((l) => l.revision)).size, 1, 'one log entry, one revision');
  t.ok(live(w, 0).some((l) => l.value?.version === a3.version), 'the update of a3 was seen');
  t.same(live(w, 3).map(lineOf), live(w, 0).map(lineOf), 'two watches with the same filter on one stream get the same events');
  // Across watches, after every tail: revisions never go back, even when several entries are
  // applied in one go (concurrent writes commit in batches) and land on different watches.
  const burst = await pool(
    8,
    Array.from({ length: 40 }, (_, i) => () => (i % 2 === 0 ? api.write(A1, `burst${i}`, ns, { data: { name: `b${i}` } }) : api.write(ALBUM, `burst${i}`, ns, { data: { title: `b${i}` } }))),
  );
  const burstEnd = Math.max(...burst.map((r) => Number(r.version)));
  await bookmarkedPast(w, burstEnd);
  const lastTail = w.lines.reduce((k, l, j) => (l.type === 'tail' ? j : k), -1);
  const after = w.lines.slice(lastTail + 1).filter((l) => l.type === 'change' || l.type === 'delete').map((l) => Number(l.revision));
  t.ok(after.every((r, j) => j === 0 || r >= (after[j - 1] as number)), 'live events of every watch of a stream go out in revision order');
  t.equal(after.filter((r) => r > Number(last.version)).length, 60, 'the burst: 20 artists on watches 0 and 3, 20 albums on watch 2');
  t.notOk(w.ended, 'the stream stays open');
});

t.test('filters (types with and without group version, partition and namespace wildcards, name prefixes) select exactly what List does, initially and live', async (t) => {
  // The conformance suite's List fixture (src/api/conformance/suite.ts), in its own names.
  const parts = ['default', 'flt-pa', 'flt-pb'];
  const nss = ['default', 'flt-n1', 'flt-n2'];
  const writes: Array<() => Promise<ResourceJson>> = [];
  for (const p of parts) {
    for (const n of nss) {
      for (const [type, name] of [[A1, 'flt-a1'], [A2, 'flt-a2'], [A1, 'fltb-x']] as const) writes.push(() => api.write(type, name, { partition: p, namespace: n }, { data: { name: `${name} in ${p}/${n}` } }));
    }
    for (const name of ['flt-l1', 'fltb-l2']) writes.push(() => api.write(LABEL, name, { partition: p }, { data: { name } }));
  }
  for (const name of ['flt-e1', 'flt-e2', 'fltb-e3']) writes.push(() => api.write(EXEC, name, {}, { data: { name } }));
  await pool(8, writes);

  const filters: FilterJson[] = [];
  const tenancy = [undefined, '', 'default', 'flt-pa', '*'];
  for (const name_prefix of [undefined, 'flt', 'flt-a2', 'fltb', 'nomatch']) {
    for (const type of ['demo.Artist', A1, A2]) {
      for (const partition of tenancy) for (const namespace of [undefined, '', 'flt-n1', '*']) filters.push({ type, partition, namespace, name_prefix });
    }
    for (const type of ['demo.RecordLabel', LABEL]) for (const partition of tenancy) filters.push({ type, partition, name_prefix });
    for (const type of ['demo.Executive', EXEC]) filters.push({ type, name_prefix });
  }
  const body = (f: FilterJson): Record<string, string> => Object.fromEntries(Object.entries(f).filter(([, v]) => v !== undefined)) as Record<string, string>;
  const before = await pool(8, filters.map((f) => () => api.list(f.type, listQuery(f))));
  const streams: Array<{ w: HttpWatch; from: number }> = [];
  for (let i = 0; i < filters.length; i += 64) {
    const w = await HttpWatch.open(api.base, filters.slice(i, i + 64).map(body));
    t.teardown(() => w.destroy());
    streams.push({ w, from: i });
  }
  const at = (k: number): { w: HttpWatch; i: number } => {
    const s = streams[Math.floor(k / 64)] as { w: HttpWatch; from: number };
    return { w: s.w, i: k - s.from };
  };
  for (const s of streams) await s.w.until((x) => x.lines.filter((l) => l.type === 'tail').length === Math.min(64, filters.length - s.from), 20_000, 'every tail');
  let bad = 0;
  let nonEmpty = 0;
  filters.forEach((f, k) => {
    const { w, i } = at(k);
    const got = initial(w, i).map((l) => l.value);
    const want = (before[k] as ListJson).resources;
    if (want.length > 0) nonEmpty++;
    if (JSON.stringify(got) !== JSON.stringify(want)) {
      bad++;
      t.same(got.map((r) => (r ? keyOf(r) : '?')), want.map(keyOf), `initial state of ${JSON.stringify(f)}`);
    }
  });
  t.equal(bad, 0, `${filters.length} watches: every initial state is exactly List's with the same filter`);
  t.ok(nonEmpty > filters.length / 3 && nonEmpty < filters.length, `the filters select different sets (${nonEmpty} non-empty)`);

  // Live: change some, create one, delete some (a group-version change is left to the store's tests).
  const start = Math.max(...streams.map((s) => Number(s.w.tail(0)?.revision)));
  const changed: Array<() => Promise<unknown>> = [];
  for (const p of parts) for (const n of nss) changed.push(() => api.write(A1, 'flt-a1', { partition: p, namespace: n }, { data: { name: `changed ${p}/${n}` } }));
  changed.push(() => api.write(A2, 'flt-new', { partition: 'flt-pb', namespace: 'flt-n2' }, { data: { name: 'new' } }));
  changed.push(() => api.write(LABEL, 'flt-l1', { partition: 'flt-pa' }, { data: { name: 'relabelled' } }));
  changed.push(() => api.write(EXEC, 'flt-e3', {}, { data: { name: 'new exec' } }));
  await pool(4, changed);
  const deleted = [
    { type: A1, name: 'fltb-x', partition: 'default', namespace: 'flt-n1' },
    { type: A2, name: 'flt-a2', partition: 'flt-pa', namespace: 'default' },
    { type: LABEL, name: 'fltb-l2', partition: 'flt-pb', namespace: '' },
    { type: EXEC, name: 'flt-e2', partition: '', namespace: '' },
  ];
  for (const d of deleted) t.ok((await api.del(d.type, d.name, d.namespace === '' ? (d.partition === '' ? {} : { partition: d.partition }) : { partition: d.partition, namespace: d.namespace })).deleted);
  const deletedKeys = new Set(deleted.map((d) => `${d.type} ${d.partition}/${d.namespace}/${d.name}`));
  const afterLists = await pool(8, filters.map((f) => () => api.list(f.type, listQuery(f))));
  const end = Math.max(...afterLists.map((l) => Number(l.revision)));
  for (const s of streams) await bookmarkedPast(s.w, end);
  bad = 0;
  let liveNonEmpty = 0;
  filters.forEach((f, k) => {
    const { w, i } = at(k);
    const evs = live(w, i);
    const sorted = (rs: Array<ResourceJson | undefined>): string[] => rs.map((r) => JSON.stringify(r)).sort();
    const gotChanges = sorted(evs.filter((l) => l.type === 'change').map((l) => l.value));
    const wantChanges = sorted((afterLists[k] as ListJson).resources.filter((r) => Number(r.version) > start));
    const gotDeletes = evs.filter((l) => l.type === 'delete').map((l) => (l.value ? keyOf(l.value) : '?')).sort();
    const wantDeletes = (before[k] as ListJson).resources.map(keyOf).filter((x) => deletedKeys.has(x)).sort();
    if (evs.length > 0) liveNonEmpty++;
    const ok = JSON.stringify(gotChanges) === JSON.stringify(wantChanges) && JSON.stringify(gotDeletes) === JSON.stringify(wantDeletes) && evs.every((l) => l.value !== undefined && filterMatches(f, l.value));
    if (!ok) {
      bad++;
      t.same({ changes: gotChanges, deletes: gotDeletes }, { changes: wantChanges, deletes: wantDeletes }, `live events of ${JSON.stringify(f)}`);
    }
  });
  t.equal(bad, 0, `${filters.length} watches: live changes are exactly the changed resources List now has, deletes exactly the deleted ones List had`);
  t.ok(liveNonEmpty > 0 && liveNonEmpty < filters.length, `live events reached some watches and not others (${liveNonEmpty})`);
});

t.test('resume from every revision in the window gives exactly the later changes, then tail; before the window is COMPACTED naming the oldest resumable revision', async (t) => {
  const b = await agents.dev({ watchWindowEvents: 30 });
  const bApi = new Http(b);
  const bLog = new ChangeLog(b);
  const first = await bApi.write(A1, 'k0', { namespace: 'x' }, { data: { name: 'k0' } });
  for (let i = 1; i < 70; i++) {
    const ns = { namespace: i % 2 === 0 ? 'x' : 'y' };
    if (i % 7 === 3) await bApi.del(A1, `k${(i - 2) % 20}`, { namespace: (i - 2) % 2 === 0 ? 'x' : 'y' }).catch(() => undefined);
    else if (i % 5 === 0) await bApi.write(ALBUM, `al${i % 4}`, { namespace: 'x' }, { data: { title: `t${i}` } });
    else await bApi.write(A1, `k${i % 20}`, ns, { data: { name: `k${i}` } });
  }
  const owner = await bApi.write(A1, 'own', { namespace: 'x' }, { data: { name: 'o' } });
  await bApi.write(ALBUM, 'owned', { namespace: 'x' }, { data: { title: 'owned' }, owner: owner.id });
  await bApi.del(A1, 'own', { namespace: 'x' });
  await bApi.write(A1, 'k1', { namespace: 'y' }, { data: { name: 'last' } });
  const p = pub(b);
  const current = p.revision;
  const oldest = p.oldestResumable;
  t.ok(oldest > Number(first.version), `the window (30 events) no longer holds the first writes: resumable from ${oldest}, first write at ${first.version}, now ${current}`);
  t.ok(current - oldest >= 20, 'and still holds a few dozen revisions');

  const filters: FilterJson[] = [{ type: 'demo.Artist', namespace: '*' }, { type: ALBUM, namespace: 'x' }];
  const specs: Array<{ f: FilterJson; r: number }> = [];
  for (let r = oldest; r <= current; r++) for (const f of filters) specs.push({ f, r });
  const streams: Array<{ w: HttpWatch; specs: typeof specs }> = [];
  for (let i = 0; i < specs.length; i += 64) {
    const chunk = specs.slice(i, i + 64);
    const w = await HttpWatch.open(bApi.base, chunk.map((s) => ({ ...s.f, gt_revision: String(s.r) })));
    t.teardown(() => w.destroy());
    streams.push({ w, specs: chunk });
  }
  for (const s of streams) await s.w.until((x) => x.lines.filter((l) => l.type === 'tail').length === s.specs.length, 20_000, 'every tail');
  let bad = 0;
  for (const s of streams) {
    s.specs.forEach((sp, i) => {
      const got = initial(s.w, i).map(lineOf);
      const want = sp.r === current ? [] : bLog.expected(sp.r, sp.f);
      const tail = s.w.tail(i)?.revision;
      if (JSON.stringify(got) !== JSON.stringify(want) || tail !== String(current)) {
        bad++;
        t.same({ events: got, tail }, { events: want, tail: String(current) }, `resume ${JSON.stringify(sp.f)} after ${sp.r}`);
      }
    });
  }
  t.equal(bad, 0, `${specs.length} resumes (every revision ${oldest}..${current}, two filters): exactly the changes after it, then tail at ${current}`);
  const liveA = await bApi.write(A1, 'k2', { namespace: 'x' }, { data: { name: 'live' } });
  const liveB = await bApi.write(ALBUM, 'al1', { namespace: 'x' }, { data: { title: 'live' } });
  for (const s of streams) {
    await s.w.until((x) => s.specs.every((_, i) => live(x, i).length > 0), 10_000, 'a live event on every watch');
    s.specs.forEach((sp, i) => {
      const l = live(s.w, i)[0];
      const want = sp.f.type === ALBUM ? liveB : liveA;
      if (l?.revision !== want.version || l.value?.version !== want.version) {
        bad++;
        t.fail(`resume after ${sp.r}: the first live event is ${JSON.stringify(l)}`);
      }
    });
  }
  t.equal(bad, 0, 'after the tail, every resumed watch goes on with live events');
  const oldestNow = p.oldestResumable; // the two live writes moved the window on

  // Older than the window: one stream per revision (the first error ends a stream).
  const old = await Promise.all(
    Array.from({ length: oldestNow }, async (_, r) => {
      const w = await HttpWatch.open(bApi.base, [{ type: A1, namespace: '*', gt_revision: String(r) }]);
      await w.until((x) => x.ended, 10_000, `the stream resuming after ${r} to end`);
      return { r, lines: w.lines };
    }),
  );
  bad = 0;
  for (const o of old) {
    const l = o.lines[0];
    if (o.lines.length !== 1 || l?.type !== 'error' || l.code !== 'COMPACTED' || l.revision !== String(oldestNow) || l.watch !== 0 || !(l.message ?? '').includes(String(o.r))) {
      bad++;
      t.same(o.lines, [{ type: 'error', code: 'COMPACTED', revision: String(oldestNow), watch: 0 }], `resume after ${o.r}`);
    }
  }
  t.equal(bad, 0, `every resume from 0..${oldestNow - 1} ends at once with one COMPACTED error naming ${oldestNow}, the oldest resumable revision`);
  const atOldest = await HttpWatch.open(bApi.base, [{ type: A1, namespace: '*', gt_revision: String(oldestNow) }]);
  t.teardown(() => atOldest.destroy());
  await atOldest.until((x) => x.tail(0) !== undefined, 10_000, 'the tail');
  t.notOk(atOldest.error, 'while a resume from that revision itself works');
});

t.test('a resume from a revision this node has not reached waits (no tail, no bookmark), then tails at it and goes on', async (t) => {
  const cur = pub().revision;
  const control = await HttpWatch.open(api.base, [{ type: A1, at_tail: true }]);
  const w = await HttpWatch.open(api.base, [{ type: A1, namespace: 'fut', gt_revision: String(cur + 3) }]);
  t.teardown(() => {
    control.destroy();
    w.destroy();
  });
  await control.until((x) => x.lines.filter((l) => l.type === 'bookmark').length >= 2, 10_000, 'two bookmarks on an idle stream');
  t.same(w.lines, [], 'while waiting: nothing at all, not even the bookmarks an idle stream gets');
  await api.write(A1, 'f1', { namespace: 'fut' }, { data: { name: 'f1' } });
  await api.write(A1, 'f2', { namespace: 'fut' }, { data: { name: 'f2' } });
  t.same(w.lines, [], 'nothing until the revision is reached');
  const third = await api.write(A1, 'f3', { namespace: 'fut' }, { data: { name: 'f3' } });
  t.equal(Number(third.version), cur + 3, 'the third write made that revision');
  await w.until((x) => x.tail(0) !== undefined, 10_000, 'the tail');
  t.same(w.events.map(lineOf), [{ type: 'tail', revision: String(cur + 3), value: undefined }], 'tail at the awaited revision; the changes up to it are ones the watcher has');
  const fourth = await api.write(A1, 'f4', { namespace: 'fut' }, { data: { name: 'f4' } });
  await w.until((x) => x.events.length === 2, 10_000, 'the live change');
  t.same(w.events[1]?.value, fourth, 'then live events');
  await w.until((x) => x.lines.some((l) => l.type === 'bookmark'), 10_000, 'a bookmark once live and idle');
  t.equal(w.lines.find((l) => l.type === 'bookmark')?.revision, fourth.version, 'bookmarks resume once it waits no more');
});

t.test('at_tail: no initial state and no tail event; live events only', async (t) => {
  await api.write(A1, 'old', { namespace: 'tail' }, { data: { name: 'existing' } });
  const w = await HttpWatch.open(api.base, [{ type: A1, namespace: 'tail', at_tail: true }]);
  t.teardown(() => w.destroy());
  await w.until((x) => x.lines.some((l) => l.type === 'bookmark'), 10_000, 'a bookmark (the stream is open and idle)');
  t.same(w.events, [], 'the existing resource is not sent, and there is no tail');
  const a = await api.write(A1, 'new', { namespace: 'tail' }, { data: { name: 'new' } });
  const b = await api.del(A1, 'old', { namespace: 'tail' });
  await w.until((x) => x.events.length === 2, 10_000, 'two live events');
  t.same(w.events.map((l) => [l.type, l.value?.id.name, l.revision]), [
    ['change', 'new', a.version],
    ['delete', 'old', String(Number(a.version) + 1)],
  ]);
  t.equal(b.deleted, true);
});

t.test('bookmarks: a quiet stream gets {"type":"bookmark","revision":N} at the current revision, past changes it does not watch', async (t) => {
  const w = await HttpWatch.open(api.base, [{ type: A1, namespace: 'bm' }, { type: A1, namespace: 'bm2', at_tail: true }]);
  t.teardown(() => w.destroy());
  const t0 = Date.now();
  await w.until((x) => x.lines.some((l) => l.type === 'bookmark'), 10_000, 'a bookmark');
  const waited = Date.now() - t0;
  const bm = w.lines.find((l) => l.type === 'bookmark') as WatchLine;
  t.same(Object.keys(bm).sort(), ['revision', 'type'], 'a bookmark has just a type and a revision (no watch: it covers every watch)');
  t.equal(Number(bm.revision), pub().revision, 'at the current revision');
  t.equal(bm.revision, (await api.list(A1, { namespace: 'bm' })).revision, "the revision a List reports");
  t.ok(waited >= BOOKMARK_MS * 0.8, `not before the interval (${waited} ms)`);
  const other = await api.write(ALBUM, 'unwatched', { namespace: 'bm' }, { data: { title: 'x' } });
  await w.until((x) => x.lines.some((l) => l.type === 'bookmark' && Number(l.revision) >= Number(other.version)), 10_000, 'a later bookmark');
  t.same(w.events.map((l) => l.type), ['tail'], 'the unwatched change is not sent...');
  t.equal(w.lines.filter((l) => l.type === 'bookmark').at(-1)?.revision, other.version, '...but the bookmark moves past it');
});

t.test('a reader that stops reading is ended with SLOW_CONSUMER; writes and a fast watcher carry on with no gap; server memory stays bounded', async (t) => {
  const p = pub();
  // Every subscription the publisher hands out from here on, to watch their queues.
  const subs: Subscription[] = [];
  const subscribe = p.subscribe.bind(p);
  p.subscribe = (f, o) => {
    const s = subscribe(f, o);
    subs.push(s);
    return s;
  };
  t.teardown(() => {
    p.subscribe = subscribe;
  });
  let maxQueued = 0;
  const coord = main.coordinator();
  if (!coord) throw new Error('not running');
  // Called after the publisher's own listener (registered first), so it sees queues after each publish.
  const unsubscribe = coord.subscribe(() => {
    for (const s of subs) if (!s.ended) maxQueued = Math.max(maxQueued, s.queued);
  });
  t.teardown(unsubscribe);
  const heapBefore = heapUsedAfterGc();
  const slowWatches = 8;
  const slow = await HttpWatch.open(api.base, Array.from({ length: slowWatches }, () => ({ type: ALBUM, namespace: 'slow', at_tail: true })));
  slow.pause();
  const fast = await HttpWatch.open(api.base, [{ type: ALBUM, namespace: 'slow', at_tail: true }]);
  t.teardown(() => {
    slow.destroy();
    fast.destroy();
  });
  await until(() => subs.length === slowWatches + 1, 5000, 'the subscriptions');
  const endedBefore = p.slowConsumersEnded;
  const sessionsBefore = main.watches.activeSessions;
  const tracks = Array.from({ length: 16 }, (_, i) => `${'track'.padEnd(2000, String(i % 10))}`); // ~32 KB per version
  const versions: number[] = [];
  let n = 0;
  const writeOne = async (): Promise<void> => {
    const i = n++;
    const r = await api.write(ALBUM, `big${i % 50}`, { namespace: 'slow' }, { data: { title: `v${i}`, tracks } });
    versions.push(Number(r.version));
  };
  const started = Date.now();
  // The first of its watches to fall behind ends the whole stream (and releases the others'
  // subscriptions) at once, though its reader is stalled and never drains.
  while (p.slowConsumersEnded === endedBefore || subs.filter((s) => !s.ended).length > 1) {
    if (n > 1500) throw new Error(`no SLOW_CONSUMER after ${n} writes (slow stream got ${slow.bytes} bytes)`);
    await Promise.all([writeOne(), writeOne(), writeOne(), writeOne()]);
  }
  const blockedAfter = n;
  const heapAtEnd = heapUsedAfterGc();
  for (let i = 0; i < 20; i++) await writeOne(); // writes carry on after it
  const writeMs = Date.now() - started;
  versions.sort((a, b) => a - b);
  const lastVersion = versions[versions.length - 1] as number;
  await fast.until((x) => x.events.some((l) => Number(l.revision) >= lastVersion), 20_000, 'the fast watcher to see the last write');
  t.same(fast.events.map((l) => Number(l.revision)), versions, `the fast watcher got every one of the ${versions.length} writes, in order, with no gap`);
  t.notOk(fast.ended, 'and is still open');
  // Counted on this test's own subscriptions: an earlier test's may still be ending meanwhile.
  t.equal(subs.filter((s) => !s.ended).length, 1, 'the slow stream\'s subscriptions are gone from the publisher (its queues dropped); the fast one is left');
  t.equal(main.watches.activeSessions, sessionsBefore - 1, 'its session ended while the reader was still stalled (not held until it drains)');
  t.ok(maxQueued <= BUFFER + 1, `no subscription queue ever held more than the limit (max ${maxQueued}, limit ${BUFFER})`);
  const heapAfter = heapUsedAfterGc();
  slow.resume();
  await slow.until((x) => x.ended, 20_000, 'the slow stream to end');
  const err = slow.error;
  t.equal(err?.code, 'SLOW_CONSUMER', 'the paused reader, once it reads again, finds SLOW_CONSUMER at the end');
  t.equal(slow.lines.at(-1), err, 'as the last line');
  t.match(err?.message, /fell more than 200 events behind/);
  t.ok(err?.watch !== undefined && err.watch >= 0 && err.watch < slowWatches, 'naming one of its watches');
  t.ok(slow.bytes < 2 * 1024 * 1024 + BUFFER * 40_000, `the paused reader was handed a bounded amount (${slow.bytes} bytes: socket buffers, one write of at most ${256} KiB, its queue)`);
  let gaps = 0;
  let received = 0;
  for (let i = 0; i < slowWatches; i++) {
    const revs = slow.of(i).filter((l) => l.type === 'change').map((l) => Number(l.revision));
    received = Math.max(received, revs.length);
    if (JSON.stringify(revs) !== JSON.stringify(versions.slice(0, revs.length))) gaps++;
  }
  t.equal(gaps, 0, 'what the slow reader did get is a gap-free prefix of the writes, on every watch');
  t.ok(received < versions.length - BUFFER, `it fell behind by more than the limit (got ${received} of ${versions.length})`);
  // It resumes from its last revision and misses nothing.
  const lastSeen = slow.of(0).filter((l) => l.type === 'change').at(-1)?.revision ?? String(versions[0] as number - 1);
  const again = await HttpWatch.open(api.base, [{ type: ALBUM, namespace: 'slow', gt_revision: lastSeen }]);
  t.teardown(() => again.destroy());
  await again.until((x) => x.tail(0) !== undefined, 10_000, 'the resumed tail');
  t.same(initial(again, 0).map((l) => Number(l.revision)), versions.filter((v) => v > Number(lastSeen)), 'a resume from the last revision received gets the rest');
  t.comment(
    `slow consumer: ${blockedAfter} writes of ~32 KB (4 at a time) until the paused stream (${slowWatches} watches) was ended; ` +
      `${versions.length} writes in ${writeMs} ms; the paused reader then read ${received} events per watch (${(slow.bytes / 2 ** 20).toFixed(1)} MiB) and the error; ` +
      `max subscription queue ${maxQueued} events (limit ${BUFFER}); heap after GC: ${mib(heapBefore)} MiB before, ${mib(heapAtEnd)} MiB when it was ended, ` +
      `${mib(heapAfter)} MiB after ${versions.length - blockedAfter} more writes (agent and clients in this one process; window ${p.windowSize} events)`,
  );
});

t.test('100 concurrent streams watching the same type build the initial state once', async (t) => {
  await pool(8, Array.from({ length: 30 }, (_, i) => () => api.write(ALBUM, `h${i}`, { namespace: 'hundred' }, { data: { title: `h${i}` } })));
  const keepAlive = new http.Agent({ keepAlive: true, maxSockets: 200 });
  t.teardown(() => keepAlive.destroy());
  // Open the connections first, so the watches arrive together (the shared state lives ~1 s).
  await Promise.all(
    Array.from(
      { length: 100 },
      () =>
        new Promise<void>((resolve, reject) => {
          http.get(`${api.base}/v1/resources/${EXEC}`, { agent: keepAlive }, (res) => res.resume().on('end', () => resolve())).on('error', reject);
        }),
    ),
  );
  const p = pub();
  const builds = p.snapshotBuilds;
  const subs = p.subscribers;
  const t0 = Date.now();
  const ws = await Promise.all(Array.from({ length: 100 }, () => HttpWatch.open(api.base, [{ type: ALBUM, namespace: 'hundred' }], keepAlive)));
  const openMs = Date.now() - t0;
  t.teardown(() => ws.forEach((w) => w.destroy()));
  await Promise.all(ws.map((w) => w.until((x) => x.tail(0) !== undefined, 20_000, 'the tail')));
  t.equal(p.snapshotBuilds - builds, 1, `100 streams (opened in ${openMs} ms), one initial state built`);
  const first = JSON.stringify(initial(ws[0] as HttpWatch, 0));
  t.equal(initial(ws[0] as HttpWatch, 0).length, 30);
  t.ok(ws.every((w) => JSON.stringify(initial(w, 0)) === first), 'and every stream got the same initial state');
  t.equal(p.subscribers, subs + 100);
  const metrics = await (await fetch(`${api.base}/metrics`)).text();
  t.match(metrics, new RegExp(`cairn_watch_snapshot_builds ${p.snapshotBuilds}\\b`), 'the metric counts the builds');
  t.match(metrics, /cairn_watch_streams (\d+)/);
  t.ok(Number(/cairn_watch_streams (\d+)/.exec(metrics)?.[1]) >= 100, 'the open streams are counted');
  ws.forEach((w) => w.destroy());
  await until(() => p.subscribers === subs, 10_000, 'the subscriptions to be released');
});

t.test('read your watch: after an event at revision N from a follower, its stale and linearizable reads are at N or later', async (t) => {
  const own = new Agents(t);
  const nodes = await own.three();
  const leader = nodes.find((a) => a.coordinator()?.status().role === 'leader') as Agent;
  const follower = nodes.find((a) => a !== leader) as Agent;
  const lApi = new Http(leader);
  const fApi = new Http(follower);
  const w = await HttpWatch.open(fApi.base, [{ type: A1, namespace: 'ryw' }]);
  t.teardown(() => w.destroy());
  await w.until((x) => x.tail(0) !== undefined, 10_000, 'the tail');
  let bad = 0;
  for (let i = 0; i < 15; i++) {
    const wrote = await lApi.write(A1, `r${i % 3}`, { namespace: 'ryw' }, { data: { name: `r${i}` } });
    await w.until((x) => x.events.some((l) => l.revision === wrote.version), 10_000, `the event at ${wrote.version}`);
    const n = Number(wrote.version);
    const stale = await fApi.read(A1, `r${i % 3}`, { namespace: 'ryw', consistency: 'stale' });
    const lin = await fApi.read(A1, `r${i % 3}`, { namespace: 'ryw' });
    const list = await fApi.list(A1, { namespace: 'ryw', consistency: 'stale' });
    if (stale.revision < n || Number(stale.resource.version) < n || lin.revision < n || Number(lin.resource.version) < n || Number(list.revision) < n) {
      bad++;
      t.fail(`event at ${n}: stale read at ${stale.revision} (version ${stale.resource.version}), linearizable at ${lin.revision} (version ${lin.resource.version}), stale list at ${list.revision}`);
    }
  }
  t.equal(bad, 0, '15 writes through the leader: every read on the follower after its watch event is at least as new');
});

t.test('a snapshot restore ends every open watch with RESET; a new watch sees the restored state', async (t) => {
  const own = new Agents(t);
  const c = await own.dev({ watchBookmarkMs: BOOKMARK_MS });
  const cApi = new Http(c);
  await cApi.write(A1, 'keep1', { namespace: 'rs' }, { data: { name: 'keep1' } });
  await cApi.write(A1, 'keep2', { namespace: 'rs' }, { data: { name: 'keep2' } });
  const saved = Buffer.from(await (await fetch(`${cApi.base}/v1/snapshot`)).arrayBuffer());
  const savedList = await cApi.list(A1, { namespace: 'rs' });
  await cApi.write(A1, 'gone', { namespace: 'rs' }, { data: { name: 'gone' } });
  await cApi.del(A1, 'keep2', { namespace: 'rs' });
  const cur = pub(c).revision;
  const s1 = await HttpWatch.open(cApi.base, [{ type: A1, namespace: 'rs' }]);
  const s2 = await HttpWatch.open(cApi.base, [{ type: A1, namespace: '*', at_tail: true }, { type: ALBUM, namespace: '*' }]);
  const s3 = await HttpWatch.open(cApi.base, [{ type: A1, namespace: 'rs', gt_revision: String(cur + 100) }]);
  const all = [s1, s2, s3];
  t.teardown(() => all.forEach((w) => w.destroy()));
  await s1.until((x) => x.tail(0) !== undefined, 10_000, 'tail');
  await s2.until((x) => x.tail(1) !== undefined, 10_000, 'tail');
  t.equal(pub(c).subscribers, 4);
  const put = await fetch(`${cApi.base}/v1/snapshot`, { method: 'PUT', headers: { 'content-type': 'application/octet-stream' }, body: saved });
  t.equal(put.status, 200, 'restore accepted');
  const restored = (await put.json()) as { revision: string };
  for (const [i, w] of all.entries()) {
    await w.until((x) => x.ended, 10_000, `stream ${i} to end`);
    const e = w.lines.at(-1);
    t.equal(e?.type, 'error', `stream ${i} ends with an error event`);
    t.equal(e?.code, 'RESET', `stream ${i}: RESET`);
    t.equal(e?.revision, restored.revision, `stream ${i}: at the restore's revision`);
    t.ok((e?.message ?? '').length > 0);
  }
  t.equal(pub(c).subscribers, 0, 'no subscription is left');
  const fresh = await HttpWatch.open(cApi.base, [{ type: A1, namespace: 'rs' }]);
  t.teardown(() => fresh.destroy());
  await fresh.until((x) => x.tail(0) !== undefined, 10_000, 'the tail');
  t.same(initial(fresh, 0).map((l) => l.value), savedList.resources, 'a new watch sees exactly the saved state');
  t.ok(Number(fresh.tail(0)?.revision) >= Number(restored.revision), 'at or after the restore');
  const before = await HttpWatch.open(cApi.base, [{ type: A1, namespace: 'rs', gt_revision: String(Number(restored.revision) - 1) }]);
  await before.until((x) => x.ended, 10_000, 'the end');
  t.same(before.lines.map((l) => [l.type, l.code, l.revision]), [['error', 'COMPACTED', restored.revision]], 'history before the restore cannot be resumed');
  const at = await HttpWatch.open(cApi.base, [{ type: A1, namespace: 'rs', gt_revision: restored.revision }]);
  t.teardown(() => at.destroy());
  await at.until((x) => x.tail(0) !== undefined, 10_000, 'the tail');
  t.same(at.events.map((l) => l.type), ['tail'], 'a resume from the restore\'s revision has missed nothing');
});

t.test('agent shutdown ends open watches with an UNAVAILABLE error event and closes the streams', async (t) => {
  const own = new Agents(t);
  const d = await own.dev({ watchBookmarkMs: BOOKMARK_MS });
  const dApi = new Http(d);
  await dApi.write(A1, 'x', {}, { data: { name: 'x' } });
  const s1 = await HttpWatch.open(dApi.base, [{ type: A1 }]);
  const s2 = await HttpWatch.open(dApi.base, [{ type: A1, at_tail: true }, { type: A1, gt_revision: String(pub(d).revision + 50) }]);
  t.teardown(() => [s1, s2].forEach((w) => w.destroy()));
  await s1.until((x) => x.tail(0) !== undefined, 10_000, 'the tail');
  await s2.until((x) => x.lines.some((l) => l.type === 'bookmark') || pub(d).subscribers === 3, 10_000, 'the second stream to be open');
  // Whether the close reached the 2 s fallback is observed directly (closeAllConnections is what
  // the fallback calls): the close's duration also counts the replica and gRPC shutdown, which a
  // loaded machine can stretch past any bound without the fallback being involved.
  const closeAll = http.Server.prototype.closeAllConnections;
  let fallbacks = 0;
  http.Server.prototype.closeAllConnections = function (this: http.Server): void {
    fallbacks++;
    closeAll.call(this);
  };
  const t0 = Date.now();
  try {
    await own.close(d);
  } finally {
    http.Server.prototype.closeAllConnections = closeAll;
  }
  const closeMs = Date.now() - t0;
  for (const [i, w] of [s1, s2].entries()) {
    await w.until((x) => x.ended, 10_000, `stream ${i} to close`);
    const e = w.lines.at(-1);
    t.equal(e?.type, 'error', `stream ${i} ends with an error event`);
    t.equal(e?.code, 'UNAVAILABLE', `stream ${i}: UNAVAILABLE (resume on another node)`);
  }
  // Without the agent closing connections as the streams end, a keep-alive connection would
  // hold the close until the 2 s fallback (closeAllConnections).
  t.equal(fallbacks, 0, `the close does not wait for the 2 s fallback (closeAllConnections called ${fallbacks} times; the close took ${closeMs} ms)`);
  t.comment(`agent close with two open watch streams took ${closeMs} ms`);
});

/** A POST /v1/watch expected to be refused before any stream starts. */
async function refused(t: Test, body: string, what: string, opts: { query?: string; status?: number; code?: string } = {}): Promise<Record<string, unknown>> {
  const res = await fetch(`${api.base}/v1/watch${opts.query ?? ''}`, { method: 'POST', body, headers: { 'content-type': 'application/json' } });
  const text = await res.text();
  t.equal(res.status, opts.status ?? 400, `${what}: HTTP ${opts.status ?? 400}`);
  t.match(res.headers.get('content-type') ?? '', /^application\/json(;|$)/, `${what}: a JSON answer, not a stream`);
  let parsed: { error?: Record<string, unknown> } = {};
  try {
    parsed = JSON.parse(text) as { error?: Record<string, unknown> };
  } catch {
    t.fail(`${what}: not one JSON document: ${text.slice(0, 200)}`);
  }
  t.equal(parsed.error?.['code'], opts.code ?? 'INVALID_ARGUMENT', `${what}: ${opts.code ?? 'INVALID_ARGUMENT'} (${String(parsed.error?.['message'])})`);
  t.ok(typeof parsed.error?.['message'] === 'string' && (parsed.error['message'] as string).length > 0, `${what}: with a message`);
  return parsed.error ?? {};
}

t.test('bad requests are refused with 400 INVALID_ARGUMENT before the stream starts; the node keeps serving', async (t) => {
  const p = pub();
  const subs = p.subscribers;
  const sessions = main.watches.activeSessions;
  const j = (v: unknown): string => JSON.stringify(v);
  await refused(t, j({ type: A1 }), 'an object, not an array');
  await refused(t, j('demo.v1.Artist'), 'a string');
  await refused(t, 'null', 'null');
  await refused(t, '[{"type":', 'not JSON');
  await refused(t, '', 'no body');
  await refused(t, j([]), 'an empty array');
  await refused(t, j(Array.from({ length: 65 }, () => ({ type: A1 }))), '65 watches');
  await refused(t, j([1]), 'a watch that is not an object');
  await refused(t, j([{}]), 'a watch without a type');
  await refused(t, j([{ type: A1, bogus: true }]), 'an unknown field');
  await refused(t, j([{ type: A1, gtRevision: '1' }]), 'a camelCase field (the HTTP API is snake_case)');
  await refused(t, j([{ type: 'demo.v9.Artist' }]), 'an unknown group version');
  await refused(t, j([{ type: 'demo.Nothing' }]), 'an unknown kind');
  await refused(t, j([{ type: 'not a type' }]), 'a malformed type');
  await refused(t, j([{ type: 42 }]), 'a type that is not a string');
  await refused(t, j([{ type: A1, namespace: 'Bad_NS' }]), 'a bad namespace');
  await refused(t, j([{ type: A1, partition: 'a*' }]), 'a wildcard that is not "*"');
  await refused(t, j([{ type: EXEC, namespace: 'x' }]), 'a namespace for a cluster-scoped type');
  await refused(t, j([{ type: LABEL, namespace: 'x' }]), 'a namespace for a partition-scoped type');
  await refused(t, j([{ type: A1, name_prefix: 'BAD' }]), 'a name prefix that is not a DNS-label prefix');
  await refused(t, j([{ type: A1, gt_revision: 'abc' }]), 'gt_revision "abc"');
  await refused(t, j([{ type: A1, gt_revision: '-1' }]), 'gt_revision "-1"');
  await refused(t, j([{ type: A1, gt_revision: '1.5' }]), 'gt_revision "1.5"');
  await refused(t, j([{ type: A1, gt_revision: 5 }]), 'gt_revision as a JSON number');
  await refused(t, j([{ type: A1, at_tail: 'yes' }]), 'at_tail not a boolean');
  const e = await refused(t, j([{ type: A1 }, { type: A1, gt_revision: 'abc' }]), 'the second watch is bad');
  t.equal(e['watch'], 1, 'the error names the watch');
  await refused(t, j([{ type: A1 }]), 'a query parameter', { query: '?gt_revision=1' });
  await refused(t, j([{ type: A1 }]), 'a query parameter (unknown)', { query: '?watch=1' });
  await refused(t, j([{ type: A1, name_prefix: 'x'.repeat(1024 * 1024) }]), 'a body over 1 MiB', { status: 413, code: 'TOO_LARGE' });
  t.equal(p.subscribers, subs, 'no subscription was made');
  t.equal(main.watches.activeSessions, sessions, 'no session was opened');
  const w = await HttpWatch.open(api.base, [{ type: A1, namespace: 'init' }]);
  t.teardown(() => w.destroy());
  await w.until((x) => x.tail(0) !== undefined, 10_000, 'the tail');
  t.ok(w.events.length > 1, 'the node still serves watches');
});

t.test('a client that hangs up mid-stream releases its subscriptions', async (t) => {
  const p = pub();
  // The streams of earlier cases were destroyed in their teardowns; their release is asynchronous.
  await until(() => p.subscribers === 0 && main.watches.activeSessions === 0, 10_000, 'no open stream', () => `${p.subscribers} subscribers`);
  const subs = p.subscribers;
  const sessions = main.watches.activeSessions;
  const w = await HttpWatch.open(api.base, [{ type: A1, namespace: '*' }, { type: ALBUM, namespace: '*', at_tail: true }, { type: A1, gt_revision: String(p.revision + 1000) }]);
  await w.until((x) => x.tail(0) !== undefined, 10_000, 'the tail');
  t.equal(p.subscribers, subs + 3, 'three subscriptions while it is open');
  t.equal(main.watches.activeSessions, sessions + 1);
  const writing = pool(2, Array.from({ length: 20 }, (_, i) => () => api.write(A1, `hang${i}`, { namespace: 'hang' }, { data: { name: `h${i}` } })));
  await w.until((x) => live(x, 0).length >= 3, 10_000, 'some live events');
  w.destroy();
  await until(() => p.subscribers === subs && main.watches.activeSessions === sessions, 10_000, 'the subscriptions to be released', () => `${p.subscribers} subscribers`);
  await writing;
  t.pass('released while writes went on');
  // A hang-up before any event (waiting for a future revision) releases it too.
  const waiting = await HttpWatch.open(api.base, [{ type: A1, gt_revision: String(p.revision + 1000) }]);
  await until(() => p.subscribers === subs + 1, 10_000, 'the waiting subscription');
  waiting.destroy();
  await until(() => p.subscribers === subs, 10_000, 'the waiting subscription to be released');
  t.pass('a waiting watch is released too');
});
