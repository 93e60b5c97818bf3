import type { Test } from 'tap';
import type { LogIndex, NodeId, Term } from '../../base/index.js';
import type { Snapshot } from '../../raft/index.js';
import type { SnapshotStore } from '../ports.js';

/**
 * The behaviour every `SnapshotStore` must have (the in-memory reference and platform's
 * FileSnapshotStore). Damage and crash behaviour are tested beside each implementation.
 */
export interface SnapshotStoreHarness {
  /** Opens a store over this harness's storage (empty the first time). Close the previous one first. */
  open(): Promise<SnapshotStore>;
  dispose(): Promise<void>;
}

export function snapshot(index: number, term: number, data: Uint8Array | string = `state@${index}`): Snapshot {
  return {
    meta: {
      index: index as LogIndex,
      term: term as Term,
      config: { members: [{ id: 'n1' as NodeId, suffrage: 'voter', address: '127.0.0.1:7001' }, { id: 'n2' as NodeId, suffrage: 'learner', address: '127.0.0.1:7002' }] },
    },
    data: typeof data === 'string' ? new TextEncoder().encode(data) : data,
  };
}

export function describeSnapshot(s: Snapshot | undefined): unknown {
  return s === undefined ? undefined : { meta: s.meta, data: Buffer.from(s.data).toString('hex') };
}

export function snapshotStoreContract(t: Test, makeHarness: () => Promise<SnapshotStoreHarness>): void {
  const withStore = (name: string, body: (t: Test, h: SnapshotStoreHarness, s: SnapshotStore) => Promise<void>): void => {
    t.test(name, async (t) => {
      const h = await makeHarness();
      const s = await h.open();
      try {
        await body(t, h, s);
      } finally {
        await s.close().catch(() => undefined);
        await h.dispose();
      }
    });
  };

  withStore('a fresh store has no snapshot', async (t, _h, s) => {
    t.same(await s.loadNewest(), { snapshot: undefined, skippedCorrupt: [] });
  });

  withStore('a saved snapshot loads back, also after a restart', async (t, h, s) => {
    const snap = snapshot(42, 3, new Uint8Array(100_000).map((_, i) => i % 251));
    await s.save(snap);
    t.same(describeSnapshot((await s.loadNewest()).snapshot), describeSnapshot(snap));
    await s.close();
    const s2 = await h.open();
    try {
      const loaded = await s2.loadNewest();
      t.same(describeSnapshot(loaded.snapshot), describeSnapshot(snap), 'same after a restart');
      t.same(loaded.skippedCorrupt, []);
    } finally {
      await s2.close();
    }
  });

  withStore('the newest snapshot wins; an empty body is fine', async (t, _h, s) => {
    await s.save(snapshot(10, 1));
    await s.save(snapshot(30, 2, new Uint8Array(0)));
    await s.save(snapshot(20, 2));
    t.same(describeSnapshot((await s.loadNewest()).snapshot), describeSnapshot(snapshot(30, 2, new Uint8Array(0))));
  });

  withStore('saving the same snapshot again replaces it', async (t, _h, s) => {
    await s.save(snapshot(10, 1, 'first'));
    await s.save(snapshot(10, 1, 'second'));
    t.same(describeSnapshot((await s.loadNewest()).snapshot), describeSnapshot(snapshot(10, 1, 'second')));
  });
}
