export { flipByte, newestLevelDbLog, tempDir } from './fs-faults.js';
