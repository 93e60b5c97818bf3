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
   * Proposes `LeaseRevoke {id, reason: 'expired', grantRevision}` on this node's replica only
   * (never forwarded: a node that has lost leadership must not expire anything through the new
   * leader); resolves once applied, rejects if it was not (NOT_LEADER, timeout).
   */
  proposeExpiry(id: string, grantRevision: number): Promise<unknown>;
  /**
   * The read barrier (ReadIndex, thesis §6.4: `Coordinator.read('linearizable')`): resolves
   * once a quorum has confirmed, after the call, that this node still leads, and this node has
   * applied every entry committed before the call; on a new leader that includes its first
   * entry of the term. Rejects when it cannot (NOT_LEADER, timeout).
   */
  barrier(): Promise<unknown>;
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

/** How the answer to a keep-alive or time-to-live is found once its barrier has passed. */
type Answer = (id: string, d: Deadline, lease: LeaseEntry, arrivedMs: number, now: number) => LeaseTimeToLive;

/**
 * The leader's lease clock (docs/api.md "Leases"; ARCHITECTURE.md: time reaches the state
 * machine only inside entries). It keeps one deadline per lease, on this node's monotonic
 * clock, only while this node leads:
 *
 * - the clock of a term starts once this node has applied an entry of that term (a read
 *   barrier passed in it): everything the previous leaders committed, an expiry or a revoke
 *   among it, is applied first. Then every lease's deadline is now + its full TTL, so a
 *   failover never expires a lease early (etcd's lessor `Promote`);
 * - a lease it has not seen (a grant applied here) gets now + TTL when it first sees it, which
 *   is never before the grant was applied;
 * - a keep-alive notes when it arrived, then passes a read barrier (this node still leads, and
 *   has applied what was committed before), then sets the deadline to arrival + TTL: never
 *   later, so a leader that was paused and lost its term without knowing it renews nothing
 *   (etcd-io/etcd#15247). A lease revoked or expired by an entry applied meanwhile is NOT_FOUND;
 * - `tick()` (the node calls it periodically) proposes `LeaseRevoke(expired)` for leases past
 *   their deadline, naming the grant, at most `maxExpiriesInFlight` at a time, each retried at
 *   a later tick if its proposal fails; the entry, once applied, removes the lease from the
 *   table and the clock (an expiry for an earlier grant of the id is a no-op);
 * - on losing leadership it forgets every deadline and proposes nothing (etcd's `Demote`).
 *
 * It never reads the wall clock and never changes the replicated state itself: expiry is an
 * ordinary log entry, applied by every replica alike.
 */
export class LeaseClock {
  private readonly deadlines = new Map<string, Deadline>();
  private readonly inFlight = new Set<string>();
  /** The term whose deadlines this clock holds; undefined when it holds none. */
  private term: number | undefined;
  /** The latest term in which a read barrier passed while this node led it: its clock may start. */
  private appliedInTerm: number | undefined;
  /** The term a start barrier is in flight for (one at a time). */
  private starting: number | undefined;
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
   * node leads with its clock started. Cheap when nothing changed (the table is re-read only
   * when its counter moved).
   */
  private sync(): boolean {
    const term = this.host.leaderTerm();
    if (term === undefined || term !== this.term) this.stop(term === undefined ? 'this node no longer leads' : 'a new term');
    if (term === undefined) return false;
    const table = this.host.table();
    if (table === undefined) return false;
    if (this.appliedInTerm !== term) {
      this.maybeStart(term);
      return false;
    }
    const now = this.opts.clock.monotonicMs();
    if (term !== this.term) {
      // A new term: every lease gets its full TTL from now, whatever an earlier leader had.
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

  private stop(why: string): void {
    if (this.term === undefined) return;
    this.logger.info({ term: this.term, leases: this.deadlines.size }, `lease clock stopped: ${why}`);
    this.deadlines.clear();
    this.inFlight.clear();
    this.term = undefined;
  }

  /**
   * Starts a read barrier for `term` unless one is in flight: once it passes with this node
   * still leading `term`, the node has applied an entry of its own term (ReadIndex waits for
   * the leader's first commit of the term, §6.4), so the clock may start (see `sync`).
   */
  private maybeStart(term: number): void {
    if (this.starting === term) return;
    this.starting = term;
    this.host.barrier().then(
      () => {
        if (this.starting === term) this.starting = undefined;
        this.barrierPassed(term);
      },
      (e: unknown) => {
        if (this.starting === term) this.starting = undefined;
        this.logger.warn({ term, err: e instanceof Error ? e.message : String(e) }, 'the lease clock could not start (read barrier failed); tried again at a later tick while this node leads');
      },
    );
  }

  /** A read barrier begun while leading `term` has passed: an entry of `term` is applied here if the node still leads it. */
  private barrierPassed(term: number): void {
    if (this.host.leaderTerm() === term) this.appliedInTerm = term;
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
      this.host.proposeExpiry(id, d.grantRevision).then(
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

  /**
   * Renews lease `id` (see the class comment): its deadline becomes the request's arrival +
   * its TTL, after a read barrier. NOT_FOUND when there is no such lease, it is past its
   * deadline (its expiry is being proposed: a lost lease is not brought back) or an entry
   * applied during the barrier ended it. NOT_LEADER on a node that does not lead.
   */
  keepAlive(id: string): Promise<LeaseTimeToLive> {
    return this.afterBarrier(id, (_id, d, lease, arrivedMs, now) => {
      if (d.atMs <= now) throw new CairnError(ErrorCode.NOT_FOUND, `lease ${id} has expired (its expiry is being committed)`, { lease: id });
      // Never later than arrival + TTL; a later deadline already set (a newer keep-alive, a new term's full TTL) stays.
      d.atMs = Math.max(d.atMs, arrivedMs + lease.ttlSeconds * 1000);
      return answer(id, lease, d.atMs - now);
    });
  }

  /** The lease's granted TTL and the time left on this leader's clock, after a read barrier. NOT_FOUND, NOT_LEADER as `keepAlive`. */
  timeToLive(id: string): Promise<LeaseTimeToLive> {
    return this.afterBarrier(id, (_id, d, lease, _arrivedMs, now) => answer(id, lease, Math.max(0, d.atMs - now)));
  }

  private async afterBarrier(id: string, f: Answer): Promise<LeaseTimeToLive> {
    const arrivedMs = this.opts.clock.monotonicMs();
    const term = this.host.leaderTerm();
    if (term === undefined) throw notLeader();
    // The grant this request saw on arrival, if the clock was running: one revoked meanwhile (and perhaps granted again) is not renewed.
    const seen = this.sync() && this.term === term ? this.deadlines.get(id)?.grantRevision : undefined;
    await this.host.barrier();
    this.barrierPassed(term);
    if (!this.sync() || this.term !== term) throw notLeader();
    const d = this.deadlines.get(id);
    const lease = this.host.table()?.leases.get(id);
    if (d === undefined || lease === undefined || (seen !== undefined && seen !== d.grantRevision)) throw notFound(id);
    return f(id, d, lease, arrivedMs, this.opts.clock.monotonicMs());
  }
}

function answer(id: string, lease: LeaseEntry, remainingMs: number): LeaseTimeToLive {
  return { id, ttlSeconds: lease.ttlSeconds, remainingSeconds: Math.ceil(remainingMs / 1000), remainingMs };
}

function notLeader(): CairnError {
  return new CairnError(ErrorCode.NOT_LEADER, 'lease keep-alives and time-to-live are answered by the leader');
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
