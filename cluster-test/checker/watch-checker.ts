/**
 * The watch checker: is what one watcher received exactly the committed history, seen through
 * its filter? (API.md "Watch": an initial state at a consistent revision, then every matching
 * change in commit order, no gap and no duplicate across the initial-state/live boundary,
 * across resumes and across nodes.)
 *
 * Pure functions over JSON-able input: the committed history (a starting state and every change
 * after it), one watcher's received events (one watch of a stream, possibly over several
 * connections that resume one another), and optionally a final List. Nothing here knows about
 * HTTP, nodes or Raft, so the real-process tests and a Jepsen-style harness can share it. The
 * format is described in README.md ("The watch checker").
 */
import { CairnError, ErrorCode } from '../../src/base/index.js';

export type JsonValue = null | boolean | number | string | readonly JsonValue[] | { readonly [k: string]: JsonValue };

/**
 * A resource as a watch event or a List names it. `type` is the full `group.version.Kind` of the
 * stored resource; identity is (group, Kind, partition, namespace, name), as in the store: a
 * write may change the group version of the same resource.
 */
export interface WatchKey {
  readonly type: string;
  readonly partition: string;
  readonly namespace: string;
  readonly name: string;
}

/** One committed change: what the entry at `revision` did to `key`. */
export interface CommittedChange {
  /** The Raft index of the entry. One entry may change several keys (a cascading delete). */
  readonly revision: number;
  readonly kind: 'upsert' | 'delete';
  readonly key: WatchKey;
  /**
   * upsert: the stored value (whatever projection the caller compares, e.g. {uid, version,
   * data}). delete: the last stored value as the delete event carries it, or absent when
   * unknown (then a delete event's value is not compared).
   */
  readonly value?: JsonValue;
}

/** One resource of a state: its key, the revision of its last change (its version) and its value. */
export interface StateEntry {
  readonly key: WatchKey;
  readonly revision: number;
  readonly value: JsonValue;
}

/**
 * What was committed: the state at `start.revision` (every resource then, of every key the
 * checked watchers can match), then every change after it in commit order.
 */
export interface CommittedHistory {
  readonly start: { readonly revision: number; readonly resources: readonly StateEntry[] };
  /** Revisions greater than start.revision, non-decreasing. */
  readonly changes: readonly CommittedChange[];
  /** Every change with a revision up to this one is in `changes`; nothing is known beyond it. */
  readonly completeThrough: number;
  /**
   * Absent: the history is complete, every change in (start.revision, completeThrough] is
   * listed. Present: the history is what observers saw (watch-history.ts derives one), and only
   * these ranges are known to hold every change of the keys their filter matches; elsewhere a
   * committed change may be missing from it. Then a resource the history has but a watcher's
   * initial state (or a List) lacks is compared only when the revisions since the history's
   * last change of it are covered: otherwise an unobserved delete could explain it. What the
   * history has is never in doubt, so `missing`, `phantom` and the rest are unaffected.
   */
  readonly coverage?: readonly CoverageRange[];
}

/**
 * Every change of a key `filter` matches (of `key` only, when given) with afterRevision <
 * revision <= throughRevision is in the history.
 */
export interface CoverageRange {
  readonly filter: WatchFilterSpec;
  readonly key?: WatchKey;
  readonly afterRevision: number;
  readonly throughRevision: number;
}

/**
 * A watch filter as the server normalizes it: `*` is a wildcard for partition and namespace; a
 * type without a version (`demo.Artist`) matches every version of the kind.
 */
export interface WatchFilterSpec {
  readonly type: string;
  readonly partition: string;
  readonly namespace: string;
  readonly namePrefix?: string;
}

/** What one watch received, in order (bookmarks are the stream's and apply to each of its watches). */
export type ReceivedEvent =
  | { readonly type: 'change' | 'delete'; readonly revision: number; readonly key: WatchKey; readonly value: JsonValue }
  | { readonly type: 'tail' | 'bookmark'; readonly revision: number }
  | { readonly type: 'error'; readonly code: string; readonly revision?: number; readonly message?: string };

/**
 * How a connection asked to start: the initial state first (no gt_revision), live events only
 * (at_tail), or every change after `gtRevision` (a resume).
 *
 * An at-tail watch is never told where it started, so by itself it vouches only for what
 * follows its first event or bookmark. `notAfter`, when the caller knows it, is a revision the
 * subscription started at or before (e.g. a linearizable read's revision taken once the
 * response headers arrived: the server subscribes before it sends them); every matching change
 * after it must then arrive.
 */
export type ConnectionStart = { readonly kind: 'initial' } | { readonly kind: 'at-tail'; readonly notAfter?: number } | { readonly kind: 'resume'; readonly gtRevision: number };

export interface WatchConnection {
  readonly from: ConnectionStart;
  /** Which node served it, for reports. */
  readonly node?: string;
  readonly events: readonly ReceivedEvent[];
}

/** One watch followed over one or more connections, in the order they were opened. */
export interface WatcherRecord {
  readonly id: string;
  readonly filter: WatchFilterSpec;
  readonly connections: readonly WatchConnection[];
}

/** A List taken after the last write: every resource of its filter at `revision`. */
export interface ListSnapshot {
  readonly revision: number;
  readonly resources: readonly StateEntry[];
}

export const WatchAnomalyKind = {
  /** A committed matching change inside the covered range was not received. */
  missing: 'missing',
  /** The same change was received twice. */
  duplicate: 'duplicate',
  /** A change arrived after one with a greater revision (or after a tail or bookmark at or above it). */
  outOfOrder: 'out-of-order',
  /** A change at or below the revision the connection started after. */
  beforeStart: 'before-start',
  /** No committed change of that key at that revision. */
  phantom: 'phantom',
  /** Received as a change but committed as a delete, or the reverse. */
  wrongKind: 'wrong-kind',
  wrongValue: 'wrong-value',
  /** An event for a resource the filter does not match. */
  outsideFilter: 'outside-filter',
  /** The initial state differs from the committed state at its tail revision. */
  initialState: 'initial-state',
  /** A resume from a revision the watcher had not covered (it skips changes), or with nothing covered. */
  resumeGap: 'resume-gap',
  /** An event or tail beyond what the history covers: cannot be checked. */
  beyondHistory: 'beyond-history',
  /** The watcher's stream never reached the final List's revision. */
  short: 'short',
  /** The state the watcher built differs from the final List. */
  finalState: 'final-state',
  /** A stream that breaks the protocol's shape (a second tail, events after an error). */
  malformed: 'malformed',
} as const;
export type WatchAnomalyKind = (typeof WatchAnomalyKind)[keyof typeof WatchAnomalyKind];

export interface WatchAnomaly {
  readonly kind: WatchAnomalyKind;
  readonly watcher: string;
  /** Index into the watcher's connections; -1 for the watcher as a whole (final state). */
  readonly connection: number;
  /** Index into the connection's events, when one event is at fault. */
  readonly event?: number;
  readonly revision?: number;
  /** `type/partition/namespace/name`. */
  readonly key?: string;
  /** One sentence with the smallest context that shows the fault. */
  readonly message: string;
}

export interface WatchCheckResult {
  readonly valid: boolean;
  /** In the order found (per connection, then the final state); at most `maxAnomalies`. */
  readonly anomalies: readonly WatchAnomaly[];
  /** Anomalies found beyond `maxAnomalies`, not listed. */
  readonly moreAnomalies: number;
  /** change/delete events compared with the history. */
  readonly eventsChecked: number;
  readonly connections: number;
  /** Connections that resumed (gt_revision). */
  readonly resumes: number;
  /** The watcher has every matching change up to this revision (undefined: it never had a start point). */
  readonly coveredThrough: number | undefined;
  /** How connections ended with an error event, by code. */
  readonly errors: Readonly<Record<string, number>>;
  /**
   * Resources an initial state lacked while the history had them, not reported because the
   * history's coverage does not rule out an unobserved delete (CommittedHistory.coverage).
   */
  readonly uncertain: number;
}

export interface WatchCheckOptions {
  /** Compared with the state the watcher built at the end (restricted to its filter). */
  readonly finalList?: ListSnapshot;
  /** Anomalies listed per watcher, at most. Default 50. */
  readonly maxAnomalies?: number;
}

// ---- Keys, filters, values ------------------------------------------------------------------

function groupKind(type: string): string {
  const parts = type.split('.');
  return parts.length === 3 ? `${parts[0] as string}.${parts[2] as string}` : type;
}

/** The identity of a key: the group version is not part of it. */
export function identity(k: WatchKey): string {
  return `${groupKind(k.type)}/${k.partition}/${k.namespace}/${k.name}`;
}

/** `type/partition/namespace/name`, for messages. */
export function describeKey(k: WatchKey): string {
  return `${k.type}/${k.partition}/${k.namespace}/${k.name}`;
}

/** Whether the filter matches a resource of this key (the server's rule, stream/types.ts `matches`). */
export function filterMatches(f: WatchFilterSpec, k: WatchKey): boolean {
  if (f.type.split('.').length === 3 ? k.type !== f.type : groupKind(k.type) !== f.type) return false;
  if (f.partition !== '*' && k.partition !== f.partition) return false;
  if (f.namespace !== '*' && k.namespace !== f.namespace) return false;
  return f.namePrefix === undefined || k.name.startsWith(f.namePrefix);
}

export function describeFilter(f: WatchFilterSpec): string {
  return `${f.type} partition=${f.partition} namespace=${f.namespace}${f.namePrefix !== undefined ? ` name_prefix=${f.namePrefix}` : ''}`;
}

/** JSON with object keys sorted, so equal values print equally. */
export function canonicalJson(v: JsonValue | undefined): string {
  if (v === undefined) return 'undefined';
  if (v === null || typeof v !== 'object') return JSON.stringify(v);
  if (Array.isArray(v)) return `[${(v as readonly JsonValue[]).map(canonicalJson).join(',')}]`;
  const o = v as { readonly [k: string]: JsonValue };
  return `{${Object.keys(o)
    .sort()
    .map((k) => `${JSON.stringify(k)}:${canonicalJson(o[k])}`)
    .join(',')}}`;
}

function short(v: JsonValue | undefined, max = 160): string {
  const s = canonicalJson(v);
  return s.length <= max ? s : `${s.slice(0, max - 3)}...`;
}

// ---- The history, indexed ---------------------------------------------------------------------

interface IndexedChange {
  readonly revision: number;
  readonly kind: 'upsert' | 'delete';
  readonly key: WatchKey;
  readonly id: string;
  readonly value: JsonValue | undefined;
  readonly valueText: string;
}

/** A history indexed for the checks: by (revision, identity), and in commit order. Build once, check many watchers. */
export class HistoryIndex {
  readonly startRevision: number;
  readonly completeThrough: number;
  private readonly byRevId = new Map<string, IndexedChange>();
  /** Changes in commit order (stable within a revision). */
  private readonly ordered: IndexedChange[] = [];
  private readonly startState = new Map<string, StateEntry>();
  /** Per identity, its changes in order (for "what did the history have near there"). */
  private readonly perKey = new Map<string, IndexedChange[]>();
  /** Coverage ranges of one key, by identity; and those of a whole filter. */
  private readonly keyedCoverage = new Map<string, CoverageRange[]>();
  private readonly filterCoverage: CoverageRange[] | undefined;

  constructor(readonly history: CommittedHistory) {
    this.startRevision = history.start.revision;
    this.completeThrough = history.completeThrough;
    if (history.coverage !== undefined) {
      this.filterCoverage = [];
      for (const r of history.coverage) {
        if (r.throughRevision <= r.afterRevision) continue;
        if (r.key === undefined) this.filterCoverage.push(r);
        else {
          const id = identity(r.key);
          let l = this.keyedCoverage.get(id);
          if (!l) this.keyedCoverage.set(id, (l = []));
          l.push(r);
        }
      }
    }
    if (history.completeThrough < history.start.revision) {
      throw new CairnError(ErrorCode.INVALID_ARGUMENT, `history completeThrough ${history.completeThrough} is before its start revision ${history.start.revision}`);
    }
    for (const r of history.start.resources) {
      const id = identity(r.key);
      if (r.revision > history.start.revision) throw new CairnError(ErrorCode.INVALID_ARGUMENT, `history start state has ${describeKey(r.key)} at revision ${r.revision}, after the start revision ${history.start.revision}`);
      if (this.startState.has(id)) throw new CairnError(ErrorCode.INVALID_ARGUMENT, `history start state has ${describeKey(r.key)} twice`);
      this.startState.set(id, r);
      const c: IndexedChange = { revision: r.revision, kind: 'upsert', key: r.key, id, value: r.value, valueText: canonicalJson(r.value) };
      this.byRevId.set(`${r.revision}|${id}`, c);
      this.perKeyList(id).push(c);
    }
    let last = history.start.revision;
    for (const ch of history.changes) {
      if (ch.revision <= history.start.revision) throw new CairnError(ErrorCode.INVALID_ARGUMENT, `history change at revision ${ch.revision} is not after the start revision ${history.start.revision}`);
      if (ch.revision < last) throw new CairnError(ErrorCode.INVALID_ARGUMENT, `history changes are not in commit order: revision ${ch.revision} after ${last}`);
      last = ch.revision;
      const id = identity(ch.key);
      const k = `${ch.revision}|${id}`;
      if (this.byRevId.has(k)) throw new CairnError(ErrorCode.INVALID_ARGUMENT, `history changes ${describeKey(ch.key)} twice at revision ${ch.revision}`);
      const c: IndexedChange = { revision: ch.revision, kind: ch.kind, key: ch.key, id, value: ch.value, valueText: canonicalJson(ch.value) };
      this.byRevId.set(k, c);
      this.ordered.push(c);
      this.perKeyList(id).push(c);
    }
  }

  private perKeyList(id: string): IndexedChange[] {
    let l = this.perKey.get(id);
    if (!l) this.perKey.set(id, (l = []));
    return l;
  }

  /** @internal */
  at(revision: number, id: string): IndexedChange | undefined {
    return this.byRevId.get(`${revision}|${id}`);
  }

  /** The committed state at `revision` (>= the start revision), restricted to `filter`, by identity. */
  stateAt(revision: number, filter: WatchFilterSpec | undefined): Map<string, StateEntry> {
    const s = new Map<string, StateEntry>();
    for (const [id, e] of this.startState) s.set(id, e);
    for (const c of this.ordered) {
      if (c.revision > revision) break;
      if (c.kind === 'delete') s.delete(c.id);
      else s.set(c.id, { key: c.key, revision: c.revision, value: c.value ?? null });
    }
    if (filter) for (const [id, e] of s) if (!filterMatches(filter, e.key)) s.delete(id);
    return s;
  }

  /** Changes with lo < revision <= hi matching `filter`, in commit order. */
  changesIn(lo: number, hi: number, filter: WatchFilterSpec): IndexedChange[] {
    const out: IndexedChange[] = [];
    for (const c of this.ordered) {
      if (c.revision <= lo) continue;
      if (c.revision > hi) break;
      if (filterMatches(filter, c.key)) out.push(c);
    }
    return out;
  }

  /**
   * Whether every change of `key` with after < revision <= through is known to be in the
   * history: always for a complete history; for one with coverage, when the ranges whose filter
   * matches the key cover the interval together.
   */
  covers(key: WatchKey, after: number, through: number): boolean {
    if (this.filterCoverage === undefined || through <= after) return true;
    const ranges = [...(this.keyedCoverage.get(identity(key)) ?? []), ...this.filterCoverage.filter((r) => filterMatches(r.filter, key))].sort((a, b) => a.afterRevision - b.afterRevision);
    let reached = after;
    for (const r of ranges) {
      if (r.afterRevision > reached) break;
      reached = Math.max(reached, r.throughRevision);
      if (reached >= through) return true;
    }
    return reached >= through;
  }

  /** "the history changes it at 12 (upsert), 15 (delete)", the changes of a key nearest to `revision`. */
  near(id: string, revision: number): string {
    const l = this.perKey.get(id) ?? [];
    if (l.length === 0) return 'the history never changes this key';
    let i = l.findIndex((c) => c.revision >= revision);
    if (i < 0) i = l.length;
    const around = l.slice(Math.max(0, i - 2), i + 2);
    return `the history changes this key at ${around.map((c) => `${c.revision} (${c.kind})`).join(', ')}`;
  }
}

// ---- The check of one watcher -----------------------------------------------------------------

interface Built {
  revision: number;
  key: WatchKey;
  value: JsonValue;
}

class Report {
  readonly list: WatchAnomaly[] = [];
  more = 0;
  constructor(
    readonly watcher: string,
    private readonly max: number,
  ) {}
  add(a: Omit<WatchAnomaly, 'watcher'>): void {
    if (this.list.length >= this.max) this.more++;
    else this.list.push({ watcher: this.watcher, ...a });
  }
}

function describeConnection(c: WatchConnection, i: number): string {
  const from = c.from.kind === 'resume' ? `resume after ${c.from.gtRevision}` : c.from.kind === 'at-tail' ? 'at tail' : 'initial state';
  return `connection ${i} (${from}${c.node !== undefined ? ` on ${c.node}` : ''})`;
}

/**
 * A resource one side has and the other lacks is skipped (and counted) when `unsure.skip` says
 * the side that has it (`unsure.side`, the history's) may be missing a later delete.
 */
interface Unsure {
  readonly side: 'got' | 'want';
  readonly skip: (e: StateEntry | Built) => boolean;
  count: number;
}

/** How `got` differs from `want`, one phrase per key (`want` is called `noun`: committed, listed). */
function diffStates(got: ReadonlyMap<string, Built | StateEntry>, want: ReadonlyMap<string, StateEntry>, noun: string, limit = 5, unsure?: Unsure): string[] {
  const out: string[] = [];
  const ids = new Set([...got.keys(), ...want.keys()]);
  for (const id of [...ids].sort()) {
    const g = got.get(id);
    const w = want.get(id);
    if (g && w && g.revision === w.revision && canonicalJson(g.value) === canonicalJson(w.value)) continue;
    if (unsure) {
      const only = unsure.side === 'got' ? (g && !w ? g : undefined) : (w && !g ? w : undefined);
      if (only && unsure.skip(only)) {
        unsure.count++;
        continue;
      }
    }
    if (!g && w) out.push(`${describeKey(w.key)} absent, ${noun} at ${w.revision}`);
    else if (g && !w) out.push(`${describeKey(g.key)} present at ${g.revision}, ${noun} absent`);
    else if (g && w) {
      out.push(
        g.revision !== w.revision ? `${describeKey(w.key)} at ${g.revision}, ${noun} at ${w.revision}` : `${describeKey(w.key)} at ${g.revision} is ${short(g.value, 80)}, ${noun} ${short(w.value, 80)}`,
      );
    }
  }
  if (out.length > limit) return [...out.slice(0, limit), `and ${out.length - limit} more`];
  return out;
}

/**
 * Checks one watcher against the history:
 * - each connection's initial state (events before its tail) equals the committed state at the
 *   tail's revision, restricted to the filter;
 * - after it (from the start, for a resume), events come in commit order (several events may
 *   share a revision only for different keys: one entry can change several), each is a committed
 *   change of a matching key with the committed kind and value, none twice;
 * - no gap: every committed matching change after the connection's start point, up to the
 *   furthest revision the connection vouched for (its last event, tail or bookmark), was received;
 * - a resume starts at or before what the watcher already covered;
 * - the state the watcher built (initial state, then every event applied) equals the final List.
 */
export function checkWatcher(history: HistoryIndex | CommittedHistory, w: WatcherRecord, opts: WatchCheckOptions = {}): WatchCheckResult {
  const h = history instanceof HistoryIndex ? history : new HistoryIndex(history);
  const rep = new Report(w.id, opts.maxAnomalies ?? 50);
  const errors: Record<string, number> = {};
  /** The watcher's view; undefined until it has a start point. */
  let state: Map<string, Built> | undefined;
  let covered: number | undefined;
  /** Every (revision|identity) the watcher received live, with where. */
  const seen = new Map<string, { connection: number; event: number }>();
  let eventsChecked = 0;
  let resumes = 0;
  let uncertain = 0;

  const seedFromHistory = (rev: number): Map<string, Built> => {
    const m = new Map<string, Built>();
    for (const [id, e] of h.stateAt(rev, w.filter)) m.set(id, { revision: e.revision, key: e.key, value: e.value });
    return m;
  };

  w.connections.forEach((conn, ci) => {
    const where = describeConnection(conn, ci);
    /** The connection's start point: it owes every matching change after it. Undefined while unknown. */
    let lo: number | undefined;
    /** The furthest revision the connection vouched for. */
    let hi: number | undefined;
    /** Later changes must have a revision above this (a tail or bookmark) ... */
    let floor = Number.NEGATIVE_INFINITY;
    /** ... and at least this (the last change's). */
    let lastRev = Number.NEGATIVE_INFINITY;
    let lastEventIndex = -1;
    let snapshot: Map<string, Built> | undefined;
    let sawTail = false;
    let ended = false;
    const inConn = new Map<string, number>();

    switch (conn.from.kind) {
      case 'initial':
        snapshot = new Map();
        break;
      case 'resume': {
        resumes++;
        const g = conn.from.gtRevision;
        if (covered === undefined || state === undefined) {
          rep.add({ kind: 'resume-gap', connection: ci, revision: g, message: `${where}: resumes after ${g} but the watcher had no start point before it (no tail, event or bookmark received)` });
          state = seedFromHistory(Math.max(g, h.startRevision));
        } else if (g > covered) {
          rep.add({ kind: 'resume-gap', connection: ci, revision: g, message: `${where}: resumes after ${g} but the watcher had only covered through ${covered}; changes in (${covered}, ${g}] are skipped` });
        }
        lo = g;
        floor = g;
        break;
      }
      case 'at-tail':
        break;
    }

    /**
     * An at-tail connection learns its start point from its first event (it started before it)
     * or bookmark (at or before it), or from what the caller knows (`notAfter`).
     */
    const startAtTail = (bound: number): void => {
      if (lo !== undefined || conn.from.kind !== 'at-tail') return;
      const startAfter = Math.min(bound, conn.from.notAfter ?? bound);
      lo = startAfter;
      if (state === undefined || covered === undefined || covered < startAfter) {
        // As if the client had listed at that revision: the watch alone says nothing about
        // the state before it.
        state = seedFromHistory(Math.max(startAfter, h.startRevision));
      }
    };

    conn.events.forEach((ev, ei) => {
      const at = `${where}, event #${ei}`;
      if (ended) {
        rep.add({ kind: 'malformed', connection: ci, event: ei, message: `${at}: an event after the stream's error event` });
        return;
      }
      switch (ev.type) {
        case 'error':
          ended = true;
          errors[ev.code] = (errors[ev.code] ?? 0) + 1;
          return;
        case 'tail': {
          if (sawTail) {
            rep.add({ kind: 'malformed', connection: ci, event: ei, revision: ev.revision, message: `${at}: a second tail (at ${ev.revision})` });
            return;
          }
          sawTail = true;
          if (snapshot) {
            checkInitialState(snapshot, ev.revision, ci, ei, at);
            state = snapshot;
            snapshot = undefined;
            lo = ev.revision;
            floor = ev.revision;
            hi = ev.revision;
            return;
          }
          if (conn.from.kind === 'at-tail') startAtTail(ev.revision);
          if (ev.revision < lastRev) {
            rep.add({ kind: 'out-of-order', connection: ci, event: ei, revision: ev.revision, message: `${at}: tail at ${ev.revision} after a change at ${lastRev}` });
          }
          floor = Math.max(floor, ev.revision);
          hi = Math.max(hi ?? ev.revision, ev.revision);
          return;
        }
        case 'bookmark': {
          if (snapshot) {
            rep.add({ kind: 'out-of-order', connection: ci, event: ei, revision: ev.revision, message: `${at}: bookmark at ${ev.revision} in the middle of the initial state (before the tail)` });
            return;
          }
          if (conn.from.kind === 'at-tail') startAtTail(ev.revision);
          if (ev.revision < lastRev) {
            rep.add({ kind: 'out-of-order', connection: ci, event: ei, revision: ev.revision, message: `${at}: bookmark at ${ev.revision} after a change at ${lastRev}` });
          }
          floor = Math.max(floor, ev.revision);
          hi = Math.max(hi ?? ev.revision, ev.revision);
          return;
        }
        case 'change':
        case 'delete':
          break;
      }
      eventsChecked++;
      const id = identity(ev.key);
      const name = describeKey(ev.key);
      if (!filterMatches(w.filter, ev.key)) {
        rep.add({ kind: 'outside-filter', connection: ci, event: ei, revision: ev.revision, key: name, message: `${at}: ${ev.type} of ${name} at ${ev.revision}, which the filter ${describeFilter(w.filter)} does not match` });
      }
      checkAgainstHistory(ev, id, name, ci, ei, at);
      if (snapshot) {
        // The initial state: resources at their versions (and, from a shared older snapshot,
        // the changes since), checked as a whole at the tail. One key must not go backwards.
        const prev = snapshot.get(id);
        if (prev && prev.revision >= ev.revision) {
          rep.add({ kind: 'out-of-order', connection: ci, event: ei, revision: ev.revision, key: name, message: `${at}: initial state gives ${name} at ${ev.revision} after giving it at ${prev.revision}` });
        }
        if (ev.type === 'delete') snapshot.delete(id);
        else snapshot.set(id, { revision: ev.revision, key: ev.key, value: ev.value });
        return;
      }
      if (conn.from.kind === 'at-tail') startAtTail(ev.revision - 1);
      const rk = `${ev.revision}|${id}`;
      const dupIn = inConn.get(rk);
      const before = seen.get(rk);
      if (dupIn !== undefined) {
        rep.add({ kind: 'duplicate', connection: ci, event: ei, revision: ev.revision, key: name, message: `${at}: ${ev.type} of ${name} at ${ev.revision} again (first as event #${dupIn})` });
        return;
      }
      if (ev.revision < lastRev) {
        rep.add({ kind: 'out-of-order', connection: ci, event: ei, revision: ev.revision, key: name, message: `${at}: ${ev.type} of ${name} at ${ev.revision} arrived after a change at ${lastRev} (event #${lastEventIndex})` });
      } else if (lo !== undefined && ev.revision <= lo) {
        if (before) {
          rep.add({ kind: 'duplicate', connection: ci, event: ei, revision: ev.revision, key: name, message: `${at}: ${ev.type} of ${name} at ${ev.revision}, at or before the start point ${lo}, already received (connection ${before.connection}, event #${before.event})` });
        } else {
          rep.add({ kind: 'before-start', connection: ci, event: ei, revision: ev.revision, key: name, message: `${at}: ${ev.type} of ${name} at ${ev.revision}, at or before the connection's start point ${lo}` });
        }
        return;
      } else if (ev.revision <= floor) {
        rep.add({ kind: 'out-of-order', connection: ci, event: ei, revision: ev.revision, key: name, message: `${at}: ${ev.type} of ${name} at ${ev.revision} arrived after a tail or bookmark at ${floor}` });
      }
      inConn.set(rk, ei);
      if (!seen.has(rk)) seen.set(rk, { connection: ci, event: ei });
      if (ev.revision >= lastRev) {
        lastRev = ev.revision;
        lastEventIndex = ei;
      }
      hi = Math.max(hi ?? ev.revision, ev.revision);
      if (state) {
        const cur = state.get(id);
        // A re-delivered older change (a resume from before what was covered) must not undo a newer one.
        if (!cur || cur.revision <= ev.revision) {
          if (ev.type === 'delete') state.delete(id);
          else state.set(id, { revision: ev.revision, key: ev.key, value: ev.value });
        }
      }
    });

    if (snapshot) return; // never got past the initial state: nothing learned
    if (lo === undefined || hi === undefined) return; // an at-tail connection that saw nothing
    // No gap: every matching change in (lo, hi] must have come on this connection.
    const checkedHi = Math.min(hi, h.completeThrough);
    for (const c of h.changesIn(Math.max(lo, h.startRevision), checkedHi, w.filter)) {
      if (inConn.has(`${c.revision}|${c.id}`)) continue;
      rep.add({ kind: 'missing', connection: ci, revision: c.revision, key: describeKey(c.key), message: `${where}: ${c.kind} of ${describeKey(c.key)} at ${c.revision} never arrived (${receivedAround(conn, c.revision)})` });
    }
    // A re-list replaces what the watcher had; anything else extends it (a resume gap was reported above).
    covered = conn.from.kind === 'initial' ? hi : Math.max(covered ?? hi, hi);
  });

  if (opts.finalList) {
    const L = opts.finalList;
    const want = new Map<string, StateEntry>();
    for (const r of L.resources) if (filterMatches(w.filter, r.key)) want.set(identity(r.key), r);
    if (covered === undefined || covered < L.revision) {
      rep.add({ kind: 'short', connection: -1, revision: L.revision, message: `the watcher covers ${covered === undefined ? 'nothing' : `only through ${covered}`}, not the final List's revision ${L.revision}` });
    } else {
      const diff = diffStates(state ?? new Map<string, Built>(), want, 'listed');
      if (diff.length > 0) rep.add({ kind: 'final-state', connection: -1, revision: L.revision, message: `the state the watcher built differs from the final List at ${L.revision}: ${diff.join('; ')}` });
    }
  }

  return {
    valid: rep.list.length === 0,
    anomalies: rep.list,
    moreAnomalies: rep.more,
    eventsChecked,
    connections: w.connections.length,
    resumes,
    coveredThrough: covered,
    errors,
    uncertain,
  };

  function checkAgainstHistory(ev: Extract<ReceivedEvent, { type: 'change' | 'delete' }>, id: string, name: string, ci: number, ei: number, at: string): void {
    if (ev.revision > h.completeThrough) {
      rep.add({ kind: 'beyond-history', connection: ci, event: ei, revision: ev.revision, key: name, message: `${at}: ${ev.type} at ${ev.revision}, beyond the history (complete through ${h.completeThrough})` });
      return;
    }
    if (ev.revision <= h.startRevision && h.at(ev.revision, id) === undefined) return; // before the history: cannot say
    const c = h.at(ev.revision, id);
    if (!c) {
      rep.add({ kind: 'phantom', connection: ci, event: ei, revision: ev.revision, key: name, message: `${at}: ${ev.type} of ${name} at ${ev.revision}, but no committed change of it there; ${h.near(id, ev.revision)}` });
      return;
    }
    const want = c.kind === 'delete' ? 'delete' : 'change';
    if (ev.type !== want) {
      rep.add({ kind: 'wrong-kind', connection: ci, event: ei, revision: ev.revision, key: name, message: `${at}: ${ev.type} of ${name} at ${ev.revision}, committed as ${c.kind}` });
      return;
    }
    if (c.value !== undefined && canonicalJson(ev.value) !== c.valueText) {
      rep.add({ kind: 'wrong-value', connection: ci, event: ei, revision: ev.revision, key: name, message: `${at}: ${ev.type} of ${name} at ${ev.revision} carries ${short(ev.value)}, committed ${short(c.value)}` });
    }
  }

  function checkInitialState(snapshot: ReadonlyMap<string, Built>, tail: number, ci: number, ei: number, at: string): void {
    if (tail > h.completeThrough) {
      rep.add({ kind: 'beyond-history', connection: ci, event: ei, revision: tail, message: `${at}: tail at ${tail}, beyond the history (complete through ${h.completeThrough}); the initial state cannot be checked` });
      return;
    }
    if (tail < h.startRevision) {
      rep.add({ kind: 'beyond-history', connection: ci, event: ei, revision: tail, message: `${at}: tail at ${tail}, before the history starts (${h.startRevision}); the initial state cannot be checked` });
      return;
    }
    for (const b of snapshot.values()) {
      if (b.revision > tail) {
        rep.add({ kind: 'initial-state', connection: ci, event: ei, revision: b.revision, key: describeKey(b.key), message: `${at}: the initial state has ${describeKey(b.key)} at ${b.revision}, after its tail at ${tail}` });
      }
    }
    // With a derived history, a resource it has at r but the initial state lacks is a fault
    // only if no unobserved delete can hide in (r, tail].
    const unsure: Unsure = { side: 'want', skip: (e) => !h.covers(e.key, e.revision, tail), count: 0 };
    const diff = diffStates(snapshot, h.stateAt(tail, w.filter), 'committed', 5, unsure);
    uncertain += unsure.count;
    if (diff.length > 0) rep.add({ kind: 'initial-state', connection: ci, event: ei, revision: tail, message: `${at}: the initial state differs from the committed state at its tail ${tail}: ${diff.join('; ')}` });
  }
}

/** "received 55 (event #3) then 58 (event #4)": the connection's changes on either side of `revision`. */
function receivedAround(conn: WatchConnection, revision: number): string {
  let before: { rev: number; i: number } | undefined;
  let after: { rev: number; i: number } | undefined;
  conn.events.forEach((e, i) => {
    if (e.type === 'error') return;
    if (e.revision < revision && (!before || e.revision >= before.rev)) before = { rev: e.revision, i };
    if (e.revision > revision && !after) after = { rev: e.revision, i };
  });
  const fmt = (x: { rev: number; i: number } | undefined): string => (x ? `${x.rev} (${(conn.events[x.i] as ReceivedEvent).type} #${x.i})` : 'nothing');
  return `received ${fmt(before)} then ${fmt(after)}`;
}

// ---- Many watchers, and the history's own cross-checks ----------------------------------------

export interface WatchersCheckResult {
  readonly valid: boolean;
  readonly watchers: number;
  readonly eventsChecked: number;
  readonly connections: number;
  readonly resumes: number;
  /** Summed over the watchers (WatchCheckResult.uncertain). */
  readonly uncertain: number;
  readonly results: ReadonlyMap<string, WatchCheckResult>;
  /** Every anomaly of every watcher, in watcher order. */
  readonly anomalies: readonly WatchAnomaly[];
}

/** Checks every watcher; `finalListFor` gives the final List a watcher's state is compared with. */
export function checkWatchers(history: CommittedHistory, watchers: readonly WatcherRecord[], finalListFor?: (w: WatcherRecord) => ListSnapshot | undefined, maxAnomalies?: number): WatchersCheckResult {
  const h = new HistoryIndex(history);
  const results = new Map<string, WatchCheckResult>();
  const anomalies: WatchAnomaly[] = [];
  let eventsChecked = 0;
  let connections = 0;
  let resumes = 0;
  let uncertain = 0;
  for (const w of watchers) {
    const list = finalListFor?.(w);
    const r = checkWatcher(h, w, { ...(list ? { finalList: list } : {}), ...(maxAnomalies !== undefined ? { maxAnomalies } : {}) });
    results.set(w.id, r);
    anomalies.push(...r.anomalies);
    eventsChecked += r.eventsChecked;
    connections += r.connections;
    resumes += r.resumes;
    uncertain += r.uncertain;
  }
  return { valid: anomalies.length === 0 && [...results.values()].every((r) => r.valid), watchers: watchers.length, eventsChecked, connections, resumes, uncertain, results, anomalies };
}

/** `watcher w3, final-state: ...` */
export function formatWatchAnomaly(a: WatchAnomaly): string {
  return `watcher ${a.watcher}, ${a.kind}: ${a.message}`;
}

/**
 * The committed history as one or more reference watchers saw it: each must start with an
 * initial state (its first connection) and may resume after. The history starts at the latest
 * of their tails, holds every change they received after it, and is complete through the
 * revision all of them covered. The references are not checked here: check each against the
 * result with `checkWatcher` (their order and continuity), and the result against the writers'
 * acknowledgements and a final List.
 */
export function historyFromReferences(refs: readonly WatcherRecord[]): CommittedHistory {
  if (refs.length === 0) throw new CairnError(ErrorCode.INVALID_ARGUMENT, 'no reference watcher to derive the history from');
  const perRef = refs.map((ref) => {
    const first = ref.connections[0];
    if (!first || first.from.kind !== 'initial') throw new CairnError(ErrorCode.INVALID_ARGUMENT, `reference watcher ${ref.id} must start with an initial state`);
    const tailIndex = first.events.findIndex((e) => e.type === 'tail');
    const tail = first.events[tailIndex];
    if (!tail || tail.type !== 'tail') throw new CairnError(ErrorCode.INVALID_ARGUMENT, `reference watcher ${ref.id} never got past its initial state`);
    const snapshot = new Map<string, StateEntry>();
    for (const e of first.events.slice(0, tailIndex)) {
      if (e.type === 'change') snapshot.set(identity(e.key), { key: e.key, revision: e.revision, value: e.value });
      else if (e.type === 'delete') snapshot.delete(identity(e.key));
    }
    const live = new Map<string, CommittedChange>();
    let covered = tail.revision;
    ref.connections.forEach((c, ci) => {
      if (ci > 0 && c.from.kind !== 'resume') throw new CairnError(ErrorCode.INVALID_ARGUMENT, `reference watcher ${ref.id}: connection ${ci} must resume the one before it (gt_revision), not start over`);
      for (const e of ci === 0 ? first.events.slice(tailIndex + 1) : c.events) {
        if (e.type === 'error') continue;
        covered = Math.max(covered, e.revision);
        if (e.type === 'change' || e.type === 'delete') {
          live.set(`${e.revision}|${identity(e.key)}`, { revision: e.revision, kind: e.type === 'delete' ? 'delete' : 'upsert', key: e.key, value: e.value });
        }
      }
    });
    return { tail: tail.revision, snapshot, live: [...live.values()], covered };
  });
  const start = Math.max(...perRef.map((r) => r.tail));
  const completeThrough = Math.min(...perRef.map((r) => r.covered));
  const resources: StateEntry[] = [];
  const changes: CommittedChange[] = [];
  for (const r of perRef) {
    const s = new Map(r.snapshot);
    for (const c of [...r.live].sort((a, b) => a.revision - b.revision)) {
      if (c.revision <= r.tail) continue;
      if (c.revision <= start) {
        if (c.kind === 'delete') s.delete(identity(c.key));
        else s.set(identity(c.key), { key: c.key, revision: c.revision, value: c.value ?? null });
      } else if (c.revision <= completeThrough) changes.push(c);
    }
    resources.push(...s.values());
  }
  changes.sort((a, b) => a.revision - b.revision);
  return { start: { revision: start, resources }, changes, completeThrough };
}

/** What a writer was told: an upsert acknowledged at a version, or a delete that returned the last stored state. */
export type Acknowledgement =
  | { readonly kind: 'upsert'; readonly key: WatchKey; readonly revision: number; readonly value: JsonValue; readonly what?: string }
  | { readonly kind: 'delete'; readonly key: WatchKey; readonly lastRevision: number; readonly what?: string };

export interface AckCheckResult {
  readonly valid: boolean;
  readonly checked: number;
  /** One sentence per acknowledgement the history contradicts. */
  readonly problems: readonly string[];
}

/**
 * Every acknowledged write is in the history: an upsert at its acknowledged revision with its
 * value; a delete (which returns the last stored state, not its own revision) right after the
 * change at that state's revision. Acknowledgements outside the history's range are skipped.
 */
export function checkAcknowledged(history: CommittedHistory, acks: readonly Acknowledgement[]): AckCheckResult {
  const h = new HistoryIndex(history);
  const problems: string[] = [];
  const perKey = new Map<string, CommittedChange[]>();
  for (const c of history.changes) {
    const id = identity(c.key);
    let l = perKey.get(id);
    if (!l) perKey.set(id, (l = []));
    l.push(c);
  }
  let checked = 0;
  for (const a of acks) {
    const id = identity(a.key);
    const name = describeKey(a.key);
    const label = a.what !== undefined ? ` (${a.what})` : '';
    if (a.kind === 'upsert') {
      if (a.revision <= h.startRevision || a.revision > h.completeThrough) continue;
      checked++;
      const c = h.at(a.revision, id);
      if (!c) problems.push(`write of ${name}${label} acknowledged at ${a.revision} is not in the history; ${h.near(id, a.revision)}`);
      else if (c.kind !== 'upsert') problems.push(`write of ${name}${label} acknowledged at ${a.revision} is a delete in the history`);
      else if (canonicalJson(a.value) !== c.valueText) problems.push(`write of ${name}${label} acknowledged at ${a.revision} with ${short(a.value)}; the history has ${short(c.value)}`);
      continue;
    }
    if (a.lastRevision < h.startRevision || a.lastRevision >= h.completeThrough) continue;
    checked++;
    const last = h.at(a.lastRevision, id);
    if (!last || last.kind !== 'upsert') {
      problems.push(`delete of ${name}${label} acknowledged with last state at ${a.lastRevision}, but the history has no write of it there; ${h.near(id, a.lastRevision)}`);
      continue;
    }
    const next = (perKey.get(id) ?? []).find((c) => c.revision > a.lastRevision);
    if (!next || next.kind !== 'delete') {
      problems.push(`delete of ${name}${label} acknowledged with last state at ${a.lastRevision}, but the history's next change of it is ${next ? `${next.kind} at ${next.revision}` : 'none'}`);
    }
  }
  return { valid: problems.length === 0, checked, problems };
}

/**
 * The history's state at the List's revision, restricted to `filter`, equals the List. Empty when
 * it does. With coverage (a derived history), a resource the history has at r and the List
 * lacks is a difference only when (r, List revision] is covered for it.
 */
export function checkHistoryAgainstList(history: CommittedHistory, list: ListSnapshot, filter: WatchFilterSpec): string[] {
  const h = new HistoryIndex(history);
  if (list.revision > h.completeThrough || list.revision < h.startRevision) {
    return [`the List at ${list.revision} is outside the history (${h.startRevision}..${h.completeThrough})`];
  }
  const want = new Map<string, StateEntry>();
  for (const r of list.resources) if (filterMatches(filter, r.key)) want.set(identity(r.key), r);
  return diffStates(h.stateAt(list.revision, filter), want, 'listed', 20, { side: 'got', skip: (e) => !h.covers(e.key, e.revision, list.revision), count: 0 });
}
