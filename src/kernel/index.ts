/** Opens every kernel facility the daemon uses, each over its own netlink socket. */
import { type TransportFactory, openNativeTransport } from '../netlink';
import { Links } from './link';
import type { Kernel, QuotaApi, ShaperApi } from './types';
import { WireGuard } from './wireguard';

export * from './types';
export { FacilityUnavailableError, NetlinkError, isNetlinkError } from './errors';

// TRANSIENT: replaced by the tc shaper and the nf_tables quota when they land (issues 4 and 5).
function notBuilt(what: string): never {
  throw new Error(`${what} is not built yet`);
}
const pendingShaper: ShaperApi = {
  ensure: async () => notBuilt('speed limiting'),
  setLimit: async () => notBuilt('speed limiting'),
  removeLimit: async () => notBuilt('speed limiting'),
  listLimits: async () => new Map(),
};
const pendingQuota: QuotaApi = {
  ensure: async () => notBuilt('data caps'),
  setCap: async () => notBuilt('data caps'),
  removeCap: async () => notBuilt('data caps'),
  listCaps: async () => new Map(),
};

export async function openKernel(open: TransportFactory = openNativeTransport): Promise<Kernel> {
  const wireguard = new WireGuard(open);
  const link = new Links(open);
  return {
    wireguard,
    link,
    shaper: pendingShaper,
    quota: pendingQuota,
    close() {
      wireguard.close();
      link.close();
    },
  };
}
