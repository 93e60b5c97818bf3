/**
 * src/store: the in-memory store of typed, versioned resources, applied to by the FSM.
 * See README.md for what it owns and the semantics it implements.
 */
export { ResourceStore, lowWaterBytes } from './store.js';
export { resourceBytes, jsonBytes, utf8Length, RESOURCE_OVERHEAD_BYTES } from './size.js';
export { StoreSnapshot } from './snapshot.js';
export { FORMAT as SNAPSHOT_FORMAT, FORMAT_VERSION as SNAPSHOT_FORMAT_VERSION } from './codec.js';
export { MAX_JSON_DEPTH } from './json.js';
export { formatType, formatName } from './keys.js';
export {
  WILDCARD,
  type TypeRef,
  type Tenancy,
  type ResourceId,
  type ConditionState,
  type Condition,
  type StatusEntry,
  type JsonValue,
  type Resource,
  type ApplyContext,
  type QuotaContext,
  type ChangeRecord,
  type ResourceKeyRef,
  type ResourceRef,
  type WriteInput,
  type WriteResult,
  type DeleteInput,
  type DeleteResult,
  type WriteStatusInput,
  type WriteStatusResult,
  type ReadInput,
  type ListQuery,
  type PageOptions,
  type Page,
  type StoreReader,
} from './types.js';
