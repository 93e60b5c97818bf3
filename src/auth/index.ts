/**
 * The auth module's front door (README.md): TLS material (making, loading, reloading), peer
 * identity, and the gRPC credentials built on them. Later: tokens, roles and `authorize`.
 */
export {
  createCa,
  createClientCert,
  createNodeCert,
  nodeSubjectAltNames,
  DEFAULT_CA_DAYS,
  DEFAULT_CERT_DAYS,
  type CaOptions,
  type ClientCertOptions,
  type NodeCertOptions,
  type PemPair,
} from './certificates.js';
export {
  callIdentity,
  clientIdentityUri,
  formatIdentity,
  identityOfDer,
  isClientName,
  isNodeId,
  nodeIdentityUri,
  parseIdentityUri,
  peerIdentity,
  type PeerCertificateLike,
  type PeerIdentity,
} from './identity.js';
export {
  checkTlsMaterial,
  loadTlsMaterial,
  TlsMaterialError,
  TlsMaterialErrorCode,
  TlsMaterialStore,
  type LoadOptions,
  type ReloadResult,
  type TlsFiles,
  type TlsMaterial,
} from './material.js';
export {
  apiChannelCredentials,
  checkNodeServerIdentity,
  nodeChannelCredentials,
  serverCredentials,
  type ApiClientTls,
  type NodeChannelOptions,
} from './credentials.js';
