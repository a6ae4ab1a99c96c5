/**
 * One `peer.cap_exhausted` per exhaustion, from whichever of two sources tells first.
 *
 * The kernel's own notice (a quota's NFT_MSG_NEWOBJ on NFNLGRP_NFTABLES, sent once when the
 * packet that exhausts it passes: net/netfilter/nft_quota.c) reaches listeners at once on 6.1.
 * On 6.12 it is queued on the namespace's notification list and sent only with the next
 * nf_tables commit (seen in the VM, 6.12.95: `nft monitor` printed the exhausted quota only after
 * an unrelated `nft add table`), which may come hours later. So the watcher's shared kernel read,
 * which holds every cap with its used bytes, is a second source: a cap it finds used up that was
 * not announced is announced at that read.
 *
 * Invariants: a cap is announced at most once per (address, quota bytes) while it stays used up;
 * a read that shows the address without a cap, or with room again (a raised cap, a new peer on the
 * address), re-arms it; a notice for a quota that the latest read shows with other quota bytes is
 * stale (the cap changed since the packet) and dropped, so 6.12's late notice never announces an
 * exhaustion twice nor one that no longer holds. The first read only learns what is already used
 * up: an event is news, and a cap exhausted before anyone listened is not. No I/O, no clock.
 */
/** A cap as the shared read holds it (PeerSnapshot.caps). */
export interface CapReading {
  quotaBytes: number;
  usedBytes: number;
}

export class ExhaustionLatch {
  /** Address → the quota bytes announced as used up. */
  private readonly announced = new Map<string, number>();
  /** Address → quota bytes in the latest read; null before the first read. */
  private latest: Map<string, number> | null = null;

  /** The kernel's notice: true when it is news, to publish. */
  notice(address: string, quotaBytes: number): boolean {
    const seen = this.latest?.get(address);
    if (this.latest !== null && seen !== undefined && seen !== quotaBytes) return false;
    if (this.announced.get(address) === quotaBytes) return false;
    this.announced.set(address, quotaBytes);
    return true;
  }

  /** A read's caps: the addresses whose cap is used up and was not announced, to publish. */
  read(caps: ReadonlyMap<string, CapReading>): string[] {
    const first = this.latest === null;
    this.latest = new Map([...caps].map(([address, cap]) => [address, cap.quotaBytes]));
    for (const [address, quotaBytes] of this.announced) {
      const cap = caps.get(address);
      if (cap === undefined || cap.quotaBytes !== quotaBytes || !isUsedUp(cap)) {
        this.announced.delete(address);
      }
    }
    const news: string[] = [];
    for (const [address, cap] of caps) {
      if (!isUsedUp(cap) || this.announced.get(address) === cap.quotaBytes) continue;
      this.announced.set(address, cap.quotaBytes);
      if (!first) news.push(address);
    }
    return news;
  }
}

/** The kernel reports used bytes capped at the quota once it is exhausted (nft_quota.c). */
function isUsedUp(cap: CapReading): boolean {
  return cap.usedBytes >= cap.quotaBytes;
}
