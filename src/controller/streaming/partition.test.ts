import t from 'tap';
import { electLeader, replicaLags, type ElectionInput } from './partition.js';

const input = (over: Partial<ElectionInput>): ElectionInput => ({
  replicas: [2, 0, 1],
  assignedLeader: 2,
  currentLeader: undefined,
  online: new Set([0, 1, 2]),
  offsets: new Map(),
  maxLag: 100,
  ...over,
});

t.test('the assigned leader leads while its SPU is online', async (t) => {
  t.same(electLeader(input({})), { resolution: 'Online', leader: 2, live: [2, 0, 1], message: 'leader on SPU 2' });
});

t.test("the leader's SPU offline: the online follower with the smallest lag takes over", async (t) => {
  const offsets = new Map([
    [2, 1000],
    [0, 950],
    [1, 990],
  ]);
  const r = electLeader(input({ online: new Set([0, 1]), offsets }));
  t.same(r, {
    resolution: 'Online',
    leader: 1,
    live: [1, 0],
    message: 'leader on SPU 1 (elected; the assigned leader is SPU 2)',
    elected: { from: 2, lag: 10 },
  });
});

t.test('ties go to the earlier replica; unreported offsets count as 0', async (t) => {
  t.equal(electLeader(input({ online: new Set([0, 1]) })).leader, 0, 'nobody reported: every lag is 0; 0 comes first in [2,0,1]');
  t.equal(electLeader(input({ replicas: [2, 1, 0], online: new Set([0, 1]) })).leader, 1, 'replica order, not id order');
  t.same([...replicaLags([2, 0, 1], new Map([[2, 50]]))], [
    [2, 0],
    [0, 50],
    [1, 50],
  ]);
});

t.test('a follower beyond the lag bound may not lead: LeaderOffline, the leader stays', async (t) => {
  const offsets = new Map([
    [2, 1000],
    [0, 800],
    [1, 899],
  ]);
  const r = electLeader(input({ online: new Set([0, 1]), offsets, maxLag: 100 }));
  t.same(r, {
    resolution: 'LeaderOffline',
    leader: 2,
    live: [0, 1],
    message: "the leader's SPU 2 is offline and no online follower is within 100 offsets of the log end (SPU 0 lags 200, SPU 1 lags 101)",
  });
  t.equal(electLeader(input({ online: new Set([0, 1]), offsets, maxLag: 101 })).leader, 1, 'exactly at the bound is allowed');
  t.equal(electLeader(input({ online: new Set([1]), offsets: new Map([[2, 5]]), maxLag: 0 })).resolution, 'LeaderOffline', 'bound 0: only a caught-up follower');
});

t.test('no replica online: Offline', async (t) => {
  t.same(electLeader(input({ online: new Set([7]) })), { resolution: 'Offline', leader: 2, live: [], message: 'no replica is online (replicas on SPUs 2, 0, 1)' });
});

t.test('the elected leader keeps the partition when the assigned one returns (no fail-back)', async (t) => {
  const r = electLeader(input({ currentLeader: 1 }));
  t.same([r.resolution, r.leader, r.live, r.elected], ['Online', 1, [1, 2, 0], undefined]);
});

t.test('a returning SPU regains leadership of a partition that has none', async (t) => {
  // LeaderOffline with leader 2; its followers too far behind. SPU 2 comes back.
  const offsets = new Map([
    [2, 1000],
    [0, 10],
  ]);
  const before = electLeader(input({ currentLeader: 2, online: new Set([0]), offsets }));
  t.equal(before.resolution, 'LeaderOffline');
  const back = electLeader(input({ currentLeader: before.leader, online: new Set([0, 2]), offsets }));
  t.same([back.resolution, back.leader, back.elected], ['Online', 2, undefined]);
  // Offline (nobody up); a follower within the bound returns first and takes it.
  const offline = electLeader(input({ currentLeader: 2, online: new Set(), offsets: new Map([[2, 100], [1, 60]]) }));
  t.equal(offline.resolution, 'Offline');
  const follower = electLeader(input({ currentLeader: offline.leader, online: new Set([1]), offsets: new Map([[2, 100], [1, 60]]) }));
  t.same([follower.resolution, follower.leader], ['Online', 1]);
});

t.test('a reported leader that is no longer a replica falls back to the assigned leader', async (t) => {
  t.equal(electLeader(input({ currentLeader: 9 })).leader, 2);
});
