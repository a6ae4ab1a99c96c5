/**
 * A PeerService over a kernel that answers every list with `device` and no limits or caps, for
 * the host-side benches of the list path (bench/list-path.ts, bench/http-overhead.ts): the
 * daemon's own service code, without a kernel. Lists only: no change ever runs, so a
 * pass-through change queue serves.
 */
import type { WireGuardDevice } from '../../src/kernel/types';
import { PeerService, type PeerServiceOptions } from '../../src/peers';

export function serviceOver(device: WireGuardDevice, listMaxAgeMs: number): PeerService {
  const kernel = {
    wireguard: { getDevice: async () => device },
    shaper: { listLimits: async () => new Map() },
    quota: { listCaps: async () => new Map() },
    suspension: { listSuspended: async () => new Map() },
    link: {},
    changes: { run: <T>(task: () => Promise<T>): Promise<T> => task() },
  } as unknown as PeerServiceOptions['kernel'];
  const silent = { info() {}, warn() {}, error() {}, debug() {} };
  return new PeerService({ kernel, interfaceName: 'wgx', logger: silent, listMaxAgeMs });
}
