import { Writable } from 'node:stream';
import t from 'tap';
import { nodeId, type Logger } from '../base/index.js';
import { SystemClock } from './clock.js';
import { createLogger } from './logger.js';
import { SystemTimers } from './timers.js';

t.test('SystemClock: wall time is Date.now, monotonic time never goes backwards', async (t) => {
  const c = new SystemClock();
  const before = Date.now();
  const now = c.nowMs();
  t.ok(now >= before && now <= Date.now());
  let prev = c.monotonicMs();
  let backwards = 0;
  for (let i = 0; i < 10_000; i++) {
    const m = c.monotonicMs();
    if (m < prev) backwards++;
    prev = m;
  }
  t.equal(backwards, 0, 'monotonicMs never went backwards in 10,000 reads');
});

t.test('SystemTimers: timeouts fire, cleared ones do not; intervals repeat until cleared; yield resolves', async (t) => {
  const timers = new SystemTimers();
  const fired: string[] = [];
  timers.setTimeout(() => fired.push('a'), 1);
  const cancelled = timers.setTimeout(() => fired.push('never'), 1);
  timers.clearTimeout(cancelled);
  let ticks = 0;
  await new Promise<void>((resolve) => {
    const h = timers.setInterval(() => {
      if (++ticks === 3) {
        timers.clearInterval(h);
        resolve();
      }
    }, 1);
  });
  await new Promise((r) => setTimeout(r, 10));
  t.same(fired, ['a']);
  t.equal(ticks, 3);
  timers.clearTimeout(undefined);
  await timers.yield();
});

t.test('createLogger: JSON lines with the node id on every line', async (t) => {
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      lines.push(...chunk.toString().split('\n').filter((l) => l !== ''));
      cb();
    },
  });
  const log = createLogger({ nodeId: nodeId('n3'), level: 'debug', destination: sink });
  log.info({ term: 4, index: 17 }, 'appended');
  log.debug('details');
  log.trace('not shown');
  const port: Logger = log; // it is the replica's Logger port
  port.warn({ index: 1 }, 'as the port');
  await new Promise((r) => setImmediate(r));
  t.equal(lines.length, 3);
  const first = JSON.parse(lines[0] ?? '{}') as Record<string, unknown>;
  t.match(first, { level: 'info', node: 'n3', term: 4, index: 17, msg: 'appended' });
  t.type(first['time'], 'string');
  t.match(JSON.parse(lines[1] ?? '{}'), { level: 'debug', node: 'n3', msg: 'details' });
  t.match(JSON.parse(lines[2] ?? '{}'), { level: 'warn', node: 'n3', index: 1, msg: 'as the port' });
  t.throws(() => createLogger({ nodeId: 'n1', level: 'loud' }), /logger option level must be one of .*got "loud"/);
});

t.test('SystemTimers: an interval fires once after the event loop stalled, not once per interval it missed (the Raft ticker counts only ticks the node was awake for)', async (t) => {
  // Why it matters: src/raft/pause-guards.test.ts. A leader whose ticker caught up on the ticks
  // a 300 ms stall missed would run check-quorum before reading the answers that queued up.
  const timers = new SystemTimers();
  const everyMs = 10;
  const stallMs = 300;
  let ticks = 0;
  const h = timers.setInterval(() => ticks++, everyMs);
  const firedBeforeIo = await new Promise<number>((resolve) => {
    timers.setTimeout(() => {
      const end = performance.now() + stallMs;
      while (performance.now() < end) {
        // the stall under test: a long garbage collection or synchronous job
      }
      const atWake = ticks;
      // The check phase comes after this loop turn's timers and its I/O poll: whatever the
      // interval fired in between is what a node would tick before reading its sockets.
      setImmediate(() => resolve(ticks - atWake));
    }, everyMs + 5);
  });
  timers.clearInterval(h);
  t.ok(firedBeforeIo <= 1, `the interval fired ${firedBeforeIo} time(s) on waking from a ${stallMs} ms stall (catching up would be ${stallMs / everyMs})`);
});
