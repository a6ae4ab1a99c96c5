/**
 * Data caps of dual-stack peers (issue 18): ONE quota object per peer counts its IPv4 and IPv6
 * bytes together. Named objects belong to one table, and a table of family `ip` never sees an
 * IPv6 packet, so a dual-stack interface's table is of family `inet` and holds, beside the map
 * `caps` (IPv4 address → quota), a map `caps6` (IPv6 address → the same quota object):
 *
 *   table inet wg_peerd_wg0 {
 *     quota q_10_8_0_2 { comment "wg-peerd peer <public key>"; over 1000000 bytes used 0 bytes }
 *     map caps  { type ipv4_addr : quota; elements = { 10.8.0.2 : "q_10_8_0_2" } }
 *     map caps6 { type ipv6_addr : quota; elements = { fd42::2 : "q_10_8_0_2" } }
 *     chain from_peers {
 *       type filter hook prerouting priority filter; policy accept;
 *       iifname "wg0" meta nfproto ipv4 quota name ip saddr map @caps drop
 *       iifname "wg0" meta nfproto ipv6 quota name ip6 saddr map @caps6 drop
 *     }
 *     chain to_peers { ... oifname "wg0" ..., ip daddr / ip6 daddr ... }
 *   }
 *
 * In an inet table each rule first checks the packet's family (`meta nfproto`, what nft adds
 * itself before `ip saddr` there): without it an IPv6 packet's bytes 12-15 would be looked up in
 * the IPv4 map. Offsets in the IPv6 header: source at 8, destination at 24 (RFC 8200 §3). The
 * objects keep their names (from the IPv4 address), owners and `over` mode, so everything the
 * IPv4 caps do (update in place keeping consumed, depletion, reset) holds for both families.
 * These are the pure pieces (rules, the map, its elements, their reconciliation); an IPv4-only
 * interface keeps its `ip` table exactly as ./skeleton.ts writes it.
 */
import type { NftBatch, SetElementAttributes } from '../nftables/client';
import {
  IFNAMSIZ,
  NFPROTO_INET,
  NFPROTO_IPV4,
  NFPROTO_IPV6,
  NFT_META_NFPROTO,
  NFT_PAYLOAD_NETWORK_HEADER,
  NFT_REG_1,
  NF_DROP,
} from '../nftables/constants';
import {
  type Expression,
  cmpEq,
  metaLoad,
  objrefMap,
  payloadLoad,
  verdict,
} from '../nftables/expressions';
import { bytesToIpv6, ipv6ToBytes } from '../ipv6';
import type { PeerRef, Repair } from '../types';
import { CAPS_MAP, CAPS_MAP6, type ChainSpec, chunks, quotaObjectName } from './naming';

/** The family of a dual-stack interface's table: one table sees both IP families. */
export const DUAL_STACK_FAMILY = NFPROTO_INET;
/** Offsets of the IPv6 source and destination addresses in the IPv6 header (RFC 8200 §3). */
export const IPV6_SADDR_OFFSET = 8;
export const IPV6_DADDR_OFFSET = 24;
/** IPv4 header offsets, as ./naming.ts has them for the `ip` table. */
const IPV4_OFFSETS = { from_peers: 12, to_peers: 16 } as const;
const IPV6_OFFSETS = { from_peers: IPV6_SADDR_OFFSET, to_peers: IPV6_DADDR_OFFSET } as const;

/**
 * One rule of a chain of the inet table, for one family: i/oifname == ifname, meta nfproto ==
 * that family, its s/daddr → objref @caps (IPv4) or @caps6 (IPv6) → drop.
 */
export function dualStackRule(
  ifname: string,
  spec: ChainSpec,
  family: 4 | 6,
  setId?: number,
): Expression[] {
  const name = Buffer.alloc(IFNAMSIZ); // NUL-padded, as the kernel stores interface names
  name.write(ifname, 'utf8');
  const offsets = family === 4 ? IPV4_OFFSETS : IPV6_OFFSETS;
  const offset = offsets[spec.name as keyof typeof offsets];
  if (offset === undefined) throw new RangeError(`no such chain of ours: ${spec.name}`);
  return [
    metaLoad(spec.metaKey, NFT_REG_1),
    cmpEq(NFT_REG_1, name),
    metaLoad(NFT_META_NFPROTO, NFT_REG_1),
    cmpEq(NFT_REG_1, Buffer.from([family === 4 ? NFPROTO_IPV4 : NFPROTO_IPV6])),
    payloadLoad(NFT_PAYLOAD_NETWORK_HEADER, offset, family === 4 ? 4 : 16, NFT_REG_1),
    objrefMap(NFT_REG_1, family === 4 ? CAPS_MAP : CAPS_MAP6, setId),
    verdict(NF_DROP),
  ];
}

/** Where caps6 leads each IPv6 address: address → the name of the object its element names. */
export function elementTargets6(
  elements: readonly SetElementAttributes[],
): Map<string, string | undefined> {
  const targets = new Map<string, string | undefined>();
  for (const element of elements) {
    const key = element.key?.value;
    if (key?.length === 16) targets.set(bytesToIpv6(key), element.objref);
  }
  return targets;
}

/** The element of caps6 leading the peer's IPv6 address to its quota object. */
export function writeElement6(
  batch: NftBatch,
  table: string,
  peer: PeerRef & { address6: string },
  setId?: number,
): void {
  batch.newSetElements(
    {
      table,
      set: CAPS_MAP6,
      setId,
      elements: [
        { key: { value: ipv6ToBytes(peer.address6) }, objref: quotaObjectName(peer.address) },
      ],
    },
    peer.address6,
  );
}

/**
 * The elements of caps6 against the kept quota objects (IPv4 address → object name, as
 * planCapTable's sortObjects keeps them) and the live peers: every live dual-stack peer with a
 * kept object has its IPv6 address lead there, and nothing else is in the map. Deletes are queued
 * first: they must precede the deletion of any object they name (the kernel refuses to delete a
 * referenced object, EBUSY).
 */
export function planElements6(
  batch: NftBatch,
  table: string,
  kept: ReadonlyMap<string, string>,
  live: readonly PeerRef[],
  present: readonly SetElementAttributes[],
  setId?: number,
): Repair[] {
  const wanted = new Map<string, { name: string; peer: PeerRef }>();
  for (const peer of live) {
    const name = kept.get(peer.address);
    if (peer.address6 != null && name !== undefined) wanted.set(peer.address6, { name, peer });
  }
  const targets = elementTargets6(present);
  const stale = [...targets].filter(([address6, name]) => wanted.get(address6)?.name !== name);
  const missing = [...wanted].filter(([address6, want]) => targets.get(address6) !== want.name);
  const repairs: Repair[] = [];
  for (const [address6, name] of stale) {
    repairs.push({
      address: address6,
      found: `IPv6 element ${address6} → ${name ?? 'nothing'} in ${CAPS_MAP6}, not a live peer's cap`,
      done: 'removed the element',
    });
  }
  for (const [address6, { name, peer }] of missing) {
    repairs.push({
      address: peer.address,
      found: `quota ${name} without the element of ${address6} in ${CAPS_MAP6} (IPv6 not counted)`,
      done: 'added the element',
    });
  }
  for (const chunk of chunks(stale)) {
    batch.deleteSetElements(
      {
        table,
        set: CAPS_MAP6,
        elements: chunk.map(([a]) => ({ key: { value: ipv6ToBytes(a) } })),
      },
      `${chunk.length} element(s)`,
    );
  }
  for (const chunk of chunks(missing)) {
    batch.newSetElements(
      {
        table,
        set: CAPS_MAP6,
        setId,
        elements: chunk.map(([a, { name }]) => ({ key: { value: ipv6ToBytes(a) }, objref: name })),
      },
      `${chunk.length} element(s)`,
    );
  }
  return repairs;
}
