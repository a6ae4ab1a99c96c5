/**
 * The speed limits' class read (src/kernel/shaper/limits.ts parsePeerClasses, one cursor walk
 * per message) against what the codecs read (decodeTc, then decodeAttributes over
 * htbClassOptions, then rateOf), on every RTM_NEWTCLASS dump answer the kernel gave in the
 * recorded transcripts (6.1, in the VM), for each device they name, and on classes made here
 * with a 64-bit rate, a repeated kind and malformed attributes: the two must find the same peer
 * classes with the same rates, and refuse the same messages.
 */
import { expect } from 'chai';
import {
  NetlinkProtocolError,
  type NetlinkMessage,
  decodeAttributes,
  encodeAttributes,
} from '../../../src/netlink';
import { RTM_NEWTCLASS, tcmsg } from '../../../src/kernel/rtnetlink';
import { PARENT_CLASS, QDISC, type Side } from '../../../src/kernel/shaper/addressing';
import { parsePeerClasses } from '../../../src/kernel/shaper/limits';
import {
  TCA_HTB_CEIL64,
  TCA_HTB_PARMS,
  TCA_HTB_RATE64,
  htbClass,
  htbClassOptions,
  htbClassOptionsFor,
  rateOf,
} from '../../../src/kernel/tc/htb';
import { decodeTc, encodeTc, majorOf, minorOf } from '../../../src/kernel/tc/tc';
import { recordedAnswers } from '../../support/transcripts';

const RECORDED = ['shaper-limits', 'shaper-skeleton', 'dual-stack', 'shaper-missing-module'];

/** Every dump answer of the recorded transcripts made of RTM_NEWTCLASS messages. */
function classDumps(): NetlinkMessage[][] {
  return recordedAnswers(RECORDED, RTM_NEWTCLASS);
}

/** What the codecs read (parsePeerClasses before it walked the bytes itself). */
function byCodecs(side: Side, messages: NetlinkMessage[]): Map<number, number> {
  const found = new Map<number, number>();
  for (const message of messages) {
    const tc = decodeTc(message);
    if (tc.ifindex !== side.ifindex || tc.kind !== 'htb' || tc.parent !== PARENT_CLASS) continue;
    if (majorOf(tc.handle) !== majorOf(QDISC) || !tc.options) continue;
    found.set(minorOf(tc.handle), rateOf(decodeAttributes(htbClassOptions, tc.options, 'class')));
  }
  return found;
}

function side(ifindex: number): Side {
  return { direction: 'download', ifname: 'wg0', ifindex, keyOffset: 16 };
}

/** The answer of both readers: the classes found, or the error's class. */
function outcome(read: () => Map<number, number>): Map<number, number> | string {
  try {
    return read();
  } catch (error) {
    return error instanceof NetlinkProtocolError ? 'NetlinkProtocolError' : String(error);
  }
}

function classMessage(ifindex: number, minor: number, attributes: Buffer): NetlinkMessage {
  return {
    type: RTM_NEWTCLASS,
    flags: 0,
    seq: 1,
    pid: 0,
    payload: encodeTc({ ifindex, handle: (1 << 16) | minor, parent: PARENT_CLASS }, attributes),
  };
}

/** An attribute {len, type, value} padded to 4 bytes. */
function attribute(type: number, value: Buffer): Buffer {
  const header = Buffer.alloc(4);
  header.writeUInt16LE(4 + value.length, 0);
  header.writeUInt16LE(type, 2);
  const pad = Buffer.alloc((4 - (value.length % 4)) % 4);
  return Buffer.concat([header, value, pad]);
}

describe('the speed limits class read against the tc codecs', () => {
  const dumps = classDumps();

  it('finds the same peer classes and rates in every recorded class dump, for every device named', () => {
    expect(dumps.length).to.be.greaterThan(2);
    let classes = 0;
    for (const messages of dumps) {
      const ifindexes = new Set(messages.map((m) => tcmsg.decode(m.payload).ifindex));
      for (const ifindex of [...ifindexes, 999]) {
        const expected = byCodecs(side(ifindex), messages);
        classes += expected.size;
        expect(parsePeerClasses(side(ifindex), messages)).to.deep.equal(expected);
      }
    }
    expect(classes).to.be.greaterThan(0);
  });

  it('reads a 64-bit rate, the u32 rate, a repeated kind, and refuses what the codecs refuse', () => {
    const options = (extra: Buffer[] = []): Buffer =>
      Buffer.concat([
        encodeAttributes(htbClass, {
          kind: 'htb',
          options: htbClassOptionsFor({ rate: 125_000, ticksPerUs: 15.625 }),
        }),
        ...extra,
      ]);
    const fast = encodeAttributes(htbClass, {
      kind: 'htb',
      options: htbClassOptionsFor({ rate: 10_000_000_000, ticksPerUs: 15.625 }),
    });
    const options2 = (...members: Buffer[]): Buffer =>
      attribute(2 | 0x8000, Buffer.concat(members));
    const kind = (text: string): Buffer => attribute(1, Buffer.from(`${text}\0`));
    const cases: Buffer[] = [
      options(),
      fast,
      Buffer.concat([options(), kind('hfsc')]),
      Buffer.concat([kind('hfsc'), options()]),
      Buffer.concat([kind('htbx'), options2(attribute(TCA_HTB_PARMS, Buffer.alloc(44, 1)))]),
      Buffer.concat([kind('htb'), options2(attribute(TCA_HTB_PARMS, Buffer.alloc(43, 1)))]),
      Buffer.concat([kind('htb'), options2(attribute(TCA_HTB_PARMS, Buffer.alloc(48, 1)))]),
      Buffer.concat([kind('htb'), options2(attribute(TCA_HTB_RATE64, Buffer.alloc(4, 1)))]),
      Buffer.concat([kind('htb'), options2(attribute(TCA_HTB_CEIL64, Buffer.alloc(7, 1)))]),
      Buffer.concat([kind('htb'), options2(attribute(TCA_HTB_RATE64, Buffer.alloc(8, 2)))]),
      Buffer.concat([kind('htb'), options2()]),
      Buffer.concat([kind('htb')]),
      Buffer.concat([kind('htb'), attribute(11, Buffer.alloc(2))]),
      Buffer.concat([kind('htb'), attribute(11, Buffer.alloc(4))]),
      Buffer.concat([kind('htb'), Buffer.from([9, 0, 2, 0])]),
    ];
    const seen = new Set<string>();
    for (const attributes of cases) {
      const messages = [classMessage(7, 0x20, attributes), classMessage(8, 0x21, options())];
      const expected = outcome(() => byCodecs(side(7), messages));
      expect(outcome(() => parsePeerClasses(side(7), messages))).to.deep.equal(expected);
      seen.add(typeof expected === 'string' ? expected : `${expected.size} class`);
    }
    // The cases reach every answer: a class found, none found, and a refusal.
    expect([...seen].sort()).to.deep.equal(['0 class', '1 class', 'NetlinkProtocolError']);
    expect(parsePeerClasses(side(7), [classMessage(7, 0x20, fast)]).get(0x20)).to.equal(
      10_000_000_000,
    );
    const short = { ...classMessage(7, 1, options()), payload: Buffer.alloc(19) };
    expect(outcome(() => parsePeerClasses(side(7), [short]))).to.equal('NetlinkProtocolError');
    expect(outcome(() => byCodecs(side(7), [short]))).to.equal('NetlinkProtocolError');
  });
});
