import { CairnError, ErrorCode } from '../base/index.js';
import type { Coordinator } from '../replica/index.js';
import type { EventPublisher } from '../stream/index.js';

/** Where a node is in its life. Only forward: starting -> running -> stopping -> stopped (or starting -> stopping). */
export type NodeState = 'starting' | 'running' | 'stopping' | 'stopped';

/**
 * How long a request with no deadline of its own (HTTP has none) waits for a starting node:
 * the coordinator's default request timeout, so a request waits no longer than a write could.
 */
export const START_WAIT_DEFAULT_MS = 10_000;

/**
 * The node the api serves, as its services see it (the port; src/server's `Node` implements
 * it). Starting is not failing: while the node forms or joins its cluster and opens its log, a
 * request waits for it, within the request's own deadline, instead of being refused.
 */
export interface ServedNode {
  readonly state: NodeState;
  /**
   * This node's coordinator: at once while running; while starting, once it runs, waiting at
   * most `timeoutMs`. Rejects with UNAVAILABLE (retry, perhaps on another node) if the node did
   * not run within `timeoutMs`, could not start, or is stopping.
   */
  coordinator(timeoutMs: number): Promise<Coordinator>;
  /** This node's event publisher (what watches subscribe to), under the same rules. */
  publisher(timeoutMs: number): Promise<EventPublisher>;
  /** The coordinator if the node runs now, without waiting: probes and gauges report, never wait. */
  coordinatorNow(): Coordinator | undefined;
  /** The publisher if the node runs now, without waiting. */
  publisherNow(): EventPublisher | undefined;
}

/**
 * A node that runs from the start: for a caller that opened its coordinator (and publisher)
 * itself, as tests do. A part not given rejects with UNAVAILABLE when asked for.
 */
export function runningNode(parts: { readonly coordinator?: Coordinator; readonly publisher?: EventPublisher }): ServedNode {
  const missing = (what: string): Promise<never> => Promise.reject(new CairnError(ErrorCode.UNAVAILABLE, `this node serves no ${what}`));
  return {
    state: 'running',
    coordinator: () => (parts.coordinator ? Promise.resolve(parts.coordinator) : missing('coordinator')),
    publisher: () => (parts.publisher ? Promise.resolve(parts.publisher) : missing('event publisher')),
    coordinatorNow: () => parts.coordinator,
    publisherNow: () => parts.publisher,
  };
}
