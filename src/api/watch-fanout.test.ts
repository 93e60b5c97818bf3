import t from 'tap';
import type { Clock, LogIndex, Revision, Term } from '../base/index.js';
import { Fsm, CommandType, encodeEnvelope } from '../fsm/index.js';
import type { ChangeRecord, Resource } from '../store/index.js';
import { EventPublisher } from '../stream/index.js';
import { registerDemoTypes } from './demo-types.js';
import { TypeRegistry } from './registry.js';
import { ResourceService } from './resource-service.js';
import { runningNode } from './served-node.js';
import { encodeWatchEvent } from './grpc-resource-service.js';
import { cairn } from '../gen/resource.js';
import { SharedChangeEvent, sharedChangeEvent, WatchService, type WatchEvent } from './watch.js';
import { watchEventLine } from './watch-routes.js';

const clock: Clock = { nowMs: () => 0, monotonicMs: () => 0 };

function setup(fanoutEventsPerTurn: number): { svc: WatchService; write: (name: string) => void; del: (name: string) => void } {
  const fsm = new Fsm();
  const pub = new EventPublisher({ current: () => fsm.store }, { clock, bookmarkIntervalMs: Number.POSITIVE_INFINITY });
  const registry = new TypeRegistry();
  registerDemoTypes(registry);
  const resources = new ResourceService(runningNode({}), registry, clock);
  const svc = new WatchService(runningNode({ publisher: pub }), resources, { clock, fanoutEventsPerTurn });
  let index = 0;
  const write = (name: string): void => {
    index++;
    const body = { time: 't', uid: `u${index}`, generation: `g${index}`, id: { type: { group: 'demo', groupVersion: 'v1', kind: 'Artist' }, tenancy: { partition: 'default', namespace: 'default' }, name }, data: { name } };
    const out = fsm.apply({ index: index as LogIndex, term: 1 as Term, data: encodeEnvelope(CommandType.ResourceWrite, body) });
    pub.publish(index as Revision, out.changes as readonly ChangeRecord[]);
  };
  const del = (name: string): void => {
    index++;
    const body = { time: 't', uid: `u${index}`, generation: `g${index}`, id: { type: { group: 'demo', groupVersion: 'v1', kind: 'Artist' }, tenancy: { partition: 'default', namespace: 'default' }, name } };
    const out = fsm.apply({ index: index as LogIndex, term: 1 as Term, data: encodeEnvelope(CommandType.ResourceDelete, body) });
    pub.publish(index as Revision, out.changes as readonly ChangeRecord[]);
  };
  return { svc, write, del };
}

const nextTurn = (): Promise<void> => new Promise((r) => setImmediate(r));

t.test('fan-out yields the event loop: at most the per-turn budget (plus one write) goes out before other work runs', async (t) => {
  const budget = 100;
  const { svc, write } = setup(budget);
  const sessions = 50;
  const perTurn = new Map<number, number>();
  let delivered = 0;
  for (let i = 0; i < sessions; i++) {
    svc.open([{ type: 'demo.v1.Artist', atTail: true }], {}, {
      send(events: readonly WatchEvent[]) {
        perTurn.set(svc.turns, (perTurn.get(svc.turns) ?? 0) + events.length);
        delivered += events.length;
        return true;
      },
      onDrain() {},
      end() {},
    });
  }
  await nextTurn();
  await nextTurn();
  for (let i = 0; i < 20; i++) write(`a${i}`);
  // Something else that wants the event loop meanwhile (Raft messages, proposals): it must get turns.
  let otherWork = 0;
  const deadline = Date.now() + 10_000;
  while (delivered < sessions * 20) {
    if (Date.now() > deadline) throw new Error(`only ${delivered} of ${sessions * 20} events delivered`);
    otherWork++;
    await nextTurn();
  }
  const max = Math.max(...perTurn.values());
  t.ok(max <= budget + 256, `no turn handed over more than the budget plus one write (max ${max}, budget ${budget})`);
  t.ok(perTurn.size >= (sessions * 20) / (budget + 256), `the ${sessions * 20} events went out over ${perTurn.size} turns`);
  t.ok(otherWork >= perTurn.size - 1, `other work ran between the fan-out turns (${otherWork} times)`);
});

t.test('with a large budget one turn serves every waiting stream', async (t) => {
  const { svc, write } = setup(1_000_000);
  const turnsSeen = new Set<number>();
  let delivered = 0;
  for (let i = 0; i < 20; i++) {
    svc.open([{ type: 'demo.v1.Artist', atTail: true }], {}, {
      send(events) {
        turnsSeen.add(svc.turns);
        delivered += events.length;
        return true;
      },
      onDrain() {},
      end() {},
    });
  }
  await nextTurn();
  await nextTurn();
  write('x');
  const deadline = Date.now() + 5_000;
  while (delivered < 20) {
    if (Date.now() > deadline) throw new Error('not delivered');
    await nextTurn();
  }
  t.equal(turnsSeen.size, 1, 'one turn');
});

t.test('every stream is handed the same event object for a change, and each transport encodes it once', async (t) => {
  const { svc, write, del } = setup(1_000_000);
  // Three streams: two with one watch (index 0), one with the type twice (indexes 0 and 1).
  const got: WatchEvent[][] = [[], [], []];
  const specs = [[{ type: 'demo.v1.Artist', atTail: true }], [{ type: 'demo.v1.Artist', atTail: true }], [{ type: 'demo.v1.Album', atTail: true }, { type: 'demo.v1.Artist', atTail: true }]];
  specs.forEach((spec, i) =>
    svc.open(spec, {}, {
      send(events) {
        got[i]?.push(...events);
        return true;
      },
      onDrain() {},
      end() {},
    }),
  );
  await nextTurn();
  write('x');
  del('x');
  const deadline = Date.now() + 5_000;
  while (got.some((g) => g.length < 2)) {
    if (Date.now() > deadline) throw new Error(`not delivered: ${got.map((g) => g.length).join(', ')}`);
    await nextTurn();
  }
  const [a, b, c] = got as [WatchEvent[], WatchEvent[], WatchEvent[]];
  t.ok(a[0] instanceof SharedChangeEvent, 'a shared event');
  t.equal(a[0], b[0], 'streams with the same watch index get the one object');
  t.equal(a[1], b[1], 'the delete too');
  t.not(a[0], a[1], 'a change and the delete of the same stored version are different events');
  t.not(a[0], c[0], 'another watch index is another event');
  t.same(
    c.map((e) => [e.kind, e.kind === 'bookmark' ? -1 : e.watch]),
    [['change', 1], ['delete', 1]],
  );
  // Encoded once: the same bytes (and NDJSON line) for every stream, and what a plain event of the same fields encodes to.
  const ev = a[0] as WatchEvent;
  t.equal(encodeWatchEvent(ev), encodeWatchEvent(b[0] as WatchEvent), 'gRPC: one Buffer for every stream');
  t.equal(watchEventLine(ev), watchEventLine(b[0] as WatchEvent));
  for (const e of [...a, c[0] as WatchEvent, c[1] as WatchEvent]) {
    if (e.kind !== 'change' && e.kind !== 'delete') throw new Error('a change or delete was expected');
    const plain = { kind: e.kind, watch: e.watch, revision: e.revision, resource: e.resource };
    t.same([...encodeWatchEvent(e)], [...encodeWatchEvent(plain)], `${e.kind} to watch ${e.watch}: the cached bytes are this event's`);
    t.equal(watchEventLine(e), watchEventLine(plain));
    const decoded = cairn.resource.v1.WatchEvent.decode(encodeWatchEvent(e));
    t.same([decoded.watch, decoded.revision, decoded.event], [e.watch, String(e.revision), e.kind], 'decodes to its own watch index, revision and kind');
  }
});

t.test('sharedChangeEvent: one object per kind, watch index and revision of a stored version', async (t) => {
  const r = { id: { name: 'x' } } as unknown as Resource;
  const other = { id: { name: 'x' } } as unknown as Resource;
  const rev = 5 as Revision;
  const first = sharedChangeEvent('change', 0, rev, r);
  t.equal(sharedChangeEvent('change', 0, rev, r), first);
  const keys: [('change' | 'delete'), number, number, Resource][] = [['delete', 0, 5, r], ['change', 1, 5, r], ['change', 0, 6, r], ['change', 0, 5, other]];
  const made = keys.map(([k, w, v, res]) => sharedChangeEvent(k, w, v as Revision, res));
  for (const [i, e] of made.entries()) {
    t.not(e, first, `${keys[i]?.slice(0, 3).join(' ')} is another event`);
    t.equal(sharedChangeEvent(...(keys[i] as [('change' | 'delete'), number, Revision, Resource])), e, 'and it is found again');
  }
  t.equal(sharedChangeEvent('change', 0, rev, r), first, 'the first is still found among several');
});
