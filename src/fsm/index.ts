export { Fsm, Alarm, type FsmPlantedBugs, UnknownEntryTypeError, skipUnknownEntry, txnResourceRef, type ApplyResult, type FsmOptions, type TxnOpResult, type TxnResourceRef } from './fsm.js';
export { CommandType, IGNORABLE_FLAG, encodeEnvelope, envelopeType, decodeBody } from './envelope.js';
export type { CommandHeader, NameRef, WriteCommand, PutCommand, DeleteCommand, WriteStatusCommand, TxnCommand, TxnCompare, TxnCompareTarget, TxnOp } from './commands.js';
export { txnCompareHolds, txnOpUid } from './commands.js';
export { MissingWriteHooksError, type WriteHooks, type PutInput, type PreparedPut } from './hooks.js';
export { decodeCommand, type DecodedCommand } from './decode-command.js';
