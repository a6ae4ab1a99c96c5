/**
 * A decoder for WG_CMD_GET_DEVICE dumps alone (issue 8): straight from the received bytes into
 * WireGuardDevice / WireGuardPeer, without an object per attribute or a copy of any payload
 * (keys become base64 text read off the receive buffer, addresses text, handshakes Dates,
 * counters numbers). A 10,000-peer dump is ~100,000 attributes, and the table-driven codec
 * (wireguard-schema.ts + decodeAttributes) spends five times the receive on them.
 *
 * The table codec stays the reference: parseDevice in wireguard.ts gives the same result, and
 * test/unit/kernel/wireguard-dump.test.ts holds the two deep-equal on every recorded dump and on
 * generated ones. This decoder follows it rule for rule: unknown attributes are skipped, a
 * repeated attribute keeps its last value, fixed-width values must have their exact width, the
 * device's own fields come from the first message, and a peer continued in a later message (its
 * allowed IPs did not fit) is merged by key. Malformed input raises NetlinkProtocolError with the
 * table codec's message and path (e.g. "wgdevice.peers.3.allowedIps.0.cidr: expected 1 bytes,
 * got 2").
 *
 * With a DumpMemo (the WireGuard facility keeps one per device), a peer entry whose bytes did
 * not change since the previous read is not decoded again: its earlier peer object is reused.
 * The tests hold the result with a memo deep-equal to the table codec's too, across reads where
 * peers changed, came and went.
 */
import * as netlink from '../netlink';
import { NetlinkProtocolError } from '../netlink';
import { AF_INET, AF_INET6 } from './rtnetlink';
import type { IpPrefix, WireGuardDevice, WireGuardPeer } from './types';
import {
  WGALLOWEDIP_A_CIDR_MASK,
  WGALLOWEDIP_A_FAMILY,
  WGALLOWEDIP_A_IPADDR,
  WGDEVICE_A_FWMARK,
  WGDEVICE_A_IFINDEX,
  WGDEVICE_A_IFNAME,
  WGDEVICE_A_LISTEN_PORT,
  WGDEVICE_A_PEERS,
  WGDEVICE_A_PUBLIC_KEY,
  WGPEER_A_ALLOWEDIPS,
  WGPEER_A_ENDPOINT,
  WGPEER_A_FLAGS,
  WGPEER_A_LAST_HANDSHAKE_TIME,
  WGPEER_A_PERSISTENT_KEEPALIVE_INTERVAL,
  WGPEER_A_PROTOCOL_VERSION,
  WGPEER_A_PUBLIC_KEY,
  WGPEER_A_RX_BYTES,
  WGPEER_A_TX_BYTES,
  WG_KEY_LEN,
} from './wireguard-schema';

// Module-local copies: the netlink index re-exports through getters, and a getter call per
// attribute was a third of this decoder's time.
const NLA_HDRLEN = netlink.NLA_HDRLEN;
const NLA_TYPE_MASK = netlink.NLA_TYPE_MASK;
const align = (length: number): number => (length + 3) & ~3; // NLA_ALIGN, linux/netlink.h

/**
 * A little-endian u16 at `offset`, which callers have bounds-checked (an attribute's header or
 * payload within its checked length): Buffer#readUInt16LE checks its argument again per call.
 */
const u16 = (buffer: Buffer, offset: number): number =>
  buffer[offset]! | (buffer[offset + 1]! << 8);

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

/**
 * nla_len of the attribute at `offset` (a payload ends before `end`), checked as
 * forEachAttribute checks it; 0 when what remains is shorter than a header (zero padding, which
 * the kernel tolerates; anything else is an error).
 */
function attributeLength(buffer: Buffer, offset: number, end: number): number {
  const remaining = end - offset;
  if (remaining < NLA_HDRLEN) {
    for (let i = offset; i < end; i++) {
      if (buffer[i] !== 0) {
        throw new NetlinkProtocolError(`${remaining} stray bytes after the last attribute`);
      }
    }
    return 0;
  }
  const length = u16(buffer, offset);
  if (length < NLA_HDRLEN || length > remaining) {
    throw new NetlinkProtocolError(
      `attribute at offset ${offset} has length ${length}, ${remaining} bytes remain`,
    );
  }
  return length;
}

function exactly(length: number, size: number, name: string): void {
  if (length !== size) {
    throw new NetlinkProtocolError(`${name}: expected ${size} bytes, got ${length}`);
  }
}

/** Prefixes a decoding error with where it happened, as the table codec's `located` does. */
function located(error: unknown, where: string): unknown {
  return error instanceof NetlinkProtocolError
    ? new NetlinkProtocolError(`${where}.${error.message}`)
    : error;
}

/** An s64 as a number: two 32-bit reads while exact, BigInt (as the table codec) beyond. */
function s64(buffer: Buffer, offset: number): number {
  const high = buffer.readInt32LE(offset + 4);
  if (high > 0x1fffff || high < -0x200000) return Number(buffer.readBigInt64LE(offset));
  return high * 0x1_0000_0000 + buffer.readUInt32LE(offset);
}

/** A u64 byte counter, computed exactly as the table codec's `counter` computes it. */
function counter(buffer: Buffer, offset: number): number {
  return buffer.readUInt32LE(offset + 4) * 0x1_0000_0000 + buffer.readUInt32LE(offset);
}

/**
 * 16 address bytes as RFC 5952 text, as bytesToIpv6 (wireguard-schema.ts) writes it: lowercase
 * hex groups, the longest run of two or more zero groups (the first of equal runs) as "::".
 */
function ipv6Text(buffer: Buffer, start: number): string {
  let bestStart = -1;
  let bestLength = 1;
  let runStart = -1;
  for (let group = 0; group <= 8; group++) {
    const zero =
      group < 8 && buffer[start + 2 * group] === 0 && buffer[start + 2 * group + 1] === 0;
    if (zero) {
      if (runStart === -1) runStart = group;
    } else if (runStart !== -1) {
      if (group - runStart > bestLength) {
        bestStart = runStart;
        bestLength = group - runStart;
      }
      runStart = -1;
    }
  }
  let text = '';
  for (let group = 0; group < 8; group++) {
    if (group === bestStart) {
      text += '::';
      group += bestLength - 1;
      continue;
    }
    const value = (buffer[start + 2 * group]! << 8) | buffer[start + 2 * group + 1]!;
    text += text === '' || text.endsWith(':') ? value.toString(16) : `:${value.toString(16)}`;
  }
  return text;
}

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

/** WGALLOWEDIP_A_IPADDR / sockaddr address bytes as text (4: dotted, 16: RFC 5952). */
function addressText(buffer: Buffer, start: number, length: number): string {
  if (length === 4) return ipv4Text(buffer, start);
  if (length === 16) return ipv6Text(buffer, start);
  throw new NetlinkProtocolError(`address: an IP address is 4 or 16 bytes, got ${length}`);
}

/** sockaddr_in / sockaddr_in6 as "1.2.3.4:51820" / "[::1]:51820" (the endpoint codec's text). */
function endpointText(buffer: Buffer, start: number, end: number): string {
  const length = end - start;
  if (length < 2) throw new NetlinkProtocolError('endpoint: sockaddr shorter than its family');
  const family = buffer.readUInt16LE(start);
  if (family === AF_INET && length >= 16) {
    return `${addressText(buffer, start + 4, 4)}:${buffer.readUInt16BE(start + 2)}`;
  }
  if (family === AF_INET6 && length >= 28) {
    return `[${addressText(buffer, start + 8, 16)}]:${buffer.readUInt16BE(start + 2)}`;
  }
  throw new NetlinkProtocolError(
    `endpoint: unsupported sockaddr (family ${family}, ${length} bytes)`,
  );
}

/** One WGPEER_A_ALLOWEDIPS entry; null for what toPeer drops (no address, unknown family). */
function decodeAllowedIp(buffer: Buffer, from: number, to: number): IpPrefix | null {
  let family: number | undefined;
  let address: string | undefined;
  let cidr: number | undefined;
  for (let offset = from; offset < to;) {
    const length = attributeLength(buffer, offset, to);
    if (length === 0) break;
    const type = u16(buffer, offset + 2) & NLA_TYPE_MASK;
    const start = offset + NLA_HDRLEN;
    const size = length - NLA_HDRLEN;
    if (type === WGALLOWEDIP_A_FAMILY) {
      exactly(size, 2, 'family');
      family = u16(buffer, start);
    } else if (type === WGALLOWEDIP_A_IPADDR) {
      address = addressText(buffer, start, size);
    } else if (type === WGALLOWEDIP_A_CIDR_MASK) {
      exactly(size, 1, 'cidr');
      cidr = buffer[start]!;
    }
    offset += align(length);
  }
  if (address === undefined) return null;
  if (family === AF_INET) return { family: 4, address, cidr: cidr ?? 32 };
  if (family === AF_INET6) return { family: 6, address, cidr: cidr ?? 128 };
  return null;
}

function decodeAllowedIps(buffer: Buffer, from: number, to: number): IpPrefix[] {
  // Sized by what is found: most peers have one prefix, and `[]` grown by push allocates room
  // for 16 (a peer's arrays live as long as the peer, so they are kept tight).
  let prefixes: IpPrefix[] | null = null;
  let index = 0;
  for (let offset = from; offset < to; index++) {
    const length = attributeLength(buffer, offset, to);
    if (length === 0) break;
    try {
      const prefix = decodeAllowedIp(buffer, offset + NLA_HDRLEN, offset + length);
      if (prefix !== null) {
        if (prefixes === null) prefixes = [prefix];
        else prefixes.push(prefix);
      }
    } catch (error) {
      throw located(error, String(index));
    }
    offset += align(length);
  }
  return prefixes ?? [];
}

function decodePeer(buffer: Buffer, from: number, to: number): WireGuardPeer {
  // Fields gathered in locals and the object made once at the end, in one shape for every peer.
  let publicKey = '';
  let endpoint: string | null = null;
  let lastHandshake: Date | null = null;
  let rxBytes = 0;
  let txBytes = 0;
  let persistentKeepalive = 0;
  let allowedIps: IpPrefix[] | null = null;
  for (let offset = from; offset < to;) {
    const length = attributeLength(buffer, offset, to);
    if (length === 0) break;
    const type = u16(buffer, offset + 2) & NLA_TYPE_MASK;
    const start = offset + NLA_HDRLEN;
    const end = offset + length;
    const size = length - NLA_HDRLEN;
    switch (type) {
      case WGPEER_A_PUBLIC_KEY:
        exactly(size, WG_KEY_LEN, 'publicKey');
        publicKey = base64(buffer, start, end);
        break;
      case WGPEER_A_FLAGS:
        exactly(size, 4, 'flags');
        break;
      case WGPEER_A_ENDPOINT:
        endpoint = endpointText(buffer, start, end);
        break;
      case WGPEER_A_PERSISTENT_KEEPALIVE_INTERVAL:
        exactly(size, 2, 'persistentKeepalive');
        persistentKeepalive = u16(buffer, start);
        break;
      case WGPEER_A_LAST_HANDSHAKE_TIME: {
        // struct __kernel_timespec {s64 tv_sec; s64 tv_nsec} (linux/time_types.h); {0, 0}: never.
        exactly(size, 16, 'lastHandshake');
        const seconds = s64(buffer, start);
        const nanoseconds = s64(buffer, start + 8);
        if (seconds === 0 && nanoseconds === 0) {
          lastHandshake = null;
          break;
        }
        const date = new Date(seconds * 1000 + Math.floor(nanoseconds / 1e6));
        // Beyond what a Date holds (±8.64e15 ms), as the table codec's handshakeTime refuses it.
        if (Number.isNaN(date.getTime())) {
          throw new NetlinkProtocolError(
            `handshake time ${seconds} s ${nanoseconds} ns is out of range`,
          );
        }
        lastHandshake = date;
        break;
      }
      case WGPEER_A_RX_BYTES:
        exactly(size, 8, 'rxBytes');
        rxBytes = counter(buffer, start);
        break;
      case WGPEER_A_TX_BYTES:
        exactly(size, 8, 'txBytes');
        txBytes = counter(buffer, start);
        break;
      case WGPEER_A_ALLOWEDIPS:
        try {
          allowedIps = decodeAllowedIps(buffer, start, end);
        } catch (error) {
          throw located(error, 'allowedIps');
        }
        break;
      case WGPEER_A_PROTOCOL_VERSION:
        exactly(size, 4, 'protocolVersion');
        break;
      default:
        break;
    }
    offset += align(length);
  }
  return {
    publicKey,
    endpoint,
    lastHandshake,
    rxBytes,
    txBytes,
    persistentKeepalive,
    allowedIps: allowedIps ?? [],
  };
}

/**
 * The peer entries of one read, kept to decode the next read of the same device (issue 8). Three
 * levels, all exact byte comparisons:
 * - a dump whose every message equals the last one's is the last device again (`again`);
 * - a message whose bytes equal those of the message at the same index last time decoded to
 *   what it decoded to then (the decoder is a function of those bytes alone), so its device
 *   fields and peers are taken as they are: one memcmp for ~250 peers. Between two polls most
 *   peers of a big server are idle, and a dump of an idle device is its previous dump again;
 * - otherwise, per peer: where an entry's bytes equal those of the entry at the same position
 *   (counted over the whole dump) last time, the peer decoded then is the peer now. Positions,
 *   not messages: a peer whose entry grew pushes the kernel's message boundaries, not the order.
 * The kernel keeps its peers in one list in the order they were added (device->peer_list), so
 * positions hold until a peer is removed; after that, entries behind it are decoded afresh for
 * one read.
 *
 * The entries reference the received datagrams (each a Buffer of its own, native/netlink.c
 * copies every recv), which therefore live one read longer: about the dump's size. Of two equal
 * datagrams the earlier one is kept, so an idle device's new datagrams die young. The peers
 * handed out are shared between reads and must not be changed by anyone (nothing does).
 */
export class DumpMemo {
  private messages: MessageEntry[] = [];
  private buffers: Buffer[] = [];
  private starts: number[] = [];
  private ends: number[] = [];
  private peers: WireGuardPeer[] = [];
  private device: WireGuardDevice | null = null;
  /** The name that device was decoded under (its name when the dump carries none). */
  private name = '';
  /** Entries taken from the previous read in the last decode (for tests and the bench). */
  reused = 0;

  /**
   * The previous read's device when every message is byte for byte what it was: a new device
   * object and peers array (callers may own those), the same peers. Nothing else is decoded.
   */
  again(name: string, messages: readonly Buffer[]): WireGuardDevice | null {
    const device = this.device;
    if (device === null || name !== this.name || messages.length !== this.messages.length) {
      return null;
    }
    for (let i = 0; i < messages.length; i++) {
      if (!this.messages[i]!.buffer.equals(messages[i]!)) return null;
    }
    this.reused = this.peers.length;
    return { ...device, peers: device.peers.slice() };
  }

  /** The previous read's message at `index` when it had exactly these bytes, else null. */
  message(index: number, buffer: Buffer): MessageEntry | null {
    const previous = this.messages[index];
    return previous !== undefined && previous.buffer.equals(buffer) ? previous : null;
  }

  /** The previous read's peer at `index` when its entry had exactly these bytes, else null. */
  lookup(index: number, buffer: Buffer, start: number, end: number): WireGuardPeer | null {
    if (index >= this.peers.length) return null;
    const previous = this.buffers[index]!;
    const previousStart = this.starts[index]!;
    const previousEnd = this.ends[index]!;
    if (previousEnd - previousStart !== end - start) return null;
    return buffer.compare(previous, previousStart, previousEnd, start, end) === 0
      ? this.peers[index]!
      : null;
  }

  /** Appends the entries of a message taken whole (`message`) to the read being decoded. */
  carry(previous: MessageEntry, next: MemoEntries): void {
    const last = previous.first + previous.peers.length;
    for (let i = previous.first; i < last; i++) {
      next.buffers.push(this.buffers[i]!);
      next.starts.push(this.starts[i]!);
      next.ends.push(this.ends[i]!);
      next.peers.push(this.peers[i]!);
    }
    next.reused += previous.peers.length;
  }

  /** Replaces what is kept with the entries of the read just decoded. */
  keep(next: MemoEntries, name: string, device: WireGuardDevice): void {
    this.name = name;
    this.device = device;
    this.messages = next.messages;
    this.buffers = next.buffers;
    this.starts = next.starts;
    this.ends = next.ends;
    this.peers = next.peers;
    this.reused = next.reused;
  }
}

/** One message of a read: its bytes, what it decoded to, and its first entry's position. */
interface MessageEntry {
  buffer: Buffer;
  fields: DeviceFields | null;
  peers: WireGuardPeer[];
  first: number;
}

/** The entries of the read being decoded, in order; kept by DumpMemo once it decoded whole. */
interface MemoEntries {
  memo: DumpMemo;
  messages: MessageEntry[];
  buffers: Buffer[];
  starts: number[];
  ends: number[];
  peers: WireGuardPeer[];
  reused: number;
}

function decodePeers(
  buffer: Buffer,
  from: number,
  to: number,
  entries: MemoEntries | null,
): WireGuardPeer[] {
  const peers: WireGuardPeer[] = [];
  let index = 0;
  for (let offset = from; offset < to; index++) {
    const length = attributeLength(buffer, offset, to);
    if (length === 0) break;
    const start = offset + NLA_HDRLEN;
    const end = offset + length;
    let peer: WireGuardPeer | null = null;
    if (entries !== null) {
      peer = entries.memo.lookup(entries.peers.length, buffer, start, end);
      if (peer !== null) entries.reused++;
    }
    if (peer === null) {
      try {
        peer = decodePeer(buffer, start, end);
      } catch (error) {
        throw located(error, String(index));
      }
    }
    if (entries !== null) {
      entries.buffers.push(buffer);
      entries.starts.push(start);
      entries.ends.push(end);
      entries.peers.push(peer);
    }
    peers.push(peer);
    offset += align(length);
  }
  return peers;
}

/**
 * The peers of one dump in order, each key once: a peer continued in a later message (its
 * allowed IPs did not fit) is merged into its first appearance, as the table codec's Map by
 * key does. An open-addressing table of positions, hashed on the key text's first characters
 * (base64 of random bytes): a Map keyed by the 44-character strings was a sixth of a cold
 * decode and most of a warm one.
 */
class PeersByKey {
  readonly peers: WireGuardPeer[] = [];
  private slots: Int32Array; // position + 1; 0: empty
  private mask: number;

  /**
   * Sized for the dump at hand so that it never grows: a kernel peer entry is over 128 bytes
   * (key, preshared key, handshake, counters, keepalive, version: wg_get_device_dump), so
   * bytes / 64 slots keep the table at most half full.
   */
  constructor(dumpBytes: number) {
    let size = 1024;
    while (size < dumpBytes / 64) size *= 2;
    this.slots = new Int32Array(size);
    this.mask = size - 1;
  }

  add(peer: WireGuardPeer): void {
    const key = peer.publicKey;
    let slot = keyHash(key) & this.mask;
    for (let held = this.slots[slot]!; held !== 0; held = this.slots[slot]!) {
      const earlier = this.peers[held - 1]!;
      if (earlier.publicKey === key) {
        // A new object for the merged peer: the entries' own objects may be shared with the
        // previous and the next read (DumpMemo) and are never changed.
        this.peers[held - 1] = {
          ...earlier,
          allowedIps: [...earlier.allowedIps, ...peer.allowedIps],
        };
        return;
      }
      slot = (slot + 1) & this.mask;
    }
    this.peers.push(peer);
    this.slots[slot] = this.peers.length;
    if (this.peers.length * 2 > this.mask) this.grow();
  }

  private grow(): void {
    const slots = new Int32Array(this.slots.length * 2);
    const mask = slots.length - 1;
    for (let i = 0; i < this.peers.length; i++) {
      let slot = keyHash(this.peers[i]!.publicKey) & mask;
      while (slots[slot] !== 0) slot = (slot + 1) & mask;
      slots[slot] = i + 1;
    }
    this.slots = slots;
    this.mask = mask;
  }
}

/** FNV-1a over the first 12 characters and the length (any text; keys are 44 characters). */
function keyHash(key: string): number {
  let hash = 0x811c9dc5 ^ key.length;
  const n = key.length < 12 ? key.length : 12;
  for (let i = 0; i < n; i++) hash = Math.imul(hash ^ key.charCodeAt(i), 0x01000193);
  return (hash ^ (hash >>> 15)) >>> 0;
}

interface DeviceFields {
  ifindex?: number;
  ifname?: string;
  publicKey?: string;
  listenPort?: number;
  fwmark?: number;
}

/** One message: the device's fields and its peers (the last WGDEVICE_A_PEERS, as the table). */
function decodeMessage(
  buffer: Buffer,
  device: DeviceFields | null,
  entries: MemoEntries | null,
): { fields: DeviceFields | null; peers: WireGuardPeer[] } {
  let peers: WireGuardPeer[] = [];
  for (let offset = 0; offset < buffer.length;) {
    const length = attributeLength(buffer, offset, buffer.length);
    if (length === 0) break;
    const type = u16(buffer, offset + 2) & NLA_TYPE_MASK;
    const start = offset + NLA_HDRLEN;
    const end = offset + length;
    const size = length - NLA_HDRLEN;
    switch (type) {
      case WGDEVICE_A_IFINDEX:
        exactly(size, 4, 'ifindex');
        if (device) device.ifindex = buffer.readUInt32LE(start);
        break;
      case WGDEVICE_A_IFNAME: {
        const nul = buffer.indexOf(0, start);
        if (device)
          device.ifname = buffer.toString('utf8', start, nul === -1 || nul > end ? end : nul);
        break;
      }
      case WGDEVICE_A_PUBLIC_KEY:
        exactly(size, WG_KEY_LEN, 'publicKey');
        if (device) device.publicKey = base64(buffer, start, end);
        break;
      case WGDEVICE_A_LISTEN_PORT:
        exactly(size, 2, 'listenPort');
        if (device) device.listenPort = buffer.readUInt16LE(start);
        break;
      case WGDEVICE_A_FWMARK:
        exactly(size, 4, 'fwmark');
        if (device) device.fwmark = buffer.readUInt32LE(start);
        break;
      case WGDEVICE_A_PEERS:
        try {
          peers = decodePeers(buffer, start, end, entries);
        } catch (error) {
          throw located(error, 'peers');
        }
        break;
      default:
        break;
    }
    offset += align(length);
  }
  return { fields: device, peers };
}

/**
 * Decodes the messages of one GET_DEVICE dump (each the attributes after its genlmsghdr).
 * Only the first carries the device's own fields; later ones carry WGDEVICE_A_PEERS only
 * (wg_get_device_dump), and a peer whose allowed IPs did not fit is repeated at the start of
 * the next message with its key and the remaining IPs.
 */
export function decodeDeviceDump(
  name: string,
  messages: readonly Buffer[],
  memo: DumpMemo | null = null,
): WireGuardDevice {
  const again = memo === null ? null : memo.again(name, messages);
  if (again !== null) return again;
  let device: DeviceFields | undefined;
  let dumpBytes = 0;
  for (const message of messages) dumpBytes += message.length;
  const peers = new PeersByKey(dumpBytes);
  const entries: MemoEntries | null =
    memo === null
      ? null
      : { memo, messages: [], buffers: [], starts: [], ends: [], peers: [], reused: 0 };
  for (let index = 0; index < messages.length; index++) {
    const message = messages[index]!;
    const same = entries === null ? null : entries.memo.message(index, message);
    let decoded: { fields: DeviceFields | null; peers: WireGuardPeer[] };
    const first = entries === null ? 0 : entries.peers.length;
    if (same !== null && entries !== null) {
      entries.memo.carry(same, entries);
      decoded = same;
    } else {
      try {
        decoded = decodeMessage(message, device === undefined ? {} : null, entries);
      } catch (error) {
        throw located(error, 'wgdevice');
      }
    }
    if (entries !== null) {
      entries.messages.push({
        buffer: same === null ? message : same.buffer,
        fields: decoded.fields,
        peers: decoded.peers,
        first,
      });
    }
    device ??= decoded.fields ?? {};
    for (const peer of decoded.peers) peers.add(peer);
  }
  const decoded: WireGuardDevice = {
    name: device?.ifname ?? name,
    ifindex: device?.ifindex ?? 0,
    publicKey: device?.publicKey ?? null,
    listenPort: device?.listenPort ?? 0,
    fwmark: device?.fwmark ?? 0,
    peers: peers.peers,
  };
  // Kept only after the whole dump decoded: a malformed one leaves the memo as it was. A copy
  // of the peers array: the caller owns the one it is given.
  if (entries !== null)
    entries.memo.keep(entries, name, { ...decoded, peers: peers.peers.slice() });
  return decoded;
}
