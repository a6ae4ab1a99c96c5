export {
  createApp,
  CONFIG_NOT_STORED_MESSAGE,
  DEFAULT_BODY_LIMIT_BYTES,
  type AppOptions,
} from './app';
