import t from 'tap';
import { mkdtemp, rm } from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { nodeId } from '../base/index.js';
import { ClientPool } from '../forwarding/index.js';
import { createLogger } from '../platform/index.js';
import { startAgent, type Agent } from './agent.js';
import { advertisedHttpAddress, PeerHttpAddresses } from './peer-http.js';
import { clusterConfigs, freePort, waitForAgreedLeader } from './testing/index.js';

/**
 * Issue 14, item 9 ("the contract and the code agree"), on a three-node cluster in this
 * process: `GET /v1/status/leader` names the leader's gRPC and HTTP addresses on every node
 * (a follower learns the leader's HTTP address with Hello); the request and proposal counters
 * count on the node that took the request; error details have their one shape over HTTP.
 */

const ARTIST = 'demo.v1.Artist';

interface LeaderJson {
  id: string;
  address: string;
  grpc_address: string;
  http_address: string | null;
}

/** The value of a Prometheus sample (`name{labels} value`), summed over the label sets that contain `labels`. */
function sample(text: string, name: string, labels: string): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    const m = /^([a-z_]+)(\{[^}]*\})? ([0-9.e+-]+)$/.exec(line);
    if (m && m[1] === name && (m[2] ?? '').includes(labels)) sum += Number(m[3]);
  }
  return sum;
}

t.test('a three-node cluster: leader addresses, counters and error details', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'cairn-contract-'));
  const agents: Agent[] = [];
  t.teardown(async () => {
    await Promise.all(agents.map((a) => a.close()));
    await rm(dir, { recursive: true, force: true });
  });
  // One leader throughout: an election timeout of 2-4 s (100 ticks of 20 ms), not 200-400 ms, so
  // a stalled node on a loaded machine does not pre-vote (and forget the leader) mid-test (CI flake:
  // a follower answered "no leader is known right now" just after all three had agreed).
  for (const cfg of await clusterConfigs(dir, 3, { electionTicks: 100 })) agents.push(await startAgent(cfg, { logger: createLogger({ level: 'warn', nodeId: cfg.nodeId }) }));
  await Promise.all(agents.map((a) => a.ready));
  // Every node must name the same leader (in one term), not merely some leader: just after an
  // election a follower may still name the deposed one, and GET /v1/status/leader would differ.
  const leader = await waitForAgreedLeader(agents, 15_000);
  const follower = agents.find((a) => a !== leader) as Agent;

  await t.test('GET /v1/status/leader names the leader and both its addresses, on every node', async (t) => {
    for (const a of agents) {
      const res = await fetch(`http://${a.httpAddress}/v1/status/leader`);
      t.equal(res.status, 200);
      t.same(
        (await res.json()) as LeaderJson,
        { id: leader.nodeId, address: leader.grpcAddress, grpc_address: leader.grpcAddress, http_address: leader.httpAddress },
        `asked on ${a.nodeId} (${a === leader ? 'the leader' : 'a follower'})`,
      );
    }
    // What it names works: the HTTP API answers at http_address, the gRPC API at grpc_address.
    const named = (await (await fetch(`http://${follower.httpAddress}/v1/status/leader`)).json()) as LeaderJson;
    const self = (await (await fetch(`http://${named.http_address ?? ''}/v1/agent/self`)).json()) as { id: string; role: string };
    t.same([self.id, self.role], [leader.nodeId, 'leader'], 'http_address is the leader HTTP API');
  });

  await t.test('after writes over HTTP, /metrics counts the requests and proposals of the node that took them', async (t) => {
    for (const a of [leader, follower]) {
      const before = await (await fetch(`http://${a.httpAddress}/metrics`)).text();
      const put = await fetch(`http://${a.httpAddress}/v1/resource/${ARTIST}/metrics-${a.nodeId}`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ data: { name: 'm' } }) });
      t.equal(put.status, 200);
      const conflict = await fetch(`http://${a.httpAddress}/v1/resource/${ARTIST}/metrics-${a.nodeId}`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ data: { name: 'm2' }, version: '0' }) });
      t.equal(conflict.status, 409);
      const text = await (await fetch(`http://${a.httpAddress}/metrics`)).text();
      const who = a === leader ? 'the leader' : 'a follower';
      t.equal(sample(text, 'cairn_http_requests_total', 'method="PUT",status="200"') - sample(before, 'cairn_http_requests_total', 'method="PUT",status="200"'), 1, `${who}: one PUT answered 200`);
      t.equal(sample(text, 'cairn_http_requests_total', 'method="PUT",status="409"') - sample(before, 'cairn_http_requests_total', 'method="PUT",status="409"'), 1, `${who}: one PUT answered 409`);
      t.ok(sample(text, 'cairn_http_requests_total', 'method="GET",status="200"') > 0, `${who}: the GET of /metrics before was counted`);
      t.equal(sample(text, 'cairn_proposals_total', 'outcome="ok"') - sample(before, 'cairn_proposals_total', 'outcome="ok"'), 1, `${who}: one proposal applied`);
      t.equal(sample(text, 'cairn_proposals_total', 'outcome="refused"') - sample(before, 'cairn_proposals_total', 'outcome="refused"'), 1, `${who}: one proposal refused by the state machine (create-only on an existing name)`);
      if (a === follower) t.ok(sample(text, 'cairn_forwarded_requests_total', '') >= 2, 'the follower forwarded both to the leader');
    }
  });

  await t.test('error details over HTTP: snake_case, versions as decimal strings', async (t) => {
    const put = await fetch(`http://${follower.httpAddress}/v1/resource/${ARTIST}/details`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ data: { name: 'd' } }) });
    const created = (await put.json()) as { version: string };
    const cas = await fetch(`http://${follower.httpAddress}/v1/resource/${ARTIST}/details`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ data: { name: 'd2' }, version: '1' }) });
    t.equal(cas.status, 409);
    const casBody = (await cas.json()) as { error: Record<string, unknown> };
    t.same(Object.keys(casBody.error).sort(), ['actual', 'code', 'expected', 'message']);
    t.same([casBody.error['code'], casBody.error['expected'], casBody.error['actual']], ['CAS_FAILED', '1', created.version]);
    const gv = await fetch(`http://${follower.httpAddress}/v1/resource/demo.v2.Artist/details`);
    t.equal(gv.status, 400);
    const gvBody = (await gv.json()) as { error: Record<string, unknown> };
    t.same({ ...gvBody.error, message: undefined }, { code: 'GROUP_VERSION_MISMATCH', stored_type: ARTIST, requested_type: 'demo.v2.Artist', message: undefined });
  });
});

t.test('a peer whose HTTP address cannot be learned is unknown, not guessed', async (t) => {
  const pool = new ClientPool();
  t.teardown(() => pool.close());
  const peers = new PeerHttpAddresses({ self: nodeId('me'), ownHttpAddress: () => '127.0.0.1:7501', pool, clusterId: () => 'c', advertiseAddr: '127.0.0.1:7500', helloTimeoutMs: 300 });
  t.equal(await peers.lookup(nodeId('me'), '127.0.0.1:7500'), '127.0.0.1:7501', 'its own');
  t.equal(await peers.lookup(nodeId('gone'), `127.0.0.1:${await freePort()}`), undefined, 'nothing listens there');
});

t.test('a wildcard HTTP host is advertised with the gRPC advertise host', async (t) => {
  t.equal(advertisedHttpAddress('127.0.0.1:7501', '10.0.0.5:7500'), '127.0.0.1:7501');
  t.equal(advertisedHttpAddress('0.0.0.0:7501', '10.0.0.5:7500'), '10.0.0.5:7501');
  t.equal(advertisedHttpAddress('[::]:7501', 'node-1.cairn:7500'), 'node-1.cairn:7501');
  t.equal(advertisedHttpAddress('[::1]:7501', '[::1]:7500'), '[::1]:7501');
});
