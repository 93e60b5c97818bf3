import type { Agent } from '../agent.js';
import { waitUntil } from './net.js';

/**
 * The leader every running agent agrees on: one agent calls itself leader and every agent names
 * it as leader in the same term. "Some agent calls itself leader" is not enough: just after an
 * election (and on a loaded machine, after a stall) a deposed leader still calls itself leader
 * for a while, and followers may not know the new one yet (the agent test's CI flake).
 */
export function agreedLeader(agents: readonly Agent[]): Agent | undefined {
  const sts = agents.map((a) => a.coordinator()?.status());
  let found: Agent | undefined;
  for (let i = 0; i < agents.length; i++) {
    const st = sts[i];
    if (st?.role !== 'leader') continue;
    if (sts.every((s) => s !== undefined && s.leader === st.id && s.term === st.term)) found = agents[i];
  }
  return found;
}

/** Waits (polling, up to `ms`) for a leader all `agents` agree on, and returns it. */
export async function waitForAgreedLeader(agents: readonly Agent[], ms: number): Promise<Agent> {
  let leader: Agent | undefined;
  await waitUntil(() => (leader = agreedLeader(agents)) !== undefined, ms, `a leader all of ${agents.map((a) => a.nodeId).join(', ')} agree on in one term`);
  return leader as Agent;
}
