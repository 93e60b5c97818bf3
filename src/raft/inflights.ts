import { assert } from '../base/index.js';

/**
 * The unacknowledged append messages to one follower (etcd tracker/inflights.go): a FIFO of
 * (last index, bytes) bounded by count and bytes. Full means "stop pipelining to it".
 */
export class Inflights {
  private readonly indexes: number[] = [];
  private readonly sizes: number[] = [];
  private head = 0;
  private bytes = 0;

  constructor(
    private readonly maxCount: number,
    private readonly maxBytes: number,
  ) {}

  get count(): number {
    return this.indexes.length - this.head;
  }

  add(lastIndex: number, bytes: number): void {
    const prev = this.indexes[this.indexes.length - 1];
    assert(this.count === 0 || prev === undefined || lastIndex > prev, 'inflight indexes must increase');
    this.indexes.push(lastIndex);
    this.sizes.push(bytes);
    this.bytes += bytes;
  }

  /** Frees every message whose last index is <= index (acknowledged). */
  freeLE(index: number): void {
    while (this.head < this.indexes.length && (this.indexes[this.head] ?? Infinity) <= index) {
      this.bytes -= this.sizes[this.head] ?? 0;
      this.head++;
    }
    this.compactStorage();
  }

  freeFirstOne(): void {
    const first = this.indexes[this.head];
    if (first !== undefined) this.freeLE(first);
  }

  full(): boolean {
    return this.count >= this.maxCount || (this.maxBytes > 0 && this.bytes >= this.maxBytes);
  }

  reset(): void {
    this.indexes.length = 0;
    this.sizes.length = 0;
    this.head = 0;
    this.bytes = 0;
  }

  private compactStorage(): void {
    if (this.head > 64 && this.head * 2 > this.indexes.length) {
      this.indexes.splice(0, this.head);
      this.sizes.splice(0, this.head);
      this.head = 0;
    }
  }
}
