/** Opens every kernel facility the daemon uses, each over its own netlink socket. */
import { SerialQueue, type TransportFactory, openNativeTransport } from '../netlink';
import { KernelExpiry } from './expiry';
import { Links } from './link';
import { KernelNames } from './names';
import { Probe } from './probe';
import { Quota } from './quota';
import { Shaper, type ShaperOptions } from './shaper';
import { Suspension } from './suspension';
import type { Kernel } from './types';
import { WireGuard } from './wireguard';

export * from './types';
export * from './errors';
export { watchCapExhaustion, type CapExhaustedNotice, type CapWatch } from './quota/exhaustion';

/**
 * One socket per facility, so a slow tc change never queues behind a WireGuard dump (a netlink
 * socket runs one exchange at a time). `open` is a transcript player in tests.
 */
export async function openKernel(
  open: TransportFactory = openNativeTransport,
  options: { shaper?: ShaperOptions } = {},
): Promise<Kernel> {
  // One change queue for the whole kernel layer: the service's changes and the shaper's and
  // quota's own writes run on it (re-entrant, so a change may call them).
  const changes = new SerialQueue();
  const wireguard = new WireGuard(open);
  const link = new Links(open);
  const shaper = new Shaper(open, { ...options.shaper, changes });
  const quota = new Quota(open, changes);
  const suspension = new Suspension(open, changes);
  const names = new KernelNames(open, changes);
  const expiry = new KernelExpiry(open, changes);
  const probe = new Probe(open);
  return {
    changes,
    wireguard,
    link,
    shaper,
    quota,
    suspension,
    names,
    expiry,
    probe,
    close() {
      wireguard.close();
      link.close();
      shaper.close();
      quota.close();
      suspension.close();
      names.close();
      expiry.close();
      probe.close();
    },
  };
}
