import { CairnClientError, ClientErrorCode } from './errors.js';
import type { Resource, ResourceId } from './types.js';
import type { WatchEvent, WatchOptions, WatchSpec, WatchStats, WatchStream } from './watch.js';

/** Anything that opens watches: a CairnClient. */
export interface WatchSource {
  watch<D = unknown>(watches: WatchSpec | readonly WatchSpec[], opts?: WatchOptions): WatchStream<D>;
}

/** What a cache (view, informer) follows: a type, a tenancy (`*` wildcards) and a name prefix, as for List. */
export interface CacheSpec {
  readonly type: string;
  readonly partition?: string;
  readonly namespace?: string;
  readonly namePrefix?: string;
}

/** A cache's key for a resource: `partition/namespace/name` (empty parts for scopes without them, e.g. `//name` for a cluster-scoped type). */
export function resourceKey(partition: string, namespace: string, name: string): string {
  return `${partition}/${namespace}/${name}`;
}

/** The cache key of a resource or resource id. */
export function keyOf(r: Resource<unknown> | ResourceId): string {
  const id = 'id' in r ? r.id : r;
  return resourceKey(id.tenancy.partition, id.tenancy.namespace, id.name);
}

/** @internal One watch of a stream and what consumes it. */
export interface WatchSink {
  readonly spec: CacheSpec;
  /** Events of this watch, and every bookmark. Must not throw. */
  handle(ev: WatchEvent<unknown>): void;
  /** The stream ended: closed (no error) or failed for good. */
  end(error: CairnClientError | undefined): void;
}

/**
 * @internal Runs one watch stream for several sinks (one watch each, with Consul framing) and
 * hands every event to the sink of its watch, bookmarks to all.
 */
export class WatchFeed {
  private stream: WatchStream<unknown> | undefined;

  constructor(
    private readonly source: WatchSource,
    private readonly sinks: readonly WatchSink[],
    private readonly opts: WatchOptions,
  ) {}

  get stats(): WatchStats | undefined {
    return this.stream?.stats;
  }

  /** The node serving the stream. */
  get endpoint(): string | undefined {
    return this.stream?.endpoint;
  }

  start(): void {
    if (this.stream !== undefined) return;
    const stream = this.source.watch<unknown>(
      this.sinks.map((s) => ({ ...s.spec, snapshotOnCompacted: true })),
      this.opts,
    );
    this.stream = stream;
    void this.pump(stream);
  }

  close(): void {
    this.stream?.close();
  }

  private async pump(stream: WatchStream<unknown>): Promise<void> {
    let error: CairnClientError | undefined;
    try {
      for await (const ev of stream) {
        if (ev.type === 'bookmark') for (const s of this.sinks) s.handle(ev);
        else this.sinks[ev.watch]?.handle(ev);
      }
    } catch (e) {
      error = e instanceof CairnClientError ? e : new CairnClientError(ClientErrorCode.INTERNAL, `watch feed failed: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
    }
    for (const s of this.sinks) s.end(error);
  }
}
