import t from 'tap';
import { mkdtemp, rm } from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { roleOf, startCluster, type AgentProcess } from './agent-process.js';
import { httpTarget, rawHttp } from './http-target.js';
import { resourceApiConformance } from './suite.js';

// Target (c): a three-node cluster (--bootstrap-expect 3, each agent its own process), every
// request sent over HTTP to a follower, which forwards writes and linearizable reads.
const dir = await mkdtemp(path.join(os.tmpdir(), 'cairn-conformance-'));
let started: AgentProcess[] = [];
t.teardown(async () => {
  await Promise.all(started.map((a) => a.stop()));
  await rm(dir, { recursive: true, force: true });
});
// A 2-4 s election timeout (100 ticks of 20 ms): the suite takes a while, and with the default
// 200-400 ms a stall of one agent process on a loaded machine was an election, which could make
// the target the leader (the check at the end fails) or move the leader under a case.
const agents = await startCluster(dir, 3, { electionTicks: 100 });
started = agents;

let follower: AgentProcess | undefined;
for (let i = 0; i < 100 && follower === undefined; i++) {
  for (const a of agents) if ((await roleOf(a)) === 'follower') follower = a;
  if (follower === undefined) await new Promise((r) => setTimeout(r, 50));
}
if (follower === undefined) throw new Error('no follower found in the three-node cluster');
const target = follower;
t.comment(`sending every request to follower ${target.nodeId} (${target.httpAddress})`);

resourceApiConformance(t, httpTarget(`follower ${target.nodeId} of a three-node cluster over HTTP`, target.httpAddress));

t.test('afterwards: the follower is still a follower, every node is up, and all nodes hold the same resources', async (t) => {
  t.equal(await roleOf(target), 'follower', `${target.nodeId} stayed a follower throughout (else some cases were served by a leader)`);
  for (const a of agents) t.equal(a.exitStatus(), undefined, `${a.nodeId} is running`);
  const views: string[] = [];
  for (const a of agents) {
    const parts: string[] = [];
    for (const type of ['demo.Artist', 'demo.Album', 'demo.RecordLabel', 'demo.Executive']) {
      const q = type === 'demo.Executive' ? '' : type === 'demo.RecordLabel' ? '?partition=*' : '?partition=*&namespace=*';
      const r = await rawHttp(`http://${a.httpAddress}`, { method: 'GET', path: `/v1/resources/${type}${q}` });
      t.equal(r.status, 200, `${a.nodeId} lists ${type}`);
      parts.push(JSON.stringify((r.json as { resources: unknown[] }).resources));
    }
    views.push(parts.join('\n'));
  }
  t.equal(views[1], views[0], 'n2 holds what n1 holds');
  t.equal(views[2], views[0], 'n3 holds what n1 holds');
  for (const a of agents) {
    const errors = a.errorLines();
    t.same(errors, [], `${a.nodeId}: no error-level log lines${errors.length > 0 ? `:\n${errors.slice(0, 10).join('\n')}` : ''}`);
  }
});
