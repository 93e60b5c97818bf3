import * as grpc from '@grpc/grpc-js';
import t from 'tap';
import { cairn } from '../gen/resource.js';
import type { Agent } from './agent.js';
import { Agents, ChangeLog, Http, HttpWatch, until, type WatchLine } from './testing/watch-harness.js';

/**
 * The resume request of the watch API Cairn follows (Nexodus: "we set at_tail: true so that we
 * don't get the tail marker again since the client has previously seen the tail marker
 * already", with gt_revision): `at_tail: true` together with `gt_revision: N` gives every
 * matching change after N, then live events, and never a `tail`; over HTTP (POST /v1/watch) and
 * gRPC (WatchList). A compacted N is still COMPACTED. Before issue 14 both front ends refused
 * the pair with INVALID_ARGUMENT, so every case here failed.
 */

const A1 = 'demo.v1.Artist';
const NS = 'resume';
const WINDOW = 12;
const pb = cairn.resource.v1;

interface Codec {
  encode(m: object): { finish(): Uint8Array };
  decode(b: Uint8Array): object;
  toObject(m: object, o: object): object;
}
const codec = (c: unknown): Codec => c as Codec;

interface GrpcEv {
  watch: number;
  revision: string;
  event: string;
  change?: { id: { name: string }; version: string };
  delete?: { id: { name: string }; version: string };
}

/** One gRPC WatchList call, decoded as it arrives. */
class GrpcWatch {
  readonly events: GrpcEv[] = [];
  status: grpc.StatusObject | undefined;
  private readonly call: grpc.ClientReadableStream<GrpcEv>;

  constructor(client: grpc.Client, watches: object[]) {
    const decode = (b: Buffer): GrpcEv => codec(pb.WatchEvent).toObject(codec(pb.WatchEvent).decode(b), { longs: String, defaults: true, oneofs: true }) as GrpcEv;
    const serialize = (x: object): Buffer => Buffer.from(codec(pb.WatchListRequest).encode(x).finish());
    this.call = client.makeServerStreamRequest('/cairn.resource.v1.ResourceService/WatchList', serialize, decode, { watches }, new grpc.Metadata(), {});
    this.call.on('status', (s: grpc.StatusObject) => (this.status = s));
    this.call.on('error', () => undefined); // the status says it all
    this.call.on('data', (e: GrpcEv) => this.events.push(e));
  }

  get code(): string | undefined {
    const v = this.status?.metadata.get('cairn-error-code')[0];
    return typeof v === 'string' ? v : undefined;
  }

  get details(): Record<string, unknown> {
    const v = this.status?.metadata.get('cairn-error-details-json')[0];
    return typeof v === 'string' ? (JSON.parse(v) as Record<string, unknown>) : {};
  }

  /** [event, revision, name] of everything but bookmarks. */
  seen(): Array<[string, string, string]> {
    return this.events.filter((e) => e.event !== 'bookmark').map((e) => [e.event, e.revision, (e.change ?? e.delete)?.id.name ?? '']);
  }

  cancel(): void {
    this.call.cancel();
  }
}

const agents = new Agents(t);
let node: Agent;
let api: Http;
let log: ChangeLog;
let client: grpc.Client;

t.before(async () => {
  node = await agents.dev({ watchWindowEvents: WINDOW, watchBookmarkMs: 200 });
  api = new Http(node);
  log = new ChangeLog(node);
  client = new grpc.Client(node.grpcAddress, grpc.credentials.createInsecure());
});
t.teardown(() => client.close());

const lineOf = (l: WatchLine): [string, string, string] => [l.type, l.revision, l.value?.id.name ?? ''];

/** Writes a few changes (one delete among them); returns the revision before them and the expected events after it. */
async function history(prefix: string): Promise<{ n: number; expected: Array<[string, string, string]> }> {
  const before = await api.write(A1, `${prefix}-0`, { namespace: NS }, { data: { name: 'first' } });
  const n = Number(before.version);
  await api.write(A1, `${prefix}-1`, { namespace: NS }, { data: { name: 'one' } });
  await api.write(A1, `${prefix}-0`, { namespace: NS }, { data: { name: 'first again' } });
  await api.del(A1, `${prefix}-1`, { namespace: NS });
  await api.write(A1, `${prefix}-2`, { namespace: NS }, { data: { name: 'two' } });
  const expected = log.expected(n, { type: A1, namespace: NS }).map((e): [string, string, string] => [e.type, e.revision, e.value.id.name]);
  return { n, expected };
}

t.test('HTTP: at_tail with gt_revision N gives the changes after N, then live events, and no tail', async (t) => {
  const { n, expected } = await history('h');
  t.equal(expected.length, 4, 'four changes after N (a delete among them)');
  const w = await HttpWatch.open(api.base, [{ type: A1, namespace: NS, gt_revision: String(n), at_tail: true }]);
  t.teardown(() => w.destroy());
  await w.until((x) => x.events.length >= expected.length, 10_000, 'the changes after N');
  const live = await api.write(A1, 'h-live', { namespace: NS }, { data: { name: 'live' } });
  await w.until((x) => x.events.length >= expected.length + 1, 10_000, 'the live change');
  // A bookmark past the live write: everything up to it has been sent, so a tail would be here.
  await w.until((x) => x.lines.some((l) => l.type === 'bookmark' && Number(l.revision) >= Number(live.version)), 10_000, 'a bookmark');
  t.same(w.events.map(lineOf), [...expected, ['change', live.version, 'h-live']], 'exactly the changes after N in commit order, then the live one');
  t.notOk(w.lines.some((l) => l.type === 'tail'), 'no tail event');
  t.notOk(w.ended, 'the stream stays open');
});

t.test('HTTP: the same resume without at_tail still gets its tail (the control)', async (t) => {
  const { n, expected } = await history('c');
  const w = await HttpWatch.open(api.base, [{ type: A1, namespace: NS, gt_revision: String(n) }]);
  t.teardown(() => w.destroy());
  await w.until((x) => x.tail(0) !== undefined, 10_000, 'the tail');
  t.same(w.events.slice(0, -1).map(lineOf), expected);
  t.equal(w.events.at(-1)?.type, 'tail');
});

t.test('gRPC WatchList: at_tail with gt_revision N gives the changes after N, then live events, and no tail', async (t) => {
  const { n, expected } = await history('g');
  const w = new GrpcWatch(client, [{ type: A1, tenancy: { namespace: NS }, gtRevision: String(n), atTail: true }]);
  t.teardown(() => w.cancel());
  await until(() => w.seen().length >= expected.length, 10_000, 'the changes after N');
  const live = await api.write(A1, 'g-live', { namespace: NS }, { data: { name: 'live' } });
  await until(() => w.events.some((e) => e.event === 'bookmark' && Number(e.revision) >= Number(live.version)), 10_000, 'a bookmark past the live change');
  t.same(w.seen(), [...expected, ['change', live.version, 'g-live']], 'exactly the changes after N in commit order, then the live one');
  t.notOk(w.events.some((e) => e.event === 'tail' || e.event === 'endOfSnapshot'), 'no tail (and no framing)');
  t.equal(w.status, undefined, 'the call stays open');
});

t.test('at_tail with a compacted gt_revision is still COMPACTED, over HTTP and gRPC', async (t) => {
  for (let i = 0; i < WINDOW + 5; i++) await api.write(A1, `fill-${i % 3}`, { namespace: 'fill' }, { data: { name: `fill ${i}` } });
  const p = node.publisher();
  if (!p) throw new Error('no publisher');
  const oldest = p.oldestResumable;
  t.ok(oldest > 1, `the window has moved on (oldest resumable ${oldest})`);
  const gone = String(oldest - 1);

  const w = await HttpWatch.open(api.base, [{ type: A1, namespace: NS, gt_revision: gone, at_tail: true }]);
  t.teardown(() => w.destroy());
  await w.until((x) => x.ended, 10_000, 'the stream to end');
  t.same(
    w.lines.map((l) => [l.type, l.code, l.watch, l.revision]),
    [['error', 'COMPACTED', 0, String(oldest)]],
    'HTTP: one error event COMPACTED naming the oldest resumable revision',
  );

  const g = new GrpcWatch(client, [{ type: A1, tenancy: { namespace: NS }, gtRevision: gone, atTail: true }]);
  await until(() => g.status !== undefined, 10_000, 'the call to end');
  t.equal(g.status?.code, grpc.status.OUT_OF_RANGE, 'gRPC: OUT_OF_RANGE');
  t.equal(g.code, 'COMPACTED');
  t.same(g.details, { watch: 0, revision: String(oldest) });
  t.same(g.seen(), [], 'nothing before the error');
});

t.test('gRPC with snapshot_on_compacted: a compacted at_tail resume is rebuilt in the stream and its fresh initial state still ends with end_of_snapshot', async (t) => {
  await api.write(A1, 'framed', { namespace: 'framed' }, { data: { name: 'framed' } });
  for (let i = 0; i < WINDOW + 5; i++) await api.write(A1, `fill-${i % 3}`, { namespace: 'fill' }, { data: { name: `again ${i}` } });
  const p = node.publisher();
  if (!p) throw new Error('no publisher');
  const gone = String(p.oldestResumable - 1);
  const w = new GrpcWatch(client, [{ type: A1, tenancy: { namespace: 'framed' }, gtRevision: gone, atTail: true, snapshotOnCompacted: true }]);
  t.teardown(() => w.cancel());
  await until(() => w.events.some((e) => e.event === 'endOfSnapshot'), 10_000, 'end_of_snapshot');
  t.same(
    w.seen().map(([ev, , name]) => [ev, name]),
    [
      ['newSnapshotToFollow', ''],
      ['change', 'framed'],
      ['endOfSnapshot', ''],
    ],
    'new_snapshot_to_follow, the fresh initial state, end_of_snapshot (at_tail keeps only the tail of the resume away)',
  );
  t.equal(w.status, undefined, 'the call goes on');
});
