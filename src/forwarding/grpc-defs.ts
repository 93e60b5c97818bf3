import * as grpc from '@grpc/grpc-js';
import { cairn } from '../gen/cluster.js';

/**
 * gRPC service definitions for the cluster service, built on the generated protobufjs static
 * module (no run-time .proto loading). A request that does not parse is refused by grpc-js with
 * an error status; it never reaches our handlers.
 */
const pb = cairn.cluster.v1;

export interface RaftBatchMsg {
  clusterId: string;
  from: string;
  to: string;
  messages: Uint8Array[];
}
export interface RaftAckMsg {
  received: number;
}
export interface ErrorMsg {
  code: string;
  message: string;
  details: Uint8Array;
}
export interface ForwardRequestMsg {
  clusterId: string;
  from: string;
  envelope?: Uint8Array | null;
  configChange?: Uint8Array | null;
  transferTo?: string | null;
  lease?: Uint8Array | null;
  op?: 'envelope' | 'configChange' | 'transferTo' | 'lease';
  timeoutMs: number;
}
export interface ForwardResponseMsg {
  result: Uint8Array;
  error?: ErrorMsg | null;
}
export interface MemberMsg {
  id: string;
  address: string;
  voter: boolean;
}
export interface HelloRequestMsg {
  clusterId: string;
  from: string;
  address: string;
  bootstrapExpect: number;
}
export interface HelloResponseMsg {
  nodeId: string;
  address: string;
  clusterId: string;
  term: number;
  leader: string;
  members: MemberMsg[];
  bootstrapExpect: number;
  /** The node's HTTP/JSON API address; "" when unknown (not listening yet, or an older node). */
  httpAddress: string;
}

interface Codec<T> {
  encode(m: T): { finish(): Uint8Array };
  decode(b: Uint8Array): unknown;
  toObject(m: never, o: { longs: NumberConstructor; defaults: boolean; arrays: boolean; oneofs: boolean }): unknown;
}

function method<Req, Res>(
  name: string,
  req: Codec<Req>,
  res: Codec<Res>,
  requestStream: boolean,
): grpc.MethodDefinition<Req, Res> {
  const opts = { longs: Number, defaults: true, arrays: true, oneofs: true } as const;
  return {
    path: `/cairn.cluster.v1.Cluster/${name}`,
    requestStream,
    responseStream: false,
    requestSerialize: (m: Req) => Buffer.from(req.encode(m).finish()),
    requestDeserialize: (b: Buffer) => req.toObject(req.decode(b) as never, opts) as Req,
    responseSerialize: (m: Res) => Buffer.from(res.encode(m).finish()),
    responseDeserialize: (b: Buffer) => res.toObject(res.decode(b) as never, opts) as Res,
  };
}

export const clusterServiceDefinition = {
  raft: method<RaftBatchMsg, RaftAckMsg>('Raft', pb.RaftBatch as unknown as Codec<RaftBatchMsg>, pb.RaftAck as unknown as Codec<RaftAckMsg>, true),
  forward: method<ForwardRequestMsg, ForwardResponseMsg>(
    'Forward',
    pb.ForwardRequest as unknown as Codec<ForwardRequestMsg>,
    pb.ForwardResponse as unknown as Codec<ForwardResponseMsg>,
    false,
  ),
  hello: method<HelloRequestMsg, HelloResponseMsg>('Hello', pb.HelloRequest as unknown as Codec<HelloRequestMsg>, pb.HelloResponse as unknown as Codec<HelloResponseMsg>, false),
} satisfies grpc.ServiceDefinition;

export interface ClusterClient extends grpc.Client {
  raft(callback: (err: grpc.ServiceError | null, ack?: RaftAckMsg) => void): grpc.ClientWritableStream<RaftBatchMsg>;
  forward(req: ForwardRequestMsg, options: grpc.CallOptions, callback: (err: grpc.ServiceError | null, res?: ForwardResponseMsg) => void): grpc.ClientUnaryCall;
  hello(req: HelloRequestMsg, options: grpc.CallOptions, callback: (err: grpc.ServiceError | null, res?: HelloResponseMsg) => void): grpc.ClientUnaryCall;
}

const ClientCtor = grpc.makeGenericClientConstructor(clusterServiceDefinition, 'Cluster');

/**
 * Clients per peer address, shared by the Raft transport and the forwarder. `credentials`
 * makes each new channel's credentials: mutual TLS with this node's certificate when the node
 * runs with TLS (src/auth `nodeChannelCredentials`), plaintext otherwise.
 */
export class ClientPool {
  private readonly clients = new Map<string, ClusterClient>();

  constructor(private readonly credentials: () => grpc.ChannelCredentials = () => grpc.credentials.createInsecure()) {}

  get(address: string): ClusterClient {
    let c = this.clients.get(address);
    if (!c) {
      c = new ClientCtor(address, this.credentials(), {
        'grpc.keepalive_time_ms': 10_000,
        'grpc.keepalive_timeout_ms': 5_000,
        'grpc.initial_reconnect_backoff_ms': 100,
        'grpc.max_reconnect_backoff_ms': 1_000,
        'grpc.max_receive_message_length': 64 * 1024 * 1024,
        'grpc.max_send_message_length': 64 * 1024 * 1024,
      }) as unknown as ClusterClient;
      this.clients.set(address, c);
    }
    return c;
  }

  close(): void {
    for (const c of this.clients.values()) c.close();
    this.clients.clear();
  }
}
