/**
 * Peer expiry enforced by the kernel (issue 31): from a peer's `expiresAt` on, no tunnelled
 * packet of it passes either way, whether or not the daemon runs. The tables, sets, rules and
 * elements are ./layout.ts's. Contract of the changes:
 *
 * - `setExpiry` with an instant puts the peer's element into `expiring` (its owner and instant in
 *   the userdata) and into `valid` with the timeout `expiresAt - now` (none when it has passed:
 *   expired at once), replacing the elements it had, in ONE transaction of both families (a
 *   dual-stack peer's /128 in the ip6 table): so a renewal lets the peer pass again from the
 *   commit on. The table of a family is made with its first expiry (rebuilt when its sets are
 *   not as specified). With null, its elements are deleted from both sets.
 * - An element of `valid` whose timeout has ended is no longer found by a GET or a DELSETELEM
 *   (ENOENT; nft_rhash_cmp skips expired elements), so a change reads each element first and
 *   deletes only what it found; an element that expires between that read and the commit makes
 *   the transaction ENOENT, and the change is read and sent once more.
 * - `listValid` says which addresses' elements in `valid` are live (an element dumped with no
 *   time left counts as ended): the daemon's reads learn that an expiry passed from it.
 * - `ensure` makes the tables hold exactly the expiries wanted (a state directory's, at a
 *   restore), each with its remaining time from now; an expiry that passed while the host was
 *   down gets no element in `valid`: expired at once. It rebuilds each table in the same
 *   transaction (delete and write), so no packet of an expired peer passes while it runs.
 *
 * Nothing here keeps state: the kernel's sets are the record (and a state directory's journal).
 */
import {
  SerialQueue,
  type TransportFactory,
  isNetlinkError,
  openNativeTransport,
} from '../../netlink';
import { atBoundary } from '../errors';
import { bytesToIpv6, ipv6ToBytes } from '../ipv6';
import { NfTables, NftBatch } from '../nftables/client';
import { nfTablesErrors } from '../quota/facility';
import type { ChangeQueue, ExpiryApi, PeerExpiry, PeerRef } from '../types';
import {
  EXPIRING_SET,
  type ExpiryEntry,
  type Flavour,
  V4,
  V6,
  VALID_SET,
  expiringElement,
  expiryTableName,
  isExpirySet,
  readExpiringElement,
  validElement,
  writeTable,
} from './layout';

export * from './layout';

/** A dual-stack peer's IPv6 address as the kernel's dumps print it (RFC 5952). */
function canonical6(address6: string): string {
  return bytesToIpv6(ipv6ToBytes(address6));
}

export class KernelExpiry implements ExpiryApi {
  private readonly nft: NfTables;
  private readonly changes: ChangeQueue;

  constructor(
    open: TransportFactory = openNativeTransport,
    changes?: ChangeQueue,
    private readonly now: () => number = Date.now,
  ) {
    this.nft = new NfTables(open);
    this.changes = changes ?? new SerialQueue();
  }

  listExpiries(ifname: string): Promise<PeerExpiry[]> {
    return atBoundary(async () => {
      const table = expiryTableName(ifname);
      const listed = await this.nft.listSetElements(V4.family, table, EXPIRING_SET);
      const out: PeerExpiry[] = [];
      for (const element of listed) {
        const entry = readExpiringElement(V4, element);
        if (entry !== null) out.push(entry);
      }
      return out;
    }, nfTablesErrors);
  }

  listValid(ifname: string): Promise<Set<string> | null> {
    return atBoundary(async () => {
      const table = expiryTableName(ifname);
      const listed = await this.nft.listSetElements(V4.family, table, VALID_SET);
      // An empty dump may be a missing set (`nft flush ruleset`): then the kernel cannot say.
      if (listed.length === 0 && (await this.nft.getSet(V4.family, table, VALID_SET)) === null) {
        return null;
      }
      const out = new Set<string>();
      for (const element of listed) {
        const key = element.key?.value;
        if (key?.length !== 4) continue;
        // An element dumped with no time left has ended (a kernel that dumps it before its GC).
        if (element.expiration !== undefined && element.expiration <= 0n) continue;
        out.add(V4.fromBytes(key));
      }
      return out;
    }, nfTablesErrors);
  }

  setExpiry(ifname: string, peer: PeerRef, expiresAt: number | null): Promise<void> {
    return this.change(async () => {
      const batch = new NftBatch(V4.family);
      const now = this.now();
      const entry = { publicKey: peer.publicKey, expiresAt };
      await this.plan(batch, V4, ifname, { ...entry, address: peer.address }, now);
      if (peer.address6 != null) {
        const address = canonical6(peer.address6);
        await this.plan(batch.inFamily(V6.family), V6, ifname, { ...entry, address }, now);
      }
      const what = expiresAt === null ? 'clear the expiry of' : 'set the expiry of';
      await this.nft.commit(batch, `${what} ${peer.address}`);
    });
  }

  removeExpiries(
    ifname: string,
    refs: ReadonlyArray<Pick<PeerRef, 'address' | 'address6'>>,
  ): Promise<void> {
    return this.change(async () => {
      const batch = new NftBatch(V4.family);
      const now = this.now();
      // A table without its sets holds no expiry: read once per family, not per peer (a
      // create of many peers clears their addresses here).
      const has4 = await this.intact(V4, ifname);
      const has6 = refs.some((r) => r.address6 != null) && (await this.intact(V6, ifname));
      for (const ref of refs) {
        const entry = { publicKey: '', expiresAt: null };
        if (has4) await this.plan(batch, V4, ifname, { ...entry, address: ref.address }, now, true);
        if (has6 && ref.address6 != null) {
          const address = canonical6(ref.address6);
          const v6 = batch.inFamily(V6.family);
          await this.plan(v6, V6, ifname, { ...entry, address }, now, true);
        }
      }
      await this.nft.commit(batch, `remove the expiries of ${refs.length} peer(s)`);
    });
  }

  /** Whether the table of a family has both sets as ./layout.ts makes them. */
  private async intact(flavour: Flavour, ifname: string): Promise<boolean> {
    const table = expiryTableName(ifname);
    const [expiring, valid] = await Promise.all([
      this.nft.getSet(flavour.family, table, EXPIRING_SET),
      this.nft.getSet(flavour.family, table, VALID_SET),
    ]);
    return isExpirySet(expiring, flavour, 'expiring') && isExpirySet(valid, flavour, 'valid');
  }

  /**
   * Runs a change in the facility's queue, its kernel errors as nf_tables' own; an ENOENT (an
   * element of `valid` that expired between the change's read and its commit) runs it once
   * more, its read then finding the element gone.
   */
  private change(work: () => Promise<void>): Promise<void> {
    return this.changes.run(() =>
      atBoundary(async () => {
        try {
          await work();
        } catch (error) {
          if (!isNetlinkError(error, 'ENOENT')) throw error;
          await work();
        }
      }, nfTablesErrors),
    );
  }

  /**
   * Queues one address's change in one table: its elements deleted where present, and, for an
   * instant, the new ones (the whole table written when its sets are missing or not ours).
   */
  private async plan(
    batch: NftBatch,
    flavour: Flavour,
    ifname: string,
    entry: { address: string; publicKey: string; expiresAt: number | null },
    now: number,
    known?: boolean,
  ): Promise<void> {
    const table = expiryTableName(ifname);
    const intact = known ?? (await this.intact(flavour, ifname));
    if (!intact) {
      if (entry.expiresAt === null) return;
      if (await this.nft.getTable(flavour.family, table)) batch.deleteTable(table);
      writeTable(batch, flavour, ifname, [{ ...entry, expiresAt: entry.expiresAt }], now);
      return;
    }
    const key = flavour.toBytes(entry.address);
    for (const set of [EXPIRING_SET, VALID_SET]) {
      const present = await this.nft.getSetElement(flavour.family, table, set, key, entry.address);
      if (present === null) continue;
      batch.deleteSetElements({ table, set, elements: [{ key: { value: key } }] }, entry.address);
    }
    if (entry.expiresAt === null) return;
    const full: ExpiryEntry = { ...entry, expiresAt: entry.expiresAt };
    batch.newSetElements(
      { table, set: EXPIRING_SET, elements: [expiringElement(flavour, full)] },
      entry.address,
    );
    const timed = validElement(flavour, entry.address, entry.expiresAt - now);
    if (timed !== null) {
      batch.newSetElements({ table, set: VALID_SET, elements: [timed] }, entry.address);
    }
  }

  ensure(
    ifname: string,
    live: readonly PeerRef[],
    wanted: ReadonlyMap<string, number>,
  ): Promise<void> {
    return this.changes.run(() =>
      atBoundary(async () => {
        const table = expiryTableName(ifname);
        const now = this.now();
        const entries4: ExpiryEntry[] = [];
        const entries6: ExpiryEntry[] = [];
        for (const peer of live) {
          const expiresAt = wanted.get(peer.publicKey);
          if (expiresAt === undefined) continue;
          entries4.push({ address: peer.address, publicKey: peer.publicKey, expiresAt });
          if (peer.address6 != null) {
            const address = canonical6(peer.address6);
            entries6.push({ address, publicKey: peer.publicKey, expiresAt });
          }
        }
        const batch = new NftBatch(V4.family);
        for (const [flavour, entries] of [
          [V4, entries4],
          [V6, entries6],
        ] as const) {
          const family = batch.inFamily(flavour.family);
          const found = await this.nft.getTable(flavour.family, table);
          if (found) family.deleteTable(table);
          if (entries.length > 0) writeTable(family, flavour, ifname, entries, now);
        }
        await this.nft.commit(batch, `put back the expiries of ${ifname}`);
      }, nfTablesErrors),
    );
  }

  close(): void {
    this.nft.close();
  }
}
