/**
 * Issue 15 (Security, part 1), "only members speak Raft": a three-node TLS cluster under a
 * light write load. An authenticated non-member (a valid cluster-CA certificate for node `n9`,
 * which is not in the configuration, speaking as itself) opens Raft streams to a follower and
 * to the leader and sends what would depose the leader or replace a follower's state:
 *   - `timeout-now` at the current term (a leadership transfer order),
 *   - a transfer-flagged `vote` with a term 1,000 above the current one,
 *   - a crafted `snap` chunk (meta index 1,000,000, a configuration of n9 alone), complete in
 *     one chunk.
 * The port takes them off the wire (the caller proved who it is), the replica's member filter
 * drops them: cairn_raft_messages_dropped_total{reason="non-member"} grows by 3 on each target,
 * the leader is the same with the same term, and every node holds exactly the acknowledged
 * writes.
 */
import t from 'tap';
import { logIndex, nodeId, term } from '../../src/base/index.js';
import { encodeMessage } from '../../src/forwarding/index.js';
import { ARTIST, Cluster, WriteLoad, list, sleep, type ClusterNode } from './harness.js';
import { attackerClient, counter, credentials, describeCounter, hello, makePkis, raftCall } from './security-attacker.js';

const DROPPED = 'cairn_raft_messages_dropped_total';

t.test("a non-member's timeout-now, high-term transfer vote and snapshot are dropped; the leader stays", async (t) => {
  const pkis = await makePkis(t);
  const cluster = await Cluster.start(t, { size: 3, tls: pkis.tls });
  const load = new WriteLoad({ prefix: 'sr', workers: 2, targets: () => cluster.running(), pauseMs: 20 }).start();
  await load.waitForMore(20);
  const { leader, followers } = await cluster.roles();
  const before = await leader.self();
  if (!before) throw new Error('the leader does not answer /v1/agent/self');
  t.comment(`leader ${leader.id}, term ${before.term}, commit ${before.commitIndex}`);
  const n9 = await pkis.cluster.node('n9');
  const creds = credentials(pkis.cluster.ca.certPem, n9);

  for (const target of [followers[0] as ClusterNode, leader]) {
    const role = target === leader ? 'leader' : 'follower';
    const client = attackerClient(t, target.grpcAddr, creds);
    const h = await hello(client, 'n9');
    t.equal(h.code, 0, `n9 is authenticated: its Hello to ${role} ${target.id} is answered (${h.details})`);
    const clusterId = h.res?.clusterId ?? '';
    const cur = (await target.self())?.term ?? before.term;
    const droppedBefore = await counter(target, DROPPED);
    const from = nodeId('n9');
    const to = nodeId(target.id);
    const sent = await raftCall(client, [
      {
        clusterId,
        from: 'n9',
        to: target.id,
        messages: [
          encodeMessage({ type: 'timeout-now', from, to, term: term(cur) }),
          encodeMessage({ type: 'vote', from, to, term: term(cur + 1000), lastIndex: logIndex(1_000_000), lastTerm: term(cur + 1000), transfer: true }),
          encodeMessage({
            type: 'snap',
            from,
            to,
            term: term(cur),
            meta: { index: logIndex(1_000_000), term: term(cur), config: { members: [{ id: from, address: '127.0.0.1:1', suffrage: 'voter' }] } },
            offset: 0,
            totalBytes: 4,
            chunk: new Uint8Array([1, 2, 3, 4]),
          }),
        ],
      },
    ]);
    t.equal(sent.code, 0, `${role} ${target.id}: the authenticated stream is served (${sent.details})`);
    t.equal(sent.received, 3, `${role}: the three well-formed messages were taken off the wire (${sent.received ?? 0})`);
    // The driver counts a drop when it receives the message: poll a moment for the counter.
    let droppedAfter = await counter(target, DROPPED);
    for (let i = 0; i < 20 && droppedAfter.total < droppedBefore.total + 3; i++) {
      await sleep(100);
      droppedAfter = await counter(target, DROPPED);
    }
    t.comment(`${target.id} ${DROPPED}: before ${describeCounter(droppedBefore)}, after ${describeCounter(droppedAfter)}`);
    t.equal((droppedAfter.by.get('reason="non-member"') ?? 0) - (droppedBefore.by.get('reason="non-member"') ?? 0), 3, `${role} ${target.id}: all three dropped as from a non-member`);
    await load.waitForMore(10);
  }

  // Give a believed timeout-now or vote the time to act (an election takes well under 2 s here).
  await sleep(2000);
  await load.waitForMore(10);
  await load.stop();
  const after = await leader.self();
  t.equal(after?.role, 'leader', `${leader.id} is still the leader`);
  t.equal(after?.term, before.term, `its term is unchanged (${after?.term ?? '?'})`);
  for (const n of cluster.nodes) {
    const s = await n.self();
    t.equal(s?.leader, leader.id, `${n.id} follows ${leader.id} (term ${s?.term ?? '?'})`);
    t.ok((s?.term ?? 0) < before.term + 1000, `${n.id} did not adopt the non-member's term`);
  }
  t.same(load.unknown, [], `every write was acknowledged (${load.summary()})`);
  const views = await Promise.all(cluster.nodes.map((n) => list(n, ARTIST)));
  for (const [i, n] of cluster.nodes.entries()) {
    const { set, versionMismatches } = await load.check(n);
    t.ok(set.valid && versionMismatches.length === 0, `${n.id}: all ${set.ok} acknowledged writes kept with their versions`);
    t.equal(JSON.stringify([...(views[i] ?? new Map())].sort()), JSON.stringify([...(views[0] ?? new Map())].sort()), `${n.id} holds exactly what n1 holds (no snapshot replaced its state)`);
  }
});
