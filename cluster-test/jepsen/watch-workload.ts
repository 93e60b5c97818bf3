/**
 * The watch workload (README.md, "Workloads"): writers create, update and delete a few Artists
 * (`jw-a0..3`, `jw-b0..3`) through the client library over every node, while watchers, each a
 * `client.watch()` of one filter started on a seeded node, keep resuming through the faults
 * (the client resumes on any node from its last complete revision, or re-lists after COMPACTED
 * or RESET). Some watchers start in the middle of the run. After the run: a final linearizable
 * List, every watcher followed until it has covered the List's revision, then everything is
 * written to one log (../checker/watch-log.ts) that `checkWatchRun` checks.
 */
import { CairnClient, isCairnClientError, isOutcomeUnknown, type Resource, type WatchSpec, type WatchStream } from '../../src/client/index.js';
import type { JsonValue, StateEntry, WatchFilterSpec, WatchKey } from '../checker/watch-checker.js';
import type { WatchWrite } from '../checker/watch-history.js';
import { toWatchLog, type WatchLogLine } from '../checker/watch-log.js';
import { Rng } from './schedule.js';
import type { Sample } from './workloads.js';

export const WATCH_TYPE = 'demo.v1.Artist';
const NAMESPACE = 'default';
/** The workload's keys: two prefixes, so a prefix watcher sees half of them. */
export const WATCH_NAMES: readonly string[] = ['a', 'b'].flatMap((p) => [0, 1, 2, 3].map((i) => `jw-${p}${i}`));
const GENRES = ['rock', 'jazz', 'pop', 'metal'] as const;

/** Every write of these is the workload's (so every value of them must come from one of its writes). */
export const WATCH_OWNED: WatchFilterSpec = { type: WATCH_TYPE, partition: 'default', namespace: NAMESPACE, namePrefix: 'jw-' };
/** What the final List selects: every Artist of every version and namespace, a superset of every watcher's filter. */
export const WATCH_LIST_FILTER: WatchFilterSpec = { type: 'demo.Artist', partition: 'default', namespace: '*' };

/**
 * The watchers' filters, in turn: the whole type in one namespace (it also sees the register
 * and set workloads' keys), the workload's prefix, every version in every namespace, half the
 * workload's keys.
 */
const FILTERS: readonly WatchSpec[] = [
  { type: WATCH_TYPE, namespace: NAMESPACE },
  { type: WATCH_TYPE, namespace: NAMESPACE, namePrefix: 'jw-' },
  { type: 'demo.Artist', namespace: '*' },
  { type: WATCH_TYPE, namespace: NAMESPACE, namePrefix: 'jw-a' },
];

export interface WatchWorkloadOptions {
  /** gRPC addresses of the nodes. */
  readonly endpoints: readonly string[];
  /** The nodes' names, in the order of `endpoints` (for the log). */
  readonly nodeNames?: readonly string[];
  /** The cluster CA the clients check the nodes against (the nodes run TLS); absent: plaintext. */
  readonly tls?: { readonly ca: string };
  /** The bearer token the clients send (the nodes run with access control, as TLS nodes do). */
  readonly token?: string;
  readonly seed: number;
  /** Milliseconds since the run started. */
  readonly now: () => number;
  /** Default 2. */
  readonly writers?: number;
  /** Default 4. */
  readonly watchers?: number;
  /** The third and fourth of every four watchers start at a seeded time in this window (ms after start); absent: all at once. */
  readonly lateStartWithinMs?: readonly [number, number];
  /** Per write, retries and failover included. Default 5 s. */
  readonly timeoutMs?: number;
}

type Artist = { name: string; genre: string };

function keyOf(r: Resource<unknown>): WatchKey {
  return { type: r.id.type, partition: r.id.tenancy.partition, namespace: r.id.tenancy.namespace, name: r.id.name };
}

/** The projection the checker compares: identity in the key; uid, version and data here. */
function valueOf(r: Resource<unknown>): JsonValue {
  return { uid: r.id.uid, version: r.version, data: (r.data ?? null) as JsonValue };
}

function filterOf(s: WatchSpec): WatchFilterSpec {
  return { type: s.type, partition: s.partition ?? 'default', namespace: s.namespace ?? 'default', ...(s.namePrefix !== undefined ? { namePrefix: s.namePrefix } : {}) };
}

function codeOf(e: unknown): string {
  if (isCairnClientError(e)) return `${e.code}${e.outcomeUnknown ? ' (unknown outcome)' : ''}`;
  return e instanceof Error ? e.message : String(e);
}

class Watcher {
  stream: WatchStream<unknown> | undefined;
  private loop: Promise<void> | undefined;
  /** Past the current initial state's tail. */
  tailed = false;
  /** Every change up to this revision has been delivered (since the current initial state). */
  through = -1;
  error: string | undefined;
  readonly client: CairnClient;

  constructor(
    readonly id: string,
    readonly spec: WatchSpec,
    private readonly endpoints: readonly string[],
    private readonly nodeNames: readonly string[],
    private readonly log: (l: WatchLogLine) => void,
    private readonly now: () => number,
    tls: { readonly ca: string } | undefined,
    token: string | undefined,
  ) {
    // `listed`: the caller rotated the endpoints so this watcher's node comes first; fail-over goes down the list.
    this.client = new CairnClient({ endpoints, endpointOrder: 'listed', ...(tls !== undefined ? { tls } : {}), ...(token !== undefined ? { token } : {}) });
  }

  get started(): boolean {
    return this.stream !== undefined;
  }

  start(): void {
    this.log({ kind: 'watcher', watcher: this.id, filter: filterOf(this.spec), t: this.now() });
    const stream = this.client.watch<unknown>(this.spec, { reconnectMaxMs: 1000 });
    this.stream = stream;
    this.loop = (async () => {
      try {
        for await (const ev of stream) {
          // The node serving the watch now; the event may have come from the one before (the client queues).
          const base = { kind: 'event' as const, watcher: this.id, t: this.now(), node: this.nodeNames[this.endpoints.indexOf(stream.endpoint)] ?? stream.endpoint };
          switch (ev.type) {
            case 'change':
            case 'delete': {
              const revision = Number(ev.revision);
              this.log({ ...base, type: ev.type, revision, key: keyOf(ev.resource), value: valueOf(ev.resource) });
              if (this.tailed) this.through = Math.max(this.through, revision);
              break;
            }
            case 'tail':
              this.tailed = true;
              this.through = Math.max(this.through, Number(ev.revision));
              this.log({ ...base, type: 'tail', revision: Number(ev.revision) });
              break;
            case 'bookmark':
              if (this.tailed) this.through = Math.max(this.through, Number(ev.revision));
              this.log({ ...base, type: 'bookmark', revision: Number(ev.revision) });
              break;
            case 'reset':
              // The watch starts over with a fresh initial state: a new baseline for the checker.
              this.tailed = false;
              this.through = -1;
              this.log({ ...base, type: 'reset', reason: ev.reason, message: ev.message });
              break;
          }
        }
      } catch (e) {
        // Only what retrying cannot fix ends a watch; the checker will find it short.
        this.error = codeOf(e);
      }
    })();
  }

  async close(): Promise<void> {
    this.stream?.close();
    await this.loop;
    const s = this.stream?.stats;
    this.log({
      kind: 'watcher-end',
      watcher: this.id,
      t: this.now(),
      stats: { streams: s?.streams ?? 0, resets: s?.resets ?? 0, duplicatesDropped: s?.duplicatesDropped ?? 0, lostBy: { ...(s?.lostBy ?? {}) }, ...(this.error !== undefined ? { error: this.error } : {}) },
    });
    this.client.close();
  }
}

export class WatchWorkload {
  readonly samples: Sample[] = [];
  readonly errors = new Map<string, number>();
  readonly lines: WatchLogLine[] = [];
  private readonly watchers: Watcher[] = [];
  private readonly writerClients: CairnClient[] = [];
  private readonly loops: Promise<void>[] = [];
  private readonly timers: NodeJS.Timeout[] = [];
  private running = false;
  private finalRevision: number | undefined;

  constructor(private readonly o: WatchWorkloadOptions) {
    this.lines.push({ kind: 'workload', owned: WATCH_OWNED, listFilter: WATCH_LIST_FILTER });
  }

  private log = (l: WatchLogLine): void => {
    this.lines.push(l);
  };

  /**
   * Opens the watchers that start at once and waits (up to `readyMs`) for their initial state,
   * so they cover the writes from the first; then starts the writers and schedules the late
   * watchers.
   */
  async start(readyMs = 30_000): Promise<void> {
    const rng = new Rng((this.o.seed ^ 0x5bd1e995) >>> 0);
    const n = this.o.watchers ?? 4;
    const names = this.o.nodeNames ?? this.o.endpoints;
    const late: Array<{ w: Watcher; at: number }> = [];
    const base = rng.int(this.o.endpoints.length);
    for (let i = 0; i < n; i++) {
      // Watchers start on different nodes (from a seeded one), so every node's faults hit one;
      // the rest follow in order for fail-over.
      const first = (base + i) % this.o.endpoints.length;
      const endpoints = [...this.o.endpoints.slice(first), ...this.o.endpoints.slice(0, first)];
      const nodeNames = [...names.slice(first), ...names.slice(0, first)];
      const w = new Watcher(`w${i}`, FILTERS[i % FILTERS.length] as WatchSpec, endpoints, nodeNames, this.log, this.o.now, this.o.tls, this.o.token);
      this.watchers.push(w);
      const window = this.o.lateStartWithinMs;
      if (window !== undefined && i % 4 >= 2) late.push({ w, at: window[0] + rng.int(Math.max(1, window[1] - window[0])) });
      else w.start();
    }
    const deadline = Date.now() + readyMs;
    while (this.watchers.some((w) => w.started && !w.tailed)) {
      if (Date.now() > deadline) throw new Error(`watch workload: watchers ${this.watchers.filter((w) => w.started && !w.tailed).map((w) => w.id).join(', ')} got no initial state within ${readyMs} ms`);
      await new Promise((r) => setTimeout(r, 50));
    }
    this.running = true;
    for (let k = 0; k < (this.o.writers ?? 2); k++) {
      const client = new CairnClient({ endpoints: this.o.endpoints, timeoutMs: this.o.timeoutMs ?? 5000, ...(this.o.tls !== undefined ? { tls: this.o.tls } : {}), ...(this.o.token !== undefined ? { token: this.o.token } : {}) });
      this.writerClients.push(client);
      this.loops.push(this.writer(k, client, new Rng((this.o.seed ^ (0x85ebca6b * (k + 1))) >>> 0)));
    }
    const t0 = this.o.now();
    for (const { w, at } of late) this.timers.push(setTimeout(() => (this.running ? w.start() : undefined), Math.max(0, at - t0)));
  }

  /** Stops the writers (waits for those in flight); late watchers not started by now never start. */
  async stop(): Promise<void> {
    this.running = false;
    for (const t of this.timers) clearTimeout(t);
    await Promise.all(this.loops);
  }

  /**
   * After every workload stopped and every fault healed: a linearizable List of every Artist
   * (retried until a node answers, up to `listMs`), then waits (up to `coverMs`) until every
   * watcher has covered its revision (quiet watchers get there with the server's bookmarks,
   * every 5 s), then closes the watchers. Returns the watchers that did not get there.
   */
  async finish(listMs = 60_000, coverMs = 30_000): Promise<string[]> {
    const client = new CairnClient({ endpoints: this.o.endpoints, timeoutMs: 5000, ...(this.o.tls !== undefined ? { tls: this.o.tls } : {}), ...(this.o.token !== undefined ? { token: this.o.token } : {}) });
    try {
      const deadline = Date.now() + listMs;
      for (;;) {
        try {
          const res = await client.list<unknown>(WATCH_LIST_FILTER.type, { namespace: '*', consistency: 'linearizable' });
          const resources: StateEntry[] = res.resources.map((r) => ({ key: keyOf(r), revision: Number(r.version), value: valueOf(r) }));
          this.finalRevision = Number(res.revision);
          this.log({ kind: 'final-list', revision: this.finalRevision, resources });
          break;
        } catch (e) {
          if (Date.now() > deadline) throw e;
          await new Promise((r) => setTimeout(r, 500));
        }
      }
    } finally {
      client.close();
    }
    const target = this.finalRevision;
    const behind = (): Watcher[] => this.watchers.filter((w) => w.started && w.error === undefined && (!w.tailed || w.through < target));
    const deadline = Date.now() + coverMs;
    while (behind().length > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    const short = behind().map((w) => `${w.id} (through ${w.through})`);
    for (const w of this.watchers) if (w.started) await w.close();
    return short;
  }

  /** The log (../checker/watch-log.ts), in the order things happened. */
  toJsonLines(): string {
    return toWatchLog(this.lines);
  }

  /** Per watcher, what the client went through: streams opened, resets, lost streams by code. */
  watcherStats(): { watchers: number; started: number; streams: number; resumes: number; resets: number; duplicatesDropped: number; lostBy: Record<string, number>; failed: string[] } {
    const lostBy: Record<string, number> = {};
    let streams = 0;
    let resets = 0;
    let dups = 0;
    const failed: string[] = [];
    for (const w of this.watchers) {
      const s = w.stream?.stats;
      if (!s) continue;
      streams += s.streams;
      resets += s.resets;
      dups += s.duplicatesDropped;
      for (const [k, v] of Object.entries(s.lostBy)) lostBy[k] = (lostBy[k] ?? 0) + v;
      if (w.error !== undefined) failed.push(`${w.id}: ${w.error}`);
    }
    const started = this.watchers.filter((w) => w.started).length;
    // Every stream after a watcher's first is a reconnect: a resume from the last complete revision, or a re-list after a reset.
    return { watchers: this.watchers.length, started, streams, resumes: streams - started, resets, duplicatesDropped: dups, lostBy, failed };
  }

  close(): void {
    for (const c of this.writerClients) c.close();
    for (const w of this.watchers) w.client.close();
  }

  private tally(e: unknown): void {
    const k = codeOf(e);
    this.errors.set(k, (this.errors.get(k) ?? 0) + 1);
  }

  /** Creates (create-only), compare-and-swap updates on a version read, blind upserts and deletes, each write's data tagged `w<writer>-<seq>`. */
  private async writer(worker: number, client: CairnClient, rng: Rng): Promise<void> {
    for (let seq = 1; this.running; seq++) {
      const name = rng.pick(WATCH_NAMES);
      const key: WatchKey = { type: WATCH_TYPE, partition: 'default', namespace: NAMESPACE, name };
      const ref = { type: WATCH_TYPE, name, tenancy: { namespace: NAMESPACE } };
      const data: Artist = { name: `w${worker}-${seq}`, genre: rng.pick(GENRES) };
      const r = rng.next();
      let f: WatchWrite['f'] = r < 0.3 ? 'create' : r < 0.6 ? 'update' : r < 0.75 ? 'upsert' : 'delete';
      const start = this.o.now();
      let version: string | undefined = f === 'create' ? '0' : undefined;
      if (f === 'update') {
        // Compare-and-swap on the version read; absent: create only.
        try {
          version = (await client.read<unknown>(ref, { consistency: 'linearizable' })).resource.version;
        } catch (e) {
          if (isCairnClientError(e, 'NOT_FOUND')) {
            version = '0';
            f = 'create';
          } else {
            // Nothing was written: a sample for the timeline, no write for the checker.
            this.tally(e);
            this.samples.push({ workload: 'watch', f, start, end: this.o.now(), status: 'fail' });
            continue;
          }
        }
      }
      let write: WatchWrite;
      try {
        if (f === 'delete') {
          const res = await client.delete<unknown>(ref);
          write = {
            process: worker,
            f,
            key,
            status: 'ok',
            deleted: res.deleted,
            ...(res.deleted && res.resource !== null ? { lastRevision: Number(res.resource.version), lastValue: valueOf(res.resource) } : {}),
          };
        } else {
          const res = await client.write<Artist>(ref, { data, ...(version !== undefined ? { version } : {}) });
          write = { process: worker, f, key, data, status: 'ok', ...(version !== undefined ? { expectedVersion: Number(version) } : {}), revision: Number(res.version), value: valueOf(res) };
        }
      } catch (e) {
        this.tally(e);
        // The client's contract: an error without outcomeUnknown means the write was not applied.
        write = { process: worker, f, key, ...(f !== 'delete' ? { data } : {}), ...(version !== undefined ? { expectedVersion: Number(version) } : {}), status: isOutcomeUnknown(e) ? 'info' : 'fail' };
      }
      const end = this.o.now();
      this.log({ kind: 'write', ...write, start, end });
      this.samples.push({ workload: 'watch', f, start, end, status: write.status });
    }
  }
}
