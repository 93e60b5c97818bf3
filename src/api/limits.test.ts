import * as grpc from '@grpc/grpc-js';
import t from 'tap';
import { CairnError, ErrorCode } from '../base/index.js';
import { errorBody, grpcErrorOf, GRPC_ERROR_CODE_KEY, GRPC_RETRY_AFTER_KEY, httpStatusOf } from './errors.js';
import { accessorOf, ipOfGrpcPeer, KeyedRateLimiter, normalizeIp, RequestLimits, retryAfterSecondsOf, StreamCounter, tokenKey } from './limits.js';

/**
 * The limiters of docs/security.md "Limits", on a hand-driven clock: a burst is allowed, the
 * next request is refused with the wait until one would be, the bucket refills at its rate,
 * and a flood of fresh keys never holds more than the key cap.
 */

class ManualClock {
  ms = 1_000;
  monotonicMs(): number {
    return this.ms;
  }
}

const SECRET = 'a'.repeat(64);
const TOKEN = `cairn_ops1_${SECRET}`;

t.test('a bucket allows its burst, then refuses with the wait, then refills at its rate', async (t) => {
  const clock = new ManualClock();
  const l = new KeyedRateLimiter({ perSecond: 10, burst: 3 }, 100, clock);
  t.same([l.take('k'), l.take('k'), l.take('k')], [0, 0, 0], 'the burst');
  t.equal(l.take('k'), 100, 'the 4th waits 1/10 s');
  t.equal(l.take('k'), 100, 'a refused request takes nothing');
  t.equal(l.take('other'), 0, 'keys are independent');
  clock.ms += 100;
  t.equal(l.take('k'), 0, 'one token back after 100 ms');
  t.ok(l.take('k') > 0);
  clock.ms += 10_000;
  t.same([l.take('k'), l.take('k'), l.take('k'), l.take('k') > 0], [0, 0, 0, true], 'refills to the burst, no more');
});

t.test('perSecond 0 turns a limiter off', async (t) => {
  const l = new KeyedRateLimiter({ perSecond: 0, burst: 1 }, 10, new ManualClock());
  for (let i = 0; i < 1000; i++) t.equal(l.take('k'), 0);
  t.equal(l.size, 0, 'keeps nothing');
  t.throws(() => new KeyedRateLimiter({ perSecond: 5, burst: 0 }, 10, new ManualClock()), /burst must be at least 1/);
  t.throws(() => new KeyedRateLimiter({ perSecond: 5, burst: 5 }, 0, new ManualClock()), /key cap must be a positive integer/);
});

t.test('random tokens and addresses do not grow the limiter past its key cap (least recently used first out)', async (t) => {
  const clock = new ManualClock();
  const limits = new RequestLimits({ perAddress: { perSecond: 1e9, burst: 1e9 }, perToken: { perSecond: 5, burst: 1 }, maxKeys: 1_000, clock });
  for (let i = 0; i < 20_000; i++) limits.check({ address: `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`, token: `random-${i}-${Math.random()}` });
  t.equal(limits.byToken.size, 1_000, 'tokens: at the cap');
  t.equal(limits.byAddress.size, 1_000, 'addresses: at the cap');
  t.equal(limits.byToken.evicted, 19_000);
  // A key in use stays: the least recently used go first.
  const lru = new KeyedRateLimiter({ perSecond: 1, burst: 1 }, 3, clock);
  lru.take('a');
  lru.take('b');
  lru.take('c');
  t.ok(lru.take('a') > 0, 'a is used again (refused: its bucket is empty)');
  lru.take('d'); // evicts b, the least recently used
  t.ok(lru.take('a') > 0, 'a kept its (empty) bucket');
  t.ok(lru.take('c') > 0, 'c kept its bucket');
  t.equal(lru.take('b'), 0, 'b was dropped and starts full');
});

t.test('RequestLimits: the address first, then the token; RATE_LIMITED says when to retry', async (t) => {
  const clock = new ManualClock();
  const limits = new RequestLimits({ perAddress: { perSecond: 1, burst: 2 }, perToken: { perSecond: 0.5, burst: 1 }, clock });
  limits.check({ address: '10.0.0.1', token: TOKEN });
  const e = t.throws(() => limits.check({ address: '10.0.0.2', token: TOKEN })) as CairnError;
  t.equal(e.code, ErrorCode.RATE_LIMITED);
  t.equal(e.details['limit'], 'token');
  t.equal(retryAfterSecondsOf(e), 2, 'a token every 2 s');
  t.match(e.message, /token ops1/, 'names the accessor');
  t.notMatch(e.message, SECRET, 'never the secret');
  limits.check({ address: '10.0.0.1' });
  const a = t.throws(() => limits.check({ address: '10.0.0.1', token: 'other' })) as CairnError;
  t.equal(a.details['limit'], 'address');
  t.match(a.message, /address 10\.0\.0\.1/);
  // Both front ends carry the wait: HTTP 429 with the error body, gRPC RESOURCE_EXHAUSTED with retry-after.
  t.equal(httpStatusOf(a), 429);
  t.equal(errorBody(a).error['code'], 'RATE_LIMITED');
  t.equal(errorBody(a).error['retry_after_seconds'], 1);
  const g = grpcErrorOf(a);
  t.equal(g.code, grpc.status.RESOURCE_EXHAUSTED);
  t.same(g.metadata.get(GRPC_ERROR_CODE_KEY), ['RATE_LIMITED']);
  t.same(g.metadata.get(GRPC_RETRY_AFTER_KEY), ['1']);
  t.same(grpcErrorOf(new CairnError(ErrorCode.TOO_LARGE, 'x')).metadata.get(GRPC_RETRY_AFTER_KEY), [], 'only RATE_LIMITED has retry-after');
});

t.test('token keys: a hash of the whole token, never the secret; a forged token with the same accessor has its own bucket', async (t) => {
  t.equal(accessorOf(TOKEN), 'ops1');
  t.match(tokenKey(TOKEN), /^sha256:[0-9a-f]{32}$/);
  t.not(tokenKey(TOKEN), tokenKey(`cairn_ops1_${'b'.repeat(64)}`), 'the accessor alone is not the key');
  t.equal(accessorOf('cairn_ops1_short'), undefined, 'not the cairn form');
  const k = tokenKey('s3cr3t-value');
  t.match(k, /^sha256:[0-9a-f]{32}$/);
  t.notMatch(k, 's3cr3t');
  t.equal(tokenKey('s3cr3t-value'), k, 'stable');
  t.not(tokenKey('s3cr3t-valuf'), k);
});

t.test('addresses: IPv4-mapped IPv6 as IPv4; a grpc-js peer without its port', async (t) => {
  t.equal(normalizeIp('::ffff:127.0.0.1'), '127.0.0.1');
  t.equal(normalizeIp('::1'), '::1');
  t.equal(normalizeIp(undefined), 'unknown');
  t.equal(ipOfGrpcPeer('127.0.0.1:5555'), '127.0.0.1');
  t.equal(ipOfGrpcPeer('::1:5555'), '::1');
  t.equal(ipOfGrpcPeer('::ffff:10.1.2.3:80'), '10.1.2.3');
});

t.test('StreamCounter: per node and per connection caps; a release gives the place back once', async (t) => {
  const c = new StreamCounter(3, 2, 'watch streams');
  const conn1 = {};
  const conn2 = {};
  const r1 = c.acquire(conn1);
  c.acquire(conn1);
  const e = t.throws(() => c.acquire(conn1)) as CairnError;
  t.equal(e.code, ErrorCode.RATE_LIMITED);
  t.equal(e.details['limit'], 'connection');
  c.acquire(conn2);
  const n = t.throws(() => c.acquire(conn2)) as CairnError;
  t.equal(n.details['limit'], 'node', 'the node cap (3) bites before conn2 reaches its own');
  r1();
  r1();
  t.equal(c.open, 2, 'a double release counts once');
  c.acquire(conn2);
  t.equal(c.open, 3);
  const off = new StreamCounter(0, 0, 'x');
  for (let i = 0; i < 100; i++) off.acquire(conn1);
  t.equal(off.open, 100, '0 = no cap');
});
