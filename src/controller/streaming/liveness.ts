/**
 * SPU liveness, decided purely (the SPU controller feeds it and writes the result).
 *
 * An SPU heartbeats by writing its `streaming.v1.spu-heartbeat` status key every few seconds;
 * the server stamps each status write with a fresh `updated_at`, which serves as the heartbeat's
 * token. The controller does not compare that stamp with its own clock (the leader's clock and
 * the controller's may differ, and the leader changes): like Kubernetes' node lifecycle
 * controller, it remembers when *it* saw the token change, on its own clock, and declares the
 * SPU Offline when the token has not changed for `timeoutMs`.
 */
import { SpuResolution } from '../../types/index.js';

/** What the controller remembers of one SPU: the last token seen and when (controller clock, ms). */
export interface HeartbeatMemory {
  readonly token: string;
  /** -Infinity: the token was already stale when first seen (see decideLiveness). */
  readonly seenAtMs: number;
}

export interface LivenessInput {
  /** The SPU's heartbeat token now (undefined: it never sent one). */
  readonly heartbeat: string | undefined;
  /** What this controller remembered (undefined: first sight, e.g. after a restart or on a new leader). */
  readonly memory: HeartbeatMemory | undefined;
  /** The resolution reported now (`Init` when none). */
  readonly reported: string;
  readonly nowMs: number;
  readonly timeoutMs: number;
  /** Set when the SPU may not be used whatever its heartbeat (its id is taken): the reason. */
  readonly conflict?: string | undefined;
}

export interface LivenessDecision {
  readonly resolution: SpuResolution;
  /** Depends only on the state, not on the time, so reconciling again rewrites nothing. */
  readonly message: string;
  readonly memory: HeartbeatMemory | undefined;
  /** When to look again (the moment the timeout would pass without a heartbeat). */
  readonly recheckAfterMs?: number;
}

export function decideLiveness(input: LivenessInput): LivenessDecision {
  const { heartbeat, nowMs, timeoutMs } = input;
  let memory: HeartbeatMemory | undefined;
  if (heartbeat === undefined) memory = undefined;
  else if (input.memory === undefined) {
    // First sight. An SPU reported Offline stays so until its token moves: this controller
    // cannot tell whether the token it sees came before or after it went offline. Any other
    // SPU gets a full timeout of grace from now (a new controller must not declare every SPU
    // dead at once).
    memory = { token: heartbeat, seenAtMs: input.reported === SpuResolution.Offline ? Number.NEGATIVE_INFINITY : nowMs };
  } else if (input.memory.token !== heartbeat) memory = { token: heartbeat, seenAtMs: nowMs };
  else memory = input.memory;

  if (input.conflict !== undefined) return { resolution: SpuResolution.Init, message: input.conflict, memory };
  if (memory === undefined) return { resolution: SpuResolution.Init, message: 'no heartbeat yet', memory };
  const left = memory.seenAtMs + timeoutMs - nowMs;
  if (left > 0) return { resolution: SpuResolution.Online, message: `heartbeats arriving (timeout ${timeoutMs} ms)`, memory, recheckAfterMs: left };
  return { resolution: SpuResolution.Offline, message: `no heartbeat for ${timeoutMs} ms`, memory };
}

export interface SpuIdentity {
  readonly name: string;
  /** A ULID: ordering by uid orders by creation. */
  readonly uid: string;
  readonly id: number;
}

/**
 * SPUs that may not be used because another SPU has their id: for each shared id the SPU
 * created first keeps it. Returns name -> reason for the others.
 */
export function spuIdConflicts(spus: readonly SpuIdentity[]): Map<string, string> {
  const byId = new Map<number, SpuIdentity[]>();
  for (const s of spus) byId.set(s.id, [...(byId.get(s.id) ?? []), s]);
  const out = new Map<string, string>();
  for (const [id, group] of byId) {
    if (group.length < 2) continue;
    const sorted = [...group].sort((a, b) => (a.uid < b.uid ? -1 : a.uid > b.uid ? 1 : 0));
    const first = sorted[0] as SpuIdentity;
    for (const s of sorted.slice(1)) {
      out.set(s.name, `id ${id} is already used by SPU ${first.name}, created earlier; this SPU is not used until one of them changes id or goes`);
    }
  }
  return out;
}
