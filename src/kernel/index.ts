/** Opens every kernel facility the daemon uses, each over its own netlink socket. */
import { type TransportFactory, openNativeTransport } from '../netlink';
import { Links } from './link';
import { Probe } from './probe';
import { Quota } from './quota';
import { Shaper, type ShaperOptions } from './shaper';
import type { Kernel } from './types';
import { WireGuard } from './wireguard';

export * from './types';
export { FacilityUnavailableError, NetlinkError, isNetlinkError } from './errors';

/**
 * One socket per facility, so a slow tc change never queues behind a WireGuard dump (a netlink
 * socket runs one exchange at a time). `open` is a transcript player in tests.
 */
export async function openKernel(
  open: TransportFactory = openNativeTransport,
  options: { shaper?: ShaperOptions } = {},
): Promise<Kernel> {
  const wireguard = new WireGuard(open);
  const link = new Links(open);
  const shaper = new Shaper(open, options.shaper);
  const quota = new Quota(open);
  const probe = new Probe(open);
  return {
    wireguard,
    link,
    shaper,
    quota,
    probe,
    close() {
      wireguard.close();
      link.close();
      shaper.close();
      quota.close();
      probe.close();
    },
  };
}
