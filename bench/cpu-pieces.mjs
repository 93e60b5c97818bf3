// CPU per request, piece by piece: the code changed by issue 17 item 3 ("CPU per request",
// docs/performance.md), old against new, as CPU time per operation (process.cpuUsage), the two
// alternated five times in one process; prints the medians and the range of the five.
//
//   node bench/cpu-pieces.mjs OLD_CHECKOUT NEW_CHECKOUT
//
// Both checkouts built (`make build`); OLD is a checkout before the change (59509b1 or
// earlier: its own pieces are the ones measured, the new checkout's answerWithResource and
// DeadlineSweep stand for the new side). Plain JavaScript: it imports two builds side by side.
import path from 'node:path';
const [OLD, NEW] = process.argv.slice(2).map((p) => path.resolve(p));
if (OLD === undefined || NEW === undefined) {
  process.stderr.write('usage: node bench/cpu-pieces.mjs OLD_CHECKOUT NEW_CHECKOUT\n');
  process.exit(2);
}
const imp = (root, p) => import(path.join(root, 'dist', p));
const fsmNew = await imp(NEW, 'src/fsm/index.js'), fsmOld = await imp(OLD, 'src/fsm/index.js');
const { cairn } = await imp(NEW, 'src/gen/resource.js');
const pb = cairn.resource.v1;
const { resourceToJson } = await imp(NEW, 'src/api/resource-json.js');
const { answerWithResource } = await imp(NEW, 'src/api/grpc-resource-service.js');
const { isPlainJson } = await imp(NEW, 'src/api/resource-service.js');
const regNew = new (await imp(NEW, 'src/api/registry.js')).TypeRegistry(), regOld = new (await imp(OLD, 'src/api/registry.js')).TypeRegistry();
(await imp(NEW, 'src/api/demo-types.js')).registerDemoTypes(regNew); (await imp(OLD, 'src/api/demo-types.js')).registerDemoTypes(regOld);
const limNew = await imp(NEW, 'src/api/limits.js'), limOld = await imp(OLD, 'src/api/limits.js');
const { DeadlineSweep } = await imp(NEW, 'src/base/index.js');

function cpu(fn, n) { const c0 = process.cpuUsage(); fn(n); const c = process.cpuUsage(c0); return ((c.user + c.system) / n); }
const med = (a) => { const s = [...a].sort((x, y) => x - y); return s[Math.floor(s.length / 2)]; };
function compare(name, oldFn, newFn, n) {
  const o = [], w = [];
  oldFn(Math.ceil(n / 5)); newFn(Math.ceil(n / 5));
  for (let i = 0; i < 5; i++) { o.push(cpu(oldFn, n)); w.push(cpu(newFn, n)); }
  console.log(`${name.padEnd(58)} old ${med(o).toFixed(2).padStart(7)} us  new ${med(w).toFixed(2).padStart(7)} us  (${(med(w) / med(o)).toFixed(2)}x; spread old ${Math.min(...o).toFixed(2)}-${Math.max(...o).toFixed(2)}, new ${Math.min(...w).toFixed(2)}-${Math.max(...w).toFixed(2)})`);
}
const title = 'x'.repeat(240);
// A: Fsm.apply of API-shaped write entries (1,000 keys), per replica
function entries(fsmMod, n) {
  const out = [];
  for (let i = 0; i < n; i++) out.push(fsmMod.encodeEnvelope(fsmMod.CommandType.ResourceWrite, { requestId: `01JDX${String(i).padStart(21, '0')}`, time: '2026-11-27T10:00:00.000Z', uid: `01JDXU${String(i).padStart(20, '0')}`, generation: `01JDXG${String(i).padStart(20, '0')}`, quotaBytes: 8 * 2 ** 30, id: { type: { group: 'demo', groupVersion: 'v1', kind: 'Album' }, tenancy: { partition: 'default', namespace: 'default' }, name: `key-${String(i % 1000).padStart(6, '0')}` }, data: { title } }));
  return out;
}
const N = 20000;
const eOld = entries(fsmOld, N), eNew = entries(fsmNew, N);
const applyAll = (mod, es) => (n) => { const f = new mod.Fsm(); for (let i = 0; i < n; i++) f.apply({ index: i + 1, term: 1, data: es[i % es.length] }); };
compare('Fsm.apply, one write entry (each replica)', applyAll(fsmOld, eOld), applyAll(fsmNew, eNew), N);
// B: a Read answer from a stored resource
const f = new fsmNew.Fsm();
const stored = [];
for (let i = 0; i < 1000; i++) { const r = f.apply({ index: i + 1, term: 1, data: eNew[i] }); stored.push(r.result.resource); }
function idToMsg(id) { return { type: id.type, tenancy: { partition: id.tenancy.partition, namespace: id.tenancy.namespace }, name: id.name, uid: id.uid }; }
function resourceToMsgOld(r) { const status = {}; return { id: idToMsg(r.id), owner: r.owner ? idToMsg(r.owner) : null, version: r.version, generation: r.generation, metadata: { ...r.metadata }, finalizers: [...r.finalizers], deletionTimestamp: r.deletion_timestamp ?? '', dataJson: JSON.stringify(r.data), status }; }
const fields = { revision: '123456', lastLeaderContactMs: 0 };
compare('gRPC Read answer, resource read before (cache hit)', (n) => { for (let i = 0; i < n; i++) Buffer.from(pb.ReadResponse.encode({ resource: resourceToMsgOld(resourceToJson(stored[i % 1000])), ...fields }).finish()); }, (n) => { for (let i = 0; i < n; i++) answerWithResource(stored[i % 1000], pb.ReadResponse.encode(fields).finish()); }, 50000);
compare('gRPC Write answer, a new version (cache miss)', (n) => { for (let i = 0; i < n; i++) Buffer.from(pb.WriteResponse.encode({ resource: resourceToMsgOld(resourceToJson(Object.freeze({ ...stored[i % 1000] }))) }).finish()); }, (n) => { for (let i = 0; i < n; i++) answerWithResource(Object.freeze({ ...stored[i % 1000] })); }, 50000);
// C: the api's copy of a write's data (no mutate hook: Album)
const data = { title };
compare('ResourceService.write: copy of data (Album, no mutate hook)', (n) => { for (let i = 0; i < n; i++) JSON.parse(JSON.stringify(data)); }, (n) => { for (let i = 0; i < n; i++) isPlainJson(data); }, 200000);
compare('TypeRegistry.resolve("demo.v1.Album")', (n) => { for (let i = 0; i < n; i++) regOld.resolve('demo.v1.Album'); }, (n) => { for (let i = 0; i < n; i++) regNew.resolve('demo.v1.Album'); }, 500000);
compare('ipOfGrpcPeer("127.0.0.1:54321")', (n) => { for (let i = 0; i < n; i++) limOld.ipOfGrpcPeer(`127.0.0.1:${50000 + (i % 64)}`); }, (n) => { for (let i = 0; i < n; i++) limNew.ipOfGrpcPeer(`127.0.0.1:${50000 + (i % 64)}`); }, 500000);
// D: a deadline per request: setTimeout + clearTimeout vs sweep add + cancel (64 in flight)
const sweep = new DeadlineSweep({ nowMs: () => Date.now(), monotonicMs: () => performance.now() }, { setInterval: (fn, ms) => setInterval(fn, ms), clearInterval: (h) => clearInterval(h), setTimeout: (fn, ms) => setTimeout(fn, ms), clearTimeout: (h) => clearTimeout(h), yield: () => Promise.resolve() });
const keep = sweep.add(performance.now() + 1e9, () => {});
compare('a request deadline: setTimeout+clearTimeout vs sweep add+cancel', (n) => { for (let i = 0; i < n; i++) clearTimeout(setTimeout(() => {}, 10000)); }, (n) => { for (let i = 0; i < n; i++) sweep.add(performance.now() + 10000, () => {}).cancel(); }, 500000);
keep.cancel();
