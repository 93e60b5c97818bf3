import sortedBtree from 'sorted-btree';
import bulkLoadModule from 'sorted-btree/extended/bulkLoad.js';

/**
 * sorted-btree is a CommonJS package whose class is `exports.default`; from ESM the default
 * import is the whole `module.exports`, hence `.default`. Its `clone()` is O(1): both trees share
 * nodes and copy a path on the next write to either (copy-on-write), which is what makes store
 * snapshots cheap.
 */
export const BTree = sortedBtree.default;
export type BTree<K, V> = InstanceType<typeof sortedBtree.default<K, V>>;

/** Plain code-unit order for string keys (the index keys are compared as strings, nothing else). */
export function compareStrings(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** The B+ tree's node size (sorted-btree's default, 32): the same for trees built either way. */
const NODE_SIZE = 32;

export function stringTree<V>(): BTree<string, V> {
  return new BTree<string, V>(undefined, compareStrings, NODE_SIZE);
}

/**
 * A tree of `keys` (strictly ascending, checked) and their `values`, built bottom-up in O(n)
 * (sorted-btree's bulk load) instead of n inserts of O(log n) each: how a restore rebuilds
 * its primary index from a snapshot, which holds resources in key order. The tree is the same
 * kind as `stringTree()`'s and behaves the same afterwards.
 */
export function sortedStringTree<V>(keys: string[], values: V[]): BTree<string, V> {
  return bulkLoadModule.bulkLoad(keys, values, NODE_SIZE, compareStrings);
}

/**
 * Calls `visit` for every entry whose key starts with `prefix`, in key order, without touching
 * the rest of the tree. `visit` may not change the tree (collect first, then change).
 */
export function scanPrefix<V>(tree: BTree<string, V>, prefix: string, visit: (key: string, value: V) => void): void {
  const high = prefixEnd(prefix);
  if (high === undefined) {
    for (const [k, v] of tree.entries(prefix === '' ? undefined : prefix)) {
      if (!k.startsWith(prefix)) break;
      visit(k, v);
    }
    return;
  }
  tree.forRange(prefix, high, false, (k, v) => {
    visit(k, v);
  });
}

/** The least string greater than every string that starts with `prefix`; undefined if none. */
export function prefixEnd(prefix: string): string | undefined {
  let i = prefix.length - 1;
  while (i >= 0 && prefix.charCodeAt(i) === 0xffff) i--;
  if (i < 0) return undefined;
  return prefix.slice(0, i) + String.fromCharCode(prefix.charCodeAt(i) + 1);
}

/**
 * Visits the entries whose key starts with `prefix` and is greater than `after` (all of them
 * when `after` is undefined), in key order, until `visit` returns false. Starts at the first
 * such key (O(log n)), so a page in the middle of a long range costs its own length only.
 * `visit` may not change the tree.
 */
export function scanPrefixFrom<V>(tree: BTree<string, V>, prefix: string, after: string | undefined, visit: (key: string, value: V) => boolean): void {
  const start = after !== undefined && compareStrings(after, prefix) > 0 ? after : prefix;
  for (const [k, v] of tree.entries(start === '' ? undefined : start)) {
    if (!k.startsWith(prefix)) break;
    if (after !== undefined && compareStrings(k, after) <= 0) continue;
    if (!visit(k, v)) break;
  }
}
