// How much V8 heap does 1 MiB of resource data (as the store counts it, resourceBytes) cost?
// Run: node --expose-gc scripts/measure-store-heap.mjs  (after the build). Prints one line per shape.
import { ResourceStore } from '../dist/src/store/index.js';

const gc = globalThis.gc;
if (typeof gc !== 'function') throw new Error('run with node --expose-gc');
const heap = () => { gc(); gc(); return process.memoryUsage().heapUsed; };

function dataOf(shape, i, bytes) {
  switch (shape) {
    case 'one-string': return { blob: `${i}-`.padEnd(bytes, 'x') };
    case 'many-fields': { const o = {}; for (let k = 0; k < bytes / 40; k++) o[`field${k}`] = `value-${i}-${k}-padpadpad`; return o; }
    case 'numbers': return { values: Array.from({ length: bytes / 9 }, (_, k) => k * 1.5 + i) };
  }
}

for (const [shape, perResource, count] of [['one-string', 16 * 1024, 2000], ['many-fields', 16 * 1024, 1000], ['numbers', 16 * 1024, 1000], ['one-string', 512, 50000]]) {
  const store = new ResourceStore();
  const before = heap();
  for (let i = 0; i < count; i++) {
    // As the FSM does: the data arrives freshly decoded (not shared with the generator).
    const data = JSON.parse(JSON.stringify(dataOf(shape, i, perResource)));
    const r = store.write({ id: { type: { group: 'demo', groupVersion: 'v1', kind: 'Blob' }, tenancy: { partition: 'default', namespace: 'default' }, name: `r-${i}` }, data, metadata: { app: 'x' } },
      { revision: i + 1, time: '2026-01-01T00:00:00.000Z', newUid: `uid-${i}`, newGeneration: `gen-${i}` });
    if (!r.ok) throw r.error;
  }
  const used = heap() - before;
  const mib = store.dataBytes / 1048576;
  console.log(`${shape.padEnd(12)} ${String(count).padStart(6)} resources of ~${perResource} B: dataBytes ${mib.toFixed(1)} MiB, heap ${(used / 1048576).toFixed(1)} MiB, ${(used / store.dataBytes).toFixed(2)} heap bytes per counted byte`);
  globalThis.keep = store;
}
