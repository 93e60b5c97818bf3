/**
 * heap-summary's graph work on hand-built snapshots (dominators, retained sizes, weak edges,
 * classes counted once, backing stores by holder), its refusal of malformed files, a real
 * snapshot of this process, and mem-load's reading of /proc/<pid>/smaps.
 */
import t from 'tap';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { dominance, parseSnapshot, summarize, type HeapGraph } from './heap-summary.js';
import { smapsBreakdown } from './mem-load.js';

const NODE_TYPES = ['hidden', 'array', 'string', 'object', 'code', 'closure', 'regexp', 'number', 'native', 'synthetic', 'concatenated string', 'sliced string', 'symbol', 'bigint', 'object shape'];
const EDGE_TYPES = ['context', 'element', 'property', 'internal', 'hidden', 'shortcut', 'weak'];
const NODE_FIELDS = ['type', 'name', 'id', 'self_size', 'edge_count', 'trace_node_id', 'detachedness'];

interface N {
  readonly type: string;
  readonly name: string;
  readonly size: number;
  readonly edges: readonly [string, string, number][]; // [edge type, name, to node number]
}

/** A V8-format snapshot of `nodes` (node 0 is the root). */
function snapshotOf(nodes: readonly N[]): unknown {
  const strings: string[] = [];
  const str = (s: string): number => {
    const i = strings.indexOf(s);
    if (i >= 0) return i;
    strings.push(s);
    return strings.length - 1;
  };
  const flatNodes: number[] = [];
  const flatEdges: number[] = [];
  nodes.forEach((n, i) => {
    flatNodes.push(NODE_TYPES.indexOf(n.type), str(n.name), i * 2 + 1, n.size, n.edges.length, 0, 0);
    for (const [type, name, to] of n.edges) flatEdges.push(EDGE_TYPES.indexOf(type), type === 'element' || type === 'hidden' ? Number(name) : str(name), to * NODE_FIELDS.length);
  });
  return {
    snapshot: {
      meta: { node_fields: NODE_FIELDS, node_types: [NODE_TYPES, 'string', 'number', 'number', 'number', 'number', 'number'], edge_fields: ['type', 'name_or_index', 'to_node'], edge_types: [EDGE_TYPES, 'string_or_number', 'node'] },
      node_count: nodes.length,
      edge_count: flatEdges.length / 3,
    },
    nodes: flatNodes,
    edges: flatEdges,
    strings,
  };
}

const opts = { top: 10, treeBytes: 1, depth: 10, holderSteps: 3 };
const find = (g: HeapGraph, name: string): number => {
  for (let i = 0; i < g.nodeCount; i++) if (g.strings[g.nodeName[i] as number] === name) return i;
  throw new Error(`no node ${name}`);
};

t.test('a chain: the holder retains what only it reaches; a diamond: the root does', async (t) => {
  const g = parseSnapshot(
    snapshotOf([
      { type: 'synthetic', name: '', size: 0, edges: [['element', '1', 1], ['element', '2', 2], ['element', '3', 3]] },
      { type: 'object', name: 'Holder', size: 10, edges: [['property', 'cache', 4], ['property', 'shared', 5]] },
      { type: 'object', name: 'Other', size: 20, edges: [['property', 'shared', 5]] },
      { type: 'object', name: 'Lonely', size: 1, edges: [['weak', 'ref', 6]] },
      { type: 'object', name: 'Big', size: 1000, edges: [] },
      { type: 'object', name: 'Shared', size: 300, edges: [] },
      { type: 'object', name: 'WeakOnly', size: 7, edges: [] },
    ]),
  );
  const d = dominance(g);
  const [holder, other, big, shared, weakOnly, lonely] = ['Holder', 'Other', 'Big', 'Shared', 'WeakOnly', 'Lonely'].map((n) => find(g, n)) as number[];
  t.equal(d.idom[big as number], holder, 'Big is reached only through Holder');
  t.equal(d.idom[shared as number], 0, 'Shared is reached through Holder and Other: the root dominates it');
  t.equal(d.retained[holder as number], 1010, 'Holder retains itself and Big, not Shared');
  t.equal(d.retained[other as number], 20);
  t.equal(d.retained[lonely as number], 1, 'a weak edge retains nothing');
  t.equal(d.idom[weakOnly as number], 0, 'a node reached only weakly is counted under the root');
  t.equal(d.retained[0], 1338, 'the root retains everything');
  const s = summarize(g, d, opts);
  t.equal(s.totalBytes, 1338);
  t.same(s.top[0]?.label, 'Holder');
  t.match(s.top.find((r) => r.label === 'Big')?.path ?? '', /Holder\.cache$/, 'the retaining path names the field');
  t.ok(s.tree.some((r) => r.label === 'Big' && r.via === '.cache' && r.depth === 2), 'the tree shows Big under Holder through .cache');
});

t.test('a class retained size counts an instance inside another of its class once', async (t) => {
  const g = parseSnapshot(
    snapshotOf([
      { type: 'synthetic', name: '', size: 0, edges: [['element', '1', 1]] },
      { type: 'object', name: 'Node', size: 100, edges: [['property', 'next', 2]] },
      { type: 'object', name: 'Node', size: 100, edges: [['property', 'value', 3]] },
      { type: 'string', name: 'x', size: 50, edges: [] },
    ]),
  );
  const s = summarize(g, dominance(g), opts);
  const row = s.byRetained.find((r) => r.name === 'Node');
  t.equal(row?.retainedBytes, 250, 'not 250 + 150');
  t.equal(row?.selfBytes, 200);
  t.equal(row?.count, 2);
  t.notOk(s.byRetained.some((r) => r.name === '(root)'), 'the root is no class');
});

t.test('backing stores: an 8 KiB pool slab is counted as one and attributed to its holder', async (t) => {
  const g = parseSnapshot(
    snapshotOf([
      { type: 'synthetic', name: '', size: 0, edges: [['element', '1', 1]] },
      { type: 'object', name: 'Cache', size: 10, edges: [['property', 'a', 2], ['property', 'b', 3]] },
      { type: 'object', name: 'Buffer', size: 8, edges: [['internal', 'buffer', 4]] },
      { type: 'object', name: 'Buffer', size: 8, edges: [['internal', 'buffer', 4]] },
      { type: 'object', name: 'ArrayBuffer', size: 8, edges: [['internal', 'backing_store', 5]] },
      { type: 'native', name: 'system / JSArrayBufferData', size: 8192, edges: [] },
    ]),
  );
  const s = summarize(g, dominance(g), opts);
  t.same(s.bufferSizes.find((b) => b.bucket.startsWith('8 KiB')), { bucket: '8 KiB (pool slabs)', count: 1, bytes: 8192 });
  t.equal(s.bufferHolders.length, 1);
  t.match(s.bufferHolders[0]?.holder, /^Cache\.a > Buffer<internal buffer> > ArrayBuffer<internal backing_store>$/);
  t.equal(s.bufferHolders[0]?.sizes, '8192 B x 1');
});

t.test('malformed snapshots are refused with a message that says what is wrong', async (t) => {
  t.throws(() => parseSnapshot({}), /expected an object with snapshot, nodes, edges and strings/);
  t.throws(() => parseSnapshot(null), /expected an object/);
  const good = snapshotOf([{ type: 'synthetic', name: '', size: 0, edges: [['element', '1', 1]] }, { type: 'object', name: 'A', size: 1, edges: [] }]) as { nodes: number[]; edges: number[]; snapshot: { meta: { node_fields: string[] } } };
  t.throws(() => parseSnapshot({ ...good, edges: [1, 1, 7 * 9] }), /edge 0 points at 63, not a node/);
  t.throws(() => parseSnapshot({ ...good, edges: [] }), /edge counts add up to 1, the edges array holds 0/);
  t.throws(() => parseSnapshot({ ...good, nodes: good.nodes.slice(0, 5) }), /not a multiple of 7 fields/);
  t.throws(() => parseSnapshot({ ...good, snapshot: { ...good.snapshot, meta: { ...good.snapshot.meta, node_fields: ['type'] } } }), /no "name" field/);
  t.throws(() => parseSnapshot({ ...good, nodes: [99, ...good.nodes.slice(1)] }), /node 0 has type 99/);
});

t.test('a real snapshot of a small node process: the totals add up and a retained array is found', async (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'heap-summary-test-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  // A bare child process, so the snapshot is a few MiB (this test process's, with tap loaded, is far larger).
  const file = path.join(dir, 'child.heapsnapshot');
  const script = `class HeapSummaryMarker { items = Array.from({ length: 20000 }, (_, i) => ({ i, s: 'item-' + i })); }
globalThis.keep = new HeapSummaryMarker();
require('node:v8').writeHeapSnapshot(${JSON.stringify(file)});`;
  const r = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8' });
  t.equal(r.status, 0, r.stderr);
  const g = parseSnapshot(JSON.parse(readFileSync(file, 'utf8')) as unknown);
  const d = dominance(g);
  const s = summarize(g, d, { ...opts, top: 200 });
  let self = 0;
  for (let i = 0; i < g.nodeCount; i++) self += g.selfSize[i] as number;
  t.equal(d.retained[0], self, 'the root retains every byte of the snapshot');
  const row = s.byRetained.find((r) => r.name === 'HeapSummaryMarker');
  t.ok(row !== undefined && row.retainedBytes > 20_000 * 16, `the marker retains its 20,000 items (${row?.retainedBytes ?? 0} bytes)`);
  t.match(s.top.find((r) => r.label === 'HeapSummaryMarker')?.path ?? '', /\.keep$/, 'held by the global property keep');
});

t.test('smaps: resident memory by kind of mapping', async (t) => {
  const text = [
    '00400000-00500000 r-xp 00000000 08:01 123 /usr/bin/node',
    'Size:               1024 kB',
    'Rss:                 900 kB',
    '01000000-02000000 rw-p 00000000 00:00 0 [heap]',
    'Size:              16384 kB',
    'Rss:                8000 kB',
    '7f0000000000-7f0004000000 rw-p 00000000 00:00 0 ',
    'Size:              65536 kB',
    'Rss:               30000 kB',
    '7f0004000000-7f0004100000 rw-p 00000000 00:00 0',
    'Size:               1024 kB',
    'Rss:                 100 kB',
    '7f1000000000-7f1000100000 r--p 00000000 08:01 456 /usr/lib/libc.so.6',
    'Size:               1024 kB',
    'Rss:                 700 kB',
    '7ffc00000000-7ffc00100000 rw-p 00000000 00:00 0 [stack]',
    'Size:                132 kB',
    'Rss:                  40 kB',
  ].join('\n');
  t.same(smapsBreakdown(text, '/usr/bin/node'), { binaryKb: 900, otherFilesKb: 700, brkHeapKb: 8000, stacksKb: 40, anonKb: 30100, anonMappings: 2, largestAnon: ['30000 of 65536 kB', '100 of 1024 kB'] });
});
