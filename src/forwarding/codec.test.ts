import t from 'tap';
import fc from 'fast-check';
import type { LogIndex, NodeId, Term } from '../base/index.js';
import type { Message } from '../raft/index.js';
import { WireError, decodeMessage, encodeMessage } from './codec.js';

const base = { from: 'n1' as NodeId, to: 'n2' as NodeId, term: 3 as Term };
const samples: Message[] = [
  { ...base, type: 'app', index: 4 as LogIndex, logTerm: 2 as Term, commit: 3 as LogIndex, entries: [{ index: 5 as LogIndex, term: 3 as Term, data: Uint8Array.of(0x10, 0xc0) }] },
  { ...base, type: 'app-resp', index: 5 as LogIndex, reject: true, hintIndex: 2 as LogIndex, hintTerm: 1 as Term },
  { ...base, type: 'vote', lastIndex: 9 as LogIndex, lastTerm: 2 as Term, transfer: false },
  { ...base, type: 'pre-vote-resp', reject: false },
  { ...base, type: 'heartbeat', commit: 9 as LogIndex, readSeq: 4 },
  { ...base, type: 'heartbeat-resp', readSeq: 4 },
  {
    ...base,
    type: 'snap',
    meta: { index: 100 as LogIndex, term: 2 as Term, config: { members: [{ id: 'n1' as NodeId, suffrage: 'voter', address: 'a:1' }] } },
    offset: 0,
    totalBytes: 3,
    chunk: Uint8Array.of(1, 2, 3),
  },
  { ...base, type: 'snap-resp', snapIndex: 100 as LogIndex, nextOffset: 3, chunkOffset: 0 },
  { ...base, type: 'timeout-now' },
  { ...base, type: 'read-index', requestIds: ['a', 'b'] },
  { ...base, type: 'read-index-resp', requestIds: ['a'], index: 7 as LogIndex, reject: false },
];

t.test('every message type round-trips unchanged, entry bytes included', async (t) => {
  for (const m of samples) t.same(decodeMessage(encodeMessage(m)), m, m.type);
});

t.test('malformed messages are refused with a reason, never passed on', async (t) => {
  const bad: Array<[string, unknown]> = [
    ['unknown type', { ...base, type: 'launch-missiles' }],
    ['negative term', { ...base, term: -1, type: 'timeout-now' }],
    ['string index', { ...base, type: 'heartbeat', commit: '9', readSeq: 1 }],
    ['empty entry data', { ...base, type: 'app', index: 1, logTerm: 1, commit: 1, entries: [{ index: 2, term: 1, data: new Uint8Array(0) }] }],
    ['huge snapshot', { ...base, type: 'snap', meta: { index: 1, term: 1, config: { members: [] } }, offset: 0, totalBytes: 2 ** 40, chunk: Uint8Array.of(1) }],
    ['chunk past end', { ...base, type: 'snap', meta: { index: 1, term: 1, config: { members: [] } }, offset: 2, totalBytes: 3, chunk: Uint8Array.of(1, 2) }],
    ['long node id', { ...base, from: 'x'.repeat(64), type: 'timeout-now' }],
    ['not an object', [1, 2, 3]],
  ];
  for (const [what, v] of bad) {
    t.throws(() => decodeMessage(encodeMessage(v as Message)), WireError, what);
  }
  t.throws(() => decodeMessage(Uint8Array.of(0xc1)), WireError, 'not msgpack');
});

t.test('random bytes never crash the decoder: a message or a WireError', async (t) => {
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 200 }), (buf) => {
      try {
        decodeMessage(buf);
      } catch (e) {
        if (!(e instanceof WireError)) throw e;
      }
    }),
    { numRuns: 3000 },
  );
  t.pass('3000 random inputs');
});
