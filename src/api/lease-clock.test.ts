import t from 'tap';
import { CairnError, ErrorCode } from '../base/index.js';
import { ManualTime } from '../base/testing/index.js';
import type { LeaseEntry } from '../fsm/index.js';
import { LeaseClock, minLeaseTtlSeconds, type LeaseClockHost } from './lease-clock.js';

/**
 * The leader's lease clock (docs/api.md "Leases") with a manual clock: a lease expires exactly
 * after its TTL and never before; keep-alives extend it; a new leader gives every lease its
 * full TTL; a node that loses leadership proposes nothing. The host is a small fake: a lease
 * table, a role, and a record of proposed expiries (applied on demand).
 */
class FakeHost implements LeaseClockHost {
  term: number | undefined = 1;
  changes = 0;
  readonly leases = new Map<string, LeaseEntry>();
  readonly proposed: string[] = [];
  private revision = 0;
  failNext = 0;

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
  proposeExpiry(id: string): Promise<unknown> {
    this.proposed.push(id);
    if (this.failNext > 0) {
      this.failNext--;
      return Promise.reject(new CairnError(ErrorCode.TIMEOUT, 'not confirmed'));
    }
    // Applied: the entry removes the lease from the table.
    this.revoke(id);
    return Promise.resolve({ ok: true });
  }
}

function codeOf(f: () => unknown): string {
  try {
    f();
    return 'none';
  } catch (e) {
    return e instanceof CairnError ? e.code : String(e);
  }
}

function setup(): { time: ManualTime; host: FakeHost; clock: LeaseClock } {
  const time = new ManualTime();
  const host = new FakeHost();
  return { time, host, clock: new LeaseClock(host, { clock: time }) };
}

t.test('a lease expires exactly after its TTL on the leader clock, never before', async (t) => {
  const { time, host, clock } = setup();
  host.grant('a', 5);
  clock.tick(); // the grant is seen: deadline now + 5 s
  await time.advance(4999);
  clock.tick();
  t.same(host.proposed, [], 'not a millisecond early');
  t.equal(clock.timeToLive('a').remainingMs, 1);
  t.equal(clock.timeToLive('a').remainingSeconds, 1);
  await time.advance(1);
  clock.tick();
  t.same(host.proposed, ['a'], 'proposed at the deadline');
  await time.flush();
  clock.tick();
  t.same(host.proposed, ['a'], 'once');
  t.equal(clock.size, 0);
  t.throws(() => clock.timeToLive('a'), /lease a does not exist/);
});

t.test('a lease first seen late gets its TTL from when it was seen, not from before', async (t) => {
  const { time, host, clock } = setup();
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
  const { time, host, clock } = setup();
  host.grant('a', 3);
  clock.tick();
  for (let i = 0; i < 5; i++) {
    await time.advance(2000);
    t.same(clock.keepAlive('a'), { id: 'a', ttlSeconds: 3, remainingSeconds: 3, remainingMs: 3000 });
    clock.tick();
  }
  t.same(host.proposed, [], 'kept alive for 10 s with a 3 s TTL');
  await time.advance(3000);
  host.failNext = 1; // the expiry proposal fails once
  clock.tick();
  t.same(host.proposed, ['a']);
  t.equal(codeOf(() => clock.keepAlive('a')), ErrorCode.NOT_FOUND, 'past its deadline: lost');
  t.throws(() => clock.keepAlive('a'), /has expired/);
  await time.flush();
  clock.tick();
  t.same(host.proposed, ['a', 'a'], 'retried after the failed proposal');
  t.throws(() => clock.keepAlive('nope'), /lease nope does not exist/);
});

t.test('a new leader gives every lease its full TTL again', async (t) => {
  const { time, host, clock } = setup();
  host.grant('a', 10);
  clock.tick();
  await time.advance(9000); // 1 s left under leader term 1
  host.term = undefined; // this node loses leadership
  clock.tick();
  t.equal(clock.size, 0, 'deadlines forgotten');
  t.equal(codeOf(() => clock.keepAlive('a')), ErrorCode.NOT_LEADER);
  await time.advance(60_000); // long after the old deadline: a follower expires nothing
  clock.tick();
  t.same(host.proposed, []);
  host.term = 3; // leads again, in a later term
  clock.tick();
  t.equal(clock.timeToLive('a').remainingMs, 10_000, 'full TTL from becoming leader');
  await time.advance(9999);
  clock.tick();
  t.same(host.proposed, []);
  await time.advance(1);
  clock.tick();
  t.same(host.proposed, ['a']);
});

t.test('a term change without a gap (leader again in a new term) also resets every deadline', async (t) => {
  const { time, host, clock } = setup();
  host.grant('a', 4);
  clock.tick();
  await time.advance(3500);
  host.term = 2;
  clock.tick();
  await time.advance(3999);
  clock.tick();
  t.same(host.proposed, []);
  t.equal(clock.timeToLive('a').remainingMs, 1);
});

t.test('losing leadership while an expiry is in flight: nothing more is proposed', async (t) => {
  const { time, host, clock } = setup();
  host.grant('a', 2);
  host.grant('b', 2);
  clock.tick();
  await time.advance(2000);
  host.term = undefined;
  clock.tick();
  t.same(host.proposed, []);
});

t.test('a lease revoked and granted again under the same id gets a deadline of its own', async (t) => {
  const { time, host, clock } = setup();
  host.grant('a', 5);
  clock.tick();
  await time.advance(4900);
  host.revoke('a');
  host.grant('a', 5);
  clock.tick();
  await time.advance(200); // past the first grant's deadline
  clock.tick();
  t.same(host.proposed, []);
  t.equal(clock.timeToLive('a').remainingMs, 4800);
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

t.test('the minimum TTL is three election timeouts, at least 2 s', async (t) => {
  t.equal(minLeaseTtlSeconds(400), 2);
  t.equal(minLeaseTtlSeconds(1000), 3);
  t.equal(minLeaseTtlSeconds(2500), 8);
});
