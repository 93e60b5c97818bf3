import t from 'tap';
import { decideLiveness, spuIdConflicts, type LivenessInput } from './liveness.js';

const base: LivenessInput = { heartbeat: undefined, memory: undefined, reported: 'Init', nowMs: 1_000, timeoutMs: 10_000 };

t.test('no heartbeat ever: Init, nothing remembered, nothing to re-check', async (t) => {
  t.same(decideLiveness(base), { resolution: 'Init', message: 'no heartbeat yet', memory: undefined });
});

t.test('a heartbeat seen for the first time gives a full timeout of grace', async (t) => {
  const d = decideLiveness({ ...base, heartbeat: 'h1' });
  t.same(d, { resolution: 'Online', message: 'heartbeats arriving (timeout 10000 ms)', memory: { token: 'h1', seenAtMs: 1_000 }, recheckAfterMs: 10_000 });
  const online = decideLiveness({ ...base, heartbeat: 'h1', reported: 'Online' });
  t.equal(online.resolution, 'Online', 'a new controller does not declare a reported-Online SPU dead at once');
  t.equal(online.recheckAfterMs, 10_000);
});

t.test('the same token past the timeout is Offline; just before it, Online with the time left', async (t) => {
  const memory = { token: 'h1', seenAtMs: 1_000 };
  const before = decideLiveness({ ...base, heartbeat: 'h1', memory, reported: 'Online', nowMs: 10_999 });
  t.same([before.resolution, before.recheckAfterMs], ['Online', 1]);
  const at = decideLiveness({ ...base, heartbeat: 'h1', memory, reported: 'Online', nowMs: 11_000 });
  t.same(at, { resolution: 'Offline', message: 'no heartbeat for 10000 ms', memory });
  t.equal(at.recheckAfterMs, undefined, 'an Offline SPU waits for its next heartbeat (an event), not a timer');
});

t.test('a new token resets the clock: Online again, re-checked a timeout later', async (t) => {
  const d = decideLiveness({ ...base, heartbeat: 'h2', memory: { token: 'h1', seenAtMs: 1_000 }, reported: 'Offline', nowMs: 50_000 });
  t.same(d, { resolution: 'Online', message: 'heartbeats arriving (timeout 10000 ms)', memory: { token: 'h2', seenAtMs: 50_000 }, recheckAfterMs: 10_000 });
});

t.test('a reported-Offline SPU seen first by a new controller stays Offline until its token moves', async (t) => {
  const first = decideLiveness({ ...base, heartbeat: 'h1', reported: 'Offline', nowMs: 5_000 });
  t.equal(first.resolution, 'Offline');
  t.equal(first.memory?.seenAtMs, Number.NEGATIVE_INFINITY);
  const again = decideLiveness({ ...base, heartbeat: 'h1', memory: first.memory, reported: 'Offline', nowMs: 5_001 });
  t.equal(again.resolution, 'Offline', 'still the same token');
  const moved = decideLiveness({ ...base, heartbeat: 'h2', memory: first.memory, reported: 'Offline', nowMs: 6_000 });
  t.equal(moved.resolution, 'Online');
});

t.test('messages do not depend on the time, so a re-check that changes nothing writes nothing', async (t) => {
  const memory = { token: 'h1', seenAtMs: 0 };
  const a = decideLiveness({ ...base, heartbeat: 'h1', memory, nowMs: 1 });
  const b = decideLiveness({ ...base, heartbeat: 'h1', memory, nowMs: 9_000 });
  t.equal(a.message, b.message);
  const c = decideLiveness({ ...base, heartbeat: 'h1', memory, nowMs: 20_000 });
  const d = decideLiveness({ ...base, heartbeat: 'h1', memory, nowMs: 90_000 });
  t.equal(c.message, d.message);
});

t.test('an SPU whose id is taken stays Init whatever its heartbeat, but its heartbeat is still tracked', async (t) => {
  const d = decideLiveness({ ...base, heartbeat: 'h1', conflict: 'id 1 is already used by SPU a' });
  t.same(d, { resolution: 'Init', message: 'id 1 is already used by SPU a', memory: { token: 'h1', seenAtMs: 1_000 } });
});

t.test('id conflicts: the SPU created first (smallest ULID) keeps the id', async (t) => {
  const conflicts = spuIdConflicts([
    { name: 'b', uid: '01B', id: 1 },
    { name: 'a', uid: '01A', id: 1 },
    { name: 'c', uid: '01C', id: 1 },
    { name: 'd', uid: '01D', id: 2 },
  ]);
  t.same([...conflicts.keys()].sort(), ['b', 'c']);
  t.match(conflicts.get('b'), /^id 1 is already used by SPU a, created earlier/);
  t.same(spuIdConflicts([{ name: 'a', uid: '1', id: 0 }, { name: 'b', uid: '2', id: 1 }]).size, 0);
});
