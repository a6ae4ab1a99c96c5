/**
 * Where everything of a peer's speed limit lives, derived from its tunnel address alone: the
 * handles, class ids, u32 tables and selectors of the layout described in ./index.ts, and the
 * subnet they are keyed on.
 */
import { SetupConflictError } from '../errors';
import { ipv4ToNumber, numberToIpv4, prefixMask } from '../ipv4';
import { ETH_P_IP, filterInfo, handle } from '../tc/tc';
import { TC_U32_TERMINAL, type U32Selector, matchKey, u32Handle } from '../tc/u32';

/** Priority of every u32 filter of ours; the protocol is IPv4 (peers have IPv4 /32s). */
export const FILTER_PRIORITY = 10;
export const FILTER_INFO = filterInfo(FILTER_PRIORITY, ETH_P_IP);
/** HTB qdisc 1: on both devices. */
export const QDISC = handle(1, 0);
/** The class every peer class hangs under. */
export const PARENT_CLASS = handle(1, 0xffff);
/** The ingress qdisc's fixed handle ffff: (sch_ingress). */
export const INGRESS = handle(0xffff, 0);
/** u32 table hashing the third octet. */
export const OCTET_TABLE = 0x100;
/** u32 tables hashing the last octet: 0x200 + the third octet. */
export const HOST_TABLE_BASE = 0x200;
/** Node id of every key node we create (node 0 names a table). */
export const NODE = 1;
/** Packets HTB's direct queue holds (unlimited traffic); the IFB's own default is only 32. */
export const DIRECT_QLEN = 1000;
/** Rate and ceil of 1:ffff, 8 Tbit/s: it must never be what limits a peer. */
export const PARENT_RATE = 1_000_000_000_000;
/** tc_htb_glob.rate2quantum, tc's default; unused since every class has its own quantum. */
export const R2Q = 10;
/** Byte offsets of the addresses in the IPv4 header. */
export const IPV4_SRC_OFFSET = 12;
export const IPV4_DST_OFFSET = 16;
/** Messages per datagram when many are sent at once (a /16's 513 tables and links, restores). */
export const BATCH_MESSAGES = 256;
/** IFNAMSIZ - 1. */
export const MAX_IFNAME = 15;

/** "ifb-<WireGuard interface>", cut to the 15 characters a link name may have. */
export function ifbNameFor(ifname: string): string {
  return `ifb-${ifname}`.slice(0, MAX_IFNAME);
}

/** 1:<low 16 bits of the address>. */
export function peerClassId(address: number): number {
  return handle(1, address & 0xffff);
}

export function hostTableOf(address: number): number {
  return HOST_TABLE_BASE + ((address >>> 8) & 0xff);
}

/** 2XX:YY:1 for a.b.X.Y. */
export function peerFilterHandle(address: number): number {
  return u32Handle(hostTableOf(address), address & 0xff, NODE);
}

export interface Subnet {
  network: number;
  prefixLength: number;
}

/** Subnets wider than /16 do not fit 16-bit class minors. */
export const WIDEST_PREFIX = 16;

export function formatSubnet(subnet: Subnet): string {
  return `${numberToIpv4(subnet.network)}/${subnet.prefixLength}`;
}

/**
 * Whether `address` can be a peer's: inside the subnet, and neither its first nor its last
 * address of the /16 (class minor 0 is no class, 0xffff is 1:ffff, the peers' parent).
 */
export function isPeerHost(subnet: Subnet, address: number): boolean {
  const host = address & 0xffff;
  return (
    (address & prefixMask(subnet.prefixLength)) >>> 0 === subnet.network &&
    host !== 0 &&
    host !== 0xffff
  );
}

/** Third octets the subnet spans: one for /24 and narrower, 256 for a /16. */
export function thirdOctets(subnet: Subnet): number[] {
  const first = (subnet.network >>> 8) & 0xff;
  const last = ((subnet.network | ~prefixMask(subnet.prefixLength)) >>> 8) & 0xff;
  const octets: number[] = [];
  for (let octet = first; octet <= last; octet++) octets.push(octet);
  return octets;
}

/** One direction: the device whose egress shapes it and where the peer's address sits. */
export interface Side {
  direction: 'download' | 'upload';
  ifname: string;
  ifindex: number;
  /** IPV4_DST_OFFSET on the WireGuard interface, IPV4_SRC_OFFSET on the IFB. */
  keyOffset: number;
}

/** root table → 100: on the subnet, hashed on the third octet. */
export function rootLinkSelector(keyOffset: number, subnet: Subnet): U32Selector {
  return {
    flags: 0,
    hoff: keyOffset,
    hmask: 0x0000ff00,
    keys: [matchKey(keyOffset, subnet.network, prefixMask(subnet.prefixLength))],
  };
}

/** 100:X → 2XX: on a.b.X.0/24, hashed on the last octet. */
export function octetLinkSelector(keyOffset: number, subnet: Subnet, octet: number): U32Selector {
  const network24 = ((subnet.network & 0xffff0000) | (octet << 8)) >>> 0;
  return {
    flags: 0,
    hoff: keyOffset,
    hmask: 0x000000ff,
    keys: [matchKey(keyOffset, network24, 0xffffff00)],
  };
}

/** The peer's own key node: its /32, terminal (the classid applies). */
export function peerSelector(keyOffset: number, address: number): U32Selector {
  return {
    flags: TC_U32_TERMINAL,
    hoff: 0,
    hmask: 0,
    keys: [matchKey(keyOffset, address, 0xffffffff)],
  };
}

/** Matches every packet; terminal, so its action runs. */
export const MATCH_ALL: U32Selector = {
  flags: TC_U32_TERMINAL,
  hoff: 0,
  hmask: 0,
  keys: [matchKey(0, 0, 0)],
};

/** The interface's first IPv4 address and prefix (the subnet peers get addresses from). */
export function subnetOf(
  ifname: string,
  addresses: Array<{ address: string; prefixLength: number }>,
): Subnet {
  const [first] = addresses;
  if (!first) {
    throw new SetupConflictError(
      `${ifname} has no IPv4 address; speed limits are keyed on peers' IPv4 tunnel addresses ` +
        `inside its subnet (add one: ip address add 10.8.0.1/24 dev ${ifname})`,
    );
  }
  if (first.prefixLength < WIDEST_PREFIX) {
    throw new SetupConflictError(
      `${ifname}'s subnet ${first.address}/${first.prefixLength} is wider than /${WIDEST_PREFIX}; ` +
        'per-peer speed limits need /16 or narrower (a tc class id has 16 bits for the peer)',
    );
  }
  const network = (ipv4ToNumber(first.address) & prefixMask(first.prefixLength)) >>> 0;
  return { network, prefixLength: first.prefixLength };
}

/** The download side: the WireGuard interface's egress, keyed on the destination. */
export function downloadSide(wg: { name: string; index: number }): Side {
  return { direction: 'download', ifname: wg.name, ifindex: wg.index, keyOffset: IPV4_DST_OFFSET };
}

/** The upload side: the IFB's egress, keyed on the source. */
export function uploadSide(ifb: { name: string; index: number }): Side {
  return { direction: 'upload', ifname: ifb.name, ifindex: ifb.index, keyOffset: IPV4_SRC_OFFSET };
}
