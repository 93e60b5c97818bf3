import { EventEmitter } from 'node:events';
import t from 'tap';
import { LeaseKeepAlive, type KeepAliveTransport } from './lease.js';

/**
 * The keep-alive helper's watchdog (docs/api.md "Leases", client): a lease counts as lost a
 * whole TTL after the last confirmed request was *sent*, on the monotonic clock, since the
 * leader renews from when the request reached it. Over a fake stream and a fake clock.
 */
function fakeTransport() {
  const writes: unknown[] = [];
  let call: EventEmitter & { write(m: unknown): boolean; cancel(): void } = Object.assign(new EventEmitter(), { write: () => true, cancel: () => undefined });
  const transport: KeepAliveTransport = {
    endpoints: 1,
    firstEndpoint: () => 0,
    open: () => {
      call = Object.assign(new EventEmitter(), {
        write: (m: unknown) => {
          writes.push(m);
          return true;
        },
        cancel: () => undefined,
      });
      return call as unknown as ReturnType<KeepAliveTransport['open']>;
    },
    closed: () => false,
  };
  return { transport, writes, answer: (ttlSeconds: number) => call.emit('data', { ttlSeconds, errorCode: '', errorMessage: '' }) };
}

async function pollUntil(f: () => boolean, ms: number): Promise<boolean> {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    if (f()) return true;
    await new Promise((r) => setImmediate(r));
  }
  return f();
}

t.test('the watchdog counts a TTL from when the answered request was sent, not from the answer', async (t) => {
  let now = 1000;
  const { transport, writes, answer } = fakeTransport();
  const ka = new LeaseKeepAlive('svc', transport, { ttlSeconds: 2, nowMs: () => now });
  let lost: string | undefined;
  void ka.lost.then((l) => (lost = l.reason));
  t.equal(writes.length, 1, 'the first renewal is sent at once (t = 1000)');
  now = 2990; // the answer is slow: 1990 ms after the request went out
  answer(2);
  t.equal(lost, undefined);
  now = 3000; // a TTL after the send: the leader may expire it from here on
  t.ok(await pollUntil(() => lost !== undefined, 1000), 'lost within moments of send + TTL (measured from the answer it would wait 2 s more)');
  t.equal(lost, 'unconfirmed');
  ka.stop();
});
