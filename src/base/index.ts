export * from './ids.js';
export * from './assert.js';
export * from './errors.js';
export * from './result.js';
export * from './ports.js';
export { SeededRandom } from './prng.js';
export { DeadlineSweep, type Deadline, type DeadlineSweepOptions } from './deadline-sweep.js';
