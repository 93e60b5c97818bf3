import * as grpc from '@grpc/grpc-js';
import type { NowMs } from './timed-ports.js';

/** The public resource API's methods; only these are timed (a bounded set of labels). */
export const RESOURCE_SERVICE_PREFIX = '/cairn.resource.v1.ResourceService/';

/**
 * A gRPC server interceptor timing each unary call of the public resource API, from its arrival
 * (the interceptor runs when the call's headers come in) until its status is sent: the node's
 * own share of a request, decoding, checks, the coordinator and encoding included
 * (cairn_grpc_request_seconds{method}; bench/README.md, "Where a CAS spends its time"). Streams
 * (watches) and the cluster service's methods pass through untouched. Costs one interceptor
 * layer per timed call.
 */
export function requestTimer(observe: (method: string, seconds: number) => void, now: NowMs): grpc.ServerInterceptor {
  return (method, call) => {
    if (method.requestStream || method.responseStream || !method.path.startsWith(RESOURCE_SERVICE_PREFIX)) return call as grpc.ServerInterceptingCall;
    const started = now();
    const name = method.path.slice(RESOURCE_SERVICE_PREFIX.length);
    return new grpc.ServerInterceptingCall(call, {
      sendStatus: (status, next) => {
        observe(name, (now() - started) / 1000);
        next(status);
      },
    });
  };
}
