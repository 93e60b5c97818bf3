export * from './ports.js';
export { Replica, type ReplicaEvent, type ReplicaOptions, type ReplicaStatus } from './replica.js';
// Logger and Timers live in src/base; re-exported here only for code written against the old home.
export { silentLogger, type Logger, type Timers } from '../base/index.js';
export { Coordinator, type Consistency, type CoordinatorOptions, type ReadOutcome } from './coordinator.js';
