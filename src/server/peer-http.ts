import type { NodeId } from '../base/index.js';
import type { ClientPool } from '../forwarding/index.js';

/**
 * The HTTP/JSON API address of this node as peers and clients should use it: the address the
 * HTTP server listens on, except that a wildcard host (`0.0.0.0`, `::`) is replaced by the host
 * of the advertised gRPC address (the one peers already reach this node at).
 */
export function advertisedHttpAddress(listening: string, advertisedGrpc: string): string {
  const m = /^(\[[^\]]*\]|[^:]*):(\d+)$/.exec(listening);
  if (!m) return listening;
  const host = m[1] as string;
  if (host !== '0.0.0.0' && host !== '[::]' && host !== '::' && host !== '') return listening;
  const g = /^(\[[^\]]*\]|[^:]*):\d+$/.exec(advertisedGrpc);
  return g ? `${g[1] as string}:${m[2] as string}` : listening;
}

export interface PeerHttpAddressesOptions {
  readonly self: NodeId;
  /** This node's advertised HTTP address; undefined until it listens. */
  readonly ownHttpAddress: () => string | undefined;
  readonly pool: ClientPool;
  readonly clusterId: () => string;
  /** The gRPC address this node advertises (sent in Hello). */
  readonly advertiseAddr: string;
  /** How long one Hello may take (ms). Default 1,000. */
  readonly helloTimeoutMs?: number;
}

/**
 * Learns peers' HTTP/JSON API addresses. The Raft configuration carries only gRPC addresses, so
 * a node asks a peer with the cluster service's Hello (which answers `http_address`) and
 * remembers the answer per (node id, gRPC address): a node that comes back at another address
 * is asked again. A peer that does not answer, or does not know its own (an older node), stays
 * unknown: callers say so rather than guess.
 */
export class PeerHttpAddresses {
  private readonly known = new Map<string, string>();

  constructor(private readonly opts: PeerHttpAddressesOptions) {}

  /** The HTTP address of node `id`, reached over gRPC at `grpcAddress`; undefined when it cannot be learned now. */
  async lookup(id: NodeId, grpcAddress: string): Promise<string | undefined> {
    if (id === this.opts.self) return this.opts.ownHttpAddress();
    const key = `${id}@${grpcAddress}`;
    const cached = this.known.get(key);
    if (cached !== undefined) return cached;
    const timeoutMs = this.opts.helloTimeoutMs ?? 1_000;
    const answer = await new Promise<{ nodeId: string; httpAddress: string } | undefined>((resolve) => {
      try {
        this.opts.pool
          .get(grpcAddress)
          .hello({ clusterId: this.opts.clusterId(), from: this.opts.self, address: this.opts.advertiseAddr, bootstrapExpect: 0 }, { deadline: Date.now() + timeoutMs }, (err, res) => resolve(err || !res ? undefined : res));
      } catch {
        resolve(undefined);
      }
    });
    // Only the node we asked about may answer for itself (another node now at that address may not).
    if (answer === undefined || answer.nodeId !== id || answer.httpAddress === '') return undefined;
    this.known.set(key, answer.httpAddress);
    return answer.httpAddress;
  }
}
