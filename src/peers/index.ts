export * from './errors';
export * from './keys';
export * from './status';
export * from './service';
export * from './bootstrap';
export * from './readiness';
export { renderClientConfig, formatEndpoint } from './client-config';
export type { KernelObserver, PeerSnapshot } from './snapshot';
export type { KernelDataCap, LimitState } from '../kernel/types';
