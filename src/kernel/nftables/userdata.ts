/**
 * Userdata of nf_tables tables, chains, rules, sets and objects. The kernel stores it opaquely
 * (NFTA_*_USERDATA, at most NFT_USERDATA_MAXLEN bytes); by convention it holds libnftnl's TLVs
 * {u8 type, u8 length, value}, and type 0 of a table, chain, rule or object is a NUL-terminated
 * comment that `nft list` prints as `comment "..."`. Set userdata numbers are host-order u32
 * (NFTNL_UDATA_SET_KEYBYTEORDER), as nft writes them.
 */
import { NetlinkProtocolError } from '../../netlink';
import { NFTNL_UDATA_COMMENT, NFT_USERDATA_MAXLEN } from './constants';

export interface UserdataTlv {
  type: number;
  value: Buffer;
}

export function encodeUserdata(tlvs: UserdataTlv[]): Buffer {
  let length = 0;
  for (const { type, value } of tlvs) {
    if (value.length > 0xff) {
      throw new NetlinkProtocolError(`userdata TLV ${type} is ${value.length} bytes; at most 255`);
    }
    length += 2 + value.length;
  }
  // One buffer, every byte written: {type u8, length u8, value} per TLV.
  const data = Buffer.allocUnsafe(length);
  let offset = 0;
  for (const { type, value } of tlvs) {
    data[offset] = type;
    data[offset + 1] = value.length;
    value.copy(data, offset + 2);
    offset += 2 + value.length;
  }
  if (data.length > NFT_USERDATA_MAXLEN) {
    throw new NetlinkProtocolError(
      `userdata is ${data.length} bytes; the kernel takes at most ${NFT_USERDATA_MAXLEN}`,
    );
  }
  return data;
}

/** Decodes TLVs; a truncated trailing TLV (not ours to judge) ends the walk. */
export function decodeUserdata(data: Buffer): UserdataTlv[] {
  const tlvs: UserdataTlv[] = [];
  let offset = 0;
  while (offset + 2 <= data.length) {
    const type = data[offset];
    const length = data[offset + 1];
    if (offset + 2 + length > data.length) break;
    tlvs.push({ type, value: Buffer.from(data.subarray(offset + 2, offset + 2 + length)) });
    offset += 2 + length;
  }
  return tlvs;
}

/** Userdata holding only a comment, as `nft add ... comment "text"` writes it. */
export function commentUserdata(comment: string): Buffer {
  return encodeUserdata([
    { type: NFTNL_UDATA_COMMENT, value: Buffer.from(`${comment}\0`, 'utf8') },
  ]);
}

/** The comment in userdata, or null when there is none. */
export function commentOf(userdata: Buffer | undefined): string | null {
  if (!userdata) return null;
  const tlv = decodeUserdata(userdata).find((entry) => entry.type === NFTNL_UDATA_COMMENT);
  if (!tlv) return null;
  const end = tlv.value.indexOf(0);
  return tlv.value.toString('utf8', 0, end === -1 ? tlv.value.length : end);
}

/** A host-order u32 TLV value, as libnftnl's nftnl_udata_put_u32 writes it. */
export function u32Tlv(type: number, value: number): UserdataTlv {
  const buffer = Buffer.alloc(4);
  buffer.writeUInt32LE(value);
  return { type, value: buffer };
}
