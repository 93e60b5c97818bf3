import t from 'tap';
import { cairn } from '../gen/resource.js';
import { methods, optionalUint64, resourceFromMsg, watchListBatchedMethod, watchListMethod, type WatchEventMsg } from './wire.js';

/**
 * Answers are the generated messages as decoded: fields the server left unset (proto3 omits
 * defaults on the wire) must read as their defaults, exactly as the JSON-shaped types promise.
 */
const pb = cairn.resource.v1;
const encode = (m: cairn.resource.v1.ReadResponse.$Properties): Buffer => Buffer.from(pb.ReadResponse.encode(m).finish());

t.test('a resource with every optional field unset decodes to the defaults', async (t) => {
  const res = methods.read.deserialize(encode({ resource: { id: { type: 'demo.v1.Artist', name: 'korn' }, dataJson: '{}' }, revision: '7' }));
  t.same(resourceFromMsg(res.resource), {
    id: { type: 'demo.v1.Artist', tenancy: { partition: '', namespace: '' }, name: 'korn', uid: '' },
    owner: null,
    version: '',
    generation: '',
    metadata: {},
    finalizers: [],
    deletion_timestamp: null,
    data: {},
    status: {},
  });
  t.equal(res.revision, '7');
  t.equal(optionalUint64(res.lastLeaderContactMs), undefined, 'an absent optional uint64 is undefined, not 0 or null');
});

t.test('every field set survives the round trip', async (t) => {
  const resource = {
    id: { type: 'demo.v1.Album', tenancy: { partition: 'p', namespace: 'n' }, name: 'a', uid: 'U1' },
    owner: { type: 'demo.v1.Artist', tenancy: { partition: 'p', namespace: 'n' }, name: 'korn', uid: 'U0' },
    version: '12',
    generation: '3',
    metadata: { team: 'x' },
    finalizers: ['f1', 'f2'],
    deletionTimestamp: '2026-01-01T00:00:00.000Z',
    dataJson: '{"title":"Issues","n":1}',
    status: { c: { observedGeneration: '3', conditions: [{ type: 'Ready', state: 'TRUE', reason: 'r', message: 'm' }], updatedAt: '2026-01-01T00:00:01.000Z' } },
  };
  const res = methods.read.deserialize(encode({ resource, revision: '12', lastLeaderContactMs: 2 ** 40 + 5 }));
  t.same(resourceFromMsg(res.resource), {
    id: resource.id,
    owner: resource.owner,
    version: '12',
    generation: '3',
    metadata: { team: 'x' },
    finalizers: ['f1', 'f2'],
    deletion_timestamp: '2026-01-01T00:00:00.000Z',
    data: { title: 'Issues', n: 1 },
    status: { c: { observed_generation: '3', conditions: [{ type: 'Ready', state: 'TRUE', reason: 'r', message: 'm' }], updated_at: '2026-01-01T00:00:01.000Z' } },
  });
  t.equal(optionalUint64(res.lastLeaderContactMs), 2 ** 40 + 5, 'a uint64 beyond 32 bits reads as its number');
  t.equal(optionalUint64(methods.read.deserialize(encode({ lastLeaderContactMs: 0 })).lastLeaderContactMs), 0, 'a present 0 is 0');
});

t.test('a missing resource or unparsable data is a malformed answer', async (t) => {
  t.throws(() => resourceFromMsg(methods.read.deserialize(encode({ revision: '1' })).resource), { code: 'INTERNAL', message: /a resource is missing/ });
  t.throws(() => resourceFromMsg({ id: { type: 'demo.v1.Artist', name: 'k' }, dataJson: '{' }), { code: 'INTERNAL', message: /data_json of demo.v1.Artist k does not parse/ });
});

t.test('a watch event names its kind; one this client does not know has none', async (t) => {
  const one = (b: Buffer): WatchEventMsg => {
    const evs = watchListMethod.deserialize(b);
    t.equal(evs.length, 1, 'WatchList: one event per message');
    return evs[0] as WatchEventMsg;
  };
  const change = one(Buffer.from(pb.WatchEvent.encode({ watch: 2, revision: '9', change: { id: { name: 'k' } } }).finish()));
  t.same([change.event, change.watch, change.revision], ['change', 2, '9']);
  const tail = one(Buffer.from(pb.WatchEvent.encode({ revision: '9', tail: {} }).finish()));
  t.equal(tail.event, 'tail');
  // Field 15, length-delimited, empty: a kind from a newer server.
  const unknown = one(Buffer.concat([Buffer.from(pb.WatchEvent.encode({ watch: 1, revision: '10' }).finish()), Buffer.from([(15 << 3) | 2, 0])]));
  t.same([unknown.event, unknown.watch, unknown.revision], [undefined, 1, '10']);
});

t.test('a WatchListBatched message decodes to its events, in order', async (t) => {
  const batch = Buffer.from(
    pb.WatchEventBatch.encode({ events: [{ watch: 0, revision: '5', change: { id: { name: 'a' } } }, { watch: 1, revision: '6', delete: { id: { name: 'b' } } }, { revision: '6', bookmark: {} }] }).finish(),
  );
  const evs = watchListBatchedMethod.deserialize(batch);
  t.same(
    evs.map((e) => [e.event, e.watch, e.revision]),
    [
      ['change', 0, '5'],
      ['delete', 1, '6'],
      ['bookmark', 0, '6'],
    ],
  );
  t.same(watchListBatchedMethod.deserialize(Buffer.alloc(0)), [], 'an empty message is no event (a server never sends one)');
});
