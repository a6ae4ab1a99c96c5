export {
  createApp,
  CONFIG_NOT_STORED_MESSAGE,
  DEFAULT_BODY_LIMIT_BYTES,
  type AppOptions,
} from './app';
export { TokenStore, requireScope, type Scope, type ScopedTokens } from './auth';
export { requestLog, REQUEST_ID_HEADER } from './request-log';
export { createMetrics, METRICS_CONTENT_TYPE, type Metrics, type MetricsOptions } from './metrics';
export { ROUTES, type RouteDef, type RouteId } from './routes';
export { openApiDocument } from './openapi';
export { createServer, DEFAULT_HTTP_LIMITS, type HttpLimits, type ServerOptions } from './server';
export { ListBodies } from './list-body';
export { listFastPath, type FastPath, type ListFastPathOptions } from './list-fast-path';
export { EVENTS_ROUTE, eventStreamHandler, eventPayload } from './events';
