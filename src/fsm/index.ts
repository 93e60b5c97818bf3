export { Fsm, Alarm, UnknownEntryTypeError, type ApplyResult, type FsmOptions } from './fsm.js';
export { CommandType, IGNORABLE_FLAG, encodeEnvelope, envelopeType, decodeBody } from './envelope.js';
export type { CommandHeader, NameRef, WriteCommand, PutCommand, DeleteCommand, WriteStatusCommand } from './commands.js';
export { MissingWriteHooksError, type WriteHooks, type PutInput, type PreparedPut } from './hooks.js';
export { decodeCommand, type DecodedCommand } from './decode-command.js';
