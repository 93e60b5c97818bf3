export { ManualTime } from '../../base/testing/index.js';
