import t from 'tap';
import type { ReplicaStatus } from '../replica/index.js';
import { Metrics } from './metrics.js';

t.test('cairn_raft_messages_dropped_total follows the replica\'s drop counts, by reason', async (t) => {
  let dropped = { 'non-member': 0, 'no-config': 0 };
  const status = (): ReplicaStatus => ({ droppedMessages: dropped, config: { members: [] }, term: 1, commit: 0, applied: 0, lastIndex: 0, snapshotIndex: 0, role: 'follower' }) as unknown as ReplicaStatus;
  const m = new Metrics(status);
  const value = async (reason: string): Promise<number | undefined> => {
    const got = await m.registry.getSingleMetric('cairn_raft_messages_dropped_total')?.get();
    return got?.values.find((v) => v.labels['reason'] === reason)?.value;
  };
  t.equal(await value('non-member'), 0, 'exported at zero before any drop');
  dropped = { 'non-member': 3, 'no-config': 1 };
  t.equal(await value('non-member'), 3);
  t.equal(await value('no-config'), 1);
  dropped = { 'non-member': 5, 'no-config': 1 };
  t.equal(await value('non-member'), 5, 'grows with the replica\'s count');
  dropped = { 'non-member': 2, 'no-config': 0 };
  t.equal(await value('non-member'), 7, 'a reopened replica counting from zero again only adds');
  t.match(await m.registry.metrics(), /cairn_raft_messages_dropped_total\{reason="non-member"\} 7/);
});

t.test('cairn_list_snapshots reads the held paged-list snapshots at scrape time', async (t) => {
  const m = new Metrics(() => undefined);
  let held = 0;
  m.listGauges(() => ({ snapshots: held }));
  t.match(await m.registry.metrics(), /^cairn_list_snapshots 0$/m);
  held = 3;
  t.match(await m.registry.metrics(), /^cairn_list_snapshots 3$/m);
});
