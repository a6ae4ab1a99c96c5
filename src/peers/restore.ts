/**
 * Carries out a restore plan (restore-plan.ts) at start: one read of the kernel, the plan, the
 * kernel changes in bulk (peers in one WireGuard call, caps in one nf_tables transaction with
 * the bytes they had counted), then the journal rewritten as the result with the current boot.
 * The journal is rewritten only after the kernel has everything: a crash half-way leaves the old
 * journal, and the next start restores again (what the kernel already has is kept).
 */
import type { CapRef, IpPrefix, Kernel, PeerRef } from '../kernel/types';
import type { StateStore } from '../state';
import { isFacilityAbsent, translateKernelError, type Facility } from './errors';
import { address6Field, planRestore, tunnelAddressOfCidrs, type RestoreMode } from './restore-plan';
import type { EventLogger } from './service';

export interface RestoreSummary {
  mode: RestoreMode;
  /** Peers the journal holds afterwards. */
  peers: number;
  /** Peers put back into the kernel. */
  restoredPeers: number;
  restoredLimits: number;
  restoredCaps: number;
  restoredSuspensions: number;
  adopted: number;
  removed: number;
  forgotten: number;
  milliseconds: number;
}

export interface RestoreOptions {
  kernel: Pick<Kernel, 'wireguard' | 'shaper' | 'quota' | 'suspension'>;
  store: Pick<StateStore, 'state' | 'replaceState'>;
  interfaceName: string;
  ifindex: number;
  /** The daemon created the interface in this start. */
  created: boolean;
  bootId: string;
  logger: EventLogger;
}

export function prefixOf(cidr: string): IpPrefix {
  const [address, length] = cidr.split('/');
  return { family: address.includes(':') ? 6 : 4, address, cidr: Number(length) };
}

async function step<T>(facility: Facility, ifname: string, work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (error) {
    throw translateKernelError(error, facility, ifname);
  }
}

async function optionalMap<K, V>(
  facility: Facility,
  ifname: string,
  read: () => Promise<Map<K, V>>,
): Promise<Map<K, V>> {
  try {
    return await step(facility, ifname, read);
  } catch (error) {
    if (isFacilityAbsent(error)) return new Map();
    throw error;
  }
}

export async function restoreFromState(options: RestoreOptions): Promise<RestoreSummary> {
  const started = performance.now();
  const { kernel, store, interfaceName: ifname, logger } = options;
  const [device, limits, caps, suspended] = await Promise.all([
    step('wireguard', ifname, () => kernel.wireguard.getDevice(ifname)),
    optionalMap('shaper', ifname, () => kernel.shaper.listLimits(ifname)),
    optionalMap('quota', ifname, () => kernel.quota.listCaps(ifname)),
    optionalMap('suspension', ifname, () => kernel.suspension.listSuspended(ifname)),
  ]);
  const plan = planRestore(store.state, {
    bootId: options.bootId,
    ifindex: options.ifindex,
    created: options.created,
    peers: device.peers,
    limits,
    caps,
    suspended,
  });

  if (plan.removePeers.length > 0) {
    await step('wireguard', ifname, () => kernel.wireguard.removePeers(ifname, plan.removePeers));
  }
  const live: PeerRef[] = [];
  for (const peer of plan.next.values()) {
    const address = tunnelAddressOfCidrs(peer.allowedIps);
    if (address !== null) {
      live.push({ address, ...address6Field(peer.allowedIps), publicKey: peer.publicKey });
    }
  }
  if (plan.suspensions.length > 0) {
    // Before the peers are back in WireGuard: a suspended peer never passes a packet.
    await step('suspension', ifname, () =>
      kernel.suspension.ensure(
        ifname,
        live,
        plan.suspensions.map((s) => ({
          address: s.address,
          ...(s.address6 === undefined ? {} : { address6: s.address6 }),
          publicKey: s.publicKey,
        })),
      ),
    );
  }
  if (plan.addPeers.length > 0) {
    await step('wireguard', ifname, () =>
      kernel.wireguard.addPeers(
        ifname,
        plan.addPeers.map((p) => ({
          publicKey: p.publicKey,
          allowedIps: p.allowedIps.map(prefixOf),
        })),
      ),
    );
  }
  if (plan.limits.length > 0) {
    await step('shaper', ifname, async () => {
      await kernel.shaper.ensure(ifname, live);
      await kernel.shaper.setLimits(
        ifname,
        plan.limits.map((l) => ({
          peer: {
            address: l.address,
            ...(l.address6 === undefined ? {} : { address6: l.address6 }),
            publicKey: l.publicKey,
          },
          bytesPerSecond: l.bytesPerSecond,
        })),
      );
    });
  }
  if (plan.caps.length > 0) {
    const saved = new Map(plan.caps.map((c) => [c.publicKey, c.cap]));
    const withCaps: CapRef[] = live.map((peer) => {
      const cap = saved.get(peer.publicKey);
      return cap ? { ...peer, lastSeen: cap } : peer;
    });
    await step('quota', ifname, () => kernel.quota.ensure(ifname, withCaps));
  }

  for (const warning of plan.warnings) {
    logger.warn(
      { event: warning.event, interface: ifname, publicKey: warning.publicKey },
      warning.message,
    );
  }
  await store.replaceState({
    boot: { bootId: options.bootId, ifindex: options.ifindex, interfaceName: ifname },
    iface: store.state.iface,
    peers: plan.next,
    intents: new Map(),
  });
  const count = (event: string): number => plan.warnings.filter((w) => w.event === event).length;
  const summary: RestoreSummary = {
    mode: plan.mode,
    peers: plan.next.size,
    restoredPeers: plan.addPeers.length,
    restoredLimits: plan.limits.length,
    restoredCaps: plan.caps.length,
    restoredSuspensions: plan.suspensions.length,
    adopted: count('peer_adopted'),
    removed: plan.removePeers.length,
    forgotten: count('peer_deleted_behind_back'),
    milliseconds: Math.round(performance.now() - started),
  };
  logger.info(
    { event: 'state_restored', interface: ifname, ...summary },
    summary.mode === 'reboot'
      ? `state restored after a reboot: ${summary.restoredPeers} peers, ${summary.restoredLimits} limits, ${summary.restoredCaps} caps, ${summary.restoredSuspensions} suspensions put back`
      : summary.mode === 'restart'
        ? 'state checked against the kernel after a restart'
        : `state directory started: ${summary.peers} peers adopted from the kernel`,
  );
  return summary;
}
