/**
 * The decoder of WG_CMD_GET_DEVICE dumps (issue 8), as wgctrl-go's parse_linux.go decodes them
 * on mdlayher/netlink's AttributeDecoder: one walk with the netlink layer's AttributeCursor,
 * straight from the received bytes into WireGuardDevice / WireGuardPeer, without an object per
 * attribute or a copy of any payload. Each value is read by the codec the attribute tables of
 * ./schema.ts use (keys become base64 text read off the receive buffer, addresses text,
 * handshakes Dates, counters numbers), so the two decoders share every reader and check; what
 * this one adds is the walk without intermediate objects (a 10,000-peer dump is ~100,000
 * attributes, and the table codec's objects cost five times the receive) and the memo.
 *
 * The table codec (decodeAttributes over deviceReadAttributes) stays the reference oracle in
 * the tests (test/support/wg-table-decode.ts): they hold the two deep-equal on every recorded
 * dump, on generated ones and under fuzzing. Rules, as the table codec's: unknown attributes
 * are skipped, a repeated attribute keeps its last value, fixed-width values must have their
 * exact width, the device's own fields come from the first message, and a peer continued in a
 * later message (its allowed IPs did not fit) is merged by key. Malformed input raises
 * NetlinkProtocolError with the table codec's message and path (e.g.
 * "wgdevice.peers.3.allowedIps.0.cidr: expected 1 bytes, got 2").
 *
 * With a DumpMemo (the WireGuard facility keeps one per device), a peer entry whose bytes did
 * not change since the previous read is not decoded again: its earlier peer object is reused.
 * The tests hold the result with a memo deep-equal to the table codec's too, across reads where
 * peers changed, came and went.
 */
import * as netlink from '../../netlink';
import { AttributeCursor, located } from '../../netlink';
import { AF_INET, AF_INET6 } from '../rtnetlink';
import type { IpPrefix, WireGuardDevice, WireGuardPeer } from '../types';
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
  WGPEER_A_PRESHARED_KEY,
  WGPEER_A_PROTOCOL_VERSION,
  WGPEER_A_PUBLIC_KEY,
  WGPEER_A_RX_BYTES,
  WGPEER_A_TX_BYTES,
  WG_KEY_LEN,
  base64Key,
  counter,
  endpointText as readEndpoint,
  handshakeTime,
  ipAddressText,
  presharedKeySet,
} from './schema';

// Module-local copies: the netlink index re-exports through getters, and a getter call per
// attribute was a third of this decoder's time.
const { string, u16, u32, u8 } = netlink;

/**
 * One cursor per nesting level, reused for every message, peer and address (a decode is
 * synchronous and never nests a level in itself): the walk allocates nothing but results.
 */
const MESSAGE = new AttributeCursor();
const PEERS = new AttributeCursor();
const PEER = new AttributeCursor();
const ALLOWED_IPS = new AttributeCursor();
const ALLOWED_IP = new AttributeCursor();

/** One WGPEER_A_ALLOWEDIPS entry; null for what the table codec drops (no address, unknown family). */
function decodeAllowedIp(entry: AttributeCursor): IpPrefix | null {
  let family: number | undefined;
  let address: string | undefined;
  let cidr: number | undefined;
  while (entry.next()) {
    const type = entry.type;
    if (type === WGALLOWEDIP_A_FAMILY)
      family = u16.read(entry.buffer, entry.at(u16.size, 'family'));
    else if (type === WGALLOWEDIP_A_IPADDR)
      address = ipAddressText(entry.buffer, entry.start, entry.end, 'address');
    else if (type === WGALLOWEDIP_A_CIDR_MASK)
      cidr = u8.read(entry.buffer, entry.at(u8.size, 'cidr'));
  }
  if (address === undefined) return null;
  if (family === AF_INET) return { family: 4, address, cidr: cidr ?? 32 };
  if (family === AF_INET6) return { family: 6, address, cidr: cidr ?? 128 };
  return null;
}

function decodeAllowedIps(list: AttributeCursor): IpPrefix[] {
  // Sized by what is found: most peers have one prefix, and `[]` grown by push allocates room
  // for 16 (a peer's arrays live as long as the peer, so they are kept tight).
  let prefixes: IpPrefix[] | null = null;
  for (let index = 0; list.next(); index++) {
    try {
      const prefix = decodeAllowedIp(list.enter(ALLOWED_IP));
      if (prefix !== null) {
        if (prefixes === null) prefixes = [prefix];
        else prefixes.push(prefix);
      }
    } catch (error) {
      throw located(error, String(index));
    }
  }
  return prefixes ?? [];
}

function decodePeer(entry: AttributeCursor): WireGuardPeer {
  // Fields gathered in locals and the object made once at the end, in one shape for every peer.
  let publicKey = '';
  let endpointText: string | null = null;
  let lastHandshake: Date | null = null;
  let rxBytes = 0;
  let txBytes = 0;
  let persistentKeepalive = 0;
  let allowedIps: IpPrefix[] | null = null;
  let presharedKey = false;
  while (entry.next()) {
    switch (entry.type) {
      case WGPEER_A_PUBLIC_KEY:
        publicKey = base64Key.read(entry.buffer, entry.at(WG_KEY_LEN, 'publicKey'));
        break;
      case WGPEER_A_FLAGS:
        entry.at(u32.size, 'flags'); // checked, as the table codec checks it, and not kept
        break;
      case WGPEER_A_ENDPOINT:
        endpointText = readEndpoint(entry.buffer, entry.start, entry.end, 'endpoint');
        break;
      case WGPEER_A_PERSISTENT_KEEPALIVE_INTERVAL:
        persistentKeepalive = u16.read(entry.buffer, entry.at(u16.size, 'persistentKeepalive'));
        break;
      case WGPEER_A_LAST_HANDSHAKE_TIME:
        lastHandshake = handshakeTime.read(
          entry.buffer,
          entry.at(handshakeTime.size, 'lastHandshake'),
        );
        break;
      case WGPEER_A_RX_BYTES:
        rxBytes = counter.read(entry.buffer, entry.at(counter.size, 'rxBytes'));
        break;
      case WGPEER_A_TX_BYTES:
        txBytes = counter.read(entry.buffer, entry.at(counter.size, 'txBytes'));
        break;
      case WGPEER_A_ALLOWEDIPS:
        try {
          allowedIps = decodeAllowedIps(entry.enter(ALLOWED_IPS));
        } catch (error) {
          throw located(error, 'allowedIps');
        }
        break;
      case WGPEER_A_PROTOCOL_VERSION:
        entry.at(u32.size, 'protocolVersion');
        break;
      case WGPEER_A_PRESHARED_KEY:
        presharedKey = presharedKeySet.read(entry.buffer, entry.at(WG_KEY_LEN, 'presharedKey'));
        break;
      default:
        break;
    }
  }
  const peer: WireGuardPeer = {
    publicKey,
    endpoint: endpointText,
    lastHandshake,
    rxBytes,
    txBytes,
    persistentKeepalive,
    allowedIps: allowedIps ?? [],
  };
  if (presharedKey) peer.presharedKey = true;
  return peer;
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
  /** The entries of the last read that decoded whole. */
  private last: ReadEntries = { messages: [], buffers: [], starts: [], ends: [], peers: [] };
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
    const last = this.last;
    if (device === null || name !== this.name || messages.length !== last.messages.length) {
      return null;
    }
    for (let i = 0; i < messages.length; i++) {
      if (!last.messages[i]!.buffer.equals(messages[i]!)) return null;
    }
    this.reused = last.peers.length;
    return { ...device, peers: device.peers.slice() };
  }

  /** The previous read's message at `index` when it had exactly these bytes, else null. */
  message(index: number, buffer: Buffer): MessageEntry | null {
    const previous = this.last.messages[index];
    return previous !== undefined && previous.buffer.equals(buffer) ? previous : null;
  }

  /** The previous read's peer at `index` when its entry had exactly these bytes, else null. */
  lookup(index: number, buffer: Buffer, start: number, end: number): WireGuardPeer | null {
    const last = this.last;
    if (index >= last.peers.length) return null;
    const previous = last.buffers[index]!;
    const previousStart = last.starts[index]!;
    const previousEnd = last.ends[index]!;
    if (previousEnd - previousStart !== end - start) return null;
    return buffer.compare(previous, previousStart, previousEnd, start, end) === 0
      ? last.peers[index]!
      : null;
  }

  /** Appends the entries of a message taken whole (`message`) to the read being decoded. */
  carry(previous: MessageEntry, next: MemoEntries): void {
    const { buffers, starts, ends, peers } = this.last;
    const stop = previous.first + previous.peers.length;
    for (let i = previous.first; i < stop; i++) {
      next.buffers.push(buffers[i]!);
      next.starts.push(starts[i]!);
      next.ends.push(ends[i]!);
      next.peers.push(peers[i]!);
    }
    next.reused += previous.peers.length;
  }

  /** Replaces what is kept with the entries of the read just decoded. */
  keep(next: MemoEntries, name: string, device: WireGuardDevice): void {
    this.name = name;
    this.device = device;
    this.last = next;
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

/** The messages and peer entries of one read, in order (each entry a range of a datagram). */
interface ReadEntries {
  messages: MessageEntry[];
  buffers: Buffer[];
  starts: number[];
  ends: number[];
  peers: WireGuardPeer[];
}

/** The entries of the read being decoded, in order; kept by DumpMemo once it decoded whole. */
interface MemoEntries extends ReadEntries {
  memo: DumpMemo;
  reused: number;
}

function decodePeers(list: AttributeCursor, entries: MemoEntries | null): WireGuardPeer[] {
  const peers: WireGuardPeer[] = [];
  for (let index = 0; list.next(); index++) {
    const { buffer, start, end } = list;
    let peer: WireGuardPeer | null = null;
    if (entries !== null) {
      peer = entries.memo.lookup(entries.peers.length, buffer, start, end);
      if (peer !== null) entries.reused++;
    }
    if (peer === null) {
      try {
        peer = decodePeer(list.enter(PEER));
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

/**
 * One message: the device's fields (read into `device`, null for messages after the first:
 * still checked, not kept) and its peers (the last WGDEVICE_A_PEERS, as the table codec keeps).
 */
function decodeMessage(
  message: AttributeCursor,
  device: DeviceFields | null,
  entries: MemoEntries | null,
): { fields: DeviceFields | null; peers: WireGuardPeer[] } {
  let peers: WireGuardPeer[] = [];
  const fields: DeviceFields = device ?? {};
  while (message.next()) {
    switch (message.type) {
      case WGDEVICE_A_IFINDEX:
        fields.ifindex = message.value(u32, 'ifindex');
        break;
      case WGDEVICE_A_IFNAME:
        fields.ifname = message.value(string, 'ifname');
        break;
      case WGDEVICE_A_PUBLIC_KEY:
        fields.publicKey = message.value(base64Key, 'publicKey');
        break;
      case WGDEVICE_A_LISTEN_PORT:
        fields.listenPort = message.value(u16, 'listenPort');
        break;
      case WGDEVICE_A_FWMARK:
        fields.fwmark = message.value(u32, 'fwmark');
        break;
      case WGDEVICE_A_PEERS:
        try {
          peers = decodePeers(message.enter(PEERS), entries);
        } catch (error) {
          throw located(error, 'peers');
        }
        break;
      default:
        break;
    }
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
        decoded = decodeMessage(
          MESSAGE.reset(message, 0, message.length),
          device === undefined ? {} : null,
          entries,
        );
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
