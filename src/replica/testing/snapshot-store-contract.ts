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

  withStore('readBody reads ranges of a saved snapshot, also after a restart; a pruned or unknown one, or a range past its end, is refused', async (t, h, s) => {
    if (s.readBody === undefined) {
      t.fail('the store has no readBody: a leader would hold its snapshot in memory');
      return;
    }
    const body = new Uint8Array(300_000).map((_, i) => (i * 7) % 253);
    const snap = snapshot(20, 2, body);
    await s.save(snap);
    const hex = (b: Uint8Array): string => Buffer.from(b).toString('hex');
    t.equal(hex(await s.readBody(snap.meta, 0, 1000)), hex(body.subarray(0, 1000)), 'the first 1000 bytes');
    t.equal(hex(await s.readBody(snap.meta, 123_457, 65_536)), hex(body.subarray(123_457, 123_457 + 65_536)), 'a range in the middle');
    t.equal(hex(await s.readBody(snap.meta, 299_990, 10)), hex(body.subarray(299_990)), 'the last bytes');
    t.equal((await s.readBody(snap.meta, 300_000, 0)).length, 0, 'an empty range at the end');
    await t.rejects(s.readBody(snap.meta, 299_990, 11), 'a range past the end is refused');
    await t.rejects(s.readBody(snap.meta, -1, 1), 'a negative offset is refused');
    await t.rejects(s.readBody({ ...snap.meta, term: 3 as Term }, 0, 1), 'another term: not stored');
    await t.rejects(s.readBody({ ...snap.meta, index: 21 as LogIndex }, 0, 1), 'another index: not stored');
    await s.close();
    const s2 = await h.open();
    try {
      const read = s2.readBody?.bind(s2);
      t.ok(read, 'the reopened store reads too');
      if (read === undefined) return;
      await s2.loadNewest();
      t.equal(hex(await read(snap.meta, 5, 50)), hex(body.subarray(5, 55)), 'after a restart');
      await s2.save(snapshot(30, 2, 'b'));
      await s2.save(snapshot(40, 2, 'c'));
      await t.rejects(read(snap.meta, 0, 1), 'pruned by newer snapshots: refused');
    } finally {
      await s2.close();
    }
  });
}
