/**
 * Traffic control over rtnetlink, the parts every qdisc, class and filter shares: handles, the
 * top-level TCA_* attributes after struct tcmsg, and one message encoder/decoder.
 *
 * Sources: /usr/include/linux/pkt_sched.h (TC_H_*), /usr/include/linux/rtnetlink.h (TCA_*,
 * struct tcmsg), /usr/include/linux/if_ether.h (ETH_P_IP, ETH_P_IPV6).
 */
import {
  AttributeWriter,
  type Attributes,
  type Codec,
  type NetlinkMessage,
  decodeAttributes,
  schema,
  string,
  u32,
} from '../../netlink';
import { AF_UNSPEC, tcmsg } from '../rtnetlink';

// pkt_sched.h
export const TC_H_MAJ_MASK = 0xffff0000;
export const TC_H_MIN_MASK = 0x0000ffff;
export const TC_H_ROOT = 0xffffffff;
export const TC_H_INGRESS = 0xfffffff1;

// if_ether.h
export const ETH_P_IP = 0x0800;
export const ETH_P_IPV6 = 0x86dd;

// enum TCA_* (rtnetlink.h)
export const TCA_KIND = 1;
export const TCA_OPTIONS = 2;
export const TCA_CHAIN = 11;

/** TC_H_MAKE(maj << 16, min): "1:2" is handle(1, 2). */
export function handle(major: number, minor: number): number {
  return (((major & 0xffff) << 16) | (minor & 0xffff)) >>> 0;
}

export function majorOf(h: number): number {
  return (h >>> 16) & 0xffff;
}

export function minorOf(h: number): number {
  return h & TC_H_MIN_MASK;
}

/** "1:ffff", as tc prints class and qdisc handles (hex, no leading zeros). */
export function formatHandle(h: number): string {
  return `${majorOf(h).toString(16)}:${minorOf(h).toString(16)}`;
}

/**
 * tcm_info of a filter: the priority in the upper 16 bits and the protocol in network byte
 * order in the lower 16 (what iproute2 writes as TC_H_MAKE(prio << 16, htons(protocol))).
 */
export function filterInfo(priority: number, protocol: number): number {
  const networkOrder = ((protocol & 0xff) << 8) | ((protocol >>> 8) & 0xff);
  return (((priority & 0xffff) << 16) | networkOrder) >>> 0;
}

/**
 * A nest whose content depends on a sibling attribute (TCA_OPTIONS on TCA_KIND, an action's
 * TCA_ACT_OPTIONS on its TCA_ACT_KIND): kept as bytes here and decoded with the kind's own table.
 * Decoding gives a view into the received message, not a copy (a 10,000-class dump decodes
 * 10,000 of them); callers decode it at once and keep only the values. Sent with NLA_F_NESTED
 * like every nest; the kernel's tc parsers (nla_parse_nested_deprecated) accept it either way.
 */
export const opaqueNest: Codec<Buffer> = {
  nested: true,
  write(writer, value) {
    writer.bytes(value);
  },
  decode(data) {
    return data;
  },
};

/** The attributes every tc message starts with; TCA_OPTIONS depends on TCA_KIND. */
export const tcAttributes = schema({
  kind: { type: TCA_KIND, codec: string },
  options: { type: TCA_OPTIONS, codec: opaqueNest },
  chain: { type: TCA_CHAIN, codec: u32 },
});

export interface TcHeader {
  ifindex: number;
  handle: number;
  parent: number;
  info?: number;
}

/** A qdisc, class or filter as a dump (or a get) returns it. */
export interface TcObject extends Required<TcHeader> {
  kind: string;
  /** The raw TCA_OPTIONS payload; decode it with the kind's table. */
  options: Buffer | undefined;
}

/**
 * struct tcmsg followed by `attributes`: TCA_KIND and the kind's TCA_OPTIONS, encoded with the
 * kind's own table (htb.ts, u32.ts).
 */
export function encodeTc(header: TcHeader, attributes?: Buffer): Buffer {
  const writer = new AttributeWriter(tcmsg.size + (attributes?.length ?? 0));
  tcmsg.write(writer, {
    family: AF_UNSPEC,
    ifindex: header.ifindex,
    handle: header.handle,
    parent: header.parent,
    info: header.info ?? 0,
  });
  if (attributes !== undefined) writer.bytes(attributes);
  return writer.toBuffer();
}

export function decodeTc(message: NetlinkMessage): TcObject {
  const header = tcmsg.decode(message.payload, 'tcmsg');
  const attributes: Attributes<typeof tcAttributes> = decodeAttributes(
    tcAttributes,
    message.payload.subarray(tcmsg.size),
    'tcmsg',
  );
  return {
    ifindex: header.ifindex,
    handle: header.handle,
    parent: header.parent,
    info: header.info,
    kind: attributes.kind ?? '',
    options: attributes.options,
  };
}
