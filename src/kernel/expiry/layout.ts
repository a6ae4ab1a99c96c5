/**
 * The nf_tables objects of peer expiry (issue 31): names, sets, chains, rules and elements, each
 * as the kernel is sent it; src/kernel/expiry/index.ts reads and changes them. Contract: for
 * interface wg0, the table `ip wg_peerd_expiry_wg0` (and, for dual-stack peers, its `ip6` twin
 * of the same layout keyed by the /128) holds
 *
 *   table ip wg_peerd_expiry_wg0 {
 *     comment "wg-peerd: expiry of the peers of wg0; managed by wg-peerd, edits are undone"
 *     set expiring { type ipv4_addr; elements = { 10.8.0.2 comment "expires 2026-12-01T00:00:00.000Z" } }
 *     set valid { type ipv4_addr; flags timeout; elements = { 10.8.0.2 timeout 2d expires 1d23h… } }
 *     chain from_peers {
 *       type filter hook prerouting priority filter - 10; policy accept;
 *       iifname "wg0" ip saddr @expiring ip saddr != @valid drop
 *     }
 *     chain to_peers {
 *       type filter hook postrouting priority filter - 10; policy accept;
 *       oifname "wg0" ip daddr @expiring ip daddr != @valid drop
 *     }
 *   }
 *
 * - `expiring`: every peer with an expiry, whether it has passed or not. Its element's userdata
 *   (NFTA_SET_ELEM_USERDATA, libnftnl's TLVs as the names set's, src/kernel/names) holds a
 *   comment nft prints, the owner's raw public key (OWNER_TLV, as the names set) and the instant
 *   of the expiry (EXPIRES_TLV: ms since the epoch, u64 big-endian), so the kernel alone says
 *   who expires when: a restart without a state directory reads it back.
 * - `valid` (NFT_SET_TIMEOUT): the peers whose expiry has not passed, each element with the
 *   timeout `expiresAt - now` in ms (NFTA_SET_ELEM_TIMEOUT, NLA_U64). When it ends the kernel
 *   stops matching the element (nft_set_elem_expired) and its garbage collection removes it; no
 *   process takes part, so the expiry holds whether or not the daemon runs.
 * - The rules drop a packet of a peer in `expiring` and not in `valid` (NFTA_LOOKUP_FLAGS =
 *   NFT_LOOKUP_F_INV for `!= @valid`), in both directions, every packet looked up (nothing is
 *   remembered per connection, so a live session stops too). The expressions are nft's own for
 *   that rule, payload reloaded before the second lookup (`nft --debug=netlink`, nft 1.0.6).
 *   Hooks and interface matches are the caps' and the suspensions' (src/kernel/quota/skeleton.ts),
 *   at priority filter - 10 as the suspensions' (src/kernel/suspension).
 *
 * The kernel's bound on a timeout (net/netfilter/nf_tables_api.c, nf_msecs_to_jiffies64): a
 * value of U64_MAX / NSEC_PER_MSEC ms or more is ERANGE, so at most TIMEOUT_MAX_MS ms (about
 * 584 years) fit, and the domain refuses an expiry further ahead. The timeout counts jiffies,
 * which do not advance while the host is suspended: a host that sleeps moves its peers' expiries
 * later by the time it slept (the daemon's reads see it: ./index.ts, `listValid`).
 *
 * Numbers: /usr/include/linux/netfilter/nf_tables.h (NFTA_SET_ELEM_TIMEOUT 4,
 * NFTA_SET_ELEM_EXPIRATION 5, NFTA_LOOKUP_FLAGS 5, NFT_LOOKUP_F_INV 1, NFT_SET_TIMEOUT 0x10);
 * see ../nftables/constants.ts.
 */
import { bytesToIpv4, ipv4ToBytes } from '../ipv4';
import { bytesToIpv6, ipv6ToBytes } from '../ipv6';
import type { NftBatch, SetAttributes, SetElementAttributes } from '../nftables/client';
import {
  NFPROTO_IPV4,
  NFPROTO_IPV6,
  NFTNL_UDATA_COMMENT,
  NFTNL_UDATA_SET_KEYBYTEORDER,
  NFT_BYTEORDER_BIG_ENDIAN,
  NFT_DATATYPE_IP6ADDR,
  NFT_DATATYPE_IPADDR,
  NFT_PAYLOAD_NETWORK_HEADER,
  NFT_REG_1,
  NFT_SET_TIMEOUT,
  NF_DROP,
} from '../nftables/constants';
import {
  type Expression,
  lookupNotInSet,
  lookupSet,
  payloadLoad,
  verdict,
} from '../nftables/expressions';
import { commentUserdata, decodeUserdata, encodeUserdata, u32Tlv } from '../nftables/userdata';
import { IPV6_DADDR_OFFSET, IPV6_SADDR_OFFSET } from '../quota/dual-stack';
import { type ChainSpec, quotaTableName } from '../quota/naming';
import { dropChainSpecs, peerAddressMatch, writeDropChain } from '../quota/skeleton';
import { PRIORITY_SUSPENSION } from '../suspension';

/** Every peer with an expiry. */
export const EXPIRING_SET = 'expiring';
/** The peers whose expiry has not passed: elements with a timeout. */
export const VALID_SET = 'valid';
/** Before the data caps' chains, as the suspensions' (filter - 10). */
export const PRIORITY_EXPIRY = PRIORITY_SUSPENSION;
/** The TLV type of the owner's raw public key (as the names set's OWNER_TLV). */
export const OWNER_TLV = 0xf0;
/** The TLV type of the expiry instant: ms since the epoch, u64 big-endian. */
export const EXPIRES_TLV = 0xf1;
/**
 * The longest timeout the kernel takes: nf_msecs_to_jiffies64 refuses `ms >= U64_MAX /
 * NSEC_PER_MSEC` (18,446,744,073,709) with ERANGE, so this is the last value it accepts
 * (about 584.5 years).
 */
export const TIMEOUT_MAX_MS = 18_446_744_073_708;
const KEY_BYTES = 32;

/** `wg_peerd_expiry_<ifname>` (the name of both tables). */
export function expiryTableName(ifname: string): string {
  quotaTableName(ifname); // the same check of the interface name
  return `wg_peerd_expiry_${ifname}`;
}

/** What differs between the ip and the ip6 table. */
export interface Flavour {
  family: number;
  version: 4 | 6;
  keyType: number;
  keyLen: 4 | 16;
  offsets: { from_peers: number; to_peers: number };
  /** NFTA_SET_ID of `expiring` and `valid` when a batch creates them (distinct per batch). */
  ids: { expiring: number; valid: number };
  toBytes(address: string): Buffer;
  fromBytes(key: Buffer): string;
}

export const V4: Flavour = {
  family: NFPROTO_IPV4,
  version: 4,
  keyType: NFT_DATATYPE_IPADDR,
  keyLen: 4,
  offsets: { from_peers: 12, to_peers: 16 },
  ids: { expiring: 1, valid: 2 },
  toBytes: ipv4ToBytes,
  fromBytes: bytesToIpv4,
};

export const V6: Flavour = {
  family: NFPROTO_IPV6,
  version: 6,
  keyType: NFT_DATATYPE_IP6ADDR,
  keyLen: 16,
  offsets: { from_peers: IPV6_SADDR_OFFSET, to_peers: IPV6_DADDR_OFFSET },
  ids: { expiring: 3, valid: 4 },
  toBytes: ipv6ToBytes,
  fromBytes: bytesToIpv6,
};

/** The caps' hooks and interface matches, with this table's offsets and comments. */
export function chainSpecs(ifname: string, flavour: Flavour): ChainSpec[] {
  return dropChainSpecs(ifname, flavour.offsets, 'expired');
}

/** meta i/oifname == ifname, address @expiring, address != @valid → drop (nft's expressions). */
export function ruleExpressions(
  ifname: string,
  spec: ChainSpec,
  flavour: Flavour,
  made = false,
): Expression[] {
  return [
    ...peerAddressMatch(ifname, spec, flavour.keyLen),
    lookupSet(NFT_REG_1, EXPIRING_SET, made ? flavour.ids.expiring : undefined),
    payloadLoad(NFT_PAYLOAD_NETWORK_HEADER, spec.addressOffset, flavour.keyLen, NFT_REG_1),
    lookupNotInSet(NFT_REG_1, VALID_SET, made ? flavour.ids.valid : undefined),
    verdict(NF_DROP),
  ];
}

/** The set `expiring` or `valid` of a table. */
export function expirySet(
  table: string,
  flavour: Flavour,
  which: 'expiring' | 'valid',
  made = false,
): SetAttributes {
  return {
    table,
    name: which === 'expiring' ? EXPIRING_SET : VALID_SET,
    ...(which === 'valid' ? { flags: NFT_SET_TIMEOUT } : {}),
    keyType: flavour.keyType,
    keyLen: flavour.keyLen,
    id: made ? flavour.ids[which] : undefined,
    // What nft stores for an ipv4_addr or ipv6_addr key, so that `nft list` prints addresses.
    userdata: encodeUserdata([u32Tlv(NFTNL_UDATA_SET_KEYBYTEORDER, NFT_BYTEORDER_BIG_ENDIAN)]),
  };
}

/** Whether a set read back is the one expirySet makes. */
export function isExpirySet(
  set: SetAttributes | null,
  flavour: Flavour,
  which: 'expiring' | 'valid',
): boolean {
  const flags = which === 'valid' ? NFT_SET_TIMEOUT : 0;
  return set !== null && (set.flags ?? 0) === flags && set.keyLen === flavour.keyLen;
}

/** A peer's expiry as one table holds it: its address (of the table's family), owner, instant. */
export interface ExpiryEntry {
  address: string;
  publicKey: string;
  /** ms since the epoch. */
  expiresAt: number;
}

/** The element of `expiring`: key, and userdata naming the owner and the instant. */
export function expiringElement(flavour: Flavour, entry: ExpiryEntry): SetElementAttributes {
  const at = Buffer.alloc(8);
  at.writeBigUInt64BE(BigInt(entry.expiresAt));
  return {
    key: { value: flavour.toBytes(entry.address) },
    userdata: encodeUserdata([
      {
        type: NFTNL_UDATA_COMMENT,
        value: Buffer.from(`expires ${new Date(entry.expiresAt).toISOString()}\0`, 'utf8'),
      },
      { type: OWNER_TLV, value: Buffer.from(entry.publicKey, 'base64') },
      { type: EXPIRES_TLV, value: at },
    ]),
  };
}

/** The owner and instant an `expiring` element carries; null for one not written so. */
export function readExpiringElement(
  flavour: Flavour,
  element: SetElementAttributes,
): ExpiryEntry | null {
  const key = element.key?.value;
  if (key?.length !== flavour.keyLen || element.userdata === undefined) return null;
  const tlvs = decodeUserdata(element.userdata);
  const owner = tlvs.find((t) => t.type === OWNER_TLV)?.value;
  const at = tlvs.find((t) => t.type === EXPIRES_TLV)?.value;
  if (owner?.length !== KEY_BYTES || at?.length !== 8) return null;
  const expiresAt = Number(at.readBigUInt64BE());
  if (!Number.isSafeInteger(expiresAt)) return null;
  return { address: flavour.fromBytes(key), publicKey: owner.toString('base64'), expiresAt };
}

/**
 * The element of `valid` for an expiry `remainingMs` ahead (at most TIMEOUT_MAX_MS); null when
 * it has passed (no element: the peer is expired at once).
 */
export function validElement(
  flavour: Flavour,
  address: string,
  remainingMs: number,
): SetElementAttributes | null {
  if (remainingMs < 1) return null;
  return {
    key: { value: flavour.toBytes(address) },
    timeout: BigInt(Math.min(Math.ceil(remainingMs), TIMEOUT_MAX_MS)),
  };
}

/**
 * Queues the whole table of one family with these expiries (the first expiry, or a rebuild):
 * table, both sets, both chains with their rule, the elements (a passed expiry has none in
 * `valid`).
 */
export function writeTable(
  batch: NftBatch,
  flavour: Flavour,
  ifname: string,
  entries: readonly ExpiryEntry[],
  now: number,
): void {
  const table = expiryTableName(ifname);
  batch.newTable({
    name: table,
    flags: 0,
    userdata: commentUserdata(
      flavour.version === 4
        ? `wg-peerd: expiry of the peers of ${ifname}; managed by wg-peerd, edits are undone`
        : `wg-peerd: expiry of the IPv6 addresses of the peers of ${ifname}; managed by wg-peerd, edits are undone`,
    ),
  });
  batch.newSet(expirySet(table, flavour, 'expiring', true));
  batch.newSet(expirySet(table, flavour, 'valid', true));
  for (const spec of chainSpecs(ifname, flavour)) {
    writeDropChain(
      batch,
      table,
      spec,
      PRIORITY_EXPIRY,
      ruleExpressions(ifname, spec, flavour, true),
    );
  }
  for (const part of inMessages(entries)) {
    batch.newSetElements(
      {
        table,
        set: EXPIRING_SET,
        setId: flavour.ids.expiring,
        elements: part.map((e) => expiringElement(flavour, e)),
      },
      `${part.length} expiry(ies)`,
    );
  }
  const valid = entries.flatMap((e) => {
    const element = validElement(flavour, e.address, e.expiresAt - now);
    return element === null ? [] : [element];
  });
  for (const part of inMessages(valid)) {
    batch.newSetElements(
      { table, set: VALID_SET, setId: flavour.ids.valid, elements: part },
      `${part.length} timeout(s)`,
    );
  }
}

/**
 * Elements per NEWSETELEM message: the list is one attribute whose length is a u16; an
 * `expiring` element takes at most ~120 bytes (key, comment, owner, instant, nest headers).
 */
const ELEMENTS_PER_MESSAGE = 400;

export function inMessages<T>(list: readonly T[]): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < list.length; i += ELEMENTS_PER_MESSAGE) {
    out.push(list.slice(i, i + ELEMENTS_PER_MESSAGE));
  }
  return out;
}
