/**
 * Names and numbers of the daemon's nf_tables objects: the table of an interface, the quota object
 * of an address (and back), the maps, the family, the chains.
 */
import { IFNAMSIZ, NFPROTO_IPV4 } from '../nftables/constants';
import { ipv4ToNumber } from '../ipv4';

/** The family of the daemon's tables. */
export const QUOTA_FAMILY = NFPROTO_IPV4;
/** Name of the object map from peer address to quota object. */
export const CAPS_MAP = 'caps';
/** NF_IP_PRI_FILTER (linux/netfilter_ipv4.h). */
export const PRIORITY_FILTER = 0;
/** NFTA_SET_ID of the map when a batch creates it, so the rules can refer to it. */
export const CAPS_MAP_ID = 1;
/** The map from a peer's IPv6 address to its (one) quota object. */
export const CAPS_MAP6 = 'caps6';
/** NFTA_SET_ID of caps6 when a batch creates it (caps has 1). */
export const CAPS_MAP6_ID = 2;
/** Offsets of the IPv4 source and destination addresses in the IPv4 header (RFC 791). */
export const IPV4_SADDR_OFFSET = 12;
export const IPV4_DADDR_OFFSET = 16;
/** Elements per NEWSETELEM message: ~44 bytes each keeps a message far below 64 KiB. */
export const ELEMENTS_PER_MESSAGE = 512;

/** Map elements in messages of at most ELEMENTS_PER_MESSAGE. */
export function chunks<T>(list: readonly T[]): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < list.length; i += ELEMENTS_PER_MESSAGE) {
    out.push(list.slice(i, i + ELEMENTS_PER_MESSAGE));
  }
  return out;
}
/** A quota object created and deleted in the set-up transaction, to probe for nft_quota. */
export const PROBE_OBJECT = 'wg_peerd_probe';
/** The object map of throttled caps' IPv4 addresses (address → quota; ./throttle.ts). */
export const THROTTLE_CAPS_MAP = 'throttle_caps';
/** Prefix of the userdata comment of a quota object; the peer's public key follows. */
export const OWNER_PREFIX = 'wg-peerd peer ';

/** The names quotaObjectName writes. */
const OBJECT_NAME = /^q_(\d{1,3})_(\d{1,3})_(\d{1,3})_(\d{1,3})$/;

/** `wg_peerd_<ifname>`: the table that holds everything of one interface. */
export function quotaTableName(ifname: string): string {
  if (ifname.length === 0 || ifname.length >= IFNAMSIZ || /[\s/:]/.test(ifname)) {
    throw new TypeError(`not an interface name: ${JSON.stringify(ifname)}`);
  }
  return `wg_peerd_${ifname}`;
}

/** `q_10_8_0_2`: the quota object of a peer address. */
export function quotaObjectName(address: string): string {
  return `q_${underscored(address)}`;
}

/** `tu_10_8_0_2` / `td_10_8_0_2`: the throttle limit object of an address, up or down. */
export function limitObjectName(address: string, direction: 'up' | 'down'): string {
  return `t${direction === 'up' ? 'u' : 'd'}_${underscored(address)}`;
}

/** "10.8.0.2" → "10_8_0_2" (the octets as parsed: the same text for any spelling ipv4ToNumber takes). */
function underscored(address: string): string {
  const n = ipv4ToNumber(address);
  return `${n >>> 24}_${(n >>> 16) & 255}_${(n >>> 8) & 255}_${n & 255}`;
}

/** The address a quota object name stands for, or null for a name that is not ours. */
export function addressOfObject(name: string): string | null {
  const match = OBJECT_NAME.exec(name);
  if (!match) return null;
  for (let i = 1; i <= 4; i++) {
    const octet = match[i];
    // Only the canonical spelling quotaObjectName writes: no leading zeros, at most 255.
    if ((octet.length > 1 && octet[0] === '0') || Number(octet) > 255) return null;
  }
  return `${match[1]}.${match[2]}.${match[3]}.${match[4]}`;
}

/** One of the two chains of a caps table (and of the tables that reuse their hooks). */
export interface ChainSpec {
  name: string;
  hooknum: number;
  /** Which interface name the rule matches: input (iifname) or output (oifname). */
  metaKey: number;
  /** Which IPv4 address is the peer's: source (from the peer) or destination (to it). */
  addressOffset: number;
  comment: string;
}
