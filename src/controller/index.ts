export { placeReplicas, checkManualAssignment, type PlacementInput, type PlacementResult, type ReplicaRow } from './streaming/scheduler.js';
