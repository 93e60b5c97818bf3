import t from 'tap';
import { CairnError, ErrorCode } from '../base/index.js';
import { ManualTime } from '../base/testing/index.js';
import type { LeaseEntry } from '../fsm/index.js';
import { LeaseClock, minLeaseTtlSeconds, type LeaseClockHost } from './lease-clock.js';

/**
 * The leader's lease clock (docs/api.md "Leases") with a manual clock: a lease expires exactly
 * after its TTL and never before; keep-alives extend it to arrival + TTL once a read barrier
 * confirms leadership; a new leader starts its clock only after applying an entry of its term,
 * then gives every lease its full TTL; a node that loses leadership proposes nothing. The host
 * is a small fake: a lease table, a role, a read barrier (passes at once unless a test says
 * what happens during it), and a record of proposed expiries (applied on demand).
 */
class FakeHost implements LeaseClockHost {
  term: number | undefined = 1;
  changes = 0;
  readonly leases = new Map<string, LeaseEntry>();
  readonly proposed: string[] = [];
  /** The grant revision each proposed expiry named. */
  readonly proposedGrants: number[] = [];
  private revision = 0;
  failNext = 0;
  barriers = 0;
  /** What happens while a barrier is in flight (entries applied, time passing); it then fails if `quorumLost`. */
  duringBarrier: (() => Promise<void> | void) | undefined;
  /** No quorum confirms this node's leadership any more (it does not know it lost). */
  quorumLost = false;

  async barrier(): Promise<unknown> {
    this.barriers++;
    await this.duringBarrier?.();
    if (this.quorumLost || this.term === undefined) throw new CairnError(ErrorCode.NOT_LEADER, 'read index failed (leadership-lost)');
    return undefined;
  }

  leaderTerm(): number | undefined {
    return this.term;
  }
  table() {
    return { changes: this.changes, leases: this.leases };
  }
  grant(id: string, ttlSeconds: number): void {
    this.leases.set(id, { ttlSeconds, grantRevision: ++this.revision, attached: new Set() });
    this.changes++;
  }
  revoke(id: string): void {
    this.leases.delete(id);
    this.changes++;
  }
  proposeExpiry(id: string, grantRevision: number): Promise<unknown> {
    this.proposed.push(id);
    this.proposedGrants.push(grantRevision);
    if (this.failNext > 0) {
      this.failNext--;
      return Promise.reject(new CairnError(ErrorCode.TIMEOUT, 'not confirmed'));
    }
    // Applied: the entry removes the lease from the table.
    this.revoke(id);
    return Promise.resolve({ ok: true });
  }
}

async function codeOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return 'none';
  } catch (e) {
    return e instanceof CairnError ? e.code : String(e);
  }
}

/** Ticks until the clock has started in the host's term (its start barrier passed). */
async function start(time: ManualTime, clock: LeaseClock): Promise<void> {
  clock.tick();
  await time.flush();
  clock.tick();
}

/** A leader in term 1 whose clock has started (with no lease yet). */
async function setup(): Promise<{ time: ManualTime; host: FakeHost; clock: LeaseClock }> {
  const time = new ManualTime();
  const host = new FakeHost();
  const clock = new LeaseClock(host, { clock: time });
  await start(time, clock);
  return { time, host, clock };
}

t.test('a lease expires exactly after its TTL on the leader clock, never before', async (t) => {
  const { time, host, clock } = await setup();
  host.grant('a', 5);
  clock.tick(); // the grant is seen: deadline now + 5 s
  await time.advance(4999);
  clock.tick();
  t.same(host.proposed, [], 'not a millisecond early');
  t.equal((await clock.timeToLive('a')).remainingMs, 1);
  t.equal((await clock.timeToLive('a')).remainingSeconds, 1);
  await time.advance(1);
  clock.tick();
  t.same(host.proposed, ['a'], 'proposed at the deadline');
  await time.flush();
  clock.tick();
  t.same(host.proposed, ['a'], 'once');
  t.equal(clock.size, 0);
  await t.rejects(clock.timeToLive('a'), /lease a does not exist/);
});

t.test('a lease first seen late gets its TTL from when it was seen, not from before', async (t) => {
  const { time, host, clock } = await setup();
  clock.tick();
  await time.advance(10_000);
  host.grant('late', 2);
  await time.advance(1500); // applied but not yet seen by a tick
  clock.tick();
  await time.advance(1999);
  clock.tick();
  t.same(host.proposed, []);
  await time.advance(1);
  clock.tick();
  t.same(host.proposed, ['late']);
});

t.test('keep-alive extends the deadline to now + TTL; an expired lease is not brought back', async (t) => {
  const { time, host, clock } = await setup();
  host.grant('a', 3);
  clock.tick();
  for (let i = 0; i < 5; i++) {
    await time.advance(2000);
    t.same(await clock.keepAlive('a'), { id: 'a', ttlSeconds: 3, remainingSeconds: 3, remainingMs: 3000 });
    clock.tick();
  }
  t.same(host.proposed, [], 'kept alive for 10 s with a 3 s TTL');
  await time.advance(3000);
  host.failNext = 1; // the expiry proposal fails once
  clock.tick();
  t.same(host.proposed, ['a']);
  t.equal(await codeOf(clock.keepAlive('a')), ErrorCode.NOT_FOUND, 'past its deadline: lost');
  await t.rejects(clock.keepAlive('a'), /has expired/);
  await time.flush();
  clock.tick();
  t.same(host.proposed, ['a', 'a'], 'retried after the failed proposal');
  await t.rejects(clock.keepAlive('nope'), /lease nope does not exist/);
});

t.test('a new leader gives every lease its full TTL again', async (t) => {
  const { time, host, clock } = await setup();
  host.grant('a', 10);
  clock.tick();
  await time.advance(9000); // 1 s left under leader term 1
  host.term = undefined; // this node loses leadership
  clock.tick();
  t.equal(clock.size, 0, 'deadlines forgotten');
  t.equal(await codeOf(clock.keepAlive('a')), ErrorCode.NOT_LEADER);
  await time.advance(60_000); // long after the old deadline: a follower expires nothing
  clock.tick();
  t.same(host.proposed, []);
  host.term = 3; // leads again, in a later term
  await start(time, clock);
  t.equal((await clock.timeToLive('a')).remainingMs, 10_000, 'full TTL from becoming leader');
  await time.advance(9999);
  clock.tick();
  t.same(host.proposed, []);
  await time.advance(1);
  clock.tick();
  t.same(host.proposed, ['a']);
});

t.test('a term change without a gap (leader again in a new term) also resets every deadline', async (t) => {
  const { time, host, clock } = await setup();
  host.grant('a', 4);
  clock.tick();
  await time.advance(3500);
  host.term = 2;
  await start(time, clock);
  await time.advance(3999);
  clock.tick();
  t.same(host.proposed, []);
  t.equal((await clock.timeToLive('a')).remainingMs, 1);
});

t.test('losing leadership while an expiry is in flight: nothing more is proposed', async (t) => {
  const { time, host, clock } = await setup();
  host.grant('a', 2);
  host.grant('b', 2);
  clock.tick();
  await time.advance(2000);
  host.term = undefined;
  clock.tick();
  t.same(host.proposed, []);
});

t.test('a lease revoked and granted again under the same id gets a deadline of its own', async (t) => {
  const { time, host, clock } = await setup();
  host.grant('a', 5);
  clock.tick();
  await time.advance(4900);
  host.revoke('a');
  host.grant('a', 5);
  clock.tick();
  await time.advance(200); // past the first grant's deadline
  clock.tick();
  t.same(host.proposed, []);
  t.equal((await clock.timeToLive('a')).remainingMs, 4800);
  await time.advance(4800);
  clock.tick();
  t.same(host.proposedGrants, [2], 'the expiry names the second grant (revision 2), not the first');
});

t.test('expiries are proposed at most maxExpiriesInFlight at a time', async (t) => {
  const time = new ManualTime();
  const host = new FakeHost();
  const pending: Array<() => void> = [];
  host.proposeExpiry = (id: string) => {
    host.proposed.push(id);
    return new Promise((resolve) => pending.push(() => { host.revoke(id); resolve(undefined); }));
  };
  const clock = new LeaseClock(host, { clock: time, maxExpiriesInFlight: 3 });
  await start(time, clock);
  for (let i = 0; i < 7; i++) host.grant(`l${i}`, 2);
  clock.tick();
  await time.advance(2000);
  clock.tick();
  clock.tick();
  t.equal(host.proposed.length, 3, 'three in flight, none twice');
  for (const p of pending.splice(0)) p();
  await time.flush();
  clock.tick();
  t.equal(host.proposed.length, 6);
  for (const p of pending.splice(0)) p();
  await time.flush();
  clock.tick();
  t.same(host.proposed, ['l0', 'l1', 'l2', 'l3', 'l4', 'l5', 'l6']);
});

t.test('a leader that lost its quorum without knowing it renews nothing (finding: paused old leader)', async (t) => {
  const { time, host, clock } = await setup();
  host.grant('a', 2);
  clock.tick();
  await time.advance(1000);
  host.quorumLost = true; // a newer term exists elsewhere; this node still thinks it leads
  t.equal(await codeOf(clock.keepAlive('a')), ErrorCode.NOT_LEADER, 'the barrier fails: no renewal is acknowledged');
  t.equal(await codeOf(clock.timeToLive('a')), ErrorCode.NOT_LEADER);
  host.quorumLost = false;
  await time.advance(999);
  clock.tick();
  t.same(host.proposed, [], 'the deadline was not moved by the refused keep-alive: 1 ms left');
  await time.advance(1);
  clock.tick();
  t.same(host.proposed, ['a']);
});

t.test('a keep-alive renews from when it arrived, not from when its barrier passed', async (t) => {
  const { time, host, clock } = await setup();
  host.grant('a', 3);
  clock.tick();
  await time.advance(2000);
  host.duringBarrier = () => time.advance(700); // a slow heartbeat round
  t.same(await clock.keepAlive('a'), { id: 'a', ttlSeconds: 3, remainingSeconds: 3, remainingMs: 2300 }, 'deadline = arrival + TTL');
  host.duringBarrier = undefined;
  await time.advance(2299);
  clock.tick();
  t.same(host.proposed, []);
  await time.advance(1);
  clock.tick();
  t.same(host.proposed, ['a'], 'expired 3 s after the keep-alive arrived');
});

t.test('a lease revoked, or expired and granted again, by an entry applied during the barrier is NOT_FOUND', async (t) => {
  const { time, host, clock } = await setup();
  host.grant('a', 5);
  host.grant('b', 5);
  clock.tick();
  host.duringBarrier = () => host.revoke('a');
  t.equal(await codeOf(clock.keepAlive('a')), ErrorCode.NOT_FOUND);
  host.duringBarrier = () => {
    host.revoke('b');
    host.grant('b', 5);
  };
  t.equal(await codeOf(clock.keepAlive('b')), ErrorCode.NOT_FOUND, 'the grant the keep-alive was for has ended');
  host.duringBarrier = undefined;
  t.equal((await clock.keepAlive('b')).ttlSeconds, 5, 'the new grant is renewed by a keep-alive that arrives after it');
  await time.flush();
});

t.test('a new leader starts its clock only once it has applied an entry of its term', async (t) => {
  // Scenario 2: a revoke committed under the old leader, not yet applied here.
  const time = new ManualTime();
  const host = new FakeHost();
  host.term = 2;
  host.grant('svc', 10);
  const waiting: Array<() => void> = [];
  const release = (): void => {
    for (const w of waiting.splice(0)) w();
  };
  host.duringBarrier = () => new Promise<void>((r) => waiting.push(r));
  const clock = new LeaseClock(host, { clock: time });
  clock.tick();
  const ka = clock.keepAlive('svc');
  await time.advance(60_000);
  clock.tick();
  t.equal(clock.size, 0, 'no deadline before the barrier passes');
  t.same(host.proposed, [], 'nothing expired either');
  host.revoke('svc'); // the barrier applies the old term's revoke, then the no-op of term 2
  release();
  t.equal(await codeOf(ka), ErrorCode.NOT_FOUND, 'the keep-alive is answered after the revoke applied: gone');
  t.equal(clock.size, 0);

  // Scenario 3: the old leader's expiry entry, replicated but uncommitted, commits with the new leader's no-op.
  host.term = 3;
  host.grant('x', 10);
  clock.tick();
  const ka2 = clock.keepAlive('x');
  await time.flush();
  t.equal(await Promise.race([ka2.then(() => 'answered', () => 'answered'), time.flush().then(() => 'waiting')]), 'waiting', 'no answer before the barrier');
  host.revoke('x'); // the old expiry applies first
  release();
  t.equal(await codeOf(ka2), ErrorCode.NOT_FOUND);
  host.duringBarrier = undefined;
  host.grant('y', 10);
  clock.tick();
  t.equal((await clock.timeToLive('y')).remainingMs, 10_000, 'once started, every lease gets its full TTL');
});

t.test('the minimum TTL is three election timeouts, at least 2 s', async (t) => {
  t.equal(minLeaseTtlSeconds(400), 2);
  t.equal(minLeaseTtlSeconds(1000), 3);
  t.equal(minLeaseTtlSeconds(2500), 8);
});
