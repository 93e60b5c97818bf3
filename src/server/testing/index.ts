export { freePorts, freePort, waitUntil } from './net.js';
export { devConfig, clusterConfigs, TEST_WAL_SEGMENT_BYTES } from './agents.js';
