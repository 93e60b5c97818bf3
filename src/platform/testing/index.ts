export { flipByte, newestLevelDbLog, tempDir } from './fs-faults.js';
export { walRecordOf, walRecords, walSegments, type WalRecord } from './wal-faults.js';
export { logStoreDamageContract, type DamageHarness } from './log-store-damage-contract.js';
