import { mkdtemp, rm } from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { createLogger } from '../../platform/index.js';
import { startAgent, type Agent } from '../agent.js';
import type { AgentConfig } from '../config.js';
import { clusterConfigs } from './agents.js';
import { waitForAgreedLeader } from './leader.js';

/**
 * `n` agents in this process forming one cluster (`clusterConfigs`, demo types, silent logs) in
 * a fresh temporary directory, ready and agreed on a leader. At teardown every agent still in
 * `agents` is closed and the directory removed: a test that closes one itself takes it out of
 * `agents` (so the teardown does not close it twice).
 */
export async function startTestCluster(
  t: { teardown(fn: () => Promise<void>): void },
  n: number,
  prefix: string,
  overrides: Partial<AgentConfig> = {},
): Promise<{ agents: Agent[]; leader: Agent; dir: string }> {
  const dir = await mkdtemp(path.join(os.tmpdir(), prefix));
  const agents: Agent[] = [];
  t.teardown(async () => {
    for (const a of agents) await a.close();
    await rm(dir, { recursive: true, force: true });
  });
  for (const cfg of await clusterConfigs(dir, n, { demoTypes: true, ...overrides })) agents.push(await startAgent(cfg, { logger: createLogger({ level: 'silent', nodeId: cfg.nodeId }) }));
  await Promise.all(agents.map((a) => a.ready));
  return { agents, leader: await waitForAgreedLeader(agents, 15_000), dir };
}
