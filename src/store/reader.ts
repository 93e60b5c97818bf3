import { CairnError, ErrorCode, assert, err, ok, type Result, type Revision } from '../base/index.js';
import { scanPrefix } from './btree.js';
import type { Indexes } from './indexes.js';
import { SEP, formatName, formatType, hasNul, resourceKey } from './keys.js';
import {
  WILDCARD,
  type ListQuery,
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
    const namePrefix = q.namePrefix ?? '';
    if (hasNul(q.group, q.kind, q.partition, q.namespace, namePrefix, q.ownerUid ?? '')) return [];
    // The narrowest key prefix the query fixes: (group, kind), then partition, then namespace
    // and name prefix. Whatever a wildcard leaves open is filtered below.
    let prefix = q.group + SEP + q.kind + SEP;
    if (q.partition !== WILDCARD) {
      prefix += q.partition + SEP;
      if (q.namespace !== WILDCARD) prefix += q.namespace + SEP + namePrefix;
    }
    const out: Resource[] = [];
    const consider = (r: Resource): void => {
      const { partition, namespace } = r.id.tenancy;
      if (q.partition !== WILDCARD && partition !== q.partition) return;
      if (q.namespace !== WILDCARD && namespace !== q.namespace) return;
      if (!r.id.name.startsWith(namePrefix)) return;
      if (q.groupVersion !== undefined && r.id.type.groupVersion !== q.groupVersion) return;
      if (q.ownerUid !== undefined && r.owner?.uid !== q.ownerUid) return;
      out.push(r);
    };
    if (q.ownerUid !== undefined) {
      // One owner's children are one range of the owner index, in child key order.
      scanPrefix(this.indexes.byOwner, q.ownerUid + SEP + prefix, (_k, childKey) => consider(this.stored(childKey)));
    } else {
      scanPrefix(this.indexes.byKey, prefix, (_k, r) => consider(r));
    }
    return out;
  }

  listByOwner(ownerUid: string): Resource[] {
    if (hasNul(ownerUid)) return [];
    const out: Resource[] = [];
    scanPrefix(this.indexes.byOwner, ownerUid + SEP, (_k, childKey) => out.push(this.stored(childKey)));
    return out;
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
