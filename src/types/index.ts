export { registerStreamingTypes, STREAMING_LIMITS } from './streaming.js';
export * from './streaming-model.js';
