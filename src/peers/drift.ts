/**
 * Drift and repair: what changed in the kernel behind the daemon's back, and putting it right.
 *
 * Contract. Every fresh read is shown to `notice` (and every device read to `noticeDevice`). It
 * remembers each live peer's cap as last seen (the kernel stays the store of record: this memory
 * is only what a cap lost with the nft table is listed as, `enforced: false`, and restored from);
 * it logs at warn, once per distinct set, the losses it sees (a limit holding one way only, a cap
 * no longer enforced or gone, a limit or cap of an address no peer has) and marks the facility
 * damaged; an interface recreated under the daemon (another ifindex) marks both damaged. The
 * change pipeline calls `repairDamage` before each change: the next write repairs what the last
 * read showed lost. `repair` sets up or repairs one facility against the live peers of a device
 * read and logs each repair at warn; the kernel layer decides what to do. No journal, no events.
 */
import type {
  CapRef,
  DataCap,
  KernelDataCap,
  LimitState,
  Repair,
  WireGuardDevice,
} from '../kernel/types';
import { capToKeep } from './cap-plan';
import { type KernelCalls, messageOf } from './kernel-calls';
import type { EventLogger } from './contracts';
import { limitOf, tunnelAddressOf } from './view';

/** What a facility's repair log line says it repaired. */
const REPAIRED = { shaper: 'speed limits', quota: 'data caps', suspension: 'suspensions' } as const;

export type RepairedFacility = keyof typeof REPAIRED;

/** A kernel read as drift sees it. */
export interface DriftRead {
  device: WireGuardDevice;
  limits: ReadonlyMap<string, LimitState>;
  caps: ReadonlyMap<string, KernelDataCap>;
}

/** The losses a read shows: limits and caps of addresses no peer has, or no longer whole. */
function lossesOf(
  read: DriftRead,
  live: ReadonlyMap<string, string>,
  lastCaps: ReadonlyMap<string, { publicKey: string; cap: DataCap }>,
): { limits: string[]; caps: string[] } {
  const limits: string[] = [];
  const caps: string[] = [];
  for (const [address, state] of read.limits) {
    const { holds } = limitOf(state);
    if (!live.has(address)) limits.push(`speed limit for ${address}, which no peer has`);
    else if (holds === 'download' || holds === 'upload') {
      limits.push(`speed limit of ${address} holds for ${holds} only`);
    }
  }
  for (const [address, cap] of read.caps) {
    if (!live.has(address)) caps.push(`data cap for ${address}, which no peer has`);
    else if (!cap.enforced) caps.push(`data cap of ${address} is not enforced`);
  }
  for (const [address, seen] of lastCaps) {
    if (live.get(address) === seen.publicKey && !read.caps.has(address)) {
      caps.push(`data cap of ${address} (${seen.cap.quotaBytes} bytes) is gone from the kernel`);
    }
  }
  return { limits, caps };
}

/**
 * A cap as last seen at an address, with its owner. One the daemon wrote is kept as written; one
 * a read showed keeps the kernel's object (`from`: never changed once handed out) and is made
 * the cap the daemon keeps (capToKeep) only when first asked for: only a lost cap, a repair or a
 * change needs it, and a start's first read sees every cap at once (issue 29).
 */
class SeenCap {
  private kept: DataCap | null;

  constructor(
    readonly publicKey: string,
    kept: DataCap | null,
    readonly from?: KernelDataCap,
  ) {
    this.kept = kept;
  }

  get cap(): DataCap {
    this.kept ??= capToKeep(this.from!);
    return this.kept;
  }
}

export class Drift {
  /**
   * The caps the daemon last saw, per tunnel address with the owner's key; `from` the kernel's
   * cap object it was kept from (the quota facility hands out the same object again while the
   * cap did not move, and nothing changes a cap it handed out), so an unchanged cap is not
   * copied again on every poll.
   */
  private readonly lastCaps = new Map<string, SeenCap>();
  /** What the last read showed lost behind the daemon's back: the next write repairs it. */
  private damage = { shaper: false, quota: false };
  /** The losses last logged, so that polling the list logs each loss once. */
  private lastLosses = '';
  /** The interface's ifindex when last read: another one means it was deleted and recreated. */
  private lastIfindex: number | undefined;

  constructor(
    private readonly calls: KernelCalls,
    private readonly log: EventLogger,
    /**
     * The cap the state directory holds for a peer (null: none, or no state directory): a cap
     * the kernel lost is restored with its plan and rate, which every acknowledged change
     * recorded there first, whatever this memory saw.
     */
    private readonly savedCap: (publicKey: string) => DataCap | null = () => null,
  ) {}

  /**
   * What a cap the kernel lost is restored from: the journal's cap when it holds one, with the
   * bytes counted as last seen here (a read newer than its last checkpoint), else the cap last
   * seen here.
   */
  private restoreFrom(address: string, publicKey: string): DataCap | null {
    const seen = this.capOf(address, publicKey);
    const saved = this.savedCap(publicKey);
    if (saved === null) return seen;
    return { ...saved, usedBytes: seen?.usedBytes ?? saved.usedBytes };
  }

  /** The cap last seen at `address`, if its owner is `publicKey`. */
  capOf(address: string, publicKey: string): DataCap | null {
    const seen = this.lastCaps.get(address);
    return seen?.publicKey === publicKey ? seen.cap : null;
  }

  /** The cap last seen at `address`, whoever owns it. */
  anyCapAt(address: string): DataCap | undefined {
    return this.lastCaps.get(address)?.cap;
  }

  rememberCap(address: string, publicKey: string, cap: DataCap): void {
    this.lastCaps.set(address, new SeenCap(publicKey, cap));
  }

  forgetCap(address: string): void {
    this.lastCaps.delete(address);
  }

  /**
   * An interface recreated under the daemon (same name, new ifindex) took its peers and its tc
   * state with it, while the IFB and the nft table stayed: both are reconciled with the new
   * peers on the next write, so nothing of the old peers reaches a new one.
   */
  noticeDevice(device: WireGuardDevice): void {
    if (this.lastIfindex !== undefined && device.ifindex !== this.lastIfindex) {
      this.damage = { shaper: true, quota: true };
      this.log.warn(
        {
          event: 'interface_recreated',
          interface: this.calls.ifname,
          ifindex: device.ifindex,
          previousIfindex: this.lastIfindex,
        },
        'the interface was recreated behind wg-peerd; limits and caps are reconciled with its peers on the next write',
      );
    }
    this.lastIfindex = device.ifindex;
  }

  /**
   * Remembers the caps of a fresh read and notices what was lost behind the daemon's back
   * (logged at warn once per distinct loss; repaired on the next write).
   */
  notice(read: DriftRead): void {
    this.noticeDevice(read.device);
    // Nothing to check on a device without limits or caps, now or last read: no walk over its
    // peers (a Map of 50,000 addresses per poll was measurable on a big idle server).
    const idle = read.limits.size === 0 && read.caps.size === 0 && this.lastCaps.size === 0;
    if (idle && this.lastLosses === '') return;
    const live = new Map<string, string>(); // address → public key
    for (const peer of read.device.peers) {
      const address = tunnelAddressOf(peer);
      if (address !== null) live.set(address, peer.publicKey);
    }
    const { limits, caps } = lossesOf(read, live, this.lastCaps);
    // Deleting the entry being visited is safe in a Map's iteration.
    for (const [address, seen] of this.lastCaps) {
      if (live.get(address) !== seen.publicKey) this.lastCaps.delete(address);
    }
    for (const [address, cap] of read.caps) {
      const publicKey = live.get(address);
      if (publicKey === undefined) continue;
      const seen = this.lastCaps.get(address);
      if (seen?.from === cap && seen.publicKey === publicKey) continue;
      this.lastCaps.set(address, new SeenCap(publicKey, null, cap));
    }
    this.damage = {
      shaper: this.damage.shaper || limits.length > 0,
      quota: this.damage.quota || caps.length > 0,
    };
    const losses = [...limits, ...caps];
    const text = losses.join('; ');
    if (text !== '' && text !== this.lastLosses) {
      this.log.warn(
        { event: 'kernel_state_lost', interface: this.calls.ifname, found: losses },
        `limits or caps changed behind wg-peerd's back (${text}); the next write repairs them`,
      );
    }
    this.lastLosses = text;
  }

  /** The owner of each cap of a read (what `notice` just remembered): address → key. */
  capOwners(caps: ReadonlyMap<string, KernelDataCap>): Map<string, string> {
    const owners = new Map<string, string>();
    for (const address of caps.keys()) {
      const owner = this.lastCaps.get(address)?.publicKey;
      if (owner !== undefined) owners.set(address, owner);
    }
    return owners;
  }

  /**
   * The kernel's caps, and for a live peer whose cap the kernel lost, the one last seen (not
   * enforced). `notice` has already dropped what it remembered of peers that are gone.
   */
  listedCaps(kernelCaps: ReadonlyMap<string, KernelDataCap>): ReadonlyMap<string, KernelDataCap> {
    let listed: Map<string, KernelDataCap> | null = null;
    for (const [address, seen] of this.lastCaps) {
      if (kernelCaps.has(address)) continue;
      listed ??= new Map(kernelCaps);
      listed.set(address, { ...seen.cap, enforced: false });
    }
    // Nothing lost (the usual read): the kernel's caps themselves, not a copy of every address.
    return listed ?? kernelCaps;
  }

  /** Before a change: repairs what the last read showed lost; a failed repair is only logged. */
  async repairDamage(): Promise<void> {
    if (!this.damage.shaper && !this.damage.quota) return;
    try {
      const device = await this.calls.readDevice();
      if (this.damage.shaper) await this.repair('shaper', device);
      if (this.damage.quota) await this.repair('quota', device);
    } catch (error) {
      this.log.warn(
        { event: 'kernel_repair_failed', interface: this.calls.ifname, error: messageOf(error) },
        'repairing limits or caps before a change failed',
      );
    }
  }

  /**
   * Sets up or repairs one facility against the live peers of `device` and logs at warn what
   * it found and did; the kernel layer decides, this only passes the peers in (and, for caps,
   * what it last saw).
   */
  async repair(facility: RepairedFacility, device: WireGuardDevice): Promise<void> {
    const { calls } = this;
    const { kernel, ifname } = calls;
    const live = calls.liveRefs(device);
    let repairs: Repair[];
    if (facility === 'shaper') {
      repairs = await calls.call('shaper', () => kernel.shaper.ensure(ifname, live));
    } else if (facility === 'suspension') {
      repairs = await calls.call('suspension', () => kernel.suspension.ensure(ifname, live));
    } else {
      const withCaps: CapRef[] = live.map((peer) => {
        const seen = this.restoreFrom(peer.address, peer.publicKey);
        return seen === null ? peer : { ...peer, lastSeen: seen };
      });
      repairs = await calls.call('quota', () => kernel.quota.ensure(ifname, withCaps));
    }
    if (facility !== 'suspension') this.damage[facility] = false;
    for (const repair of repairs) {
      this.log.warn(
        { event: 'kernel_repaired', interface: ifname, facility, ...repair },
        `repaired ${REPAIRED[facility]}: ${repair.found}: ${repair.done}`,
      );
    }
  }
}
