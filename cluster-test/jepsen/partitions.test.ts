// Partition shapes as directed cuts (pure; applying them needs root and is covered by
// nemesis.netns-test.ts): who reaches whom under each shape, checked as properties and exactly.
import t from 'tap';
import { bridgeCuts, bridgeSides, describeCuts, halvesCuts, majority, onewayCuts, reachability, ringCuts, type Cut } from './partitions.js';

/** The nodes whose packets reach `node` (itself included): what it "sees". */
function sees(m: boolean[][], node: number): number[] {
  return m.map((row, from) => (row[node] === true ? from : -1)).filter((x) => x >= 0);
}

const pairs = (cuts: readonly Cut[]): string[] => cuts.map((c) => `${c.from}>${c.to}`);

t.test('majorities ring of 5: each node sees itself and its two ring neighbours, both ways; no two see the same majority', async (t) => {
  const order = [3, 0, 4, 1, 2];
  const m = reachability(5, ringCuts(5, order));
  const seen = new Set<string>();
  for (let p = 0; p < 5; p++) {
    const node = order[p] as number;
    const neighbours = [order[(p + 4) % 5] as number, node, order[(p + 1) % 5] as number].sort();
    t.same(sees(m, node), neighbours, `n${node + 1} sees its neighbours`);
    t.equal(sees(m, node).length, majority(5), 'a majority, itself included');
    for (let o = 0; o < 5; o++) t.equal(m[node]?.[o], m[o]?.[node], 'both ways');
    seen.add(sees(m, node).join(','));
  }
  t.equal(seen.size, 5, 'five different majorities');
  // Exactly the non-neighbour pairs, both ways: 5 pairs, 10 cuts.
  t.equal(ringCuts(5, order).length, 10);
  t.same(pairs(ringCuts(5, [0, 1, 2, 3, 4])), ['0>2', '0>3', '1>3', '1>4', '2>0', '2>4', '3>0', '3>1', '4>1', '4>2']);
});

t.test('majorities ring of 3 is one-way: each node hears only the next one on the ring', async (t) => {
  const cuts = ringCuts(3, [1, 2, 0]);
  // Ring 1 -> 2 -> 0 -> 1: node 1 hears 2 (drops 0), node 2 hears 0 (drops 1), node 0 hears 1 (drops 2).
  t.same(pairs(cuts), ['0>1', '1>2', '2>0']);
  const m = reachability(3, cuts);
  const seen = new Set<string>();
  for (let n = 0; n < 3; n++) {
    t.equal(sees(m, n).length, majority(3), `n${n + 1} sees a majority of 3`);
    seen.add(sees(m, n).join(','));
  }
  t.equal(seen.size, 3, 'no two agree');
  t.same(ringCuts(4, [0, 1, 2, 3]).length, 4, 'ring of 4: the two diagonals, both ways');
  t.same(ringCuts(2, [0, 1]), [], 'nothing to cut below 3 nodes');
  t.throws(() => ringCuts(5, [0, 1, 2, 3, 3]), /permutation/);
});

t.test('bridge: two halves cut from each other both ways, both still reach the bridge node', async (t) => {
  const order = [4, 1, 0, 3, 2];
  t.same(bridgeSides(5, order), { left: [4, 1], bridge: 0, right: [3, 2] });
  const m = reachability(5, bridgeCuts(5, order));
  t.same(sees(m, 0), [0, 1, 2, 3, 4], 'the bridge sees everyone');
  for (let n = 0; n < 5; n++) t.equal(m[0]?.[n], true, `the bridge reaches n${n + 1}`);
  t.same(sees(m, 4), [0, 1, 4], 'left half and bridge: a majority');
  t.same(sees(m, 3), [0, 2, 3], 'right half and bridge: a majority');
  t.same(pairs(bridgeCuts(5, order)), ['1>2', '1>3', '2>1', '2>4', '3>1', '3>4', '4>2', '4>3']);
  t.same(pairs(bridgeCuts(3, [2, 0, 1])), ['1>2', '2>1'], 'of 3: the two ends cut, the middle reaches both');
  t.throws(() => bridgeSides(2, [0, 1]), /at least 3/);
});

t.test('one-way drops: in = the node drops what its peers send, out = the peers drop what it sends', async (t) => {
  t.same(pairs(onewayCuts(3, 1, 'in', [0, 2])), ['0>1', '2>1']);
  t.same(pairs(onewayCuts(3, 1, 'out', [2])), ['1>2']);
  const m = reachability(3, onewayCuts(3, 1, 'in', [2]));
  t.equal(m[2]?.[1], false, 'n2 drops packets from n3');
  t.equal(m[1]?.[2], true, 'n3 still gets n2\'s');
  t.throws(() => onewayCuts(3, 1, 'in', [1]), /own packets/);
  t.throws(() => onewayCuts(3, 1, 'in', [3]), /not one of/);
});

t.test('halves and the description of cuts', async (t) => {
  t.same(pairs(halvesCuts(3, [0])), ['0>1', '0>2', '1>0', '2>0']);
  t.throws(() => halvesCuts(3, [3]), /not one of/);
  t.equal(describeCuts(halvesCuts(3, [0])), 'cut n1<->n2 n1<->n3');
  t.equal(describeCuts(ringCuts(3, [0, 1, 2])), 'dropped n1->n2 n2->n3 n3->n1');
  t.equal(describeCuts([...onewayCuts(3, 0, 'in', [1]), ...halvesCuts(3, [2])]), 'cut n1<->n3 n2<->n3; dropped n2->n1');
  t.equal(describeCuts([]), 'nothing cut');
});
