/**
 * Cairn's operator API as the nemeses use it (docs/api.md "Cluster and operations"): who leads,
 * the Raft configuration, removing and adding a peer, leadership transfer. Every call goes to
 * the leader when one is known (any node would forward it), over the bridge from the root
 * namespace, so a partition between the nodes never cuts the harness off.
 */
import { performance } from 'node:perf_hooks';
import type { Host, Hosts } from './hosts.js';

export interface Server {
  readonly id: string;
  readonly address: string;
  readonly suffrage: 'voter' | 'learner';
}

/** A node that can answer: running and not paused. */
function live(h: Host): boolean {
  return h.running() && !h.paused;
}

/** The current leader as some reachable node reports it, or undefined. */
export async function findLeader(hosts: Hosts): Promise<Host | undefined> {
  const answers = await Promise.all(
    hosts.hosts.map(async (h) => {
      if (!live(h)) return undefined;
      try {
        const r = await h.fetch('/v1/agent/self', { signal: AbortSignal.timeout(1000) });
        const b = (await r.json()) as { role?: unknown; leader?: unknown; term?: unknown };
        return b.role === 'leader' ? { id: h.id, term: Number(b.term) } : undefined;
      } catch {
        return undefined;
      }
    }),
  );
  // Two nodes may both think they lead for a moment after a partition: the higher term is real.
  const best = answers.filter((a) => a !== undefined).sort((a, b) => b.term - a.term)[0];
  return best === undefined ? undefined : hosts.hosts.find((h) => h.id === best.id);
}

export interface Answer {
  readonly status: number;
  readonly body: unknown;
}

/** One HTTP call to a node; a network error or timeout is status 0 with the message as body. */
export async function call(h: Host, method: 'GET' | 'POST' | 'DELETE', route: string, body?: unknown, timeoutMs = 5000): Promise<Answer> {
  try {
    const r = await h.fetch(route, {
      method,
      signal: AbortSignal.timeout(timeoutMs),
      // The API takes POST only as application/json, with a body or without.
      ...(method === 'POST' || body !== undefined ? { headers: { 'content-type': 'application/json' } } : {}),
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    const text = await r.text();
    let parsed: unknown = text;
    try {
      parsed = JSON.parse(text);
    } catch {
      // not JSON: keep the text
    }
    return { status: r.status, body: parsed };
  } catch (e) {
    return { status: 0, body: e instanceof Error ? e.message : String(e) };
  }
}

/** The error code of an answer (`{"error": {"code"}}`), or its status. */
export function codeOf(a: Answer): string {
  const err = (a.body as { error?: { code?: unknown } } | null)?.error;
  if (typeof err?.code === 'string') return err.code;
  return a.status === 0 ? `network: ${String(a.body)}` : `HTTP ${a.status}`;
}

/** Where to send an operator call: the leader, else any live node other than `not`. */
async function entry(hosts: Hosts, not?: Host): Promise<Host | undefined> {
  const leader = await findLeader(hosts);
  if (leader !== undefined && leader !== not) return leader;
  return hosts.hosts.find((h) => h !== not && live(h));
}

/** The configuration as the leader sees it, or undefined when no leader answers. */
export async function configuration(hosts: Hosts): Promise<Server[] | undefined> {
  const leader = await findLeader(hosts);
  if (leader === undefined) return undefined;
  const a = await call(leader, 'GET', '/v1/operator/raft/configuration', undefined, 2000);
  if (a.status !== 200) return undefined;
  return (a.body as { servers: Server[] }).servers;
}

const pause = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/**
 * Repeats `attempt` until it returns true, 200 ms apart, for at most `ms`; throws with the last
 * thing that went wrong. Membership changes are refused while another is pending (409) and
 * while there is no leader (503), both passing states.
 */
async function retry(what: string, ms: number, attempt: () => Promise<true | string>): Promise<void> {
  const deadline = performance.now() + ms;
  let last = '';
  for (;;) {
    const r = await attempt();
    if (r === true) return;
    last = r;
    if (performance.now() > deadline) throw new Error(`${what}: not done after ${ms} ms (last: ${last})`);
    await pause(200);
  }
}

/** Removes `h` from the Raft configuration (DELETE /v1/operator/raft/peers/{id}); returns the answer's index. */
export async function removePeer(hosts: Hosts, h: Host, ms: number): Promise<number | undefined> {
  let index: number | undefined;
  await retry(`removing ${h.id}`, ms, async () => {
    const via = await entry(hosts, h);
    if (via === undefined) return 'no node to ask';
    const a = await call(via, 'DELETE', `/v1/operator/raft/peers/${h.id}`);
    if (a.status === 200) {
      index = Number((a.body as { index?: unknown }).index);
      return true;
    }
    // 404: not a member, so an earlier attempt whose answer was lost did it.
    if (a.status === 404) return true;
    return `${via.id}: ${codeOf(a)}`;
  });
  return index;
}

/** Adds `h` back as a voter (POST /v1/operator/raft/peers: a learner, promoted once caught up). */
export async function addPeer(hosts: Hosts, h: Host, ms: number): Promise<void> {
  await retry(`adding ${h.id}`, ms, async () => {
    const servers = await configuration(hosts);
    if (servers?.some((s) => s.id === h.id) === true) return true;
    const via = await entry(hosts, h);
    if (via === undefined) return 'no node to ask';
    const a = await call(via, 'POST', '/v1/operator/raft/peers', { id: h.id, address: h.grpcAddr, voter: true });
    return a.status === 200 ? true : `${via.id}: ${codeOf(a)}`;
  });
}

/** Waits until the leader's configuration has every host as a voter, and nothing else. */
export async function waitFullMembership(hosts: Hosts, ms: number): Promise<void> {
  const want = hosts.hosts.map((h) => h.id).sort();
  await retry(`full membership (${want.join(',')} voters)`, ms, async () => {
    const servers = await configuration(hosts);
    if (servers === undefined) return 'no leader answers';
    const voters = servers.filter((s) => s.suffrage === 'voter').map((s) => s.id).sort();
    const learners = servers.filter((s) => s.suffrage === 'learner').map((s) => s.id);
    return voters.join(',') === want.join(',') && learners.length === 0 ? true : `voters ${voters.join(',')}${learners.length > 0 ? `, learners ${learners.join(',')}` : ''}`;
  });
}

/** Asks the leader to hand leadership to `to` (POST /v1/operator/raft/transfer-leader). */
export async function transferLeader(leader: Host, to: Host): Promise<Answer> {
  return call(leader, 'POST', '/v1/operator/raft/transfer-leader', { id: to.id }, 2000);
}
