/**
 * The domain's calls into the kernel layer, in one place: every call is translated into a domain
 * error keyed on the facility (./errors.ts) and told to the observer; a facility the kernel lacks
 * reads as empty where a read may be empty (`optional`). It also finds peers in a device read and
 * names them as the shaper and the quota key them (`PeerRef`). It holds no state of its own but
 * the device hook: every device read is shown to `onDevice` (the drift watch notices an
 * interface recreated under the daemon). Nothing here writes the journal or publishes events.
 */
import type { Kernel, PeerRef, WireGuardDevice, WireGuardPeer } from '../kernel/types';
import {
  DomainError,
  EndpointUnknownError,
  PeerNotFoundError,
  PeerWithoutAddressError,
  isFacilityAbsent,
  translateKernelError,
  type Facility,
} from './errors';
import type { KernelObserver } from './snapshot';
import { allInOrder } from './settled';
import { tunnelAddress6Of, tunnelAddressOf } from './view';

export type PeerKernel = Pick<
  Kernel,
  'changes' | 'wireguard' | 'link' | 'shaper' | 'quota' | 'suspension' | 'names' | 'expiry'
>;

export function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** The IPv4 /32s of a peer's allowed IPs. */
export function hostAddressesOf(peer: WireGuardPeer): string[] {
  return peer.allowedIps.filter((p) => p.family === 4 && p.cidr === 32).map((p) => p.address);
}

/**
 * The peer as the shaper and the quota key it: its IPv4 tunnel address, and on a dual-stack
 * interface (`dualStack`) a peer's IPv6 one (issue 18), which its limit and cap cover too. An
 * IPv4-only interface keys on IPv4 alone, whatever allowed IPs other tools gave a peer.
 */
export function refOf(peer: WireGuardPeer, address: string, dualStack: boolean): PeerRef {
  const address6 = dualStack ? tunnelAddress6Of(peer) : null;
  return address6 === null
    ? { address, publicKey: peer.publicKey }
    : { address, address6, publicKey: peer.publicKey };
}

export class KernelCalls {
  constructor(
    readonly kernel: PeerKernel,
    readonly ifname: string,
    readonly dualStack: boolean,
    private readonly observer: KernelObserver | undefined,
    private readonly endpointHost: string | null,
    private readonly onDevice: (device: WireGuardDevice) => void = () => undefined,
  ) {}

  async call<T>(facility: Facility, operation: () => Promise<T>): Promise<T> {
    try {
      return await operation();
    } catch (error) {
      const translated = translateKernelError(error, facility, this.ifname);
      const code = translated instanceof DomainError ? translated.code : 'INTERNAL_ERROR';
      this.observer?.kernelError(facility, code);
      throw translated;
    }
  }

  /** A read of limits or caps on a kernel without that facility: there are none. */
  async optional<K, V>(facility: Facility, read: () => Promise<Map<K, V>>): Promise<Map<K, V>> {
    try {
      return await this.call(facility, read);
    } catch (error) {
      if (isFacilityAbsent(error)) return new Map();
      throw error;
    }
  }

  async readDevice(): Promise<WireGuardDevice> {
    const device = await this.call('wireguard', () => this.kernel.wireguard.getDevice(this.ifname));
    this.onDevice(device);
    return device;
  }

  async findPeer(publicKey: string): Promise<WireGuardPeer> {
    const device = await this.call('wireguard', () => this.kernel.wireguard.getDevice(this.ifname));
    const peer = device.peers.find((p) => p.publicKey === publicKey);
    if (peer === undefined) throw new PeerNotFoundError();
    return peer;
  }

  /** The peer's ref in a device read: 404 when it is not there, 409 without a tunnel address. */
  refIn(device: WireGuardDevice, publicKey: string, what: string): PeerRef {
    const peer = device.peers.find((p) => p.publicKey === publicKey);
    if (peer === undefined) throw new PeerNotFoundError();
    const ip = tunnelAddressOf(peer);
    if (ip === null) throw new PeerWithoutAddressError(what);
    return refOf(peer, ip, this.dualStack);
  }

  async refFor(publicKey: string, what: string): Promise<PeerRef> {
    const peer = await this.findPeer(publicKey);
    const ip = tunnelAddressOf(peer);
    if (ip === null) throw new PeerWithoutAddressError(what);
    return refOf(peer, ip, this.dualStack);
  }

  /** Every live peer with a tunnel address, as the facilities key them. */
  liveRefs(device: WireGuardDevice): PeerRef[] {
    const live: PeerRef[] = [];
    for (const peer of device.peers) {
      const address = tunnelAddressOf(peer);
      if (address !== null) live.push(refOf(peer, address, this.dualStack));
    }
    return live;
  }

  /** The shaper's removeLimit of a peer: its IPv4 address, and its IPv6 one if it has one. */
  removeLimitOf(ref: Pick<PeerRef, 'address' | 'address6'>): Promise<void> {
    const { shaper } = this.kernel;
    return ref.address6 == null
      ? shaper.removeLimit(this.ifname, ref.address)
      : shaper.removeLimit(this.ifname, ref.address, ref.address6);
  }

  /** The quota's removeCap of a peer, likewise. */
  removeCapOf(ref: Pick<PeerRef, 'address' | 'address6'>): Promise<void> {
    const { quota } = this.kernel;
    return ref.address6 == null
      ? quota.removeCap(this.ifname, ref.address)
      : quota.removeCap(this.ifname, ref.address, ref.address6);
  }

  /**
   * Removes the speed limits, data caps, suspensions and names the kernel holds for these addresses.
   * Only what is listed is removed, so a kernel without tc or nf_tables (or a facility not
   * built yet) costs nothing here.
   */
  async removeLimitsAndCaps(
    refs: ReadonlyArray<Pick<PeerRef, 'address' | 'address6'>>,
  ): Promise<void> {
    if (refs.length === 0) return;
    const [limits, caps, suspended] = await allInOrder([
      this.optional('shaper', () => this.kernel.shaper.listLimits(this.ifname)),
      this.optional('quota', () => this.kernel.quota.listCaps(this.ifname)),
      this.optional('suspension', () => this.kernel.suspension.listSuspended(this.ifname)),
    ]);
    for (const ref of refs) {
      if (limits.has(ref.address)) await this.call('shaper', () => this.removeLimitOf(ref));
      if (caps.has(ref.address)) await this.call('quota', () => this.removeCapOf(ref));
      if (suspended.has(ref.address)) {
        await this.call('suspension', () =>
          this.kernel.suspension.resume(this.ifname, ref.address, ref.address6),
        );
      }
    }
    // The names at these addresses: one GET each, the set never listed (it may hold every peer).
    try {
      const addresses = refs.map((ref) => ref.address);
      await this.call('names', () => this.kernel.names.removeNames(this.ifname, addresses));
    } catch (error) {
      if (!isFacilityAbsent(error)) throw error;
    }
    // The expiries at these addresses (issue 31): one GET per element, nothing else read.
    try {
      await this.call('expiry', () => this.kernel.expiry.removeExpiries(this.ifname, refs));
    } catch (error) {
      if (!isFacilityAbsent(error)) throw error;
    }
  }

  /** Host part of `server.endpoint`: configured, else the host's primary IPv4 address. */
  async serverHost(): Promise<string> {
    if (this.endpointHost !== null) return this.endpointHost;
    const primary = await this.call('link', () => this.kernel.link.primaryIpv4());
    if (primary === null) throw new EndpointUnknownError();
    return primary;
  }
}
