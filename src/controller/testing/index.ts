export { ManualTime } from './manual-time.js';
