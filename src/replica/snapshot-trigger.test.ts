/**
 * When a node snapshots, and what it keeps behind a snapshot (src/replica/README.md,
 * "Snapshots"; docs/performance.md, "Scale of the data"): at least `snapshotEveryEntries`
 * entries and, with `snapshotLogRatio`, a share of the last snapshot's size in log bytes
 * (capped, stretched per node); the entries kept behind a snapshot bounded by count and bytes.
 */
import t from 'tap';
import { isCairnError } from '../base/index.js';
import { CommandType } from '../fsm/index.js';
import { snapshotLogBytesDue, SNAPSHOT_DEFAULTS, type SnapshotPolicy } from './replica.js';
import { LocalCluster, waitUntil } from './testing/index.js';

const artist = { group: 'demo', groupVersion: 'v1', kind: 'Artist' };
const tenancy = { partition: 'default', namespace: 'default' };
/** Each write carries this much data: the store (and so each snapshot) grows by about 500 B per write. */
const VALUE = 'x'.repeat(400);
/** Generous upper bound of one write's log entry (envelope, ids, the 400-byte value). */
const ENTRY_BYTES_MAX = 1_000;

let seq = 0;
function writeBody(name: string): Record<string, unknown> {
  seq++;
  return { time: '2026-11-27T10:00:00.000Z', uid: `uid-${seq}`, generation: `gen-${seq}`, id: { type: artist, tenancy, name }, data: { name: VALUE } };
}

async function loadOneNode(ratio: number, writes: number): Promise<readonly { readonly index: number; readonly bytes: number }[]> {
  const c = new LocalCluster({ seed: 5, snapshotEveryEntries: 5, snapshotLogRatio: ratio, snapshotRetainEntries: 2 });
  await c.bootstrap(['n1']);
  const leader = await c.waitForLeader();
  for (let i = 0; i < writes; i++) await leader.coordinator.propose(CommandType.ResourceWrite, writeBody(`r${i}`));
  // Closing waits for a snapshot being taken: the history is complete after it.
  await c.close();
  return [...leader.snapshotStore.history];
}

const POLICY: SnapshotPolicy = { ...SNAPSHOT_DEFAULTS, logRatio: 0.25, maxLogBytes: 1_000_000 };

t.test('the byte trigger: a share of the last snapshot, capped, stretched by 0-50% per node and per snapshot', async (t) => {
  const due = (id: string, index: number, bytes: number, p: SnapshotPolicy = POLICY): number => snapshotLogBytesDue(p, id, index, bytes);
  t.equal(due('n1', 100, 0), 0, 'no snapshot yet (size 0): only the entry count applies');
  t.equal(due('n1', 100, 400_000, { ...POLICY, logRatio: 0 }), 0, 'ratio 0 turns the byte trigger off');
  const ids = ['n1', 'n2', 'n3', 'n4', 'n5'];
  const at = ids.map((id) => due(id, 90_000, 400_000));
  for (const [k, v] of at.entries()) t.ok(v >= 100_000 && v < 150_000, `${ids[k] as string}: ${v} bytes is 0.25 x 400,000 stretched by less than 50%`);
  t.equal(new Set(at).size, ids.length, `five nodes at the same index and size wait for five different amounts of log (${at.join(', ')})`);
  t.same(ids.map((id) => due(id, 90_000, 400_000)), at, 'deterministic: the same node, index and size give the same figure');
  t.not(due('n1', 90_001, 400_000), at[0], 'the stretch moves with the snapshot index');
  const capped = due('n1', 90_000, 100_000_000);
  t.ok(capped >= 1_000_000 && capped < 1_500_000, `capped at maxLogBytes (1,000,000) before the stretch: ${capped}`);
});

t.test('with snapshotLogRatio 1, the log between two snapshots holds at least the earlier snapshot in bytes', async (t) => {
  const writes = 300;
  const byBytes = await loadOneNode(1, writes);
  const byEntries = await loadOneNode(0, writes);
  t.ok(byEntries.length >= writes / 5 - 2, `ratio 0: a snapshot every 5 entries, as before (${byEntries.length} snapshots)`);
  t.ok(byBytes.length >= 3 && byBytes.length <= 12, `ratio 1: few snapshots, further apart as the store grows (${byBytes.length}: ${byBytes.map((s) => s.index).join(', ')})`);
  for (let k = 1; k < byBytes.length; k++) {
    const prev = byBytes[k - 1] as { index: number; bytes: number };
    const cur = byBytes[k] as { index: number; bytes: number };
    t.ok((cur.index - prev.index) * ENTRY_BYTES_MAX >= prev.bytes, `snapshot ${cur.index}: ${cur.index - prev.index} entries since ${prev.index}, at most ${(cur.index - prev.index) * ENTRY_BYTES_MAX} bytes, cover the ${prev.bytes}-byte snapshot before`);
  }
  const gaps = byEntries.slice(1).map((s, k) => s.index - (byEntries[k] as { index: number }).index);
  t.ok(gaps.every((g) => g >= 5), 'and never fewer than snapshotEveryEntries apart');
  // The assertion above fails for the entry trigger alone, so it can fail:
  const last = byEntries[byEntries.length - 1] as { index: number; bytes: number };
  const before = byEntries[byEntries.length - 2] as { index: number; bytes: number };
  t.ok((last.index - before.index) * ENTRY_BYTES_MAX < before.bytes, 'with ratio 0 the last gap is far below the snapshot size (the check above is not vacuous)');
});

t.test('the entries kept behind a snapshot are bounded by snapshotRetainBytes as well as by count', async (t) => {
  const c = new LocalCluster({ seed: 7, snapshotEveryEntries: 40, snapshotLogRatio: 0, snapshotRetainEntries: 1_000, snapshotRetainBytes: 3 * ENTRY_BYTES_MAX });
  t.teardown(() => c.close());
  await c.bootstrap(['n1']);
  const leader = await c.waitForLeader();
  for (let i = 0; i < 60; i++) await leader.coordinator.propose(CommandType.ResourceWrite, writeBody(`k${i}`));
  await waitUntil(() => leader.replica.status().snapshotIndex >= 40, 5_000, 'a snapshot');
  const st = leader.replica.status();
  const kept = st.snapshotIndex - st.firstIndex + 1;
  // Each entry carries the 400-byte value: 3,000 bytes hold at most 7 of them (count alone: 1,000, i.e. all).
  t.ok(kept >= 1 && kept <= 7, `3,000 bytes keep ${kept} entries (1-7 of more than 400 B) behind snapshot ${st.snapshotIndex}: the log starts at ${st.firstIndex}`);
});

t.test('a bad snapshot option is refused with the option named', async (t) => {
  const c = new LocalCluster({ snapshotLogRatio: -1 });
  t.teardown(() => c.close());
  let err: unknown;
  try {
    await c.bootstrap(['n1']);
  } catch (e) {
    err = e;
  }
  t.ok(isCairnError(err) && err.code === 'INVALID_ARGUMENT' && /snapshotLogRatio/.test(err.message), `refused: ${String(err)}`);
});
