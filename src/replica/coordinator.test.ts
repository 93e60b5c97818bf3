/**
 * The coordinator's retries across a failover: an operation that no leader accepted is tried
 * again as soon as this node's role or known leader changes, not at the next step of its
 * backoff; and never past its deadline. The backoff here is a minute, so "as soon as" needs
 * no timing: with the backoff alone these operations would still be waiting when the test
 * gives up.
 */
import t from 'tap';
import { CairnError, ErrorCode, type NodeId } from '../base/index.js';
import { CommandType, encodeEnvelope } from '../fsm/index.js';
import { Coordinator } from './coordinator.js';
import type { Forwarder } from './ports.js';
import { LocalCluster, type LocalNode } from './testing/index.js';

const artist = { group: 'demo', groupVersion: 'v1', kind: 'Artist' };
const tenancy = { partition: 'default', namespace: 'default' };
const MINUTE = { initial: 60_000, max: 60_000 };

function writeBody(name: string): Record<string, unknown> {
  return { time: '2026-11-21T10:00:00.000Z', uid: `uid-${name}`, generation: `gen-${name}`, id: { type: artist, tenancy, name }, data: { name } };
}

/** Forwarding inside the process: to the named node's replica, or UNAVAILABLE if it is gone. */
function localForwarder(c: LocalCluster): Forwarder {
  return {
    forward: (leader: NodeId, op, timeoutMs) => {
      const n = c.nodes.get(leader);
      if (!n || n.replica.stopped) return Promise.reject(new CairnError(ErrorCode.UNAVAILABLE, `leader ${leader} is unreachable`));
      if (op.kind !== 'envelope') return Promise.reject(new Error(`unexpected ${op.kind}`));
      return n.coordinator.proposeLocal(op.envelope, timeoutMs);
    },
  };
}

/** Settles with `p`, or with 'still waiting' after `ms`. */
function within<T>(p: Promise<T>, ms: number): Promise<T | 'still waiting'> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<'still waiting'>((resolve) => {
    timer = setTimeout(() => resolve('still waiting'), ms);
  });
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

t.test('a write held by a follower across a failover goes on as soon as a new leader is known', async (t) => {
  const c = new LocalCluster({ seed: 5 });
  t.teardown(() => c.close());
  await c.bootstrap(['n1', 'n2', 'n3']);
  const leader = await c.waitForLeader();
  const follower = [...c.nodes.values()].find((n) => n.id !== leader.id) as LocalNode;
  const coordinator = new Coordinator(follower.replica, follower.fsm, { forwarder: localForwarder(c), retryBackoffMs: MINUTE });
  await c.crash(leader.id);
  // The first attempt goes to the dead leader and fails; the next waits for a role change
  // (the follower campaigns, or hears from the new leader) instead of a minute.
  const result = await within(coordinator.propose(CommandType.ResourceWrite, writeBody('after-failover'), 30_000), 15_000);
  t.not(result, 'still waiting', 'the write was not left waiting out the backoff');
  if (result !== 'still waiting') t.ok(result.ok, 'and it was applied');
  const newLeader = await c.waitForLeader();
  t.not(newLeader.id, leader.id, `${newLeader.id} leads`);
});

t.test('with no leader to be had, an operation fails at its deadline, not after the backoff', async (t) => {
  const c = new LocalCluster({ seed: 6 });
  t.teardown(() => c.close());
  await c.bootstrap(['n1', 'n2', 'n3']);
  const leader = await c.waitForLeader();
  const [a, b] = [...c.nodes.values()].filter((n) => n.id !== leader.id) as [LocalNode, LocalNode];
  const coordinator = new Coordinator(a.replica, a.fsm, { forwarder: localForwarder(c), retryBackoffMs: MINUTE });
  await c.crash(leader.id);
  await c.crash(b.id); // a alone: no quorum, no leader
  const result = await within(
    coordinator.propose(CommandType.ResourceWrite, writeBody('no-quorum'), 500).then(
      () => 'applied',
      (e: unknown) => (e instanceof CairnError ? e.code : String(e)),
    ),
    15_000,
  );
  t.ok(result === ErrorCode.UNAVAILABLE || result === ErrorCode.TIMEOUT, `it failed with ${result}, not after a minute's backoff`);
});

t.test('onStepTimed: each linearizable read-index wait and each proposal this node leads is timed, once; failures and stale reads are not', async (t) => {
  const c = new LocalCluster({ seed: 7 });
  t.teardown(() => c.close());
  await c.bootstrap(['n1', 'n2', 'n3']);
  const leader = await c.waitForLeader();
  const follower = [...c.nodes.values()].find((n) => n.id !== leader.id) as LocalNode;
  const told: { step: string; seconds: number }[] = [];
  const onStepTimed = (step: 'read-index' | 'proposal', seconds: number): void => {
    told.push({ step, seconds });
  };
  const onLeader = new Coordinator(leader.replica, leader.fsm, { onStepTimed });
  const r = await onLeader.propose(CommandType.ResourceWrite, writeBody('timed'));
  t.ok(r.ok);
  t.same(told.map((x) => x.step), ['proposal'], 'a local proposal');
  await onLeader.read('linearizable', (s) => s.revision);
  t.same(told.map((x) => x.step), ['proposal', 'read-index'], 'a linearizable read');
  await onLeader.read('stale', (s) => s.revision);
  t.equal(told.length, 2, 'a stale read asks nobody');
  await onLeader.proposeLocal(encodeEnvelope(CommandType.ResourceWrite, writeBody('forwarded')), 5_000);
  t.same(told.map((x) => x.step), ['proposal', 'read-index', 'proposal'], "a follower's forwarded proposal, timed on the leader");
  for (const x of told) t.ok(Number.isFinite(x.seconds) && x.seconds >= 0 && x.seconds < 10, `${x.step}: ${x.seconds} s`);
  const onFollower = new Coordinator(follower.replica, follower.fsm, { onStepTimed });
  await t.rejects(onFollower.propose(CommandType.ResourceWrite, writeBody('refused')), { code: ErrorCode.NOT_LEADER });
  t.equal(told.length, 3, 'a proposal that failed is not timed');
});
