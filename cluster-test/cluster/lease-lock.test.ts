/**
 * The lock for out-of-process controllers with real processes: a 3-node cluster, and
 * `lock-holder` processes (a CairnClient + runWithLock, as a user's controller process) competing
 * for one cairn.v1.Lease. One holds it; the others wait while it renews. SIGKILL the holder:
 * another takes over, but only after the lease duration counted from the holder's last
 * renewal. That renewal started less than the renew deadline before the kill (or the holder
 * would have given up, and said so), so the takeover comes at least leaseDurationMs -
 * renewDeadlineMs after the kill; typically about leaseDurationMs, as a renewal is at most a
 * retry period old. SIGTERM the next holder: it releases the lock, and the last one takes it
 * at its next look, well before the lease.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { createInterface } from 'node:readline';
import t, { type Test } from 'tap';
import { Cluster, REPO_ROOT, field, now, testPki, until } from './harness.js';

const LEASE_MS = 4000;
const RENEW_MS = 2500;
const RETRY_MS = 400;
const SCRIPT = path.join(REPO_ROOT, 'dist', 'cluster-test', 'cluster', 'lock-holder.js');

interface Holder {
  readonly id: string;
  readonly child: ChildProcess;
  /** Events with the test's clock (performance.now) at arrival. */
  readonly events: Array<{ event: string; atMs: number; line: Record<string, unknown> }>;
  has(event: string): boolean;
  exited: Promise<void>;
}

function holder(t: Test, endpoints: string[], id: string, caFile: string, token: string | undefined): Holder {
  // Through `env -u NODE_OPTIONS`: tap's loader hooks must not load into the child (harness.ts).
  const child = spawn('env', ['-u', 'NODE_OPTIONS', process.execPath, SCRIPT, endpoints.join(','), 'controllers', id, String(LEASE_MS), String(RENEW_MS), String(RETRY_MS)], {
    cwd: REPO_ROOT,
    env: { ...process.env, CAIRN_TLS_CA_FILE: caFile, ...(token !== undefined ? { CAIRN_TOKEN: token } : {}) },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const events: Holder['events'] = [];
  createInterface({ input: child.stdout as NodeJS.ReadableStream }).on('line', (text) => {
    try {
      const line = JSON.parse(text) as Record<string, unknown>;
      events.push({ event: String(field(line, 'event')), atMs: now(), line });
    } catch {
      // not ours
    }
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  t.teardown(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  return { id, child, events, exited, has: (e) => events.some((x) => x.event === e) };
}

t.test('lease lock across processes: one holder; kill -9 hands over after the lease; SIGTERM hands over at once', async (t) => {
  const cluster = await Cluster.start(t, { size: 3 });
  const endpoints = cluster.nodes.map((n) => n.grpcAddr);
  const { caFile } = await testPki();
  const a = holder(t, endpoints, 'proc-a', caFile, cluster.token);
  await until('proc-a to hold the lock', 30_000, async () => (a.has('acquired') ? true : undefined));
  const b = holder(t, endpoints, 'proc-b', caFile, cluster.token);
  const c = holder(t, endpoints, 'proc-c', caFile, cluster.token);
  await until('b and c to start', 30_000, async () => (b.has('started') && c.has('started') ? true : undefined));
  // Longer than a lease: b and c see a renewing holder and stay candidates.
  const waitFrom = now();
  await until('a lease duration and a half', 30_000, async () => (now() - waitFrom > LEASE_MS * 1.5 ? true : undefined));
  t.notOk(b.has('acquired') || c.has('acquired'), 'while the holder renews, nobody else holds the lock');

  t.notOk(a.has('aborted'), 'the holder never gave up: its last renewal is younger than the renew deadline');
  a.child.kill('SIGKILL');
  await a.exited;
  const killedAt = now();
  const next = await until('another process to take the lock', 30_000, async () => [b, c].find((h) => h.has('acquired')));
  const tookMs = (next.events.find((e) => e.event === 'acquired')?.atMs ?? 0) - killedAt;
  t.comment(`LOCK: ${next.id} took over ${Math.round(tookMs)} ms after kill -9 of the holder (lease ${LEASE_MS} ms, retry ${RETRY_MS} ms)`);
  // Without the lease (taking a lock whose holder merely skipped a renewal) this would be one look: ~RETRY_MS.
  t.ok(tookMs >= LEASE_MS - RENEW_MS, `not before the lease ran out: ${Math.round(tookMs)} ms >= ${LEASE_MS - RENEW_MS} ms`);
  t.ok(tookMs <= LEASE_MS + 10_000, 'and not much later');
  const other = next === b ? c : b;
  t.notOk(other.has('acquired'), 'exactly one took it');

  next.child.kill('SIGTERM');
  const termAt = now();
  await until(`${other.id} to take the released lock`, 30_000, async () => (other.has('acquired') ? true : undefined));
  const handMs = (other.events.find((e) => e.event === 'acquired')?.atMs ?? 0) - termAt;
  t.comment(`LOCK: ${other.id} took over ${Math.round(handMs)} ms after SIGTERM of the holder (released)`);
  t.ok(handMs < LEASE_MS, `a released lock is taken at the next look (${Math.round(handMs)} ms < ${LEASE_MS} ms)`);
  await next.exited;
  t.ok(next.has('aborted') && next.has('stopped'), 'the stopped holder aborted its work and exited cleanly');
  const abortedAt = next.events.find((e) => e.event === 'aborted')?.atMs ?? Infinity;
  const otherAt = other.events.find((e) => e.event === 'acquired')?.atMs ?? -Infinity;
  t.ok(abortedAt <= otherAt, 'its work stopped before the next holder started');
});
