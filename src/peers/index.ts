export * from './errors';
export * from './keys';
export * from './status';
export * from './service';
export * from './cap-plan';
export * from './view';
export * from './bootstrap';
export * from './readiness';
export { renderClientConfig, formatEndpoint } from './client-config';
export * from './client-options';
export { NAME_MAX_BYTES, NAME_MAX_LENGTH, NAME_PATTERN, checkName } from './names';
export { EXPIRES_AT_PATTERN, TIMEOUT_MAX_MS, parseExpiresAt } from './expiry';
export type { KernelObserver, PeerSnapshot } from './snapshot';
export type { KernelDataCap, LimitState } from '../kernel/types';
export type { PeerChange, PeerChangeSink, PeerChangeType } from './event-sink';
export {
  PERIODS,
  PERIOD_START_PATTERN,
  type Period,
  formatPeriodStart,
  nextReset,
} from './periods';
export type { DataCapChange } from './cap-plan';
export type { CapPlan } from '../kernel/types';
export {
  savedExhaustions,
  type CapsRead,
  type ExhaustionTimes,
  type KnownExhaustion,
} from './exhaustion-times';
