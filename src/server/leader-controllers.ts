import type * as prom from 'prom-client';
import { CairnClient } from '../client/index.js';
import { ControllerManager, LeaderGate, controllerMetrics, type ControllerSpec } from '../controller/index.js';
import type { Clock, Logger, Timers } from '../base/index.js';

/** The address to reach a gRPC server bound to `bound` from the same host (a wildcard bind -> loopback). */
export function loopbackAddress(bound: string): string {
  const i = bound.lastIndexOf(':');
  const host = bound.slice(0, i).replace(/^\[|\]$/g, '');
  const port = bound.slice(i + 1);
  if (host === '' || host === '0.0.0.0') return `127.0.0.1:${port}`;
  if (host === '::') return `[::1]:${port}`;
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}

export interface LeaderControllersOptions {
  readonly controllers: readonly ControllerSpec[];
  /** This node's bound gRPC address: the controllers' client talks to the node itself. */
  readonly grpcAddress: string;
  readonly logger: Logger;
  readonly registry: prom.Registry;
  readonly clock: Clock;
  readonly timers: Timers;
  /**
   * With TLS on (docs/security.md): the node's current material, read at each start of the
   * controllers (so a SIGHUP rotation reaches the next term's client). The client trusts the
   * cluster CA and presents the node's own certificate; it dials loopback, which every node
   * certificate names. Absent: the port is plaintext.
   */
  readonly tls?: () => { readonly ca: Buffer; readonly cert: Buffer; readonly key: Buffer };
  /**
   * With ACLs on (docs/security.md "Tokens and roles"): the secret of the token the built-in
   * controllers act with, read at each start of the controllers like `tls`. Absent or
   * undefined: their calls are anonymous.
   */
  readonly token?: () => string | undefined;
}

/**
 * Built-in controllers run in-process on the Raft leader only (ARCHITECTURE.md "controller"):
 * `setLeader(true)` (the node became leader) starts a ControllerManager over a CairnClient
 * connected to this node's own gRPC address; `setLeader(false)` stops it (reconciles aborted,
 * queues dropped, caches closed) before another start can begin. Going through the public API
 * on loopback keeps built-in controllers honest: they see exactly what a user's would.
 */
export class LeaderControllers {
  readonly gate: LeaderGate;
  private current: ControllerManager | undefined;

  constructor(opts: LeaderControllersOptions) {
    this.gate = new LeaderGate(
      () => {
        const tls = opts.tls?.();
        const token = opts.token?.();
        const client = new CairnClient({
          endpoints: [loopbackAddress(opts.grpcAddress)],
          endpointOrder: 'listed',
          ...(tls !== undefined ? { tls } : {}),
          ...(token !== undefined ? { token } : {}),
        });
        const manager = new ControllerManager({ client, controllers: opts.controllers, clock: opts.clock, timers: opts.timers, logger: opts.logger, metrics: controllerMetrics(opts.registry) }).start();
        this.current = manager;
        return {
          stop: async () => {
            if (this.current === manager) this.current = undefined;
            await manager.stop();
            client.close();
          },
        };
      },
      opts.logger,
      `controllers ${opts.controllers.map((c) => c.name).join(', ')}`,
    );
  }

  /** The manager running on this node (while it leads). */
  get manager(): ControllerManager | undefined {
    return this.current;
  }

  setLeader(leading: boolean): void {
    this.gate.set(leading);
  }

  close(): Promise<void> {
    return this.gate.close();
  }
}
