import * as grpc from '@grpc/grpc-js';
import t from 'tap';
import { cairn } from '../gen/resource.js';
import type { Agent } from './agent.js';
import { Agents, Http, until } from './testing/watch-harness.js';

/**
 * WatchListBatched (proto/cairn/resource/v1/resource.proto) against a real agent in this
 * process, through a raw @grpc/grpc-js client: the same events as WatchList, in the same
 * order, several to a message when the stream has a backlog; the slow-consumer rule holds
 * for a batched stream too, and a reading client on another connection loses nothing.
 * WatchList itself is covered by watch-grpc.test.ts; the access checks of both calls by
 * authz-table.test.ts.
 */

const pb = cairn.resource.v1;
const ARTIST = 'demo.v1.Artist';
const ALBUM = 'demo.v1.Album';
const SERVICE = '/cairn.resource.v1.ResourceService';
const BUFFER = 200;
const EVENT_OBJECT = { longs: String, enums: String, defaults: true, arrays: true, objects: true, oneofs: true };

interface Codec {
  encode(m: object): { finish(): Uint8Array };
  decode(b: Uint8Array): object;
  toObject(m: object, o: object): object;
}
const codec = (c: unknown): Codec => c as Codec;

interface Ev {
  watch: number;
  revision: string;
  event: string;
  change?: { id: { name: string }; version: string };
  delete?: { id: { name: string }; version: string };
}

type Method = 'WatchList' | 'WatchListBatched';

/** One watch call: its events in order, how many each message carried, and its end. */
class Stream {
  readonly events: Ev[] = [];
  readonly perMessage: number[] = [];
  status: grpc.StatusObject | undefined;
  readonly call: grpc.ClientReadableStream<Ev[]>;

  constructor(client: grpc.Client, method: Method, watches: object[], opts: { read?: boolean } = {}) {
    const decode = (b: Buffer): Ev[] => {
      const msgs = method === 'WatchList' ? [codec(pb.WatchEvent).decode(b)] : ((codec(pb.WatchEventBatch).decode(b) as { events: object[] }).events ?? []);
      return msgs.map((m) => codec(pb.WatchEvent).toObject(m, EVENT_OBJECT) as Ev);
    };
    const req = Buffer.from(codec(pb.WatchListRequest).encode({ watches }).finish());
    this.call = client.makeServerStreamRequest(`${SERVICE}/${method}`, (x: Buffer) => x, decode, req, new grpc.Metadata(), {});
    this.call.on('data', (evs: Ev[]) => {
      this.perMessage.push(evs.length);
      this.events.push(...evs);
    });
    this.call.on('status', (s: grpc.StatusObject) => (this.status = s));
    this.call.on('error', () => undefined); // the status says it all
    if (opts.read === false) this.call.pause();
  }

  /** The events without bookmarks (their timing is the node's), as comparable lines. */
  lines(): string[] {
    return this.events.filter((e) => e.event !== 'bookmark').map((e) => `${e.event} ${e.watch} @${e.revision} ${(e.change ?? e.delete)?.id.name ?? ''}`);
  }

  get code(): string | undefined {
    const v = this.status?.metadata.get('cairn-error-code')[0];
    return typeof v === 'string' ? v : undefined;
  }
}

function newClient(agent: Agent): grpc.Client {
  // Its own connection, so one client's unread stream cannot hold up another's.
  return new grpc.Client(agent.grpcAddress, grpc.credentials.createInsecure(), { 'grpc.use_local_subchannel_pool': 1 });
}

const agents = new Agents(t);
let main: Agent;
let api: Http;

t.before(async () => {
  main = await agents.dev({ watchBufferEvents: BUFFER });
  api = new Http(main);
});

t.test('WatchListBatched carries exactly what WatchList carries, in the same order, several events to a message', async (t) => {
  for (let i = 0; i < 40; i++) await api.write(ARTIST, `m${i}`, { namespace: 'same' }, { data: { name: `m${i}` } });
  const c1 = newClient(main);
  const c2 = newClient(main);
  t.teardown(() => {
    c1.close();
    c2.close();
  });
  const watches = [{ type: ARTIST, tenancy: { namespace: 'same' } }, { type: 'demo.Artist', tenancy: { namespace: '*' }, namePrefix: 'm1' }];
  const plain = new Stream(c1, 'WatchList', watches);
  const batched = new Stream(c2, 'WatchListBatched', watches);
  t.teardown(() => {
    plain.call.cancel();
    batched.call.cancel();
  });
  const tails = (s: Stream): number => s.events.filter((e) => e.event === 'tail').length;
  await until(() => tails(plain) === 2 && tails(batched) === 2, 10_000, 'both tails on both streams');
  t.ok(
    batched.perMessage.some((n) => n > 1),
    `the initial state came several events to a message (${batched.perMessage.length} messages for ${batched.events.length} events)`,
  );
  // Live writes in bursts, so events queue between the stream's writes.
  let last = 0;
  for (let round = 0; round < 6; round++) {
    const rs = await Promise.all(
      Array.from({ length: 10 }, (_, i) =>
        i % 4 === 3 ? api.del(ARTIST, `m${round * 6 + i}`, { namespace: 'same' }).then(() => undefined) : api.write(ARTIST, `m${(round * 7 + i) % 45}`, { namespace: 'same' }, { data: { name: `r${round}` } }),
      ),
    );
    for (const r of rs) if (r !== undefined) last = Math.max(last, Number(r.version));
  }
  const reached = (s: Stream): boolean => s.events.some((e) => Number(e.revision) >= last && e.event !== 'tail');
  await until(() => reached(plain) && reached(batched), 10_000, 'both streams to reach the last write');
  // A delete after the last write may still be on its way: compare up to the shorter one.
  await until(() => plain.lines().length === batched.lines().length, 10_000, 'both streams to hold as many events');
  t.same(batched.lines(), plain.lines(), `the same ${plain.lines().length} events in the same order`);
  t.ok(plain.perMessage.every((n) => n === 1), 'WatchList: one event per message');
  t.equal(
    batched.perMessage.reduce((a, b) => a + b, 0),
    batched.events.length,
    'every message of the batched call is counted',
  );
  t.ok(batched.perMessage.every((n) => n >= 1), 'no empty batch');
  t.ok(batched.perMessage.length < plain.perMessage.length, `fewer messages (${batched.perMessage.length} against ${plain.perMessage.length})`);
  t.equal(plain.status, undefined, 'both still open');
  t.equal(batched.status, undefined);
});

t.test('a batched stream that is not read ends with SLOW_CONSUMER; a batched reader on its own connection gets every write, in order', async (t) => {
  const p = main.publisher();
  if (!p) throw new Error('no publisher');
  const slowClient = newClient(main);
  const fastClient = newClient(main);
  t.teardown(() => {
    slowClient.close();
    fastClient.close();
  });
  const slow = new Stream(slowClient, 'WatchListBatched', [{ type: ALBUM, tenancy: { namespace: 'slow' }, atTail: true }], { read: false });
  const fast = new Stream(fastClient, 'WatchListBatched', [{ type: ALBUM, tenancy: { namespace: 'slow' }, atTail: true }]);
  t.teardown(() => {
    slow.call.cancel();
    fast.call.cancel();
  });
  // The fast stream is subscribed once it sees a probe (an at_tail watch sends nothing before a write).
  const isBig = (e: Ev): boolean => e.event === 'change' && (e.change?.id.name ?? '').startsWith('big');
  for (let i = 0; !fast.events.some((e) => e.event === 'change'); i++) {
    if (i > 500) throw new Error('the fast stream saw no probe');
    await api.write(ALBUM, 'probe', { namespace: 'slow' }, { data: { title: `p${i}` } });
    await new Promise((r) => setTimeout(r, 10));
  }
  const endedBefore = p.slowConsumersEnded;
  const tracks = Array.from({ length: 16 }, (_, i) => 'track'.padEnd(2000, String(i % 10)));
  const versions: number[] = [];
  let n = 0;
  const writeOne = async (): Promise<void> => {
    const i = n++;
    const r = await api.write(ALBUM, `big${i % 50}`, { namespace: 'slow' }, { data: { title: `v${i}`, tracks } });
    versions.push(Number(r.version));
  };
  while (p.slowConsumersEnded === endedBefore) {
    if (n > 2000) throw new Error(`no SLOW_CONSUMER after ${n} writes`);
    await Promise.all([writeOne(), writeOne(), writeOne(), writeOne()]);
  }
  for (let i = 0; i < 20; i++) await writeOne();
  versions.sort((a, b) => a - b);
  await until(() => fast.events.some((e) => Number(e.revision) >= (versions.at(-1) as number)), 20_000, 'the fast watcher to see the last write');
  t.same(
    fast.events.filter(isBig).map((e) => Number(e.revision)),
    versions,
    `the reading client got all ${versions.length} writes in order, no gap`,
  );
  t.ok(fast.perMessage.length <= versions.length, `in ${fast.perMessage.length} messages`);
  t.equal(fast.status, undefined, 'and is still open');
  slow.call.resume();
  await until(() => slow.status !== undefined, 20_000, 'the unread stream to end once read');
  t.equal(slow.status?.code, grpc.status.RESOURCE_EXHAUSTED, 'RESOURCE_EXHAUSTED');
  t.equal(slow.code, 'SLOW_CONSUMER', 'with cairn-error-code SLOW_CONSUMER');
  const got = slow.events.filter(isBig).map((e) => Number(e.revision));
  t.same(got, versions.slice(0, got.length), `what it did get (${got.length} events) is a gap-free prefix`);
  t.ok(got.length < versions.length, 'and it is behind');
  // What a paused reader gets once it reads is what was held for it: the client's window and
  // buffers plus the node's messages in flight. The node holds two batches of about 32 KiB at most (here
  // two events each); without that bound the node buffered every write for it and never ended it.
  t.ok(got.length < 64, `the node held little for the unread stream (${got.length} events of 32 KB arrived after it was read)`);
});
