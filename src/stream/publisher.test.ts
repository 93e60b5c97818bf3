import t from 'tap';
import type { Clock, LogIndex, Revision, Term } from '../base/index.js';
import { Fsm, CommandType, encodeEnvelope } from '../fsm/index.js';
import { resourceBytes, type ChangeRecord } from '../store/index.js';
import { EventPublisher, type PublisherOptions, type StreamEvent, type Subscription } from './index.js';

class FakeClock implements Clock {
  ms = 0;
  nowMs(): number {
    return this.ms;
  }
  monotonicMs(): number {
    return this.ms;
  }
}

const tenancy = (ns: string): { partition: string; namespace: string } => ({ partition: 'default', namespace: ns });

/**
 * A real FSM applying real commands, feeding a publisher. `skipEmpty`: like the replica, do not
 * publish entries that changed nothing (the default publishes every entry).
 */
function setup(opts: Partial<PublisherOptions> = {}, skipEmpty = false): { fsm: Fsm; pub: EventPublisher; clock: FakeClock; write: (name: string, ns?: string, kind?: string) => Revision; del: (name: string, ns?: string) => Revision } {
  const fsm = new Fsm();
  const clock = new FakeClock();
  const pub = new EventPublisher({ current: () => fsm.store }, { clock, ...opts });
  let index = 0;
  let n = 0;
  const apply = (type: number, body: Record<string, unknown>): Revision => {
    index++;
    n++;
    const out = fsm.apply({ index: index as LogIndex, term: 1 as Term, data: encodeEnvelope(type, { time: 't', uid: `u${n}`, generation: `g${n}`, ...body }) });
    if (!skipEmpty || out.changes.length > 0) pub.publish(index as Revision, out.changes as readonly ChangeRecord[]);
    return index as Revision;
  };
  return {
    fsm,
    pub,
    clock,
    write: (name, ns = 'default', kind = 'Artist') => apply(CommandType.ResourceWrite, { id: { type: { group: 'demo', groupVersion: 'v1', kind }, tenancy: tenancy(ns), name }, data: { name, n } }),
    del: (name, ns = 'default') => apply(CommandType.ResourceDelete, { id: { type: { group: 'demo', groupVersion: 'v1', kind: 'Artist' }, tenancy: tenancy(ns), name } }),
  };
}

const artists = { group: 'demo', kind: 'Artist', partition: '*', namespace: '*' };

function drain(sub: Subscription): StreamEvent[] {
  const out: StreamEvent[] = [];
  for (let e = sub.next(); e !== undefined; e = sub.next()) out.push(e);
  return out;
}

function brief(evs: StreamEvent[]): string[] {
  return evs.map((e) => (e.type === 'change' || e.type === 'delete' ? `${e.type}:${e.resource.id.name}@${e.revision}` : e.type === 'end' ? `end:${e.code}@${e.revision}` : `${e.type}@${e.revision}`));
}

t.test('initial state at a consistent revision, then tail, then live events in commit order', async (t) => {
  const s = setup();
  s.write('a');
  s.write('b');
  const sub = s.pub.subscribe(artists);
  t.same(brief(drain(sub)), ['change:a@1', 'change:b@2', 'tail@2']);
  s.write('c');
  s.del('a');
  const evs = drain(sub);
  t.same(brief(evs), ['change:c@3', 'delete:a@4']);
  const del = evs[1];
  t.ok(del && del.type === 'delete' && (del.resource.data as { name: string }).name === 'a', 'a delete carries the last stored state');
});

t.test('filters: type, tenancy wildcards and name prefixes', async (t) => {
  const s = setup();
  s.write('ab', 'x');
  s.write('ac', 'y');
  s.write('b', 'x');
  s.write('ab', 'x', 'Album');
  const nsX = s.pub.subscribe({ group: 'demo', kind: 'Artist', partition: 'default', namespace: 'x' });
  t.same(brief(drain(nsX)), ['change:ab@1', 'change:b@3', 'tail@4']);
  const pre = s.pub.subscribe({ ...artists, namePrefix: 'a' });
  t.same(brief(drain(pre)), ['change:ab@1', 'change:ac@2', 'tail@4']);
  s.write('az', 'z');
  s.write('q', 'x');
  t.same(brief(drain(nsX)), ['change:q@6']);
  t.same(brief(drain(pre)), ['change:az@5']);
});

t.test('resume from every revision in the window gives exactly the missing events; older is COMPACTED', async (t) => {
  const s = setup({ maxWindowEvents: 5 });
  for (let i = 0; i < 8; i++) s.write(`k${i}`);
  t.equal(s.pub.oldestResumable, 3, 'three events fell out of a window of five');
  for (let n = 3; n <= 8; n++) {
    const sub = s.pub.subscribe(artists, { gtRevision: n as Revision });
    const want = [];
    for (let r = n + 1; r <= 8; r++) want.push(`change:k${r - 1}@${r}`);
    t.same(brief(drain(sub)), [...want, 'tail@8'], `resume after ${n}`);
  }
  const old = s.pub.subscribe(artists, { gtRevision: 2 as Revision });
  t.same(brief(drain(old)), ['end:COMPACTED@3'], 'COMPACTED names the oldest resumable revision');
});

t.test('a resume from a revision this node has not reached waits, then tails; or times out clearly', async (t) => {
  const s = setup({ futureRevisionTimeoutMs: 1000 });
  s.write('a');
  const sub = s.pub.subscribe(artists, { gtRevision: 3 as Revision });
  t.same(drain(sub), [], 'nothing yet');
  s.write('b'); // revision 2: the subscriber already has it
  t.same(drain(sub), [], 'revisions it has are not sent again');
  s.write('c'); // revision 3
  s.write('d'); // revision 4
  t.same(brief(drain(sub)), ['tail@3', 'change:d@4']);
  const late = s.pub.subscribe(artists, { gtRevision: 100 as Revision });
  s.clock.ms += 1500;
  s.pub.tick();
  t.same(brief(drain(late)), ['end:TIMEOUT@4']);
});

t.test('a slow consumer is ended with SLOW_CONSUMER; others and the writer carry on', async (t) => {
  const s = setup({ subscriberBufferEvents: 10 });
  const slow = s.pub.subscribe(artists, { atTail: true });
  const fast = s.pub.subscribe(artists, { atTail: true });
  drain(fast);
  for (let i = 0; i < 30; i++) {
    s.write(`k${i}`);
    drain(fast);
  }
  const evs = drain(slow);
  // Its queue held the tail (queued at subscribe time, exempt from the live limit) and 10
  // live events; the 11th overflowed the limit of 10.
  t.same(brief(evs.slice(-1)), ['end:SLOW_CONSUMER@11'], 'ended when its queue passed the limit');
  t.ok(evs.length <= 12, 'its queue was dropped (bounded memory)');
  t.equal(s.pub.subscribers, 1, 'only the fast subscriber remains');
  s.write('after');
  t.same(brief(drain(fast)), ['change:after@31']);
});

t.test('concurrent subscribers to the same filter share one initial snapshot; the splice has no gap', async (t) => {
  const s = setup();
  for (let i = 0; i < 20; i++) s.write(`k${i}`);
  const subs = [];
  for (let i = 0; i < 100; i++) {
    subs.push(s.pub.subscribe(artists));
    if (i === 50) s.write('mid'); // a change while the cached snapshot is in use
  }
  t.equal(s.pub.snapshotBuilds, 1, '100 subscribers, one snapshot built');
  const late = drain(subs[99] as Subscription);
  t.same(brief(late).slice(-2), ['change:mid@21', 'tail@21'], 'a subscriber served from the older cached snapshot still gets the later change before its tail');
  t.equal(late.filter((e) => e.type === 'change').length, 21);
  s.clock.ms += 2000;
  s.pub.subscribe(artists);
  t.equal(s.pub.snapshotBuilds, 2, 'the cache expires');
});

t.test('a reset (snapshot install or restore) ends every subscription; history before it is gone', async (t) => {
  const s = setup();
  s.write('a');
  const sub = s.pub.subscribe(artists);
  drain(sub);
  s.pub.reset(10 as Revision);
  t.same(brief(drain(sub)), ['end:RESET@10']);
  // The state kept here did not change (entries after the last change carried none): a watcher
  // at its revision missed nothing, one before it did.
  t.equal(s.pub.oldestResumable, 1, 'resumable from the new state\'s revision');
  t.same(brief(drain(s.pub.subscribe(artists, { gtRevision: 0 as Revision }))), ['end:COMPACTED@1']);
  t.same(brief(drain(s.pub.subscribe(artists, { gtRevision: 1 as Revision }))), ['tail@1']);
});

t.test('a large initial state does not count against the live limit', async (t) => {
  const s = setup({ subscriberBufferEvents: 5 });
  for (let i = 0; i < 20; i++) s.write(`k${i}`);
  const sub = s.pub.subscribe(artists);
  s.write('live1');
  s.write('live2');
  const evs = drain(sub);
  t.equal(evs.filter((e) => e.type === 'end').length, 0, 'not ended: 20 initial events + tail queued, 2 live');
  t.same(brief(evs.slice(-3)), ['tail@20', 'change:live1@21', 'change:live2@22']);
  for (let i = 0; i < 6; i++) s.write(`more${i}`);
  t.same(brief(drain(sub)).slice(-1), ['end:SLOW_CONSUMER@28'], 'but live events beyond the limit still end it');
});

t.test('a resume waiting for a revision tails as soon as that revision is published', async (t) => {
  const s = setup();
  s.write('a');
  const sub = s.pub.subscribe(artists, { gtRevision: 2 as Revision });
  t.same(brief(drain(sub)), [], 'waiting');
  s.write('b');
  t.same(brief(drain(sub)), ['tail@2'], 'the change at 2 is one the watcher has; tail at once');
  s.write('c');
  t.same(brief(drain(sub)), ['change:c@3']);
});

t.test('bookmarks keep quiet subscribers fresh', async (t) => {
  const s = setup({ bookmarkIntervalMs: 100 });
  s.write('a');
  const sub = s.pub.subscribe(artists, { atTail: true });
  drain(sub);
  s.clock.ms += 150;
  s.write('other', 'default', 'Album');
  s.pub.tick();
  t.same(brief(drain(sub)), ['bookmark@2'], 'a bookmark at the current revision, past changes it does not watch');
});

t.test('defaults: a resume waiting for a revision gets no bookmark, and ends with TIMEOUT once 10 s have passed', async (t) => {
  const s = setup({ bookmarkIntervalMs: 100 });
  s.write('a');
  const waiting = s.pub.subscribe(artists, { gtRevision: 50 as Revision });
  const live = s.pub.subscribe(artists, { atTail: true });
  drain(live);
  for (let ms = 0; ms < 10_000; ms += 250) {
    s.clock.ms += 250;
    s.pub.tick();
  }
  t.equal(s.clock.ms, 10_000);
  t.same(brief(drain(waiting)), [], 'at exactly 10 s: still waiting, and no bookmark meanwhile');
  t.ok(drain(live).filter((e) => e.type === 'bookmark').length > 10, 'while a live subscriber got bookmarks all along');
  s.clock.ms += 1;
  s.pub.tick();
  t.same(brief(drain(waiting)), ['end:TIMEOUT@1'], 'past 10 s: TIMEOUT at the revision the node is at');
  t.equal(s.pub.subscribers, 1, 'and it is gone');
});

t.test('a resume waiting for a revision reached by entries that changed nothing (never published) tails on the next tick', async (t) => {
  const s = setup({}, true);
  s.write('a');
  const sub = s.pub.subscribe(artists, { gtRevision: 3 as Revision });
  s.del('nothing-here'); // revision 2: no change, not published
  s.del('nothing-either'); // revision 3: the same
  t.equal(s.pub.revision, 3);
  t.same(brief(drain(sub)), [], 'nothing published, nothing sent');
  s.pub.tick();
  t.same(brief(drain(sub)), ['tail@3'], 'the tick sees the revision reached');
  s.write('b');
  t.same(brief(drain(sub)), ['change:b@4'], 'then live events');
  const later = s.pub.subscribe(artists, { gtRevision: 5 as Revision });
  s.del('nothing-again'); // revision 5: not published
  s.write('c'); // revision 6: published before any tick
  t.same(brief(drain(later)), ['tail@5', 'change:c@6'], 'or the next published entry tails it first, at the awaited revision');
});

t.test('the window is bounded by bytes: rewriting one large resource keeps only the newest versions', async (t) => {
  const s = setup({ maxWindowBytes: 1024 * 1024 });
  const big = 'x'.repeat(100 * 1024);
  let index = 0;
  const first = s.fsm.store.revision;
  const rewrite = (i: number): Revision => {
    index = s.fsm.appliedIndex + 1;
    const out = s.fsm.apply({
      index: index as LogIndex,
      term: 1 as Term,
      data: encodeEnvelope(CommandType.ResourceWrite, { time: 't', uid: `big-u${i}`, generation: `big-g${i}`, id: { type: { group: 'demo', groupVersion: 'v1', kind: 'Artist' }, tenancy: tenancy('default'), name: 'big' }, data: { big, i } }),
    });
    s.pub.publish(index as Revision, out.changes as readonly ChangeRecord[]);
    return index as Revision;
  };
  for (let i = 0; i < 1000; i++) {
    rewrite(i);
    t.ok(s.pub.windowBytes <= 1024 * 1024 || i === 0, `after ${i + 1} rewrites the window holds ${s.pub.windowBytes} bytes`);
    if (s.pub.windowBytes > 1024 * 1024) break;
  }
  // 100 KiB each, counted twice (windowEventBytes): at most 5 fit in 1 MiB; the count bound
  // (100,000) would have kept all 1000.
  t.ok(s.pub.windowSize <= 5 && s.pub.windowSize >= 4, `the window keeps ${s.pub.windowSize} events`);
  t.equal(s.pub.windowBytes, 2 * s.fsm.store.dataBytes * s.pub.windowSize, 'the window counts each event as twice its resource\'s deterministic size');
  t.ok(s.pub.oldestResumable > first + 900, `resumes from long ago are compacted (oldest resumable ${s.pub.oldestResumable})`);
  const old = s.pub.subscribe(artists, { gtRevision: (first + 1) as Revision });
  t.same(brief(drain(old)).slice(-1), [`end:COMPACTED@${s.pub.oldestResumable}`], 'a resume from before the window is COMPACTED');
  const recent = s.pub.subscribe(artists, { gtRevision: s.pub.oldestResumable });
  const evs = brief(drain(recent));
  t.equal(evs.length, s.pub.windowSize + 1, `a resume inside the window replays it (${evs.length - 1} events) and tails`);
});

t.test('without a byte bound the same rewrites stay in the window (the bound is what trims them)', async (t) => {
  const s = setup({ maxWindowBytes: Number.MAX_SAFE_INTEGER });
  for (let i = 0; i < 50; i++) s.write('same');
  t.equal(s.pub.windowSize, 50);
  let sum = 0;
  for (const e of drain(s.pub.subscribe(artists, { gtRevision: s.pub.oldestResumable }))) if (e.type === 'change') sum += 2 * resourceBytes(e.resource);
  t.ok(sum > 0 && s.pub.windowBytes === sum, `windowBytes (${s.pub.windowBytes}) is the sum of twice the events' sizes (${sum})`);
});
