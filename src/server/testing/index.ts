export { freePorts, freePort, waitUntil } from './net.js';
export { agreedLeader, waitForAgreedLeader } from './leader.js';
export { startTestCluster } from './cluster.js';
export { devConfig, clusterConfigs, TEST_WAL_SEGMENT_BYTES } from './agents.js';
export {
  appliedIndex,
  closeHttpsAgents,
  grpcUnary,
  grpcKeepAlive,
  grpcWatch,
  httpWatch,
  httpsRequest,
  makeRole,
  makeSuiteIdentities,
  makeToken,
  pollUntil,
  pb,
  startSecureNode,
  READER_RULES,
  SCOPED_RULES,
  type GrpcAnswer,
  type GrpcWatch,
  type HttpAnswer,
  type HttpWatch,
  type SecureNode,
  type SuiteIdentities,
} from './authz.js';
