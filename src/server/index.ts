export * from './config.js';
export * from './load-config.js';
export { startAgent, type Agent, type StartAgentOptions } from './agent.js';
