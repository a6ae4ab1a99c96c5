/**
 * What each change to an existing peer does in the kernel, with its log line and its event: the
 * `kernel` steps the change pipeline (./pipeline.ts) runs, one per kind, each alone in the
 * kernel's change queue. Each reads the device once, finds the peer (404 when gone, 409 without
 * a tunnel address), repairs the facility it is about to use against the live peers, makes the
 * change, and keeps the drift watch's memory of caps (./drift.ts) and the billing-period
 * scheduler in step. Nothing here writes the journal: the pipeline records before and after.
 */
import type { AfterCap, CapPlan, PeriodReset, WireGuardDevice } from '../kernel/types';
import { capToKeep } from './cap-plan';
import type { Drift } from './drift';
import { CleanupFailedError, NoDataCapError } from './errors';
import type { PeerChangeSink } from './event-sink';
import { hostAddressesOf, refOf, type KernelCalls } from './kernel-calls';
import type { PeriodScheduler } from './period-scheduler';
import { formatPeriodStart } from './periods';
import type { ChangedPeer, EventLogger, ResetCap } from './contracts';
import { tunnelAddressOf } from './view';

/** A period reset made this long after it fell due was missed (the daemon was down): warn. */
const PERIOD_RESET_LATE_MS = 10_000;

export interface PeerChangesOptions {
  calls: KernelCalls;
  drift: Drift;
  periods: PeriodScheduler;
  events: PeerChangeSink | undefined;
  log: EventLogger;
  now: () => number;
  onPeriodReset: (() => void) | undefined;
}

/** A cap to set: the quota, and the plan and rate when the change names them. */
export interface CapToSet {
  quotaBytes: number;
  plan: CapPlan | null | undefined;
  afterCap: AfterCap | undefined;
}

export class PeerChanges {
  constructor(private readonly o: PeerChangesOptions) {}

  private get ifname(): string {
    return this.o.calls.ifname;
  }

  private info(event: string, key: string, ip: string | null, message: string, more = {}): void {
    this.o.log.info({ event, interface: this.ifname, publicKey: key, ip, ...more }, message);
  }

  async deletePeer(key: string): Promise<ChangedPeer> {
    const { calls, drift, periods, events } = this.o;
    const peer = await calls.findPeer(key);
    await calls.call('wireguard', () => calls.kernel.wireguard.removePeers(this.ifname, [key]));
    const ip = tunnelAddressOf(peer);
    for (const address of hostAddressesOf(peer)) drift.forgetCap(address);
    periods.set(key, null);
    this.info('peer_deleted', key, ip, 'peer deleted');
    events?.publish({ type: 'peer.deleted', publicKey: key, ipAddress: ip });
    const refs = hostAddressesOf(peer).map((address) =>
      address === ip ? refOf(peer, address, calls.dualStack) : { address },
    );
    try {
      await calls.removeLimitsAndCaps(refs);
    } catch (error) {
      this.o.log.error(
        { event: 'peer_cleanup_failed', interface: this.ifname, publicKey: key, ip },
        'peer deleted, but removing its speed limit or data cap failed',
      );
      throw new CleanupFailedError(error);
    }
    return { publicKey: key, ip };
  }

  /**
   * The clean-up of a committed peer removed behind the daemon's back, once its deletion is on
   * disk: its limit, cap and suspension removed by address as a delete would (unless a live peer
   * holds the address again), `peer.deleted` published once, a warn line.
   */
  async forgetGone(key: string, address: string | null): Promise<void> {
    const { calls, drift, periods, events } = this.o;
    periods.set(key, null);
    if (address !== null) {
      const device = await calls.readDevice();
      if (!device.peers.some((p) => tunnelAddressOf(p) === address)) {
        drift.forgetCap(address);
        await calls.removeLimitsAndCaps([{ address }]);
      }
    }
    this.o.log.warn(
      { event: 'peer_deleted_behind_back', interface: this.ifname, publicKey: key, ip: address },
      `peer ${key} was removed from the interface behind wg-peerd's back: recorded as deleted, it never comes back`,
    );
    events?.publish({ type: 'peer.deleted', publicKey: key, ipAddress: address });
  }

  async setLimit(key: string, bytesPerSecond: number): Promise<ChangedPeer> {
    const { calls, drift } = this.o;
    const device = await calls.readDevice();
    const ref = calls.refIn(device, key, 'speed limit');
    await drift.repair('shaper', device);
    await calls.call('shaper', () =>
      calls.kernel.shaper.setLimit(this.ifname, ref, bytesPerSecond),
    );
    this.info('speed_limit_set', key, ref.address, 'speed limit set', { bytesPerSecond });
    this.changed('peer.limit_changed', key, ref.address, { bytes_per_second: bytesPerSecond });
    return { publicKey: key, ip: ref.address };
  }

  async removeLimit(key: string): Promise<ChangedPeer> {
    const { calls } = this.o;
    const ref = await calls.refFor(key, 'speed limit');
    await calls.call('shaper', () => calls.removeLimitOf(ref));
    this.info('speed_limit_removed', key, ref.address, 'speed limit removed');
    this.changed('peer.limit_changed', key, ref.address, { bytes_per_second: null });
    return { publicKey: key, ip: ref.address };
  }

  /** The kernel's cap of the peer (what a left-out field of a PATCH keeps). */
  async currentCap(key: string): ReturnType<KernelCalls['kernel']['quota']['getCap']> {
    const { calls } = this.o;
    const ref = calls.refIn(await calls.readDevice(), key, 'data cap');
    return calls.call('quota', () => calls.kernel.quota.getCap(this.ifname, ref));
  }

  async setCap(key: string, asked: CapToSet): Promise<ChangedPeer> {
    const { calls, drift, periods } = this.o;
    const { quotaBytes, plan, afterCap } = asked;
    const device = await calls.readDevice();
    const ref = calls.refIn(device, key, 'data cap');
    const ip = ref.address;
    await drift.repair('quota', device);
    await calls.call('quota', () =>
      calls.kernel.quota.setCap(this.ifname, ref, quotaBytes, plan, afterCap),
    );
    const mine = drift.capOf(ip, key);
    const throttleBytesPerSecond =
      afterCap !== undefined
        ? afterCap.throttleBytesPerSecond
        : (mine?.throttleBytesPerSecond ?? null);
    const held = plan === undefined ? (mine?.plan ?? null) : plan;
    drift.rememberCap(
      ip,
      key,
      capToKeep({
        quotaBytes,
        usedBytes: mine?.usedBytes ?? 0,
        plan: held,
        throttleBytesPerSecond,
      }),
    );
    if (plan !== undefined) periods.set(key, plan);
    const shown = plan
      ? { period: plan.period, periodStart: formatPeriodStart(plan.periodStart) }
      : {};
    const afterCapName = throttleBytesPerSecond === null ? 'block' : 'throttle';
    this.info('data_cap_set', key, ip, 'data cap set', {
      quotaBytes,
      ...shown,
      afterCap: afterCapName,
      throttleBytesPerSecond,
    });
    this.changed('peer.cap_changed', key, ip, {
      quota_bytes: quotaBytes,
      throttle_bytes_per_second: throttleBytesPerSecond,
    });
    return { publicKey: key, ip };
  }

  async removeCap(key: string): Promise<ChangedPeer> {
    const { calls, drift, periods } = this.o;
    const ref = await calls.refFor(key, 'data cap');
    await calls.call('quota', () => calls.removeCapOf(ref));
    drift.forgetCap(ref.address);
    periods.set(key, null);
    this.info('data_cap_removed', key, ref.address, 'data cap removed');
    this.changed('peer.cap_changed', key, ref.address, { quota_bytes: null });
    return { publicKey: key, ip: ref.address };
  }

  async setSuspension(key: string, suspended: boolean): Promise<ChangedPeer> {
    const { calls, drift, events } = this.o;
    const device = await calls.readDevice();
    const ref = calls.refIn(device, key, 'suspension');
    const ip = ref.address;
    await drift.repair('suspension', device);
    const suspension = calls.kernel.suspension;
    await calls.call('suspension', () =>
      suspended
        ? suspension.suspend(this.ifname, ref)
        : suspension.resume(this.ifname, ip, ref.address6),
    );
    const event = suspended ? 'peer_suspended' : 'peer_resumed';
    this.info(event, key, ip, suspended ? 'peer suspended' : 'peer resumed');
    events?.publish({
      type: suspended ? 'peer.suspended' : 'peer.resumed',
      publicKey: key,
      ipAddress: ip,
    });
    return { publicKey: key, ip };
  }

  async resetCap(key: string): Promise<ResetCap> {
    const { calls, drift, events } = this.o;
    const device = await calls.readDevice();
    const ref = calls.refIn(device, key, 'data cap');
    const ip = ref.address;
    await drift.repair('quota', device);
    const closing = await calls.call('quota', () =>
      calls.kernel.quota.resetCap(this.ifname, { address: ip, publicKey: key }),
    );
    if (closing === null) throw new NoDataCapError();
    const kept = drift.anyCapAt(ip);
    drift.rememberCap(
      ip,
      key,
      capToKeep({
        ...closing,
        usedBytes: 0,
        plan: kept?.plan,
        throttleBytesPerSecond: kept?.throttleBytesPerSecond,
      }),
    );
    this.info('data_cap_reset', key, ip, 'data cap usage reset', { ...closing });
    events?.publish({
      type: 'peer.cap_reset',
      publicKey: key,
      ipAddress: ip,
      details: { quota_bytes: closing.quotaBytes, used_bytes: closing.usedBytes },
    });
    return { publicKey: key, ip, usedBytes: closing.usedBytes };
  }

  /**
   * The billing-period reset due at `due`: read and zero the quota in one step. Answers what
   * was made (null: nothing, the peer or its plan is gone, or it was made already), and keeps
   * the scheduler and the caps' memory in step. The event and the log line come from
   * `announcePeriodReset`, once the reset's figures are on disk.
   */
  async resetPeriod(key: string, due: number): Promise<{ ip: string; made: PeriodReset } | null> {
    const { calls, drift, periods } = this.o;
    const device: WireGuardDevice = await calls.readDevice();
    const peer = device.peers.find((p) => p.publicKey === key);
    const ip = peer === undefined ? null : tunnelAddressOf(peer);
    if (peer === undefined || ip === null) {
      periods.set(key, null);
      return null;
    }
    const ref = refOf(peer, ip, calls.dualStack);
    const made = await calls.call('quota', () =>
      calls.kernel.quota.resetPeriod(this.ifname, ref, due),
    );
    if (made === null) {
      const held = await calls.call('quota', () => calls.kernel.quota.getCap(this.ifname, ref));
      periods.set(key, held?.plan ?? null);
      return null;
    }
    const { closing, plan } = made;
    const rate = closing.throttleBytesPerSecond;
    drift.rememberCap(
      ip,
      key,
      capToKeep({ ...closing, usedBytes: 0, plan, throttleBytesPerSecond: rate }),
    );
    periods.set(key, plan);
    return { ip, made };
  }

  /** The log line and `peer.cap_reset` of a period reset made (after its record is on disk). */
  announcePeriodReset(key: string, due: number, ip: string, made: PeriodReset): void {
    const { closing, plan } = made;
    this.o.onPeriodReset?.();
    const lateMs = this.o.now() - due;
    const late = lateMs > PERIOD_RESET_LATE_MS;
    const dueText = new Date(due).toISOString();
    this.o.log[late ? 'warn' : 'info'](
      {
        event: 'data_cap_period_reset',
        interface: this.ifname,
        publicKey: key,
        ip,
        period: plan.period,
        due: dueText,
        ...closing,
        ...(late ? { lateMs } : {}),
      },
      late
        ? `billing-period reset due at ${dueText} made late (the daemon was not running then)`
        : 'billing-period reset made',
    );
    this.o.events?.publish({
      type: 'peer.cap_reset',
      publicKey: key,
      ipAddress: ip,
      details: {
        origin: 'period',
        quota_bytes: closing.quotaBytes,
        used_bytes: closing.usedBytes,
        period: plan.period,
        due: dueText,
      },
    });
  }

  private changed(
    type: 'peer.limit_changed' | 'peer.cap_changed',
    publicKey: string,
    ipAddress: string,
    details: Record<string, number | null>,
  ): void {
    this.o.events?.publish({ type, publicKey, ipAddress, details });
  }
}
