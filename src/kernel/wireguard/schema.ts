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
} from '../../netlink';
import { ipv4ToBytes } from '../ipv4';
import { ipv6Text, ipv6ToBytes as addressBytes6 } from '../ipv6';
import { AF_INET, AF_INET6 } from '../rtnetlink';

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

// Value codecs that decode straight into the domain's types, in place (decodeRange). A
// 10,000-peer dump is about 100,000 attributes, so each peer's key, handshake, counters and
// addresses become strings, Dates and numbers in one step, without an intermediate Buffer copy
// or BigInt. The table codec (decodeAttributes over the tables below) and the dump decoder
// (./dump.ts) read every value through these same codecs.

/**
 * A key's base64 text. Buffer#base64Slice is what toString('base64', start, end) calls after
 * looking the encoding up (lib/buffer.js); called directly it saves that lookup per peer, a
 * tenth of a cold decode in the VM. Present on every Buffer since Node's first releases, but
 * not in the types: used when there, toString otherwise.
 */
type Base64Slice = (this: Buffer, start: number, end: number) => string;
const nativeBase64Slice = (Buffer.prototype as unknown as { base64Slice?: Base64Slice })
  .base64Slice;
const base64: (buffer: Buffer, start: number, end: number) => string =
  typeof nativeBase64Slice === 'function'
    ? (buffer, start, end) => nativeBase64Slice.call(buffer, start, end)
    : (buffer, start, end) => buffer.toString('base64', start, end);

/** A 32-byte Curve25519 key as standard base64 text; encoding rejects anything else. */
export const base64Key = fixedWidth<string>(
  WG_KEY_LEN,
  (buffer, offset, value) => {
    // Decoded straight into place, then read back: only the text of exactly 32 bytes (canonical
    // base64, padding included) gives itself again.
    const written = buffer.write(value, offset, WG_KEY_LEN, 'base64');
    if (written !== WG_KEY_LEN || base64(buffer, offset, offset + WG_KEY_LEN) !== value) {
      throw new TypeError(`not a base64 WireGuard key: ${value}`);
    }
  },
  (buffer, offset) => base64(buffer, offset, offset + WG_KEY_LEN),
);

/** An s64 as a number: two 32-bit reads while exact (|value| < 2^53), through BigInt beyond. */
function s64(buffer: Buffer, offset: number): number {
  const high = buffer.readInt32LE(offset + 4);
  if (high > 0x1fffff || high < -0x200000) return Number(buffer.readBigInt64LE(offset));
  return high * 0x1_0000_0000 + buffer.readUInt32LE(offset);
}

/**
 * WGPEER_A_LAST_HANDSHAKE_TIME: struct __kernel_timespec {s64 tv_sec; s64 tv_nsec} (always 16
 * bytes, time_types.h), wall clock; {0, 0} means there never was a handshake → null.
 * SET_DEVICE ignores it; encoding exists for symmetry and tests.
 */
export const handshakeTime = fixedWidth<Date | null>(
  16,
  (buffer, offset, value) => {
    if (!value) return;
    const ms = value.getTime();
    buffer.writeBigInt64LE(BigInt(Math.floor(ms / 1000)), offset);
    buffer.writeBigInt64LE(BigInt((ms % 1000) * 1e6), offset + 8);
  },
  (buffer, offset) => {
    const seconds = s64(buffer, offset);
    const nanoseconds = s64(buffer, offset + 8);
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
  (buffer, offset, value) => buffer.writeBigUInt64LE(BigInt(value), offset),
  (buffer, offset) => buffer.readUInt32LE(offset + 4) * 0x1_0000_0000 + buffer.readUInt32LE(offset),
);

/** "0" … "255": an IPv4 octet's text without a number-to-string conversion per octet. */
const DECIMAL: readonly string[] = Array.from({ length: 256 }, (_, value) => String(value));

/**
 * "a.b.c." by the first three octets: a tunnel's peers share a few /24s, so an address is one
 * concatenation of a known prefix and an octet instead of six (each a new string). Bounded: a
 * dump of arbitrary addresses would fill it with at most 2^24 short strings, so it is cleared
 * when it grows past what any tunnel needs.
 */
const DOTTED_PREFIX = new Map<number, string>();
const DOTTED_PREFIX_LIMIT = 65_536;

/** 4 address bytes at `start` as dotted text. */
function ipv4Text(buffer: Buffer, start: number): string {
  const key = (buffer[start]! << 16) | (buffer[start + 1]! << 8) | buffer[start + 2]!;
  let prefix = DOTTED_PREFIX.get(key);
  if (prefix === undefined) {
    if (DOTTED_PREFIX.size >= DOTTED_PREFIX_LIMIT) DOTTED_PREFIX.clear();
    prefix = `${DECIMAL[buffer[start]!]}.${DECIMAL[buffer[start + 1]!]}.${DECIMAL[buffer[start + 2]!]}.`;
    DOTTED_PREFIX.set(key, prefix);
  }
  return prefix + DECIMAL[buffer[start + 3]!]!;
}

/** RFC 5952 text of 16 address bytes (see ipv6Text). */
export function bytesToIpv6(data: Buffer): string {
  return ipv6Text(data, 0);
}

/** WGALLOWEDIP_A_IPADDR: 4 or 16 network-order bytes as dotted IPv4 or RFC 5952 IPv6 text. */
export const ipAddress: Codec<string> = {
  nested: false,
  write(writer, value) {
    writer.bytes(value.includes(':') ? ipv6ToBytes(value) : ipv4ToBytes(value));
  },
  decode(data, where) {
    return ipAddressText(data, 0, data.length, where);
  },
  decodeRange: ipAddressText,
};

export function ipAddressText(buffer: Buffer, start: number, end: number, where: string): string {
  if (end - start === 4) return ipv4Text(buffer, start);
  if (end - start === 16) return ipv6Text(buffer, start);
  throw new NetlinkProtocolError(`${where}: an IP address is 4 or 16 bytes, got ${end - start}`);
}

/** sockaddr_in (16 bytes) or sockaddr_in6 (28 bytes) as text: "1.2.3.4:51820", "[::1]:51820". */
export const endpoint: Codec<string> = {
  nested: false,
  write(writer, value) {
    const match = /^\[(.+)\]:(\d+)$/.exec(value) ?? /^([^:]+):(\d+)$/.exec(value);
    if (!match) throw new NetlinkProtocolError(`not an endpoint: ${value}`);
    const [, host, port] = match;
    const six = host.includes(':');
    const address = six ? ipv6ToBytes(host) : ipv4ToBytes(host);
    // sockaddr_in6 (28 bytes: the address at 8) or sockaddr_in (16: at 4), the rest zero.
    const at = writer.reserve(six ? 28 : 16);
    const buffer = writer.buffer;
    buffer.writeUInt16LE(six ? AF_INET6 : AF_INET, at);
    buffer.writeUInt16BE(Number(port), at + 2);
    address.copy(buffer, at + (six ? 8 : 4));
  },
  decode(data, where) {
    return endpointText(data, 0, data.length, where);
  },
  decodeRange: endpointText,
};

export function endpointText(buffer: Buffer, start: number, end: number, where: string): string {
  const length = end - start;
  if (length < 2) throw new NetlinkProtocolError(`${where}: sockaddr shorter than its family`);
  const family = buffer.readUInt16LE(start);
  if (family === AF_INET && length >= 16) {
    return `${ipv4Text(buffer, start + 4)}:${buffer.readUInt16BE(start + 2)}`;
  }
  if (family === AF_INET6 && length >= 28) {
    return `[${ipv6Text(buffer, start + 8)}]:${buffer.readUInt16BE(start + 2)}`;
  }
  throw new NetlinkProtocolError(
    `${where}: unsupported sockaddr (family ${family}, ${length} bytes)`,
  );
}

export const allowedIpAttributes = schema({
  family: { type: WGALLOWEDIP_A_FAMILY, codec: u16 },
  address: { type: WGALLOWEDIP_A_IPADDR, codec: ipAddress },
  cidr: { type: WGALLOWEDIP_A_CIDR_MASK, codec: u8 },
});

/**
 * WGPEER_A_PRESHARED_KEY as read: whether the peer has one. wireguard.h: "WGPEER_A_PRESHARED_KEY:
 * len WG_KEY_LEN, all zeros to remove"; the kernel's dump (netlink.c get_peer) always carries the
 * 32 bytes, zeros for none (the dump is for CAP_NET_ADMIN only, GENL_UNS_ADMIN_PERM). Decoded to
 * a boolean in place: the key itself never becomes a JS value on the read path.
 */
export const presharedKeySet = fixedWidth<boolean>(
  WG_KEY_LEN,
  () => {
    throw new TypeError('a preshared key is written as its bytes (peerWriteAttributes)');
  },
  (buffer, offset) => {
    for (let i = offset; i < offset + WG_KEY_LEN; i++) if (buffer[i] !== 0) return true;
    return false;
  },
);

/** A peer as WG_CMD_GET_DEVICE reports it. */
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
  presharedKey: { type: WGPEER_A_PRESHARED_KEY, codec: presharedKeySet },
});

/**
 * A peer as WG_CMD_SET_DEVICE takes it: the read table's fields, and the preshared key as its
 * 32 raw bytes (issue 31; never logged, the caller zeroes its copy once sent).
 */
export const peerWriteAttributes = schema({
  ...peerAttributes,
  presharedKey: { type: WGPEER_A_PRESHARED_KEY, codec: fixedBytes(WG_KEY_LEN) },
});

/**
 * The device as read. WGDEVICE_A_PRIVATE_KEY is deliberately absent: the decoder skips
 * attributes it does not know, so the device's private key is never held in a JS object; only
 * ./private-key.ts reads it, for an interface being adopted. (Peers' preshared keys are read
 * as whether they are set, presharedKeySet.)
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
  peers: { type: WGDEVICE_A_PEERS, codec: list(nested(peerWriteAttributes)) },
});

// IPv6 text to bytes for endpoints and allowed IPs (src/kernel/ipv6.ts), a protocol error here.
export function ipv6ToBytes(text: string): Buffer {
  try {
    return addressBytes6(text);
  } catch {
    throw new NetlinkProtocolError(`not an IPv6 address: ${text}`);
  }
}
