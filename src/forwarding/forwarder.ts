import { CairnError, ErrorCode, type Clock, type Deadline, type DeadlineSweep, type NodeId } from '../base/index.js';
import type { ForwardOp, Forwarder } from '../replica/index.js';
import { fromErrorMsg } from './cluster-service.js';
import { packValue, unpackValue } from './codec.js';
import type { ClientPool, ForwardRequestMsg } from './grpc-defs.js';

export interface GrpcForwarderOptions {
  readonly self: NodeId;
  readonly clusterId: () => string;
  readonly addressOf: (id: NodeId) => string | undefined;
  readonly pool: ClientPool;
  /** Told about each forwarded operation (for metrics). */
  readonly onForward?: (kind: ForwardOp['kind'], outcome: 'ok' | 'error') => void;
  /**
   * Deadlines of forwarded calls on one shared timer (and the clock it reads): a call past its
   * deadline is cancelled by the sweep instead of by a gRPC deadline, which arms a timer per
   * call here and another on the leader. Absent: each call carries a gRPC deadline.
   */
  readonly deadlines?: { readonly sweep: DeadlineSweep; readonly clock: Clock };
}

/**
 * Follower -> leader forwarding over the cluster port. A call that fails before reaching the
 * leader is UNAVAILABLE (nothing happened); a call that may have reached it and gives no answer
 * in time is TIMEOUT (outcome unknown). The coordinator retries both with the same envelope.
 */
export class GrpcForwarder implements Forwarder {
  constructor(private readonly opts: GrpcForwarderOptions) {}

  forward(leader: NodeId, op: ForwardOp, timeoutMs: number): Promise<unknown> {
    const address = this.opts.addressOf(leader);
    if (!address) return Promise.reject(new CairnError(ErrorCode.UNAVAILABLE, `no address known for leader ${leader}`));
    const req: ForwardRequestMsg = { clusterId: this.opts.clusterId(), from: this.opts.self, timeoutMs };
    switch (op.kind) {
      case 'envelope':
        req.envelope = op.envelope;
        break;
      case 'config-change':
        req.configChange = packValue(op.change);
        break;
      case 'transfer':
        req.transferTo = op.to;
        break;
      case 'lease':
        req.lease = packValue(op.request);
        break;
    }
    const deadlines = this.opts.deadlines;
    return new Promise((resolve, reject) => {
      let expired = false;
      let answered = false;
      let deadline: Deadline | undefined;
      const call = this.opts.pool.get(address).forward(req, deadlines === undefined ? { deadline: Date.now() + timeoutMs } : {}, (err, res) => {
        answered = true;
        deadline?.cancel();
        if (err) {
          this.opts.onForward?.(op.kind, 'error');
          if (expired) reject(new CairnError(ErrorCode.TIMEOUT, `forwarding to leader ${leader} got no answer within ${timeoutMs} ms; the operation may or may not have been applied`));
          // UNAVAILABLE before a connection existed means the request never left: safe to retry.
          else if (err.code === 14 /* UNAVAILABLE */) reject(new CairnError(ErrorCode.UNAVAILABLE, `leader ${leader} at ${address} is unreachable: ${err.details}`));
          else reject(new CairnError(ErrorCode.TIMEOUT, `forwarding to leader ${leader} failed (${err.details}); the operation may or may not have been applied`));
          return;
        }
        if (!res) {
          reject(new CairnError(ErrorCode.INTERNAL, 'empty forward response'));
          return;
        }
        if (res.error && res.error.code !== '') {
          this.opts.onForward?.(op.kind, 'error');
          reject(fromErrorMsg(res.error));
          return;
        }
        this.opts.onForward?.(op.kind, 'ok');
        try {
          resolve(res.result.length > 0 ? unpackValue(res.result) : undefined);
        } catch (e) {
          reject(new CairnError(ErrorCode.INTERNAL, `the leader's result could not be decoded: ${e instanceof Error ? e.message : String(e)}`));
        }
      });
      // Registered once the call exists (to cancel it); an answer before that leaves none to cancel.
      if (!answered) deadline = deadlines?.sweep.add(deadlines.clock.monotonicMs() + timeoutMs, () => {
        expired = true;
        call.cancel();
      });
    });
  }
}
