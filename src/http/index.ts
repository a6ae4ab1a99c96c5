export {
  createApp,
  CONFIG_NOT_STORED_MESSAGE,
  DEFAULT_BODY_LIMIT_BYTES,
  type AppOptions,
} from './app';
export { createMetrics, METRICS_CONTENT_TYPE, type Metrics, type MetricsOptions } from './metrics';
