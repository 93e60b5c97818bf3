import t from 'tap';
import type { Revision } from '../base/index.js';
import { cairn } from '../gen/resource.js';
import { ResourceStore, type Resource } from '../store/index.js';
import { answerWithResource, encodeWatchEvent, encodeWatchEventBatch } from './grpc-resource-service.js';
import { sharedChangeEvent } from './watch.js';
import { resourceToJson } from './resource-json.js';
import { copyJson, isPlainJson } from './resource-service.js';

const pb = cairn.resource.v1;
const ref = { type: { group: 'demo', groupVersion: 'v1', kind: 'Album' }, tenancy: { partition: 'default', namespace: 'default' }, name: 'a1' };

function put(store: ResourceStore, rev: number, data: Record<string, unknown>, metadata: Record<string, string> = {}): Resource {
  const r = store.write({ id: ref, data: data as never, metadata }, { revision: rev as Revision, time: '2026-11-27T10:00:00.000Z', newUid: 'uid-1', newGeneration: `gen-${rev}` });
  if (!r.ok) throw r.error;
  return r.value.resource;
}

/** What the handlers answered before: the message built from the resource's JSON, encoded whole. */
function encodedWhole(r: Resource, rest: Record<string, unknown> = {}): Uint8Array {
  const j = resourceToJson(r);
  const msg = {
    resource: {
      id: { type: j.id.type, tenancy: j.id.tenancy, name: j.id.name, uid: j.id.uid },
      owner: null,
      version: j.version,
      generation: j.generation,
      metadata: { ...j.metadata },
      finalizers: [...j.finalizers],
      deletionTimestamp: j.deletion_timestamp ?? '',
      dataJson: JSON.stringify(j.data),
      status: {},
    },
    ...rest,
  };
  return pb.ReadResponse.encode(msg).finish();
}

t.test('an answer built from the cached resource bytes is byte for byte the message encoded whole', async (t) => {
  const store = new ResourceStore();
  const r = put(store, 5, { title: 'Blue Train', year: 1957 }, { label: 'blue-note' });
  const fields = { revision: '7', lastLeaderContactMs: 12 };
  const a = answerWithResource(r, pb.ReadResponse.encode(fields).finish());
  t.same([...a.bytes], [...encodedWhole(r, fields)], 'ReadResponse with revision and contact');
  t.same([...answerWithResource(r).bytes], [...pb.WriteResponse.encode(pb.WriteResponse.decode(encodedWhole(r))).finish()], 'WriteResponse (field 1 only)');
  for (const size of [10, 200, 20_000, 3_000_000]) {
    const big = put(new ResourceStore(), 9, { title: 't'.repeat(size) });
    t.ok(answerWithResource(big, pb.ReadResponse.encode(fields).finish()).bytes.equals(encodedWhole(big, fields)), `a ${size}-character title (length varint of 1-4 bytes)`);
  }
  const back = pb.ReadResponse.decode(a.bytes);
  t.equal(back.resource?.version, '5');
  t.equal(back.revision, '7');
  t.same(JSON.parse(back.resource?.dataJson ?? ''), { title: 'Blue Train', year: 1957 });
});

t.test('the cached bytes are per stored version: a change is a new object with new bytes', async (t) => {
  const store = new ResourceStore();
  const v1 = put(store, 5, { title: 'one' });
  const first = answerWithResource(v1).bytes;
  t.same([...answerWithResource(v1).bytes], [...first], 'the same version answers the same bytes');
  const v2 = put(store, 6, { title: 'two' });
  t.not(v2, v1, 'the store made a new object for the new version');
  const second = pb.WriteResponse.decode(answerWithResource(v2).bytes);
  t.equal(second.resource?.version, '6', 'the new version, not the cached old one');
  t.same(JSON.parse(second.resource?.dataJson ?? ''), { title: 'two' });
  t.ok(Object.isFrozen(v1) && Object.isFrozen(v2), 'stored resources are frozen: a version cannot change under its cached bytes');
});

t.test('copyJson copies as the JSON round trip did, without sharing anything', async (t) => {
  const inputs: unknown[] = [
    { a: 1, b: [1, 'x', null, { c: true }], d: {} },
    'text',
    7,
    null,
    [],
    { when: new Date(Date.UTC(2026, 10, 27)) },
    { nested: { arr: [[1], [2, { x: -0 }]] } },
  ];
  for (const v of inputs) {
    const c = copyJson(v);
    t.same(c, JSON.parse(JSON.stringify(v)), `same as the round trip: ${JSON.stringify(v)}`);
  }
  const src = { a: { b: [1, 2] } };
  const c = copyJson(src) as { a: { b: number[] } };
  c.a.b.push(3);
  t.same(src, { a: { b: [1, 2] } }, 'a change to the copy does not reach the original');
});

t.test('isPlainJson tells plain JSON from values that need the round trip', async (t) => {
  t.ok(isPlainJson({ a: [1, 'x', null, { b: false }] }));
  t.ok(isPlainJson(Object.create(null) as object), 'a null-prototype object');
  t.notOk(isPlainJson({ d: new Date() }), 'a Date');
  t.notOk(isPlainJson({ u: undefined }), 'undefined');
  t.notOk(isPlainJson({ n: Number.NaN }), 'NaN');
  t.notOk(isPlainJson([new Uint8Array(2)]), 'a binary');
});

t.test('a WatchEventBatch is its events, each the bytes WatchList sends, whatever their size', async (t) => {
  const store = new ResourceStore();
  const small = put(store, 5, { title: 'x' });
  const big = put(store, 6, { title: 'y'.repeat(20_000) }); // a 3-byte length prefix
  const mid = put(store, 7, { title: 'z'.repeat(200) }); // a 2-byte one
  const events = [
    { kind: 'change', watch: 0, revision: 5 as Revision, resource: small },
    { kind: 'tail', watch: 0, revision: 5 as Revision },
    { kind: 'change', watch: 1, revision: 6 as Revision, resource: big },
    { kind: 'delete', watch: 0, revision: 7 as Revision, resource: mid },
    { kind: 'bookmark', revision: 7 as Revision },
  ] as const;
  const bytes = encodeWatchEventBatch(events);
  const decoded = pb.WatchEventBatch.decode(bytes);
  t.equal(decoded.events.length, events.length, 'every event');
  events.forEach((ev, i) => {
    t.same(Buffer.from(pb.WatchEvent.encode(decoded.events[i] as cairn.resource.v1.WatchEvent).finish()).equals(Buffer.from(pb.WatchEvent.encode(pb.WatchEvent.decode(encodeWatchEvent(ev))).finish())), true, `event ${i} (${ev.kind}) as WatchList sends it`);
  });
  t.equal((decoded.events[2]?.change?.dataJson ?? '').length, 20_000 + '{"title":""}'.length, 'the large event whole');
  t.same(encodeWatchEventBatch([]).length, 0, 'no events, no bytes');
});

t.test('watchers handed the same shared events get the same batch bytes; other batches are encoded afresh', async (t) => {
  const store = new ResourceStore();
  const a = sharedChangeEvent('change', 0, 8 as Revision, put(store, 8, { title: 'a' }));
  const b = sharedChangeEvent('change', 0, 9 as Revision, put(store, 9, { title: 'b' }));
  const first = encodeWatchEventBatch([a, b]);
  t.equal(encodeWatchEventBatch([a, b]), first, 'the same event objects: the very same buffer');
  t.not(encodeWatchEventBatch([a]), first, 'fewer events: another batch');
  t.not(encodeWatchEventBatch([b, a]), first, 'another order: another batch');
  const withTail = encodeWatchEventBatch([a, { kind: 'tail', watch: 0, revision: 9 as Revision }]);
  t.not(encodeWatchEventBatch([a, { kind: 'tail', watch: 0, revision: 9 as Revision }]), withTail, 'a plain event (a new object each time) is never taken for another');
  t.same(encodeWatchEventBatch([a, b]), Buffer.concat([encodeWatchEventBatch([a]), encodeWatchEventBatch([b])]), 'a batch is its events, one after the other');
});

t.test('a batch keeps no per-event copy; an unbatched event owns exactly its bytes', async (t) => {
  // Both would live as long as the window keeps the version (docs/performance.md "Where a
  // node's memory goes"): a per-event copy made by batching is a third copy of every resource,
  // and a slice of Node's 8 KiB Buffer pool pins the whole slab.
  const store = new ResourceStore();
  const a = sharedChangeEvent('change', 0, 10 as Revision, put(store, 10, { title: 'a' }));
  const b = sharedChangeEvent('delete', 0, 11 as Revision, put(store, 11, { title: 'b' }));
  const batch = encodeWatchEventBatch([a, b]);
  t.equal(a.encoded.grpc, undefined, 'batching left no bytes on the first event');
  t.equal(b.encoded.grpc, undefined, 'nor on the second');
  const one = encodeWatchEvent(a);
  t.equal(a.encoded.grpc, one, 'WatchList caches the event it sends');
  t.equal(one.byteOffset, 0, 'in a buffer of its own');
  t.equal(one.buffer.byteLength, one.length, 'of exactly its size');
  t.same(encodeWatchEventBatch([a, b]), batch, 'a batch built from a cached event is the same bytes');
});
