import type { ManualTime } from '../../base/testing/index.js';
import type { LocalCluster } from './local-cluster.js';
import { MemoryLogStore } from './memory-log-store.js';

/**
 * Helpers for replica tests in simulated time (a `ManualTime` as the replicas' clock and
 * timers): a disk whose appends wait on the test, time advanced until a condition holds, and a
 * cluster closed while time moves (closing waits for the writes in flight).
 */

/** A MemoryLogStore whose every append first awaits `gate()` (a slow or hung fsync), when it returns a promise. */
export function gatedLogStore(gate: () => Promise<void> | undefined): MemoryLogStore {
  const inner = new MemoryLogStore();
  return new Proxy(inner, {
    get(target, prop, receiver) {
      if (prop === 'append') {
        return async (batch: Parameters<MemoryLogStore['append']>[0]) => {
          const wait = gate();
          if (wait !== undefined) await wait;
          return target.append(batch);
        };
      }
      const v: unknown = Reflect.get(target, prop, receiver);
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
}

/** Advances `time` in 1 ms steps until `done` holds or `limitMs` passed; returns whether it held. */
export async function advanceUntil(time: ManualTime, limitMs: number, done: () => boolean): Promise<boolean> {
  const end = time.monotonicMs() + limitMs;
  while (!done()) {
    if (time.monotonicMs() >= end) return false;
    await time.advance(1);
  }
  return true;
}

/** Closes `c` while advancing `time` (its replicas wait for their writes in flight). */
export async function closeInSimulatedTime(c: LocalCluster, time: ManualTime): Promise<void> {
  let closed = false;
  const closing = c.close().finally(() => (closed = true));
  await advanceUntil(time, 10_000, () => closed);
  await closing;
}

/** The body of the `seq`th demo Artist write (five names, rewritten in turn). */
export function artistWrite(seq: number): Record<string, unknown> {
  return { time: '2026-11-27T10:00:00.000Z', uid: `uid-${seq}`, generation: `gen-${seq}`, id: { type: { group: 'demo', groupVersion: 'v1', kind: 'Artist' }, tenancy: { partition: 'default', namespace: 'default' }, name: `a${seq % 5}` }, data: { name: `v${seq}` } };
}
