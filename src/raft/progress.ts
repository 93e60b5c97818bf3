import type { LogIndex } from '../base/index.js';
import { Inflights } from './inflights.js';
import type { HeldSnapshot } from './types.js';

/**
 * The leader's view of one follower (etcd tracker/progress.go; thesis §3.5 nextIndex and
 * matchIndex). States:
 *   probe     - next is a guess; send one append per heartbeat until it matches;
 *   replicate - next is known; pipeline appends up to the inflight limits;
 *   snapshot  - the follower needs a snapshot; chunks are sent one at a time.
 */
export type ProgressState = 'probe' | 'replicate' | 'snapshot';

export class Progress {
  match = 0 as LogIndex;
  next: LogIndex;
  state: ProgressState = 'probe';
  /** Probe: an append was sent since the last heartbeat response. */
  probeSent = false;
  /** Heard from since the last check-quorum round (thesis §6.2). */
  recentActive = false;
  readonly inflights: Inflights;
  /** Snapshot state: the snapshot being sent and how many of its bytes were acknowledged. */
  snapshot: HeldSnapshot | undefined = undefined;
  snapOffset = 0;
  /** The snapshot transfer moved forward since the last heartbeat response (no retransmit needed). */
  snapProgressed = false;
  /** Highest commit index carried by an append sent to this follower (skips redundant commit-only appends). */
  sentCommit = 0;

  constructor(next: LogIndex, maxInflightMsgs: number, maxInflightBytes: number) {
    this.next = next;
    this.inflights = new Inflights(maxInflightMsgs, maxInflightBytes);
  }

  becomeProbe(): void {
    if (this.state === 'snapshot' && this.snapshot) {
      this.next = Math.max(this.match + 1, this.snapshot.meta.index + 1) as LogIndex;
    } else {
      this.next = (this.match + 1) as LogIndex;
    }
    this.state = 'probe';
    this.probeSent = false;
    this.snapshot = undefined;
    this.snapOffset = 0;
    this.inflights.reset();
  }

  becomeReplicate(): void {
    this.state = 'replicate';
    this.next = (this.match + 1) as LogIndex;
    this.probeSent = false;
    this.snapshot = undefined;
    this.snapOffset = 0;
    this.inflights.reset();
  }

  becomeSnapshot(snapshot: HeldSnapshot): void {
    this.state = 'snapshot';
    this.snapshot = snapshot;
    this.snapOffset = 0;
    this.snapProgressed = true;
    this.probeSent = false;
    this.inflights.reset();
  }

  /** An append acknowledged up to n. Returns whether match moved. */
  maybeUpdate(n: LogIndex): boolean {
    let updated = false;
    if (this.match < n) {
      this.match = n;
      updated = true;
      this.probeSent = false;
    }
    if (this.next < n + 1) this.next = (n + 1) as LogIndex;
    return updated;
  }

  /**
   * An append at `rejected` was refused; `matchHint` is the leader's best guess of the last
   * index that may match (fast backtracking). Returns false for a stale rejection.
   */
  maybeDecrTo(rejected: LogIndex, matchHint: LogIndex): boolean {
    if (this.state === 'replicate') {
      if (rejected <= this.match) return false;
      this.next = (this.match + 1) as LogIndex;
      return true;
    }
    if (this.next - 1 !== rejected) return false;
    this.next = Math.max(Math.min(rejected, matchHint + 1), this.match + 1, 1) as LogIndex;
    this.probeSent = false;
    return true;
  }

  /** Whether sending another append must wait. */
  isPaused(): boolean {
    switch (this.state) {
      case 'probe':
        return this.probeSent;
      case 'replicate':
        return this.inflights.full();
      case 'snapshot':
        return true;
    }
  }

  /** Record an append carrying entries up to lastIndex (0 entries = a probe or commit update). */
  sentEntries(count: number, lastIndex: LogIndex, bytes: number): void {
    if (this.state === 'replicate') {
      if (count > 0) {
        this.next = (lastIndex + 1) as LogIndex;
        this.inflights.add(lastIndex, bytes);
      }
    } else if (this.state === 'probe') {
      this.probeSent = true;
    }
  }
}
