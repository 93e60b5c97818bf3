/**
 * The timing wrappers of the replica's transport and state machine (timed-ports.ts), on a fake
 * transport and a hand-moved clock: which answer ends which round trip, and that everything
 * passes through unchanged.
 */
import t from 'tap';
import type { LogIndex, NodeId, Term } from '../base/index.js';
import type { Entry, Message } from '../raft/index.js';
import type { StateMachine, Transport } from '../replica/index.js';
import { RoundTripTransport, TimedStateMachine } from './timed-ports.js';

const L = 'n1' as NodeId;
const F = 'n2' as NodeId;
const G = 'n3' as NodeId;
const term = 1 as Term;
const entry = (index: number): Entry => ({ index: index as LogIndex, term, type: 'normal', data: new Uint8Array(1) }) as unknown as Entry;

class FakeTransport implements Transport {
  readonly sent: Message[] = [];
  handler: ((m: Message) => void) | undefined;
  lostHandler: ((peer: NodeId) => void) | undefined;
  send(messages: readonly Message[]): void {
    this.sent.push(...messages);
  }
  onMessage(handler: (m: Message) => void): void {
    this.handler = handler;
  }
  onConnectionLost(handler: (peer: NodeId) => void): void {
    this.lostHandler = handler;
  }
  async close(): Promise<void> {}
  deliver(m: Message): void {
    this.handler?.(m);
  }
}

function setup(): { inner: FakeTransport; rt: RoundTripTransport; clock: { ms: number }; hb: number[]; app: number[]; got: Message[] } {
  const inner = new FakeTransport();
  const clock = { ms: 1000 };
  const hb: number[] = [];
  const app: number[] = [];
  const rt = new RoundTripTransport(inner, { heartbeat: (s) => hb.push(s), append: (s) => app.push(s) }, () => clock.ms);
  const got: Message[] = [];
  rt.onMessage((m) => got.push(m));
  return { inner, rt, clock, hb, app, got };
}

const heartbeat = (to: NodeId, readSeq: number): Message => ({ type: 'heartbeat', from: L, to, term, commit: 0 as LogIndex, readSeq });
const heartbeatResp = (from: NodeId, readSeq: number): Message => ({ type: 'heartbeat-resp', from, to: L, term, readSeq });
const app = (to: NodeId, index: number, n: number): Message => ({
  type: 'app',
  from: L,
  to,
  term,
  index: index as LogIndex,
  logTerm: term,
  entries: Array.from({ length: n }, (_, i) => entry(index + 1 + i)),
  commit: 0 as LogIndex,
});
const appResp = (from: NodeId, index: number, reject = false): Message => ({ type: 'app-resp', from, to: L, term, index: index as LogIndex, reject, hintIndex: 0 as LogIndex, hintTerm: 0 as Term });

t.test('heartbeat round trips: matched by peer and read sequence, timed from the first heartbeat of the sequence', async (t) => {
  const { inner, rt, clock, hb, got } = setup();
  rt.send([heartbeat(F, 1), heartbeat(G, 1)]);
  t.equal(inner.sent.length, 2, 'passed on');
  clock.ms += 4;
  rt.send([heartbeat(F, 1)]); // the same sequence again: still timed from the first
  clock.ms += 2;
  inner.deliver(heartbeatResp(F, 1));
  t.same(hb, [0.006]);
  inner.deliver(heartbeatResp(F, 1)); // the answer to the second heartbeat: its sequence is done
  t.same(hb, [0.006], 'a second answer to a sequence is not timed again');
  clock.ms += 1;
  inner.deliver(heartbeatResp(G, 1));
  t.same(hb, [0.006, 0.007], "each peer's own");
  rt.send([heartbeat(F, 2), heartbeat(F, 3)]);
  clock.ms += 5;
  inner.deliver(heartbeatResp(F, 3));
  inner.deliver(heartbeatResp(F, 2));
  t.same(hb, [0.006, 0.007, 0.005], 'an answer forgets older sequences: the late answer to 2 is not timed');
  t.equal(got.length, 5, 'every answer reaches the driver');
});

t.test('append round trips: until the peer acknowledges the last entry; a rejection forgets the pending ones', async (t) => {
  const { inner, rt, clock, app: rtts } = setup();
  rt.send([app(F, 0, 2)]); // entries 1..2
  clock.ms += 3;
  rt.send([app(F, 2, 1), app(F, 3, 0)]); // entry 3; then an empty append (commit only): not timed
  clock.ms += 2;
  inner.deliver(appResp(F, 1));
  t.same(rtts, [], 'entry 2 is not acknowledged yet');
  inner.deliver(appResp(F, 2));
  t.same(rtts, [0.005]);
  clock.ms += 1;
  inner.deliver(appResp(F, 3));
  t.same(rtts, [0.005, 0.003], 'each append from its own send');
  inner.deliver(appResp(F, 3));
  t.same(rtts, [0.005, 0.003], 'a repeated acknowledgement times nothing');
  rt.send([app(G, 3, 1)]);
  inner.deliver(appResp(G, 3, true));
  inner.deliver(appResp(G, 9));
  t.same(rtts, [0.005, 0.003], 'rejected: the pending append is forgotten');
  rt.send([app(F, 3, 1), app(G, 3, 1)]);
  clock.ms += 7;
  inner.deliver(appResp(G, 4));
  t.same(rtts, [0.005, 0.003, 0.007], "only the acknowledging peer's");
});

t.test('messages, connection losses and close pass through', async (t) => {
  const { inner, rt } = setup();
  const lost: NodeId[] = [];
  t.ok(rt.onConnectionLost, 'offered when the inner transport offers it');
  rt.onConnectionLost?.((p) => lost.push(p));
  inner.lostHandler?.(F);
  t.same(lost, [F]);
  const plain: Transport = { send: () => {}, onMessage: () => {}, close: async () => {} };
  t.equal(new RoundTripTransport(plain, { heartbeat: () => {}, append: () => {} }, () => 0).onConnectionLost, undefined, 'and absent when it does not');
  const vote: Message = { type: 'vote', from: L, to: F, term, lastIndex: 0 as LogIndex, lastTerm: term, transfer: false };
  rt.send([vote]);
  t.same(inner.sent, [vote]);
});

t.test('the state machine: every apply timed, even one that throws; the rest passes through', async (t) => {
  const clock = { ms: 0 };
  let applied = 0 as LogIndex;
  const inner: StateMachine<string, never> = {
    apply: (e) => {
      clock.ms += 0.02;
      if (e.index === 3) throw new Error('boom');
      applied = e.index;
      return { result: `ok ${e.index}`, changes: [] };
    },
    snapshot: () => ({ index: applied, chunks: () => [] }),
    restore: (meta) => {
      applied = meta.index;
    },
    get appliedIndex() {
      return applied;
    },
  };
  const seen: number[] = [];
  const sm = new TimedStateMachine(inner, (s) => seen.push(s), () => clock.ms);
  t.equal(sm.apply(entry(1)).result, 'ok 1');
  t.equal(sm.appliedIndex, 1);
  t.throws(() => sm.apply(entry(3)), /boom/);
  t.equal(seen.length, 2);
  for (const s of seen) t.ok(Math.abs(s - 0.00002) < 1e-12, `${s} s`);
  t.equal(sm.snapshot().index, 1);
  sm.restore({ index: 9 as LogIndex, term, config: { members: [] } } as never, new Uint8Array());
  t.equal(sm.appliedIndex, 9);
});
