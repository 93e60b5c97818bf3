export { Router, createHttpServer, sendJson, sendError, MAX_BODY_BYTES, type Handler, type HttpRequest, type HttpResponse } from './http-server.js';
export { errorBody, grpcStatusOf, httpStatusOf, toCairnError, RETRY_AFTER_SECONDS } from './errors.js';
export { Metrics } from './metrics.js';
export { addOperatorRoutes, type OperatorDeps } from './operator-routes.js';
export { TypeRegistry, parseTypeString, formatTypeRef, type TypeRegistration, type RegisteredType, type Scope, type ProposedResource, type AccessVerb } from './registry.js';
export { registerDemoTypes } from './demo-types.js';
export { ResourceService, LIMITS, normalizeTenancy, type CallContext, type WriteRequest, type ReadRequest, type DeleteRequest, type WriteStatusRequest, type ListRequest, type ReadResult, type ListResult } from './resource-service.js';
export { resourceToJson, type ResourceJson, type ResourceIdJson, type StatusJson } from './resource-json.js';
export { addResourceRoutes } from './resource-routes.js';
