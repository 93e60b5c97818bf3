export { EventPublisher, Subscription, windowEventBytes, type PublisherOptions, type StoreSource, type SubscribeOptions } from './publisher.js';
export { matches, filterKey, type WatchFilter, type StreamEvent, type EndCode } from './types.js';
