import t from 'tap';
import { mkdtemp, rm } from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { startSingleAgent, type AgentProcess } from './agent-process.js';
import { httpTarget } from './http-target.js';
import { resourceApiConformance } from './suite.js';

// Target (b): one agent (`bin/cairn agent --bootstrap --demo-types`, its own process) over HTTP.
const dir = await mkdtemp(path.join(os.tmpdir(), 'cairn-conformance-'));
let started: AgentProcess | undefined;
t.teardown(async () => {
  await started?.stop();
  await rm(dir, { recursive: true, force: true });
});
const agent = await startSingleAgent(path.join(dir, 'n1'));
started = agent;

resourceApiConformance(t, httpTarget(`one agent over HTTP (${agent.httpAddress})`, agent.httpAddress));

t.test('the agent is still running and logged no errors', async (t) => {
  t.equal(agent.exitStatus(), undefined, 'still running');
  const errors = agent.errorLines();
  t.same(errors, [], `no error-level log lines${errors.length > 0 ? `:\n${errors.slice(0, 10).join('\n')}` : ''}`);
});
