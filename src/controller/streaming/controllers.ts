/**
 * The streaming.v1 domain's controllers (Fluvio's SC), as ControllerSpecs for the controller
 * runtime: SPU liveness, SPU groups, topics, partitions. README.md beside this file describes
 * the model, the status encoding and the decisions.
 */
import { CairnError, ErrorCode } from '../../base/index.js';
import type { ControllerSpec } from '../runtime/types.js';
import { partitionController } from './partition-controller.js';
import type { StreamingLogger } from './shared.js';
import { spuController } from './spu-controller.js';
import { spuGroupController } from './spu-group-controller.js';
import { topicController } from './topic-controller.js';

export interface StreamingOptions {
  /** An SPU whose heartbeat has not changed for this long (ms, controller clock) is Offline. Default 10,000. */
  readonly spuTimeoutMs?: number;
  /** A follower may take over a partition only if it is at most this many offsets behind the log end. Default 1,000. */
  readonly maxLagOffsets?: number;
  /** Topics that wait (not Provisioned) are looked at again this often (ms), besides the SPU changes that wake them. Default 30,000. */
  readonly waitingRecheckMs?: number;
  /** Where the controllers report what they changed (a pino logger fits). */
  readonly logger?: StreamingLogger;
}

export const STREAMING_DEFAULTS = {
  spuTimeoutMs: 10_000,
  maxLagOffsets: 1_000,
  waitingRecheckMs: 30_000,
} as const;

function check(name: string, v: number, min: number): number {
  if (!Number.isSafeInteger(v) || v < min) throw new CairnError(ErrorCode.INVALID_ARGUMENT, `streaming controllers: ${name} must be an integer >= ${min}, got ${v}`);
  return v;
}

/** The four controllers, in the order a reader meets them: SPU, SPU group, topic, partition. */
export function streamingControllers(opts: StreamingOptions = {}): ControllerSpec[] {
  const spuTimeoutMs = check('spuTimeoutMs', opts.spuTimeoutMs ?? STREAMING_DEFAULTS.spuTimeoutMs, 1);
  const maxLagOffsets = check('maxLagOffsets', opts.maxLagOffsets ?? STREAMING_DEFAULTS.maxLagOffsets, 0);
  const waitingRecheckMs = check('waitingRecheckMs', opts.waitingRecheckMs ?? STREAMING_DEFAULTS.waitingRecheckMs, 1);
  const logger = opts.logger;
  return [
    spuController({ spuTimeoutMs, logger }),
    spuGroupController({ logger }),
    topicController({ waitingRecheckMs, logger }),
    partitionController({ maxLagOffsets, logger }),
  ];
}
