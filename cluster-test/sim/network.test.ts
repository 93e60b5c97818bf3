import t from 'tap';
import { SeededRandom } from './raft.js';
import { Links, SimNetwork, type NetworkOptions } from './network.js';
import { Scheduler } from './scheduler.js';

const ALL = ['n1', 'n2', 'n3', 'n4', 'n5'];

/** Every directed link that is open, as "a>b" strings, for compact assertions. */
function open(links: Links, nodes: readonly string[] = ALL): string[] {
  const out: string[] = [];
  for (const a of nodes) for (const b of nodes) if (a !== b && links.canSend(a, b)) out.push(`${a}>${b}`);
  return out;
}

t.test('a symmetric partition lets nodes talk only inside their group', async (t) => {
  const l = new Links();
  l.partition([['n1', 'n2'], ['n3', 'n4', 'n5']]);
  t.ok(l.canSend('n1', 'n2') && l.canSend('n2', 'n1'));
  t.ok(l.canSend('n3', 'n5') && l.canSend('n5', 'n4'));
  for (const a of ['n1', 'n2']) {
    for (const b of ['n3', 'n4', 'n5']) {
      t.notOk(l.canSend(a, b), `${a} cannot reach ${b}`);
      t.notOk(l.canSend(b, a), `${b} cannot reach ${a}`);
    }
  }
  l.heal();
  t.equal(open(l).length, 20, 'heal opens every link');
  t.ok(l.isHealed);
});

t.test('a one-way cut drops only one direction', async (t) => {
  const l = new Links();
  l.blockOneWay('n1', 'n2');
  t.notOk(l.canSend('n1', 'n2'));
  t.ok(l.canSend('n2', 'n1'), 'n2 still reaches n1');
  t.equal(open(l).length, 19);
});

t.test('a bridge joins two halves only through one node', async (t) => {
  const l = new Links();
  l.bridge(['n1', 'n2'], ['n4', 'n5'], 'n3');
  for (const x of ['n1', 'n2', 'n4', 'n5']) {
    t.ok(l.canSend('n3', x) && l.canSend(x, 'n3'), `the bridge n3 talks to ${x}`);
  }
  t.ok(l.canSend('n1', 'n2') && l.canSend('n4', 'n5'), 'each half talks inside');
  for (const a of ['n1', 'n2']) for (const b of ['n4', 'n5']) t.notOk(l.canSend(a, b) || l.canSend(b, a), `${a} and ${b} are cut`);
});

t.test('isolating a node cuts it off both ways and replaces the previous partition', async (t) => {
  const l = new Links();
  l.partition([['n1'], ['n2', 'n3', 'n4', 'n5']]);
  l.isolate('n3', ALL);
  t.ok(l.canSend('n1', 'n2'), 'the earlier partition is gone');
  for (const x of ALL.filter((n) => n !== 'n3')) t.notOk(l.canSend('n3', x) || l.canSend(x, 'n3'), `n3 and ${x} are cut`);
  t.equal(open(l).length, 12, 'the other four still form a full mesh');
});

interface TestMsg {
  from: string;
  to: string;
  payload: { n: number; bytes: Uint8Array };
}

function net(options: Partial<NetworkOptions>, seed = 1): { s: Scheduler; n: SimNetwork<TestMsg>; got: { at: number; m: TestMsg }[]; dropped: string[] } {
  const s = new Scheduler();
  const got: { at: number; m: TestMsg }[] = [];
  const dropped: string[] = [];
  const n = new SimNetwork<TestMsg>(
    { minDelayMs: 5, maxDelayMs: 20, lossProbability: 0, duplicateProbability: 0, ...options },
    new SeededRandom(seed),
    s,
    (m) => got.push({ at: s.now(), m }),
    (m, reason) => dropped.push(`${m.payload.n}:${reason}`),
  );
  return { s, n, got, dropped };
}

function drain(s: Scheduler): void {
  while (s.step()) {
    /* run every event */
  }
}

t.test('messages arrive after a delay within bounds, reordered, as private copies', async (t) => {
  const { s, n, got } = net({});
  const sent: TestMsg[] = [];
  for (let i = 0; i < 50; i++) {
    const m: TestMsg = { from: 'n1', to: 'n2', payload: { n: i, bytes: new Uint8Array([i]) } };
    sent.push(m);
    n.send(m);
  }
  // Mutating what was sent must not change what arrives (no aliasing across the wire).
  for (const m of sent) {
    m.payload.n = -1;
    m.payload.bytes[0] = 255;
  }
  drain(s);
  t.equal(got.length, 50);
  t.ok(got.every((g) => g.at >= 5 && g.at <= 20), 'every delay is within [5, 20] ms');
  t.same(got.map((g) => g.m.payload.n).sort((a, b) => a - b), Array.from({ length: 50 }, (_, i) => i), 'each message arrives once, unmodified');
  t.ok(got.every((g) => g.m.payload.bytes[0] === g.m.payload.n), 'payload bytes are a copy');
  const order = got.map((g) => g.m.payload.n);
  t.notSame(order, [...order].sort((a, b) => a - b), 'random delays reorder messages');
  t.same(n.stats, { sent: 50, delivered: 50, dropped: 0, duplicated: 0, maxInFlight: 50 });
  t.equal(n.inFlight, 0, 'nothing left in flight');
});

t.test('loss and duplication follow their probabilities', async (t) => {
  const lossy = net({ lossProbability: 1 });
  lossy.n.send({ from: 'n1', to: 'n2', payload: { n: 1, bytes: new Uint8Array() } });
  drain(lossy.s);
  t.equal(lossy.got.length, 0);
  t.same(lossy.dropped, ['1:loss']);
  const dup = net({ duplicateProbability: 1 });
  dup.n.send({ from: 'n1', to: 'n2', payload: { n: 7, bytes: new Uint8Array() } });
  drain(dup.s);
  t.equal(dup.got.length, 2, 'delivered twice');
  t.not(dup.got[0]?.m, dup.got[1]?.m, 'as two distinct copies');
  const some = net({ lossProbability: 0.3 }, 42);
  for (let i = 0; i < 1000; i++) some.n.send({ from: 'n1', to: 'n2', payload: { n: i, bytes: new Uint8Array() } });
  drain(some.s);
  t.ok(some.got.length > 600 && some.got.length < 800, `about 70% delivered (${some.got.length})`);
});

t.test('a partition drops messages at send time and messages already in flight', async (t) => {
  const { s, n, got, dropped } = net({ minDelayMs: 10, maxDelayMs: 10 });
  n.send({ from: 'n1', to: 'n2', payload: { n: 1, bytes: new Uint8Array() } });
  n.links.isolate('n2', ALL);
  n.send({ from: 'n3', to: 'n2', payload: { n: 2, bytes: new Uint8Array() } });
  n.send({ from: 'n3', to: 'n1', payload: { n: 3, bytes: new Uint8Array() } });
  t.equal(n.inFlight, 2, 'the message cut in flight still counts until it would have arrived');
  drain(s);
  t.same(got.map((g) => g.m.payload.n), [3]);
  t.same(dropped.sort(), ['1:partition', '2:partition']);
  t.equal(n.inFlight, 0, 'nothing left in flight');
});

t.test('the same seed gives the same delivery schedule', async (t) => {
  const run = (): string => {
    const { s, n, got } = net({ lossProbability: 0.2, duplicateProbability: 0.2 }, 99);
    for (let i = 0; i < 100; i++) n.send({ from: 'n1', to: 'n2', payload: { n: i, bytes: new Uint8Array() } });
    drain(s);
    return got.map((g) => `${g.at}:${g.m.payload.n}`).join(',');
  };
  t.equal(run(), run());
});
