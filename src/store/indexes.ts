import { assert } from '../base/index.js';
import { type BTree, sortedStringTree, stringTree } from './btree.js';
import { keyOfId, ownerKey } from './keys.js';
import { resourceBytes } from './size.js';
import type { Resource } from './types.js';

/**
 * The three indexes, always changed together:
 * - `byKey`:   primary key (keys.ts) -> resource, ordered, for point reads and range scans;
 * - `byUid`:   uid -> primary key;
 * - `byOwner`: `ownerUid \0 childKey` -> childKey, so one owner's children are one range.
 *
 * All three are B+ trees, so `clone()` is O(1) and the clones share every unchanged node (and
 * every resource object, which is frozen) with the live indexes.
 *
 * `dataBytes` is the sum of `resourceBytes` over the stored resources (size.ts), kept up to
 * date by the three changes below (so by every write, delete and cascade, and by a restore,
 * which inserts each resource): the figure the quota is decided on.
 */
export class Indexes {
  private bytes = 0;

  private constructor(
    readonly byKey: BTree<string, Resource>,
    readonly byUid: BTree<string, string>,
    readonly byOwner: BTree<string, string>,
  ) {}

  static empty(): Indexes {
    return new Indexes(stringTree(), stringTree(), stringTree());
  }

  /**
   * The indexes of `resources`, given in strictly ascending key order with their `keys` (what a
   * snapshot holds): the primary index is bulk-loaded in O(n), the others filled by insertion.
   * Answers the position of a resource whose uid repeats an earlier one's instead of indexes.
   */
  static fromSorted(keys: string[], resources: Resource[]): Indexes | { readonly repeatedUid: number } {
    assert(keys.length === resources.length, 'fromSorted: one key per resource');
    const ix = new Indexes(sortedStringTree(keys, resources), stringTree(), stringTree());
    let bytes = 0;
    for (let i = 0; i < resources.length; i++) {
      const r = resources[i] as Resource;
      const key = keys[i] as string;
      if (!ix.byUid.set(r.id.uid, key, false)) return { repeatedUid: i };
      if (r.owner !== null) ix.byOwner.set(ownerKey(r.owner.uid, key), key);
      bytes += resourceBytes(r);
    }
    ix.bytes = bytes;
    return ix;
  }

  /** The deterministic size of everything stored (size.ts `resourceBytes`, summed). */
  get dataBytes(): number {
    return this.bytes;
  }

  /** An O(1) copy-on-write copy, frozen: writing to it is a bug and throws. */
  frozenClone(): Indexes {
    const ix = new Indexes(this.byKey.clone(), this.byUid.clone(), this.byOwner.clone());
    ix.bytes = this.bytes;
    ix.byKey.freeze();
    ix.byUid.freeze();
    ix.byOwner.freeze();
    return ix;
  }

  /**
   * An O(1) copy-on-write copy that may be written to: what a transaction keeps to go back to
   * if a later op of its branch fails (`ResourceStore.atomically`).
   */
  clone(): Indexes {
    const ix = new Indexes(this.byKey.clone(), this.byUid.clone(), this.byOwner.clone());
    ix.bytes = this.bytes;
    return ix;
  }

  get size(): number {
    return this.byKey.size;
  }

  /** Adds a resource that is not stored yet (its key and uid are free). */
  insert(key: string, r: Resource): void {
    assert(key === keyOfId(r.id), () => `insert: key ${JSON.stringify(key)} is not the key of ${JSON.stringify(r.id)}`);
    assert(this.byKey.set(key, r, false), () => `insert: key ${JSON.stringify(key)} is already stored`);
    assert(this.byUid.set(r.id.uid, key, false), () => `insert: uid ${r.id.uid} is already stored`);
    if (r.owner !== null) this.byOwner.set(ownerKey(r.owner.uid, key), key);
    this.bytes += resourceBytes(r);
  }

  /** Replaces a stored resource with its next state (same key, uid and owner). */
  replace(key: string, prev: Resource, next: Resource): void {
    assert(this.byKey.get(key) === prev, () => `replace: ${JSON.stringify(key)} is not the stored resource`);
    assert(next.id.uid === prev.id.uid, 'replace: the uid of a stored resource never changes');
    assert((next.owner?.uid ?? null) === (prev.owner?.uid ?? null), 'replace: the owner of a stored resource never changes');
    assert(keyOfId(next.id) === key, 'replace: the identity of a stored resource never changes');
    this.byKey.set(key, next, true);
    this.bytes += resourceBytes(next) - resourceBytes(prev);
  }

  remove(key: string, r: Resource): void {
    assert(this.byKey.get(key)?.id.uid === r.id.uid, () => `remove: ${JSON.stringify(key)} does not hold uid ${r.id.uid}`);
    this.byKey.delete(key);
    assert(this.byUid.delete(r.id.uid), () => `remove: uid ${r.id.uid} was not indexed`);
    if (r.owner !== null) assert(this.byOwner.delete(ownerKey(r.owner.uid, key)), () => `remove: ${JSON.stringify(key)} was not in its owner's index`);
    this.bytes -= resourceBytes(r);
    assert(this.bytes >= 0, () => `remove: the data size went negative (${this.bytes})`);
  }
}
