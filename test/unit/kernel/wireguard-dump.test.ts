import { expect } from 'chai';
import fc from 'fast-check';
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { parseDevice } from '../../support/wg-table-decode';
import { DumpMemo, decodeDeviceDump } from '../../../src/kernel/wireguard/dump';
import { takePresharedKeys } from '../../../src/kernel/wireguard/preshared-keys';
import { AF_INET6 } from '../../../src/kernel/rtnetlink';
import {
  WGPEER_A_PUBLIC_KEY,
  WG_CMD_GET_DEVICE,
  bytesToIpv6,
} from '../../../src/kernel/wireguard/schema';
import {
  GENL_ID_CTRL,
  NLM_F_DUMP,
  NetlinkProtocolError,
  parseMessages,
} from '../../../src/netlink';
import type { Transcript } from '../../../src/netlink/transcript';
import { generatedDump, generatedPeer } from '../../support/generated-dump';
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

  it('writes IPv6 allowed IPs and endpoints in RFC 5952 text, as the table codec does (property)', () => {
    // Groups drawn mostly from 0 so that runs of zero groups of every length and place occur.
    const group = fc.oneof(fc.constant(0), fc.constant(0), fc.integer({ min: 0, max: 0xffff }));
    fc.assert(
      fc.property(fc.array(group, { minLength: 8, maxLength: 8 }), (groups) => {
        const raw = Buffer.alloc(16);
        groups.forEach((value, index) => raw.writeUInt16BE(value, index * 2));
        const text = bytesToIpv6(raw);
        // The oracle: the WHATWG URL serializer compresses an IPv6 host as RFC 5952 says
        // (lowercase, no leading zeros, the first longest run of two or more zero groups).
        const full = groups.map((value) => value.toString(16)).join(':');
        expect(text).to.equal(new URL(`http://[${full}]/`).hostname.slice(1, -1));
        const dump = generatedDump(1, 1, (peer) => {
          peer.ips.push({ family: AF_INET6, address: text, cidr: 64 });
          peer.endpoint = `[${text}]:443`;
        });
        const { fast, table } = both(dump);
        expect(fast).to.deep.equal(table);
        expect(JSON.stringify(fast)).to.contain(`"${text}"`);
      }),
      { numRuns: 1000 },
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

describe('kernel/wireguard-dump: a DumpMemo reuses unchanged peers across reads', () => {
  const table = (messages: Buffer[]): unknown =>
    parseDevice(
      'wgx',
      messages.map((attributes) => ({ cmd: WG_CMD_GET_DEVICE, version: 1, attributes })),
    );
  /** Peer i's traffic moved on by `bytes` (its entry's bytes change). */
  const moved =
    (indices: number[], bytes: number) =>
    (peer: ReturnType<typeof generatedPeer>): void => {
      const i = indices.find((index) => generatedPeer(index).key === peer.key);
      if (i !== undefined) peer.rx += bytes;
    };

  it('equals the table codec read after read, reusing exactly the peers whose bytes did not change', () => {
    const memo = new DumpMemo();
    const first = decodeDeviceDump('wgx', generatedDump(300, 40), memo);
    expect(first).to.deep.equal(table(generatedDump(300, 40)));
    expect(memo.reused).to.equal(0);

    // Traffic on three peers: the other entries (301: peer 39 continues in message 2) are taken
    // as they were, the very same objects.
    const changed = generatedDump(300, 40, moved([5, 77, 299], 1500));
    const second = decodeDeviceDump('wgx', changed, memo);
    expect(second).to.deep.equal(table(changed));
    expect(memo.reused).to.equal(298);
    for (const i of [0, 6, 76, 298]) expect(second.peers[i]).to.equal(first.peers[i]);
    for (const i of [5, 77, 299]) expect(second.peers[i]).to.not.equal(first.peers[i]);

    // Fewer peers, then more again: positions past the end decode afresh.
    const fewer = generatedDump(250, 40, moved([5, 77, 299], 1500));
    expect(decodeDeviceDump('wgx', fewer, memo)).to.deep.equal(table(fewer));
    expect(memo.reused).to.equal(251);
    const more = generatedDump(320, 40);
    expect(decodeDeviceDump('wgx', more, memo)).to.deep.equal(table(more));
    expect(memo.reused).to.equal(249); // all but 5 and 77 (changed back) of the 251 kept
  });

  it('merges a peer continued in the next message into a new object, never into a kept one', () => {
    const memo = new DumpMemo();
    const messages = generatedDump(300, 148); // peer 147 (3 allowed IPs) is split over messages 1 and 2
    const first = decodeDeviceDump('wgx', messages, memo);
    expect(first.peers[147]!.allowedIps).to.have.length(3);
    const merged = structuredClone(first.peers[147]);
    // Traffic on peer 5 changes message 1 only: peer 147's first part is reused from it, its
    // continuation from the unchanged message 2 (301 entries for 300 peers, one decoded afresh).
    const changed = generatedDump(300, 148, moved([5], 1500));
    const second = decodeDeviceDump('wgx', changed, memo);
    expect(second).to.deep.equal(table(changed));
    expect(memo.reused).to.equal(300);
    expect(second.peers[147]!.allowedIps).to.have.length(generatedPeer(147).ips.length);
    // The merged peer is a new object; the one handed out before was not changed by the merge.
    expect(second.peers[147]).to.not.equal(first.peers[147]);
    expect(first.peers[147]).to.deep.equal(merged);
  });

  it('takes a dump that is byte for byte the previous one whole: new device and array, same peers', () => {
    const memo = new DumpMemo();
    const messages = generatedDump(300, 148);
    const first = decodeDeviceDump('wgx', messages, memo);
    const copies = messages.map((message) => Buffer.from(message)); // received afresh
    const again = decodeDeviceDump('wgx', copies, memo);
    expect(again).to.deep.equal(table(messages));
    expect(memo.reused).to.equal(301);
    expect(again).to.not.equal(first);
    expect(again.peers).to.not.equal(first.peers);
    again.peers.forEach((peer, i) => expect(peer).to.equal(first.peers[i]));
    // What a caller does with its array does not reach the next read.
    again.peers.length = 0;
    expect(decodeDeviceDump('wgx', copies, memo)).to.deep.equal(table(messages));
    // Under another name (a dump carries its own; the name given is the fallback) it is decoded.
    const other = decodeDeviceDump('wgy', copies, memo);
    expect(other).to.deep.equal(table(messages));
    expect(memo.reused).to.equal(301); // per message, not whole
  });

  it('keeps what it had when a dump fails to decode', () => {
    const memo = new DumpMemo();
    const messages = generatedDump(20, 10);
    decodeDeviceDump('wgx', messages, memo);
    const broken = messages.map((m) => Buffer.from(m));
    broken[1] = broken[1]!.subarray(0, broken[1]!.length - 3);
    expect(() => decodeDeviceDump('wgx', broken, memo)).to.throw(NetlinkProtocolError);
    expect(decodeDeviceDump('wgx', messages, memo)).to.deep.equal(table(messages));
    expect(memo.reused).to.equal(21); // peer 9 continues in message 2
  });

  it('equals the table codec over any sequence of reads (property)', () => {
    const read = fc.record({
      count: fc.integer({ min: 0, max: 40 }),
      perMessage: fc.integer({ min: 1, max: 12 }),
      traffic: fc.array(fc.nat({ max: 39 }), { maxLength: 6 }),
    });
    fc.assert(
      fc.property(fc.array(read, { minLength: 1, maxLength: 5 }), (reads) => {
        const memo = new DumpMemo();
        for (const { count, perMessage, traffic } of reads) {
          const messages = generatedDump(count, perMessage, moved(traffic, 64));
          expect(decodeDeviceDump('wgx', messages, memo)).to.deep.equal(table(messages));
        }
      }),
      { numRuns: 300 },
    );
  });
});

// Issue 31: the list's preshared_key comes from WGPEER_A_PRESHARED_KEY, which the kernel's dump
// always carries (32 bytes, zeros for none); the key itself never becomes a JS value.
describe('kernel/wireguard-dump: preshared keys (issue 31)', () => {
  it('marks the peers whose key is not all zeros, and only them', () => {
    const device = decodeDeviceDump('wgx', generatedDump(12, 5));
    const marked = device.peers.map((peer) => peer.presharedKey === true);
    expect(marked).to.deep.equal(Array.from({ length: 12 }, (_, i) => i % 5 === 1));
    for (const peer of device.peers) {
      expect(Object.values(peer).some((value) => Buffer.isBuffer(value))).to.equal(false);
    }
  });

  it('keeps the shape of a peer without one as it was (no presharedKey property)', () => {
    const [first] = decodeDeviceDump('wgx', generatedDump(1)).peers;
    expect(first).to.not.have.property('presharedKey');
  });

  it('hands an adopting start the keys themselves, by public key, zeroed in the messages read', () => {
    const messages = generatedDump(12, 5);
    const device = decodeDeviceDump('wgx', messages);
    const keys = takePresharedKeys(messages);
    const expected = device.peers.filter((p) => p.presharedKey === true).map((p) => p.publicKey);
    expect([...keys.keys()]).to.deep.equal(expected);
    for (const key of keys.values()) expect(key.equals(Buffer.alloc(32, 0x5a))).to.equal(true);
    expect(decodeDeviceDump('wgx', messages).peers.some((p) => p.presharedKey)).to.equal(false);
  });
});
