/**
 * Where a heap snapshot's memory is held (issue 18, item 1; bench/README.md "mem-load and
 * heap-summary"). Reads a V8 `.heapsnapshot` (node --heapsnapshot-signal, v8.writeHeapSnapshot,
 * Chrome DevTools) and prints:
 *
 * - the totals by V8 node type (object, array, string, code, closure, ...);
 * - the classes (constructor names; other node types as `(array)`, `(string)`, ...) with the
 *   most self size and the most retained size;
 * - the dominator tree from the root down to every holder that retains at least --tree-mib,
 *   with the edge that holds each one: the answer to "which field of which object keeps this";
 * - the --top objects with the largest retained size and a shortest retaining path to each.
 *
 *   node --max-old-space-size=4096 dist/bench/heap-summary.js FILE.heapsnapshot [--top 25] [--tree-mib 1] [--depth 14] [--holder-steps 6] [--json OUT]
 *
 * Retained size is computed as Chrome DevTools does it: the dominator tree (Cooper, Harvey and
 * Kennedy, "A Simple, Fast Dominance Algorithm", 2001) of the graph of strong edges (weak edges
 * do not retain) from the snapshot's synthetic root; a node's retained size is its self size
 * plus that of every node it dominates. Nodes reachable only through weak edges are counted
 * under the root. A class's retained size counts each instance once, not again inside another
 * instance of the same class. No npm library: the format is a flat array of numbers described
 * by `snapshot.meta`, and the ones on npm that parse it either want a browser or stop at self
 * sizes.
 */
import { readFileSync, statSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

// ---- The snapshot as a graph ------------------------------------------------------------------

export interface SnapshotJson {
  readonly snapshot: {
    readonly meta: {
      readonly node_fields: readonly string[];
      readonly node_types: readonly unknown[];
      readonly edge_fields: readonly string[];
      readonly edge_types: readonly unknown[];
    };
    readonly node_count: number;
    readonly edge_count: number;
  };
  readonly nodes: readonly number[];
  readonly edges: readonly number[];
  readonly strings: readonly string[];
}

export interface HeapGraph {
  readonly nodeCount: number;
  readonly nodeType: Uint8Array;
  readonly nodeName: Uint32Array;
  readonly nodeId: Float64Array;
  readonly selfSize: Float64Array;
  /** Edges of node i are firstEdge[i] .. firstEdge[i + 1] - 1. */
  readonly firstEdge: Uint32Array;
  readonly edgeType: Uint8Array;
  /** For element and hidden edges an index, for the others a string index. */
  readonly edgeName: Uint32Array;
  readonly edgeTo: Uint32Array;
  readonly nodeTypes: readonly string[];
  readonly edgeTypes: readonly string[];
  readonly strings: readonly string[];
}

function fieldIndex(fields: readonly string[], name: string, what: string): number {
  const i = fields.indexOf(name);
  if (i < 0) throw new Error(`heap snapshot: ${what} has no "${name}" field (fields: ${fields.join(', ')}); not a V8 heap snapshot?`);
  return i;
}

function typeNames(types: readonly unknown[], what: string): string[] {
  const t = types[0];
  if (!Array.isArray(t) || !t.every((x) => typeof x === 'string')) throw new Error(`heap snapshot: ${what}[0] is not a list of type names`);
  return t as string[];
}

/** Checks the shape (a hostile or truncated file gets an error naming what is wrong) and builds typed arrays. */
export function parseSnapshot(json: unknown): HeapGraph {
  const j = json as Partial<SnapshotJson> | null;
  if (j === null || typeof j !== 'object' || j.snapshot === undefined || !Array.isArray(j.nodes) || !Array.isArray(j.edges) || !Array.isArray(j.strings)) {
    throw new Error('heap snapshot: expected an object with snapshot, nodes, edges and strings');
  }
  const meta = j.snapshot.meta;
  if (meta === undefined || !Array.isArray(meta.node_fields) || !Array.isArray(meta.edge_fields)) throw new Error('heap snapshot: snapshot.meta lacks node_fields or edge_fields');
  const nf = meta.node_fields.length;
  const ef = meta.edge_fields.length;
  const fType = fieldIndex(meta.node_fields, 'type', 'node_fields');
  const fName = fieldIndex(meta.node_fields, 'name', 'node_fields');
  const fId = fieldIndex(meta.node_fields, 'id', 'node_fields');
  const fSelf = fieldIndex(meta.node_fields, 'self_size', 'node_fields');
  const fEdges = fieldIndex(meta.node_fields, 'edge_count', 'node_fields');
  const eType = fieldIndex(meta.edge_fields, 'type', 'edge_fields');
  const eName = fieldIndex(meta.edge_fields, 'name_or_index', 'edge_fields');
  const eTo = fieldIndex(meta.edge_fields, 'to_node', 'edge_fields');
  const nodeTypes = typeNames(meta.node_types, 'node_types');
  const edgeTypes = typeNames(meta.edge_types, 'edge_types');
  const nodes = j.nodes;
  const edges = j.edges;
  if (nodes.length % nf !== 0 || edges.length % ef !== 0) throw new Error(`heap snapshot: ${nodes.length} node values are not a multiple of ${nf} fields, or ${edges.length} edge values of ${ef}`);
  const n = nodes.length / nf;
  const m = edges.length / ef;
  if (n === 0) throw new Error('heap snapshot: no nodes');
  const g = {
    nodeCount: n,
    nodeType: new Uint8Array(n),
    nodeName: new Uint32Array(n),
    nodeId: new Float64Array(n),
    selfSize: new Float64Array(n),
    firstEdge: new Uint32Array(n + 1),
    edgeType: new Uint8Array(m),
    edgeName: new Uint32Array(m),
    edgeTo: new Uint32Array(m),
    nodeTypes,
    edgeTypes,
    strings: j.strings,
  };
  let e = 0;
  for (let i = 0; i < n; i++) {
    const o = i * nf;
    const type = nodes[o + fType] as number;
    const name = nodes[o + fName] as number;
    if (!(type >= 0 && type < nodeTypes.length) || !(name >= 0 && name < j.strings.length)) throw new Error(`heap snapshot: node ${i} has type ${type} or name ${name} out of range`);
    g.nodeType[i] = type;
    g.nodeName[i] = name;
    g.nodeId[i] = nodes[o + fId] as number;
    g.selfSize[i] = nodes[o + fSelf] as number;
    g.firstEdge[i] = e;
    e += nodes[o + fEdges] as number;
  }
  g.firstEdge[n] = e;
  if (e !== m) throw new Error(`heap snapshot: the nodes' edge counts add up to ${e}, the edges array holds ${m}`);
  for (let k = 0; k < m; k++) {
    const o = k * ef;
    const to = edges[o + eTo] as number;
    if (to % nf !== 0 || to / nf >= n || to < 0) throw new Error(`heap snapshot: edge ${k} points at ${to}, not a node`);
    g.edgeType[k] = edges[o + eType] as number;
    g.edgeName[k] = edges[o + eName] as number;
    g.edgeTo[k] = to / nf;
  }
  return g;
}

export function nodeLabel(g: HeapGraph, i: number): string {
  const type = g.nodeTypes[g.nodeType[i] as number] ?? '?';
  const name = g.strings[g.nodeName[i] as number] ?? '?';
  if (type === 'object' || type === 'native' || type === 'synthetic') return name;
  if (type === 'closure') return `${name === '' ? '(anonymous)' : name}()`;
  if (type === 'string' || type === 'concatenated string' || type === 'sliced string') return '(string)';
  return `(${type}) ${name.length > 60 ? `${name.slice(0, 57)}...` : name}`;
}

/** The group DevTools' Summary view would put node i in. */
export function className(g: HeapGraph, i: number): string {
  const type = g.nodeTypes[g.nodeType[i] as number] ?? '?';
  if (i === 0 && type === 'synthetic') return '(root)';
  if (type === 'object' || type === 'native' || type === 'synthetic') return g.strings[g.nodeName[i] as number] ?? '?';
  if (type === 'concatenated string' || type === 'sliced string') return '(string)';
  if (type === 'hidden' || type === 'object shape') return '(system)';
  return `(${type})`;
}

export function edgeLabel(g: HeapGraph, k: number): string {
  const type = g.edgeTypes[g.edgeType[k] as number] ?? '?';
  const v = g.edgeName[k] as number;
  if (type === 'element') return `[${v}]`;
  if (type === 'hidden') return `<hidden ${v}>`;
  const s = g.strings[v] ?? '?';
  return type === 'property' ? `.${s}` : type === 'context' ? `<context ${s}>` : `<${type} ${s}>`;
}

/**
 * Whether edge k (of node `from`) retains its target. As in DevTools: weak edges do not, nor do
 * the root's shortcut edges (they mark user roots such as the global object, which the root
 * also reaches through (GC roots)).
 */
function isStrong(g: HeapGraph, from: number, k: number, root: number): boolean {
  const t = g.edgeTypes[g.edgeType[k] as number];
  return t !== 'weak' && !(from === root && t === 'shortcut');
}

// ---- Dominators and retained sizes -------------------------------------------------------------

export interface Dominance {
  /** Immediate dominator of each node; the root's is itself; unreachable nodes get the root. */
  readonly idom: Uint32Array;
  readonly retained: Float64Array;
  /** The edge a breadth-first search from the root reached each node by (a shortest path), -1 for the root and the unreachable. */
  readonly viaEdge: Int32Array;
  readonly viaNode: Int32Array;
  readonly reachable: number;
}

export function dominance(g: HeapGraph, root = 0): Dominance {
  const n = g.nodeCount;
  // Postorder numbers of an iterative depth-first search over strong edges.
  const post = new Int32Array(n).fill(-1);
  const order = new Uint32Array(n); // postorder number -> node
  const visited = new Uint8Array(n);
  const stackNode = new Uint32Array(n);
  const stackEdge = new Uint32Array(n);
  let sp = 0;
  let count = 0;
  stackNode[0] = root;
  stackEdge[0] = g.firstEdge[root] as number;
  visited[root] = 1;
  sp = 1;
  while (sp > 0) {
    const v = stackNode[sp - 1] as number;
    const k = stackEdge[sp - 1] as number;
    if (k < (g.firstEdge[v + 1] as number)) {
      stackEdge[sp - 1] = k + 1;
      if (!isStrong(g, v, k, root)) continue;
      const w = g.edgeTo[k] as number;
      if (visited[w] === 0) {
        visited[w] = 1;
        stackNode[sp] = w;
        stackEdge[sp] = g.firstEdge[w] as number;
        sp++;
      }
    } else {
      post[v] = count;
      order[count] = v;
      count++;
      sp--;
    }
  }
  // Predecessors (strong edges between reachable nodes), as compressed rows.
  const predStart = new Uint32Array(n + 1);
  for (let v = 0; v < n; v++) {
    if ((post[v] as number) < 0) continue;
    for (let k = g.firstEdge[v] as number; k < (g.firstEdge[v + 1] as number); k++) if (isStrong(g, v, k, root)) predStart[(g.edgeTo[k] as number) + 1] = (predStart[(g.edgeTo[k] as number) + 1] as number) + 1;
  }
  for (let v = 0; v < n; v++) predStart[v + 1] = (predStart[v + 1] as number) + (predStart[v] as number);
  const fill = predStart.slice(0, n);
  const preds = new Uint32Array(predStart[n] as number);
  for (let v = 0; v < n; v++) {
    if ((post[v] as number) < 0) continue;
    for (let k = g.firstEdge[v] as number; k < (g.firstEdge[v + 1] as number); k++) {
      if (!isStrong(g, v, k, root)) continue;
      const w = g.edgeTo[k] as number;
      preds[fill[w] as number] = v;
      fill[w] = (fill[w] as number) + 1;
    }
  }
  // Cooper-Harvey-Kennedy: iterate in reverse postorder until no immediate dominator changes.
  const UNDEF = 0xffffffff;
  const idomPost = new Uint32Array(count).fill(UNDEF); // by postorder number
  const rootPost = post[root] as number;
  idomPost[rootPost] = rootPost;
  for (let changed = true; changed; ) {
    changed = false;
    for (let b = count - 1; b >= 0; b--) {
      if (b === rootPost) continue;
      const v = order[b] as number;
      let nd = UNDEF;
      for (let p = predStart[v] as number; p < (predStart[v + 1] as number); p++) {
        const q = post[preds[p] as number] as number;
        if (idomPost[q] === UNDEF) continue;
        if (nd === UNDEF) {
          nd = q;
          continue;
        }
        let a = q;
        let c = nd;
        while (a !== c) {
          while (a < c) a = idomPost[a] as number;
          while (c < a) c = idomPost[c] as number;
        }
        nd = a;
      }
      if (nd !== UNDEF && idomPost[b] !== nd) {
        idomPost[b] = nd;
        changed = true;
      }
    }
  }
  const idom = new Uint32Array(n).fill(root);
  for (let b = 0; b < count; b++) idom[order[b] as number] = order[idomPost[b] as number] as number;
  // A dominator has a higher postorder number than the nodes it dominates: add upwards in postorder.
  const retained = Float64Array.from(g.selfSize);
  for (let v = 0; v < n; v++) if ((post[v] as number) < 0) retained[root] = (retained[root] as number) + (g.selfSize[v] as number);
  for (let b = 0; b < count; b++) {
    const v = order[b] as number;
    if (v !== root) retained[idom[v] as number] = (retained[idom[v] as number] as number) + (retained[v] as number);
  }
  // Shortest retaining paths, breadth first over strong edges.
  const viaEdge = new Int32Array(n).fill(-1);
  const viaNode = new Int32Array(n).fill(-1);
  const queue = new Uint32Array(n);
  const seen = new Uint8Array(n);
  let head = 0;
  let tail = 0;
  queue[tail++] = root;
  seen[root] = 1;
  while (head < tail) {
    const v = queue[head++] as number;
    for (let k = g.firstEdge[v] as number; k < (g.firstEdge[v + 1] as number); k++) {
      if (!isStrong(g, v, k, root)) continue;
      const w = g.edgeTo[k] as number;
      if (seen[w] === 1) continue;
      seen[w] = 1;
      viaEdge[w] = k;
      viaNode[w] = v;
      queue[tail++] = w;
    }
  }
  return { idom, retained, viaEdge, viaNode, reachable: count };
}

// ---- The summary ------------------------------------------------------------------------------

export interface ClassRow {
  readonly name: string;
  readonly count: number;
  readonly selfBytes: number;
  readonly retainedBytes: number;
}

export interface TreeRow {
  readonly depth: number;
  readonly via: string;
  readonly label: string;
  readonly id: number;
  readonly selfBytes: number;
  readonly retainedBytes: number;
}

export interface TopRow {
  readonly label: string;
  readonly id: number;
  readonly selfBytes: number;
  readonly retainedBytes: number;
  readonly path: string;
}

export interface BufferRow {
  /** The last steps of a shortest retaining path, numbers replaced by #: one kind of holder. */
  readonly holder: string;
  readonly count: number;
  readonly bytes: number;
  /** The commonest sizes, `bytes x count`. */
  readonly sizes: string;
}

export interface HeapSummary {
  readonly nodes: number;
  readonly edges: number;
  readonly reachable: number;
  readonly totalBytes: number;
  readonly byType: readonly { readonly type: string; readonly count: number; readonly selfBytes: number }[];
  readonly bySelf: readonly ClassRow[];
  readonly byRetained: readonly ClassRow[];
  readonly tree: readonly TreeRow[];
  readonly top: readonly TopRow[];
  /** ArrayBuffer backing stores (outside the V8 heap: `external`/`arrayBuffers`) by size. */
  readonly bufferSizes: readonly { readonly bucket: string; readonly count: number; readonly bytes: number }[];
  /** ...and by the kind of holder: a store shared by several views has no single dominator, so the tree misses it. */
  readonly bufferHolders: readonly BufferRow[];
}

export interface SummaryOptions {
  readonly top: number;
  readonly treeBytes: number;
  readonly depth: number;
  /** Steps of the retaining path that name a backing store's holder. */
  readonly holderSteps: number;
}

/** The label of the edge that holds `v` in the dominator tree: idom's own edge if it has one, else the shortest path's last edge. */
function holdingEdge(g: HeapGraph, d: Dominance, v: number): string {
  const p = d.idom[v] as number;
  for (let k = g.firstEdge[p] as number; k < (g.firstEdge[p + 1] as number); k++) if (g.edgeTo[k] === v && isStrong(g, p, k, 0)) return edgeLabel(g, k);
  const k = d.viaEdge[v] as number;
  return k < 0 ? '' : `(via ${nodeLabel(g, d.viaNode[v] as number)}${edgeLabel(g, k)})`;
}

export function retainingPath(g: HeapGraph, d: Dominance, v: number, maxSteps = 12): string {
  const parts: string[] = [];
  for (let w = v, steps = 0; d.viaEdge[w] !== -1 && steps < maxSteps; w = d.viaNode[w] as number, steps++) {
    parts.push(`${nodeLabel(g, d.viaNode[w] as number)}${edgeLabel(g, d.viaEdge[w] as number)}`);
  }
  if (parts.length === maxSteps) parts.push('...');
  return parts.reverse().join(' > ');
}

export function summarize(g: HeapGraph, d: Dominance, opts: SummaryOptions, root = 0): HeapSummary {
  const n = g.nodeCount;
  let total = 0;
  const byType = new Map<string, { count: number; selfBytes: number }>();
  const classes = new Map<string, { count: number; selfBytes: number; retainedBytes: number }>();
  for (let v = 0; v < n; v++) {
    total += g.selfSize[v] as number;
    const t = g.nodeTypes[g.nodeType[v] as number] ?? '?';
    const bt = byType.get(t) ?? { count: 0, selfBytes: 0 };
    bt.count++;
    bt.selfBytes += g.selfSize[v] as number;
    byType.set(t, bt);
    const c = className(g, v);
    const row = classes.get(c) ?? { count: 0, selfBytes: 0, retainedBytes: 0 };
    row.count++;
    row.selfBytes += g.selfSize[v] as number;
    classes.set(c, row);
  }
  // Dominator tree children, then one walk that adds an instance's retained size to its class
  // only when no dominating ancestor is of the same class.
  const childStart = new Uint32Array(n + 1);
  for (let v = 0; v < n; v++) if (v !== root) childStart[(d.idom[v] as number) + 1] = (childStart[(d.idom[v] as number) + 1] as number) + 1;
  for (let v = 0; v < n; v++) childStart[v + 1] = (childStart[v + 1] as number) + (childStart[v] as number);
  const fill = childStart.slice(0, n);
  const children = new Uint32Array(childStart[n] as number);
  for (let v = 0; v < n; v++) {
    if (v === root) continue;
    const p = d.idom[v] as number;
    children[fill[p] as number] = v;
    fill[p] = (fill[p] as number) + 1;
  }
  const onPath = new Map<string, number>();
  const stack: number[] = [root];
  const entered = new Uint8Array(n);
  while (stack.length > 0) {
    const v = stack[stack.length - 1] as number;
    const c = className(g, v);
    if (entered[v] === 0) {
      entered[v] = 1;
      const k = onPath.get(c) ?? 0;
      if (k === 0) (classes.get(c) as { retainedBytes: number }).retainedBytes += d.retained[v] as number;
      onPath.set(c, k + 1);
      for (let i = childStart[v] as number; i < (childStart[v + 1] as number); i++) stack.push(children[i] as number);
    } else {
      stack.pop();
      onPath.set(c, (onPath.get(c) as number) - 1);
    }
  }
  const classRows = [...classes.entries()].map(([name, r]) => ({ name, ...r }));
  // The tree: from the root, every node retaining at least treeBytes, biggest first.
  const tree: TreeRow[] = [];
  const walk = (v: number, depth: number): void => {
    tree.push({ depth, via: v === root ? '' : holdingEdge(g, d, v), label: nodeLabel(g, v), id: g.nodeId[v] as number, selfBytes: g.selfSize[v] as number, retainedBytes: d.retained[v] as number });
    if (depth >= opts.depth) return;
    const kids: number[] = [];
    for (let i = childStart[v] as number; i < (childStart[v + 1] as number); i++) if ((d.retained[children[i] as number] as number) >= opts.treeBytes) kids.push(children[i] as number);
    kids.sort((a, b) => (d.retained[b] as number) - (d.retained[a] as number));
    for (const k of kids) walk(k, depth + 1);
  };
  walk(root, 0);
  // The largest single holders: skip the synthetic root and its groups ((GC roots) and the like).
  const synthetic = g.nodeTypes.indexOf('synthetic');
  const candidates: number[] = [];
  for (let v = 0; v < n; v++) if (v !== root && g.nodeType[v] !== synthetic) candidates.push(v);
  candidates.sort((a, b) => (d.retained[b] as number) - (d.retained[a] as number));
  const top = candidates.slice(0, opts.top).map((v) => ({ label: nodeLabel(g, v), id: g.nodeId[v] as number, selfBytes: g.selfSize[v] as number, retainedBytes: d.retained[v] as number, path: retainingPath(g, d, v) }));
  // Backing stores: Node's Buffer pool hands out slices of 8 KiB slabs (Buffer.poolSize), and one
  // live slice keeps its whole slab; the size histogram shows that, the holders say who.
  const BUCKETS: readonly [string, number][] = [['<= 4 KiB', 4096], ['8 KiB (pool slabs)', 8192], ['<= 64 KiB', 65536], ['<= 1 MiB', MIB], ['> 1 MiB', Number.POSITIVE_INFINITY]];
  const sizes = new Map<string, { count: number; bytes: number }>(BUCKETS.map(([b]) => [b, { count: 0, bytes: 0 }]));
  const holders = new Map<string, { count: number; bytes: number; sizes: Map<number, number> }>();
  for (let v = 0; v < n; v++) {
    if (g.strings[g.nodeName[v] as number] !== 'system / JSArrayBufferData') continue;
    const size = g.selfSize[v] as number;
    const bucket = (BUCKETS.find(([name, max]) => (name.startsWith('8 KiB') ? size === max : size <= max)) ?? BUCKETS[BUCKETS.length - 1]) as [string, number];
    const sb = sizes.get(bucket[0]) as { count: number; bytes: number };
    sb.count++;
    sb.bytes += size;
    const holder = retainingPath(g, d, v, 40).replace(/ @\d+/g, '').replace(/\d+/g, '#').split(' > ').slice(-opts.holderSteps).join(' > ');
    const h = holders.get(holder) ?? { count: 0, bytes: 0, sizes: new Map<number, number>() };
    h.count++;
    h.bytes += size;
    h.sizes.set(size, (h.sizes.get(size) ?? 0) + 1);
    holders.set(holder, h);
  }
  return {
    bufferSizes: [...sizes.entries()].map(([bucket, r]) => ({ bucket, ...r })),
    bufferHolders: [...holders.entries()]
      .map(([holder, r]) => ({ holder, count: r.count, bytes: r.bytes, sizes: [...r.sizes.entries()].sort((a, b) => b[1] - a[1]).slice(0, 3).map(([b, c]) => `${b} B x ${c}`).join(', ') }))
      .sort((a, b) => b.bytes - a.bytes)
      .slice(0, opts.top),
    nodes: n,
    edges: g.edgeTo.length,
    reachable: d.reachable,
    totalBytes: total,
    byType: [...byType.entries()].map(([type, r]) => ({ type, ...r })).sort((a, b) => b.selfBytes - a.selfBytes),
    bySelf: [...classRows].sort((a, b) => b.selfBytes - a.selfBytes).slice(0, opts.top),
    byRetained: classRows.filter((r) => r.name !== '(root)').sort((a, b) => b.retainedBytes - a.retainedBytes).slice(0, opts.top),
    tree,
    top,
  };
}

const MIB = 1024 * 1024;
const mib = (b: number): string => (b / MIB).toFixed(2);

export function formatSummary(s: HeapSummary, file: string): string {
  const out: string[] = [];
  out.push(`${file}: ${s.nodes.toLocaleString('en-US')} nodes, ${s.edges.toLocaleString('en-US')} edges, ${s.reachable.toLocaleString('en-US')} reachable by strong edges; self sizes add up to ${mib(s.totalBytes)} MiB`);
  out.push('', 'By V8 node type (self MiB, count):');
  for (const t of s.byType) out.push(`  ${mib(t.selfBytes).padStart(9)}  ${String(t.count).padStart(9)}  ${t.type}`);
  const classTable = (title: string, rows: readonly ClassRow[]): void => {
    out.push('', `${title} (self MiB, retained MiB, count):`);
    for (const r of rows) out.push(`  ${mib(r.selfBytes).padStart(9)} ${mib(r.retainedBytes).padStart(9)}  ${String(r.count).padStart(9)}  ${r.name}`);
  };
  classTable('Classes by self size', s.bySelf);
  classTable('Classes by retained size (an instance inside another of its class counted once)', s.byRetained);
  out.push('', 'Dominator tree (retained MiB, self MiB, the edge that holds it, the holder):');
  for (const r of s.tree) out.push(`  ${mib(r.retainedBytes).padStart(9)} ${mib(r.selfBytes).padStart(8)}  ${'  '.repeat(r.depth)}${r.via === '' ? '' : `${r.via} `}${r.label} @${r.id}`);
  out.push('', 'Largest single holders (retained MiB, self MiB, what, a shortest retaining path):');
  for (const r of s.top) out.push(`  ${mib(r.retainedBytes).padStart(9)} ${mib(r.selfBytes).padStart(8)}  ${r.label} @${r.id}\n             ${r.path}`);
  out.push('', 'ArrayBuffer backing stores by size (MiB, count):');
  for (const b of s.bufferSizes) out.push(`  ${mib(b.bytes).padStart(9)}  ${String(b.count).padStart(9)}  ${b.bucket}`);
  out.push('', 'ArrayBuffer backing stores by holder (MiB, count, commonest sizes; the last steps of a shortest retaining path):');
  for (const b of s.bufferHolders) out.push(`  ${mib(b.bytes).padStart(9)}  ${String(b.count).padStart(9)}  ${b.sizes}\n             ${b.holder}`);
  return out.join('\n');
}

// ---- The command ------------------------------------------------------------------------------

function flagNumber(argv: readonly string[], name: string, fallback: number): number {
  const i = argv.indexOf(name);
  if (i < 0) return fallback;
  const v = Number(argv[i + 1]);
  if (!Number.isFinite(v) || v < 0) throw new Error(`${name} takes a non-negative number, got ${JSON.stringify(argv[i + 1])}`);
  return v;
}

function main(argv: readonly string[]): void {
  const file = argv.find((a, i) => !a.startsWith('--') && (i === 0 || !['--top', '--tree-mib', '--depth', '--holder-steps', '--json'].includes(argv[i - 1] ?? '')));
  if (file === undefined) throw new Error('usage: heap-summary FILE.heapsnapshot [--top 25] [--tree-mib 1] [--depth 14] [--holder-steps 6] [--json OUT]');
  const bytes = statSync(file).size;
  // One JSON string: V8's largest string is about 512 MiB (2^29 characters).
  if (bytes > 2 ** 29 - 24) throw new Error(`heap snapshot ${file} is ${mib(bytes)} MiB, over the ${mib(2 ** 29)} MiB a V8 string can hold; summarise a smaller heap`);
  const g = parseSnapshot(JSON.parse(readFileSync(file, 'utf8')) as unknown);
  const d = dominance(g);
  const s = summarize(g, d, { top: flagNumber(argv, '--top', 25), treeBytes: flagNumber(argv, '--tree-mib', 1) * MIB, depth: flagNumber(argv, '--depth', 14), holderSteps: flagNumber(argv, '--holder-steps', 6) });
  console.log(formatSummary(s, file));
  const jsonAt = argv.indexOf('--json');
  if (jsonAt >= 0) {
    const out = argv[jsonAt + 1];
    if (out === undefined) throw new Error('--json needs a file name');
    writeFileSync(out, JSON.stringify(s, null, 2));
  }
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) {
  try {
    main(process.argv.slice(2));
  } catch (e) {
    console.error(e instanceof Error ? e.message : e);
    process.exitCode = 1;
  }
}
