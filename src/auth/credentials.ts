/**
 * gRPC credentials built from the TLS material.
 *
 * The server side has one port for everything (ARCHITECTURE.md): public API calls arrive
 * without a client certificate, Raft and forwarding calls must carry a node certificate. So the
 * server must REQUEST a client certificate but not REQUIRE one, and each cluster-port handler
 * checks the caller's identity itself (`callIdentity`).
 *
 * What grpc-js 1.14 offers (server-credentials.js):
 * - `ServerCredentials.createSsl(ca, pairs, checkClientCertificate)` sets Node's
 *   `requestCert: checkClientCertificate` and leaves `rejectUnauthorized` at Node's default,
 *   true: `true` demands a CA-verified client certificate on every connection (the public API
 *   could not be served), `false` never asks for one (no call could be authenticated). It
 *   cannot request-but-not-require, and its material is fixed for the server's life.
 * - `experimental.createCertificateProviderServerCredentials(identity, ca, requireClientCert)`
 *   sets `requestCert: ca !== null` and `rejectUnauthorized: requireClientCert`. With a CA
 *   provider and `false`, the server asks every client for a certificate and lets the handshake
 *   finish without one, or with one that does not verify. That is safe for us because grpc-js's
 *   `call.getAuthContext()` returns the peer certificate only if the socket is `authorized`,
 *   i.e. Node verified it against the CA given (server-interceptors.js): an unverified or absent
 *   certificate gives `{}`, and `callIdentity` answers undefined. It is also the supported way
 *   to rotate: the server registers a watcher on the credentials and calls
 *   `http2Server.setSecureContext(...)` whenever a provider reports new material, so new
 *   connections use it without a restart (existing connections keep theirs).
 *   Note: the `.d.ts` names its first parameter `caCertificateProvider`, but the code passes it
 *   on as the identity provider; we pass the one `TlsMaterialStore` as both, so the mix-up
 *   cannot bite.
 *
 * Channels: node-to-node channels present the node certificate and verify the server against
 * the cluster CA, the dialled host name (the SAN must hold the address peers dial, i.e. the
 * node's --advertise-addr host) and, optionally, the node id expected at that address. They
 * too read the store per connection, so after a reload new connections present the new
 * certificate. API clients verify the server against the CA and may present a client
 * certificate (part 2).
 */
import { checkServerIdentity, type PeerCertificate } from 'node:tls';
import * as grpc from '@grpc/grpc-js';
import { formatIdentity, peerIdentity } from './identity.js';
import type { TlsMaterialStore } from './material.js';

/**
 * Server credentials for the one multiplexed port: TLS with the node's certificate; client
 * certificates requested, verified against the cluster CA when given, never required.
 * Follows `store.reload()`. The server must check `callIdentity(call)` on every cluster call.
 */
export function serverCredentials(store: TlsMaterialStore): grpc.ServerCredentials {
  return grpc.experimental.createCertificateProviderServerCredentials(store, store, false);
}

export interface NodeChannelOptions {
  /**
   * The node id the server at this address must prove (its certificate's `cairn://node/<id>`).
   * Default: any node of the cluster.
   */
  readonly expectNodeId?: string;
}

/** The server-identity check of node-to-node channels: host name as usual, then a node identity. */
export function checkNodeServerIdentity(expectNodeId: string | undefined): (host: string, cert: PeerCertificate) => Error | undefined {
  return (host, cert) => {
    const hostError = checkServerIdentity(host, cert);
    if (hostError !== undefined) return hostError;
    const identity = peerIdentity(cert);
    if (identity?.kind !== 'node') return new Error(`the server at ${host} presented a certificate for ${formatIdentity(identity)}, not a Cairn node`);
    if (expectNodeId !== undefined && identity.id !== expectNodeId) {
      return new Error(`the server at ${host} is node ${identity.id}, expected node ${expectNodeId}`);
    }
    return undefined;
  };
}

/** Credentials for a channel from this node to another: mutual TLS with the store's node certificate. */
export function nodeChannelCredentials(store: TlsMaterialStore, options: NodeChannelOptions = {}): grpc.ChannelCredentials {
  return grpc.experimental.createCertificateProviderChannelCredentials(store, store, {
    checkServerIdentity: checkNodeServerIdentity(options.expectNodeId),
  });
}

export interface ApiClientTls {
  /** The cluster CA certificate (PEM): the server must chain to it. */
  readonly ca: Buffer;
  /** A client certificate and key (PEM), both or neither. */
  readonly cert?: Buffer;
  readonly key?: Buffer;
}

/** Credentials for an API client: verifies the server against the CA; presents a client certificate if given. */
export function apiChannelCredentials(tls: ApiClientTls): grpc.ChannelCredentials {
  if ((tls.cert === undefined) !== (tls.key === undefined)) throw new TypeError('apiChannelCredentials: give both cert and key, or neither');
  return grpc.credentials.createSsl(tls.ca, tls.key ?? null, tls.cert ?? null);
}
