import * as grpc from '@grpc/grpc-js';
import protobuf from 'protobufjs/minimal.js';
import t, { type Test } from 'tap';
import { cairn } from '../gen/resource.js';
import type { Subscription } from '../stream/index.js';
import type { Agent } from './agent.js';
import { Agents, ChangeLog, Http, heapUsedAfterGc, until, type FilterJson } from './testing/watch-harness.js';

/**
 * The gRPC watch (ResourceService.WatchList, proto/cairn/resource/v1/resource.proto) against
 * real agents in this process, through a raw @grpc/grpc-js client and the generated codecs:
 * events and their encoding, Consul's framing (snapshot_on_compacted), errors as statuses
 * with the cairn-error-code trailer, flow control (a client that does not read), the
 * future-revision timeout, restore and shutdown. The HTTP test (watch-http.test.ts) covers the
 * shared semantics in more depth; this one checks them on the gRPC path.
 */

const pb = cairn.resource.v1;
const A1 = 'demo.v1.Artist';
const ALBUM = 'demo.v1.Album';
const EXEC = 'demo.v1.Executive';
const WATCH_LIST = '/cairn.resource.v1.ResourceService/WatchList';
const BOOKMARK_MS = 300;
const BUFFER = 200;
const WINDOW = 20;

interface Codec {
  encode(m: object): { finish(): Uint8Array };
  decode(b: Uint8Array): object;
  toObject(m: object, o: object): object;
}
const codec = (c: unknown): Codec => c as Codec;
const EVENT_OBJECT = { longs: String, enums: String, defaults: true, arrays: true, objects: true, oneofs: true };
const LIST_OBJECT = { longs: String, enums: String, defaults: true, arrays: true, objects: true };

interface ResourceMsg {
  id: { type: string; tenancy: { partition: string; namespace: string }; name: string; uid: string };
  version: string;
  dataJson: string;
}

/** A decoded WatchEvent: `event` names the oneof field that is set. */
interface Ev {
  watch: number;
  revision: string;
  event: 'change' | 'delete' | 'tail' | 'bookmark' | 'newSnapshotToFollow' | 'endOfSnapshot';
  change?: ResourceMsg;
  delete?: ResourceMsg;
}

function decodeEvent(b: Buffer): Ev {
  const o = codec(pb.WatchEvent).toObject(codec(pb.WatchEvent).decode(b), EVENT_OBJECT) as Partial<Ev>;
  return { ...o, watch: o.watch ?? 0, revision: o.revision ?? '', event: o.event as Ev['event'] };
}

interface WatchMsg {
  type: string;
  tenancy?: { partition?: string; namespace?: string };
  namePrefix?: string;
  gtRevision?: string;
  atTail?: boolean;
  snapshotOnCompacted?: boolean;
}

/**
 * One WatchList call, read as it arrives; with `read: false` it is paused at once (grpc-js then
 * holds a few messages and pauses its HTTP/2 stream, so flow control pushes back on the server)
 * until `read()`. (A grpc-js stream that is never read at all does not push back: the library
 * keeps parsing into an unbounded list until the first read.)
 */
class GrpcWatch {
  readonly events: Ev[] = [];
  status: grpc.StatusObject | undefined;
  readonly call: grpc.ClientReadableStream<Ev>;

  constructor(client: grpc.Client, req: { watches: WatchMsg[] } | Buffer, opts: { read?: boolean } = {}) {
    const serialize = (x: { watches: WatchMsg[] } | Buffer): Buffer => (Buffer.isBuffer(x) ? x : Buffer.from(codec(pb.WatchListRequest).encode(x).finish()));
    this.call = client.makeServerStreamRequest(WATCH_LIST, serialize, decodeEvent, req, new grpc.Metadata(), {});
    this.call.on('status', (s: grpc.StatusObject) => (this.status = s));
    this.call.on('error', () => undefined); // the status says it all
    this.call.on('data', (e: Ev) => this.events.push(e));
    if (opts.read === false) this.call.pause();
  }

  read(): void {
    this.call.resume();
  }

  get ended(): boolean {
    return this.status !== undefined;
  }

  /** The cairn-error-code trailer of the final status. */
  get code(): string | undefined {
    const v = this.status?.metadata.get('cairn-error-code')[0];
    return typeof v === 'string' ? v : undefined;
  }

  get details(): Record<string, unknown> {
    const v = this.status?.metadata.get('cairn-error-details-json')[0];
    return typeof v === 'string' ? (JSON.parse(v) as Record<string, unknown>) : {};
  }

  /** Events of watch `i`, bookmarks left out. */
  of(i: number): Ev[] {
    return this.events.filter((e) => e.watch === i && e.event !== 'bookmark');
  }

  until(cond: (w: this) => boolean, ms: number, what: string): Promise<void> {
    return until(() => cond(this), ms, what, () => `${this.events.length} events, last ${JSON.stringify(this.events.slice(-3).map(brief))}${this.status ? `, status ${this.status.code} ${this.status.details}` : ''}`);
  }

  cancel(): void {
    this.call.cancel();
  }
}

const brief = (e: Ev): string => {
  const r = e.change ?? e.delete;
  return `${e.event}:${e.watch}@${e.revision}${r ? `:${r.id.name}` : ''}`;
};
const briefs = (es: Ev[]): string[] => es.map(brief);

function newClient(agent: Agent): grpc.Client {
  // A local subchannel pool: its own connection, so one client's unread stream cannot hold up another's.
  return new grpc.Client(agent.grpcAddress, grpc.credentials.createInsecure(), { 'grpc.use_local_subchannel_pool': 1 });
}

/** gRPC List, for comparing encodings: the resources as the generated toObject gives them. */
function grpcList(client: grpc.Client, type: string, tenancy: { partition?: string; namespace?: string } = {}, namePrefix = ''): Promise<{ resources: ResourceMsg[]; revision: string }> {
  return new Promise((resolve, reject) => {
    client.makeUnaryRequest(
      '/cairn.resource.v1.ResourceService/List',
      (x: object) => Buffer.from(codec(pb.ListRequest).encode(x).finish()),
      (b: Buffer) => codec(pb.ListResponse).toObject(codec(pb.ListResponse).decode(b), LIST_OBJECT) as { resources: ResourceMsg[]; revision: string },
      { type, tenancy: { partition: tenancy.partition ?? '', namespace: tenancy.namespace ?? '' }, namePrefix },
      (err, res) => (err || !res ? reject(err ?? new Error('no answer')) : resolve(res)),
    );
  });
}

/** The fields of a decoded resource message that say which version of what it is. */
const ident = (r: ResourceMsg | undefined): string => (r ? `${r.id.type} ${r.id.tenancy.partition}/${r.id.tenancy.namespace}/${r.id.name}@${r.version}` : '?');

const agents = new Agents(t);
let main: Agent;
let api: Http;
let log: ChangeLog;
let client: grpc.Client;
/** Started first: a resume from a revision the node never reaches, ended by the 10 s bound. */
let far: { w: GrpcWatch; startedMs: number; endedMs: number };

t.before(async () => {
  main = await agents.dev({ watchBookmarkMs: BOOKMARK_MS, watchBufferEvents: BUFFER, watchWindowEvents: WINDOW });
  api = new Http(main);
  log = new ChangeLog(main);
  client = newClient(main);
  const w = new GrpcWatch(client, { watches: [{ type: A1, tenancy: { namespace: '*' }, gtRevision: '1000000000' }] });
  far = { w, startedMs: Date.now(), endedMs: 0 };
  w.call.on('status', () => (far.endedMs = Date.now()));
});
t.teardown(() => client.close());

const pub = (a: Agent = main): NonNullable<ReturnType<Agent['publisher']>> => {
  const p = a.publisher();
  if (!p) throw new Error('no publisher');
  return p;
};

t.test('initial state (encoded as List encodes it), tail, live events, deletes; overlapping watches; bookmarks', async (t) => {
  for (let i = 0; i < 12; i++) await api.write(A1, `g${i}`, { namespace: 'basic' }, { data: { name: `g${i}` } });
  await api.write(A1, 'h1', { namespace: 'basic2' }, { data: { name: 'h1' } });
  const specs: Array<{ w: WatchMsg; list: () => ReturnType<typeof grpcList> }> = [
    { w: { type: A1, tenancy: { namespace: 'basic' } }, list: () => grpcList(client, A1, { namespace: 'basic' }) },
    { w: { type: 'demo.Artist', tenancy: { namespace: '*' }, namePrefix: 'g1' }, list: () => grpcList(client, 'demo.Artist', { namespace: '*' }, 'g1') },
    { w: { type: 'demo.Artist', tenancy: { partition: '*', namespace: 'basic2' } }, list: () => grpcList(client, 'demo.Artist', { partition: '*', namespace: 'basic2' }) },
  ];
  const lists = await Promise.all(specs.map((s) => s.list()));
  const w = new GrpcWatch(client, { watches: specs.map((s) => s.w) });
  t.teardown(() => w.cancel());
  await w.until((x) => specs.every((_, i) => x.of(i).some((e) => e.event === 'tail')), 10_000, 'every tail');
  specs.forEach((_, i) => {
    const evs = w.of(i);
    const list = lists[i] as { resources: ResourceMsg[]; revision: string };
    t.ok(list.resources.length > 0, `watch ${i} has an initial state`);
    t.same(evs.slice(0, -1).map((e) => e.change), list.resources, `watch ${i}: the initial state is List's, message for message`);
    t.ok(evs.slice(0, -1).every((e) => e.event === 'change' && e.revision === e.change?.version), `watch ${i}: changes at each resource's version`);
    t.same(evs.at(-1), { watch: i, revision: list.revision, event: 'tail', tail: {} }, `watch ${i}: then tail at List's revision`);
  });
  const start = Number(lists[0]?.revision);
  const upd = await api.write(A1, 'g1', { namespace: 'basic' }, { data: { name: 'g1 again' } });
  const last = await api.write(A1, 'g10', { namespace: 'basic' }, { data: { name: 'g10 last' } });
  await api.del(A1, 'g10', { namespace: 'basic' });
  await api.write(A1, 'h2', { namespace: 'basic2' }, { data: { name: 'h2' } });
  const end = pub().revision;
  await w.until((x) => x.events.some((e) => e.event === 'bookmark' && Number(e.revision) >= end), 10_000, 'a bookmark after the writes');
  const filters: FilterJson[] = [{ type: A1, namespace: 'basic' }, { type: 'demo.Artist', namespace: '*', name_prefix: 'g1' }, { type: 'demo.Artist', partition: '*', namespace: 'basic2' }];
  filters.forEach((f, i) => {
    const got = w.of(i).slice(w.of(i).findIndex((e) => e.event === 'tail') + 1);
    const want = log.expected(start, f).map((x) => `${x.type} ${x.value.id.type} ${x.value.id.tenancy.partition}/${x.value.id.tenancy.namespace}/${x.value.id.name}@${x.value.version} rev ${x.revision}`);
    t.same(got.map((e) => `${e.event} ${ident(e.change ?? e.delete)} rev ${e.revision}`), want, `watch ${i}: the live events`);
  });
  const del = w.of(0).find((e) => e.event === 'delete');
  t.equal(del?.delete?.version, last.version, 'the delete carries the last stored state');
  t.equal(JSON.parse(del?.delete?.dataJson ?? 'null').name, 'g10 last');
  t.same(briefs(w.of(1).filter((e) => e.change?.version === upd.version)), [`change:1@${upd.version}:g1`], 'the overlapping watch got the update too');
  const bm = w.events.filter((e) => e.event === 'bookmark').at(-1);
  t.same(bm, { watch: 0, revision: String(end), event: 'bookmark', bookmark: {} }, 'a bookmark: watch unset, the current revision');
});

t.test('resume from every revision in the window, then tail; older gets OUT_OF_RANGE with cairn-error-code COMPACTED', async (t) => {
  for (let i = 0; i < WINDOW + 10; i++) {
    if (i % 6 === 5) await api.del(A1, `r${(i - 1) % 8}`, { namespace: 'res' }).catch(() => undefined);
    else await api.write(i % 3 === 0 ? ALBUM : A1, `r${i % 8}`, { namespace: 'res' }, { data: i % 3 === 0 ? { title: `t${i}` } : { name: `n${i}` } });
  }
  const p = pub();
  const current = p.revision;
  const oldest = p.oldestResumable;
  t.ok(oldest > 1 && current - oldest >= 10, `a window of ${oldest}..${current}`);
  const filters: FilterJson[] = [{ type: A1, namespace: 'res' }, { type: 'demo.Album', namespace: '*' }];
  const msgs: WatchMsg[] = [];
  const want: string[][] = [];
  for (let r = oldest; r <= current; r++) {
    for (const f of filters) {
      msgs.push({ type: f.type, tenancy: { namespace: f.namespace ?? '' }, gtRevision: String(r) });
      want.push([...log.expected(r, f).map((x) => `${x.type === 'delete' ? 'delete' : 'change'}:${x.revision}:${x.value.id.name}@${x.value.version}`), `tail:${current}`]);
    }
  }
  t.ok(msgs.length <= 64);
  const w = new GrpcWatch(client, { watches: msgs });
  t.teardown(() => w.cancel());
  await w.until((x) => msgs.every((_, i) => x.of(i).some((e) => e.event === 'tail')), 10_000, 'every tail');
  let bad = 0;
  msgs.forEach((m, i) => {
    const got = w.of(i).map((e) => (e.event === 'tail' ? `tail:${e.revision}` : `${e.event}:${e.revision}:${(e.change ?? e.delete)?.id.name}@${(e.change ?? e.delete)?.version}`));
    if (JSON.stringify(got) !== JSON.stringify(want[i])) {
      bad++;
      t.same(got, want[i], `resume ${m.type} after ${m.gtRevision}`);
    }
  });
  t.equal(bad, 0, `${msgs.length} resumes (every revision ${oldest}..${current}): exactly the later changes, then tail`);
  const old = new GrpcWatch(client, { watches: [{ type: A1, tenancy: { namespace: 'res' }, gtRevision: String(oldest - 1) }] });
  await old.until((x) => x.ended, 10_000, 'the end');
  t.equal(old.status?.code, grpc.status.OUT_OF_RANGE, 'a resume before the window: OUT_OF_RANGE');
  t.equal(old.code, 'COMPACTED', 'with cairn-error-code COMPACTED');
  t.equal(old.details['revision'], String(oldest), 'naming the oldest resumable revision');
  t.equal(old.details['watch'], 0, 'and the watch');
  t.same(old.events, [], 'and nothing before it');
});

t.test('snapshot_on_compacted: Consul framing for compacted resumes, fresh watches, and resumes in the window', async (t) => {
  for (let i = 0; i < 6; i++) await api.write(A1, `f${i}`, { namespace: 'frame' }, { data: { name: `f${i}` } });
  for (let i = 0; i < WINDOW + 5; i++) await api.write(ALBUM, `filler${i % 3}`, { namespace: 'frame' }, { data: { title: `x${i}` } });
  const p = pub();
  const inWindow = p.revision; // a resume from here misses exactly the next write
  const missed = await api.write(A1, 'f1', { namespace: 'frame' }, { data: { name: 'f1 missed' } });
  const latest = p.revision;
  const oldest = p.oldestResumable;
  t.ok(oldest > 0 && inWindow >= oldest, `a window starting at ${oldest}`);
  const list = await grpcList(client, A1, { namespace: 'frame' });
  t.equal(list.revision, String(latest));
  const ten = { namespace: 'frame' };
  const w = new GrpcWatch(client, {
    watches: [
      { type: A1, tenancy: ten, gtRevision: '0', snapshotOnCompacted: true }, // 0: compacted
      { type: A1, tenancy: ten, snapshotOnCompacted: true }, // 1: fresh
      { type: A1, tenancy: ten, gtRevision: String(latest), snapshotOnCompacted: true }, // 2: at the latest revision
      { type: A1, tenancy: ten, gtRevision: String(inWindow), snapshotOnCompacted: true }, // 3: in the window
    ],
  });
  t.teardown(() => w.cancel());
  await w.until((x) => x.of(0).some((e) => e.event === 'endOfSnapshot') && x.of(1).some((e) => e.event === 'endOfSnapshot') && x.of(3).length > 0, 10_000, 'the initial states');
  const initial = list.resources.map((r) => `change:${r.id.name}@${r.version}`);
  const show = (es: Ev[]): string[] => es.map((e) => (e.change || e.delete ? `${e.event}:${(e.change ?? e.delete)?.id.name}@${(e.change ?? e.delete)?.version}` : `${e.event}@${e.revision}`));
  t.same(show(w.of(0)), [`newSnapshotToFollow@${oldest}`, ...initial, `endOfSnapshot@${latest}`], 'compacted: new_snapshot_to_follow (at the oldest resumable revision), the fresh initial state, end_of_snapshot');
  t.same(w.of(0).slice(1, -1).map((e) => e.change), list.resources, 'the fresh initial state is List\'s');
  t.same(show(w.of(1)), [...initial, `endOfSnapshot@${latest}`], 'fresh: the initial state then end_of_snapshot, no tail');
  t.same(show(w.of(3)), [`change:f1@${missed.version}`], 'in the window: the missed events, with no framing and no tail');
  t.same(w.of(2), [], 'at the latest revision: nothing yet, no framing');
  t.notOk(w.ended, 'no error: the stream goes on');
  const live = await api.write(A1, 'f9', { namespace: 'frame' }, { data: { name: 'f9' } });
  await w.until((x) => [0, 1, 2, 3].every((i) => x.of(i).some((e) => e.change?.version === live.version)), 10_000, 'the live change on every watch');
  for (const i of [0, 1, 2, 3]) t.same(show(w.of(i).slice(-1)), [`change:f9@${live.version}`], `watch ${i}: then live events`);
  t.same(show(w.of(2)), [`change:f9@${live.version}`], 'the resume at the latest revision got live events and no framing at all');
  t.equal(w.events.filter((e) => e.event === 'tail').length, 0, 'a framed watch never gets a tail');

  const plain = new GrpcWatch(client, { watches: [{ type: A1, tenancy: ten, gtRevision: '0' }] });
  await plain.until((x) => x.ended, 10_000, 'the end');
  t.equal(plain.status?.code, grpc.status.OUT_OF_RANGE, 'without framing the same resume ends with OUT_OF_RANGE');
  t.equal(plain.code, 'COMPACTED', 'and cairn-error-code COMPACTED');
  t.same(plain.events, []);
});

t.test('at_tail: no initial state and no tail; live events only', async (t) => {
  await api.write(A1, 'old', { namespace: 'attail' }, { data: { name: 'old' } });
  const w = new GrpcWatch(client, { watches: [{ type: A1, tenancy: { namespace: 'attail' }, atTail: true }] });
  t.teardown(() => w.cancel());
  await w.until((x) => x.events.some((e) => e.event === 'bookmark'), 10_000, 'a bookmark');
  t.same(w.of(0), [], 'nothing but bookmarks');
  const a = await api.write(A1, 'new', { namespace: 'attail' }, { data: { name: 'new' } });
  await w.until((x) => x.of(0).length > 0, 10_000, 'the live change');
  t.same(briefs(w.of(0)), [`change:0@${a.version}:new`]);
});

t.test('a resume from a revision not reached yet waits (no bookmarks), then tails at it', async (t) => {
  const cur = pub().revision;
  const control = new GrpcWatch(client, { watches: [{ type: A1, atTail: true }] });
  const w = new GrpcWatch(client, { watches: [{ type: A1, tenancy: { namespace: 'wait' }, gtRevision: String(cur + 2) }] });
  t.teardown(() => {
    control.cancel();
    w.cancel();
  });
  await control.until((x) => x.events.filter((e) => e.event === 'bookmark').length >= 2, 10_000, 'two bookmarks on the control stream');
  t.same(w.events, [], 'the waiting stream got nothing, not even bookmarks');
  await api.write(A1, 'w1', { namespace: 'wait' }, { data: { name: 'w1' } });
  const second = await api.write(A1, 'w2', { namespace: 'wait' }, { data: { name: 'w2' } });
  t.equal(Number(second.version), cur + 2);
  await w.until((x) => x.of(0).length > 0, 10_000, 'the tail');
  t.same(briefs(w.of(0)), [`tail:0@${cur + 2}`], 'tail at the awaited revision');
  const third = await api.write(A1, 'w3', { namespace: 'wait' }, { data: { name: 'w3' } });
  await w.until((x) => x.of(0).length > 1, 10_000, 'a live change');
  t.same(briefs(w.of(0)), [`tail:0@${cur + 2}`, `change:0@${third.version}:w3`]);
});

t.test('a client that does not read is ended with SLOW_CONSUMER; a reading client on its own connection and the writes carry on', async (t) => {
  const p = pub();
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
  t.teardown(
    coord.subscribe(() => {
      for (const s of subs) if (!s.ended) maxQueued = Math.max(maxQueued, s.queued);
    }),
  );
  const slowClient = newClient(main);
  const fastClient = newClient(main);
  t.teardown(() => {
    slowClient.close();
    fastClient.close();
  });
  const heapBefore = heapUsedAfterGc();
  const slowWatches = 8;
  const slow = new GrpcWatch(slowClient, { watches: Array.from({ length: slowWatches }, () => ({ type: ALBUM, tenancy: { namespace: 'slow' }, atTail: true })) }, { read: false });
  const fast = new GrpcWatch(fastClient, { watches: [{ type: ALBUM, tenancy: { namespace: 'slow' }, atTail: true }] });
  t.teardown(() => {
    slow.cancel();
    fast.cancel();
  });
  await until(() => subs.length === slowWatches + 1, 10_000, 'the subscriptions');
  const endedBefore = p.slowConsumersEnded;
  const tracks = Array.from({ length: 16 }, (_, i) => 'track'.padEnd(2000, String(i % 10)));
  const versions: number[] = [];
  let n = 0;
  const writeOne = async (): Promise<void> => {
    const i = n++;
    const r = await api.write(ALBUM, `big${i % 50}`, { namespace: 'slow' }, { data: { title: `v${i}`, tracks } });
    versions.push(Number(r.version));
  };
  const started = Date.now();
  // The first unread watch to fall behind ends the whole call, releasing the others' subscriptions.
  while (p.slowConsumersEnded === endedBefore || subs.filter((s) => !s.ended).length > 1) {
    if (n > 1500) throw new Error(`no SLOW_CONSUMER after ${n} writes`);
    await Promise.all([writeOne(), writeOne(), writeOne(), writeOne()]);
  }
  const blockedAfter = n;
  const heapAtEnd = heapUsedAfterGc();
  for (let i = 0; i < 20; i++) await writeOne();
  const writeMs = Date.now() - started;
  versions.sort((a, b) => a - b);
  await fast.until((x) => x.of(0).some((e) => Number(e.revision) >= (versions.at(-1) as number)), 20_000, 'the fast watcher to see the last write');
  t.same(fast.of(0).map((e) => Number(e.revision)), versions, `the reading client got all ${versions.length} writes in order, no gap`);
  t.notOk(fast.ended, 'and is still open');
  t.notOk(slow.ended, 'the unread stream has not ended yet (its status waits behind unread data)');
  t.ok(slow.events.length < 100, `the paused client holds only a few events (${slow.events.length})`);
  // Counted on this test's own subscriptions: an earlier test's may still be ending meanwhile.
  t.equal(subs.filter((s) => !s.ended).length, 1, "but the publisher has dropped the slow call's subscriptions (only the reading client's is left)");
  t.ok(maxQueued <= BUFFER + 1, `no subscription queue ever held more than the limit (max ${maxQueued})`);
  const heapAfter = heapUsedAfterGc();
  slow.read();
  await slow.until((x) => x.ended, 20_000, 'the unread stream to end once read');
  t.equal(slow.status?.code, grpc.status.RESOURCE_EXHAUSTED, 'RESOURCE_EXHAUSTED');
  t.equal(slow.code, 'SLOW_CONSUMER', 'with cairn-error-code SLOW_CONSUMER');
  let gaps = 0;
  let got = 0;
  for (let i = 0; i < slowWatches; i++) {
    const revs = slow.of(i).map((e) => Number(e.revision));
    got = Math.max(got, revs.length);
    if (JSON.stringify(revs) !== JSON.stringify(versions.slice(0, revs.length))) gaps++;
  }
  t.equal(gaps, 0, 'what it did get is a gap-free prefix, on every watch');
  t.ok(got < versions.length - BUFFER, `behind by more than the limit (${got} of ${versions.length})`);
  t.comment(
    `gRPC slow consumer: ${blockedAfter} writes of ~32 KB until the call with ${slowWatches} unread watches was ended; ${versions.length} writes in ${writeMs} ms; ` +
      `the client then read ${got} events per watch; max subscription queue ${maxQueued} (limit ${BUFFER}); heap after GC ${(heapBefore / 2 ** 20).toFixed(1)} MiB before, ` +
      `${(heapAtEnd / 2 ** 20).toFixed(1)} MiB when ended, ${(heapAfter / 2 ** 20).toFixed(1)} MiB after 20 more writes`,
  );
});

t.test('a resume the node never reaches fails with DEADLINE_EXCEEDED / TIMEOUT after the 10 s bound, having sent nothing', async (t) => {
  await far.w.until((x) => x.ended, 30_000, 'the far resume to time out');
  const waited = far.endedMs - far.startedMs;
  t.equal(far.w.status?.code, grpc.status.DEADLINE_EXCEEDED);
  t.equal(far.w.code, 'TIMEOUT');
  t.match(far.w.status?.details, /has not reached revision 1000000000/);
  t.same(far.w.events, [], 'no event while it waited: no tail, no bookmark');
  t.ok(waited >= 10_000 && waited < 20_000, `ended after ${waited} ms (bound 10 s, checked every tick)`);
});

/** Expects WatchList to refuse `req` with INVALID_ARGUMENT before sending anything. */
async function refused(t: Test, req: { watches: WatchMsg[] } | Buffer, what: string): Promise<GrpcWatch> {
  const w = new GrpcWatch(client, req);
  await w.until((x) => x.ended, 10_000, `${what}: the status`);
  t.equal(w.status?.code, grpc.status.INVALID_ARGUMENT, `${what}: INVALID_ARGUMENT (${w.status?.details ?? ''})`);
  t.equal(w.code, 'INVALID_ARGUMENT', `${what}: cairn-error-code`);
  t.same(w.events, [], `${what}: no event`);
  return w;
}

/** Field `field` as a varint, raw: a field this build of the messages does not know. */
const unknownVarint = (field: number): Buffer => Buffer.from(protobuf.Writer.create().uint32((field << 3) | 0).uint32(1).finish());

t.test('bad requests are INVALID_ARGUMENT; the node keeps serving', async (t) => {
  const p = pub();
  // Calls of earlier cases were cancelled in their teardowns; the release is asynchronous.
  await until(() => main.watches.activeSessions === 0, 10_000, 'earlier streams to be released', () => `${main.watches.activeSessions} sessions`);
  const subs = p.subscribers;
  await refused(t, { watches: [] }, 'no watch');
  await refused(t, { watches: Array.from({ length: 65 }, () => ({ type: A1 })) }, '65 watches');
  await refused(t, Buffer.concat([Buffer.from(codec(pb.WatchListRequest).encode({ watches: [{ type: A1 }] }).finish()), unknownVarint(9)]), 'an unknown request field');
  const watchBytes = Buffer.concat([Buffer.from(codec(pb.Watch).encode({ type: A1 }).finish()), unknownVarint(15)]);
  const nested = protobuf.Writer.create().uint32((1 << 3) | 2).bytes(watchBytes).finish();
  await refused(t, Buffer.from(nested), 'an unknown field in a watch');
  await refused(t, Buffer.from([0x0a, 0xff, 0xff]), 'bytes that do not decode');
  await refused(t, { watches: [{ type: 'demo.v9.Artist' }] }, 'an unknown group version');
  await refused(t, { watches: [{ type: 'nope' }] }, 'a malformed type');
  await refused(t, { watches: [{ type: '' }] }, 'no type');
  await refused(t, { watches: [{ type: A1, tenancy: { namespace: 'Bad_NS' } }] }, 'a bad namespace');
  await refused(t, { watches: [{ type: EXEC, tenancy: { namespace: 'x' } }] }, 'a namespace for a cluster-scoped type');
  await refused(t, { watches: [{ type: A1, namePrefix: 'BAD' }] }, 'a bad name prefix');
  await refused(t, { watches: [{ type: A1, gtRevision: 'abc' }] }, 'gt_revision "abc"');
  await refused(t, { watches: [{ type: A1, gtRevision: '-1' }] }, 'gt_revision "-1"');
  const second = await refused(t, { watches: [{ type: A1 }, { type: A1, gtRevision: 'x' }] }, 'the second watch is bad');
  t.equal(second.details['watch'], 1, 'the error names the watch');
  t.equal(p.subscribers, subs, 'no subscription was made');
  const w = new GrpcWatch(client, { watches: [{ type: A1, tenancy: { namespace: 'basic' } }] });
  t.teardown(() => w.cancel());
  await w.until((x) => x.of(0).some((e) => e.event === 'tail'), 10_000, 'the tail');
  t.ok(w.of(0).length > 1, 'the node still serves watches');
});

t.test('a cancelled call releases its subscriptions', async (t) => {
  const p = pub();
  await until(() => main.watches.activeSessions === 0, 10_000, 'earlier streams to be released', () => `${main.watches.activeSessions} sessions`);
  const subs = p.subscribers;
  const w = new GrpcWatch(client, { watches: [{ type: A1, tenancy: { namespace: '*' } }, { type: ALBUM, tenancy: { namespace: '*' }, atTail: true }, { type: A1, gtRevision: String(p.revision + 1000) }] });
  await w.until((x) => x.of(0).some((e) => e.event === 'tail'), 10_000, 'the tail');
  t.equal(p.subscribers, subs + 3);
  t.equal(main.watches.activeSessions, 1);
  w.cancel();
  await until(() => p.subscribers === subs && main.watches.activeSessions === 0, 10_000, 'the release', () => `${p.subscribers} subscribers`);
  t.pass('released');
});

t.test('a snapshot restore: framed watches rebuild their view (new_snapshot_to_follow ... end_of_snapshot); others end with ABORTED / RESET', async (t) => {
  await api.write(A1, 'keep', { namespace: 'restore' }, { data: { name: 'keep' } });
  const saved = Buffer.from(await (await fetch(`${api.base}/v1/snapshot`)).arrayBuffer());
  const savedList = await grpcList(client, A1, { namespace: 'restore' });
  await api.write(A1, 'gone', { namespace: 'restore' }, { data: { name: 'gone' } });
  const framed = new GrpcWatch(client, { watches: [{ type: A1, tenancy: { namespace: 'restore' }, snapshotOnCompacted: true }] });
  const plain = new GrpcWatch(client, { watches: [{ type: A1, tenancy: { namespace: 'restore' } }] });
  t.teardown(() => {
    framed.cancel();
    plain.cancel();
  });
  await framed.until((x) => x.of(0).some((e) => e.event === 'endOfSnapshot'), 10_000, 'the first snapshot');
  await plain.until((x) => x.of(0).some((e) => e.event === 'tail'), 10_000, 'the tail');
  const before = framed.of(0).length;
  const put = await fetch(`${api.base}/v1/snapshot`, { method: 'PUT', headers: { 'content-type': 'application/octet-stream' }, body: saved });
  t.equal(put.status, 200);
  const restored = ((await put.json()) as { revision: string }).revision;
  await plain.until((x) => x.ended, 10_000, 'the unframed watch to end');
  t.equal(plain.status?.code, grpc.status.ABORTED, 'unframed: ABORTED');
  t.equal(plain.code, 'RESET', 'with cairn-error-code RESET');
  t.equal(plain.details['revision'], restored, 'at the restore\'s revision');
  await framed.until((x) => x.of(0).filter((e) => e.event === 'endOfSnapshot').length === 2, 10_000, 'the second snapshot');
  t.same(
    framed.of(0).slice(before).map((e) => (e.change ? `change:${ident(e.change)}` : `${e.event}@${e.revision}`)),
    [`newSnapshotToFollow@${restored}`, ...savedList.resources.map((r) => `change:${ident(r)}`), `endOfSnapshot@${restored}`],
    'framed: new_snapshot_to_follow, the restored state, end_of_snapshot',
  );
  t.notOk(framed.ended, 'and the framed stream goes on');
  const live = await api.write(A1, 'after', { namespace: 'restore' }, { data: { name: 'after' } });
  await framed.until((x) => x.of(0).some((e) => e.change?.version === live.version), 10_000, 'a live change after the restore');
  t.pass('live events follow');
});

t.test('agent shutdown ends open watch calls with UNAVAILABLE', async (t) => {
  const w1 = new GrpcWatch(client, { watches: [{ type: A1, tenancy: { namespace: '*' } }] });
  const w2 = new GrpcWatch(client, { watches: [{ type: A1, atTail: true }, { type: A1, gtRevision: String(pub().revision + 100) }] });
  await w1.until((x) => x.of(0).some((e) => e.event === 'tail'), 10_000, 'the tail');
  await until(() => pub().subscribers === 3, 10_000, 'both calls open');
  const t0 = Date.now();
  await agents.close(main);
  const closeMs = Date.now() - t0;
  for (const [i, w] of [w1, w2].entries()) {
    await w.until((x) => x.ended, 10_000, `call ${i} to end`);
    t.equal(w.status?.code, grpc.status.UNAVAILABLE, `call ${i}: UNAVAILABLE`);
    t.equal(w.code, 'UNAVAILABLE', `call ${i}: cairn-error-code UNAVAILABLE`);
  }
  t.comment(`agent close with two open gRPC watch calls took ${closeMs} ms`);
});
