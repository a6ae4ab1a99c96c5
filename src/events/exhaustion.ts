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
 *
 * It also keeps WHEN each cap ran out (the list's `data_cap.exhausted_at`): the notice's arrival
 * when the notice came first, else the completion of the first read that found the cap used up;
 * a later notice or read never moves it. A cap the first read only learned has no known time
 * (null), unless `seed` gave the same exhaustion's time (kept across a restart with a state
 * dir). `clear` forgets an address at once when the daemon itself gives its cap room again (a
 * reset, a billing-period reset, other quota bytes, the cap removed, the peer deleted); a read
 * that started before that clear says nothing about the address. `onChange` hears every known
 * time that is set or forgotten (the journal keeps them).
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
  /** When it was announced, ms since the epoch: what a read re-arms by. */
  at: number;
  /** When the cap ran out as the daemon learned it; null: before the daemon knew (unknown). */
  exhaustedAt: number | null;
}

/** A known exhaustion time, as `onChange` hears it and `seed` takes it back. */
export interface ExhaustionTime {
  quotaBytes: number;
  /** Ms since the epoch. */
  at: number;
}

export class ExhaustionLatch {
  private readonly announced = new Map<string, Announced>();
  /** Address → quota bytes in the latest read; null before the first read. */
  private latest: Map<string, number> | null = null;
  /** Address → when the daemon gave its cap room again (clear), until a later read starts. */
  private readonly cleared = new Map<string, number>();

  constructor(
    private readonly onChange: (
      address: string,
      owner: string | null,
      time: ExhaustionTime | null,
    ) => void = () => undefined,
  ) {}

  /** An exhaustion time kept from before this run (the journal), before any notice or read. */
  seed(address: string, owner: string | null, time: ExhaustionTime): void {
    this.announced.set(address, { ...time, owner, exhaustedAt: time.at });
  }

  /** The kernel's notice, arrived at `at`: true when it is news, to publish. */
  notice(address: string, owner: string | null, quotaBytes: number, at: number): boolean {
    const seen = this.latest?.get(address);
    if (seen !== undefined && seen !== quotaBytes) return false;
    if (this.sameExhaustion(address, owner, quotaBytes)) return false;
    this.set(address, { quotaBytes, owner, at, exhaustedAt: at });
    return true;
  }

  /**
   * The daemon gave the address's cap room again at `at` (or removed it, or its peer): its
   * exhaustion is over, the next one is news with a time of its own. `quotaBytes` given: only
   * when the announced exhaustion was of other quota bytes (a cap changed to as many bytes, for
   * its period or what it does over the cap, is still used up).
   */
  clear(address: string, at: number, quotaBytes?: number): void {
    const announced = this.announced.get(address);
    if (quotaBytes !== undefined && announced?.quotaBytes === quotaBytes) return;
    this.cleared.set(address, at);
    if (announced !== undefined) this.forget(address, announced);
  }

  /** When the cap at `address`, as a read shows it, ran out; null: it has room, or unknown. */
  exhaustedAt(address: string, cap: CapReading): number | null {
    const announced = this.announced.get(address);
    if (announced === undefined || announced.quotaBytes !== cap.quotaBytes) return null;
    return isUsedUp(cap) ? announced.exhaustedAt : null;
  }

  /** `exhaustedAt` of each of a read's caps that has a known time. */
  times(caps: ReadonlyMap<string, CapReading>): Map<string, number> {
    const times = new Map<string, number>();
    if (this.announced.size === 0) return times;
    for (const [address, cap] of caps) {
      const at = this.exhaustedAt(address, cap);
      if (at !== null) times.set(address, at);
    }
    return times;
  }

  /**
   * A read's caps and owners (address → public key), its kernel read started at `startedAt` and
   * completed at `takenAt`: the addresses whose cap is used up and was not announced, to publish.
   */
  read(
    caps: ReadonlyMap<string, CapReading>,
    owners: ReadonlyMap<string, string>,
    startedAt: number,
    takenAt: number = startedAt,
  ): string[] {
    const first = this.latest === null;
    this.latest = new Map([...caps].map(([address, cap]) => [address, cap.quotaBytes]));
    // A read that started before the daemon cleared an address may show it as it was.
    const predates = (address: string): boolean => (this.cleared.get(address) ?? -1) >= startedAt;
    for (const [address, announced] of this.announced) {
      if (announced.at >= startedAt) continue;
      const cap = caps.get(address);
      if (cap !== undefined && (cap.quotaBytes !== announced.quotaBytes || !isUsedUp(cap))) {
        this.forget(address, announced);
      }
    }
    const news: string[] = [];
    for (const [address, cap] of caps) {
      const owner = owners.get(address) ?? null;
      if (!isUsedUp(cap) || this.sameExhaustion(address, owner, cap.quotaBytes)) continue;
      if (predates(address)) continue;
      this.set(address, {
        quotaBytes: cap.quotaBytes,
        owner,
        at: startedAt,
        exhaustedAt: first ? null : takenAt,
      });
      if (!first) news.push(address);
    }
    for (const [address, at] of this.cleared) if (at < startedAt) this.cleared.delete(address);
    return news;
  }

  private set(address: string, announced: Announced): void {
    const before = this.announced.get(address);
    this.announced.set(address, announced);
    if (announced.exhaustedAt !== null) {
      this.onChange(address, announced.owner, timeOf(announced));
    } else if (before !== undefined) this.forget(address, before, false);
  }

  private forget(address: string, announced: Announced, remove = true): void {
    if (remove) this.announced.delete(address);
    if (announced.exhaustedAt !== null) this.onChange(address, announced.owner, null);
  }

  private sameExhaustion(address: string, owner: string | null, quotaBytes: number): boolean {
    const announced = this.announced.get(address);
    if (announced === undefined || announced.quotaBytes !== quotaBytes) return false;
    return announced.owner === null || owner === null || announced.owner === owner;
  }
}

function timeOf(announced: Announced): ExhaustionTime {
  return { quotaBytes: announced.quotaBytes, at: announced.exhaustedAt! };
}

/** The kernel reports used bytes capped at the quota once it is exhausted (nft_quota.c). */
function isUsedUp(cap: CapReading): boolean {
  return cap.usedBytes >= cap.quotaBytes;
}
