/**
 * rtnetlink links, addresses and routes: find an interface and its IPv4 and IPv6 addresses,
 * create a WireGuard (or IFB) interface, bring it up, and find the host's primary IPv4 address.
 */
import {
  NETLINK_ROUTE,
  NLM_F_CREATE,
  NLM_F_EXCL,
  NLM_F_REPLACE,
  NetlinkProtocolError,
  NetlinkSocket,
  type NetlinkMessage,
  type TransportFactory,
  bytes,
  decodeAttributes,
  encodeAttributes,
  nested,
  openNativeTransport,
  schema,
  string,
  u32,
} from '../netlink';
import {
  AF_INET,
  AF_INET6,
  IFA_ADDRESS,
  IFA_F_NODAD,
  IFA_LOCAL,
  IFF_UP,
  IFLA_IFNAME,
  IFLA_INFO_KIND,
  IFLA_LINKINFO,
  IFLA_MTU,
  RTA_DST,
  RTA_OIF,
  RTA_PREFSRC,
  RTA_TABLE,
  RTM_DELLINK,
  RTM_GETADDR,
  RTM_GETLINK,
  RTM_GETROUTE,
  RTM_NEWADDR,
  RTM_NEWLINK,
  RT_SCOPE_UNIVERSE,
  ifaddrmsg,
  ifinfomsg,
  rtmsg,
} from './rtnetlink';
import { bytesToIpv4, ipv4ToBytes } from './ipv4';
import { bytesToIpv6, ipv6ToBytes } from './ipv6';
import {
  FacilityUnavailableError,
  InterfaceMissingError,
  WIREGUARD_REMEDY,
  type Translate,
  atBoundary,
  errnoOf,
} from './errors';
import type { Ipv4Address, Ipv6Address, LinkApi, LinkInfo } from './types';

/** RT_TABLE_MAIN from rtnetlink.h. */
const RT_TABLE_MAIN = 254;
/** RT_SCOPE_HOST from rtnetlink.h: addresses such as 127.0.0.1 that never leave the host. */
const RT_SCOPE_HOST = 254;

const linkAttributes = schema({
  ifname: { type: IFLA_IFNAME, codec: string },
  mtu: { type: IFLA_MTU, codec: u32 },
  linkinfo: {
    type: IFLA_LINKINFO,
    codec: nested(schema({ kind: { type: IFLA_INFO_KIND, codec: string } })),
  },
});

const addressAttributes = schema({
  address: { type: IFA_ADDRESS, codec: bytes },
  local: { type: IFA_LOCAL, codec: bytes },
});

const routeAttributes = schema({
  dst: { type: RTA_DST, codec: bytes },
  oif: { type: RTA_OIF, codec: u32 },
  prefsrc: { type: RTA_PREFSRC, codec: bytes },
  table: { type: RTA_TABLE, codec: u32 },
});

export interface CreateLinkOptions {
  mtu?: number;
}

function parseLink(message: NetlinkMessage): LinkInfo {
  const header = ifinfomsg.decode(message.payload);
  const attributes = decodeAttributes(
    linkAttributes,
    message.payload.subarray(ifinfomsg.size),
    'ifinfomsg',
  );
  return {
    index: header.index,
    name: attributes.ifname ?? '',
    kind: attributes.linkinfo?.kind ?? null,
    up: (header.flags & IFF_UP) !== 0,
    mtu: attributes.mtu ?? 0,
  };
}

interface ParsedAddress extends Ipv4Address {
  index: number;
  scope: number;
}

function parseAddress(message: NetlinkMessage, family = AF_INET): ParsedAddress | null {
  const header = ifaddrmsg.decode(message.payload);
  if (header.family !== family) return null;
  const attributes = decodeAttributes(
    addressAttributes,
    message.payload.subarray(ifaddrmsg.size),
    'ifaddrmsg',
  );
  // IFA_LOCAL is the interface's own address; IFA_ADDRESS is the peer's on point-to-point links.
  // IPv6 addresses come as IFA_ADDRESS alone (IFA_LOCAL only with a peer address).
  const raw = attributes.local ?? attributes.address;
  const size = family === AF_INET ? 4 : 16;
  if (!raw || raw.length !== size) return null;
  return {
    index: header.index,
    scope: header.scope,
    address: size === 4 ? bytesToIpv4(raw) : bytesToIpv6(raw),
    prefixLength: header.prefixlen,
  };
}

/** ENODEV on a request by index: that link is gone (deleted since it was looked up). */
function missingIndex(index: number): Translate {
  return (error) =>
    error.code === 'ENODEV'
      ? new InterfaceMissingError(`with ifindex ${index}`, { cause: error })
      : undefined;
}

export class Links implements LinkApi {
  private readonly socket: NetlinkSocket;

  constructor(open: TransportFactory = openNativeTransport) {
    this.socket = new NetlinkSocket(open(NETLINK_ROUTE));
  }

  /** Throws InterfaceMissingError when there is no link of that name (ENODEV). */
  async getLink(name: string): Promise<LinkInfo> {
    const replies = await atBoundary(
      () =>
        this.socket.request(
          RTM_GETLINK,
          Buffer.concat([ifinfomsg.encode({}), encodeAttributes(linkAttributes, { ifname: name })]),
          { operation: `RTM_GETLINK ${name}` },
        ),
      (error) =>
        error.code === 'ENODEV' ? new InterfaceMissingError(name, { cause: error }) : undefined,
    );
    const reply = replies.find((message) => message.type === RTM_NEWLINK);
    if (!reply) throw new NetlinkProtocolError(`RTM_GETLINK ${name}: the kernel sent no link`);
    return parseLink(reply);
  }

  getIpv4Addresses(index: number): Promise<Ipv4Address[]> {
    return this.readAddresses(index, AF_INET);
  }

  getIpv6Addresses(index: number): Promise<Ipv6Address[]> {
    return this.readAddresses(index, AF_INET6, RT_SCOPE_UNIVERSE);
  }

  /** The addresses of one family on the link, of one scope when `scope` is given. */
  private async readAddresses(
    index: number,
    family: number,
    scope?: number,
  ): Promise<Array<{ address: string; prefixLength: number }>> {
    // With NETLINK_GET_STRICT_CHK the kernel filters by index; older kernels ignore the filter,
    // so filter here too.
    const ipv = family === AF_INET ? '' : ' ipv6';
    const replies = await atBoundary(
      () =>
        this.socket.dump(RTM_GETADDR, ifaddrmsg.encode({ family, index }), {
          operation: `RTM_GETADDR${ipv} ifindex ${index}`,
        }),
      missingIndex(index),
    );
    return replies
      .map((message) => parseAddress(message, family))
      .filter(
        (address): address is ParsedAddress =>
          address !== null &&
          address.index === index &&
          (scope === undefined || address.scope === scope),
      )
      .map(({ address, prefixLength }) => ({ address, prefixLength }));
  }

  /** RTM_NEWLINK with CREATE|EXCL: an existing link of that name is EEXIST, never reused. */
  async createLink(name: string, kind: string, options: CreateLinkOptions = {}): Promise<number> {
    await atBoundary(() =>
      this.socket.request(
        RTM_NEWLINK,
        Buffer.concat([
          ifinfomsg.encode({}),
          encodeAttributes(linkAttributes, { ifname: name, mtu: options.mtu, linkinfo: { kind } }),
        ]),
        { operation: `RTM_NEWLINK ${name} type ${kind}`, flags: NLM_F_CREATE | NLM_F_EXCL },
      ),
    );
    return (await this.getLink(name)).index;
  }

  /**
   * The kernel loads wireguard.ko on demand (module alias rtnl-link-wireguard); a kernel
   * without it answers EOPNOTSUPP "Unknown device type". MTU 1420 as wg-quick uses: 1500 less
   * WireGuard's 80 bytes of IPv6 + UDP + header overhead.
   */
  async createWireGuard(name: string, options: CreateLinkOptions = {}): Promise<number> {
    try {
      return await this.createLink(name, 'wireguard', { mtu: options.mtu ?? 1420 });
    } catch (error) {
      if (errnoOf(error) === 'EOPNOTSUPP') {
        throw new FacilityUnavailableError('WireGuard (link kind "wireguard")', WIREGUARD_REMEDY, {
          cause: error,
        });
      }
      throw error;
    }
  }

  addIpv4Address(index: number, address: Ipv4Address): Promise<void> {
    return this.addAddress(index, AF_INET, ipv4ToBytes(address.address), address);
  }

  /**
   * IFA_F_NODAD: WireGuard links are IFF_NOARP, which skips duplicate address detection anyway
   * (net/ipv6/addrconf.c addrconf_dad_begin); the flag says so for any kernel.
   */
  addIpv6Address(index: number, address: Ipv6Address): Promise<void> {
    return this.addAddress(index, AF_INET6, ipv6ToBytes(address.address), address, IFA_F_NODAD);
  }

  private async addAddress(
    index: number,
    family: number,
    raw: Buffer,
    address: { address: string; prefixLength: number },
    flags = 0,
  ): Promise<void> {
    await atBoundary(
      () =>
        this.socket.request(
          RTM_NEWADDR,
          Buffer.concat([
            ifaddrmsg.encode({ family, prefixlen: address.prefixLength, flags, index }),
            encodeAttributes(addressAttributes, { local: raw, address: raw }),
          ]),
          {
            operation: `RTM_NEWADDR ${address.address}/${address.prefixLength} ifindex ${index}`,
            flags: NLM_F_CREATE | NLM_F_REPLACE,
          },
        ),
      missingIndex(index),
    );
  }

  async setUp(index: number): Promise<void> {
    await atBoundary(
      () =>
        this.socket.request(
          RTM_NEWLINK,
          ifinfomsg.encode({ index, flags: IFF_UP, change: IFF_UP }),
          {
            operation: `RTM_NEWLINK ifindex ${index} up`,
          },
        ),
      missingIndex(index),
    );
  }

  async deleteLink(index: number): Promise<void> {
    await atBoundary(
      () =>
        this.socket.request(RTM_DELLINK, ifinfomsg.encode({ index }), {
          operation: `RTM_DELLINK ifindex ${index}`,
        }),
      missingIndex(index),
    );
  }

  /**
   * The address a client would reach this host at: the preferred source of the main table's
   * default route, else the first address of the default route's interface, else the first
   * non-host-scope address of any interface. Read from the FIB and address list; nothing is sent.
   */
  primaryIpv4(): Promise<string | null> {
    return atBoundary(() => this.readPrimaryIpv4());
  }

  private async readPrimaryIpv4(): Promise<string | null> {
    const routes = await this.socket.dump(RTM_GETROUTE, rtmsg.encode({ family: AF_INET }), {
      operation: 'RTM_GETROUTE ipv4',
    });
    const defaults = routes
      .map((message) => ({
        header: rtmsg.decode(message.payload),
        attributes: decodeAttributes(
          routeAttributes,
          message.payload.subarray(rtmsg.size),
          'rtmsg',
        ),
      }))
      .filter(
        ({ header, attributes }) =>
          header.dstLen === 0 && (attributes.table ?? header.table) === RT_TABLE_MAIN,
      );
    for (const { attributes } of defaults) {
      if (attributes.prefsrc?.length === 4) return bytesToIpv4(attributes.prefsrc);
    }
    const addresses = (
      await this.socket.dump(RTM_GETADDR, ifaddrmsg.encode({ family: AF_INET }), {
        operation: 'RTM_GETADDR ipv4',
      })
    )
      .map((message) => parseAddress(message))
      .filter(
        (address): address is ParsedAddress => address !== null && address.scope !== RT_SCOPE_HOST,
      );
    const defaultOif = defaults.find(({ attributes }) => attributes.oif !== undefined)?.attributes
      .oif;
    const onDefault = addresses.find((address) => address.index === defaultOif);
    return (onDefault ?? addresses[0])?.address ?? null;
  }

  close(): void {
    this.socket.close();
  }
}
