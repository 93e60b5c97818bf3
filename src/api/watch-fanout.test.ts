import t from 'tap';
import type { Clock, LogIndex, Revision, Term } from '../base/index.js';
import { Fsm, MessageType, encodeEnvelope } from '../fsm/index.js';
import type { ChangeRecord } from '../store/index.js';
import { EventPublisher } from '../stream/index.js';
import { registerDemoTypes } from './demo-types.js';
import { TypeRegistry } from './registry.js';
import { ResourceService } from './resource-service.js';
import { WatchService, type WatchEvent } from './watch.js';

const clock: Clock = { nowMs: () => 0, monotonicMs: () => 0 };

function setup(fanoutEventsPerTurn: number): { svc: WatchService; write: (name: string) => void } {
  const fsm = new Fsm();
  const pub = new EventPublisher({ current: () => fsm.store }, { clock, bookmarkIntervalMs: Number.POSITIVE_INFINITY });
  const registry = new TypeRegistry();
  registerDemoTypes(registry);
  const resources = new ResourceService(() => undefined, registry, clock);
  const svc = new WatchService(() => pub, resources, { clock, fanoutEventsPerTurn });
  let index = 0;
  const write = (name: string): void => {
    index++;
    const body = { time: 't', uid: `u${index}`, generation: `g${index}`, id: { type: { group: 'demo', groupVersion: 'v1', kind: 'Artist' }, tenancy: { partition: 'default', namespace: 'default' }, name }, data: { name } };
    const out = fsm.apply({ index: index as LogIndex, term: 1 as Term, data: encodeEnvelope(MessageType.ResourceWrite, body) });
    pub.publish(index as Revision, out.changes as readonly ChangeRecord[]);
  };
  return { svc, write };
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
