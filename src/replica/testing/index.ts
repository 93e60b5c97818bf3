export { MemoryNetwork } from './memory-transport.js';
export { MemoryLogStore, type MemoryLogStoreOptions, type MemoryLogStoreStats } from './memory-log-store.js';
export { MemorySnapshotStore, type MemorySnapshotStoreOptions } from './memory-snapshot-store.js';
export {
  describeEntries,
  describeLoaded,
  entries,
  entry,
  hardState,
  logStoreContract,
  type LogStoreContractOptions,
  type LogStoreHarness,
} from './log-store-contract.js';
export { describeSnapshot, snapshot, snapshotStoreContract, type SnapshotStoreHarness } from './snapshot-store-contract.js';
export { LocalCluster, testClock, waitUntil, type LocalNode, type LocalClusterOptions } from './local-cluster.js';
export { advanceUntil, artistWrite, closeInSimulatedTime, gatedLogStore } from './simulated.js';
