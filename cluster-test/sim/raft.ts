/**
 * The simulator's one door into the code under test: everything it uses from src/ comes
 * through here, and only through the modules' front doors (their index.ts): the Raft core, the
 * FSM and the store the replicas apply to, and the shared base types.
 */
export * from '../../src/base/index.js';
export * from '../../src/raft/index.js';
export { Fsm, CommandType, decodeBody, encodeEnvelope, envelopeType, type ApplyResult, type FsmOptions, type WriteCommand } from '../../src/fsm/index.js';
export type { Resource, StoreReader, Tenancy, TypeRef } from '../../src/store/index.js';
