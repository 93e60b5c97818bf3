/**
 * The auth module's front door (README.md): TLS material (making, loading, reloading), peer
 * identity, the gRPC credentials built on them, and access control: tokens, roles and the one
 * decision `authorize(identity, verb, target)`.
 */
export {
  ACL_GROUP,
  ACL_LIMITS,
  ACL_VERBS,
  ANONYMOUS_ROLE,
  MANAGEMENT_ROLE,
  METRICS_TARGET,
  OPERATOR_TARGET,
  ROLE_KIND,
  SNAPSHOT_TARGET,
  TOKEN_KIND,
  authorize,
  describeGrant,
  formatIdentityForLog,
  hashSecret,
  mayListSome,
  newSecret,
  parseRules,
  ruleToJson,
  secretAccessor,
  secretMatches,
  typePatternMatches,
  type AclRule,
  type AclTarget,
  type AclVerb,
  type Identity,
} from './acl.js';
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
