export { placeReplicas, checkManualAssignment, type PlacementInput, type PlacementResult, type ReplicaRow } from './streaming/scheduler.js';
export type { ControllerSpec, ReconcileContext, ReconcileResult, WatchedType } from './runtime/types.js';
export { streamingControllers, STREAMING_DEFAULTS, type StreamingOptions } from './streaming/controllers.js';
export { decideLiveness, spuIdConflicts, type HeartbeatMemory, type LivenessDecision, type LivenessInput } from './streaming/liveness.js';
export { planSpuGroup, managedSpuSpec, type SpuGroupPlan, type SpuGroupView, type SpuView } from './streaming/spu-group.js';
export { decideTopic, type TopicDecision, type TopicView, type PartitionView, type SpuState } from './streaming/topic.js';
export { electLeader, replicaLags, type ElectionInput, type ElectionResult } from './streaming/partition.js';
export { sendSpuHeartbeat, reportReplicaOffset } from './streaming/reports.js';
