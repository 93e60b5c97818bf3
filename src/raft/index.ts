export * from './types.js';
export type { RaftOptions, PlantedBugs } from './options.js';
export { RawNode, type Proposed } from './raw-node.js';
export { resolveOptions as resolveRaftOptions } from './options.js';
export {
  applyConfigChange,
  decodeConfigEntry,
  describeConfig,
  encodeConfigEntry,
  isVoter,
  learners,
  memberOf,
  makeConfig,
  NOOP_ENTRY_DATA,
  parseConfigChange,
  voters,
} from './config.js';
export { majority, majorityValue, voteResult, type VoteResult } from './quorum.js';
