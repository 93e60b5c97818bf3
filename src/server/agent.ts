import type { NodeId } from '../base/index.js';
import type { Metrics, ResourceService, TypeRegistry, WatchService } from '../api/index.js';
import type { ControllerManager, ControllerSpec } from '../controller/index.js';
import type { PinoLogger } from '../platform/index.js';
import type { Coordinator } from '../replica/index.js';
import type { EventPublisher } from '../stream/index.js';
import type { AgentConfig } from './config.js';
import { Node } from './node.js';
import { serveNode, type ExtendServers, type Served } from './serve.js';

export interface Agent {
  readonly nodeId: NodeId;
  /** The node itself: its lifecycle state and parts (src/server/node.ts). */
  readonly node: Node;
  /** The bound gRPC and HTTP addresses (host:port; the port is real even if 0 was asked). */
  readonly grpcAddress: string;
  readonly httpAddress: string;
  /**
   * Resolves once the replica runs (after bootstrap, discovery or join); rejects if it cannot
   * start. Requests need not wait for it: one that arrives while the node starts waits for it.
   */
  readonly ready: Promise<void>;
  /** The coordinator while the node runs (or drains while stopping); undefined while starting. */
  coordinator(): Coordinator | undefined;
  /** The type registry: register your own types here (before writes of them arrive). */
  readonly registry: TypeRegistry;
  /** The resource operations (what the HTTP and gRPC APIs call). */
  readonly resources: ResourceService;
  /** The watch streams (HTTP and gRPC) and this node's event publisher (once the replica runs). */
  readonly watches: WatchService;
  publisher(): EventPublisher | undefined;
  readonly metrics: Metrics;
  readonly logger: PinoLogger;
  /** The built-in controllers' manager, while this node leads and runs them. */
  controllerManager(): ControllerManager | undefined;
  /** Graceful stop: hand over leadership, finish in-flight requests, close files. Idempotent. */
  close(): Promise<void>;
  /** Re-reads the TLS files (SIGHUP): new connections use them; bad files keep the old ones. */
  reloadTls(): Promise<boolean>;
}

export interface StartAgentOptions {
  readonly logger?: PinoLogger;
  /** Extra routes (the resource API) and gRPC services (the public API), added by the caller. */
  readonly extend?: ExtendServers;
  /**
   * Built-in controllers: they run in this process while this node is the Raft leader (over a
   * client connected to this node), and stop when it loses leadership.
   */
  readonly controllers?: readonly ControllerSpec[];
  /**
   * Test hook: while it returns true, every Raft message this node sends or receives is dropped
   * (a network partition of the Raft traffic; client requests still reach the node).
   */
  readonly raftPartitioned?: () => boolean;
}

/**
 * Starts a node: the composition root (ARCHITECTURE.md `server`; src/server/README.md), in
 * three named steps. Building the node (`Node.open`: data dir, registry, services; state
 * `starting`), serving it (`serveNode`: the cluster port and the HTTP API listen at once, so
 * peers can discover it and requests wait for it), then `node.start`: forming or joining the
 * cluster (`formCluster`: from its own state, by bootstrapping, by forming a cluster with
 * --bootstrap-expect peers, or by joining an existing cluster as a learner) and opening the
 * replica (state `running`; `ready` resolves).
 */
export async function startAgent(config: AgentConfig, opts: StartAgentOptions = {}): Promise<Agent> {
  const node = await Node.open(config, {
    ...(opts.logger ? { logger: opts.logger } : {}),
    ...(opts.controllers ? { controllers: opts.controllers } : {}),
    ...(opts.raftPartitioned ? { raftPartitioned: opts.raftPartitioned } : {}),
  });
  let served: Served;
  try {
    served = await serveNode(node, config, opts.extend);
  } catch (e) {
    await node.stop(async () => {});
    throw e;
  }
  void node.start({ grpcAddress: served.grpcAddress, advertise: served.advertise });
  const { grpcAddress, httpAddress } = served;
  return {
    nodeId: node.id,
    node,
    grpcAddress,
    httpAddress,
    ready: node.ready,
    metrics: node.metrics,
    logger: node.logger,
    registry: node.registry,
    resources: node.resources,
    watches: node.watches,
    publisher: () => node.publisherNow(),
    coordinator: () => node.coordinatorNow(),
    controllerManager: () => node.controllerManager(),
    close: () => node.stop(() => served.close()),
    reloadTls: () => served.reloadTls(),
  };
}
