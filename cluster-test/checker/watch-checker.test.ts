import t from 'tap';
import fc from 'fast-check';
import {
  HistoryIndex,
  checkAcknowledged,
  checkHistoryAgainstList,
  checkWatcher,
  checkWatchers,
  formatWatchAnomaly,
  historyFromReferences,
  identity,
  type CommittedChange,
  type CommittedHistory,
  type JsonValue,
  type ListSnapshot,
  type ReceivedEvent,
  type WatchAnomalyKind,
  type WatchCheckResult,
  type WatchConnection,
  type WatcherRecord,
  type WatchFilterSpec,
  type WatchKey,
} from './watch-checker.js';

const ARTIST = 'demo.v1.Artist';
const ALBUM = 'demo.v1.Album';

function key(name: string, namespace = 'a', type = ARTIST): WatchKey {
  return { type, partition: 'default', namespace, name };
}

function filter(type: string, namespace = '*', namePrefix?: string): WatchFilterSpec {
  return { type, partition: 'default', namespace, ...(namePrefix !== undefined ? { namePrefix } : {}) };
}

const upsert = (revision: number, k: WatchKey, v: string): CommittedChange => ({ revision, kind: 'upsert', key: k, value: { uid: `${k.name}-uid`, data: v } });
const del = (revision: number, k: WatchKey, last: string): CommittedChange => ({ revision, kind: 'delete', key: k, value: { uid: `${k.name}-uid`, data: last } });

/**
 * A small history: red-1 and blue-1 in namespace a, red-2 in namespace b, an album; red-1 is
 * updated twice, blue-1 deleted, and entry 9 deletes two resources at once (a cascade).
 */
const H: CommittedHistory = {
  start: { revision: 2, resources: [{ key: key('red-1'), revision: 2, value: { uid: 'red-1-uid', data: 'r1' } }] },
  changes: [
    upsert(3, key('blue-1'), 'b1'),
    upsert(4, key('red-2', 'b'), 'r2'),
    upsert(5, key('red-1'), 'r1b'),
    upsert(6, key('album-1', 'a', ALBUM), 'al'),
    del(7, key('blue-1'), 'b1'),
    upsert(8, key('red-1'), 'r1c'),
    del(9, key('red-1'), 'r1c'),
    del(9, key('red-2', 'b'), 'r2'),
    upsert(11, key('blue-1'), 'b1-again'),
    upsert(12, key('red-3', 'b'), 'r3'),
  ],
  completeThrough: 13,
};

/** The List after the last write: what the history's state is at 13. */
function finalList(h: CommittedHistory, revision = h.completeThrough): ListSnapshot {
  return { revision, resources: [...new HistoryIndex(h).stateAt(revision, undefined).values()] };
}

interface Scheme {
  readonly id?: string;
  readonly filter: WatchFilterSpec;
  /** 'initial': initial state at `startAt` then tail; 'at-tail': live from `startAt`. */
  readonly mode: 'initial' | 'at-tail';
  readonly startAt: number;
  /** The connection is cut after the events up to each of these revisions; the next resumes. */
  readonly cuts?: readonly number[];
  /** Resume this many revisions before the last one received (a deliberate re-delivery). */
  readonly resumeEarlierBy?: number;
  /** Nodes, round-robin over connections (for reports only). */
  readonly nodes?: readonly string[];
  /** At-tail connections say where they started at the latest (`notAfter`). */
  readonly knownStart?: boolean;
}

/** What a correct server sends for `s`, over the history `h`, ending with a bookmark at its end. */
function correctWatcher(h: CommittedHistory, s: Scheme): WatcherRecord {
  const idx = new HistoryIndex(h);
  const live = idx.changesIn(s.startAt, h.completeThrough, s.filter);
  const ev = (c: (typeof live)[number]): ReceivedEvent => ({ type: c.kind === 'delete' ? 'delete' : 'change', revision: c.revision, key: c.key, value: c.value ?? null });
  const connections: WatchConnection[] = [];
  const node = (i: number): { node?: string } => (s.nodes && s.nodes.length > 0 ? { node: s.nodes[i % s.nodes.length] as string } : {});
  let events: ReceivedEvent[] = [];
  if (s.mode === 'initial') {
    const snap = [...idx.stateAt(s.startAt, s.filter).values()].sort((a, b) => (identity(a.key) < identity(b.key) ? -1 : 1));
    events.push(...snap.map((e): ReceivedEvent => ({ type: 'change', revision: e.revision, key: e.key, value: e.value })), { type: 'tail', revision: s.startAt });
  }
  const atTail = (at: number): WatchConnection['from'] => (s.knownStart === true ? { kind: 'at-tail', notAfter: at } : { kind: 'at-tail' });
  let from: WatchConnection['from'] = s.mode === 'initial' ? { kind: 'initial' } : atTail(s.startAt);
  let lastCovered = s.startAt;
  const cuts = [...(s.cuts ?? [])].sort((a, b) => a - b);
  let i = 0;
  for (const cut of cuts) {
    for (; i < live.length && (live[i] as (typeof live)[number]).revision <= cut; i++) {
      events.push(ev(live[i] as (typeof live)[number]));
      lastCovered = (live[i] as (typeof live)[number]).revision;
    }
    connections.push({ from, ...node(connections.length), events });
    // An at-tail watcher that saw nothing has no resume point: it starts at tail again.
    const resumable = s.mode === 'initial' || connections.some((c) => c.events.length > 0);
    const g = Math.max(s.startAt, lastCovered - (s.resumeEarlierBy ?? 0));
    from = resumable ? { kind: 'resume', gtRevision: g } : atTail(cut);
    events = [];
    if (resumable && g < lastCovered) {
      // The server re-sends what follows the resume point.
      for (const c of live) if (c.revision > g && c.revision <= lastCovered) events.push(ev(c));
    }
  }
  for (; i < live.length; i++) events.push(ev(live[i] as (typeof live)[number]));
  events.push({ type: 'bookmark', revision: h.completeThrough });
  connections.push({ from, ...node(connections.length), events });
  return { id: s.id ?? 'w', filter: s.filter, connections };
}

function kinds(r: WatchCheckResult): WatchAnomalyKind[] {
  return r.anomalies.map((a) => a.kind);
}

function show(r: WatchCheckResult): string {
  return r.anomalies.map(formatWatchAnomaly).join('\n');
}

/** A copy of the watcher with connection `ci`'s events replaced by `f(events)`. */
function mutate(w: WatcherRecord, ci: number, f: (events: ReceivedEvent[]) => ReceivedEvent[]): WatcherRecord {
  return { ...w, connections: w.connections.map((c, i) => (i === ci ? { ...c, events: f([...c.events]) } : c)) };
}

function indexOf(events: readonly ReceivedEvent[], revision: number, name?: string): number {
  const i = events.findIndex((e) => (e.type === 'change' || e.type === 'delete') && e.revision === revision && (name === undefined || e.key.name === name));
  if (i < 0) throw new Error(`no event at ${revision}`);
  return i;
}

// ---- Correct streams pass --------------------------------------------------------------------

t.test('correct streams pass: initial state, resumes on other nodes, re-delivery, at-tail, filters', async (t) => {
  const schemes: Scheme[] = [
    { filter: filter(ARTIST), mode: 'initial', startAt: 2 },
    { filter: filter(ARTIST), mode: 'initial', startAt: 6, cuts: [7, 9], nodes: ['n1', 'n2', 'n3'] },
    { filter: filter(ARTIST, 'a'), mode: 'initial', startAt: 4, cuts: [8], resumeEarlierBy: 3 },
    { filter: filter(ARTIST, '*', 'red-'), mode: 'initial', startAt: 3, cuts: [5, 5, 12] },
    { filter: filter('demo.Artist', 'b'), mode: 'at-tail', startAt: 3, cuts: [4] },
    { filter: filter(ALBUM), mode: 'initial', startAt: 2, cuts: [3] },
    { filter: filter(ALBUM), mode: 'at-tail', startAt: 8 },
  ];
  for (const s of schemes) {
    const w = correctWatcher(H, s);
    const r = checkWatcher(H, w, { finalList: finalList(H) });
    t.ok(r.valid, `${JSON.stringify(s)}\n${show(r)}`);
    t.equal(r.coveredThrough, 13);
    t.equal(r.resumes, w.connections.filter((c) => c.from.kind === 'resume').length);
  }
  const w = correctWatcher(H, { filter: filter(ARTIST), mode: 'initial', startAt: 2, cuts: [8] });
  t.equal(checkWatcher(H, w).eventsChecked, 9 + 1, 'every change event is compared (9 live, 1 in the initial state)');
});

t.test('a cascade: several events at one revision, for different keys, in either order', async (t) => {
  const w = correctWatcher(H, { filter: filter(ARTIST), mode: 'initial', startAt: 8 });
  const swapped = mutate(w, 0, (ev) => {
    const i = indexOf(ev, 9, 'red-1');
    const j = indexOf(ev, 9, 'red-2');
    [ev[i], ev[j]] = [ev[j] as ReceivedEvent, ev[i] as ReceivedEvent];
    return ev;
  });
  t.ok(checkWatcher(H, swapped, { finalList: finalList(H) }).valid);
});

// ---- Planted bugs are caught -----------------------------------------------------------------

t.test('PLANTED: one skipped event is reported as missing, with its neighbours', async (t) => {
  const w = correctWatcher(H, { filter: filter(ARTIST), mode: 'initial', startAt: 2, cuts: [7] });
  const bad = mutate(w, 1, (ev) => ev.filter((_, i) => i !== indexOf(ev, 8)));
  const r = checkWatcher(H, bad, { finalList: finalList(H) });
  t.notOk(r.valid);
  const missing = r.anomalies.filter((a) => a.kind === 'missing');
  t.equal(missing.length, 1, show(r));
  t.match(missing[0], { connection: 1, revision: 8, key: `${ARTIST}/default/a/red-1` });
  t.match(missing[0]?.message, /upsert of demo\.v1\.Artist\/default\/a\/red-1 at 8 never arrived \(received nothing then 9 /);
});

t.test('PLANTED: a skipped event in the initial state (a key left out) is an initial-state anomaly', async (t) => {
  const w = correctWatcher(H, { filter: filter(ARTIST), mode: 'initial', startAt: 5 });
  const bad = mutate(w, 0, (ev) => ev.filter((_, i) => i !== indexOf(ev, 3)));
  const r = checkWatcher(H, bad);
  t.same(kinds(r), ['initial-state'], show(r));
  t.match(r.anomalies[0]?.message, /blue-1 absent, committed at 3/);
});

t.test('PLANTED: a duplicated event is reported as a duplicate (same connection and after a resume)', async (t) => {
  const w = correctWatcher(H, { filter: filter(ARTIST), mode: 'initial', startAt: 2, cuts: [8] });
  const same = mutate(w, 0, (ev) => {
    const i = indexOf(ev, 5);
    ev.splice(i + 1, 0, ev[i] as ReceivedEvent);
    return ev;
  });
  let r = checkWatcher(H, same, { finalList: finalList(H) });
  t.same(kinds(r), ['duplicate'], show(r));
  t.match(r.anomalies[0], { revision: 5, connection: 0, event: indexOf(w.connections[0]?.events ?? [], 5) + 1 });
  // The resumed connection (after 8) gets revision 8 again: the server re-sent what the watcher had.
  const again = mutate(w, 1, (ev) => [w.connections[0]?.events[indexOf(w.connections[0].events, 8)] as ReceivedEvent, ...ev]);
  r = checkWatcher(H, again, { finalList: finalList(H) });
  t.same(kinds(r), ['duplicate'], show(r));
  t.match(r.anomalies[0]?.message, /at 8, at or before the start point 8, already received \(connection 0, event #\d+\)/);
});

t.test('PLANTED: two swapped events are reported as out of order', async (t) => {
  const w = correctWatcher(H, { filter: filter(ARTIST), mode: 'initial', startAt: 2 });
  const bad = mutate(w, 0, (ev) => {
    const i = indexOf(ev, 4);
    const j = indexOf(ev, 5);
    [ev[i], ev[j]] = [ev[j] as ReceivedEvent, ev[i] as ReceivedEvent];
    return ev;
  });
  const r = checkWatcher(H, bad, { finalList: finalList(H) });
  t.same(kinds(r), ['out-of-order'], show(r));
  t.match(r.anomalies[0], { revision: 4, key: `${ARTIST}/default/b/red-2` });
  t.match(r.anomalies[0]?.message, /at 4 arrived after a change at 5/);
});

t.test('PLANTED: a wrong value is reported with both values', async (t) => {
  const w = correctWatcher(H, { filter: filter(ARTIST), mode: 'initial', startAt: 2 });
  const bad = mutate(w, 0, (ev) => ev.map((e) => (e.type === 'change' && e.revision === 8 ? { ...e, value: { uid: 'red-1-uid', data: 'r1b' } } : e)));
  const r = checkWatcher(H, bad);
  t.same(kinds(r), ['wrong-value'], show(r));
  t.match(r.anomalies[0]?.message, /at 8 carries \{"data":"r1b","uid":"red-1-uid"\}, committed \{"data":"r1c","uid":"red-1-uid"\}/);
  // The final state the watcher built is wrong too only if the value stuck: here 9 deletes red-1.
});

t.test('PLANTED: a stale initial state is reported (an old version, and a deleted resource still there)', async (t) => {
  const w = correctWatcher(H, { filter: filter(ARTIST), mode: 'initial', startAt: 6 });
  // red-1 as of revision 2 instead of 5: a snapshot older than its tail.
  const tail = w.connections[0]?.events.findIndex((e) => e.type === 'tail') ?? -1;
  const old = mutate(w, 0, (ev) => ev.map((e, i) => (i < tail && e.type === 'change' && e.key.name === 'red-1' ? { ...e, revision: 2, value: { uid: 'red-1-uid', data: 'r1' } } : e)));
  let r = checkWatcher(H, old);
  t.same(kinds(r), ['initial-state'], show(r));
  t.match(r.anomalies[0]?.message, /the initial state differs from the committed state at its tail 6: demo\.v1\.Artist\/default\/a\/red-1 at 2, committed at 5/);
  // Tail at 7 (blue-1 deleted at 7), but the snapshot still has blue-1.
  const w7 = correctWatcher(H, { filter: filter(ARTIST), mode: 'initial', startAt: 7 });
  const ghost = mutate(w7, 0, (ev) => [{ type: 'change', revision: 3, key: key('blue-1'), value: { uid: 'blue-1-uid', data: 'b1' } }, ...ev]);
  r = checkWatcher(H, ghost);
  t.same(kinds(r), ['initial-state'], show(r));
  t.match(r.anomalies[0]?.message, /blue-1 present at 3, committed absent/);
});

t.test('PLANTED: other faults each get their own kind', async (t) => {
  const w = correctWatcher(H, { filter: filter(ARTIST, 'a'), mode: 'initial', startAt: 2, cuts: [5] });
  const cases: Array<{ what: string; bad: WatcherRecord; want: WatchAnomalyKind; list?: ListSnapshot }> = [
    {
      what: 'an event outside the filter (namespace b)',
      bad: mutate(w, 1, (ev) => [...ev.slice(0, -1), { type: 'change', revision: 12, key: key('red-3', 'b'), value: { uid: 'red-3-uid', data: 'r3' } }, ...ev.slice(-1)]),
      want: 'outside-filter',
    },
    {
      what: 'a change never committed at that revision',
      bad: mutate(w, 1, (ev) => {
        ev.splice(indexOf(ev, 11), 0, { type: 'change', revision: 10, key: key('red-1'), value: null });
        return ev;
      }),
      want: 'phantom',
    },
    {
      what: 'a delete sent as a change',
      bad: mutate(w, 1, (ev) => ev.map((e) => (e.type === 'delete' && e.revision === 7 ? { ...e, type: 'change' as const } : e))),
      want: 'wrong-kind',
    },
    {
      what: 'a resume after a revision the watcher never reached',
      bad: { ...w, connections: w.connections.map((c, i) => (i === 1 ? { ...c, from: { kind: 'resume' as const, gtRevision: 7 }, events: c.events.filter((e) => e.revision === undefined || e.revision > 7) } : c)) },
      want: 'resume-gap',
    },
    {
      what: 'an event at or before the resume point, never received before (red-1 at 2 came in the initial state)',
      bad: mutate(w, 1, (ev) => [{ type: 'change', revision: 2, key: key('red-1'), value: { uid: 'red-1-uid', data: 'r1' } }, ...ev]),
      want: 'before-start',
    },
    {
      what: 'a change after a bookmark at or above it',
      bad: mutate(w, 1, (ev) => [{ type: 'bookmark', revision: 9 }, ...ev]),
      want: 'out-of-order',
    },
    {
      what: 'a stream that stops short of the final List',
      bad: mutate(w, 1, (ev) => ev.filter((e) => e.type !== 'bookmark' && (e.revision ?? 0) <= 8)),
      want: 'short',
      list: finalList(H),
    },
    {
      what: 'a final List that disagrees with what the stream built',
      bad: w,
      want: 'final-state',
      list: { revision: 13, resources: finalList(H).resources.filter((r) => r.key.name !== 'blue-1') },
    },
    {
      what: 'an event beyond the history',
      bad: mutate(w, 1, (ev) => [...ev, { type: 'change', revision: 14, key: key('red-9'), value: null }]),
      want: 'beyond-history',
    },
    {
      what: 'a second tail',
      bad: mutate(w, 0, (ev) => [...ev, { type: 'tail', revision: 5 }]),
      want: 'malformed',
    },
  ];
  for (const c of cases) {
    const r = checkWatcher(H, c.bad, c.list ? { finalList: c.list } : {});
    t.same([...new Set(kinds(r))], [c.want], `${c.what}:\n${show(r)}`);
  }
  t.ok(checkWatcher(H, w, { finalList: finalList(H) }).valid, 'the unmutated stream passes');
});

t.test('an at-tail watch vouches from its first event, or from where it is known to have started', async (t) => {
  const w = correctWatcher(H, { filter: filter(ARTIST), mode: 'at-tail', startAt: 6 });
  const skipFirst = (x: WatcherRecord): WatcherRecord => mutate(x, 0, (ev) => ev.slice(1));
  t.equal(w.connections[0]?.events[0]?.revision, 7);
  t.ok(checkWatcher(H, skipFirst(w), { finalList: finalList(H) }).valid, 'undetectable without a known start: it may have started after 7');
  const known = correctWatcher(H, { filter: filter(ARTIST), mode: 'at-tail', startAt: 6, knownStart: true });
  t.ok(checkWatcher(H, known, { finalList: finalList(H) }).valid);
  const r = checkWatcher(H, skipFirst(known));
  t.same(kinds(r), ['missing'], show(r));
  t.equal(r.anomalies[0]?.revision, 7);
  // Started earlier than it says it knows: events at or before notAfter are fine.
  const early = correctWatcher(H, { filter: filter(ARTIST), mode: 'at-tail', startAt: 4 });
  const withHint: WatcherRecord = { ...early, connections: early.connections.map((c) => ({ ...c, from: { kind: 'at-tail', notAfter: 8 } })) };
  t.ok(checkWatcher(H, withHint, { finalList: finalList(H) }).valid);
});

t.test('errors end a connection: counted, and events after one are malformed', async (t) => {
  const w = correctWatcher(H, { filter: filter(ARTIST), mode: 'initial', startAt: 2, cuts: [6] });
  const ended = mutate(w, 0, (ev) => [...ev, { type: 'error', code: 'SLOW_CONSUMER', revision: 6 }]);
  const r = checkWatcher(H, ended, { finalList: finalList(H) });
  t.ok(r.valid, show(r));
  t.same(r.errors, { SLOW_CONSUMER: 1 });
  const after = mutate(ended, 0, (ev) => [...ev, { type: 'bookmark', revision: 6 }]);
  t.same(kinds(checkWatcher(H, after)), ['malformed']);
});

t.test('an initial state cut before its tail teaches nothing; the re-list replaces the state', async (t) => {
  const full = correctWatcher(H, { filter: filter(ARTIST), mode: 'initial', startAt: 5 });
  const cut: WatchConnection = { from: { kind: 'initial' }, events: (full.connections[0]?.events ?? []).slice(0, 1) };
  const w: WatcherRecord = { ...full, connections: [cut, ...full.connections] };
  const r = checkWatcher(H, w, { finalList: finalList(H) });
  t.ok(r.valid, show(r));
  // Resuming from the cut initial state is a gap: the watcher had no start point.
  const resumed: WatcherRecord = { ...full, connections: [cut, { from: { kind: 'resume', gtRevision: 5 }, events: full.connections[0]?.events.filter((e) => e.revision !== undefined && e.revision > 5) ?? [] }] };
  t.same(kinds(checkWatcher(H, resumed)), ['resume-gap']);
});

// ---- Property: every correct stream passes, every planted bug is caught --------------------------

const NAMES = ['red-1', 'red-2', 'blue-1', 'blue-2'];
const FILTERS: WatchFilterSpec[] = [filter(ARTIST), filter(ARTIST, 'a'), filter(ARTIST, 'b', 'red-'), filter(ARTIST, '*', 'blue-'), filter('demo.Artist'), filter(ALBUM)];

/** A random history: each entry writes or deletes one or two keys of two types in two namespaces. */
const historyArb = fc
  .array(
    fc.record({ k: fc.integer({ min: 0, max: 11 }), del: fc.boolean(), cascade: fc.integer({ min: 0, max: 9 }), gap: fc.integer({ min: 1, max: 3 }) }),
    { minLength: 5, maxLength: 40 },
  )
  .map((ops): CommittedHistory => {
    const keyOf = (k: number): WatchKey => key(NAMES[k % 4] as string, k % 8 < 4 ? 'a' : 'b', k < 8 ? (k % 2 === 0 ? ARTIST : 'demo.v2.Artist') : ALBUM);
    const state = new Map<string, { key: WatchKey; value: JsonValue }>();
    const changes: CommittedChange[] = [];
    let rev = 1;
    let seq = 0;
    for (const op of ops) {
      rev += op.gap;
      const targets = op.cascade === 0 ? [op.k, (op.k + 1) % 12] : [op.k];
      for (const k of targets) {
        const kk = keyOf(k);
        const id = identity(kk);
        const cur = state.get(id);
        if (op.del && cur) {
          changes.push({ revision: rev, kind: 'delete', key: cur.key, value: cur.value });
          state.delete(id);
        } else if (!op.del) {
          const value = { uid: `${id}@${rev}`, seq: seq++ };
          changes.push({ revision: rev, kind: 'upsert', key: kk, value });
          state.set(id, { key: kk, value });
        }
      }
    }
    return { start: { revision: 1, resources: [] }, changes, completeThrough: rev + 1 };
  });

const schemeArb = fc.record({
  f: fc.integer({ min: 0, max: FILTERS.length - 1 }),
  mode: fc.constantFrom<'initial' | 'at-tail'>('initial', 'initial', 'at-tail'),
  // Integers scaled to [0, 1): fast-check's doubles lean to the ends.
  start: fc.integer({ min: 0, max: 999 }).map((x) => x / 1000),
  cuts: fc.array(fc.integer({ min: 0, max: 999 }).map((x) => x / 1000), { maxLength: 3 }),
  earlier: fc.constantFrom(0, 0, 1, 3),
  known: fc.boolean(),
});

function schemeFor(h: CommittedHistory, s: { f: number; mode: 'initial' | 'at-tail'; start: number; cuts: number[]; earlier: number; known: boolean }): Scheme {
  const span = h.completeThrough - 1;
  const startAt = 1 + Math.floor(s.start * span);
  return {
    filter: FILTERS[s.f] as WatchFilterSpec,
    mode: s.mode,
    startAt,
    cuts: s.cuts.map((c) => startAt + Math.floor(c * (h.completeThrough - startAt))),
    resumeEarlierBy: s.earlier,
    nodes: ['n1', 'n2', 'n3'],
    knownStart: s.known,
  };
}

t.test('property: a correct stream always passes, with the final List', async (t) => {
  let runs = 0;
  fc.assert(
    fc.property(historyArb, schemeArb, (h, s) => {
      runs++;
      const w = correctWatcher(h, schemeFor(h, s));
      const r = checkWatcher(h, w, { finalList: finalList(h) });
      if (!r.valid) throw new Error(show(r));
    }),
    { numRuns: 500, seed: 1 },
  );
  t.equal(runs, 500);
});

type Planted = 'skip' | 'duplicate' | 'swap' | 'wrong-value' | 'stale-initial';
const EXPECTED: Record<Planted, readonly WatchAnomalyKind[]> = {
  // A skipped last event of a cut connection leaves the next resume point beyond what the watcher covered.
  skip: ['missing', 'resume-gap'],
  duplicate: ['duplicate'],
  swap: ['out-of-order'],
  'wrong-value': ['wrong-value'],
  'stale-initial': ['initial-state'],
};

/** Plants `bug` in a copy of `w` at a spot picked by `pick` in [0,1); undefined when there is no such spot. */
function plant(h: CommittedHistory, w: WatcherRecord, bug: Planted, pick: number): WatcherRecord | undefined {
  const spots: Array<{ ci: number; ei: number }> = [];
  w.connections.forEach((c, ci) => {
    const tail = c.from.kind === 'initial' ? c.events.findIndex((e) => e.type === 'tail') : -1;
    c.events.forEach((e, ei) => {
      if (e.type !== 'change' && e.type !== 'delete') return;
      const live = ei > tail;
      // An at-tail watch that does not know where it started cannot tell its first event was skipped.
      if (bug === 'skip' && ei === 0 && c.from.kind === 'at-tail' && c.from.notAfter === undefined) return;
      // Nor is a skip one when a later resume (from further back) delivers the event again.
      if (bug === 'skip' && w.connections.slice(ci + 1).some((l) => l.events.some((x) => x.type === e.type && x.revision === e.revision && identity(x.key) === identity(e.key)))) return;
      if (bug === 'stale-initial' ? !live : live) spots.push({ ci, ei });
    });
  });
  if (bug === 'swap') {
    // Adjacent live changes of different revisions.
    const pairs = spots.filter((s) => {
      const a = w.connections[s.ci]?.events[s.ei];
      const b = w.connections[s.ci]?.events[s.ei + 1];
      return a && b && (b.type === 'change' || b.type === 'delete') && b.revision !== a.revision;
    });
    const s = pairs[Math.floor(pick * pairs.length)];
    if (!s) return undefined;
    return mutate(w, s.ci, (ev) => {
      [ev[s.ei], ev[s.ei + 1]] = [ev[s.ei + 1] as ReceivedEvent, ev[s.ei] as ReceivedEvent];
      return ev;
    });
  }
  if (bug === 'stale-initial') {
    // Replace a resource of the initial state by an older committed version of it.
    const idx = new HistoryIndex(h);
    for (let k = 0; k < spots.length; k++) {
      const s = spots[(Math.floor(pick * spots.length) + k) % spots.length] as { ci: number; ei: number };
      const e = w.connections[s.ci]?.events[s.ei] as Extract<ReceivedEvent, { key: WatchKey }>;
      const older = [...h.changes].reverse().find((c) => c.kind === 'upsert' && identity(c.key) === identity(e.key) && c.revision < e.revision);
      if (older && idx.at(older.revision, identity(older.key))) return mutate(w, s.ci, (ev) => ev.map((x, i) => (i === s.ei ? { ...e, revision: older.revision, value: older.value ?? null } : x)));
    }
    const s = spots[Math.floor(pick * spots.length)];
    return s ? mutate(w, s.ci, (ev) => ev.filter((_, i) => i !== s.ei)) : undefined; // a resource left out
  }
  const s = spots[Math.floor(pick * spots.length)];
  if (!s) return undefined;
  switch (bug) {
    case 'skip':
      return mutate(w, s.ci, (ev) => ev.filter((_, i) => i !== s.ei));
    case 'duplicate':
      return mutate(w, s.ci, (ev) => {
        ev.splice(s.ei + 1, 0, ev[s.ei] as ReceivedEvent);
        return ev;
      });
    case 'wrong-value':
      return mutate(w, s.ci, (ev) => ev.map((x, i) => (i === s.ei && (x.type === 'change' || x.type === 'delete') ? { ...x, value: { tampered: true } } : x)));
  }
}

t.test('property: every planted bug is caught, with the anomaly kind it should have', async (t) => {
  const planted: Record<Planted, number> = { skip: 0, duplicate: 0, swap: 0, 'wrong-value': 0, 'stale-initial': 0 };
  fc.assert(
    fc.property(historyArb, schemeArb, fc.constantFrom<Planted>('skip', 'duplicate', 'swap', 'wrong-value', 'stale-initial'), fc.integer({ min: 0, max: 999 }).map((x) => x / 1000), (h, s, bug, pick) => {
      const w = correctWatcher(h, schemeFor(h, s));
      const bad = plant(h, w, bug, pick);
      if (!bad) return;
      planted[bug]++;
      const r = checkWatcher(h, bad, { finalList: finalList(h) });
      if (r.valid) throw new Error(`planted ${bug} not caught in ${JSON.stringify(bad)}`);
      if (!r.anomalies.some((a) => EXPECTED[bug].includes(a.kind))) throw new Error(`planted ${bug}, expected ${EXPECTED[bug].join(' or ')}, got:\n${show(r)}`);
    }),
    { numRuns: 2000, seed: 2 },
  );
  for (const [bug, n] of Object.entries(planted)) t.ok(n > 50, `${bug} planted ${n} times`);
});

// ---- The history's cross-checks ------------------------------------------------------------------

t.test('the history derived from reference watchers is the committed one', async (t) => {
  // Two references (one per type) that started at the same tail, one of them resuming on another node.
  const artists = correctWatcher(H, { id: 'ref-artist', filter: filter('demo.Artist'), mode: 'initial', startAt: 2, cuts: [8], nodes: ['n1', 'n2'] });
  const albums = correctWatcher(H, { id: 'ref-album', filter: filter(ALBUM), mode: 'initial', startAt: 2 });
  const derived = historyFromReferences([artists, albums]);
  t.same(derived, H);
  const r = checkWatchers(derived, [artists, albums], () => finalList(H));
  t.ok(r.valid);
  t.equal(r.watchers, 2);
  t.equal(r.resumes, 1);
  // A reference that started later: the history starts at the later tail.
  const late = correctWatcher(H, { id: 'ref-album', filter: filter(ALBUM), mode: 'initial', startAt: 7 });
  const d2 = historyFromReferences([artists, late]);
  t.equal(d2.start.revision, 7);
  t.same(d2.changes.map((c) => c.revision), [8, 9, 9, 11, 12]);
  t.same([...d2.start.resources].map((r) => `${r.key.name}@${r.revision}`).sort(), ['album-1@6', 'red-1@5', 'red-2@4']);
  t.throws(() => historyFromReferences([correctWatcher(H, { filter: filter(ALBUM), mode: 'at-tail', startAt: 2 })]), /must start with an initial state/);
});

t.test('acknowledged writes are checked against the history', async (t) => {
  const ok = checkAcknowledged(H, [
    { kind: 'upsert', key: key('red-1'), revision: 5, value: { uid: 'red-1-uid', data: 'r1b' } },
    { kind: 'delete', key: key('blue-1'), lastRevision: 3 },
    { kind: 'upsert', key: key('x'), revision: 20, value: null }, // beyond the history: skipped
  ]);
  t.same(ok, { valid: true, checked: 2, problems: [] });
  const bad = checkAcknowledged(H, [
    { kind: 'upsert', key: key('red-1'), revision: 6, value: { uid: 'red-1-uid', data: 'r1b' }, what: 'w1#4' },
    { kind: 'upsert', key: key('red-1'), revision: 8, value: { uid: 'red-1-uid', data: 'zzz' } },
    { kind: 'delete', key: key('red-1'), lastRevision: 5 },
  ]);
  t.equal(bad.problems.length, 3);
  t.match(bad.problems[0], /write of demo\.v1\.Artist\/default\/a\/red-1 \(w1#4\) acknowledged at 6 is not in the history; the history changes this key at 2 \(upsert\), 5 \(upsert\), 8 \(upsert\), 9 \(delete\)/);
  t.match(bad.problems[1], /acknowledged at 8 with .*"zzz".*; the history has .*"r1c"/);
  t.match(bad.problems[2], /delete of .*red-1 acknowledged with last state at 5, but the history's next change of it is upsert at 8/);
});

t.test('the history agrees with a final List, or says where not', async (t) => {
  t.same(checkHistoryAgainstList(H, finalList(H), filter(ARTIST)), []);
  const list = finalList(H);
  const wrong: ListSnapshot = { revision: 13, resources: list.resources.map((r) => (r.key.name === 'red-3' ? { ...r, revision: 11 } : r)) };
  t.same(checkHistoryAgainstList(H, wrong, filter(ARTIST)), ['demo.v1.Artist/default/b/red-3 at 12, listed at 11']);
  t.match(checkHistoryAgainstList(H, { revision: 40, resources: [] }, filter(ARTIST))[0], /outside the history/);
});

t.test('a malformed history is refused', async (t) => {
  t.throws(() => new HistoryIndex({ ...H, changes: [upsert(5, key('a'), 'x'), upsert(4, key('b'), 'y')] }), /not in commit order/);
  t.throws(() => new HistoryIndex({ ...H, changes: [upsert(5, key('a'), 'x'), upsert(5, key('a'), 'y')] }), /twice at revision 5/);
  t.throws(() => new HistoryIndex({ ...H, changes: [upsert(2, key('a'), 'x')] }), /not after the start revision/);
});
