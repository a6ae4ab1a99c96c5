import { expect } from 'chai';
import fc from 'fast-check';
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { AF_INET, AF_INET6 } from '../../../src/kernel/rtnetlink';
import { parseDevice } from '../../../src/kernel/wireguard';
import { decodeDeviceDump } from '../../../src/kernel/wireguard-dump';
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
  WG_CMD_GET_DEVICE,
  allowedIpAttributes,
  base64Key,
  counter,
  deviceReadAttributes,
  endpoint,
  handshakeTime,
} from '../../../src/kernel/wireguard-schema';
import {
  AttributeWriter,
  GENL_ID_CTRL,
  NLA_F_NESTED,
  NLM_F_DUMP,
  NetlinkProtocolError,
  encodeAttributes,
  list,
  nested,
  parseMessages,
  u16,
  u32,
} from '../../../src/netlink';
import type { Transcript } from '../../../src/netlink/transcript';
import { FIXTURES } from '../../support/transcripts';

/** What both decoders make of the messages: the device, or the error's type and message. */
function both(messages: Buffer[]): { fast: unknown; table: unknown } {
  const run = (decode: () => unknown): unknown => {
    try {
      return decode();
    } catch (error) {
      return { error: (error as Error).constructor.name, message: (error as Error).message };
    }
  };
  return {
    fast: run(() => decodeDeviceDump('wgx', messages)),
    table: run(() =>
      parseDevice(
        'wgx',
        messages.map((attributes) => ({ cmd: WG_CMD_GET_DEVICE, version: 1, attributes })),
      ),
    ),
  };
}

const GENL_HDRLEN = 4;

/**
 * The WG_CMD_GET_DEVICE dumps of a transcript: on a generic-netlink socket, a sent dump request
 * (NLM_F_DUMP) to a family other than the controller, genl cmd 0; its answer messages of that
 * family, as attribute buffers after the genlmsghdr. (WireGuard is the only generic-netlink
 * family the daemon talks to.)
 */
function recordedDumps(transcript: Transcript): Buffer[][] {
  const dumps: Buffer[][] = [];
  for (const socket of transcript.sockets) {
    if (socket.protocol !== 16) continue;
    for (const exchange of socket.exchanges) {
      const [sent] = parseMessages(Buffer.from(exchange.sent, 'hex'));
      if (sent === undefined || sent.type === GENL_ID_CTRL) continue;
      if ((sent.flags & NLM_F_DUMP) !== NLM_F_DUMP || sent.payload[0] !== WG_CMD_GET_DEVICE) {
        continue;
      }
      const messages: Buffer[] = [];
      for (const datagram of exchange.received) {
        if (typeof datagram !== 'string') continue;
        for (const message of parseMessages(Buffer.from(datagram, 'hex'))) {
          if (message.type === sent.type) messages.push(message.payload.subarray(GENL_HDRLEN));
        }
      }
      if (messages.length > 0) dumps.push(messages);
    }
  }
  return dumps;
}

// A dump as the kernel writes it (wg_get_device_dump in drivers/net/wireguard/netlink.c):
// the device's fields in the first message only, one WGDEVICE_A_PEERS per message, u64s
// preceded by a WGPEER_A_UNSPEC pad attribute when they would be misaligned
// (nla_put_u64_64bit), and a peer whose allowed IPs do not fit continued in the next message.
const allowedIpsCodec = list(nested(allowedIpAttributes));
const PAD = Buffer.alloc(0);

interface GeneratedPeer {
  key: string;
  endpoint: string | null;
  handshake: Date | null;
  rx: number;
  tx: number;
  keepalive: number;
  ips: Array<{ family: number; address: string; cidr: number }>;
}

function generatedPeer(i: number): GeneratedPeer {
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
  };
}

/** One peer entry; `ips` may be a part of the peer's allowed IPs (a continuation). */
function peerEntry(peer: GeneratedPeer, ips: GeneratedPeer['ips'], full: boolean): Buffer {
  const writer = new AttributeWriter();
  writer.put(WGPEER_A_PUBLIC_KEY, base64Key.encode(peer.key));
  if (full) {
    writer.put(WGPEER_A_PUBLIC_KEY + 1, Buffer.alloc(32)); // preshared key: ignored by both
    if (peer.endpoint !== null) writer.put(WGPEER_A_ENDPOINT, endpoint.encode(peer.endpoint));
    writer.put(WGPEER_A_LAST_HANDSHAKE_TIME, handshakeTime.encode(peer.handshake));
    writer.put(0, PAD); // WGPEER_A_UNSPEC pad before a u64
    writer.put(WGPEER_A_RX_BYTES, counter.encode(peer.rx));
    writer.put(0, PAD);
    writer.put(WGPEER_A_TX_BYTES, counter.encode(peer.tx));
    writer.put(WGPEER_A_PERSISTENT_KEEPALIVE_INTERVAL, u16.encode(peer.keepalive));
    writer.put(WGPEER_A_PROTOCOL_VERSION, u32.encode(1));
  }
  writer.put(WGPEER_A_ALLOWEDIPS, allowedIpsCodec.encode(ips), NLA_F_NESTED);
  return writer.toBuffer();
}

/** `count` peers in messages of up to `perMessage`, the last peer of message 1 continued in 2. */
function generatedDump(count: number, perMessage = 150): Buffer[] {
  const peers = Array.from({ length: count }, (_, i) => generatedPeer(i));
  const messages: Buffer[] = [];
  for (let first = 0; first < count || messages.length === 0; first += perMessage) {
    const batch = peers.slice(first, first + perMessage);
    const entries = new AttributeWriter();
    batch.forEach((peer, index) => {
      const split = messages.length === 0 && index === batch.length - 1 && peer.ips.length > 1;
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

describe('kernel/wireguard-dump: the fast decoder equals the table codec', () => {
  it('on every WireGuard dump in the recorded transcripts', () => {
    let dumps = 0;
    let peers = 0;
    for (const file of readdirSync(FIXTURES).filter((name) => name.endsWith('.json'))) {
      const transcript = JSON.parse(readFileSync(path.join(FIXTURES, file), 'utf8')) as Transcript;
      for (const messages of recordedDumps(transcript)) {
        const { fast, table } = both(messages);
        expect(fast, file).to.deep.equal(table);
        expect(fast, file).to.have.property('peers');
        dumps++;
        peers += (fast as { peers: unknown[] }).peers.length;
      }
    }
    // The transcripts hold dumps with peers (the wireguard-device and api-peers scenarios).
    expect(dumps).to.be.greaterThan(5);
    expect(peers).to.be.greaterThan(5);
  });

  it('on a generated 10,000-peer dump over many messages, with a continued peer', () => {
    const messages = generatedDump(10_000);
    expect(messages.length).to.be.greaterThan(60);
    const { fast, table } = both(messages);
    expect(fast).to.deep.equal(table);
    const device = fast as ReturnType<typeof decodeDeviceDump>;
    expect(device.peers).to.have.length(10_000);
    expect(device.name).to.equal('wgx');
    expect(device.listenPort).to.equal(51820);
    // The peer split across messages 1 and 2 has all its allowed IPs, in order.
    const carried = generatedPeer(149);
    expect(device.peers[149]!.allowedIps.map((p) => `${p.address}/${p.cidr}`)).to.deep.equal(
      carried.ips.map((p) => `${p.address}/${p.cidr}`),
    );
    expect(device.peers.some((p) => p.lastHandshake === null)).to.equal(true);
    expect(device.peers.some((p) => p.endpoint?.startsWith('['))).to.equal(true);
  });

  it('on malformed dumps: the same NetlinkProtocolError, or the same result (property)', () => {
    const base = generatedDump(6, 3);
    fc.assert(
      fc.property(
        fc.nat({ max: base.length - 1 }),
        fc.array(fc.tuple(fc.nat(), fc.nat({ max: 255 })), { minLength: 1, maxLength: 4 }),
        fc.option(fc.nat(), { nil: null }),
        (which, edits, cut) => {
          const messages = base.map((m) => Buffer.from(m));
          const target = messages[which]!;
          for (const [at, value] of edits) target[at % target.length] = value;
          if (cut !== null) messages[which] = target.subarray(0, cut % (target.length + 1));
          const { fast, table } = both(messages);
          expect(fast).to.deep.equal(table);
        },
      ),
      { numRuns: 2000 },
    );
  });

  it('raises NetlinkProtocolError with the path of the bad attribute', () => {
    const [first] = generatedDump(2, 2);
    // Make the first peer's WGPEER_A_PUBLIC_KEY one byte short: find its header (len 36, type 1).
    const at = first!.indexOf(Buffer.from([36, 0, WGPEER_A_PUBLIC_KEY, 0]), 60);
    const broken = Buffer.from(first!);
    broken.writeUInt16LE(35, at);
    const { fast, table } = both([broken]);
    expect(fast).to.deep.equal(table);
    expect(fast).to.deep.include({ error: NetlinkProtocolError.name });
    expect((fast as { message: string }).message).to.match(/^wgdevice\.peers\.0\./);
  });
});
