/**
 * Netlink core numbers. Source: /usr/include/linux/netlink.h (NLM_F_*, NLMSG_*, NLMSGERR_ATTR_*,
 * NETLINK_* protocols and socket options), /usr/include/linux/genetlink.h (GENL_*, CTRL_*),
 * /usr/include/x86_64-linux-gnu/bits/socket.h (SOL_NETLINK) and asm-generic/socket.h (SO_*).
 */

// Protocols (socket(AF_NETLINK, SOCK_RAW, protocol)).
export const NETLINK_ROUTE = 0;
export const NETLINK_NETFILTER = 12;
export const NETLINK_GENERIC = 16;

// nlmsghdr.nlmsg_flags, common.
export const NLM_F_REQUEST = 0x01;
export const NLM_F_MULTI = 0x02;
export const NLM_F_ACK = 0x04;
export const NLM_F_ECHO = 0x08;
export const NLM_F_DUMP_INTR = 0x10;
export const NLM_F_DUMP_FILTERED = 0x20;
// Modifiers to GET requests.
export const NLM_F_ROOT = 0x100;
export const NLM_F_MATCH = 0x200;
export const NLM_F_ATOMIC = 0x400;
export const NLM_F_DUMP = NLM_F_ROOT | NLM_F_MATCH;
// Modifiers to NEW requests.
export const NLM_F_REPLACE = 0x100;
export const NLM_F_EXCL = 0x200;
export const NLM_F_CREATE = 0x400;
export const NLM_F_APPEND = 0x800;
// Flags of NLMSG_ERROR.
export const NLM_F_CAPPED = 0x100;
export const NLM_F_ACK_TLVS = 0x200;

// Control message types.
export const NLMSG_NOOP = 0x1;
export const NLMSG_ERROR = 0x2;
export const NLMSG_DONE = 0x3;
export const NLMSG_OVERRUN = 0x4;
export const NLMSG_MIN_TYPE = 0x10;

export const NLMSG_ALIGNTO = 4;
export const NLMSG_HDRLEN = 16;
export const NLA_HDRLEN = 4;

// nlattr.nla_type high bits.
export const NLA_F_NESTED = 1 << 15;
export const NLA_F_NET_BYTEORDER = 1 << 14;
export const NLA_TYPE_MASK = ~(NLA_F_NESTED | NLA_F_NET_BYTEORDER) & 0xffff;

// Extended ACK TLVs after an NLMSG_ERROR (enum nlmsgerr_attrs).
export const NLMSGERR_ATTR_MSG = 1;
export const NLMSGERR_ATTR_OFFS = 2;
export const NLMSGERR_ATTR_COOKIE = 3;
export const NLMSGERR_ATTR_POLICY = 4;
export const NLMSGERR_ATTR_MISS_TYPE = 5;
export const NLMSGERR_ATTR_MISS_NEST = 6;

// setsockopt(SOL_NETLINK, ...).
export const SOL_NETLINK = 270;
export const NETLINK_CAP_ACK = 10;
/** linux/netlink.h: join a multicast group (the value is the group number). */
export const NETLINK_ADD_MEMBERSHIP = 1;
export const NETLINK_EXT_ACK = 11;
export const NETLINK_GET_STRICT_CHK = 12;

// setsockopt(SOL_SOCKET, ...), asm-generic/socket.h.
export const SOL_SOCKET = 1;
export const SO_SNDBUF = 7;
export const SO_RCVBUF = 8;
export const SO_SNDBUFFORCE = 32;
export const SO_RCVBUFFORCE = 33;

// Generic netlink (genetlink.h).
export const GENL_HDRLEN = 4;
export const GENL_ID_CTRL = NLMSG_MIN_TYPE;
export const CTRL_CMD_GETFAMILY = 3;
export const CTRL_ATTR_FAMILY_ID = 1;
export const CTRL_ATTR_FAMILY_NAME = 2;
export const CTRL_ATTR_VERSION = 3;
export const CTRL_ATTR_HDRSIZE = 4;
export const CTRL_ATTR_MAXATTR = 5;

/** Rounds up to the 4-byte netlink alignment (NLMSG_ALIGN / NLA_ALIGN). */
export function align(length: number): number {
  return (length + NLMSG_ALIGNTO - 1) & ~(NLMSG_ALIGNTO - 1);
}
