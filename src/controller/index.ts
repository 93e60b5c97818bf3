export { placeReplicas, checkManualAssignment, type PlacementInput, type PlacementResult, type ReplicaRow } from './streaming/scheduler.js';
export type { ControllerSpec, ReconcileContext, ReconcileResult, WatchedType } from './runtime/types.js';
