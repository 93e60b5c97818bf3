// How much memory does one event in the watch window hold, beyond what the store holds?
// Run: node --expose-gc scripts/measure-window-heap.mjs  (after the build).
// 1,000 resources are rewritten round-robin; every superseded version is then held only by the
// window (and, on a node that answered the write or served it to a watcher, by its cached
// protobuf encoding: `encodedResource`). Prints heap and ArrayBuffer bytes per event against
// the event's resourceBytes, with and without the cached encodings.
import { Fsm, CommandType, encodeEnvelope } from '../dist/src/fsm/index.js';
import { EventPublisher } from '../dist/src/stream/index.js';
import { resourceBytes } from '../dist/src/store/index.js';
import { encodedResource, encodeWatchEvent, encodeWatchEventBatch } from '../dist/src/api/grpc-resource-service.js';
import { sharedChangeEvent } from '../dist/src/api/watch.js';
import { watchEventLine } from '../dist/src/api/watch-routes.js';

const gc = globalThis.gc;
if (typeof gc !== 'function') throw new Error('run with node --expose-gc');
const mem = () => { gc(); gc(); const m = process.memoryUsage(); return { heap: m.heapUsed, ab: m.arrayBuffers }; };
const clock = { nowMs: () => 0, monotonicMs: () => 0 };

// encode: 0 none (a follower, no watchers), 1 the write's answer (a leader), 2 and a gRPC
// watcher's batch (WatchListBatched), 3 and an HTTP watcher's line, 4 and an old client's
// unbatched WatchList event.
const WHAT = ['nothing cached (a follower, no watchers)', 'a write answer (the leader)', '+ WatchListBatched', '+ an HTTP watch', '+ unbatched WatchList'];
for (const [valueBytes, encode] of [[256, 0], [256, 1], [256, 2], [256, 3], [256, 4], [4096, 0], [4096, 1], [4096, 2], [4096, 3], [4096, 4]]) {
  const fsm = new Fsm();
  const pub = new EventPublisher({ current: () => fsm.store }, { clock, maxWindowEvents: 1e9, maxWindowBytes: Number.MAX_SAFE_INTEGER, maxWindowAgeMs: 1e12 });
  let index = 0;
  const write = (i) => {
    index++;
    // As bench/kv-data.ts writes: one string value of valueBytes characters.
    const value = `${index}-`.padEnd(valueBytes, 'v');
    const out = fsm.apply({ index, term: 1, data: encodeEnvelope(CommandType.ResourceWrite, { time: '2026-11-27T00:00:00.000Z', uid: `u${index}`, generation: `g${index}`, id: { type: { group: 'demo', groupVersion: 'v1', kind: 'Artist' }, tenancy: { partition: 'default', namespace: 'default' }, name: `key-${i % 1000}` }, data: { value } }) });
    pub.publish(index, out.changes);
    for (const c of out.changes) {
      if (encode >= 1) encodedResource(c.resource);
      const ev = sharedChangeEvent('change', 0, index, c.resource);
      if (encode >= 2) encodeWatchEventBatch([ev]);
      if (encode >= 3) watchEventLine(ev);
      if (encode >= 4) encodeWatchEvent(ev);
    }
    return out.changes;
  };
  for (let i = 0; i < 1000; i++) write(i);
  const before = mem();
  const n = 40_000;
  let counted = 0;
  for (let i = 0; i < n; i++) for (const c of write(i)) counted += resourceBytes(c.resource);
  const after = mem();
  const heap = (after.heap - before.heap) / n;
  const ab = (after.ab - before.ab) / n;
  console.log(`value ${String(valueBytes).padStart(4)} B, cached: ${WHAT[encode]}: resourceBytes ${(counted / n).toFixed(0)} B per event; heap ${heap.toFixed(0)} B + ArrayBuffers ${ab.toFixed(0)} B = ${(heap + ab).toFixed(0)} B per event (${((heap + ab) / (counted / n)).toFixed(2)}x resourceBytes); window ${pub.windowSize} events`);
  globalThis.keep = pub;
}
