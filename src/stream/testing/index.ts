/** Test helpers for the stream (for its tests and other modules' tests; never for shipped code). */
export { NaivePublisher, type NaiveSubscription } from './naive-publisher.js';
