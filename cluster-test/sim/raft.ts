/**
 * The simulator's one door into the code under test: everything it uses from src/ comes
 * through here, and only through the modules' front doors (their index.ts): the shipped
 * replica (the driver the agent runs) and its ports, the Raft core, the FSM and the store the
 * replicas apply to, the event publisher that feeds watches, and the shared base types.
 */
export * from '../../src/base/index.js';
export * from '../../src/raft/index.js';
export { Fsm, CommandType, decodeBody, encodeEnvelope, envelopeType, type ApplyResult, type FsmOptions, type WriteCommand, type PutCommand, type TxnCommand, type WriteHooks, type FsmPlantedBugs } from '../../src/fsm/index.js';
// The type registry's hooks, run by the FSM when an unconditional write applies (the registers' type).
export { TypeRegistry, registryWriteHooks } from '../../src/api/index.js';
export type { Resource, StoreReader, Tenancy, TypeRef } from '../../src/store/index.js';
export {
  Replica,
  type ChangePublisher,
  type LoadedLog,
  type LogStore,
  type ReplicaPlantedBugs,
  type SnapshotStore,
  type StateMachine,
  type Transport,
} from '../../src/replica/index.js';
export { EventPublisher, type StreamEvent, type Subscription } from '../../src/stream/index.js';
