/** Test helpers for the store (and for other modules' tests and the simulator). */
export { checkInvariants } from './invariants.js';
export { ReferenceStore, canonicalText, plain, SAMPLE_DATA, type Outcome } from './reference.js';
export {
  SMALL,
  WIDE,
  opArb,
  stepsArb,
  querySpecArb,
  resolveQuery,
  resolve,
  contextFor,
  outcomeOf,
  normalizeReference,
  plainAll,
  typeOf,
  tenancyOf,
  type Universe,
  type OpSpec,
  type Step,
  type Command,
  type QuerySpec,
} from './ops.js';
