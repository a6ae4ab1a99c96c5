/**
 * The decoder bugs `npm run fuzz` found, one reproducing case each: on bad bytes every decoder
 * must throw the codec's typed error (NetlinkProtocolError), never RangeError, a plain Error, or
 * hand back a value that fails later (an Invalid Date).
 */
import { expect } from 'chai';
import { Links } from '../../../src/kernel/link';
import { sbe32 } from '../../../src/kernel/nftables/expressions';
import { RTM_GETLINK } from '../../../src/kernel/rtnetlink';
import { parseDevice } from '../../support/wg-table-decode';
import { decodeDeviceDump } from '../../../src/kernel/wireguard/dump';
import { handshakeTime } from '../../../src/kernel/wireguard/schema';
import { NETLINK_ROUTE, NetlinkProtocolError } from '../../../src/netlink';
import { Corpus } from '../../fuzz/corpus';
import { FuzzStage } from '../../fuzz/transport';

describe('decoder bugs found by fuzzing', () => {
  it('sbe32 (nf_tables verdict codes, hook priorities) of the wrong length is a protocol error', () => {
    // Found as "RangeError: priority: expected 4 bytes, got 3" (nft.hook).
    expect(() => sbe32.decode(Buffer.from([0xff, 0xff, 0xff]), 'priority')).to.throw(
      NetlinkProtocolError,
      'priority: expected 4 bytes, got 3',
    );
    // NFT_BREAK is -2 (nf_tables.h, enum nft_verdicts), sent big-endian.
    expect(sbe32.decode(Buffer.from([0xff, 0xff, 0xff, 0xfe]), 'code')).to.equal(-2);
  });

  it('a handshake time beyond what a Date holds is a protocol error, not an Invalid Date', () => {
    // Found by wireguard.getDevice: a flipped high bit of tv_sec gave an Invalid Date, on which
    // toISOString() throws. struct __kernel_timespec is {s64 tv_sec, s64 tv_nsec}.
    const far = Buffer.alloc(16);
    far.writeBigInt64LE(1n << 60n, 0);
    expect(() => handshakeTime.decode(far, 'lastHandshake')).to.throw(NetlinkProtocolError);
    const real = Buffer.alloc(16);
    real.writeBigInt64LE(1_700_000_000n, 0);
    real.writeBigInt64LE(500_000_000n, 8);
    expect(handshakeTime.decode(real, 'lastHandshake')).to.deep.equal(new Date(1_700_000_000_500));
  });

  it('the fast dump decoder refuses that handshake time with the same error as the table codec', () => {
    // Found by wireguard.decodeDeviceDump once the fuzzer covered it: it returned an Invalid Date.
    // WGDEVICE_A_PEERS (8) { peer { PUBLIC_KEY (1), LAST_HANDSHAKE_TIME (6) } }, all nested.
    const far = Buffer.alloc(16);
    far.writeBigInt64LE(1n << 60n, 0);
    const attr = (type: number, payload: Buffer): Buffer => {
      const header = Buffer.alloc(4);
      header.writeUInt16LE(4 + payload.length, 0);
      header.writeUInt16LE(type, 2);
      const pad = Buffer.alloc((4 - (payload.length % 4)) % 4);
      return Buffer.concat([header, payload, pad]);
    };
    const NESTED = 0x8000;
    const peer = attr(0 | NESTED, Buffer.concat([attr(1, Buffer.alloc(32, 7)), attr(6, far)]));
    const dump = attr(8 | NESTED, peer);
    const errorOf = (decode: () => unknown): unknown => {
      try {
        decode();
      } catch (error) {
        return error;
      }
      return null;
    };
    const table = errorOf(() => parseDevice('wg0', [{ cmd: 0, version: 1, attributes: dump }]));
    const fast = errorOf(() => decodeDeviceDump('wg0', [dump]));
    expect(table).to.be.instanceOf(NetlinkProtocolError);
    expect(fast).to.be.instanceOf(NetlinkProtocolError);
    expect((fast as Error).message).to.equal((table as Error).message);
  });

  it('RTM_GETLINK answered by a bare ACK (no RTM_NEWLINK) is a protocol error', async () => {
    // Found by links.getLink with empty random bytes as the answer: "Error: ... sent no link".
    const stage = new FuzzStage(Corpus.load(), 'link-lifecycle', {
      protocol: NETLINK_ROUTE,
      requestType: RTM_GETLINK,
    });
    const links = new Links(stage.session(Buffer.alloc(0)).open);
    let caught: unknown;
    try {
      await links.getLink('wgrec1');
    } catch (error) {
      caught = error;
    }
    expect(caught).to.be.instanceOf(NetlinkProtocolError);
    expect((caught as Error).message).to.equal('RTM_GETLINK wgrec1: the kernel sent no link');
  });
});
