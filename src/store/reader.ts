import { CairnError, ErrorCode, assert, err, ok, type Result, type Revision } from '../base/index.js';
import { scanPrefix, scanPrefixFrom } from './btree.js';
import type { Indexes } from './indexes.js';
import { SEP, formatName, formatType, hasNul, resourceKey } from './keys.js';
import {
  WILDCARD,
  type ListQuery,
  type Page,
  type PageOptions,
  type ReadInput,
  type Resource,
  type ResourceKeyRef,
  type StoreReader,
} from './types.js';

/**
 * The read side over a set of indexes, shared by the live store and its snapshots (which hold
 * frozen O(1) clones of the indexes). Reads never change anything.
 */
export abstract class IndexReader implements StoreReader {
  protected abstract get indexes(): Indexes;
  abstract get revision(): Revision;
  abstract snapshot(): StoreReader;

  get size(): number {
    return this.indexes.size;
  }

  get dataBytes(): number {
    return this.indexes.dataBytes;
  }

  get(ref: ResourceKeyRef): Resource | undefined {
    if (hasNul(ref.group, ref.kind, ref.tenancy.partition, ref.tenancy.namespace, ref.name)) return undefined;
    return this.indexes.byKey.get(resourceKey(ref.group, ref.kind, ref.tenancy, ref.name));
  }

  read(ref: ReadInput): Result<Resource, CairnError> {
    const r = this.get({ group: ref.type.group, kind: ref.type.kind, tenancy: ref.tenancy, name: ref.name });
    const what = formatName(ref.type, ref.tenancy, ref.name);
    const wantUid = ref.uid ?? '';
    if (r === undefined || (wantUid !== '' && r.id.uid !== wantUid)) {
      const why = r === undefined ? 'no such resource' : `the stored resource has uid ${r.id.uid}, not ${wantUid}`;
      return err(
        new CairnError(ErrorCode.NOT_FOUND, `read ${what}: ${why}`, {
          type: formatType(ref.type),
          partition: ref.tenancy.partition,
          namespace: ref.tenancy.namespace,
          name: ref.name,
        }),
      );
    }
    if (r.id.type.groupVersion !== ref.type.groupVersion) {
      const storedType = formatType(r.id.type);
      return err(
        new CairnError(ErrorCode.GROUP_VERSION_MISMATCH, `read ${what}: the resource is stored as ${storedType}`, {
          stored_type: storedType,
          requested_type: formatType(ref.type),
        }),
      );
    }
    return ok(r);
  }

  getByUid(uid: string): Resource | undefined {
    const key = this.indexes.byUid.get(uid);
    return key === undefined ? undefined : this.stored(key);
  }

  list(q: ListQuery): Resource[] {
    const out: Resource[] = [];
    this.scanQuery(q, undefined, (_k, r) => {
      out.push(r);
      return true;
    });
    return out;
  }

  /**
   * One page of `list(q)`: the matches after the key `opts.after` (exclusive) that also pass
   * `opts.visible`, at most `opts.limit` of them, in list order. Walks the index from `after`
   * and stops after the page (plus one more visible match, to tell whether more remain): it
   * never builds the whole result. `nextAfter` is set when more visible matches remain; pass
   * it as `after` to read the next page (of this reader, or of a snapshot at the same revision).
   */
  listPage(q: ListQuery, opts: PageOptions): Page {
    return this.page(opts, (after, visit) => this.scanQuery(q, after, visit));
  }

  listByOwner(ownerUid: string): Resource[] {
    const out: Resource[] = [];
    this.scanOwner(ownerUid, undefined, (_k, r) => {
      out.push(r);
      return true;
    });
    return out;
  }

  /** One page of `listByOwner(ownerUid)`, as `listPage` pages `list`. */
  listByOwnerPage(ownerUid: string, opts: PageOptions): Page {
    return this.page(opts, (after, visit) => this.scanOwner(ownerUid, after, visit));
  }

  private page(opts: PageOptions, scan: (after: string | undefined, visit: (key: string, r: Resource) => boolean) => void): Page {
    assert(Number.isSafeInteger(opts.limit) && opts.limit >= 1, () => `listPage: limit must be a positive integer, got ${opts.limit}`);
    const items: Resource[] = [];
    let lastKey: string | undefined;
    let bytes = 0;
    let more = false;
    scan(opts.after, (key, r) => {
      if (opts.visible !== undefined && !opts.visible(r)) return true;
      if (items.length >= opts.limit) {
        more = true;
        return false;
      }
      if (opts.maxBytes !== undefined && opts.sizeOf !== undefined) {
        const size = opts.sizeOf(r);
        // Always at least one item, so a page always makes progress.
        if (items.length > 0 && bytes + size > opts.maxBytes) {
          more = true;
          return false;
        }
        bytes += size;
      }
      items.push(r);
      lastKey = key;
      return true;
    });
    return more && lastKey !== undefined ? { items, nextAfter: lastKey } : { items };
  }

  /**
   * Visits the matches of `q` in key order, starting after the primary key `after`, until
   * `visit` returns false. Touches only the narrowest index range the query fixes.
   */
  private scanQuery(q: ListQuery, after: string | undefined, visit: (key: string, r: Resource) => boolean): void {
    const namePrefix = q.namePrefix ?? '';
    if (hasNul(q.group, q.kind, q.partition, q.namespace, namePrefix, q.ownerUid ?? '')) return;
    // The narrowest key prefix the query fixes: (group, kind), then partition, then namespace
    // and name prefix. Whatever a wildcard leaves open is filtered below.
    let prefix = q.group + SEP + q.kind + SEP;
    if (q.partition !== WILDCARD) {
      prefix += q.partition + SEP;
      if (q.namespace !== WILDCARD) prefix += q.namespace + SEP + namePrefix;
    }
    const matches = (r: Resource): boolean => {
      const { partition, namespace } = r.id.tenancy;
      if (q.partition !== WILDCARD && partition !== q.partition) return false;
      if (q.namespace !== WILDCARD && namespace !== q.namespace) return false;
      if (!r.id.name.startsWith(namePrefix)) return false;
      if (q.groupVersion !== undefined && r.id.type.groupVersion !== q.groupVersion) return false;
      if (q.ownerUid !== undefined && r.owner?.uid !== q.ownerUid) return false;
      return true;
    };
    if (q.ownerUid !== undefined) {
      // One owner's children are one range of the owner index, in child key order.
      const ownerPrefix = q.ownerUid + SEP;
      scanPrefixFrom(this.indexes.byOwner, ownerPrefix + prefix, after === undefined ? undefined : ownerPrefix + after, (_k, childKey) => {
        const r = this.stored(childKey);
        return !matches(r) || visit(childKey, r);
      });
    } else {
      scanPrefixFrom(this.indexes.byKey, prefix, after, (k, r) => !matches(r) || visit(k, r));
    }
  }

  private scanOwner(ownerUid: string, after: string | undefined, visit: (key: string, r: Resource) => boolean): void {
    if (hasNul(ownerUid)) return;
    const ownerPrefix = ownerUid + SEP;
    scanPrefixFrom(this.indexes.byOwner, ownerPrefix, after === undefined ? undefined : ownerPrefix + after, (_k, childKey) => visit(childKey, this.stored(childKey)));
  }

  cascadeOf(root: Resource): Resource[] {
    const out: Resource[] = [];
    const stack: Resource[] = [root];
    for (let r = stack.pop(); r !== undefined; r = stack.pop()) {
      if (r !== root) {
        out.push(r);
        if (r.finalizers.length > 0) continue;
      }
      const children: Resource[] = [];
      scanPrefix(this.indexes.byOwner, r.id.uid + SEP, (_k, childKey) => {
        children.push(this.stored(childKey));
      });
      for (let i = children.length - 1; i >= 0; i--) stack.push(children[i] as Resource);
    }
    return out;
  }

  all(): IterableIterator<Resource> {
    return this.indexes.byKey.values();
  }

  protected stored(key: string): Resource {
    const r = this.indexes.byKey.get(key);
    assert(r !== undefined, () => `an index points at ${JSON.stringify(key)}, which is not stored`);
    return r;
  }
}
