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
 * Invariants: a cap is announced at most once per exhaustion, that is per (address, owner, quota
 * bytes) until a read shows it with room again (a raised cap) or other quota bytes; a cap that
 * vanishes and comes back used up for the same owner (a repair) is not news, a new owner on the
 * address is. A read re-arms only what was announced before that read started: a read taken
 * before the cut that completes after the notice (or the list's cached read) shows the cap with
 * room and must not make the next read announce it again. A notice for quota bytes that the
 * latest read shows otherwise is stale (the cap changed since the packet) and dropped, so 6.12's
 * late notice never announces an exhaustion twice nor one that no longer holds. The first read
 * only learns what is already used up: an event is news, and a cap exhausted before anyone
 * listened is not. No I/O; the caller gives the times.
 */
/** A cap as the shared read holds it (PeerSnapshot.caps). */
export interface CapReading {
  quotaBytes: number;
  usedBytes: number;
}

interface Announced {
  quotaBytes: number;
  /** The owner's public key, null when the source did not say. */
  owner: string | null;
  /** When it was announced, ms since the epoch. */
  at: number;
}

export class ExhaustionLatch {
  private readonly announced = new Map<string, Announced>();
  /** Address → quota bytes in the latest read; null before the first read. */
  private latest: Map<string, number> | null = null;

  /** The kernel's notice, arrived at `at`: true when it is news, to publish. */
  notice(address: string, owner: string | null, quotaBytes: number, at: number): boolean {
    const seen = this.latest?.get(address);
    if (seen !== undefined && seen !== quotaBytes) return false;
    if (this.sameExhaustion(address, owner, quotaBytes)) return false;
    this.announced.set(address, { quotaBytes, owner, at });
    return true;
  }

  /**
   * A read's caps and owners (address → public key), its kernel read started at `startedAt`:
   * the addresses whose cap is used up and was not announced, to publish.
   */
  read(
    caps: ReadonlyMap<string, CapReading>,
    owners: ReadonlyMap<string, string>,
    startedAt: number,
  ): string[] {
    const first = this.latest === null;
    this.latest = new Map([...caps].map(([address, cap]) => [address, cap.quotaBytes]));
    for (const [address, announced] of this.announced) {
      if (announced.at >= startedAt) continue;
      const cap = caps.get(address);
      if (cap !== undefined && (cap.quotaBytes !== announced.quotaBytes || !isUsedUp(cap))) {
        this.announced.delete(address);
      }
    }
    const news: string[] = [];
    for (const [address, cap] of caps) {
      const owner = owners.get(address) ?? null;
      if (!isUsedUp(cap) || this.sameExhaustion(address, owner, cap.quotaBytes)) continue;
      this.announced.set(address, { quotaBytes: cap.quotaBytes, owner, at: startedAt });
      if (!first) news.push(address);
    }
    return news;
  }

  private sameExhaustion(address: string, owner: string | null, quotaBytes: number): boolean {
    const announced = this.announced.get(address);
    if (announced === undefined || announced.quotaBytes !== quotaBytes) return false;
    return announced.owner === null || owner === null || announced.owner === owner;
  }
}

/** The kernel reports used bytes capped at the quota once it is exhausted (nft_quota.c). */
function isUsedUp(cap: CapReading): boolean {
  return cap.usedBytes >= cap.quotaBytes;
}
