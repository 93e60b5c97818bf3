export { freePorts, freePort, waitUntil } from './net.js';
export { devConfig, clusterConfigs } from './agents.js';
