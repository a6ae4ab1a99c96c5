/**
 * WireGuard's generic-netlink interface as attribute tables.
 * Source: /usr/include/linux/wireguard.h (enum wg_cmd, wgdevice_*, wgpeer_*, wgallowedip_*),
 * /usr/include/linux/time_types.h (struct __kernel_timespec), /usr/include/linux/in.h and in6.h
 * (struct sockaddr_in, sockaddr_in6).
 */
import {
  type Codec,
  NetlinkProtocolError,
  fixedBytes,
  fixedWidth,
  list,
  nested,
  schema,
  string,
  u16,
  u32,
  u8,
} from '../netlink';
import { bytesToIpv4, ipv4ToBytes } from './ipv4';
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

// Value codecs that decode straight into the domain's types. A 10,000-peer dump is about 100,000
// attributes, so each peer's key, handshake, counters and addresses become strings, Dates and
// numbers in one step, without an intermediate Buffer copy or BigInt.

/** A 32-byte Curve25519 key as standard base64 text; encoding rejects anything else. */
export const base64Key = fixedWidth<string>(
  WG_KEY_LEN,
  (buffer, value) => {
    const raw = Buffer.from(value, 'base64');
    if (raw.length !== WG_KEY_LEN || raw.toString('base64') !== value) {
      throw new TypeError(`not a base64 WireGuard key: ${value}`);
    }
    raw.copy(buffer);
  },
  (buffer, offset) => buffer.toString('base64', offset, offset + WG_KEY_LEN),
);

/**
 * WGPEER_A_LAST_HANDSHAKE_TIME: struct __kernel_timespec {s64 tv_sec; s64 tv_nsec} (always 16
 * bytes, time_types.h), wall clock; {0, 0} means there never was a handshake → null.
 * SET_DEVICE ignores it; encoding exists for symmetry and tests.
 */
export const handshakeTime = fixedWidth<Date | null>(
  16,
  (buffer, value) => {
    if (!value) return;
    const ms = value.getTime();
    buffer.writeBigInt64LE(BigInt(Math.floor(ms / 1000)), 0);
    buffer.writeBigInt64LE(BigInt((ms % 1000) * 1e6), 8);
  },
  (buffer, offset) => {
    const seconds = Number(buffer.readBigInt64LE(offset));
    const nanoseconds = Number(buffer.readBigInt64LE(offset + 8));
    if (seconds === 0 && nanoseconds === 0) return null;
    const date = new Date(seconds * 1000 + Math.floor(nanoseconds / 1e6));
    // Beyond what a Date holds (±8.64e15 ms): an Invalid Date would throw later in toISOString.
    if (Number.isNaN(date.getTime())) {
      throw new NetlinkProtocolError(
        `handshake time ${seconds} s ${nanoseconds} ns is out of range`,
      );
    }
    return date;
  },
);

/** A u64 byte counter as a JS number: exact below 2^53 bytes (8 PiB), which no counter reaches. */
export const counter = fixedWidth<number>(
  8,
  (buffer, value) => buffer.writeBigUInt64LE(BigInt(value)),
  (buffer, offset) => buffer.readUInt32LE(offset + 4) * 0x1_0000_0000 + buffer.readUInt32LE(offset),
);

/** WGALLOWEDIP_A_IPADDR: 4 or 16 network-order bytes as dotted IPv4 or RFC 5952 IPv6 text. */
export const ipAddress: Codec<string> = {
  nested: false,
  encode(value) {
    return value.includes(':') ? ipv6ToBytes(value) : ipv4ToBytes(value);
  },
  decode(data, where) {
    if (data.length === 4) return bytesToIpv4(data);
    if (data.length === 16) return bytesToIpv6(data);
    throw new NetlinkProtocolError(`${where}: an IP address is 4 or 16 bytes, got ${data.length}`);
  },
  decodeRange(buffer, start, end, where) {
    if (end - start === 4)
      return `${buffer[start]}.${buffer[start + 1]}.${buffer[start + 2]}.${buffer[start + 3]}`;
    return this.decode(buffer.subarray(start, end), where);
  },
};

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
    ipv4ToBytes(host).copy(buffer, 4);
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
  address: { type: WGALLOWEDIP_A_IPADDR, codec: ipAddress },
  cidr: { type: WGALLOWEDIP_A_CIDR_MASK, codec: u8 },
});

/** A peer as WG_CMD_GET_DEVICE reports it and WG_CMD_SET_DEVICE takes it. */
export const peerAttributes = schema({
  publicKey: { type: WGPEER_A_PUBLIC_KEY, codec: base64Key },
  flags: { type: WGPEER_A_FLAGS, codec: u32 },
  endpoint: { type: WGPEER_A_ENDPOINT, codec: endpoint },
  persistentKeepalive: { type: WGPEER_A_PERSISTENT_KEEPALIVE_INTERVAL, codec: u16 },
  lastHandshake: { type: WGPEER_A_LAST_HANDSHAKE_TIME, codec: handshakeTime },
  rxBytes: { type: WGPEER_A_RX_BYTES, codec: counter },
  txBytes: { type: WGPEER_A_TX_BYTES, codec: counter },
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
  publicKey: { type: WGDEVICE_A_PUBLIC_KEY, codec: base64Key },
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
