/**
 * Per-peer data caps over nf_tables (NETLINK_NETFILTER), counted and enforced in the kernel, with
 * no state outside it.
 *
 * Layout, for interface wg0 (what `nft list table ip wg_peerd_wg0` prints):
 *
 *   table ip wg_peerd_wg0 {
 *     comment "wg-peerd: data caps of the peers of wg0 ..."
 *     quota q_10_8_0_2 { comment "wg-peerd peer <public key>"; over 1000000 bytes used 0 bytes }
 *     map caps { type ipv4_addr : quota; elements = { 10.8.0.2 : "q_10_8_0_2" } }
 *     chain from_peers {
 *       type filter hook prerouting priority filter; policy accept;
 *       iifname "wg0" quota name ip saddr map @caps drop
 *     }
 *     chain to_peers {
 *       type filter hook postrouting priority filter; policy accept;
 *       oifname "wg0" quota name ip daddr map @caps drop
 *     }
 *   }
 *
 * - A table of the daemon's own, one per interface, so nothing of the operator's is ever read or
 *   changed, and two daemons on two interfaces do not meet. Family `ip`: peers' tunnel
 *   addresses are IPv4 /32 allowed IPs, so WireGuard itself drops inner IPv6 from a peer (source
 *   not in its allowed IPs) and routes none to it; the hooks see exactly the traffic to cap.
 * - Hooks: prerouting with `iifname` sees every packet a peer sends into the tunnel, whether it
 *   is for this host (input) or routed on (forward), before any of the host's own filtering;
 *   postrouting with `oifname` sees every packet handed to the interface for a peer, forwarded
 *   or sent by this host (output), after routing and DNAT, so `ip daddr` is the peer's tunnel
 *   address. One chain and one rule per direction therefore covers forwarded and local traffic,
 *   and the count is "bytes that crossed the tunnel", whatever the host's firewall does with
 *   them later. Priority 0 (filter): after DNAT in prerouting, before SNAT in postrouting, so
 *   neither rewrites the address matched. WireGuard's own UDP (handshakes, keepalives, the
 *   encrypted packets) never crosses these hooks with the tunnel interface as iif/oif, so a
 *   capped peer keeps its handshake.
 * - Interfaces are matched by name (meta iifname/oifname), which survives the interface being
 *   deleted and created again, where an ifindex would not.
 * - One named quota object per capped peer, in `over` mode (NFT_QUOTA_F_INV: the rule goes on to
 *   `drop` only once the quota is used up), found through the object map `caps` keyed by the
 *   peer's address: one hash lookup per packet whatever the number of peers, and a packet of a
 *   peer without a cap misses the map and ends the rule (NFT_BREAK) untouched. Both directions
 *   count against the same object.
 * - Object names are short ids derived from the address (`q_10_8_0_2`; base64 keys contain `/`
 *   and `+`); the public key goes into the object's userdata as an nft comment
 *   ("wg-peerd peer <key>", NFTA_OBJ_USERDATA, Linux 5.10+; older kernels ignore it).
 *
 * Kernel behaviour this relies on (net/netfilter/nft_quota.c, nf_tables_api.c):
 * - Every packet that reaches the quota adds its length to `consumed`, dropped ones included; a
 *   dump reports consumed capped at the quota, with NFT_QUOTA_F_DEPLETED once reached.
 * - NEWOBJ on an existing name without EXCL/REPLACE updates bytes and flags in place and keeps
 *   consumed (Linux 5.4+); older kernels accept it and change nothing, so the result is read
 *   back and, if unchanged, the object is replaced instead.
 * - Raising the cap of a depleted quota in place would leave in `consumed` the bytes of every
 *   packet dropped since it ran out. So a depleted quota is replaced, in one transaction, by one
 *   whose consumed is what the dump reported (the cap, i.e. the bytes let through), and the
 *   peer gets exactly the difference. While depleted every packet is dropped, so nothing that
 *   passed is lost between the read and the replacement.
 */
import {
  SerialQueue,
  type TransportFactory,
  encodeAttributes,
  isNetlinkError,
  openNativeTransport,
} from '../../netlink';
import { atBoundary } from '../errors';
import { NfTables, NftBatch, familyName } from '../nftables/client';
import {
  NFT_MSG_GETOBJ,
  NFT_MSG_GETSETELEM,
  NFT_OBJECT_LIMIT,
  NFT_OBJECT_QUOTA,
  NFT_TABLE_F_DORMANT,
} from '../nftables/constants';
import { objectAttributes, setElementListAttributes } from '../nftables/schema';
import { ipv4ToBytes } from '../ipv4';
import { ipv6ToBytes } from '../ipv6';
import { DUAL_STACK_FAMILY, writeElement6 } from './dual-stack';
import { isCapsMap, isCapsMap6 } from './maps';
import type {
  AfterCap,
  CapPlan,
  CapRef,
  ChangeQueue,
  DataCap,
  KernelDataCap,
  PeerRef,
  PeriodReset,
  QuotaApi,
  Repair,
} from '../types';
import { CapListing, decodeObjrefElements } from './listing';

export * from './naming';
export { writeSetUp } from './skeleton';
export { writeElement, writeNewQuota } from './objects';
export { type CapTablePlan, type CapTableState, planCapTable } from './plan';
import {
  CAPS_MAP,
  CAPS_MAP6,
  QUOTA_FAMILY,
  THROTTLE_CAPS_MAP,
  addressOfObject,
  limitObjectName,
  quotaObjectName,
  quotaTableName,
} from './naming';
import {
  type ThrottleState,
  type ThrottleTarget,
  planThrottle,
  throttleChainSpecs,
  throttleMaps,
  throttleTarget,
} from './throttle';
import { chainSpecs } from './skeleton';
import {
  type QuotaState,
  checkQuotaBytes,
  parseQuota,
  writeElement,
  writeNewQuota,
  writeQuotaUpdate,
} from './objects';
import { quotaErrors } from './facility';
import { type CapTableState, planCapTable } from './plan';

/** Two plans alike (null for none). */
function samePlan(a: CapPlan | null, b: CapPlan | null): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

/** An interface's map elements as read at one ruleset generation (Quota.doListCaps). */
interface Routes {
  generation: number;
  family: number;
  table: string;
  caps: Map<number, string>;
  /** null: not read (no cap throttled then). */
  throttleCaps: Map<number, string> | null;
}

export class Quota implements QuotaApi {
  private readonly nft: NfTables;
  /** Interfaces whose caps live in an inet table with caps6 (./dual-stack.ts). */
  private readonly dualStack = new Set<string>();
  /** The cap read's memory of each interface's objects (./listing.ts). */
  private readonly listings = new Map<string, CapListing>();
  /**
   * The caps and throttle_caps elements of each interface as last read, with the ruleset
   * generation read before them: read again only when the generation moved (a transaction,
   * ours or anyone's), so a poll of an unchanged table reads the objects alone.
   */
  private readonly routes = new Map<string, Routes>();

  /** Writes run on the kernel layer's change queue (a queue of its own when used alone). */
  private readonly changes: ChangeQueue;

  constructor(open: TransportFactory = openNativeTransport, changes?: ChangeQueue) {
    this.nft = new NfTables(open);
    this.changes = changes ?? new SerialQueue();
  }

  /**
   * Makes the table, the map, both chains and their rules exactly as specified, and reconciles
   * the quota objects with the live peers (see QuotaApi.ensure). Reads first and writes only
   * what is missing or wrong, in one transaction, so a second call on an intact table sends
   * nothing but reads.
   */
  setDualStack(ifname: string, dualStack: boolean): Promise<Repair[]> {
    if (!dualStack) {
      this.dualStack.delete(ifname);
      return Promise.resolve([]);
    }
    this.dualStack.add(ifname);
    return this.changes.run(() => atBoundary(() => this.moveToInet(ifname), quotaErrors));
  }

  /**
   * An interface that became dual-stack (an IPv6 address added, then a restart): the caps its ip
   * table holds move to a new inet table with what they counted, in one transaction, then the
   * ip table goes (until then both count and enforce IPv4). The caps6 elements follow at the
   * next ensure, which knows the peers' IPv6 addresses.
   */
  private async moveToInet(ifname: string): Promise<Repair[]> {
    const name = quotaTableName(ifname);
    const old = await this.nft.getTable(QUOTA_FAMILY, name);
    if (old === null || (await this.nft.getTable(DUAL_STACK_FAMILY, name)) !== null) return [];
    const caps: CapRef[] = [];
    for (const object of await this.nft.listObjects(QUOTA_FAMILY, name, NFT_OBJECT_QUOTA)) {
      const quota = parseQuota(object);
      const address = object.name ? addressOfObject(object.name) : null;
      if (quota === null || address === null || quota.owner === null) continue;
      const lastSeen = {
        quotaBytes: Number(quota.quotaBytes),
        usedBytes: Number(quota.usedBytes),
        ...(quota.plan ? { plan: quota.plan } : {}),
        throttleBytesPerSecond: quota.throttleBytesPerSecond,
      };
      caps.push({ address, publicKey: quota.owner, lastSeen });
    }
    const plan = planCapTable(ifname, null, caps, true);
    await this.nft.commit(plan.batch, `move the data caps of ${ifname} to an inet table`);
    await this.nft.commit(
      new NftBatch(QUOTA_FAMILY).deleteTable(name),
      `remove the ip table of ${ifname}'s data caps, moved to inet`,
    );
    return caps.map((cap) => ({
      address: cap.address,
      found: `the cap of ${cap.address} in table ip ${name} (the interface is dual-stack now)`,
      done: `moved it to table inet ${name}, ${cap.lastSeen!.usedBytes} bytes used`,
    }));
  }

  /** The family of the interface's table: inet when dual-stack, else ip (as before). */
  private familyOf(ifname: string): number {
    return this.dualStack.has(ifname) ? DUAL_STACK_FAMILY : QUOTA_FAMILY;
  }

  ensure(ifname: string, live: readonly CapRef[]): Promise<Repair[]> {
    return this.changes.run(() => atBoundary(() => this.doEnsure(ifname, live), quotaErrors));
  }

  /**
   * Reads the table whole, plans (planCapTable), commits the plan. `live` null: the skeleton
   * only, objects untouched (a retry inside setCap).
   */
  private async doEnsure(ifname: string, live: readonly CapRef[] | null): Promise<Repair[]> {
    const name = quotaTableName(ifname);
    const family = this.familyOf(ifname);
    const table = await this.nft.getTable(family, name);
    if (table && ((table.flags ?? 0) & NFT_TABLE_F_DORMANT) !== 0) {
      // A table someone made dormant has its hooks unregistered: wake it first, on its own,
      // since the kernel restricts what else a transaction that flips the flag may do.
      const wake = new NftBatch(family).newTable({ name, flags: 0 });
      await this.nft.commit(wake, `wake the data-cap table of ${ifname}`);
    }
    const plan = planCapTable(
      ifname,
      table ? await this.readCapTable(ifname, live) : null,
      live,
      this.dualStack.has(ifname),
    );
    await this.nft.commit(plan.batch, `set up data caps of ${ifname}`);
    return plan.repairs;
  }

  /** Everything planCapTable needs of an existing table, read before anything is written. */
  private async readCapTable(
    ifname: string,
    live: readonly CapRef[] | null,
  ): Promise<CapTableState> {
    const table = quotaTableName(ifname);
    const family = this.familyOf(ifname);
    const specs = chainSpecs(ifname);
    const [set, chains, rules, objects] = await Promise.all([
      this.nft.getSet(family, table, CAPS_MAP),
      Promise.all(specs.map((spec) => this.nft.getChain(family, table, spec.name))),
      Promise.all(specs.map((spec) => this.nft.listRules(family, table, spec.name))),
      this.nft.listObjects(family, table, NFT_OBJECT_QUOTA),
    ]);
    // A map of another shape is made anew with no elements: its own are not worth reading.
    const elements =
      set && isCapsMap(set) ? await this.nft.listSetElements(family, table, CAPS_MAP) : null;
    // The throttle part is read only where a cap throttles or is to be restored throttling.
    const throttling =
      objects.some((object) => parseQuota(object)?.throttleBytesPerSecond != null) ||
      (live ?? []).some((peer) => peer.lastSeen?.throttleBytesPerSecond != null);
    const throttle = throttling ? await this.readThrottle(ifname) : null;
    if (!this.dualStack.has(ifname)) return { set, chains, rules, objects, elements, throttle };
    const set6 = await this.nft.getSet(family, table, CAPS_MAP6);
    const elements6 =
      set6 && isCapsMap6(set6) ? await this.nft.listSetElements(family, table, CAPS_MAP6) : null;
    return { set, chains, rules, objects, elements, set6, elements6, throttle };
  }

  /**
   * The throttle maps and chains, and the limits and elements: all of them, or with `peer` only
   * that peer's (a change to one cap).
   */
  private async readThrottle(
    ifname: string,
    peer?: { address: string; address6?: string | null },
  ): Promise<ThrottleState> {
    const table = quotaTableName(ifname);
    const family = this.familyOf(ifname);
    const maps = throttleMaps(this.dualStack.has(ifname));
    const specs = throttleChainSpecs(ifname);
    const [sets, chains, rules] = await Promise.all([
      Promise.all(maps.map((map) => this.nft.getSet(family, table, map.name))),
      Promise.all(specs.map((spec) => this.nft.getChain(family, table, spec.name))),
      Promise.all(specs.map((spec) => this.nft.listRules(family, table, spec.name))),
    ]);
    if (peer === undefined) {
      const [limits, elements] = await Promise.all([
        this.nft.listObjects(family, table, NFT_OBJECT_LIMIT),
        Promise.all(
          maps.map((map, i) => (sets[i] ? this.nft.listSetElements(family, table, map.name) : [])),
        ),
      ]);
      return { sets, chains, rules, limits, elements };
    }
    const [limits, elements] = await Promise.all([
      Promise.all(
        (['up', 'down'] as const).map((direction) =>
          this.nft.getObject(
            family,
            table,
            NFT_OBJECT_LIMIT,
            limitObjectName(peer.address, direction),
          ),
        ),
      ),
      Promise.all(
        maps.map(async (map, i) => {
          const address = map.family === 4 ? peer.address : (peer.address6 ?? null);
          if (!sets[i] || address === null) return [];
          const key = map.family === 4 ? ipv4ToBytes(address) : ipv6ToBytes(address);
          const element = await this.nft.getSetElement(family, table, map.name, key, address);
          return element ? [element] : [];
        }),
      ),
    ]);
    return { sets, chains, rules, limits: limits.filter((limit) => limit !== null), elements };
  }

  setCap(
    ifname: string,
    peer: PeerRef,
    quotaBytes: number,
    plan?: CapPlan | null,
    afterCap?: AfterCap,
  ): Promise<void> {
    return this.changes.run(() =>
      atBoundary(() => this.doSetCap(ifname, peer, quotaBytes, plan, afterCap), quotaErrors),
    );
  }

  private async doSetCap(
    ifname: string,
    peer: PeerRef,
    quotaBytes: number,
    plan: CapPlan | null | undefined,
    afterCap: AfterCap | undefined,
  ): Promise<void> {
    const bytes = checkQuotaBytes(quotaBytes);
    try {
      await this.writeCap(ifname, peer, bytes, plan, afterCap);
    } catch (error) {
      // The table or the map is gone (deleted by hand, or never set up): set up, then retry
      // once. After that, ENOENT on NEWOBJ can only mean the quota type is missing.
      if (!isNetlinkError(error, 'ENOENT')) throw error;
      await this.doEnsure(ifname, null);
      await this.writeCap(ifname, peer, bytes, plan, afterCap);
    }
  }

  private async writeCap(
    ifname: string,
    peer: PeerRef,
    quotaBytes: bigint,
    plan: CapPlan | null | undefined,
    afterCap: AfterCap | undefined,
  ): Promise<void> {
    const table = quotaTableName(ifname);
    const family = this.familyOf(ifname);
    const name = quotaObjectName(peer.address);
    const existing = await this.readQuota(family, table, name);
    const owned =
      existing !== null && (existing.owner === null || existing.owner === peer.publicKey);
    const throttle =
      afterCap !== undefined
        ? afterCap.throttleBytesPerSecond
        : owned
          ? existing.throttleBytesPerSecond
          : null;
    if (throttle !== null || (existing?.throttleBytesPerSecond ?? null) !== null) {
      await this.writeThrottlingCap(ifname, peer, quotaBytes, existing, owned, throttle, plan);
      return;
    }
    if (!existing) {
      const batch = new NftBatch(family);
      writeNewQuota(batch, table, peer, quotaBytes, 0n, { plan: plan ?? null });
      this.writeElement6(batch, ifname, table, peer);
      await this.nft.commit(batch, `set data cap of ${peer.address}`);
      return;
    }
    if (existing.owner !== null && existing.owner !== peer.publicKey) {
      // A cap left behind by an earlier peer on this address: the new peer starts from zero.
      await this.replaceQuota(ifname, table, peer, quotaBytes, 0n, plan ?? null);
      return;
    }
    const wanted = plan === undefined ? existing.plan : plan;
    if (existing.depleted) {
      await this.replaceQuota(
        ifname,
        table,
        peer,
        quotaBytes,
        existing.usedBytes,
        wanted,
        existing,
      );
      return;
    }
    if (!samePlan(wanted, existing.plan) || existing.owner === null) {
      // The kernel updates a quota's numbers in place but never its userdata
      // (nf_tables_updobj takes NFTA_OBJ_DATA only): a new plan needs a new object.
      await this.replaceQuota(ifname, table, peer, quotaBytes, 'current', wanted, existing);
      return;
    }
    const batch = new NftBatch(family);
    writeQuotaUpdate(batch, table, name, quotaBytes);
    writeElement(batch, table, peer.address, name); // no-op if present; repairs if not
    this.writeElement6(batch, ifname, table, peer);
    await this.nft.commit(batch, `change data cap of ${peer.address}`);
    const after = await this.readQuota(family, table, name);
    if (after && after.quotaBytes !== quotaBytes) {
      // A kernel before 5.4 acknowledges the update and changes nothing.
      await this.replaceQuota(ifname, table, peer, quotaBytes, after.usedBytes, wanted, after);
    }
  }

  /** A dual-stack peer's element of caps6, on a dual-stack interface (no-op if present). */
  private writeElement6(batch: NftBatch, ifname: string, table: string, peer: PeerRef): void {
    if (!this.dualStack.has(ifname) || peer.address6 == null) return;
    writeElement6(batch, table, { ...peer, address6: peer.address6 });
  }

  /**
   * A change where the cap throttles before or after it, in one transaction. The quota object
   * is updated in place where its userdata stays the same (so the kernel keeps counting without
   * a gap); a new userdata (mode, rate or billing period) or a depleted quota means a new
   * object, with the usage as read (the bytes counted between the read and the commit, a round
   * trip, are lost). `plan` undefined keeps the cap's billing period.
   */
  private async writeThrottlingCap(
    ifname: string,
    peer: PeerRef,
    quotaBytes: bigint,
    existing: QuotaState | null,
    owned: boolean,
    throttle: number | null,
    plan: CapPlan | null | undefined,
  ): Promise<void> {
    const table = quotaTableName(ifname);
    const family = this.familyOf(ifname);
    const dual = this.dualStack.has(ifname);
    const name = quotaObjectName(peer.address);
    const state = await this.readThrottle(ifname, peer);
    const kept = existing !== null && owned ? existing : null;
    const wantedPlan = plan === undefined ? (kept?.plan ?? null) : plan;
    const inPlace =
      kept !== null &&
      kept.owner !== null &&
      !kept.depleted &&
      kept.throttleBytesPerSecond === throttle &&
      samePlan(wantedPlan, kept.plan);
    const replaced = existing !== null && !inPlace;
    const wanted = new Map<string, ThrottleTarget>();
    if (throttle !== null) wanted.set(peer.address, throttleTarget(peer, throttle));
    const limits = planThrottle(ifname, table, state, wanted, null, {
      dual,
      replaced: replaced ? [peer.address] : [],
    });
    const batch = new NftBatch(family);
    limits.removals(batch);
    // The caps (and caps6) elements: out where the object is replaced or the cap throttles now.
    if (replaced || throttle !== null) {
      await this.writeBlockElementsRemoval(batch, ifname, table, peer);
    }
    if (replaced) batch.deleteObject(table, NFT_OBJECT_QUOTA, name, 'quota');
    if (inPlace) {
      writeQuotaUpdate(batch, table, name, quotaBytes);
    } else {
      writeNewQuota(batch, table, peer, quotaBytes, kept?.usedBytes ?? 0n, {
        plan: wantedPlan,
        throttleBytesPerSecond: throttle,
        others: kept?.userdata.others ?? [],
      });
    }
    if (throttle === null && inPlace) writeElement(batch, table, peer.address, name);
    if (throttle === null) this.writeElement6(batch, ifname, table, peer);
    limits.additions(batch);
    const what = throttle === null ? 'blocks' : `throttles to ${throttle} B/s`;
    await this.nft.commit(batch, `set data cap of ${peer.address} (${what} over it)`);
  }

  /** Queues deleting the peer's elements of caps and caps6 that exist. */
  private async writeBlockElementsRemoval(
    batch: NftBatch,
    ifname: string,
    table: string,
    peer: PeerRef,
  ): Promise<void> {
    const family = this.familyOf(ifname);
    const key = ipv4ToBytes(peer.address);
    const address6 = this.dualStack.has(ifname) ? (peer.address6 ?? null) : null;
    const key6 = address6 === null ? null : ipv6ToBytes(address6);
    const [element, element6] = await Promise.all([
      this.nft.getSetElement(family, table, CAPS_MAP, key, peer.address),
      key6 === null ? null : this.nft.getSetElement(family, table, CAPS_MAP6, key6, address6!),
    ]);
    if (element) {
      batch.deleteSetElements(
        { table, set: CAPS_MAP, elements: [{ key: { value: key } }] },
        peer.address,
      );
    }
    if (element6 && key6 !== null) {
      batch.deleteSetElements(
        { table, set: CAPS_MAP6, elements: [{ key: { value: key6 } }] },
        address6!,
      );
    }
  }

  /**
   * Elements out, object out, object in with `consumed`, elements in: one transaction.
   * `consumed` 'current': what the object has counted when read just before the commit (the
   * read that the removal makes anyway); bytes counted between that read and the commit, a
   * netlink round trip, are not carried over.
   */
  private async replaceQuota(
    ifname: string,
    table: string,
    peer: PeerRef,
    quotaBytes: bigint,
    consumed: bigint | 'current',
    plan: CapPlan | null,
    kept?: QuotaState,
  ): Promise<void> {
    const batch = new NftBatch(this.familyOf(ifname));
    const removed = await this.writeRemoval(
      batch,
      ifname,
      table,
      peer.address,
      peer.address6 ?? undefined,
    );
    const used = consumed === 'current' ? (removed.quota?.usedBytes ?? 0n) : consumed;
    writeNewQuota(batch, table, peer, quotaBytes, used, { plan, others: kept?.userdata.others });
    this.writeElement6(batch, ifname, table, peer);
    await this.nft.commit(batch, `replace data cap of ${peer.address}`);
  }

  /**
   * Queues deleting the address's map elements (caps, and caps6 for a dual-stack peer's IPv6
   * address), then its object: the order the kernel needs; for a throttling cap its throttle
   * elements and limits first.
   */
  private async writeRemoval(
    batch: NftBatch,
    ifname: string,
    table: string,
    address: string,
    address6?: string,
  ): Promise<{ found: boolean; quota: QuotaState | null }> {
    const family = this.familyOf(ifname);
    const name = quotaObjectName(address);
    const key = ipv4ToBytes(address);
    const dual = this.dualStack.has(ifname) && address6 !== undefined;
    const key6 = dual ? ipv6ToBytes(address6) : null;
    const [object, element, element6] = await Promise.all([
      this.nft.getObject(family, table, NFT_OBJECT_QUOTA, name),
      this.nft.getSetElement(family, table, CAPS_MAP, key, address),
      key6 === null ? null : this.nft.getSetElement(family, table, CAPS_MAP6, key6, address6!),
    ]);
    if (object && parseQuota(object)?.throttleBytesPerSecond != null) {
      const peer = { address, address6: dual ? address6 : null };
      const state = await this.readThrottle(ifname, peer);
      planThrottle(ifname, table, state, new Map(), null, { dual }).removals(batch);
    }
    if (element) {
      batch.deleteSetElements(
        { table, set: CAPS_MAP, elements: [{ key: { value: key } }] },
        address,
      );
    }
    if (element6 && key6 !== null) {
      batch.deleteSetElements(
        { table, set: CAPS_MAP6, elements: [{ key: { value: key6 } }] },
        address6!,
      );
    }
    if (object) batch.deleteObject(table, NFT_OBJECT_QUOTA, name, 'quota');
    return {
      found: object !== null || element !== null || (element6 ?? null) !== null,
      quota: object && parseQuota(object),
    };
  }

  removeCap(ifname: string, address: string, address6?: string): Promise<void> {
    return this.changes.run(() =>
      atBoundary(() => this.doRemoveCap(ifname, address, address6), quotaErrors),
    );
  }

  private async doRemoveCap(ifname: string, address: string, address6?: string): Promise<void> {
    const table = quotaTableName(ifname);
    const batch = new NftBatch(this.familyOf(ifname));
    if (!(await this.writeRemoval(batch, ifname, table, address, address6)).found) return;
    await this.nft.commit(batch, `remove data cap of ${address}`);
  }

  resetCap(ifname: string, peer: PeerRef): Promise<DataCap | null> {
    return this.changes.run(() =>
      atBoundary(async () => {
        // Read first: a cap another key owns (an earlier peer's) is not this peer's to reset.
        const { family, table, name, existing } = await this.ownQuota(ifname, peer);
        if (!existing) return null;
        const object = await this.nft.resetObject(family, table, NFT_OBJECT_QUOTA, name);
        const closing = object && parseQuota(object);
        if (!closing) return null;
        return { quotaBytes: Number(closing.quotaBytes), usedBytes: Number(closing.usedBytes) };
      }, quotaErrors),
    );
  }

  getCap(ifname: string, peer: PeerRef): Promise<DataCap | null> {
    return atBoundary(async () => {
      const quota = (await this.ownQuota(ifname, peer)).existing;
      if (!quota) return null;
      return {
        quotaBytes: Number(quota.quotaBytes),
        usedBytes: Number(quota.usedBytes),
        plan: quota.plan,
        throttleBytesPerSecond: quota.throttleBytesPerSecond,
      };
    }, quotaErrors);
  }

  resetPeriod(ifname: string, peer: PeerRef, due: number): Promise<PeriodReset | null> {
    return this.changes.run(() =>
      atBoundary(async () => {
        const { family, table, name, existing } = await this.ownQuota(ifname, peer);
        const plan = existing?.plan;
        if (!existing || !plan) return null;
        if (plan.periodFrom >= due) return null; // made already
        // Read and zero in one step: the closing usage is exact, nothing counted twice or lost.
        const object = await this.nft.resetObject(family, table, NFT_OBJECT_QUOTA, name);
        const closing = object && parseQuota(object);
        if (!closing) return null;
        const next: CapPlan = {
          ...plan,
          periodFrom: due,
          previousUsedBytes: Number(closing.usedBytes),
        };
        // Then the userdata: the new period's start and the closing usage, for a restart.
        const rate = closing.throttleBytesPerSecond;
        if (rate === null) {
          await this.replaceQuota(
            ifname,
            table,
            peer,
            closing.quotaBytes,
            'current',
            next,
            closing,
          );
        } else {
          // A throttling cap's object is replaced with its limits and throttle elements; the
          // quota, zeroed, is no longer over: the peer is back to full speed.
          const current = await this.readQuota(family, table, name);
          await this.writeThrottlingCap(
            ifname,
            peer,
            closing.quotaBytes,
            current,
            true,
            rate,
            next,
          );
        }
        return {
          closing: {
            quotaBytes: Number(closing.quotaBytes),
            usedBytes: Number(closing.usedBytes),
            ...(rate === null ? {} : { throttleBytesPerSecond: rate }),
          },
          plan: next,
        };
      }, quotaErrors),
    );
  }

  listCaps(ifname: string): Promise<Map<string, KernelDataCap>> {
    return atBoundary(() => this.doListCaps(ifname), quotaErrors);
  }

  private async doListCaps(ifname: string): Promise<Map<string, KernelDataCap>> {
    const table = quotaTableName(ifname);
    const family = this.familyOf(ifname);
    let listing = this.listings.get(ifname);
    if (listing === undefined || listing.table !== table) {
      listing = new CapListing(table);
      this.listings.set(ifname, listing);
    }
    // Read before the maps: a change made after it shows as another generation next time.
    const generation = await this.nft.getGeneration();
    // Polled often, with up to 50,000 objects: one walk of each reply (./listing.ts), and what
    // did not change since the last read is not decoded again.
    const objects = listing.objects(
      await this.nft.dump(
        NFT_MSG_GETOBJ,
        family,
        encodeAttributes(objectAttributes, { table, type: NFT_OBJECT_QUOTA }),
        `NFT_MSG_GETOBJ ${familyName(family)} ${table} type ${NFT_OBJECT_QUOTA}`,
      ),
    );
    if (objects.length === 0) return new Map();
    // A cap holds only where the map leads packets to its object: caps for a cap that blocks,
    // throttle_caps (read only when a cap throttles) for one that throttles.
    const throttling = CapListing.throttling(objects);
    const known = this.routes.get(ifname);
    const current =
      known !== undefined &&
      known.generation === generation &&
      known.family === family &&
      known.table === table &&
      (known.throttleCaps !== null || !throttling);
    const routes = current ? known : await this.readRoutes(family, table, generation, throttling);
    this.routes.set(ifname, routes);
    return listing.caps(objects, routes.caps, routes.throttleCaps ?? new Map<number, string>());
  }

  /** Both maps' elements (throttle_caps only when `throttling`), stamped with `generation`. */
  private async readRoutes(
    family: number,
    table: string,
    generation: number,
    throttling: boolean,
  ): Promise<Routes> {
    const [caps, throttleCaps] = await Promise.all([
      this.readObjrefs(family, table, CAPS_MAP),
      throttling ? this.readObjrefs(family, table, THROTTLE_CAPS_MAP) : null,
    ]);
    return { generation, family, table, caps, throttleCaps };
  }

  /** An object map's elements: key (a 4-byte address as a u32) → object name. */
  private async readObjrefs(
    family: number,
    table: string,
    set: string,
  ): Promise<Map<number, string>> {
    return decodeObjrefElements(
      await this.nft.dump(
        NFT_MSG_GETSETELEM,
        family,
        encodeAttributes(setElementListAttributes, { table, set }),
        `NFT_MSG_GETSETELEM ${familyName(family)} ${table} ${set}`,
      ),
    );
  }

  /** The peer's quota object, read; `existing` null when absent or another key's. */
  private async ownQuota(
    ifname: string,
    peer: PeerRef,
  ): Promise<{ family: number; table: string; name: string; existing: QuotaState | null }> {
    const table = quotaTableName(ifname);
    const name = quotaObjectName(peer.address);
    const family = this.familyOf(ifname);
    const quota = await this.readQuota(family, table, name);
    const mine = quota !== null && (quota.owner === null || quota.owner === peer.publicKey);
    return { family, table, name, existing: mine ? quota : null };
  }

  private async readQuota(family: number, table: string, name: string): Promise<QuotaState | null> {
    const object = await this.nft.getObject(family, table, NFT_OBJECT_QUOTA, name);
    return object && parseQuota(object);
  }

  close(): void {
    this.nft.close();
  }
}
