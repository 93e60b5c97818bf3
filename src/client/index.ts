export { CairnClient, CLIENT_DEFAULTS, type CairnClientOptions } from './client.js';
export { Compare, Op, TxnBuilder, TXN_CLIENT_MAX_PARTS, type TxnCompare, type TxnOp, type TxnOpResult, type TxnResourceRef, type TxnResult, type TxnSpec } from './txn.js';
export { WatchStream, WATCH_DEFAULTS, type WatchEvent, type WatchLogger, type WatchOptions, type WatchResetReason, type WatchSpec, type WatchStats } from './watch.js';
export { MaterializedView, type ViewOptions, type WaitOptions } from './view.js';
export { Informer, SharedInformerFactory, type DeleteInfo, type InformerHandlers } from './informer.js';
export { keyOf, resourceKey, type CacheSpec, type WatchSource } from './feed.js';
export { Leases, LeaseKeepAlive, type LeaseInfo, type LeaseTimeToLive, type LeaseGrantOptions, type LeaseLost, type LeaseLostReason, type KeepAliveOptions } from './lease.js';
export { CairnClientError, ClientErrorCode, isCairnClientError, isOutcomeUnknown, type CairnClientErrorInit } from './errors.js';
export type {
  CallOptions,
  Condition,
  ConditionState,
  Consistency,
  DeleteOptions,
  DeleteResult,
  ListByOwnerOptions,
  ListOptions,
  ListPage,
  ListPageOptions,
  ListResult,
  MutationOptions,
  ReadOptions,
  ReadResult,
  Resource,
  ResourceId,
  ResourceRef,
  Status,
  StatusBody,
  Tenancy,
  UpdateBody,
  UpdateFn,
  UpdateOptions,
  WriteBody,
} from './types.js';
