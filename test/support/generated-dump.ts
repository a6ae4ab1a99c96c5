/**
 * Generated WG_CMD_GET_DEVICE dumps for the fast-decoder tests and bench/list-path.ts, encoded
 * with the table codec's encoders.
 */
import { AF_INET, AF_INET6 } from '../../src/kernel/rtnetlink';
import {
  WGDEVICE_A_PEERS,
  WGPEER_A_ALLOWEDIPS,
  WGPEER_A_ENDPOINT,
  WGPEER_A_LAST_HANDSHAKE_TIME,
  WGPEER_A_PERSISTENT_KEEPALIVE_INTERVAL,
  WGPEER_A_PROTOCOL_VERSION,
  WGPEER_A_PUBLIC_KEY,
  WGPEER_A_RX_BYTES,
  WGPEER_A_TX_BYTES,
  allowedIpAttributes,
  base64Key,
  counter,
  deviceReadAttributes,
  endpoint,
  handshakeTime,
} from '../../src/kernel/wireguard/schema';
import {
  AttributeWriter,
  NLA_F_NESTED,
  encodeAttributes,
  encodeValue,
  list,
  nested,
  u16,
  u32,
} from '../../src/netlink';

// A dump as the kernel writes it (wg_get_device_dump in drivers/net/wireguard/netlink.c):
// the device's fields in the first message only, one WGDEVICE_A_PEERS per message, u64s
// preceded by a WGPEER_A_UNSPEC pad attribute when they would be misaligned
// (nla_put_u64_64bit), and a peer whose allowed IPs do not fit continued in the next message.
const allowedIpsCodec = list(nested(allowedIpAttributes));
const PAD = Buffer.alloc(0);

export interface GeneratedPeer {
  key: string;
  endpoint: string | null;
  handshake: Date | null;
  rx: number;
  tx: number;
  keepalive: number;
  ips: Array<{ family: number; address: string; cidr: number }>;
  /** The peer has a preshared key (issue 31): non-zero bytes in WGPEER_A_PRESHARED_KEY. */
  psk?: boolean;
}

export function generatedPeer(i: number): GeneratedPeer {
  const ips = [
    { family: AF_INET, address: `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`, cidr: 32 },
  ];
  if (i % 3 === 0) ips.push({ family: AF_INET6, address: `fd00::${i.toString(16)}`, cidr: 128 });
  if (i % 7 === 0) ips.push({ family: AF_INET, address: '192.168.0.0', cidr: 24 });
  const endpoints = [
    null,
    `198.51.100.${i % 256}:${1024 + i}`,
    `[2001:db8::${i.toString(16)}]:51820`,
  ];
  return {
    key: Buffer.alloc(32, i % 256)
      .fill(i >> 8, 0, 2)
      .toString('base64'),
    endpoint: endpoints[i % 3]!,
    handshake: i % 4 === 0 ? null : new Date(1_700_000_000_000 + i * 1001),
    rx: i % 5 === 0 ? 0 : i * 123_457 + 2 ** 33,
    tx: i * 7,
    keepalive: i % 2 === 0 ? 0 : 25,
    ips,
    psk: i % 5 === 1,
  };
}

/** One peer entry; `ips` may be a part of the peer's allowed IPs (a continuation). */
function peerEntry(peer: GeneratedPeer, ips: GeneratedPeer['ips'], full: boolean): Buffer {
  const writer = new AttributeWriter();
  writer.put(WGPEER_A_PUBLIC_KEY, encodeValue(base64Key, peer.key));
  if (full) {
    // WGPEER_A_PRESHARED_KEY: always 32 bytes, zeros for none; both decoders say only whether set.
    writer.put(WGPEER_A_PUBLIC_KEY + 1, Buffer.alloc(32, peer.psk === true ? 0x5a : 0));
    if (peer.endpoint !== null) writer.put(WGPEER_A_ENDPOINT, encodeValue(endpoint, peer.endpoint));
    writer.put(WGPEER_A_LAST_HANDSHAKE_TIME, encodeValue(handshakeTime, peer.handshake));
    writer.put(0, PAD); // WGPEER_A_UNSPEC pad before a u64
    writer.put(WGPEER_A_RX_BYTES, encodeValue(counter, peer.rx));
    writer.put(0, PAD);
    writer.put(WGPEER_A_TX_BYTES, encodeValue(counter, peer.tx));
    writer.put(WGPEER_A_PERSISTENT_KEEPALIVE_INTERVAL, encodeValue(u16, peer.keepalive));
    writer.put(WGPEER_A_PROTOCOL_VERSION, encodeValue(u32, 1));
  }
  writer.put(WGPEER_A_ALLOWEDIPS, encodeValue(allowedIpsCodec, ips), NLA_F_NESTED);
  return writer.toBuffer();
}

/** `count` peers in messages of up to `perMessage`, the last peer of message 1 continued in 2. */
export function generatedDump(
  count: number,
  perMessage = 150,
  adjust: (peer: GeneratedPeer) => void = () => undefined,
): Buffer[] {
  const peers = Array.from({ length: count }, (_, i) => generatedPeer(i));
  peers.forEach(adjust);
  const messages: Buffer[] = [];
  for (let first = 0; first < count || messages.length === 0; first += perMessage) {
    const batch = peers.slice(first, first + perMessage);
    const entries = new AttributeWriter();
    batch.forEach((peer, index) => {
      // The last peer of message 1 continues in message 2, when there is one.
      const split =
        messages.length === 0 &&
        index === batch.length - 1 &&
        first + perMessage < count &&
        peer.ips.length > 1;
      const ips = split ? peer.ips.slice(0, 1) : peer.ips;
      entries.put(0, peerEntry(peer, ips, true), NLA_F_NESTED);
    });
    const continued = new AttributeWriter();
    const device =
      messages.length === 0
        ? encodeAttributes(deviceReadAttributes, {
            ifindex: 9,
            ifname: 'wgx',
            publicKey: Buffer.alloc(32, 1).toString('base64'),
            listenPort: 51820,
            fwmark: 0,
          })
        : Buffer.alloc(0);
    if (messages.length === 1) {
      const carried = peers[first - 1]!;
      if (carried.ips.length > 1) {
        continued.put(0, peerEntry(carried, carried.ips.slice(1), false), NLA_F_NESTED);
      }
    }
    const all = new AttributeWriter();
    all.put(
      WGDEVICE_A_PEERS,
      Buffer.concat([continued.toBuffer(), entries.toBuffer()]),
      NLA_F_NESTED,
    );
    messages.push(Buffer.concat([device, all.toBuffer()]));
  }
  return messages;
}
