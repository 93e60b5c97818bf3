/**
 * The watch workload's log (README.md, "The watch log"): JSON Lines with the workload's
 * writes, every event each watcher's client delivered, and the final List; `parseWatchLog`
 * turns it into the input of `checkWatchRun`, so a run can be checked again from its file.
 *
 * A watcher is one `client.watch()` of one filter. The client resumes lost streams by itself
 * (no gap, no duplicate: that is under test), so the log has no connections; a `reset` (the
 * watch had to start over: COMPACTED, RESET, a fresh snapshot, or an initial state cut short)
 * starts a new one for the checker, with a fresh initial state as its baseline.
 */
import { CairnError, ErrorCode } from '../../src/base/index.js';
import type { JsonValue, ListSnapshot, ReceivedEvent, StateEntry, WatchConnection, WatcherRecord, WatchFilterSpec, WatchKey } from './watch-checker.js';
import type { WatchRunInput, WatchWrite } from './watch-history.js';

export type WatchLogLine =
  /** First: what the workload owns (every write of it is logged) and what the final List selects. */
  | { readonly kind: 'workload'; readonly owned: WatchFilterSpec; readonly listFilter: WatchFilterSpec }
  | ({ readonly kind: 'write' } & WatchWrite)
  /** A watcher started (`t`: ms since the run started). */
  | { readonly kind: 'watcher'; readonly watcher: string; readonly filter: WatchFilterSpec; readonly t: number }
  | {
      readonly kind: 'event';
      readonly watcher: string;
      readonly t: number;
      /** The node serving the watch when the event was taken from the client (approximate: the client may have moved on). */
      readonly node?: string;
      readonly type: 'change' | 'delete';
      readonly revision: number;
      readonly key: WatchKey;
      readonly value: JsonValue;
    }
  | { readonly kind: 'event'; readonly watcher: string; readonly t: number; readonly node?: string; readonly type: 'tail' | 'bookmark'; readonly revision: number }
  | { readonly kind: 'event'; readonly watcher: string; readonly t: number; readonly node?: string; readonly type: 'reset'; readonly reason: string; readonly message?: string }
  /** The watcher was closed; `stats` is the client's WatchStats. */
  | { readonly kind: 'watcher-end'; readonly watcher: string; readonly t: number; readonly stats: JsonValue }
  | { readonly kind: 'final-list'; readonly revision: number; readonly resources: readonly StateEntry[] };

export interface ParsedWatchLog {
  readonly input: WatchRunInput;
  /** Per watcher, the client's stats from its `watcher-end` line. */
  readonly stats: ReadonlyMap<string, JsonValue>;
  /** Bookmarks taken while a watch was (re)sending its initial state: stream-wide, they say nothing about it, so they are dropped. */
  readonly droppedBookmarks: number;
}

export function toWatchLog(lines: readonly WatchLogLine[]): string {
  return lines.map((l) => JSON.stringify(l)).join('\n') + '\n';
}

type Obj = { readonly [k: string]: unknown };

function isObj(v: unknown): v is Obj {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Parses the log; throws CairnError INVALID_ARGUMENT naming the line and the field. */
export function parseWatchLog(text: string): ParsedWatchLog {
  let workload: { owned: WatchFilterSpec; listFilter: WatchFilterSpec } | undefined;
  let finalList: ListSnapshot | undefined;
  const writes: WatchWrite[] = [];
  const stats = new Map<string, JsonValue>();
  const watchers = new Map<string, { filter: WatchFilterSpec; connections: Array<{ from: WatchConnection['from']; nodes: Set<string>; events: ReceivedEvent[]; tailed: boolean }> }>();
  let droppedBookmarks = 0;

  text.split('\n').forEach((raw, i) => {
    if (raw.trim() === '') return;
    const n = i + 1;
    const bad = (msg: string): CairnError => new CairnError(ErrorCode.INVALID_ARGUMENT, `watch log line ${n}: ${msg}`);
    let o: unknown;
    try {
      o = JSON.parse(raw);
    } catch (e) {
      throw bad(`not JSON (${e instanceof Error ? e.message : String(e)})`);
    }
    if (!isObj(o)) throw bad('not an object');
    const num = (k: string): number => {
      const v = o[k];
      if (typeof v !== 'number' || !Number.isFinite(v)) throw bad(`${k} must be a number, got ${JSON.stringify(v)}`);
      return v;
    };
    const str = (k: string): string => {
      const v = o[k];
      if (typeof v !== 'string') throw bad(`${k} must be a string, got ${JSON.stringify(v)}`);
      return v;
    };
    const key = (v: unknown, what: string): WatchKey => {
      if (!isObj(v) || typeof v['type'] !== 'string' || typeof v['partition'] !== 'string' || typeof v['namespace'] !== 'string' || typeof v['name'] !== 'string') {
        throw bad(`${what} must be {type, partition, namespace, name}, got ${JSON.stringify(v)}`);
      }
      return { type: v['type'], partition: v['partition'], namespace: v['namespace'], name: v['name'] };
    };
    const filter = (v: unknown, what: string): WatchFilterSpec => {
      if (!isObj(v) || typeof v['type'] !== 'string' || typeof v['partition'] !== 'string' || typeof v['namespace'] !== 'string' || (v['namePrefix'] !== undefined && typeof v['namePrefix'] !== 'string')) {
        throw bad(`${what} must be {type, partition, namespace, namePrefix?}, got ${JSON.stringify(v)}`);
      }
      return { type: v['type'], partition: v['partition'], namespace: v['namespace'], ...(typeof v['namePrefix'] === 'string' ? { namePrefix: v['namePrefix'] } : {}) };
    };
    const watcherOf = (): NonNullable<ReturnType<typeof watchers.get>> => {
      const id = str('watcher');
      const w = watchers.get(id);
      if (!w) throw bad(`watcher ${id} has no 'watcher' line before it`);
      return w;
    };
    switch (o['kind']) {
      case 'workload':
        workload = { owned: filter(o['owned'], 'owned'), listFilter: filter(o['listFilter'], 'listFilter') };
        return;
      case 'write': {
        const f = o['f'];
        const status = o['status'];
        if (f !== 'create' && f !== 'update' && f !== 'upsert' && f !== 'delete') throw bad(`f must be create, update, upsert or delete, got ${JSON.stringify(f)}`);
        if (status !== 'ok' && status !== 'fail' && status !== 'info') throw bad(`status must be ok, fail or info, got ${JSON.stringify(status)}`);
        const opt = <T>(k: string, check: (v: unknown) => v is T): { [x: string]: T } => {
          const v = o[k];
          if (v === undefined) return {};
          if (!check(v)) throw bad(`${k} has the wrong type: ${JSON.stringify(v)}`);
          return { [k]: v };
        };
        const isNum = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);
        const isJson = (v: unknown): v is JsonValue => v !== undefined;
        const isBool = (v: unknown): v is boolean => typeof v === 'boolean';
        if (f !== 'delete' && o['data'] === undefined) throw bad('an upsert needs its data');
        if (status === 'ok' && f !== 'delete' && (typeof o['revision'] !== 'number' || o['value'] === undefined)) throw bad('an ok upsert needs its revision and value');
        writes.push({
          f,
          status,
          key: key(o['key'], 'key'),
          ...opt('process', isNum),
          ...opt('data', isJson),
          ...opt('expectedVersion', isNum),
          ...opt('revision', isNum),
          ...opt('value', isJson),
          ...opt('deleted', isBool),
          ...opt('lastRevision', isNum),
          ...opt('lastValue', isJson),
          ...opt('start', isNum),
          ...opt('end', isNum),
        } as WatchWrite);
        return;
      }
      case 'watcher': {
        const id = str('watcher');
        if (watchers.has(id)) throw bad(`watcher ${id} started twice`);
        watchers.set(id, { filter: filter(o['filter'], 'filter'), connections: [{ from: { kind: 'initial' }, nodes: new Set(), events: [], tailed: false }] });
        return;
      }
      case 'event': {
        const w = watcherOf();
        const conn = w.connections[w.connections.length - 1] as (typeof w.connections)[number];
        const node = o['node'];
        const type = o['type'];
        if (type === 'reset') {
          conn.events.push({ type: 'error', code: `reset:${str('reason')}`, ...(typeof o['message'] === 'string' ? { message: o['message'] } : {}) });
          w.connections.push({ from: { kind: 'initial' }, nodes: new Set(), events: [], tailed: false });
          return;
        }
        if (typeof node === 'string') conn.nodes.add(node);
        const revision = num('revision');
        if (!Number.isSafeInteger(revision) || revision < 0) throw bad(`revision must be a non-negative integer, got ${revision}`);
        if (type === 'change' || type === 'delete') {
          if (o['value'] === undefined) throw bad('a change needs its value');
          conn.events.push({ type, revision, key: key(o['key'], 'key'), value: o['value'] as JsonValue });
        } else if (type === 'tail') {
          conn.tailed = true;
          conn.events.push({ type, revision });
        } else if (type === 'bookmark') {
          if (conn.tailed) conn.events.push({ type, revision });
          else droppedBookmarks++;
        } else throw bad(`type must be change, delete, tail, bookmark or reset, got ${JSON.stringify(type)}`);
        return;
      }
      case 'watcher-end':
        watcherOf();
        stats.set(str('watcher'), (o['stats'] ?? null) as JsonValue);
        return;
      case 'final-list': {
        const resources = o['resources'];
        if (!Array.isArray(resources)) throw bad('resources must be an array');
        finalList = {
          revision: num('revision'),
          resources: resources.map((r: unknown, j) => {
            if (!isObj(r) || typeof r['revision'] !== 'number' || r['value'] === undefined) throw bad(`resources[${j}] must be {key, revision, value}`);
            return { key: key(r['key'], `resources[${j}].key`), revision: r['revision'], value: r['value'] as JsonValue };
          }),
        };
        return;
      }
      default:
        throw bad(`unknown kind ${JSON.stringify(o['kind'])}`);
    }
  });
  if (!workload) throw new CairnError(ErrorCode.INVALID_ARGUMENT, 'watch log has no workload line');
  if (!finalList) throw new CairnError(ErrorCode.INVALID_ARGUMENT, 'watch log has no final-list line');
  const records: WatcherRecord[] = [...watchers].map(([id, w]) => ({
    id,
    filter: w.filter,
    connections: w.connections.map((c) => ({ from: c.from, ...(c.nodes.size > 0 ? { node: [...c.nodes].join(',') } : {}), events: c.events })),
  }));
  return { input: { watchers: records, writes, finalList, listFilter: workload.listFilter, owned: workload.owned }, stats, droppedBookmarks };
}
