export { Fsm, Alarm, UnknownEntryTypeError, type ApplyResult, type FsmOptions } from './fsm.js';
export { CommandType, IGNORABLE_FLAG, encodeEnvelope, envelopeType, decodeBody } from './envelope.js';
export type { CommandHeader, NameRef, WriteCommand, DeleteCommand, WriteStatusCommand } from './commands.js';
export { decodeCommand, type DecodedCommand } from './decode-command.js';
