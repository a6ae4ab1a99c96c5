export {
  createApp,
  CONFIG_NOT_STORED_MESSAGE,
  DEFAULT_BODY_LIMIT_BYTES,
  type AppOptions,
} from './app';
export { TokenStore, requireScope, type Scope, type ScopedTokens } from './auth';
export { requestLog, REQUEST_ID_HEADER } from './request-log';
export { createServer, DEFAULT_HTTP_LIMITS, type HttpLimits } from './server';
