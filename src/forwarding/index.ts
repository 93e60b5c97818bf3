export { ClientPool, clusterServiceDefinition, type ClusterClient, type ForwardRequestMsg, type ForwardResponseMsg, type HelloResponseMsg } from './grpc-defs.js';
export { GrpcTransport, type GrpcTransportOptions } from './grpc-transport.js';
export { GrpcForwarder, type GrpcForwarderOptions } from './forwarder.js';
export { addClusterService, type ClusterServiceOptions, type PeerCall } from './cluster-service.js';
export { WireError, decodeMessage, encodeMessage, packValue, WIRE_LIMITS } from './codec.js';
