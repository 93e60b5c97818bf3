import { CairnError, ErrorCode, silentLogger, type Clock, type Logger } from '../base/index.js';
import type { LeaseEntry } from '../fsm/index.js';

/**
 * What the lease clock needs of its node: whether it leads (and in which term), the lease
 * table as applied here, and a way to propose an expiry on this node only.
 */
export interface LeaseClockHost {
  /** This node's role now: `term` is the term it leads in, undefined when it does not lead. */
  leaderTerm(): number | undefined;
  /** The replicated lease table as applied on this node, and a counter that moves whenever it changes (`Fsm.leaseChanges`); undefined while the node starts. */
  table(): { readonly changes: number; readonly leases: ReadonlyMap<string, LeaseEntry> } | undefined;
  /**
   * Proposes `LeaseRevoke {id, reason: 'expired'}` on this node's replica only (never
   * forwarded: a node that has lost leadership must not expire anything through the new
   * leader); resolves once applied, rejects if it was not (NOT_LEADER, timeout).
   */
  proposeExpiry(id: string): Promise<unknown>;
}

export interface LeaseClockOptions {
  readonly clock: Clock;
  readonly logger?: Logger;
  /** Most expiries proposed at once (in flight); the rest wait for a later tick. Default 256. */
  readonly maxExpiriesInFlight?: number;
}

/** A lease as the leader's clock sees it. */
export interface LeaseTimeToLive {
  readonly id: string;
  /** The TTL it was granted, in seconds. */
  readonly ttlSeconds: number;
  /** Whole seconds until the leader expires it (rounded up; 0 when expiry is pending). */
  readonly remainingSeconds: number;
  /** Milliseconds until the leader expires it. */
  readonly remainingMs: number;
}

interface Deadline {
  /** Monotonic ms of this node's clock. */
  atMs: number;
  /** The grant it belongs to (`LeaseEntry.grantRevision`): a lease granted again under the same id gets a deadline of its own. */
  readonly grantRevision: number;
}

/**
 * The leader's lease clock (docs/api.md "Leases"; ARCHITECTURE.md: time reaches the state
 * machine only inside entries). It keeps one deadline per lease, on this node's monotonic
 * clock, only while this node leads:
 *
 * - on becoming leader (a new term), every lease's deadline is now + its full TTL, so a
 *   failover never expires a lease early (etcd's lessor `Promote`);
 * - a lease it has not seen (a grant applied here) gets now + TTL when it first sees it, which
 *   is never before the grant was applied; a keep-alive sets now + TTL;
 * - `tick()` (the node calls it periodically) proposes `LeaseRevoke(expired)` for leases past
 *   their deadline, at most `maxExpiriesInFlight` at a time, each retried at a later tick if its
 *   proposal fails; the entry, once applied, removes the lease from the table and the clock;
 * - on losing leadership it forgets every deadline and proposes nothing (etcd's `Demote`).
 *
 * It never reads the wall clock and never changes the replicated state itself: expiry is an
 * ordinary log entry, applied by every replica alike.
 */
export class LeaseClock {
  private readonly deadlines = new Map<string, Deadline>();
  private readonly inFlight = new Set<string>();
  /** The term this node leads in, as last seen; undefined when it does not lead. */
  private term: number | undefined;
  private seenChanges = -1;
  private readonly maxInFlight: number;
  private readonly logger: Logger;

  constructor(
    private readonly host: LeaseClockHost,
    private readonly opts: LeaseClockOptions,
  ) {
    this.maxInFlight = opts.maxExpiriesInFlight ?? 256;
    this.logger = opts.logger ?? silentLogger;
  }

  /** How many leases the clock holds deadlines for (0 on a follower). */
  get size(): number {
    return this.deadlines.size;
  }

  /**
   * Brings the deadlines up to date with the role and the lease table; returns whether this
   * node leads. Cheap when nothing changed (the table is re-read only when its counter moved).
   */
  private sync(): boolean {
    const term = this.host.leaderTerm();
    if (term === undefined) {
      if (this.term !== undefined) {
        this.logger.info({ term: this.term, leases: this.deadlines.size }, 'lease clock stopped: this node no longer leads');
        this.deadlines.clear();
        this.inFlight.clear();
        this.term = undefined;
      }
      return false;
    }
    const table = this.host.table();
    if (table === undefined) return false;
    const now = this.opts.clock.monotonicMs();
    if (term !== this.term) {
      // A new term: every lease gets its full TTL from now, whatever an earlier leader had.
      this.deadlines.clear();
      this.inFlight.clear();
      this.term = term;
      this.seenChanges = -1;
      this.logger.info({ term, leases: table.leases.size }, 'lease clock started: every lease gets its full TTL');
    }
    if (table.changes !== this.seenChanges) {
      for (const [id, lease] of table.leases) {
        const d = this.deadlines.get(id);
        if (d === undefined || d.grantRevision !== lease.grantRevision) this.deadlines.set(id, { atMs: now + lease.ttlSeconds * 1000, grantRevision: lease.grantRevision });
      }
      for (const id of this.deadlines.keys()) if (!table.leases.has(id)) this.deadlines.delete(id);
      this.seenChanges = table.changes;
    }
    return true;
  }

  /** Proposes expiry for leases past their deadline (see the class comment). */
  tick(): void {
    if (!this.sync()) return;
    const now = this.opts.clock.monotonicMs();
    const term = this.term;
    for (const [id, d] of this.deadlines) {
      if (this.inFlight.size >= this.maxInFlight) break;
      if (d.atMs > now || this.inFlight.has(id)) continue;
      this.inFlight.add(id);
      this.host.proposeExpiry(id).then(
        () => {
          if (this.term === term) this.inFlight.delete(id);
        },
        (e: unknown) => {
          if (this.term === term) this.inFlight.delete(id);
          this.logger.warn({ lease: id, err: e instanceof Error ? e.message : String(e) }, 'proposing a lease expiry failed; retried at a later tick while this node leads');
        },
      );
    }
  }

  private leaderOnly(): void {
    if (!this.sync()) throw new CairnError(ErrorCode.NOT_LEADER, 'lease keep-alives and time-to-live are answered by the leader');
  }

  /**
   * Renews lease `id`: its deadline becomes now + its TTL. NOT_FOUND when there is no such
   * lease or it is past its deadline (its expiry is being proposed: a lost lease is not
   * brought back). NOT_LEADER on a node that does not lead.
   */
  keepAlive(id: string): LeaseTimeToLive {
    this.leaderOnly();
    const d = this.deadlines.get(id);
    const now = this.opts.clock.monotonicMs();
    const lease = this.host.table()?.leases.get(id);
    if (d === undefined || lease === undefined) throw notFound(id);
    if (d.atMs <= now) throw new CairnError(ErrorCode.NOT_FOUND, `lease ${id} has expired (its expiry is being committed)`, { lease: id });
    d.atMs = now + lease.ttlSeconds * 1000;
    return { id, ttlSeconds: lease.ttlSeconds, remainingSeconds: lease.ttlSeconds, remainingMs: lease.ttlSeconds * 1000 };
  }

  /** The lease's granted TTL and the time left on this leader's clock. NOT_FOUND, NOT_LEADER as `keepAlive`. */
  timeToLive(id: string): LeaseTimeToLive {
    this.leaderOnly();
    const d = this.deadlines.get(id);
    const lease = this.host.table()?.leases.get(id);
    if (d === undefined || lease === undefined) throw notFound(id);
    const remainingMs = Math.max(0, d.atMs - this.opts.clock.monotonicMs());
    return { id, ttlSeconds: lease.ttlSeconds, remainingSeconds: Math.ceil(remainingMs / 1000), remainingMs };
  }
}

function notFound(id: string): CairnError {
  return new CairnError(ErrorCode.NOT_FOUND, `lease ${id} does not exist (never granted, revoked or expired)`, { lease: id });
}

/**
 * The shortest TTL a lease is granted (docs/api.md "Leases"): a grant asking for less gets
 * this. A failover takes about an election timeout before a new leader can answer a keep-alive
 * (and the new leader then gives every lease its full TTL), so a TTL of a few election
 * timeouts lets a client keep its lease across one: 3 election timeouts, at least 2 seconds
 * (etcd's minLeaseTTL is 1.5 election timeouts, rounded up to a second).
 */
export function minLeaseTtlSeconds(electionTimeoutMs: number): number {
  return Math.max(2, Math.ceil((3 * electionTimeoutMs) / 1000));
}
