/** The table, map, chains and rules of the data caps: how they are written and checked. */
import { encodeAttributes } from '../../netlink';
import { type ChainAttributes, NftBatch } from '../nftables/client';
import {
  IFNAMSIZ,
  NFT_META_IIFNAME,
  NFT_META_OIFNAME,
  NFT_OBJECT_QUOTA,
  NFT_PAYLOAD_NETWORK_HEADER,
  NFT_QUOTA_F_INV,
  NFT_REG_1,
  NF_ACCEPT,
  NF_DROP,
  NF_INET_POST_ROUTING,
  NF_INET_PRE_ROUTING,
} from '../nftables/constants';
import {
  type Expression,
  cmpEq,
  metaLoad,
  objrefMap,
  payloadLoad,
  verdict,
} from '../nftables/expressions';
import { quotaAttributes } from '../nftables/schema';
import { commentUserdata } from '../nftables/userdata';
import { dualStackRule } from './dual-stack';
import { capsMap, capsMap6 } from './maps';
import {
  CAPS_MAP,
  CAPS_MAP6_ID,
  CAPS_MAP_ID,
  type ChainSpec,
  IPV4_DADDR_OFFSET,
  IPV4_SADDR_OFFSET,
  PRIORITY_FILTER,
  PROBE_OBJECT,
  quotaTableName,
} from './naming';

export function chainSpecs(ifname: string): ChainSpec[] {
  return [
    {
      name: 'from_peers',
      hooknum: NF_INET_PRE_ROUTING,
      metaKey: NFT_META_IIFNAME,
      addressOffset: IPV4_SADDR_OFFSET,
      comment: `wg-peerd: count traffic from capped peers of ${ifname}, drop it over the cap`,
    },
    {
      name: 'to_peers',
      hooknum: NF_INET_POST_ROUTING,
      metaKey: NFT_META_OIFNAME,
      addressOffset: IPV4_DADDR_OFFSET,
      comment: `wg-peerd: count traffic to capped peers of ${ifname}, drop it over the cap`,
    },
  ];
}

/**
 * The same two hooks and interface matches for a table that drops a kind of peer's traffic (the
 * suspensions', the expiries'): the address at `offsets` (IPv4 or IPv6 header), and a comment
 * naming `which` peers (`suspended`, `expired`).
 */
export function dropChainSpecs(
  ifname: string,
  offsets: { from_peers: number; to_peers: number },
  which: string,
): ChainSpec[] {
  return chainSpecs(ifname).map((spec) => {
    const from = spec.name === 'from_peers';
    return {
      ...spec,
      addressOffset: from ? offsets.from_peers : offsets.to_peers,
      comment: `wg-peerd: drop traffic ${from ? 'from' : 'to'} ${which} peers of ${ifname}`,
    };
  });
}

/**
 * meta i/oifname == ifname, then the peer's address (ip s/daddr) into register 1: the match the
 * rules of the caps and of the suspensions (src/kernel/suspension) begin with. `length` 16 with
 * an IPv6 spec's offsets loads ip6 s/daddr (the suspensions' ip6 table, issue 18).
 */
export function peerAddressMatch(
  ifname: string,
  spec: ChainSpec,
  length: 4 | 16 = 4,
): Expression[] {
  const name = Buffer.alloc(IFNAMSIZ); // NUL-padded, as the kernel stores interface names
  name.write(ifname, 'utf8');
  return [
    metaLoad(spec.metaKey, NFT_REG_1),
    cmpEq(NFT_REG_1, name),
    payloadLoad(NFT_PAYLOAD_NETWORK_HEADER, spec.addressOffset, length, NFT_REG_1),
  ];
}

/** meta i/oifname == ifname, ip s/daddr → objref @caps → drop. */
export function ruleExpressions(ifname: string, spec: ChainSpec, setId?: number): Expression[] {
  return [
    ...peerAddressMatch(ifname, spec),
    objrefMap(NFT_REG_1, CAPS_MAP, setId),
    verdict(NF_DROP),
  ];
}

export function isChainAsSpecified(chain: ChainAttributes, spec: ChainSpec): boolean {
  return (
    chain.type === 'filter' &&
    chain.hook?.hooknum === spec.hooknum &&
    chain.hook?.priority === PRIORITY_FILTER
  );
}

/**
 * The map ids a batch that creates the maps refers to them by (NFTA_SET_ID); undefined for a map
 * that already exists.
 */
export interface MapIds {
  caps?: number;
  caps6?: number;
}

/**
 * The rules one chain holds: the one IPv4 rule of an `ip` table, or, in the `inet` table of a
 * dual-stack interface (./dual-stack.ts), one rule per family.
 */
export function chainRules(
  ifname: string,
  spec: ChainSpec,
  dual: boolean,
  ids: MapIds = {},
): Expression[][] {
  return dual
    ? [dualStackRule(ifname, spec, 4, ids.caps), dualStackRule(ifname, spec, 6, ids.caps6)]
    : [ruleExpressions(ifname, spec, ids.caps)];
}

/** The set-up transaction for a kernel without our table: what `ensure` sends the first time. */
export function writeSetUp(batch: NftBatch, ifname: string, dual = false): void {
  const table = quotaTableName(ifname);
  batch.newTable({
    name: table,
    flags: 0,
    userdata: commentUserdata(
      `wg-peerd: data caps of the peers of ${ifname}; managed by wg-peerd, edits are undone`,
    ),
  });
  batch.newSet(capsMap(table, CAPS_MAP_ID));
  const ids: MapIds = { caps: CAPS_MAP_ID };
  if (dual) {
    batch.newSet(capsMap6(table, CAPS_MAP6_ID));
    ids.caps6 = CAPS_MAP6_ID;
  }
  for (const spec of chainSpecs(ifname)) {
    writeChain(batch, table, spec);
    writeRules(batch, ifname, table, spec, dual, ids);
  }
  // Nothing else in the set-up needs nft_quota; create and delete an object in the same
  // transaction so that a kernel without it fails here, named, rather than at the first cap.
  batch.newObject(
    {
      table,
      name: PROBE_OBJECT,
      type: NFT_OBJECT_QUOTA,
      data: encodeAttributes(quotaAttributes, { bytes: 0n, flags: NFT_QUOTA_F_INV }),
    },
    'quota',
  );
  batch.deleteObject(table, NFT_OBJECT_QUOTA, PROBE_OBJECT, 'quota');
}

/** A base chain of `spec`'s hook, policy accept, at `priority` (the caps': filter). */
export function writeChain(
  batch: NftBatch,
  table: string,
  spec: ChainSpec,
  priority: number = PRIORITY_FILTER,
): void {
  batch.newChain({
    table,
    name: spec.name,
    type: 'filter',
    policy: NF_ACCEPT,
    hook: { hooknum: spec.hooknum, priority },
  });
}

/**
 * A drop table's chain (dropChainSpecs) at `priority` with its one rule, `expressions`,
 * commented as the spec says: the suspensions' and the expiries' chains.
 */
export function writeDropChain(
  batch: NftBatch,
  table: string,
  spec: ChainSpec,
  priority: number,
  expressions: Expression[],
): void {
  writeChain(batch, table, spec, priority);
  batch.newRule({ table, chain: spec.name, expressions, userdata: commentUserdata(spec.comment) });
}

/** The chain's rules (chainRules), in order. */
export function writeRules(
  batch: NftBatch,
  ifname: string,
  table: string,
  spec: ChainSpec,
  dual: boolean,
  ids: MapIds = {},
): void {
  for (const expressions of chainRules(ifname, spec, dual, ids)) {
    batch.newRule({
      table,
      chain: spec.name,
      expressions,
      userdata: commentUserdata(spec.comment),
    });
  }
}
