export { LevelLogStore, RAFT_LOG_DIR, RECOVERY_DATA_LOSS_MARKER, type LevelDbRecovery, type LevelLogStoreOptions, type LevelLogStoreStats } from './level-log-store.js';
export { FileSnapshotStore, SNAPSHOTS_DIR, type FileSnapshotStoreOptions, type SavedSnapshot } from './file-snapshot-store.js';
export { DataDirError, LOCK_FILE, NODE_ID_FILE, openDataDir, type DataDir, type DataDirProblem, type OpenDataDirOptions } from './data-dir.js';
export { StorageError, UnsupportedFormatError, isNoSpace } from './errors.js';
export { SystemClock, systemClock } from './clock.js';
export { SystemTimers, systemTimers } from './timers.js';
export { createLogger, type CreateLoggerOptions, type PinoLogger } from './logger.js';
export { LOG_FORMAT_VERSION } from './log-codec.js';
export { SNAPSHOT_FORMAT_VERSION } from './snapshot-format.js';
