import type { Revision } from '../base/index.js';
import { concat, encodeSnapshot } from './codec.js';
import type { Indexes } from './indexes.js';
import { IndexReader } from './reader.js';

/**
 * A point-in-time view of the store, taken in O(1) by `ResourceStore.snapshot()`: it holds
 * frozen copy-on-write clones of the indexes and shares the (frozen) resources, so later
 * changes to the store never show here. Offers the store's reads and its serialization.
 */
export class StoreSnapshot extends IndexReader {
  constructor(
    private readonly ix: Indexes,
    private readonly rev: Revision,
  ) {
    super();
  }

  protected get indexes(): Indexes {
    return this.ix;
  }

  get revision(): Revision {
    return this.rev;
  }

  /** A snapshot never changes: it is its own point-in-time view. */
  snapshot(): StoreSnapshot {
    return this;
  }

  /**
   * The snapshot serialized (codec.ts): a header chunk (format, version, revision, count), then
   * the resources in key order, `resourcesPerChunk` (default 1000) per chunk. Produced lazily;
   * the same store state always gives the same bytes.
   */
  *chunks(resourcesPerChunk = 1000): Generator<Uint8Array> {
    yield* encodeSnapshot(this.all(), this.size, this.rev, resourcesPerChunk);
  }

  /** All chunks as one byte array, for `ResourceStore.fromSnapshotBytes`. */
  toBytes(resourcesPerChunk = 1000): Uint8Array {
    return concat([...this.chunks(resourcesPerChunk)]);
  }
}
