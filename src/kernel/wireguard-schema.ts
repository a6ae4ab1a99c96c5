/**
 * WireGuard's generic-netlink interface as attribute tables.
 * Source: /usr/include/linux/wireguard.h (enum wg_cmd, wgdevice_*, wgpeer_*, wgallowedip_*),
 * /usr/include/linux/time_types.h (struct __kernel_timespec), /usr/include/linux/in.h and in6.h
 * (struct sockaddr_in, sockaddr_in6).
 */
import {
  type Codec,
  NetlinkProtocolError,
  bytes,
  fixedBytes,
  list,
  nested,
  schema,
  string,
  struct,
  u16,
  u32,
  u64,
  u8,
} from '../netlink';
import { AF_INET, AF_INET6 } from './rtnetlink';

export const WG_GENL_NAME = 'wireguard';
export const WG_KEY_LEN = 32;

export const WG_CMD_GET_DEVICE = 0;
export const WG_CMD_SET_DEVICE = 1;

export const WGDEVICE_F_REPLACE_PEERS = 1 << 0;

export const WGDEVICE_A_IFINDEX = 1;
export const WGDEVICE_A_IFNAME = 2;
export const WGDEVICE_A_PRIVATE_KEY = 3;
export const WGDEVICE_A_PUBLIC_KEY = 4;
export const WGDEVICE_A_FLAGS = 5;
export const WGDEVICE_A_LISTEN_PORT = 6;
export const WGDEVICE_A_FWMARK = 7;
export const WGDEVICE_A_PEERS = 8;

export const WGPEER_F_REMOVE_ME = 1 << 0;
export const WGPEER_F_REPLACE_ALLOWEDIPS = 1 << 1;
export const WGPEER_F_UPDATE_ONLY = 1 << 2;

export const WGPEER_A_PUBLIC_KEY = 1;
export const WGPEER_A_PRESHARED_KEY = 2;
export const WGPEER_A_FLAGS = 3;
export const WGPEER_A_ENDPOINT = 4;
export const WGPEER_A_PERSISTENT_KEEPALIVE_INTERVAL = 5;
export const WGPEER_A_LAST_HANDSHAKE_TIME = 6;
export const WGPEER_A_RX_BYTES = 7;
export const WGPEER_A_TX_BYTES = 8;
export const WGPEER_A_ALLOWEDIPS = 9;
export const WGPEER_A_PROTOCOL_VERSION = 10;

export const WGALLOWEDIP_A_FAMILY = 1;
export const WGALLOWEDIP_A_IPADDR = 2;
export const WGALLOWEDIP_A_CIDR_MASK = 3;

/** struct __kernel_timespec: always 16 bytes, whatever the architecture. */
export const kernelTimespec = struct('__kernel_timespec', { sec: 's64', nsec: 's64' });

/** sockaddr_in (16 bytes) or sockaddr_in6 (28 bytes) as text: "1.2.3.4:51820", "[::1]:51820". */
export const endpoint: Codec<string> = {
  nested: false,
  encode(value) {
    const match = /^\[(.+)\]:(\d+)$/.exec(value) ?? /^([^:]+):(\d+)$/.exec(value);
    if (!match) throw new NetlinkProtocolError(`not an endpoint: ${value}`);
    const [, host, port] = match;
    if (host.includes(':')) {
      const buffer = Buffer.alloc(28);
      buffer.writeUInt16LE(AF_INET6, 0);
      buffer.writeUInt16BE(Number(port), 2);
      ipv6ToBytes(host).copy(buffer, 8);
      return buffer;
    }
    const buffer = Buffer.alloc(16);
    buffer.writeUInt16LE(AF_INET, 0);
    buffer.writeUInt16BE(Number(port), 2);
    Buffer.from(host.split('.').map(Number)).copy(buffer, 4);
    return buffer;
  },
  decode(data, where) {
    if (data.length < 2)
      throw new NetlinkProtocolError(`${where}: sockaddr shorter than its family`);
    const family = data.readUInt16LE(0);
    if (family === AF_INET && data.length >= 16) {
      return `${data[4]}.${data[5]}.${data[6]}.${data[7]}:${data.readUInt16BE(2)}`;
    }
    if (family === AF_INET6 && data.length >= 28) {
      return `[${bytesToIpv6(data.subarray(8, 24))}]:${data.readUInt16BE(2)}`;
    }
    throw new NetlinkProtocolError(
      `${where}: unsupported sockaddr (family ${family}, ${data.length} bytes)`,
    );
  },
};

export const allowedIpAttributes = schema({
  family: { type: WGALLOWEDIP_A_FAMILY, codec: u16 },
  address: { type: WGALLOWEDIP_A_IPADDR, codec: bytes },
  cidr: { type: WGALLOWEDIP_A_CIDR_MASK, codec: u8 },
});

/** A peer as WG_CMD_GET_DEVICE reports it and WG_CMD_SET_DEVICE takes it. */
export const peerAttributes = schema({
  publicKey: { type: WGPEER_A_PUBLIC_KEY, codec: fixedBytes(WG_KEY_LEN) },
  flags: { type: WGPEER_A_FLAGS, codec: u32 },
  endpoint: { type: WGPEER_A_ENDPOINT, codec: endpoint },
  persistentKeepalive: { type: WGPEER_A_PERSISTENT_KEEPALIVE_INTERVAL, codec: u16 },
  lastHandshake: { type: WGPEER_A_LAST_HANDSHAKE_TIME, codec: kernelTimespec },
  rxBytes: { type: WGPEER_A_RX_BYTES, codec: u64 },
  txBytes: { type: WGPEER_A_TX_BYTES, codec: u64 },
  allowedIps: { type: WGPEER_A_ALLOWEDIPS, codec: list(nested(allowedIpAttributes)) },
  protocolVersion: { type: WGPEER_A_PROTOCOL_VERSION, codec: u32 },
});

/**
 * The device as read. WGDEVICE_A_PRIVATE_KEY is deliberately absent: the decoder skips
 * attributes it does not know, so the device's private key is never held in a JS object.
 * (Peers' preshared keys are likewise left out.)
 */
export const deviceReadAttributes = schema({
  ifindex: { type: WGDEVICE_A_IFINDEX, codec: u32 },
  ifname: { type: WGDEVICE_A_IFNAME, codec: string },
  publicKey: { type: WGDEVICE_A_PUBLIC_KEY, codec: fixedBytes(WG_KEY_LEN) },
  listenPort: { type: WGDEVICE_A_LISTEN_PORT, codec: u16 },
  fwmark: { type: WGDEVICE_A_FWMARK, codec: u32 },
  peers: { type: WGDEVICE_A_PEERS, codec: list(nested(peerAttributes)) },
});

/** The device as written by WG_CMD_SET_DEVICE. */
export const deviceWriteAttributes = schema({
  ifname: { type: WGDEVICE_A_IFNAME, codec: string },
  privateKey: { type: WGDEVICE_A_PRIVATE_KEY, codec: fixedBytes(WG_KEY_LEN) },
  flags: { type: WGDEVICE_A_FLAGS, codec: u32 },
  listenPort: { type: WGDEVICE_A_LISTEN_PORT, codec: u16 },
  fwmark: { type: WGDEVICE_A_FWMARK, codec: u32 },
  peers: { type: WGDEVICE_A_PEERS, codec: list(nested(peerAttributes)) },
});

// IPv6 text conversion for endpoints and allowed IPs (node:net has no bytes↔text helpers).
export function ipv6ToBytes(text: string): Buffer {
  const [head, tail] = text.includes('::') ? text.split('::') : [text, undefined];
  const headGroups = head ? head.split(':') : [];
  const tailGroups = tail ? tail.split(':') : [];
  const missing = 8 - headGroups.length - tailGroups.length;
  if (missing < 0 || (tail === undefined && missing !== 0)) {
    throw new NetlinkProtocolError(`not an IPv6 address: ${text}`);
  }
  const groups = [...headGroups, ...Array<string>(missing).fill('0'), ...tailGroups];
  const buffer = Buffer.alloc(16);
  groups.forEach((group, index) => buffer.writeUInt16BE(parseInt(group, 16), index * 2));
  return buffer;
}

/** RFC 5952 text: lowercase, longest run of two or more zero groups compressed. */
export function bytesToIpv6(data: Buffer): string {
  const groups = Array.from({ length: 8 }, (_, index) => data.readUInt16BE(index * 2));
  let bestStart = -1;
  let bestLength = 1;
  for (let start = 0; start < 8;) {
    if (groups[start] !== 0) {
      start++;
      continue;
    }
    let end = start;
    while (end < 8 && groups[end] === 0) end++;
    if (end - start > bestLength) {
      bestStart = start;
      bestLength = end - start;
    }
    start = end;
  }
  const hex = groups.map((group) => group.toString(16));
  if (bestStart === -1) return hex.join(':');
  return `${hex.slice(0, bestStart).join(':')}::${hex.slice(bestStart + bestLength).join(':')}`;
}
