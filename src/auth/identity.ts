/**
 * Who a certificate says its holder is. Cairn encodes identity in one URI subjectAltName:
 * `cairn://node/<id>` for a node, `cairn://client/<name>` for an API client (part 2). The URI
 * is the only thing read: the common name (CN) repeats the id for people and logs and is never
 * trusted, because a URI SAN is typed, cannot be confused with a DNS name, and a certificate
 * with more than one Cairn URI is refused as ambiguous.
 *
 * `peerIdentity` only parses. Whether the certificate chains to the cluster CA is decided by the
 * TLS layer before this runs: grpc-js hands out `sslPeerCertificate` only when the socket is
 * `authorized` (server-interceptors.js `getAuthContext`), which the server gets by requesting
 * client certificates and verifying them against the cluster CA (credentials.ts).
 */
import type { PeerCertificate } from 'node:tls';
import type * as X509 from '@peculiar/x509';
import { x509Lib } from './x509-lib.js';

export type PeerIdentity = { readonly kind: 'node'; readonly id: string } | { readonly kind: 'client'; readonly name: string };

export const IDENTITY_SCHEME = 'cairn:';
const NODE_PREFIX = 'cairn://node/';
const CLIENT_PREFIX = 'cairn://client/';

/** A node id: a lowercase DNS label, as `nodeId` in base and `--node-id` accept. */
const NODE_ID_RE = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;
/** A client name: lowercase letters, digits, '.', '_' and '-', 1 to 63, alphanumeric at both ends. */
const CLIENT_NAME_RE = /^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$/;

export const isNodeId = (s: string): boolean => NODE_ID_RE.test(s);
export const isClientName = (s: string): boolean => CLIENT_NAME_RE.test(s);

export function nodeIdentityUri(id: string): string {
  if (!isNodeId(id)) throw new TypeError(`node id ${JSON.stringify(id)} is not a lowercase DNS label of at most 63 characters`);
  return `${NODE_PREFIX}${id}`;
}

export function clientIdentityUri(name: string): string {
  if (!isClientName(name)) {
    throw new TypeError(`client name ${JSON.stringify(name)} must be 1 to 63 of a-z, 0-9, '.', '_', '-', starting and ending with a letter or digit`);
  }
  return `${CLIENT_PREFIX}${name}`;
}

/** The identity a `cairn://` URI names, or undefined if it is not a well-formed one. */
export function parseIdentityUri(uri: string): PeerIdentity | undefined {
  if (uri.startsWith(NODE_PREFIX)) {
    const id = uri.slice(NODE_PREFIX.length);
    return isNodeId(id) ? { kind: 'node', id } : undefined;
  }
  if (uri.startsWith(CLIENT_PREFIX)) {
    const name = uri.slice(CLIENT_PREFIX.length);
    return isClientName(name) ? { kind: 'client', name } : undefined;
  }
  return undefined;
}

/**
 * The identity in a DER certificate: its one `cairn://` URI SAN. Undefined when there is none,
 * when there are several (ambiguous), or when the one there is malformed.
 */
export function identityOfDer(der: Uint8Array): PeerIdentity | undefined {
  const x509 = x509Lib();
  let cert: X509.X509Certificate;
  try {
    cert = new x509.X509Certificate(der);
  } catch {
    return undefined;
  }
  const san = cert.getExtension(x509.SubjectAlternativeNameExtension);
  if (san === null) return undefined;
  const uris = san.names.items.filter((n) => n.type === 'url' && n.value.toLowerCase().startsWith(IDENTITY_SCHEME));
  if (uris.length !== 1) return undefined;
  return parseIdentityUri(uris[0]!.value);
}

/** The peer certificate as grpc-js and Node's TLS hand it over; only the DER bytes are read. */
export type PeerCertificateLike = Pick<PeerCertificate, 'raw'> & Partial<Pick<PeerCertificate, 'fingerprint256'>>;

// Parsing DER costs tens of microseconds; a node sees few distinct peers, so remember the
// answer by fingerprint (bounded: a flood of distinct certificates evicts, it cannot grow).
const CACHE_LIMIT = 256;
const cache = new Map<string, PeerIdentity | undefined>();

/**
 * The identity of a TLS peer from its certificate (`call.getAuthContext().sslPeerCertificate`).
 * Undefined for no certificate, or one without exactly one well-formed `cairn://` URI.
 *
 * Trust: this does not verify the chain. Call it only with a certificate the TLS layer has
 * verified against the cluster CA; grpc-js gives `sslPeerCertificate` only for an `authorized`
 * socket, so a server built with `serverCredentials` (credentials.ts) satisfies this.
 */
export function peerIdentity(cert: PeerCertificateLike | undefined | null): PeerIdentity | undefined {
  if (cert === undefined || cert === null || !Buffer.isBuffer(cert.raw) || cert.raw.length === 0) return undefined;
  const key = cert.fingerprint256;
  if (key !== undefined && key !== '' && cache.has(key)) return cache.get(key);
  const identity = identityOfDer(cert.raw);
  if (key !== undefined && key !== '') {
    if (cache.size >= CACHE_LIMIT) cache.delete(cache.keys().next().value as string);
    cache.set(key, identity);
  }
  return identity;
}

/** The identity of the peer of a gRPC server call (unary, stream or duplex). */
export function callIdentity(call: { getAuthContext(): { sslPeerCertificate?: PeerCertificateLike | undefined } }): PeerIdentity | undefined {
  return peerIdentity(call.getAuthContext().sslPeerCertificate);
}

export function formatIdentity(identity: PeerIdentity | undefined): string {
  if (identity === undefined) return 'anonymous';
  return identity.kind === 'node' ? `node ${identity.id}` : `client ${identity.name}`;
}
