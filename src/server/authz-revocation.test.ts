import { mkdtemp, rm } from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import t from 'tap';
import { makeTestPki } from '../auth/testing/index.js';
import { createLogger } from '../platform/index.js';
import { startAgent, type Agent } from './agent.js';
import { closeHttpsAgents, httpsRequest, pollUntil, READER_RULES } from './testing/index.js';
import { clusterConfigs } from './testing/agents.js';

/**
 * Issue 16: "a revoked token is refused on every node within one second (state the measured
 * delay)". Three agents in this process, TLS and ACLs on; a token is deleted through one node and
 * every node is polled (every 2 ms) until it refuses the token. Each node decides from its own
 * applied copy of the ACL resources, so the delay is the time for the revocation to commit and
 * apply there. Five rounds, revoking through the leader and through a follower in turn.
 */

t.test('a revoked token is refused on every node of a 3-node cluster within one second (measured)', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'cairn-revoke-'));
  const pki = await makeTestPki({ dir: await mkdtemp(path.join(os.tmpdir(), 'cairn-revoke-pki-')) });
  const agents: Agent[] = [];
  t.teardown(async () => {
    for (const a of agents) await a.close();
    closeHttpsAgents();
    await rm(dir, { recursive: true, force: true });
    await pki.cleanup();
  });
  const configs = await clusterConfigs(dir, 3, { acl: true, logLevel: 'silent' });
  for (const cfg of configs) {
    const files = await pki.node(cfg.nodeId);
    agents.push(await startAgent({ ...cfg, tlsCaFile: files.caFile, tlsCertFile: files.certFile, tlsKeyFile: files.keyFile }, { logger: createLogger({ level: 'silent', nodeId: cfg.nodeId }) }));
  }
  await Promise.all(agents.map((a) => a.ready));
  await pollUntil(() => agents.some((a) => a.coordinator()?.status().role === 'leader'), 15_000, 'a leader');
  const ca = Buffer.from(pki.ca.certPem);
  const http = (a: Agent, method: string, p: string, token?: string, body?: unknown): ReturnType<typeof httpsRequest> =>
    httpsRequest(a.httpAddress, ca, method, p, { token, ...(body !== undefined ? { body: JSON.stringify(body) } : {}) });
  const leader = (): Agent => agents.find((a) => a.coordinator()?.status().role === 'leader') as Agent;
  const b = await http(leader(), 'POST', '/v1/acl/bootstrap', undefined, {});
  t.equal(b.status, 200, 'bootstrapped');
  const management = (b.json as { secret_id: string }).secret_id;
  t.equal((await http(leader(), 'PUT', '/v1/acl/roles/reader', management, { rules: READER_RULES })).status, 200);

  const delays: number[] = [];
  for (let round = 0; round < 5; round++) {
    const made = await http(leader(), 'POST', '/v1/acl/tokens', management, { roles: ['reader'] });
    const { secret_id: secret, accessor_id: accessor } = made.json as { secret_id: string; accessor_id: string };
    const probe = '/v1/acl/token/self';
    // Valid everywhere first (followers apply the token's creation a moment later).
    await Promise.all(agents.map((a) => pollUntil(async () => (await http(a, 'GET', probe, secret)).status === 200, 5000, `the token on ${a.nodeId}`)));
    const via = round % 2 === 0 ? leader() : (agents.find((a) => a !== leader()) as Agent);
    const start = performance.now();
    const del = http(via, 'DELETE', `/v1/acl/tokens/${accessor}`, management);
    const perNode = await Promise.all(
      agents.map(async (a) => {
        await pollUntil(async () => (await http(a, 'GET', probe, secret)).status === 401, 5000, `revocation on ${a.nodeId}`, 2);
        return performance.now() - start;
      }),
    );
    t.equal((await del).status, 200, `round ${round}: revoked through ${via === leader() ? 'the leader' : 'a follower'}`);
    const worst = Math.max(...perNode);
    delays.push(worst);
    t.comment(`round ${round} (via ${via.nodeId}${via === leader() ? ', leader' : ', follower'}): refused after ${agents.map((a, i) => `${a.nodeId} ${(perNode[i] as number).toFixed(0)} ms`).join(', ')}`);
    t.ok(worst < 1000, `round ${round}: refused on every node within one second (${worst.toFixed(0)} ms)`);
  }
  delays.sort((x, y) => x - y);
  t.comment(`revocation -> refused on all 3 nodes: median ${(delays[2] as number).toFixed(0)} ms, max ${(delays[4] as number).toFixed(0)} ms over 5 rounds (measured from sending the DELETE)`);
});
