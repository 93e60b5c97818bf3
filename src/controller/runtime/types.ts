import type { CairnClient, Informer, Resource } from '../../client/index.js';
import type { Logger } from '../../base/index.js';

/**
 * The contract between the controller runtime (src/controller/runtime) and the controllers
 * built on it (src/controller/streaming, users' own). Keys are cache keys of the managed type:
 * `partition/namespace/name` (client `keyOf`, `resourceKey`).
 */

/**
 * A type's scope (as registered): which tenancy fields its resources have. The runtime's caches
 * follow every partition and namespace of the type; it learns the scope from the server when a
 * spec does not say.
 */
export type TypeScope = 'cluster' | 'partition' | 'namespace';

/** A type the controller watches besides the one it manages, and how a change maps to work. */
export interface WatchedType {
  /** `group.version.Kind`, e.g. `streaming.v1.Spu`. */
  readonly type: string;
  /** Keys of the managed type to reconcile when a resource of this type changes (added, updated or deleted). */
  readonly map: (changed: Resource<unknown>) => readonly string[];
  /** The type's scope; default: asked of the server at start. */
  readonly scope?: TypeScope;
}

export interface ReconcileContext {
  readonly client: CairnClient;
  /** The informer cache of the managed type or of a watched type (synced before any reconcile). */
  cache<D = unknown>(type: string): Informer<D>;
  /** Time from the runtime's injected clock (ms). */
  nowMs(): number;
  /** Aborted when the controller stops (leadership lost, lock lost, shutdown). */
  readonly signal: AbortSignal;
  /** The controller's name (its status key); set by the runtime. */
  readonly controllerName?: string;
  /** The runtime's logger, for the controller's own lines; set by the runtime. */
  readonly logger?: Logger;
}

export interface ReconcileResult {
  /** Reconcile this key again after this many ms (a delay, not an error: no backoff). */
  readonly requeueAfterMs?: number;
}

export interface ControllerSpec {
  /** Also the status key it writes, e.g. `streaming.v1.topic-controller`. */
  readonly name: string;
  /** `group.version.Kind` of the type it manages: its changes enqueue their own key. */
  readonly managedType: string;
  readonly watches?: readonly WatchedType[];
  /** Level-triggered: read desired state from the caches, act, write status. Throwing = error (per-key backoff). */
  reconcile(key: string, ctx: ReconcileContext): Promise<ReconcileResult | void>;
  /** Enqueue every cached key of the managed type this often (ms). Default: the runtime's. */
  readonly resyncMs?: number;
  /** The managed type's scope; default: asked of the server at start. */
  readonly managedScope?: TypeScope;
  /** Keys reconciled at once (never the same key twice). Default: the runtime's (1). */
  readonly workers?: number;
}
