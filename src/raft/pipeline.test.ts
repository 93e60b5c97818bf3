/**
 * The pipelined hand-off (RawNode.accept / persisted, src/replica/README.md "Pipelined
 * writes"): the next Ready is taken before the previous write is durable, a leader counts its
 * own entries toward commit only once persisted, and a truncated suffix is handed out again.
 */
import t from 'tap';
import { NO_NODE, SeededRandom, nodeId, type LogIndex, type Term } from '../base/index.js';
import { makeConfig } from './config.js';
import { RawNode } from './raw-node.js';
import type { Entry, Message, Ready } from './types.js';

const n1 = nodeId('n1');
const n2 = nodeId('n2');
const n3 = nodeId('n3');
const enc = new TextEncoder();

function drainWithAdvance(raw: RawNode): void {
  while (raw.hasReady()) raw.advance(raw.ready());
}

function singleLeader(): RawNode {
  const raw = new RawNode({ id: n1, random: new SeededRandom(1) }, RawNode.bootstrapState(makeConfig([{ id: n1, suffrage: 'voter', address: '' }])));
  raw.campaign();
  drainWithAdvance(raw);
  t.equal(raw.basicStatus().role, 'leader');
  return raw;
}

function commands(es: readonly Entry[]): string[] {
  return es.filter((e) => e.data[0] !== 0x01 && e.data[0] !== 0x02).map((e) => new TextDecoder().decode(e.data));
}

t.test('a leader hands out the next Ready before the previous write is durable, and commits only what it persisted', async (t) => {
  const raw = singleLeader();
  const before = raw.basicStatus().commit;
  const a = raw.propose(enc.encode('a'));
  const rd1 = raw.ready();
  t.same(commands(rd1.entries), ['a']);
  raw.accept(rd1);
  t.notOk(raw.hasReady(), 'nothing more to hand out: entry a is in progress');
  const b = raw.propose(enc.encode('b'));
  t.ok(raw.hasReady());
  const rd2 = raw.ready();
  t.same(commands(rd2.entries), ['b'], 'the second Ready carries only the new entry');
  raw.accept(rd2);
  t.equal(raw.basicStatus().commit, before, 'no commit while the leader has not persisted its own entries');
  raw.persisted(rd1);
  t.equal(raw.basicStatus().commit, a.index, 'a commits once its write is durable');
  const rd3 = raw.ready();
  t.same(commands(rd3.committedEntries), ['a'], 'only the durable, committed entry is handed out for apply');
  raw.accept(rd3);
  raw.persisted(rd3);
  raw.persisted(rd2);
  t.equal(raw.basicStatus().commit, b.index);
  const rd4 = raw.ready();
  t.same(commands(rd4.committedEntries), ['b']);
});

t.test('accept refuses a Ready with a snapshot; ready() twice without a hand-off is refused', async (t) => {
  const raw = singleLeader();
  raw.propose(enc.encode('x'));
  raw.ready();
  t.throws(() => raw.ready(), /before advance/);
});

function app(from: typeof n1, term: number, index: number, logTerm: number, entries: Entry[], commit: number): Message {
  return { type: 'app', from, to: n2, term: term as Term, index: index as LogIndex, logTerm: logTerm as Term, entries, commit: commit as LogIndex };
}

function entry(index: number, term: number, s: string): Entry {
  return { index: index as LogIndex, term: term as Term, data: enc.encode(s) };
}

t.test('a follower: a suffix replaced while its write runs is handed out again, and only durable entries apply', async (t) => {
  const config = makeConfig([
    { id: n1, suffrage: 'voter', address: '' },
    { id: n2, suffrage: 'voter', address: '' },
    { id: n3, suffrage: 'voter', address: '' },
  ]);
  const raw = new RawNode({ id: n2, random: new SeededRandom(2) }, RawNode.bootstrapState(config));
  drainWithAdvance(raw);
  // Leader n1 of term 2 sends entries 2..4.
  raw.step(app(n1, 2, 1, 1, [entry(2, 2, 'a'), entry(3, 2, 'b'), entry(4, 2, 'c')], 1));
  const rd1 = raw.ready();
  t.same(commands(rd1.entries), ['a', 'b', 'c']);
  const ack1 = rd1.messages.find((m) => m.type === 'app-resp');
  t.ok(ack1 !== undefined && ack1.type === 'app-resp' && ack1.index === 4, 'the answer acknowledges 4 (the driver holds it until the write is durable)');
  raw.accept(rd1);
  // Leader n3 of term 3 overwrites from index 3 while the write of 2..4 runs.
  raw.step(app(n3, 3, 2, 2, [entry(3, 3, 'B'), entry(4, 3, 'C')], 1));
  const rd2: Ready = raw.ready();
  t.same(commands(rd2.entries), ['B', 'C'], 'the replaced suffix is handed out again');
  raw.accept(rd2);
  // The first write completes: entry 4 of term 2 is gone, so nothing is stable past what matches.
  raw.persisted(rd1);
  raw.step({ type: 'heartbeat', from: n3, to: n2, term: 3 as Term, commit: 4 as LogIndex, readSeq: 0 });
  const rd3 = raw.ready();
  t.same(commands(rd3.committedEntries), [], 'committed but not durable here: nothing applies yet');
  raw.accept(rd3);
  raw.persisted(rd3);
  raw.persisted(rd2);
  const rd4 = raw.ready();
  t.same(commands(rd4.committedEntries), ['a', 'B', 'C'], 'once the second write is durable, 2..4 apply');
  t.not(raw.basicStatus().leader, NO_NODE);
});
