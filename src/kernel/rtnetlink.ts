/**
 * rtnetlink message types and family headers shared by links, addresses, routes and tc.
 * Source: /usr/include/linux/rtnetlink.h (RTM_*, struct rtmsg, struct tcmsg, RTA_*),
 * /usr/include/linux/if_link.h (IFLA_*), /usr/include/linux/if_addr.h (struct ifaddrmsg, IFA_*),
 * /usr/include/linux/if.h (IFF_UP), /usr/include/linux/socket.h (AF_*).
 */
import { struct } from '../netlink';

export const AF_UNSPEC = 0;
export const AF_INET = 2;
export const AF_INET6 = 10;

export const RTM_NEWLINK = 16;
export const RTM_DELLINK = 17;
export const RTM_GETLINK = 18;
export const RTM_NEWADDR = 20;
export const RTM_DELADDR = 21;
export const RTM_GETADDR = 22;
export const RTM_NEWROUTE = 24;
export const RTM_GETROUTE = 26;
export const RTM_NEWQDISC = 36;
export const RTM_DELQDISC = 37;
export const RTM_GETQDISC = 38;
export const RTM_NEWTCLASS = 40;
export const RTM_DELTCLASS = 41;
export const RTM_GETTCLASS = 42;
export const RTM_NEWTFILTER = 44;
export const RTM_DELTFILTER = 45;
export const RTM_GETTFILTER = 46;

export const IFF_UP = 0x1;

// enum IFLA_* (if_link.h)
export const IFLA_ADDRESS = 1;
export const IFLA_IFNAME = 3;
export const IFLA_MTU = 4;
export const IFLA_LINK = 5;
export const IFLA_OPERSTATE = 16;
export const IFLA_LINKINFO = 18;
// enum IFLA_INFO_* (if_link.h)
export const IFLA_INFO_KIND = 1;
export const IFLA_INFO_DATA = 2;

// enum IFA_* (if_addr.h)
export const IFA_ADDRESS = 1;
export const IFA_LOCAL = 2;
export const IFA_LABEL = 3;
/** IFA_F_NODAD (if_addr.h): no duplicate address detection, the address is usable at once. */
export const IFA_F_NODAD = 0x02;
/** RT_SCOPE_UNIVERSE (rtnetlink.h): global and unique-local addresses, not link-local ones. */
export const RT_SCOPE_UNIVERSE = 0;

// enum rtattr_type_t (rtnetlink.h)
export const RTA_DST = 1;
export const RTA_SRC = 2;
export const RTA_OIF = 4;
export const RTA_GATEWAY = 5;
export const RTA_PREFSRC = 7;
export const RTA_TABLE = 15;

/** struct ifinfomsg (16 bytes). */
export const ifinfomsg = struct('ifinfomsg', {
  family: 'u8',
  pad: 'u8',
  type: 'u16',
  index: 's32',
  flags: 'u32',
  change: 'u32',
});

/** struct ifaddrmsg (8 bytes). */
export const ifaddrmsg = struct('ifaddrmsg', {
  family: 'u8',
  prefixlen: 'u8',
  flags: 'u8',
  scope: 'u8',
  index: 'u32',
});

/** struct rtmsg (12 bytes). */
export const rtmsg = struct('rtmsg', {
  family: 'u8',
  dstLen: 'u8',
  srcLen: 'u8',
  tos: 'u8',
  table: 'u8',
  protocol: 'u8',
  scope: 'u8',
  type: 'u8',
  flags: 'u32',
});

/** struct tcmsg (20 bytes). `info` of a filter is (prio << 16) | htons(protocol). */
export const tcmsg = struct('tcmsg', {
  family: 'u8',
  pad1: 'u8',
  pad2: 'u16',
  ifindex: 's32',
  handle: 'u32',
  parent: 'u32',
  info: 'u32',
});
