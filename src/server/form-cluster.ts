import { CairnError, ErrorCode, type Logger, type NodeId } from '../base/index.js';
import type { GrpcForwarder, HelloResponseMsg } from '../forwarding/index.js';
import { makeConfig, type Config } from '../raft/index.js';
import { derivedClusterId, newClusterId, writeClusterId } from './cluster-id.js';
import type { AgentConfig } from './config.js';

/**
 * Step 1 of starting a node (src/server/README.md): forming or joining the cluster. What it
 * hands to the node: enough to open the replica.
 */
export interface Formation {
  /** The cluster this node belongs to (already in `<dataDir>/cluster-id`). */
  readonly clusterId: string;
  /** The initial configuration, for a node that forms a new cluster (its log is empty). */
  readonly bootstrap: Config | undefined;
  /**
   * Ask the cluster's leader to add this node once the replica runs (`askToJoin`): with
   * `--join`, also on a restart, so a node removed while it was down asks to be added back.
   */
  readonly askToJoin: boolean;
}

export interface FormClusterContext {
  readonly self: NodeId;
  /** This node's cluster address as peers should dial it (the bound port if 0 was asked). */
  readonly advertise: string;
  readonly config: AgentConfig;
  readonly logger: Logger;
  /** The cluster id stored in the data dir ('' if none): a node that has one is a member already. */
  readonly storedClusterId: string;
  /** Says hello to a peer's cluster port (carrying this node's cluster id as it is then). */
  readonly hello: (address: string) => Promise<HelloResponseMsg>;
  /** Node ids and addresses learned from peers, for the transport until the replica knows its members. */
  readonly discovered: Map<NodeId, string>;
  /** Told the cluster id as soon as it is known (peers' hellos carry it from then on). */
  readonly onClusterId: (id: string) => void;
  /** True once the node stops: discovery gives up. */
  readonly stopping: () => boolean;
  readonly sleep: (ms: number) => Promise<void>;
  readonly nowMs: () => number;
}

/**
 * Forms or joins the cluster: a node with a stored cluster id is a member already; `--bootstrap`
 * (and `--dev`) forms a one-node cluster; `--bootstrap-expect N --join ...` waits for N nodes
 * expecting the same and forms a cluster of them, or joins the cluster it finds; `--join ...`
 * alone joins. Persists the cluster id before returning.
 */
export async function formCluster(ctx: FormClusterContext): Promise<Formation> {
  const { config } = ctx;
  const askToJoin = config.join.length > 0;
  if (ctx.storedClusterId !== '') return { clusterId: ctx.storedClusterId, bootstrap: undefined, askToJoin };
  let formation: Formation;
  if (config.bootstrap) {
    formation = { clusterId: newClusterId(), bootstrap: makeConfig([{ id: ctx.self, suffrage: 'voter', address: ctx.advertise }]), askToJoin };
  } else if (config.bootstrapExpect > 0 || config.join.length > 0) {
    formation = { ...(await discover(ctx)), askToJoin };
  } else {
    throw new CairnError(ErrorCode.INVALID_ARGUMENT, 'this node belongs to no cluster: start it with --bootstrap, --dev, --bootstrap-expect N --join ..., or --join ...');
  }
  ctx.onClusterId(formation.clusterId);
  await writeClusterId(config.dataDir, formation.clusterId);
  return formation;
}

/** Forms the initial configuration with --bootstrap-expect, or finds an existing cluster. */
async function discover(ctx: FormClusterContext): Promise<{ clusterId: string; bootstrap: Config | undefined }> {
  const { config, logger, self, advertise } = ctx;
  let lastLog = 0;
  for (;;) {
    if (ctx.stopping()) throw new CairnError(ErrorCode.UNAVAILABLE, 'shutting down during discovery');
    const known = new Map<NodeId, string>([[self, advertise]]);
    for (const addr of config.join) {
      try {
        const h = await ctx.hello(addr);
        ctx.discovered.set(h.nodeId as NodeId, h.address);
        if (h.clusterId !== '') {
          logger.info({ via: addr, cluster: h.clusterId }, 'found an existing cluster; joining it');
          return { clusterId: h.clusterId, bootstrap: undefined };
        }
        if (config.bootstrapExpect > 0 && h.bootstrapExpect === config.bootstrapExpect) known.set(h.nodeId as NodeId, h.address);
      } catch {
        // not up yet
      }
    }
    if (config.bootstrapExpect > 0 && known.size >= config.bootstrapExpect) {
      if (known.size > config.bootstrapExpect) {
        throw new CairnError(ErrorCode.INVALID_ARGUMENT, `found ${known.size} nodes expecting ${config.bootstrapExpect}: ${[...known.keys()].join(', ')}`);
      }
      const members = [...known].map(([id, address]) => ({ id, address }));
      const clusterId = derivedClusterId(members);
      logger.info({ members: members.map((m) => m.id), cluster: clusterId }, 'forming a new cluster');
      return { clusterId, bootstrap: makeConfig(members.map((m) => ({ ...m, suffrage: 'voter' as const }))) };
    }
    if (ctx.nowMs() - lastLog > 5000) {
      lastLog = ctx.nowMs();
      logger.info({ known: [...known.keys()], expect: config.bootstrapExpect, join: config.join, me: self }, 'waiting for peers');
    }
    await ctx.sleep(250);
  }
}

/**
 * Asks the cluster's leader to add this node as a learner that it promotes once caught up,
 * unless the leader already counts it as a member. The leader's configuration decides, not
 * this node's: a removed node usually never learns of its removal (the leader stops sending
 * to it as soon as it appends the change, thesis §4.2.2), so its own log still names it a
 * member, and a follower that answers first may lag behind the leader.
 */
export async function askToJoin(ctx: FormClusterContext & { readonly forwarder: GrpcForwarder }): Promise<void> {
  const { config, logger, self } = ctx;
  for (;;) {
    if (ctx.stopping()) return;
    for (const addr of config.join) {
      try {
        const h = await ctx.hello(addr);
        for (const m of h.members) ctx.discovered.set(m.id as NodeId, m.address);
        if (h.leader === '') continue;
        const leaderAddr = h.members.find((m) => m.id === h.leader)?.address ?? ctx.discovered.get(h.leader as NodeId);
        const l = h.leader === h.nodeId ? h : leaderAddr === undefined ? undefined : await ctx.hello(leaderAddr);
        if (l === undefined || l.leader !== l.nodeId) continue; // leadership moved: ask again
        if (l.members.some((m) => m.id === self)) return;
        await ctx.forwarder.forward(l.nodeId as NodeId, { kind: 'config-change', change: { type: 'add-learner', id: self, address: ctx.advertise, autoPromote: true } }, 5000);
        logger.info({ leader: l.nodeId }, 'asked the leader to add this node as a learner');
        return;
      } catch (e) {
        logger.debug({ via: addr, err: e instanceof Error ? e.message : String(e) }, 'join attempt failed; retrying');
      }
    }
    await ctx.sleep(500);
  }
}
