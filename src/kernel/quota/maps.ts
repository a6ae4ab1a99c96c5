/**
 * The object maps of a caps table: from a peer's address to its quota object, `caps` for IPv4
 * (4-byte keys) and, on a dual-stack interface's `inet` table, `caps6` for IPv6 (16-byte keys),
 * how they are written and how a map read back is recognized as ours.
 */
import type { SetAttributes } from '../nftables/client';
import {
  NFTNL_UDATA_SET_KEYBYTEORDER,
  NFT_BYTEORDER_BIG_ENDIAN,
  NFT_DATATYPE_IP6ADDR,
  NFT_DATATYPE_IPADDR,
  NFT_OBJECT_QUOTA,
  NFT_SET_OBJECT,
} from '../nftables/constants';
import { encodeUserdata, u32Tlv } from '../nftables/userdata';
import { CAPS_MAP, CAPS_MAP6 } from './naming';

/** An object map from addresses (keyLen bytes, nft key type keyType) to quota objects. */
export function quotaMap(
  table: string,
  name: string,
  keyType: number,
  keyLen: number,
  id?: number,
): SetAttributes {
  return {
    table,
    name,
    flags: NFT_SET_OBJECT,
    keyType,
    keyLen,
    objType: NFT_OBJECT_QUOTA,
    id,
    // What nft stores for an ipv4_addr or ipv6_addr key, so that `nft list` prints addresses.
    userdata: encodeUserdata([u32Tlv(NFTNL_UDATA_SET_KEYBYTEORDER, NFT_BYTEORDER_BIG_ENDIAN)]),
  };
}

/** Whether a map is an object map of keyLen-byte keys to quota objects. */
export function isQuotaMap(set: SetAttributes, keyLen: number): boolean {
  return set.flags === NFT_SET_OBJECT && set.keyLen === keyLen && set.objType === NFT_OBJECT_QUOTA;
}

export function capsMap(table: string, id?: number): SetAttributes {
  return quotaMap(table, CAPS_MAP, NFT_DATATYPE_IPADDR, 4, id);
}

export function isCapsMap(set: SetAttributes): boolean {
  return isQuotaMap(set, 4);
}

/** The map caps6: IPv6 address (16 bytes) → quota object. */
export function capsMap6(table: string, id?: number): SetAttributes {
  return quotaMap(table, CAPS_MAP6, NFT_DATATYPE_IP6ADDR, 16, id);
}

export function isCapsMap6(set: SetAttributes): boolean {
  return isQuotaMap(set, 16);
}
