/**
 * The publisher against a deliberately naive reference (testing/naive-publisher.ts: one queue per
 * subscriber, every change pushed into each). Subscribers of one filter now share a feed; for
 * any sequence of writes, deletes, subscriptions (initial state, at tail, resumes from the past
 * and the future), reads, ticks, closes and resets, every subscriber must see exactly what the
 * reference's does: the same events in the same order, the same `queued` and `ended` after
 * every step, the same number of `onReadable` calls, the same slow-consumer ends.
 */
import t from 'tap';
import { SeededRandom, type Clock, type LogIndex, type Revision, type Term } from '../base/index.js';
import { Fsm, CommandType, encodeEnvelope } from '../fsm/index.js';
import type { ChangeRecord } from '../store/index.js';
import { NaivePublisher, type NaiveSubscription } from './testing/index.js';
import { EventPublisher, type PublisherOptions, type StreamEvent, type Subscription, type WatchFilter } from './index.js';

class FakeClock implements Clock {
  ms = 0;
  nowMs(): number {
    return this.ms;
  }
  monotonicMs(): number {
    return this.ms;
  }
}

function brief(e: StreamEvent | undefined): string {
  if (e === undefined) return '-';
  switch (e.type) {
    case 'change':
    case 'delete':
      return `${e.type}:${e.resource.id.tenancy.namespace}/${e.resource.id.type.kind}/${e.resource.id.name}@${e.revision}(v${e.resource.version})`;
    case 'end':
      return `end:${e.code}@${e.revision}`;
    default:
      return `${e.type}@${e.revision}`;
  }
}

interface Pair {
  readonly a: Subscription;
  readonly b: NaiveSubscription;
  readable: [number, number];
  readonly label: string;
  /** Closed by its consumer, which reads no more: nothing about it is compared from then on. */
  closed: boolean;
}

const NAMES = ['a1', 'a2', 'b1', 'b2', 'c'];
const NAMESPACES = ['x', 'y'];
const KINDS = ['Artist', 'Album'];

function runSeed(seed: number, steps: number): void {
  const rng = new SeededRandom(seed);
  const pick = (n: number): number => rng.nextUint32() % n;
  const oneOf = <T>(xs: readonly T[]): T => xs[pick(xs.length)] as T;
  const fsm = new Fsm();
  const clock = new FakeClock();
  const opts: PublisherOptions = {
    clock,
    maxWindowEvents: 1 + pick(15),
    // Half the seeds bound the window by bytes too (a resource here is a few hundred bytes).
    maxWindowBytes: pick(2) === 0 ? 64 * 1024 * 1024 : 400 * (1 + pick(12)),
    subscriberBufferEvents: 1 + pick(6),
    snapshotCacheMs: pick(3) * 300,
    bookmarkIntervalMs: 100 + pick(3) * 150,
    futureRevisionTimeoutMs: 300 + pick(1500),
  };
  const fast = new EventPublisher({ current: () => fsm.store }, opts);
  const naive = new NaivePublisher({ current: () => fsm.store }, opts);
  // Entries that change nothing are published (as empty) or not, as the replica may do either.
  const publishEmpty = pick(2) === 0;
  const pairs: Pair[] = [];
  let index = 0;
  let n = 0;
  const history: string[] = [];
  const fail = (what: string): never => {
    throw new Error(`seed ${seed}: ${what}; last steps: ${history.slice(-12).join(' | ')}`);
  };

  const apply = (type: number, body: Record<string, unknown>): void => {
    index++;
    n++;
    const out = fsm.apply({ index: index as LogIndex, term: 1 as Term, data: encodeEnvelope(type, { time: 't', uid: `u${n}`, generation: `g${n}`, ...body }) });
    if (publishEmpty || out.changes.length > 0) {
      fast.publish(index as Revision, out.changes as readonly ChangeRecord[]);
      naive.publish(index as Revision, out.changes as readonly ChangeRecord[]);
    }
  };
  const id = (): Record<string, unknown> => ({ type: { group: 'demo', groupVersion: 'v1', kind: oneOf(KINDS) }, tenancy: { partition: 'default', namespace: oneOf(NAMESPACES) }, name: oneOf(NAMES) });

  const check = (): void => {
    for (const p of pairs) {
      if (p.closed) continue;
      if (p.a.queued !== p.b.queued) fail(`${p.label}: queued ${p.a.queued}, reference ${p.b.queued}`);
      if (p.a.ended !== p.b.ended) fail(`${p.label}: ended ${p.a.ended}, reference ${p.b.ended}`);
      if (p.readable[0] !== p.readable[1]) fail(`${p.label}: onReadable called ${p.readable[0]} times, reference ${p.readable[1]}`);
      if (brief(p.a.peek()) !== brief(p.b.peek())) fail(`${p.label}: peek ${brief(p.a.peek())}, reference ${brief(p.b.peek())}`);
    }
    if (fast.subscribers !== naive.subscribers) fail(`subscribers ${fast.subscribers}, reference ${naive.subscribers}`);
    if (fast.slowConsumersEnded !== naive.slowConsumersEnded) fail(`slow consumers ended ${fast.slowConsumersEnded}, reference ${naive.slowConsumersEnded}`);
  };

  const read = (p: Pair, k: number): void => {
    for (let i = 0; i < k; i++) {
      const x = brief(p.a.next());
      const y = brief(p.b.next());
      if (x !== y) fail(`${p.label}: read ${x}, reference ${y}`);
      if (x === '-') break;
    }
  };

  for (let step = 0; step < steps; step++) {
    const op = pick(100);
    if (op < 35) {
      const body = { id: id(), data: { n } };
      history.push(`write ${JSON.stringify(body.id)}`);
      apply(CommandType.ResourceWrite, body);
    } else if (op < 45) {
      const body = { id: id() };
      history.push(`delete ${JSON.stringify(body.id)}`);
      apply(CommandType.ResourceDelete, body);
    } else if (op < 57) {
      const filter: WatchFilter = { group: 'demo', kind: oneOf(KINDS), partition: '*', namespace: oneOf(['*', ...NAMESPACES]), ...(pick(4) === 0 ? { namePrefix: oneOf(['a', 'b']) } : {}) };
      const mode = pick(4);
      const subOpts = mode === 0 ? { atTail: true } : mode === 1 ? { gtRevision: Math.max(0, index - 6 + pick(10)) as Revision } : {};
      const label = `sub${pairs.length} ${JSON.stringify(filter)} ${JSON.stringify(subOpts)}`;
      history.push(label);
      const a = fast.subscribe(filter, subOpts);
      const b = naive.subscribe(filter, subOpts);
      const p: Pair = { a, b, readable: [0, 0], label, closed: false };
      a.onReadable = () => p.readable[0]++;
      b.onReadable = () => p.readable[1]++;
      pairs.push(p);
    } else if (op < 82 && pairs.some((p) => !p.closed)) {
      const p = oneOf(pairs.filter((q) => !q.closed));
      const k = 1 + pick(8);
      history.push(`read ${k} from ${p.label}`);
      read(p, k);
    } else if (op < 92) {
      const dt = pick(400);
      clock.ms += dt;
      history.push(`tick after ${dt} ms`);
      fast.tick();
      naive.tick();
    } else if (op < 97 && pairs.some((p) => !p.closed)) {
      const p = oneOf(pairs.filter((q) => !q.closed));
      history.push(`close ${p.label}`);
      p.a.close();
      p.b.close();
      p.closed = true;
    } else if (op < 98) {
      history.push(`reset at ${index}`);
      fast.reset(index as Revision);
      naive.reset(index as Revision);
    }
    check();
  }
  for (const p of pairs) if (!p.closed) read(p, 1_000_000);
  check();
}

t.test('the shared-feed publisher delivers exactly what the per-subscriber-queue reference does', async (t) => {
  const seeds = 400;
  for (let seed = 1; seed <= seeds; seed++) runSeed(seed, 250);
  t.pass(`${seeds} seeds of 250 steps each agree with the reference`);
});

t.test('subscribers of one filter share one feed: a change is held once, however many read it', async (t) => {
  const fsm = new Fsm();
  const pub = new EventPublisher({ current: () => fsm.store }, { clock: new FakeClock(), subscriberBufferEvents: 100 });
  const artists: WatchFilter = { group: 'demo', kind: 'Artist', partition: '*', namespace: '*' };
  const subs = Array.from({ length: 1000 }, () => pub.subscribe(artists, { atTail: true }));
  const other = pub.subscribe({ ...artists, namespace: 'x' }, { atTail: true });
  t.equal(pub.feedCount, 2, 'one feed per distinct filter');
  for (let i = 1; i <= 50; i++) {
    const out = fsm.apply({ index: i as LogIndex, term: 1 as Term, data: encodeEnvelope(CommandType.ResourceWrite, { time: 't', uid: `u${i}`, generation: `g${i}`, id: { type: { group: 'demo', groupVersion: 'v1', kind: 'Artist' }, tenancy: { partition: 'default', namespace: 'y' }, name: `k${i}` }, data: {} }) });
    pub.publish(i as Revision, out.changes as readonly ChangeRecord[]);
  }
  t.ok(
    subs.every((s) => s.queued === 51),
    'each of 1,000 subscribers has the tail and 50 changes waiting',
  );
  t.equal(other.queued, 1, 'the other filter saw none of them');
  const first = subs[0]?.next();
  t.equal(first?.type, 'tail');
  const a = subs[1]?.next() && subs[1]?.next();
  const b = subs[2]?.next() && subs[2]?.next();
  t.equal(a, b, 'the same event object for both: held once');
  for (const s of subs) s.close();
  other.close();
  t.equal(pub.feedCount, 0, 'a feed goes with its last subscriber');
});
