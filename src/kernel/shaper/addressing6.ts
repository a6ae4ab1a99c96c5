/**
 * Where a dual-stack peer's IPv6 filters live (issue 18), beside ./addressing.ts: the same HTB
 * class 1:<low 16 bits of the peer's IPv4 address> per direction is reached by a second u32
 * tree that matches IPv6 packets, so one `bytesPerSecond` holds for both families together.
 *
 *   root table (kernel-chosen id) of priority 11, protocol ipv6
 *     one key node: "addr in <shaped prefix>", hash on byte 14 of the address ─► table 300:
 *   table 300:, bucket X (one per value X of byte 14 the shaped prefix spans)
 *     one key node: "last word in ….X00/120", hash on byte 15 ─► table 4XX: (256 buckets)
 *   table 4XX:, bucket Y
 *     the peer's key node 4XX:Y:1, "last word = ….XY", classid 1:<IPv4 minor>, terminal
 *
 * so a packet visits at most three key nodes whatever the number of peers, as for IPv4. The
 * hash is on the last 32 bits of the /128 (u32 hashes one aligned 32-bit word: `hoff` must be a
 * multiple of 4, iproute2 tc/f_u32.c parse_hashkey). The shaped prefix is the interface's IPv6
 * prefix narrowed to at most its first 2^16 addresses (/112), which the daemon's lowest-free
 * allocation fills first: a peer's key node is then named by the last 16 bits of its address,
 * like an IPv4 peer's by the last 16 of its. A peer whose IPv6 address lies outside it (set by
 * other tools) is shaped on IPv4 only.
 *
 * Offsets in the IPv6 header (RFC 8200 §3; iproute2 tc/f_u32.c parse_ip6: "src" at 8, "dst" at
 * 24). Filters of another protocol need a priority of their own: one priority of a qdisc holds
 * one protocol (net/sched/cls_api.c tcf_chain_tp_find: "Filter with specified priority/protocol
 * not found" is EINVAL for a second protocol). u32 tables are shared by every u32 instance of a
 * qdisc (cls_u32.c tc_u_common), so the IPv6 tables take ids of their own (300:, 400:-4ff:).
 */
import { ipv6ToBigInt, prefixMask6 } from '../ipv6';
import { ETH_P_IPV6, filterInfo } from '../tc/tc';
import { TC_U32_TERMINAL, type U32Selector, matchKey, u32Handle } from '../tc/u32';
import { NODE, type Side } from './addressing';

/** Priority of every IPv6 u32 filter of ours (the IPv4 ones have 10). */
export const FILTER_PRIORITY6 = 11;
export const FILTER_INFO6 = filterInfo(FILTER_PRIORITY6, ETH_P_IPV6);
/** u32 table hashing byte 14 of the address. */
export const OCTET_TABLE6 = 0x300;
/** u32 tables hashing byte 15: 0x400 + byte 14. */
export const HOST_TABLE6_BASE = 0x400;
/** Byte offsets of the addresses in the IPv6 header. */
export const IPV6_SRC_OFFSET = 8;
export const IPV6_DST_OFFSET = 24;
/** The last 32-bit word of an address, the one hashed on, is 12 bytes into it. */
export const LAST_WORD = 12;
/** The widest shaped prefix: 2^16 addresses, named by their last 16 bits. */
export const WIDEST_SHAPED_PREFIX6 = 112;

/** The IPv6 addresses whose traffic the IPv6 tree classifies. */
export interface Prefix6 {
  network: bigint;
  prefixLength: number;
}

/**
 * The interface's prefix narrowed to its first 2^16 addresses (/112) when it is wider: the
 * first ones whatever the server's own address in it, since allocation starts at the bottom.
 */
export function shapedPrefix6(address: string, prefixLength: number): Prefix6 {
  const length = Math.max(prefixLength, WIDEST_SHAPED_PREFIX6);
  return { network: ipv6ToBigInt(address) & prefixMask6(prefixLength), prefixLength: length };
}

/** The 32-bit word `index` (0-3) of a 128-bit value. */
function word(value: bigint, index: number): number {
  return Number((value >> BigInt(96 - 32 * index)) & 0xffffffffn);
}

/** Whether `value` is a peer's: inside the shaped prefix, and not its first (anycast) address. */
export function isPeerHost6(prefix: Prefix6, value: bigint): boolean {
  return (value & prefixMask6(prefix.prefixLength)) === prefix.network && value !== prefix.network;
}

/** Byte 14 of the address: which 4XX: table its key node is in. */
function byte14(value: bigint): number {
  return Number((value >> 8n) & 0xffn);
}

export function hostTable6Of(value: bigint): number {
  return HOST_TABLE6_BASE + byte14(value);
}

/** 4XX:YY:1 for an address ending in XX YY. */
export function peerFilterHandle6(value: bigint): number {
  return u32Handle(hostTable6Of(value), Number(value & 0xffn), NODE);
}

/** The values of byte 14 the shaped prefix spans: 256 for a /112, one for a /120 or longer. */
export function octets6(prefix: Prefix6): number[] {
  const last = prefix.network | (~prefixMask6(prefix.prefixLength) & ((1n << 128n) - 1n));
  const octets: number[] = [];
  for (let octet = byte14(prefix.network); octet <= byte14(last); octet++) octets.push(octet);
  return octets;
}

/** root table → 300: on the shaped prefix (a key per word it covers), hashed on byte 14. */
export function rootLinkSelector6(keyOffset: number, prefix: Prefix6): U32Selector {
  const mask = prefixMask6(prefix.prefixLength);
  const keys = [0, 1, 2, 3]
    .filter((i) => word(mask, i) !== 0)
    .map((i) => matchKey(keyOffset + 4 * i, word(prefix.network, i), word(mask, i)));
  return { flags: 0, hoff: keyOffset + LAST_WORD, hmask: 0x0000ff00, keys };
}

/** 300:X → 4XX: on the /120 of byte 14 = X (the words before it were matched at the root). */
export function octetLinkSelector6(keyOffset: number, prefix: Prefix6, octet: number): U32Selector {
  const upper = word(prefix.network, 3) & 0xffff0000;
  return {
    flags: 0,
    hoff: keyOffset + LAST_WORD,
    hmask: 0x000000ff,
    keys: [matchKey(keyOffset + LAST_WORD, (upper | (octet << 8)) >>> 0, 0xffffff00)],
  };
}

/** The peer's own key node: the last word of its address, terminal (the classid applies). */
export function peerSelector6(keyOffset: number, value: bigint): U32Selector {
  return {
    flags: TC_U32_TERMINAL,
    hoff: 0,
    hmask: 0,
    keys: [matchKey(keyOffset + LAST_WORD, word(value, 3), 0xffffffff)],
  };
}

/** The IPv6 address a key node of table 4XX:, bucket YY, stands for in the shaped prefix. */
export function addressOfNode6(prefix: Prefix6, filterHandle: number): bigint {
  const table = (filterHandle >>> 20) & 0xfff;
  const bucket = (filterHandle >>> 12) & 0xff;
  const low = BigInt(((table - HOST_TABLE6_BASE) << 8) | bucket);
  return (prefix.network & ~0xffffn) | low;
}

/** The download side of the IPv6 tree: the WireGuard interface's egress, by destination. */
export function downloadSide6(wg: { name: string; index: number }): Side {
  return { direction: 'download', ifname: wg.name, ifindex: wg.index, keyOffset: IPV6_DST_OFFSET };
}

/** The upload side of the IPv6 tree: the IFB's egress, by source. */
export function uploadSide6(ifb: { name: string; index: number }): Side {
  return { direction: 'upload', ifname: ifb.name, ifindex: ifb.index, keyOffset: IPV6_SRC_OFFSET };
}
