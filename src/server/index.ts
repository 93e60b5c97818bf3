export * from './config.js';
export * from './load-config.js';
export { startAgent, type Agent, type StartAgentOptions } from './agent.js';
export { Node, type NodeEndpoint, type NodeOptions, type NodeState } from './node.js';
export { PLANTED_BUG_NAMES, WATCH_SKIP_NTH, ACK_BEFORE_FSYNC_DELAY_MS } from './planted-bugs.js';
