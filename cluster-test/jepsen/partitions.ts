/**
 * Partition shapes as sets of directed cuts between node indexes (0-based positions in the
 * host list). Pure: the shapes are unit-tested without root; nft.ts turns cuts into rules and
 * nemesis.ts applies them. A cut {from, to} means packets from `from` never reach `to`; a
 * two-way cut is two cuts.
 */

export interface Cut {
  readonly from: number;
  readonly to: number;
}

/** Both directions between every node of `a` and every node of `b`. */
function between(a: readonly number[], b: readonly number[]): Cut[] {
  const out: Cut[] = [];
  for (const x of a) for (const y of b) out.push({ from: x, to: y }, { from: y, to: x });
  return sortCuts(out);
}

function sortCuts(cuts: readonly Cut[]): Cut[] {
  return [...cuts].sort((p, q) => p.from - q.from || p.to - q.to);
}

function checkOrder(n: number, order: readonly number[]): void {
  const seen = new Set(order);
  if (order.length !== n || seen.size !== n || order.some((i) => !Number.isInteger(i) || i < 0 || i >= n)) {
    throw new Error(`order must be a permutation of 0..${n - 1}, got [${order.join(',')}]`);
  }
}

/** A majority of n voters. */
export function majority(n: number): number {
  return Math.floor(n / 2) + 1;
}

/** `side` cut off from the rest, both ways (Jepsen's "halves" when `side` is a minority). */
export function halvesCuts(n: number, side: readonly number[]): Cut[] {
  for (const s of side) if (!Number.isInteger(s) || s < 0 || s >= n) throw new Error(`partition side names node ${s}, not one of 0..${n - 1}`);
  const inSide = new Set(side);
  return between([...inSide], [...Array(n).keys()].filter((i) => !inSide.has(i)));
}

/**
 * Jepsen's "majorities ring": every node sees a majority (itself included), but no two nodes
 * see the same one, so no node can tell which majority leads. `order` places the nodes on the
 * ring. With 4 or more nodes each node keeps both-way links to its k nearest ring neighbours
 * on each side (k = ceil((majority - 1) / 2): with 5 nodes, its two neighbours) and loses the
 * rest. With 3 nodes both-way neighbour links would cut nothing, so, as Jepsen does, the ring
 * is one-way: each node hears only the next one on the ring (it sees itself and that one, a
 * majority of 3) and drops packets from the one before it.
 */
export function ringCuts(n: number, order: readonly number[]): Cut[] {
  checkOrder(n, order);
  if (n < 3) return [];
  const at = (p: number): number => order[((p % n) + n) % n] as number;
  if (n === 3) return sortCuts([0, 1, 2].map((p) => ({ from: at(p + 2), to: at(p) })));
  const k = Math.ceil((majority(n) - 1) / 2);
  const out: Cut[] = [];
  for (let p = 0; p < n; p++) {
    for (let q = 0; q < n; q++) {
      const d = Math.min(Math.abs(p - q), n - Math.abs(p - q));
      if (p !== q && d > k) out.push({ from: at(p), to: at(q) });
    }
  }
  return sortCuts(out);
}

/** The sides of a bridge partition: `order`'s first floor((n-1)/2), the bridge node, the rest. */
export function bridgeSides(n: number, order: readonly number[]): { left: number[]; bridge: number; right: number[] } {
  checkOrder(n, order);
  if (n < 3) throw new Error(`a bridge needs at least 3 nodes, got ${n}`);
  const l = Math.floor((n - 1) / 2);
  return { left: order.slice(0, l), bridge: order[l] as number, right: order.slice(l + 1) };
}

/**
 * Jepsen's "bridge": two halves cut from each other both ways, and one node that both halves
 * still reach. With 5 nodes each half plus the bridge is a majority of 3.
 */
export function bridgeCuts(n: number, order: readonly number[]): Cut[] {
  const { left, right } = bridgeSides(n, order);
  return between(left, right);
}

/**
 * One-way drops around `node`. `in`: `node` drops the packets it gets from `peers` (they still
 * get its packets). `out`: `peers` drop the packets they get from `node` (it still gets theirs).
 */
export function onewayCuts(n: number, node: number, direction: 'in' | 'out', peers: readonly number[]): Cut[] {
  for (const p of [node, ...peers]) if (!Number.isInteger(p) || p < 0 || p >= n) throw new Error(`one-way drop names node ${p}, not one of 0..${n - 1}`);
  if (peers.includes(node)) throw new Error(`node ${node} cannot drop its own packets`);
  return sortCuts(peers.map((p) => (direction === 'in' ? { from: p, to: node } : { from: node, to: p })));
}

/** reaches[a][b]: packets from a get to b (a node always reaches itself). */
export function reachability(n: number, cuts: readonly Cut[]): boolean[][] {
  const m = [...Array(n).keys()].map(() => Array<boolean>(n).fill(true));
  for (const c of cuts) (m[c.from] as boolean[])[c.to] = false;
  return m;
}

/**
 * What the cuts do, for the log and the report: `n1<->n3` both ways, `n2->n4` only packets
 * from n2 to n4 dropped.
 */
export function describeCuts(cuts: readonly Cut[], names: (node: number) => string = (i) => `n${i + 1}`): string {
  if (cuts.length === 0) return 'nothing cut';
  const has = new Set(cuts.map((c) => `${c.from}>${c.to}`));
  const both: string[] = [];
  const one: string[] = [];
  for (const c of sortCuts(cuts)) {
    if (has.has(`${c.to}>${c.from}`)) {
      if (c.from < c.to) both.push(`${names(c.from)}<->${names(c.to)}`);
    } else one.push(`${names(c.from)}->${names(c.to)}`);
  }
  return [...(both.length > 0 ? [`cut ${both.join(' ')}`] : []), ...(one.length > 0 ? [`dropped ${one.join(' ')}`] : [])].join('; ');
}
