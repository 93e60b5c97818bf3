export * from './ports.js';
export { Replica, type DropReason, type ReplicaEvent, type ReplicaOptions, type ReplicaPlantedBugs, type ReplicaStatus } from './replica.js';
export { silentLogger, type Logger } from './logger.js';
export type { Timers } from './timers.js';
export { Coordinator, type Consistency, type CoordinatorOptions, type ReadOutcome } from './coordinator.js';
