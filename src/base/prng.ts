import { assert } from './assert.js';
import type { Random } from './ports.js';

/**
 * A small, fast, seeded PRNG (sfc32, from PractRand) behind the `Random` port. The same seed
 * gives the same sequence on every platform, which the simulator depends on to replay runs.
 * Seeds are any safe integer; they are spread over the 128-bit state with splitmix32.
 */
export class SeededRandom implements Random {
  private a: number;
  private b: number;
  private c: number;
  private d: number;

  constructor(readonly seed: number) {
    assert(Number.isSafeInteger(seed), `seed must be a safe integer, got ${String(seed)}`);
    let s = (seed >>> 0) ^ Math.floor(seed / 0x100000000);
    const mix = (): number => {
      s = (s + 0x9e3779b9) | 0;
      let z = s;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
      return (z ^ (z >>> 16)) >>> 0;
    };
    this.a = mix();
    this.b = mix();
    this.c = mix();
    this.d = mix();
    for (let i = 0; i < 12; i++) this.nextUint32();
  }

  nextUint32(): number {
    const t = (((this.a + this.b) | 0) + this.d) | 0;
    this.d = (this.d + 1) | 0;
    this.a = this.b ^ (this.b >>> 9);
    this.b = (this.c + (this.c << 3)) | 0;
    this.c = (this.c << 21) | (this.c >>> 11);
    this.c = (this.c + t) | 0;
    return t >>> 0;
  }

  next(): number {
    return this.nextUint32() / 0x100000000;
  }

  int(n: number): number {
    assert(Number.isSafeInteger(n) && n > 0, `int(n) needs a positive safe integer, got ${String(n)}`);
    return Math.floor(this.next() * n);
  }

  /** True with probability p. */
  chance(p: number): boolean {
    return p > 0 && this.next() < p;
  }

  /** An integer in [lo, hi]. */
  range(lo: number, hi: number): number {
    return lo + this.int(hi - lo + 1);
  }

  pick<T>(items: readonly T[]): T {
    assert(items.length > 0, 'pick from an empty list');
    return items[this.int(items.length)] as T;
  }

  /** A derived, independent generator (for giving each component its own stream). */
  fork(): SeededRandom {
    return new SeededRandom(this.nextUint32() * 0x200000 + (this.nextUint32() >>> 11));
  }
}
