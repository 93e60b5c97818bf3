export { Fsm, Alarm, type FsmPlantedBugs, LEASE_BYTES, type LeaseEntry, UnknownEntryTypeError, skipUnknownEntry, txnResourceRef, type ApplyResult, type FsmOptions, type TxnOpResult, type TxnResourceRef } from './fsm.js';
export { CommandType, IGNORABLE_FLAG, encodeEnvelope, envelopeType, decodeBody } from './envelope.js';
export type { CommandHeader, NameRef, WriteCommand, PutCommand, DeleteCommand, WriteStatusCommand, TxnCommand, TxnCompare, TxnCompareTarget, TxnOp, LeaseGrantCommand, LeaseRevokeCommand, LeaseRevokeReason } from './commands.js';
export { txnCompareHolds, txnOpUid, leaseIdProblem, LEASE_ID_PATTERN, MAX_LEASE_TTL_SECONDS } from './commands.js';
export { MissingWriteHooksError, type WriteHooks, type PutInput, type PreparedPut } from './hooks.js';
export { decodeCommand, type DecodedCommand } from './decode-command.js';
