import { expect } from 'chai';
import fc from 'fast-check';
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { parseDevice } from '../../../src/kernel/wireguard';
import { decodeDeviceDump } from '../../../src/kernel/wireguard-dump';
import { AF_INET6 } from '../../../src/kernel/rtnetlink';
import {
  WGPEER_A_PUBLIC_KEY,
  WG_CMD_GET_DEVICE,
  bytesToIpv6,
} from '../../../src/kernel/wireguard-schema';
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

  it('writes IPv6 allowed IPs and endpoints as the table codec does (property)', () => {
    // Groups drawn mostly from 0 so that runs of zero groups of every length and place occur.
    const group = fc.oneof(fc.constant(0), fc.constant(0), fc.integer({ min: 0, max: 0xffff }));
    fc.assert(
      fc.property(fc.array(group, { minLength: 8, maxLength: 8 }), (groups) => {
        const raw = Buffer.alloc(16);
        groups.forEach((value, index) => raw.writeUInt16BE(value, index * 2));
        const text = bytesToIpv6(raw);
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
