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

t.test('the timing histograms of where a request goes are exported under their documented names', async (t) => {
  const m = new Metrics(() => undefined);
  m.readIndexSeconds.observe(0.002);
  m.proposalSeconds.observe(0.004);
  m.roundTripSeconds.labels('heartbeat').observe(0.001);
  m.roundTripSeconds.labels('append').observe(0.003);
  m.applySeconds.observe(0.00002);
  const text = await m.registry.metrics();
  t.match(text, /^cairn_read_index_seconds_count 1$/m);
  t.match(text, /^cairn_read_index_seconds_sum 0.002$/m);
  t.match(text, /^cairn_proposal_seconds_count 1$/m);
  t.match(text, /^cairn_raft_round_trip_seconds_count\{kind="heartbeat"\} 1$/m);
  t.match(text, /^cairn_raft_round_trip_seconds_sum\{kind="append"\} 0.003$/m);
  t.match(text, /^cairn_apply_seconds_bucket\{le="0.00002"\} 1$/m, 'apply has buckets fine enough for microseconds');
  t.match(text, /^cairn_process_nodejs_eventloop_lag_mean_seconds /m, "the event-loop delay the bench's breakdown reads");
});
