/** Every transcript scenario, one import per facility; `npm run record-transcripts` records them. */
import { apiPeers } from './api';
import { dualStack, dualStackSuspension } from './dual-stack';
import { peerExpiry } from './expiry';
import { linkLifecycle } from './link';
import { peerNames } from './names';
import { nftablesNotifications, nftablesNotificationsInet } from './notifications';
import { quotaScenarios } from './quota';
import type { Scenario } from './scenario';
import { shaperScenarios } from './shaper';
import { quotaThrottle } from './throttle';
import { wireguardDevice } from './wireguard';

export const scenarios: Scenario[] = [
  wireguardDevice,
  linkLifecycle,
  ...quotaScenarios,
  quotaThrottle,
  ...shaperScenarios,
  apiPeers,
  nftablesNotifications,
  nftablesNotificationsInet,
  dualStack,
  dualStackSuspension,
  peerNames,
  peerExpiry,
];
