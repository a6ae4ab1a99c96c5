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
 */
import {
  SerialQueue,
  type TransportFactory,
  isNetlinkError,
  openNativeTransport,
} from '../../netlink';
import { atBoundary, type Translate } from '../errors';
import { bytesToIpv4, ipv4ToBytes } from '../ipv4';
import {
  type ChainAttributes,
  NfTables,
  NftBatch,
  type SetAttributes,
  type SetElementAttributes,
} from '../nftables/client';
import {
  NFNL_MSG_BATCH_BEGIN,
  NFPROTO_IPV4,
  NFTNL_UDATA_SET_KEYBYTEORDER,
  NFT_BYTEORDER_BIG_ENDIAN,
  NFT_DATATYPE_IPADDR,
  NFT_REG_1,
  NFT_TABLE_F_DORMANT,
  NF_ACCEPT,
  NF_DROP,
} from '../nftables/constants';
import { type Expression, lookupSet, sameExpressions, verdict } from '../nftables/expressions';
import { commentOf, commentUserdata, encodeUserdata, u32Tlv } from '../nftables/userdata';
import { NFT_GETS, missingNfTables } from '../quota/facility';
import { type ChainSpec, chainSpecs as capChainSpecs, peerAddressMatch } from '../quota/skeleton';
import { OWNER_PREFIX, PRIORITY_FILTER, quotaTableName } from '../quota/naming';
import type { ChangeQueue, PeerRef, Repair, SuspensionApi } from '../types';

/** The family of the suspension table: peers' tunnel addresses are IPv4 (as the caps'). */
export const SUSPENSION_FAMILY = NFPROTO_IPV4;
/** The set of suspended tunnel addresses. */
export const SUSPENDED_SET = 'suspended';
/** NFTA_SET_ID of the set when a batch creates it, so the rules can refer to it. */
const SUSPENDED_SET_ID = 1;
/**
 * NF_IP_PRI_FILTER - 10 (linux/netfilter_ipv4.h): before the data caps' chains at
 * NF_IP_PRI_FILTER on the same hooks, after destination NAT (NF_IP_PRI_NAT_DST, -100).
 */
export const PRIORITY_SUSPENSION = PRIORITY_FILTER - 10;

/** `wg_peerd_suspend_<ifname>`. */
export function suspensionTableName(ifname: string): string {
  quotaTableName(ifname); // the same check of the interface name
  return `wg_peerd_suspend_${ifname}`;
}

/** The caps' hooks and matches (quota/skeleton.ts), with comments of their own. */
function chainSpecs(ifname: string): ChainSpec[] {
  return capChainSpecs(ifname).map((spec) => ({
    ...spec,
    comment: `wg-peerd: drop traffic ${spec.name === 'from_peers' ? 'from' : 'to'} suspended peers of ${ifname}`,
  }));
}

/** meta i/oifname == ifname, ip s/daddr @suspended → drop. */
function ruleExpressions(ifname: string, spec: ChainSpec, setId?: number): Expression[] {
  return [
    ...peerAddressMatch(ifname, spec),
    lookupSet(NFT_REG_1, SUSPENDED_SET, setId),
    verdict(NF_DROP),
  ];
}

function suspendedSet(table: string, id?: number): SetAttributes {
  return {
    table,
    name: SUSPENDED_SET,
    keyType: NFT_DATATYPE_IPADDR,
    keyLen: 4,
    id,
    // What nft stores for an ipv4_addr key, so that `nft list` prints addresses.
    userdata: encodeUserdata([u32Tlv(NFTNL_UDATA_SET_KEYBYTEORDER, NFT_BYTEORDER_BIG_ENDIAN)]),
  };
}

function isSuspendedSet(set: SetAttributes | null): boolean {
  return set !== null && (set.flags ?? 0) === 0 && set.keyLen === 4;
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
function element(address: string, publicKey: string): SetElementAttributes {
  return {
    key: { value: ipv4ToBytes(address) },
    userdata: commentUserdata(`${OWNER_PREFIX}${publicKey}`),
  };
}

/** The owner's key in an element's comment, or null. */
function ownerOf(element: SetElementAttributes): string | null {
  const comment = commentOf(element.userdata);
  return comment?.startsWith(OWNER_PREFIX) ? comment.slice(OWNER_PREFIX.length) : null;
}

/** The whole table with these elements: the first set-up, or a rebuild. */
function writeTable(batch: NftBatch, ifname: string, elements: readonly PeerRef[]): void {
  const table = suspensionTableName(ifname);
  batch.newTable({
    name: table,
    flags: 0,
    userdata: commentUserdata(
      `wg-peerd: suspended peers of ${ifname}; managed by wg-peerd, edits are undone`,
    ),
  });
  batch.newSet(suspendedSet(table, SUSPENDED_SET_ID));
  for (const spec of chainSpecs(ifname)) {
    batch.newChain({
      table,
      name: spec.name,
      type: 'filter',
      policy: NF_ACCEPT,
      hook: { hooknum: spec.hooknum, priority: PRIORITY_SUSPENSION },
    });
    batch.newRule({
      table,
      chain: spec.name,
      expressions: ruleExpressions(ifname, spec, SUSPENDED_SET_ID),
      userdata: commentUserdata(spec.comment),
    });
  }
  if (elements.length > 0) {
    batch.newSetElements(
      {
        table,
        set: SUSPENDED_SET,
        setId: SUSPENDED_SET_ID,
        elements: elements.map((p) => element(p.address, p.publicKey)),
      },
      `${elements.length} element(s)`,
    );
  }
}

/**
 * What a refusal of nf_tables means here: a GET answered with a bare EINVAL or a batch refused
 * with EOPNOTSUPP is nf_tables missing (see quota/facility.ts); the set lookup is part of
 * nf_tables itself (nft_lookup.c is built into nf_tables.ko), so no other module can be.
 */
const suspensionErrors: Translate = (error) => {
  const type = error.messageType;
  if (type === undefined) return undefined;
  if (NFT_GETS.has(type) && error.code === 'EINVAL' && !error.kernelMessage) {
    return missingNfTables(error);
  }
  if (type === NFNL_MSG_BATCH_BEGIN && error.code === 'EOPNOTSUPP') return missingNfTables(error);
  return undefined;
};

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
   * Reads the table; keeps the elements of live peers that own them, adds `restore`, and
   * rebuilds the table in one transaction when its skeleton is not as specified. No table and
   * nothing to restore: nothing is made (the first suspension makes it).
   */
  private async doEnsure(
    ifname: string,
    live: readonly PeerRef[],
    restore: readonly PeerRef[],
  ): Promise<Repair[]> {
    const table = suspensionTableName(ifname);
    const repairs: Repair[] = [];
    const found = await this.nft.getTable(SUSPENSION_FAMILY, table);
    if (found === null) {
      if (restore.length === 0) return repairs;
      const batch = new NftBatch(SUSPENSION_FAMILY);
      writeTable(batch, ifname, restore);
      await this.nft.commit(batch, `set up suspensions of ${ifname}`);
      return repairs;
    }
    if (((found.flags ?? 0) & NFT_TABLE_F_DORMANT) !== 0) {
      // Hooks unregistered: wake it on its own (the kernel restricts what else such a
      // transaction may do), as the data caps' table is woken.
      const wake = new NftBatch(SUSPENSION_FAMILY).newTable({ name: table, flags: 0 });
      await this.nft.commit(wake, `wake the suspension table of ${ifname}`);
      repairs.push({ address: null, found: `table ${table} dormant`, done: 'woke it' });
    }
    const specs = chainSpecs(ifname);
    const [set, chains, rules] = await Promise.all([
      this.nft.getSet(SUSPENSION_FAMILY, table, SUSPENDED_SET),
      Promise.all(specs.map((spec) => this.nft.getChain(SUSPENSION_FAMILY, table, spec.name))),
      Promise.all(specs.map((spec) => this.nft.listRules(SUSPENSION_FAMILY, table, spec.name))),
    ]);
    const elements = isSuspendedSet(set)
      ? await this.nft.listSetElements(SUSPENSION_FAMILY, table, SUSPENDED_SET)
      : [];
    const owners = new Map(live.map((peer) => [peer.address, peer.publicKey]));
    const kept: PeerRef[] = [];
    const stale: string[] = [];
    for (const entry of elements) {
      const key = entry.key?.value;
      if (key?.length !== 4) continue;
      const address = bytesToIpv4(key);
      const owner = ownerOf(entry);
      if (owner !== null && owners.get(address) === owner) {
        kept.push({ address, publicKey: owner });
        continue;
      }
      stale.push(address);
      repairs.push({
        address,
        found: `suspension of ${address} ${owner === null ? 'without an owner' : 'owned by a key no live peer on that address has'}`,
        done: 'removed it',
      });
    }
    const keptAddresses = new Set(kept.map((p) => p.address));
    const added = restore.filter((p) => !keptAddresses.has(p.address));
    const intact =
      isSuspendedSet(set) &&
      specs.every(
        (spec, i) =>
          isChainAsSpecified(chains[i] ?? null, spec) &&
          rules[i]!.length === 1 &&
          sameExpressions(rules[i]![0]!.expressions ?? [], ruleExpressions(ifname, spec)),
      );
    const batch = new NftBatch(SUSPENSION_FAMILY);
    if (!intact) {
      repairs.push({
        address: null,
        found: `the set or chains of ${table} not as wg-peerd makes them`,
        done: `rebuilt the table with ${kept.length + added.length} suspension(s)`,
      });
      batch.deleteTable(table);
      writeTable(batch, ifname, [...kept, ...added]);
    } else {
      if (stale.length > 0) {
        batch.deleteSetElements(
          {
            table,
            set: SUSPENDED_SET,
            elements: stale.map((a) => ({ key: { value: ipv4ToBytes(a) } })),
          },
          `${stale.length} element(s)`,
        );
      }
      if (added.length > 0) {
        batch.newSetElements(
          {
            table,
            set: SUSPENDED_SET,
            elements: added.map((p) => element(p.address, p.publicKey)),
          },
          `${added.length} element(s)`,
        );
      }
    }
    await this.nft.commit(batch, `repair suspensions of ${ifname}`);
    return repairs;
  }

  suspend(ifname: string, peer: PeerRef): Promise<void> {
    return this.changes.run(() =>
      atBoundary(async () => {
        try {
          await this.writeSuspension(ifname, peer);
        } catch (error) {
          // No table or set yet (the first suspension, or deleted by hand): make it with the
          // element in one transaction.
          if (!isNetlinkError(error, 'ENOENT')) throw error;
          const batch = new NftBatch(SUSPENSION_FAMILY);
          if (await this.nft.getTable(SUSPENSION_FAMILY, suspensionTableName(ifname))) {
            batch.deleteTable(suspensionTableName(ifname));
          }
          writeTable(batch, ifname, [peer]);
          await this.nft.commit(batch, `suspend ${peer.address}`);
        }
      }, suspensionErrors),
    );
  }

  /** The element, owned by the peer; one of another owner is replaced in the same transaction. */
  private async writeSuspension(ifname: string, peer: PeerRef): Promise<void> {
    const table = suspensionTableName(ifname);
    const key = ipv4ToBytes(peer.address);
    const present = await this.nft.getSetElement(
      SUSPENSION_FAMILY,
      table,
      SUSPENDED_SET,
      key,
      peer.address,
    );
    if (present && ownerOf(present) === peer.publicKey) return;
    const batch = new NftBatch(SUSPENSION_FAMILY);
    if (present) {
      batch.deleteSetElements(
        { table, set: SUSPENDED_SET, elements: [{ key: { value: key } }] },
        peer.address,
      );
    }
    batch.newSetElements(
      { table, set: SUSPENDED_SET, elements: [element(peer.address, peer.publicKey)] },
      peer.address,
    );
    await this.nft.commit(batch, `suspend ${peer.address}`);
  }

  resume(ifname: string, address: string): Promise<void> {
    return this.changes.run(() =>
      atBoundary(async () => {
        const table = suspensionTableName(ifname);
        const key = ipv4ToBytes(address);
        const present = await this.nft.getSetElement(
          SUSPENSION_FAMILY,
          table,
          SUSPENDED_SET,
          key,
          address,
        );
        if (!present) return;
        const batch = new NftBatch(SUSPENSION_FAMILY).deleteSetElements(
          { table, set: SUSPENDED_SET, elements: [{ key: { value: key } }] },
          address,
        );
        await this.nft.commit(batch, `resume ${address}`);
      }, suspensionErrors),
    );
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
