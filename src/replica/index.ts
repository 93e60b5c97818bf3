export * from './ports.js';
export { Replica, type DropReason, type ReplicaEvent, type ReplicaOptions, type ReplicaPlantedBugs, type ReplicaStatus } from './replica.js';
export { Coordinator, type Consistency, type CoordinatorOptions, type ReadOutcome } from './coordinator.js';
