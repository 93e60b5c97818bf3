export { Router, createHttpServer, sendJson, sendError, MAX_BODY_BYTES, type Handler, type HttpRequest, type HttpResponse } from './http-server.js';
export { errorBody, grpcStatusOf, httpStatusOf, toCairnError, RETRY_AFTER_SECONDS } from './errors.js';
export { Metrics } from './metrics.js';
export { addOperatorRoutes, type OperatorDeps } from './operator-routes.js';
