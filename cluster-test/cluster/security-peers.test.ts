/**
 * Issue 15 (Security, part 1), "peers prove who they are": a three-node TLS cluster under a
 * light write load. Three attackers reach the one gRPC port with a raw client of the cluster
 * service:
 *   (a) TLS without a client certificate,
 *   (b) a node certificate for `n1` from another CA,
 *   (c) a valid cluster-CA node certificate for `n9`, claiming to be `n1`.
 * Against the leader and a follower, each tries Hello (the joining form), a Raft stream (a
 * heartbeat under n1's name), Forward of a write envelope and Forward of a membership change
 * adding itself as a voter. Every call is refused with UNAUTHENTICATED and counted in
 * cairn_cluster_rejected_total; the writes go on; the configuration and the data are unchanged.
 * Then a fourth real agent with a certificate from another CA (trusting both CAs, so its own
 * connections reach the cluster) and `--join` never becomes a member, while the cluster counts
 * its refused calls.
 *
 * A positive control first: the same client code with n1's own certificate claiming n1 gets
 * Hello answered, so a refusal below is the identity check, not a broken client.
 */
import * as grpc from '@grpc/grpc-js';
import { writeFile } from 'node:fs/promises';
import t from 'tap';
import { logIndex, nodeId, term } from '../../src/base/index.js';
import { encodeEnvelope } from '../../src/fsm/index.js';
import { encodeMessage, packValue } from '../../src/forwarding/index.js';
import { ARTIST, Cluster, WriteLoad, describeConfiguration, list, sleep, type ClusterNode } from './harness.js';
import { attackerClient, counter, credentials, describeCounter, forward, hello, makePkis, raftCall } from './security-attacker.js';

const artist = { group: 'demo', groupVersion: 'v1', kind: 'Artist' };
const tenancy = { partition: 'default', namespace: 'default' };

t.test('without a node certificate of the cluster naming the caller, nobody speaks Raft, forwards or joins', async (t) => {
  // n4 trusts both CAs (so it can reach the cluster's servers: what stops it must be the
  // cluster refusing its certificate, not its own refusal of theirs); its certificate is the
  // other CA's.
  const pkis = await makePkis(t, (id, { foreign }) => (id === 'n4' ? ['--tls-ca-file', `${foreign.dir}/both-cas.pem`, '--tls-cert-file', `${foreign.dir}/node-n4.pem`, '--tls-key-file', `${foreign.dir}/node-n4-key.pem`] : undefined));
  await pkis.foreign.node('n4');
  await writeFile(`${pkis.foreign.dir}/both-cas.pem`, `${pkis.foreign.ca.certPem.trim()}\n${pkis.cluster.ca.certPem.trim()}\n`, { mode: 0o600 });
  const cluster = await Cluster.start(t, { size: 3, tls: pkis.tls });
  const members = [...cluster.nodes];
  const load = new WriteLoad({ prefix: 'sp', workers: 2, targets: () => members, pauseMs: 20 }).start();
  await load.waitForMore(20);

  const { leader, followers } = await cluster.roles();
  const n1 = await pkis.cluster.node('n1');
  const control = await hello(attackerClient(t, leader.grpcAddr, credentials(pkis.cluster.ca.certPem, n1)), 'n1');
  t.equal(control.code, 0, `control: Hello with n1's own certificate claiming n1 is answered (${control.details})`);
  const clusterId = control.res?.clusterId ?? '';
  t.ok(clusterId !== '', `the attackers are given the real cluster id (${clusterId})`);
  const configBefore = await leader.configuration();
  t.comment(`configuration before: ${configBefore ? describeConfiguration(configBefore) : '?'}`);

  const foreignN1 = await pkis.foreign.node('n1', { prefix: 'foreign-n1' });
  const n9 = await pkis.cluster.node('n9');
  const attackers: { name: string; creds: grpc.ChannelCredentials }[] = [
    { name: '(a) no client certificate', creds: credentials(pkis.cluster.ca.certPem) },
    { name: '(b) an n1 certificate from another CA', creds: credentials(pkis.cluster.ca.certPem, foreignN1) },
    { name: '(c) a cluster-CA certificate for n9 claiming n1', creds: credentials(pkis.cluster.ca.certPem, n9) },
  ];

  for (const target of [followers[0] as ClusterNode, leader]) {
    const role = target === leader ? 'leader' : 'follower';
    const rejectedBefore = await counter(target, 'cairn_cluster_rejected_total');
    const termBefore = (await target.self())?.term;
    for (const a of attackers) {
      const client = attackerClient(t, target.grpcAddr, a.creds);
      const h = await hello(client, 'n1', '127.0.0.1:1');
      t.equal(h.code, grpc.status.UNAUTHENTICATED, `${a.name} -> ${role} ${target.id}: Hello refused UNAUTHENTICATED (${h.details})`);
      const r = await raftCall(client, [
        { clusterId, from: 'n1', to: target.id, messages: [encodeMessage({ type: 'heartbeat', from: nodeId('n1'), to: nodeId(target.id), term: term((termBefore ?? 1) + 50), commit: logIndex(1_000_000), readSeq: 0 })] },
      ]);
      t.equal(r.code, grpc.status.UNAUTHENTICATED, `${a.name} -> ${role}: Raft stream refused UNAUTHENTICATED (${r.details}; passed on: ${r.received ?? 0})`);
      const w = await forward(client, {
        clusterId,
        from: 'n1',
        op: 'envelope',
        envelope: encodeEnvelope(0x10, { requestId: `evil-${a.name.slice(1, 2)}-${target.id}`, time: new Date(0).toISOString(), uid: 'evil-uid', generation: 'evil-gen', id: { type: artist, tenancy, name: `evil-${target.id}` }, data: { name: 'evil' }, expectedVersion: 0 }),
      });
      t.equal(w.code, grpc.status.UNAUTHENTICATED, `${a.name} -> ${role}: Forward of a write refused UNAUTHENTICATED (${w.details})`);
      const m = await forward(client, { clusterId, from: 'n1', op: 'configChange', configChange: packValue({ type: 'add-voter', id: 'n9', address: '127.0.0.1:1' }) });
      t.equal(m.code, grpc.status.UNAUTHENTICATED, `${a.name} -> ${role}: Forward of "add n9 as a voter" refused UNAUTHENTICATED (${m.details})`);
    }
    const rejectedAfter = await counter(target, 'cairn_cluster_rejected_total');
    t.comment(`${target.id} cairn_cluster_rejected_total: before ${describeCounter(rejectedBefore)}, after ${describeCounter(rejectedAfter)}`);
    t.ok(rejectedAfter.total >= rejectedBefore.total + attackers.length * 4, `${role} ${target.id} counted every refusal (${rejectedAfter.total - rejectedBefore.total} more, expected >= ${attackers.length * 4})`);
    await load.waitForMore(10);
  }

  // The fourth agent: a node certificate for n4 from another CA, --join.
  const rejectedBeforeN4 = await counter(leader, 'cairn_cluster_rejected_total');
  const n4 = await cluster.addNode();
  t.equal(n4.id, 'n4', 'the fourth agent is n4');
  const started = Date.now();
  let lastConfig = '';
  while (Date.now() - started < 10_000) {
    const c = await leader.configuration();
    if (c) lastConfig = describeConfiguration(c);
    t.ok(c === undefined || !c.servers.some((s) => s.id === 'n4'), `n4 is not in the configuration (${lastConfig})`, { diagnostic: false });
    if (c?.servers.some((s) => s.id === 'n4')) break;
    await sleep(500);
  }
  const n4Self = await n4.self(1000);
  t.comment(`n4 after 10 s: ${n4.running() ? 'running' : `exited ${JSON.stringify(n4.lastExit())}`}, ${n4Self ? `${n4Self.role}, leader ${n4Self.leader ?? '-'}` : 'no /v1/agent/self over the cluster CA'}`);
  if (n4.running()) await n4.kill9();
  const rejectedAfterN4 = await counter(leader, 'cairn_cluster_rejected_total');
  t.comment(`${leader.id} cairn_cluster_rejected_total while n4 tried: ${describeCounter(rejectedBeforeN4)} -> ${describeCounter(rejectedAfterN4)}`);
  t.ok(rejectedAfterN4.total > rejectedBeforeN4.total, "n4's attempts reached the leader and were refused (counted)");

  await load.waitForMore(10);
  await load.stop();
  t.same(load.unknown, [], `the cluster kept serving: every write was acknowledged (${load.summary()})`);
  t.ok(load.longestGapMs() < 5000, `writes never stalled long (longest gap ${Math.round(load.longestGapMs())} ms)`);
  const leaderAfter = await cluster.waitForLeader({ among: members });
  const configAfter = await leaderAfter.configuration();
  t.same(
    configAfter?.servers.map((s) => [s.id, s.address, s.suffrage]).sort(),
    configBefore?.servers.map((s) => [s.id, s.address, s.suffrage]).sort(),
    `the configuration is unchanged (${configAfter ? describeConfiguration(configAfter) : '?'})`,
  );
  for (const n of members) {
    const { set, versionMismatches } = await load.check(n);
    t.ok(set.valid && versionMismatches.length === 0, `${n.id}: all ${set.ok} acknowledged writes kept with their versions, nothing unexpected`);
    const all = await list(n, ARTIST);
    t.same([...all.keys()].filter((k) => k.includes('evil')), [], `${n.id}: no forwarded write of the attackers was applied`);
  }
});
