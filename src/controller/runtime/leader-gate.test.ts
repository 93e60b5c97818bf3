import t from 'tap';
import { LeaderGate, runWhileLeader } from './leader-gate.js';

/** A start/stop pair that records what happened and can be held open. */
function recorder(): { log: string[]; holdStop: (held: boolean) => void; start: () => Promise<{ stop: () => Promise<void> }> } {
  const log: string[] = [];
  let n = 0;
  let hold: Promise<void> | undefined;
  let release = (): void => {};
  return {
    log,
    holdStop: (held) => {
      if (held) hold = new Promise<void>((r) => (release = r));
      else release();
    },
    start: async () => {
      const id = ++n;
      log.push(`start ${id}`);
      return {
        stop: async () => {
          log.push(`stopping ${id}`);
          if (hold !== undefined) await hold;
          log.push(`stopped ${id}`);
        },
      };
    },
  };
}

t.test('starts on leadership, stops on its loss; repeated reports change nothing', async (t) => {
  const r = recorder();
  const gate = new LeaderGate(r.start);
  gate.set(false);
  await gate.settled();
  t.same(r.log, [], 'a follower runs nothing');
  gate.set(true);
  gate.set(true);
  await gate.settled();
  t.same(r.log, ['start 1']);
  t.ok(gate.running);
  gate.set(false);
  await gate.settled();
  t.same(r.log, ['start 1', 'stopping 1', 'stopped 1']);
  t.notOk(gate.running);
  gate.set(true);
  await gate.settled();
  t.same(r.log, ['start 1', 'stopping 1', 'stopped 1', 'start 2'], 'leading again starts afresh');
  t.equal(gate.startCount, 2);
  await gate.close();
  t.same(r.log.slice(-2), ['stopping 2', 'stopped 2']);
  gate.set(true);
  await gate.settled();
  t.equal(r.log.length, 6, 'closed: nothing starts again');
});

t.test('a new start waits until the previous stop has finished; flaps collapse to the latest wish', async (t) => {
  const r = recorder();
  const gate = new LeaderGate(r.start);
  gate.set(true);
  await gate.settled();
  r.holdStop(true);
  gate.set(false); // a slow stop (reconciles finishing)
  await new Promise((resolve) => setImmediate(resolve));
  gate.set(true); // leader again while still stopping
  gate.set(false);
  gate.set(true);
  await new Promise((resolve) => setImmediate(resolve));
  t.same(r.log, ['start 1', 'stopping 1'], 'no start while the stop is in progress');
  r.holdStop(false);
  await gate.settled();
  t.same(r.log, ['start 1', 'stopping 1', 'stopped 1', 'start 2'], 'then one start, for the last wish (leading)');
  await gate.close();
});

t.test('a start that fails leaves nothing running; the next leadership tries again', async (t) => {
  let fail = true;
  let starts = 0;
  const gate = new LeaderGate(async () => {
    starts++;
    if (fail) throw new Error('no client');
    return { stop: () => {} };
  });
  gate.set(true);
  await gate.settled();
  t.equal(starts, 1);
  t.notOk(gate.running);
  fail = false;
  gate.set(false);
  gate.set(true);
  await gate.settled();
  t.ok(gate.running);
  await gate.close();
});

t.test('runWhileLeader: subscribes to leadership changes; close unsubscribes and stops', async (t) => {
  const listeners = new Set<(leading: boolean) => void>();
  const emit = (v: boolean): void => listeners.forEach((l) => l(v));
  const log: string[] = [];
  const w = runWhileLeader(
    (l) => {
      listeners.add(l);
      return () => listeners.delete(l);
    },
    () => {
      log.push('start');
      return 'token';
    },
    (token) => {
      log.push(`stop ${token}`);
    },
  );
  emit(true);
  await w.gate.settled();
  emit(false);
  await w.gate.settled();
  emit(true);
  await w.gate.settled();
  await w.close();
  t.same(log, ['start', 'stop token', 'start', 'stop token']);
  t.equal(listeners.size, 0);
});
