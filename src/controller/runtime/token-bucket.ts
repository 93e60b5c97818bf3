import { CairnError, ErrorCode, type Clock } from '../../base/index.js';

/**
 * A token bucket (client-go's BucketRateLimiter, golang.org/x/time/rate): `burst` tokens at
 * most, refilled at `qps` per second. `reserve()` takes a token now and says how long to wait
 * before using it; reservations queue up (the balance may go negative), so N callers at once
 * are spread 1/qps apart after the burst.
 */
export class TokenBucket {
  private tokens: number;
  private lastMs: number;

  constructor(
    private readonly qps: number,
    private readonly burst: number,
    private readonly clock: Clock,
  ) {
    if (!(qps > 0) || !Number.isFinite(qps)) throw new CairnError(ErrorCode.INVALID_ARGUMENT, `qps must be a positive number, got ${qps}`);
    if (!Number.isSafeInteger(burst) || burst < 1) throw new CairnError(ErrorCode.INVALID_ARGUMENT, `burst must be a positive integer, got ${burst}`);
    this.tokens = burst;
    this.lastMs = clock.monotonicMs();
  }

  /** Takes a token; returns the ms to wait before acting on it (0 when one was available). */
  reserve(): number {
    const now = this.clock.monotonicMs();
    this.tokens = Math.min(this.burst, this.tokens + ((now - this.lastMs) * this.qps) / 1000);
    this.lastMs = now;
    this.tokens -= 1;
    return this.tokens >= 0 ? 0 : Math.ceil((-this.tokens * 1000) / this.qps);
  }
}
