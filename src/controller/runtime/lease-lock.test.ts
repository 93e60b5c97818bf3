import t from 'tap';
import { LEASE_TYPE, type LeaseData } from '../../api/index.js';
import { CairnClientError, type ReadResult, type Resource, type ResourceRef, type WriteBody } from '../../client/index.js';
import { ManualTime } from '../testing/index.js';
import { runWithLock, type LeaseClient, type LockHandle, type LockOptions } from './lease-lock.js';

/**
 * The lease lock against an in-memory store with the server's CAS rules and a manual clock:
 * one holder at a time; a holder that cannot renew stops its work at the renew deadline, before
 * anyone can take over (after the lease duration, counted on the taker's own clock); a stop
 * releases at once; a lease taken by someone else is noticed at the next renewal.
 */

class FakeStore {
  private rev = 0;
  readonly leases = new Map<string, Resource<LeaseData>>();
  writes = 0;

  read(name: string): ReadResult<LeaseData> {
    const r = this.leases.get(name);
    if (r === undefined) throw new CairnClientError('NOT_FOUND', `${LEASE_TYPE} ${name} not found`);
    return { resource: r, revision: String(this.rev), lastLeaderContactMs: 0 };
  }

  write(name: string, body: WriteBody<LeaseData>): Resource<LeaseData> {
    const cur = this.leases.get(name);
    if (body.version === '0' && cur !== undefined) throw new CairnClientError('CAS_FAILED', 'exists');
    if (body.version !== undefined && body.version !== '0' && cur?.version !== body.version) throw new CairnClientError('CAS_FAILED', `expected ${body.version}, stored ${cur?.version}`);
    this.rev++;
    this.writes++;
    const r: Resource<LeaseData> = {
      id: { type: LEASE_TYPE, tenancy: { partition: '', namespace: '' }, name, uid: cur?.id.uid ?? `U${this.rev}` },
      owner: null,
      version: String(this.rev),
      generation: `G${this.rev}`,
      metadata: {},
      finalizers: [],
      deletion_timestamp: null,
      data: structuredClone(body.data),
      status: {},
    };
    this.leases.set(name, r);
    return r;
  }

  /** A client of this store; `cut()` makes every call fail as if the process lost the cluster. */
  client(): LeaseClient & { cut(on: boolean): void } {
    let cut = false;
    const guard = (): void => {
      if (cut) throw new CairnClientError('UNAVAILABLE', 'no node reachable');
    };
    const c = {
      cut: (on: boolean) => {
        cut = on;
      },
      read: async (ref: ResourceRef) => {
        guard();
        return this.read(ref.name);
      },
      write: async (ref: ResourceRef, body: WriteBody<LeaseData>) => {
        guard();
        return this.write(ref.name, body);
      },
    };
    return c as unknown as LeaseClient & { cut(on: boolean): void };
  }
}

const TIMINGS = { leaseDurationMs: 3000, renewDeadlineMs: 2000, retryPeriodMs: 500 } as const;

interface Member {
  readonly name: string;
  readonly client: ReturnType<FakeStore['client']>;
  readonly handle: LockHandle;
  /** [start, abort] times (monotonic) of each run. */
  readonly runs: Array<{ startMs: number; abortMs: number | undefined }>;
}

function member(store: FakeStore, time: ManualTime, name: string, opts: Partial<LockOptions> = {}, run?: (signal: AbortSignal) => Promise<void> | void): Member {
  const client = store.client();
  const runs: Member['runs'] = [];
  const handle = runWithLock(
    client,
    'my-controllers',
    name,
    (signal) => {
      const entry = { startMs: time.monotonicMs(), abortMs: undefined as number | undefined };
      runs.push(entry);
      signal.addEventListener('abort', () => (entry.abortMs = time.monotonicMs()), { once: true });
      return run?.(signal);
    },
    { ...TIMINGS, clock: time, timers: time, ...opts },
  );
  return { name, client, handle, runs };
}

function holders(ms: Member[]): string[] {
  return ms.filter((m) => m.handle.isHolder()).map((m) => m.name);
}

t.test('one holder; it keeps the lock by renewing; the other never runs', async (t) => {
  const store = new FakeStore();
  const time = new ManualTime();
  const a = member(store, time, 'a');
  await time.flush();
  const b = member(store, time, 'b');
  await time.advance(20_000);
  t.same(holders([a, b]), ['a']);
  t.equal(a.runs.length, 1);
  t.equal(b.runs.length, 0, 'b saw the lease renewed every 500 ms and never took it');
  const lease = store.leases.get('my-controllers');
  t.equal(lease?.data.holder, 'a');
  t.equal(lease?.data.leaseDurationMs, 3000);
  t.ok(store.writes >= 40, `renewed about every retry period (${store.writes} writes in 20 s)`);
  await a.handle.stop();
  await b.handle.stop();
});

t.test('a holder cut off stops its work at the renew deadline; the other takes over only after the lease duration', async (t) => {
  const store = new FakeStore();
  const time = new ManualTime();
  const a = member(store, time, 'a');
  await time.flush();
  const b = member(store, time, 'b');
  await time.advance(5_100);
  const lastRenewMs = 5000; // renewals at 500, 1000, ... 5000 (retry period from the acquisition at 0)
  a.client.cut(true); // a can no longer reach the cluster: its renewals fail
  await time.advance(10_000);
  t.same(holders([a, b]), ['b']);
  const aRun = a.runs[0];
  const bRun = b.runs[0];
  t.equal(aRun?.abortMs, lastRenewMs + 2000, "a's work was aborted exactly renewDeadlineMs after its last successful renewal started");
  t.ok(bRun !== undefined && bRun.startMs >= lastRenewMs + 3000, `b took over at ${bRun?.startMs}, no earlier than the lease duration after a's last renewal`);
  t.ok(bRun !== undefined && bRun.startMs <= lastRenewMs + 3000 + 2 * 500, 'and within two looks after that');
  t.ok(bRun !== undefined && aRun?.abortMs !== undefined && bRun.startMs - aRun.abortMs >= 1000, 'a margin of leaseDurationMs - renewDeadlineMs between the two');
  t.equal(store.leases.get('my-controllers')?.data.transitions, 1);
  // a comes back: it is a candidate now and does not disturb b.
  a.client.cut(false);
  await time.advance(10_000);
  t.same(holders([a, b]), ['b']);
  t.equal(a.runs.length, 1);
  await a.handle.stop();
  await b.handle.stop();
});

t.test('stop releases the lock: the other takes it at its next look, well before the lease duration', async (t) => {
  const store = new FakeStore();
  const time = new ManualTime();
  const a = member(store, time, 'a');
  await time.flush();
  const b = member(store, time, 'b');
  await time.advance(2_000);
  const stoppedAt = time.monotonicMs();
  await a.handle.stop();
  t.equal(a.runs[0]?.abortMs, stoppedAt, "a's work is aborted by stop");
  t.equal(store.leases.get('my-controllers')?.data.holder, '', 'released');
  await time.advance(1_000);
  t.same(holders([a, b]), ['b']);
  t.ok((b.runs[0]?.startMs ?? Infinity) - stoppedAt <= 500, 'b took over within one retry period');
  await b.handle.stop();
});

t.test('a lease taken by someone else is noticed at the next renewal: the work stops at once', async (t) => {
  const store = new FakeStore();
  const time = new ManualTime();
  const a = member(store, time, 'a');
  await time.advance(1_000);
  const cur = store.leases.get('my-controllers') as Resource<LeaseData>;
  store.write('my-controllers', { data: { ...cur.data, holder: 'intruder' }, version: cur.version });
  const tookAt = time.monotonicMs();
  await time.advance(600);
  t.equal(a.handle.isHolder(), false);
  t.ok((a.runs[0]?.abortMs ?? Infinity) <= tookAt + 500, 'lost at the next renewal, not at the deadline');
  await time.advance(10_000);
  t.equal(a.runs.length, 2, 'the intruder renews nothing, so a takes the lock back after the lease duration');
  t.equal(store.leases.get('my-controllers')?.data.holder, 'a');
  await a.handle.stop();
});

t.test('work that fails releases the lock; run is never called again before the previous call settled', async (t) => {
  const store = new FakeStore();
  const time = new ManualTime();
  let calls = 0;
  const a = member(store, time, 'a', {}, async () => {
    calls++;
    throw new Error('cannot start');
  });
  await time.flush();
  t.equal(store.leases.get('my-controllers')?.data.holder, '', 'released after the failure');
  t.equal(a.handle.isHolder(), false);
  const b = member(store, time, 'b');
  await time.advance(5_000);
  t.ok(calls >= 1);
  t.same(holders([a, b]), ['b'], 'the lock went to the candidate whose work runs, and stays there');
  t.equal(store.leases.get('my-controllers')?.data.holder, 'b');
  await a.handle.stop();
  await b.handle.stop();
});

t.test('a slow run: the lock waits for it to settle before campaigning again', async (t) => {
  const store = new FakeStore();
  const time = new ManualTime();
  let active = 0;
  let maxActive = 0;
  const a = member(store, time, 'a', {}, async (signal) => {
    active++;
    maxActive = Math.max(maxActive, active);
    await new Promise<void>((resolve) => signal.addEventListener('abort', () => time.setTimeout(resolve, 800), { once: true }));
    active--;
  });
  await time.advance(1_000);
  a.client.cut(true);
  await time.advance(3_000);
  a.client.cut(false);
  await time.advance(10_000);
  t.ok(a.runs.length >= 2, 'acquired again after losing');
  t.equal(maxActive, 1, 'never two runs at once');
  const stopping = a.handle.stop();
  await time.advance(1_000); // the run takes 800 ms to wind down
  await stopping;
  t.equal(active, 0);
});

t.test('timings and names are validated', async (t) => {
  const store = new FakeStore();
  const c = store.client();
  const time = new ManualTime();
  const host = { clock: time, timers: time };
  t.throws(() => runWithLock(c, 'My_Lock', 'a', () => {}, host), /lock name must be a lowercase DNS label/);
  t.throws(() => runWithLock(c, 'l', '', () => {}, host), /lock identity must be a non-empty string/);
  t.throws(() => runWithLock(c, 'l', 'a', () => {}, { ...host, leaseDurationMs: 1000, renewDeadlineMs: 1000 }), /0 < retryPeriodMs < renewDeadlineMs < leaseDurationMs, got 2000 < 1000 < 1000/);
  t.throws(() => runWithLock(c, 'l', 'a', () => {}, { ...host, retryPeriodMs: 0 }), /retryPeriodMs < renewDeadlineMs/);
});
