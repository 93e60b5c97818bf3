/**
 * Watches under concurrent writes, on real processes: every watcher sees exactly the committed
 * history through its filter (API.md "Watch": gap-free, no duplicates, in commit order, across
 * the initial-state/live boundary and across resumes on other nodes).
 *
 * Three `cairn agent` processes. Eight writers, concurrently and each through a random node, mix
 * creates (version "0"), unconditional upserts, read-then-compare-and-swap updates and deletes
 * over 32 Artists (two namespaces) and 8 Albums; every write carries a unique tag in its data.
 * Fifty watches with varied filters (type with and without a version, one namespace or `*`,
 * partition `*`, name prefixes) on 34 streams (some carry three watches), spread over the leader
 * and the followers: some start before the first write, some in the middle of the writes (a few
 * `at_tail`), and some streams are cut in the middle and resume (`gt_revision` = the last
 * revision each watch covered) on another node, twice for some.
 *
 * The committed history comes from a reference stream (a wildcard watch per type, opened before
 * any write): a delete's answer is the last stored state, not the delete's own revision, so the
 * writers' answers alone cannot place deletes. The history is then cross-checked: every
 * acknowledged write is in it at its acknowledged version with its value, every acknowledged
 * delete follows the state it returned, no write that failed (CAS) and no tag nobody wrote is in
 * it, and its state at the end equals a final linearizable List of each type. Then every watch,
 * the references included, is checked against it with the watch checker, and the state each
 * watch built is compared with the final List.
 *
 * WATCH_SEED=<n> repeats a run's choices (keys, operations, nodes; the seed is printed first;
 * the interleaving is the machine's); WATCH_OPS sets the operations per writer (default 100).
 */
import t from 'tap';
import {
  checkAcknowledged,
  checkHistoryAgainstList,
  checkWatchers,
  formatWatchAnomaly,
  historyFromReferences,
  type Acknowledgement,
  type JsonValue,
  type ListSnapshot,
  type StateEntry,
  type WatcherRecord,
  type WatchKey,
} from '../checker/watch-checker.js';
import { ALBUM, ARTIST, Cluster, describeResult, field, listAll, now, request, retryable, sleep, until, type ClusterNode, type HttpResult } from './harness.js';
import { projectResource, TrackedWatch, WatchStream, type WatchRequestSpec } from './watch-client.js';

const SEED = Number(process.env['WATCH_SEED'] ?? Math.floor(Math.random() * 2 ** 31));
const WRITERS = 8;
const OPS_PER_WRITER = Number(process.env['WATCH_OPS'] ?? 100);
const WATCHERS = 50;
const NAMESPACES = ['ns-a', 'ns-b'] as const;
const ARTIST_NAMES = [...['red', 'blue'].flatMap((c) => Array.from({ length: 8 }, (_, i) => `${c}-${i}`))];
const ALBUM_NAMES = Array.from({ length: 4 }, (_, i) => `album-${i}`);
const GENRES = ['rock', 'jazz', 'pop', 'metal'];

/** mulberry32: a small seeded generator, so a run's choices can be replayed. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let x = a;
    x = Math.imul(x ^ (x >>> 15), x | 1);
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61);
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
}

/** The filters the watches cycle through. */
const FILTERS: readonly WatchRequestSpec[] = [
  { type: ARTIST, namespace: '*' },
  { type: ARTIST, namespace: 'ns-a' },
  { type: ARTIST, namespace: 'ns-b' },
  { type: ARTIST, namespace: '*', name_prefix: 'red-' },
  { type: ARTIST, namespace: 'ns-b', name_prefix: 'blue-' },
  { type: 'demo.Artist', namespace: '*' },
  { type: ALBUM, namespace: '*' },
  { type: ALBUM, namespace: 'ns-a' },
  { type: ARTIST, partition: '*', namespace: '*' },
  { type: ARTIST, namespace: 'ns-a', name_prefix: 'blue-1' },
];

interface WriteOutcome {
  readonly status: 'ok' | 'fail' | 'unknown';
  readonly result: HttpResult | undefined;
}

t.test('fifty watchers under eight concurrent writers see exactly the committed history', async (t) => {
  const started = now();
  t.comment(`WATCH_SEED=${SEED}`);
  const random = rng(SEED);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)] as T;

  const cluster = await Cluster.start(t, { size: 3, flags: ['--watch-bookmark-ms', '200'] });
  const { leader, followers } = await cluster.roles();
  const nodes: ClusterNode[] = [leader, ...followers];
  t.comment(`leader ${leader.id}, followers ${followers.map((f) => f.id).join(' ')}`);

  // ---- The reference stream, before any write ------------------------------------------------
  const refArtist = new TrackedWatch('ref-artist', { type: ARTIST, namespace: '*' }, false);
  const refAlbum = new TrackedWatch('ref-album', { type: ALBUM, namespace: '*' }, false);
  const reference = new WatchStream('reference', [refArtist, refAlbum]);
  await reference.open(leader);

  // Write progress, which the mid-write steps follow.
  const total = WRITERS * OPS_PER_WRITER;
  let done = 0;
  let writersDone = 0;
  /** Waits for `n` more operations by the other writers (the caller is one, blocked in a milestone). */
  const moreWrites = async (n: number): Promise<void> => {
    const from = done;
    await until(`${n} more operations (at ${from})`, 30_000, async () => (done >= from + n || writersDone >= WRITERS - 1 ? true : undefined), () => `${done} done`, 10);
  };

  // ---- The watches: 50, on 34 streams, in three start phases -----------------------------------
  const streams: Array<{ stream: WatchStream; phase: 0 | 1 | 2; home: number }> = [];
  {
    let w = 0;
    for (let s = 0; w < WATCHERS; s++) {
      const size = Math.min(s % 4 === 3 ? 3 : 1, WATCHERS - w);
      const phase = s < 20 ? 0 : s < 27 ? 1 : 2;
      const watches: TrackedWatch[] = [];
      for (let k = 0; k < size; k++, w++) {
        // The watches that start in the middle share a few filters on one node per phase, so
        // later ones get the node's cached initial state (shared for a second) plus the
        // changes since; some of them skip the initial state.
        const filter = FILTERS[phase === 0 ? w % FILTERS.length : w % 4] as WatchRequestSpec;
        watches.push(new TrackedWatch(`w${w}`, filter, phase > 0 && w % 4 === 1));
      }
      streams.push({ stream: new WatchStream(`s${s}`, watches), phase, home: phase === 0 ? s % nodes.length : phase === 1 ? 1 : 0 });
    }
  }
  const allWatches = streams.flatMap((s) => s.stream.watches);
  /** Opens the phase's streams one after another, with writes committed in between. */
  const openPhase = async (phase: number): Promise<void> => {
    for (const s of streams.filter((x) => x.phase === phase)) {
      await s.stream.open(nodes[s.home] as ClusterNode);
      if (phase > 0) await moreWrites(2);
    }
  };
  /** Cuts the streams `which` selects and reopens each on the next node: its watches resume. */
  let cuts = 0;
  const cutAndResume = async (which: (index: number) => boolean): Promise<void> => {
    await Promise.all(
      streams.map(async (s, i) => {
        if (!which(i) || !s.stream.isOpen) return;
        await s.stream.close();
        s.home = (s.home + 1) % nodes.length;
        cuts++;
        await s.stream.open(nodes[s.home] as ClusterNode);
      }),
    );
  };
  await openPhase(0);

  // ---- The writers -----------------------------------------------------------------------------
  const phaseLog: string[] = [];
  /** What to do in the middle of the writes, at a fraction of the operations done. */
  const milestones: Array<{ at: number; what: string; run: () => Promise<void>; fired?: boolean }> = [
    { at: 0.25, what: 'open the phase-1 streams', run: () => openPhase(1) },
    { at: 0.4, what: 'cut every other stream, resume on the next node', run: () => cutAndResume((i) => i % 2 === 0) },
    { at: 0.6, what: 'open the phase-2 streams', run: () => openPhase(2) },
    { at: 0.7, what: 'cut streams 1, 7, 13, ..., resume on the next node', run: () => cutAndResume((i) => i % 6 === 1) },
    { at: 0.85, what: 'cut them again, and every phase-1 and phase-2 stream', run: () => cutAndResume((i) => i % 6 === 1 || i >= 20) },
  ];
  /** After each operation: the writer that crosses a milestone carries it out (the others keep writing). */
  const progress = async (): Promise<void> => {
    done++;
    for (const m of milestones) {
      if (m.fired === true || done < m.at * total) continue;
      m.fired = true;
      await m.run();
      phaseLog.push(`${m.what} at ${done}/${total} operations`);
    }
  };

  const acks: Acknowledgement[] = [];
  const tagsAttempted = new Map<string, 'ok' | 'fail' | 'unknown'>();
  const counts = { create: 0, upsert: 0, cas: 0, delete: 0, failed: 0, unknown: 0, deletedNothing: 0 };
  const retries = new Map<string, number>();
  const refusals = new Map<string, number>();

  const keyOf = (type: string, namespace: string, name: string): WatchKey => ({ type, partition: 'default', namespace, name });
  const resourcePath = (type: string, namespace: string, name: string): string => `/v1/resource/${type}/${name}?namespace=${namespace}`;

  /** One request, retried under its Idempotency-Key while the outcome is unknown, each time through a random node. */
  async function send(method: string, path: string, body: unknown, idem: string | undefined): Promise<WriteOutcome> {
    const deadline = now() + 30_000;
    for (let attempt = 1; ; attempt++) {
      const node = pick(nodes);
      const r = await request(`${node.url}${path}`, { method, ...(body !== undefined ? { body } : {}), headers: idem !== undefined ? { 'idempotency-key': idem } : {}, timeoutMs: 10_000 });
      if (r.status === 200) return { status: 'ok', result: r };
      if (!retryable(r)) {
        // A definite refusal: not applied. CAS_FAILED, or NOT_FOUND for a CAS on what was deleted since the read.
        refusals.set(describeResult(r), (refusals.get(describeResult(r)) ?? 0) + 1);
        return { status: 'fail', result: r };
      }
      retries.set(describeResult(r), (retries.get(describeResult(r)) ?? 0) + 1);
      if (now() > deadline) return { status: 'unknown', result: r };
      await sleep(Math.min(50 * attempt, 250));
    }
  }

  async function writer(wi: number): Promise<void> {
    for (let seq = 0; seq < OPS_PER_WRITER; seq++) {
      const tag = `w${wi}-${seq}`;
      const isAlbum = random() < 0.2;
      const type = isAlbum ? ALBUM : ARTIST;
      const namespace = pick(NAMESPACES);
      const name = pick(isAlbum ? ALBUM_NAMES : ARTIST_NAMES);
      const key = keyOf(type, namespace, name);
      const path = resourcePath(type, namespace, name);
      const data = isAlbum ? { title: tag, year: 1990 + (seq % 30) } : { name: tag, genre: pick(GENRES) };
      const r = random();
      const op = r < 0.3 ? 'create' : r < 0.55 ? 'upsert' : r < 0.75 ? 'cas' : 'delete';
      counts[op]++;
      let out: WriteOutcome;
      if (op === 'delete') {
        out = await send('DELETE', path, undefined, tag);
        if (out.status === 'ok') {
          const res = field(out.result?.body, 'resource');
          if (field(out.result?.body, 'deleted') === true && res !== undefined) {
            acks.push({ kind: 'delete', key, lastRevision: Number(field(res, 'version')), what: tag });
          } else counts.deletedNothing++;
        }
      } else {
        let version: string | undefined = op === 'create' ? '0' : undefined;
        if (op === 'cas') {
          // Read, then compare-and-swap on what was read (absent: create only).
          const got = await request(`${pick(nodes).url}${path}`, { timeoutMs: 10_000 });
          const v = field(got.body, 'version');
          version = got.status === 200 && typeof v === 'string' ? v : '0';
        }
        out = await send('PUT', path, { data, ...(version !== undefined ? { version } : {}) }, tag);
        tagsAttempted.set(tag, out.status);
        if (out.status === 'ok') {
          const { key: k, value } = projectResource(out.result?.body);
          acks.push({ kind: 'upsert', key: k, revision: Number(field(out.result?.body, 'version')), value, what: tag });
        }
      }
      if (out.status === 'fail') counts.failed++;
      if (out.status === 'unknown') {
        counts.unknown++;
        t.comment(`${op} ${tag} of ${name}: outcome unknown (${out.result ? describeResult(out.result) : 'no answer'} ${JSON.stringify(out.result?.body ?? null)})`);
      }
      await progress();
    }
    writersDone++;
  }

  const writesStarted = now();
  await Promise.all(Array.from({ length: WRITERS }, (_, wi) => writer(wi)));
  const writeSecs = (now() - writesStarted) / 1000;
  const tally = (m: Map<string, number>): string => [...m].map(([k, v]) => `${k} x${v}`).join(', ') || 'none';
  t.comment(`${total} operations in ${writeSecs.toFixed(1)} s: ${JSON.stringify(counts)}; refused: ${tally(refusals)}; retried attempts: ${tally(retries)}`);
  t.same([...refusals.keys()].filter((k) => k !== '409 CAS_FAILED' && k !== '404 NOT_FOUND'), [], 'writes were refused only for CAS (no bad request)');
  for (const l of phaseLog) t.comment(l);
  t.equal(phaseLog.length, milestones.length, 'every mid-write step ran');
  t.equal(counts.unknown, 0, 'no write ended with an unknown outcome (there are no faults)');

  // ---- The final state, and every watch brought up to it ------------------------------------------
  const finalList = async (type: string): Promise<ListSnapshot> => {
    // Every page, at the first page's revision (lists are paged).
    const r = await listAll(pick(nodes), type, { namespace: '*', consistency: 'linearizable' });
    const resources: StateEntry[] = r.items.map((it: unknown) => {
      const { key, value } = projectResource(it);
      return { key, revision: Number(field(it, 'version')), value };
    });
    return { revision: Number(r.revision), resources };
  };
  const lists = { artist: await finalList(ARTIST), album: await finalList(ALBUM) };
  const target = Math.max(lists.artist.revision, lists.album.revision);
  const everyWatch = [refArtist, refAlbum, ...allWatches];
  await until(
    `every watch to cover revision ${target} (an event or a bookmark at or after it)`,
    30_000,
    async () => (everyWatch.every((w) => (w.covered ?? -1) >= target) ? true : undefined),
    () => {
      const behind = everyWatch.filter((w) => (w.covered ?? -1) < target);
      return `${behind.length} behind: ${behind.slice(0, 5).map((w) => `${w.id} at ${String(w.covered)}`).join(', ')}`;
    },
    50,
  );
  await Promise.all([reference, ...streams.map((s) => s.stream)].map((s) => s.close()));
  const garbage = [reference, ...streams.map((s) => s.stream)].flatMap((s) => s.garbage);
  t.same(garbage, [], 'every line of every stream was a known event');
  const endings = [reference, ...streams.map((s) => s.stream)].flatMap((s) => s.endings).filter((e) => e !== 'closed');
  t.same(endings, [], 'no stream ended other than by the client closing it');

  // ---- The committed history, and its cross-checks ---------------------------------------------------
  const refs = [refArtist.record(), refAlbum.record()];
  const history = historyFromReferences(refs);
  t.comment(`history: ${history.changes.length} changes in (${history.start.revision}, ${history.completeThrough}], ${history.start.resources.length} resources at the start`);
  t.equal(history.start.resources.length, 0, 'the references started on an empty store');
  t.ok(history.completeThrough >= target, 'the history reaches the final Lists');

  const ackCheck = checkAcknowledged(history, acks);
  t.equal(ackCheck.checked, acks.length, 'every acknowledgement falls inside the history');
  t.same(ackCheck.problems, [], `every acknowledged write is in the history as acknowledged (${ackCheck.checked} checked)`);
  const tagOf = (v: JsonValue | undefined): string | undefined => {
    const d = field(v, 'data');
    const s = field(d, 'name') ?? field(d, 'title');
    return typeof s === 'string' ? s : undefined;
  };
  const stray: string[] = [];
  for (const c of history.changes) {
    if (c.kind !== 'upsert') continue;
    const tag = tagOf(c.value);
    const status = tag !== undefined ? tagsAttempted.get(tag) : undefined;
    if (status !== 'ok' && status !== 'unknown') stray.push(`${c.revision} ${c.key.namespace}/${c.key.name}: tag ${String(tag)} (${status ?? 'never written'})`);
  }
  t.same(stray, [], 'every committed write is one a writer made and was not told failed');
  const upserts = history.changes.filter((c) => c.kind === 'upsert').length;
  t.equal(upserts, acks.filter((a) => a.kind === 'upsert').length, 'as many committed writes as acknowledged ones (nothing applied twice or unacknowledged)');
  t.equal(history.changes.length - upserts, acks.filter((a) => a.kind === 'delete').length, 'as many committed deletes as deletes acknowledged with deleted: true');
  t.same(checkHistoryAgainstList(history, lists.artist, { type: ARTIST, partition: 'default', namespace: '*' }), [], 'the history ends in the final Artist List');
  t.same(checkHistoryAgainstList(history, lists.album, { type: ALBUM, partition: 'default', namespace: '*' }), [], 'the history ends in the final Album List');

  // ---- Every watch against the history --------------------------------------------------------------
  const records: WatcherRecord[] = [...refs, ...allWatches.map((w) => w.record())];
  const listFor = (w: WatcherRecord): ListSnapshot => (w.filter.type.endsWith('Album') ? lists.album : lists.artist);
  const result = checkWatchers(history, records, listFor);
  for (const a of result.anomalies.slice(0, 30)) t.comment(formatWatchAnomaly(a));
  t.ok(result.valid, `every watch saw exactly the committed history (${result.anomalies.length} anomalies)`);
  const starts = { initial: 0, atTail: 0, resume: 0 };
  for (const r of records) for (const c of r.connections) starts[c.from.kind === 'at-tail' ? 'atTail' : c.from.kind]++;
  const nodesUsed = new Set(records.flatMap((r) => r.connections.map((c) => c.node)));
  const resumedElsewhere = records.filter((r) => r.connections.some((c, i) => i > 0 && c.node !== r.connections[i - 1]?.node)).length;
  t.ok(result.resumes >= 20, `many watches resumed (${result.resumes})`);
  t.ok(starts.atTail >= 3, `some watches started at the tail (${starts.atTail})`);
  t.ok(result.eventsChecked > 5 * history.changes.length, `the watches checked many events (${result.eventsChecked})`);
  t.equal(nodesUsed.size, 3, 'watches were served by every node');
  const filters = new Set(records.map((r) => JSON.stringify(r.filter)));
  t.comment(
    `checked ${result.watchers} watches (${WATCHERS} + 2 references, ${filters.size} filters) on ${streams.length + 1} streams: ${result.connections} connections (${starts.initial} initial state, ${starts.atTail} at tail, ${starts.resume} resumes, ${cuts} stream cuts, ${resumedElsewhere} watches resumed on another node), ${result.eventsChecked} events checked against ${history.changes.length} committed changes and ${acks.length} acknowledgements, final Lists at ${lists.artist.revision}/${lists.album.revision}; ${((now() - started) / 1000).toFixed(1)} s in all`,
  );
});

