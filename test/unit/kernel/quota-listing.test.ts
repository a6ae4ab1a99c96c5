/**
 * The cap read's decoders (src/kernel/quota/listing.ts) against the attribute tables
 * (decodeAttributes over quotaListing / setElementListAttributes), on every GETOBJ and GETSETELEM
 * dump answer the kernel gave in the recorded transcripts (6.1, in the VM): the two must read
 * the same numbers, names, userdata and map targets; and a listing remembered between reads must
 * give what a fresh one gives, reusing only what did not move.
 */
import { expect } from 'chai';
import { type NetlinkMessage, decodeAttributes } from '../../../src/netlink';
import { decodeNftMessage } from '../../../src/kernel/nftables/client';
import {
  NFT_MSG_NEWOBJ,
  NFT_MSG_NEWSETELEM,
  NFT_OBJECT_QUOTA,
  NFT_QUOTA_F_DEPLETED,
  nftMessageType,
} from '../../../src/kernel/nftables/constants';
import {
  quotaAttributes,
  quotaListing,
  setElementListAttributes,
} from '../../../src/kernel/nftables/schema';
import { addressOfObject, quotaTableName } from '../../../src/kernel/quota';
import {
  CapListing,
  decodeObjrefElements,
  extrasAt,
  extrasIn,
  keyOfName,
} from '../../../src/kernel/quota/listing';
import { encodeCapUserdata } from '../../../src/kernel/quota/cap-userdata';
import { elementTargets } from '../../../src/kernel/quota/objects';
import { ipv4ToNumber } from '../../../src/kernel/ipv4';
import type { KernelDataCap } from '../../../src/kernel/types';
import { recordedAnswers } from '../../support/transcripts';

const RECORDED = ['quota-caps', 'quota-setup', 'quota-reset', 'quota-throttle', 'dual-stack'];

function answers(type: number): NetlinkMessage[][] {
  return recordedAnswers(RECORDED, type);
}

/** The caps of one object dump as the table codec reads them (listCaps before issue 29). */
function byTables(
  table: string,
  messages: NetlinkMessage[],
  routes: Map<string, string | undefined>,
): Map<string, KernelDataCap> {
  const caps = new Map<string, KernelDataCap>();
  for (const message of messages) {
    const object = decodeNftMessage(quotaListing, message, 'object');
    const address = object.name ? addressOfObject(object.name) : null;
    if (!address || !object.data || object.table !== table || object.type !== NFT_OBJECT_QUOTA) {
      continue;
    }
    const data = decodeAttributes(quotaAttributes, object.data, 'quota');
    const { plan, throttleBytesPerSecond: throttle } = extrasIn(object.userdata);
    const quotaBytes = Number(data.bytes ?? 0n);
    const usedBytes = Number(data.consumed ?? 0n);
    const enforced = routes.get(address) === object.name;
    const depleted = ((data.flags ?? 0) & NFT_QUOTA_F_DEPLETED) !== 0 || usedBytes >= quotaBytes;
    caps.set(
      address,
      throttle === null
        ? { quotaBytes, usedBytes, enforced, ...plan }
        : {
            quotaBytes,
            usedBytes,
            enforced,
            ...plan,
            throttleBytesPerSecond: throttle,
            throttled: enforced && depleted,
          },
    );
  }
  return caps;
}

/** The table of a dump's first object. */
function tableOf(messages: NetlinkMessage[]): string {
  return decodeNftMessage(quotaListing, messages[0]!, 'object').table ?? '';
}

/** Routes for `byTables`: every listed address leads to its own object, and one does not. */
function routesFor(caps: Iterable<string>): Map<string, string | undefined> {
  const routes = new Map<string, string | undefined>();
  [...caps].forEach((address, i) => {
    if (i !== 1) routes.set(address, `q_${address.split('.').join('_')}`);
  });
  return routes;
}

function keyed(routes: Map<string, string | undefined>): Map<number, string> {
  return new Map([...routes].map(([address, name]) => [ipv4ToNumber(address), name ?? '']));
}

describe('cap read decoders (src/kernel/quota/listing.ts) against the attribute tables', () => {
  const objectDumps = answers(nftMessageType(NFT_MSG_NEWOBJ));
  const elementDumps = answers(nftMessageType(NFT_MSG_NEWSETELEM));

  it('has recorded dumps of quota objects, throttling caps among them, and of maps', () => {
    expect(objectDumps.length).to.be.greaterThan(5);
    expect(elementDumps.length).to.be.greaterThan(5);
    const all = objectDumps.flat().map((message) => extrasIn(quotaListingOf(message).userdata));
    expect(all.some((extras) => extras.throttleBytesPerSecond !== null)).to.equal(true);
  });

  it('reads the same map targets from every recorded map dump as elementTargets', () => {
    for (const messages of elementDumps) {
      const tables = elementTargets(
        messages.flatMap(
          (message) =>
            decodeNftMessage(setElementListAttributes, message, 'elements').elements ?? [],
        ),
      );
      const expected = new Map(
        [...tables]
          .filter((entry): entry is [string, string] => entry[1] !== undefined)
          .map(([address, name]) => [ipv4ToNumber(address), name]),
      );
      expect(decodeObjrefElements(messages)).to.deep.equal(expected);
    }
  });

  it('reads the same caps from every recorded object dump as the attribute tables', () => {
    for (const messages of objectDumps) {
      const table = tableOf(messages);
      const expected = byTables(table, messages, new Map());
      const routes = routesFor(expected.keys());
      const wanted = byTables(table, messages, routes);
      const listing = new CapListing(table);
      const listed = listing.objects(messages);
      expect(listing.caps(listed, keyed(routes), keyed(routes))).to.deep.equal(wanted);
    }
  });

  it('leaves out objects of another table, and a table whose name only begins the same', () => {
    const messages = objectDumps.find((dump) => dump.length > 1)!;
    const table = tableOf(messages);
    expect(new CapListing(`${table}x`).objects(messages)).to.deep.equal([]);
    expect(new CapListing(table.slice(0, -1)).objects(messages)).to.deep.equal([]);
    expect(new CapListing(quotaTableName('other0')).objects(messages)).to.deep.equal([]);
  });

  it('gives across reads what a fresh listing gives, and the same cap object where nothing moved', () => {
    const messages = objectDumps.find((dump) => dump.length > 1)!;
    const table = tableOf(messages);
    const remembered = new CapListing(table);
    const routes = keyed(routesFor(byTables(table, messages, new Map()).keys()));
    const first = remembered.caps(remembered.objects(messages), routes, routes);
    const again = remembered.caps(remembered.objects(messages), routes, routes);
    expect(again).to.deep.equal(first);
    for (const [address, cap] of again) expect(cap).to.equal(first.get(address));
    // One object counted more (its consumed rewritten in the reply): only its cap is new.
    const moved = messages.map((message, i) => (i === 0 ? withConsumed(message, 1n) : message));
    const fresh = new CapListing(table);
    const afterMove = remembered.caps(remembered.objects(moved), routes, routes);
    expect(afterMove).to.deep.equal(fresh.caps(fresh.objects(moved), routes, routes));
    const changed = [...afterMove].filter(([address, cap]) => cap !== first.get(address));
    expect(changed).to.have.length(1);
    // An object gone from the dump is gone from the read.
    const fewer = remembered.caps(remembered.objects(messages.slice(1)), routes, routes);
    expect(fewer.size).to.equal(first.size - 1);
  });
});

describe('the cap read reads names and userdata in place as the codecs read them', () => {
  const userdatas = answers(nftMessageType(NFT_MSG_NEWOBJ))
    .flat()
    .map((message) => quotaListingOf(message).userdata)
    .filter((userdata): userdata is Buffer => userdata !== undefined);
  const planned = encodeCapUserdata({
    owner: 'A'.repeat(43) + '=',
    plan: {
      period: 'month',
      periodStart: { at: Date.UTC(2026, 0, 31, 23), offsetMinutes: -90 },
      periodFrom: Date.UTC(2026, 10, 1),
      previousUsedBytes: 123_456_789,
    },
    throttleBytesPerSecond: 125_000,
    others: [],
  });

  /** extrasAt of `userdata` placed amid other bytes, as it lies in a dump reply. */
  function inPlace(userdata: Buffer | undefined): ReturnType<typeof extrasAt> {
    if (userdata === undefined) return extrasAt(Buffer.alloc(8, 0xe0), -1, -1);
    const around = Buffer.concat([Buffer.alloc(5, 0xe1), userdata, Buffer.alloc(7, 0x40)]);
    return extrasAt(around, 5, 5 + userdata.length);
  }

  it('reads the plan and rate of every recorded object, and of a planned throttling cap, as extrasIn', () => {
    expect(userdatas.length).to.be.greaterThan(5);
    for (const userdata of [...userdatas, planned, undefined]) {
      expect(inPlace(userdata)).to.deep.equal(extrasIn(userdata));
    }
    expect(inPlace(planned).plan?.plan.periodFrom).to.equal(Date.UTC(2026, 10, 1));
  });

  it('reads every cut, every changed length byte and repeated TLVs as extrasIn', () => {
    const cases: Buffer[] = [];
    for (let cut = 0; cut <= planned.length; cut++) cases.push(planned.subarray(0, cut));
    for (let i = 1; i < planned.length; i++) {
      for (const delta of [-1, 1]) {
        const changed = Buffer.from(planned);
        changed[i] = (changed[i]! + delta) & 0xff;
        cases.push(changed);
      }
    }
    // A later TLV of a type replaces the earlier one, a malformed rate after a good one too.
    const tlv = (type: number, value: Buffer): Buffer =>
      Buffer.concat([Buffer.from([type, value.length]), value]);
    cases.push(Buffer.concat([planned, tlv(0x40, Buffer.alloc(7, 1))]));
    cases.push(Buffer.concat([planned, tlv(0xe0, Buffer.from([2]))]));
    cases.push(Buffer.concat([planned, tlv(0xe0, Buffer.from([9]))]));
    cases.push(Buffer.concat([planned, tlv(0xe3, Buffer.alloc(8, 0xff))]));
    cases.push(Buffer.concat([planned, tlv(0xe2, Buffer.alloc(8, 0x7f))]));
    cases.push(Buffer.concat([planned, tlv(0x41, Buffer.alloc(3, 1))]));
    for (const userdata of cases) expect(inPlace(userdata)).to.deep.equal(extrasIn(userdata));
  });

  it('reads a quota object name as addressOfObject does, and its map key with it', () => {
    const names = [
      'q_10_8_0_2',
      'q_0_0_0_0',
      'q_255_255_255_255',
      'q_1_2_3_4',
      'q_192_168_100_200',
      'q_256_1_1_1',
      'q_01_2_3_4',
      'q_1_2_3_04',
      'q_1_2_3_1000',
      'q_1_2_3',
      'q_1_2_3_4_5',
      'q_1_2_3_4x',
      'q__1_2_3',
      'q_1__2_3_4',
      'x_1_2_3_4',
      'Q_1_2_3_4',
      'q_1_2_3_4 ',
      'q_١_2_3_4',
      'q_1_2_3_é',
      'tu_1_2_3_4',
      'q_1_2_3_',
      '',
    ];
    for (const name of names) {
      const bytes = Buffer.concat([
        Buffer.from('_9'),
        Buffer.from(name, 'utf8'),
        Buffer.from('_7'),
      ]);
      const key = keyOfName(bytes, 2, bytes.length - 2);
      const address = addressOfObject(name);
      expect(key < 0 ? null : key, name).to.equal(address === null ? null : ipv4ToNumber(address));
    }
  });
});

function quotaListingOf(message: NetlinkMessage): { userdata?: Buffer } {
  return decodeNftMessage(quotaListing, message, 'object');
}

/** A copy of an object dump message whose NFTA_QUOTA_CONSUMED is `consumed`. */
function withConsumed(message: NetlinkMessage, consumed: bigint): NetlinkMessage {
  const payload = Buffer.from(message.payload);
  // NFTA_QUOTA_CONSUMED (4) inside NFTA_OBJ_DATA: {len 12, type 4} then a be64.
  for (let i = 0; i + 12 <= payload.length; i += 4) {
    if (payload.readUInt16LE(i) === 12 && payload.readUInt16LE(i + 2) === 4) {
      payload.writeBigUInt64BE(consumed, i + 4);
      return { ...message, payload };
    }
  }
  throw new Error('no NFTA_QUOTA_CONSUMED in the message');
}
