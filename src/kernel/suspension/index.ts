/**
 * Suspension of peers (issue 19), enforced in the kernel over nf_tables. Contract: a peer whose
 * tunnel address is in the set `suspended` of the interface's suspension table passes no
 * tunnelled packet in either direction, from the commit of the element on (a live session
 * included: every packet is looked up, nothing is remembered per connection); WireGuard itself
 * is not touched, so the peer keeps its key, allowed IPs, counters, limit and cap, and resuming
 * is deleting the element. Each element carries its owner's public key as an nft comment
 * (NFTA_SET_ELEM_USERDATA), so the table alone says who is suspended: a daemon restart reads it
 * back, and `ensure` drops an element whose address now belongs to another key. Nothing is kept
 * outside the kernel.
 *
 * Layout, for interface wg0 (what `nft list table ip wg_peerd_suspend_wg0` prints):
 *
 *   table ip wg_peerd_suspend_wg0 {
 *     comment "wg-peerd: suspended peers of wg0; managed by wg-peerd, edits are undone"
 *     set suspended { type ipv4_addr; elements = { 10.8.0.2 comment "wg-peerd peer <key>" } }
 *     chain from_peers {
 *       type filter hook prerouting priority filter - 10; policy accept;
 *       iifname "wg0" ip saddr @suspended drop
 *     }
 *     chain to_peers {
 *       type filter hook postrouting priority filter - 10; policy accept;
 *       oifname "wg0" ip daddr @suspended drop
 *     }
 *   }
 *
 * - A table of its own beside the data caps' (src/kernel/quota), so either can be repaired or
 *   rebuilt without the other. Hooks and matches are the caps' (see quota/index.ts for why
 *   prerouting/postrouting by interface name see exactly the tunnelled traffic), at priority
 *   filter - 10 so that a suspended peer's packets are dropped before a quota counts them.
 * - A repair that finds the skeleton changed rebuilds the whole table in one transaction with
 *   the elements it keeps, so no suspended packet passes while it happens.
 *
 * Dual-stack peers (issue 18): a table of family `ip` never sees an IPv6 packet, so a table
 * `ip6 wg_peerd_suspend_<ifname>` beside it, of the same layout, holds the IPv6 /128 of every
 * suspended peer that has one (`type ipv6_addr`, `ip6 saddr @suspended drop`, `ip6 daddr ...`;
 * the addresses at offsets 8 and 24 of the IPv6 header, RFC 8200 §3). The ip table stays the
 * record of who is suspended, exactly as on an IPv4-only interface; the ip6 set is derived from
 * it: the IPv6 address of each live peer whose IPv4 suspension is kept, nothing else. Both
 * tables change in ONE transaction (a batch may carry messages of several families), so a
 * suspend or resume never lets one family through while the other is cut. The ip6 table is made
 * with the first suspension of a peer that has an IPv6 address; an IPv4-only interface never
 * gets one (a leftover one is emptied by the next repair).
 */
import { SerialQueue, type TransportFactory, openNativeTransport } from '../../netlink';
import { atBoundary, type Translate } from '../errors';
import { bytesToIpv4, ipv4ToBytes } from '../ipv4';
import { bytesToIpv6, ipv6ToBytes } from '../ipv6';
import {
  type ChainAttributes,
  NfTables,
  NftBatch,
  type SetAttributes,
  type SetElementAttributes,
  type TableAttributes,
} from '../nftables/client';
import {
  NFPROTO_IPV4,
  NFPROTO_IPV6,
  NFTNL_UDATA_SET_KEYBYTEORDER,
  NFT_BYTEORDER_BIG_ENDIAN,
  NFT_DATATYPE_IP6ADDR,
  NFT_DATATYPE_IPADDR,
  NFT_REG_1,
  NFT_TABLE_F_DORMANT,
  NF_ACCEPT,
  NF_DROP,
} from '../nftables/constants';
import { type Expression, lookupSet, sameExpressions, verdict } from '../nftables/expressions';
import { commentOf, commentUserdata, encodeUserdata, u32Tlv } from '../nftables/userdata';
import { IPV6_DADDR_OFFSET, IPV6_SADDR_OFFSET } from '../quota/dual-stack';
import { nfTablesErrors } from '../quota/facility';
import { dropChainSpecs, peerAddressMatch, writeDropChain } from '../quota/skeleton';
import { type ChainSpec, OWNER_PREFIX, PRIORITY_FILTER, quotaTableName } from '../quota/naming';
import type { ChangeQueue, PeerRef, Repair, SuspensionApi } from '../types';

/** The family of the suspension table: peers' tunnel addresses are IPv4 (as the caps'). */
export const SUSPENSION_FAMILY = NFPROTO_IPV4;
/** The family of the table beside it for dual-stack peers' IPv6 addresses (issue 18). */
export const SUSPENSION_FAMILY6 = NFPROTO_IPV6;
/** The set of suspended tunnel addresses (of the same name in both tables). */
export const SUSPENDED_SET = 'suspended';
/**
 * NF_IP_PRI_FILTER - 10 (linux/netfilter_ipv4.h; NF_IP6_PRI_FILTER, netfilter_ipv6.h, is the
 * same 0): before the data caps' chains at the filter priority on the same hooks, after
 * destination NAT (NF_IP_PRI_NAT_DST, -100).
 */
export const PRIORITY_SUSPENSION = PRIORITY_FILTER - 10;

/** `wg_peerd_suspend_<ifname>` (the name of both tables). */
export function suspensionTableName(ifname: string): string {
  quotaTableName(ifname); // the same check of the interface name
  return `wg_peerd_suspend_${ifname}`;
}

/** What differs between the two tables: family, key and where the address is in the header. */
interface Flavour {
  family: number;
  /** IP version, for messages. */
  version: 4 | 6;
  keyType: number;
  keyLen: 4 | 16;
  /** Offsets of the peer's address in the network header: source (from it), destination. */
  offsets: { from_peers: number; to_peers: number };
  /** NFTA_SET_ID of the set when a batch creates it; distinct, as both may be in one batch. */
  setId: number;
  toBytes(address: string): Buffer;
  fromBytes(key: Buffer): string;
}

const V4: Flavour = {
  family: SUSPENSION_FAMILY,
  version: 4,
  keyType: NFT_DATATYPE_IPADDR,
  keyLen: 4,
  offsets: { from_peers: 12, to_peers: 16 },
  setId: 1,
  toBytes: ipv4ToBytes,
  fromBytes: bytesToIpv4,
};

const V6: Flavour = {
  family: SUSPENSION_FAMILY6,
  version: 6,
  keyType: NFT_DATATYPE_IP6ADDR,
  keyLen: 16,
  offsets: { from_peers: IPV6_SADDR_OFFSET, to_peers: IPV6_DADDR_OFFSET },
  setId: 2,
  toBytes: ipv6ToBytes,
  fromBytes: bytesToIpv6,
};

/** The caps' hooks and matches (quota/skeleton.ts), with comments and offsets of our own. */
function chainSpecs(ifname: string, flavour: Flavour): ChainSpec[] {
  return dropChainSpecs(ifname, flavour.offsets, 'suspended');
}

/** meta i/oifname == ifname, ip(6) s/daddr @suspended → drop. */
function ruleExpressions(
  ifname: string,
  spec: ChainSpec,
  flavour: Flavour,
  setId?: number,
): Expression[] {
  return [
    ...peerAddressMatch(ifname, spec, flavour.keyLen),
    lookupSet(NFT_REG_1, SUSPENDED_SET, setId),
    verdict(NF_DROP),
  ];
}

function suspendedSet(table: string, flavour: Flavour, id?: number): SetAttributes {
  return {
    table,
    name: SUSPENDED_SET,
    keyType: flavour.keyType,
    keyLen: flavour.keyLen,
    id,
    // What nft stores for an ipv4_addr or ipv6_addr key, so that `nft list` prints addresses.
    userdata: encodeUserdata([u32Tlv(NFTNL_UDATA_SET_KEYBYTEORDER, NFT_BYTEORDER_BIG_ENDIAN)]),
  };
}

function isSuspendedSet(set: SetAttributes | null, flavour: Flavour): boolean {
  return set !== null && (set.flags ?? 0) === 0 && set.keyLen === flavour.keyLen;
}

function isChainAsSpecified(chain: ChainAttributes | null, spec: ChainSpec): boolean {
  return (
    chain !== null &&
    chain.type === 'filter' &&
    chain.policy === NF_ACCEPT &&
    chain.hook?.hooknum === spec.hooknum &&
    chain.hook?.priority === PRIORITY_SUSPENSION
  );
}

/** The element of one address, owned by `publicKey`. */
function element(flavour: Flavour, address: string, publicKey: string): SetElementAttributes {
  return {
    key: { value: flavour.toBytes(address) },
    userdata: commentUserdata(`${OWNER_PREFIX}${publicKey}`),
  };
}

/** The owner's key in an element's comment, or null. */
function ownerOf(element: SetElementAttributes): string | null {
  const comment = commentOf(element.userdata);
  return comment?.startsWith(OWNER_PREFIX) ? comment.slice(OWNER_PREFIX.length) : null;
}

/** A suspension: the address (of the table's family) and its owner. */
interface Entry {
  address: string;
  publicKey: string;
}

/** The whole table of one family with these elements: the first set-up, or a rebuild. */
function writeTable(
  batch: NftBatch,
  flavour: Flavour,
  ifname: string,
  elements: readonly Entry[],
): void {
  const table = suspensionTableName(ifname);
  batch.newTable({
    name: table,
    flags: 0,
    userdata: commentUserdata(
      flavour.version === 4
        ? `wg-peerd: suspended peers of ${ifname}; managed by wg-peerd, edits are undone`
        : `wg-peerd: IPv6 addresses of suspended peers of ${ifname}; managed by wg-peerd, edits are undone`,
    ),
  });
  batch.newSet(suspendedSet(table, flavour, flavour.setId));
  for (const spec of chainSpecs(ifname, flavour)) {
    writeDropChain(
      batch,
      table,
      spec,
      PRIORITY_SUSPENSION,
      ruleExpressions(ifname, spec, flavour, flavour.setId),
    );
  }
  if (elements.length > 0) {
    batch.newSetElements(
      {
        table,
        set: SUSPENDED_SET,
        setId: flavour.setId,
        elements: elements.map((e) => element(flavour, e.address, e.publicKey)),
      },
      `${elements.length} element(s)`,
    );
  }
}

/** One table as read: null when there is none. */
interface TableState {
  table: TableAttributes;
  /** Set, chains and rules exactly as writeTable makes them. */
  intact: boolean;
  /** The set's elements (none when the set is not ours). */
  elements: Array<{ address: string; owner: string | null }>;
}

/**
 * What a refusal of nf_tables means here: a GET answered with a bare EINVAL or a batch refused
 * with EOPNOTSUPP is nf_tables missing (see quota/facility.ts); the set lookup is part of
 * nf_tables itself (nft_lookup.c is built into nf_tables.ko), so no other module can be.
 */
const suspensionErrors: Translate = nfTablesErrors;

/** A dual-stack peer's IPv6 address as the kernel's dumps print it (RFC 5952). */
function canonical6(address6: string): string {
  return bytesToIpv6(ipv6ToBytes(address6));
}

export class Suspension implements SuspensionApi {
  private readonly nft: NfTables;
  private readonly changes: ChangeQueue;

  constructor(open: TransportFactory = openNativeTransport, changes?: ChangeQueue) {
    this.nft = new NfTables(open);
    this.changes = changes ?? new SerialQueue();
  }

  ensure(
    ifname: string,
    live: readonly PeerRef[],
    restore: readonly PeerRef[] = [],
  ): Promise<Repair[]> {
    return this.changes.run(() =>
      atBoundary(() => this.doEnsure(ifname, live, restore), suspensionErrors),
    );
  }

  /**
   * Reads the table (a dormant one is woken first, on its own: the kernel restricts what else
   * such a transaction may do, as for the data caps' table); null when there is none.
   */
  private async readTable(
    flavour: Flavour,
    ifname: string,
    repairs: Repair[],
  ): Promise<TableState | null> {
    const table = suspensionTableName(ifname);
    const found = await this.nft.getTable(flavour.family, table);
    if (found === null) return null;
    if (((found.flags ?? 0) & NFT_TABLE_F_DORMANT) !== 0) {
      const wake = new NftBatch(flavour.family).newTable({ name: table, flags: 0 });
      await this.nft.commit(wake, `wake the suspension table of ${ifname}`);
      repairs.push({
        address: null,
        found: `table ${flavour.version === 4 ? 'ip' : 'ip6'} ${table} dormant`,
        done: 'woke it',
      });
    }
    const specs = chainSpecs(ifname, flavour);
    const [set, chains, rules] = await Promise.all([
      this.nft.getSet(flavour.family, table, SUSPENDED_SET),
      Promise.all(specs.map((spec) => this.nft.getChain(flavour.family, table, spec.name))),
      Promise.all(specs.map((spec) => this.nft.listRules(flavour.family, table, spec.name))),
    ]);
    const ours = isSuspendedSet(set, flavour);
    const listed = ours ? await this.nft.listSetElements(flavour.family, table, SUSPENDED_SET) : [];
    const elements: TableState['elements'] = [];
    for (const entry of listed) {
      const key = entry.key?.value;
      if (key?.length !== flavour.keyLen) continue;
      elements.push({ address: flavour.fromBytes(key), owner: ownerOf(entry) });
    }
    const intact =
      ours &&
      specs.every(
        (spec, i) =>
          isChainAsSpecified(chains[i] ?? null, spec) &&
          rules[i]!.length === 1 &&
          sameExpressions(rules[i]![0]!.expressions ?? [], ruleExpressions(ifname, spec, flavour)),
      );
    return { table: found, intact, elements };
  }

  /**
   * Queues what makes one table hold exactly `wanted` (address → owner): the elements it lacks
   * and the removal of the others, or a rebuild when the table is not as specified. No table and
   * nothing wanted: nothing. Returns the addresses removed and added.
   */
  private planTable(
    batch: NftBatch,
    flavour: Flavour,
    ifname: string,
    state: TableState | null,
    wanted: ReadonlyMap<string, string>,
    repairs: Repair[],
  ): { removed: string[]; added: string[] } {
    const table = suspensionTableName(ifname);
    const entries = [...wanted].map(([address, publicKey]) => ({ address, publicKey }));
    if (state === null) {
      if (entries.length > 0) writeTable(batch, flavour, ifname, entries);
      return { removed: [], added: entries.map((e) => e.address) };
    }
    const present = new Map(state.elements.map((e) => [e.address, e.owner]));
    const removed = [...present]
      .filter(([address, owner]) => wanted.get(address) !== owner)
      .map(([address]) => address);
    const added = entries.filter((e) => present.get(e.address) !== e.publicKey);
    if (!state.intact) {
      repairs.push({
        address: null,
        found: `the set or chains of ${flavour.version === 4 ? 'ip' : 'ip6'} ${table} not as wg-peerd makes them`,
        done: `rebuilt the table with ${entries.length} suspension(s)`,
      });
      batch.deleteTable(table);
      writeTable(batch, flavour, ifname, entries);
      return { removed, added: added.map((e) => e.address) };
    }
    if (removed.length > 0) {
      batch.deleteSetElements(
        {
          table,
          set: SUSPENDED_SET,
          elements: removed.map((a) => ({ key: { value: flavour.toBytes(a) } })),
        },
        `${removed.length} element(s)`,
      );
    }
    if (added.length > 0) {
      batch.newSetElements(
        {
          table,
          set: SUSPENDED_SET,
          elements: added.map((e) => element(flavour, e.address, e.publicKey)),
        },
        `${added.length} element(s)`,
      );
    }
    return { removed, added: added.map((e) => e.address) };
  }

  /**
   * Reads both tables; keeps the IPv4 elements of live peers that own them, adds `restore`, and
   * makes the ip6 set hold the IPv6 address of each peer so suspended, all in one transaction
   * (a table whose skeleton is not as specified is rebuilt in it). No table and nothing to
   * suspend: nothing is made (the first suspension makes it).
   */
  private async doEnsure(
    ifname: string,
    live: readonly PeerRef[],
    restore: readonly PeerRef[],
  ): Promise<Repair[]> {
    const repairs: Repair[] = [];
    const state4 = await this.readTable(V4, ifname, repairs);
    const state6 = await this.readTable(V6, ifname, repairs);
    const livePeers = new Map(live.map((peer) => [peer.address, peer]));
    // IPv4: what the table holds of live peers that own it, and what is restored.
    const wanted4 = new Map<string, string>();
    for (const { address, owner } of state4?.elements ?? []) {
      if (owner !== null && livePeers.get(address)?.publicKey === owner) {
        wanted4.set(address, owner);
        continue;
      }
      repairs.push({
        address,
        found: `suspension of ${address} ${owner === null ? 'without an owner' : 'owned by a key no live peer on that address has'}`,
        done: 'removed it',
      });
    }
    const kept = new Set(wanted4.keys());
    for (const peer of restore) wanted4.set(peer.address, peer.publicKey);
    const address6 = new Map<string, string>();
    for (const peer of [...live, ...restore]) {
      if (peer.address6 != null) address6.set(peer.address, canonical6(peer.address6));
    }
    // IPv6: the /128 of every peer suspended on IPv4, nothing else.
    const wanted6 = new Map<string, string>();
    const keptBy6 = new Set<string>();
    for (const [address, owner] of wanted4) {
      const v6 = address6.get(address);
      if (v6 === undefined) continue;
      wanted6.set(v6, owner);
      if (kept.has(address)) keptBy6.add(v6);
    }
    const batch = new NftBatch(V4.family);
    this.planTable(batch, V4, ifname, state4, wanted4, repairs);
    const { removed, added } = this.planTable(
      batch.inFamily(V6.family),
      V6,
      ifname,
      state6,
      wanted6,
      repairs,
    );
    for (const address of removed) {
      repairs.push({
        address,
        found: `IPv6 suspension of ${address} not of a suspended live peer`,
        done: 'removed it',
      });
    }
    // A restored suspension's IPv6 address is no repair; a kept one's missing address is.
    for (const address of added.filter((a) => keptBy6.has(a))) {
      repairs.push({
        address,
        found: `a suspended peer whose IPv6 address ${address} was not suspended`,
        done: 'added it',
      });
    }
    await this.nft.commit(batch, `repair suspensions of ${ifname}`);
    return repairs;
  }

  suspend(ifname: string, peer: PeerRef): Promise<void> {
    return this.changes.run(() =>
      atBoundary(async () => {
        const batch = new NftBatch(V4.family);
        await this.planSuspend(batch, V4, ifname, peer.address, peer.publicKey);
        if (peer.address6 != null) {
          const address6 = canonical6(peer.address6);
          await this.planSuspend(batch.inFamily(V6.family), V6, ifname, address6, peer.publicKey);
        }
        await this.nft.commit(batch, `suspend ${describe(peer.address, peer.address6)}`);
      }, suspensionErrors),
    );
  }

  /**
   * Queues the element of one address, owned by the peer: nothing when it is there already, one
   * of another owner replaced, and the whole table made (or remade) when it or its set is
   * missing (the first suspension, or deleted by hand).
   */
  private async planSuspend(
    batch: NftBatch,
    flavour: Flavour,
    ifname: string,
    address: string,
    publicKey: string,
  ): Promise<void> {
    const table = suspensionTableName(ifname);
    const set = await this.nft.getSet(flavour.family, table, SUSPENDED_SET);
    if (!isSuspendedSet(set, flavour)) {
      if (await this.nft.getTable(flavour.family, table)) batch.deleteTable(table);
      writeTable(batch, flavour, ifname, [{ address, publicKey }]);
      return;
    }
    const { key, present } = await this.readElement(flavour, table, address);
    if (present && ownerOf(present) === publicKey) return;
    if (present) queueDelete(batch, table, key, address);
    batch.newSetElements(
      { table, set: SUSPENDED_SET, elements: [element(flavour, address, publicKey)] },
      address,
    );
  }

  resume(ifname: string, address: string, address6?: string | null): Promise<void> {
    return this.changes.run(() =>
      atBoundary(async () => {
        const batch = new NftBatch(V4.family);
        await this.planResume(batch, V4, ifname, address);
        if (address6 != null) {
          await this.planResume(batch.inFamily(V6.family), V6, ifname, canonical6(address6));
        }
        await this.nft.commit(batch, `resume ${describe(address, address6)}`);
      }, suspensionErrors),
    );
  }

  /** Queues the removal of one address's element, if it is there. */
  private async planResume(
    batch: NftBatch,
    flavour: Flavour,
    ifname: string,
    address: string,
  ): Promise<void> {
    const table = suspensionTableName(ifname);
    const { key, present } = await this.readElement(flavour, table, address);
    if (present) queueDelete(batch, table, key, address);
  }

  /** The element of one address (null when the table, set or element is missing) and its key. */
  private async readElement(
    flavour: Flavour,
    table: string,
    address: string,
  ): Promise<{ key: Buffer; present: SetElementAttributes | null }> {
    const key = flavour.toBytes(address);
    const present = await this.nft.getSetElement(
      flavour.family,
      table,
      SUSPENDED_SET,
      key,
      address,
    );
    return { key, present };
  }

  listSuspended(ifname: string): Promise<Map<string, string | null>> {
    return atBoundary(async () => {
      const table = suspensionTableName(ifname);
      const elements = await this.nft.listSetElements(SUSPENSION_FAMILY, table, SUSPENDED_SET);
      const out = new Map<string, string | null>();
      for (const entry of elements) {
        const key = entry.key?.value;
        if (key?.length === 4) out.set(bytesToIpv4(key), ownerOf(entry));
      }
      return out;
    }, suspensionErrors);
  }

  close(): void {
    this.nft.close();
  }
}

/** Queues the deletion of the element of `key` (the address `what`). */
function queueDelete(batch: NftBatch, table: string, key: Buffer, what: string): void {
  batch.deleteSetElements({ table, set: SUSPENDED_SET, elements: [{ key: { value: key } }] }, what);
}

/** "10.8.0.2", or "10.8.0.2 and fd42::2" for a dual-stack peer (logs and operations). */
function describe(address: string, address6?: string | null): string {
  return address6 == null ? address : `${address} and ${address6}`;
}
