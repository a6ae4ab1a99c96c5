import { expect } from 'chai';
import {
  UDATA_PERIOD,
  UDATA_PERIOD_FROM,
  UDATA_PERIOD_START,
  UDATA_PREVIOUS_USED,
  UDATA_THROTTLE_RATE,
  decodeCapUserdata,
  encodeCapUserdata,
} from '../../../src/kernel/quota/cap-userdata';
import {
  commentUserdata,
  decodeUserdata,
  encodeUserdata,
} from '../../../src/kernel/nftables/userdata';
import { NFTNL_UDATA_COMMENT } from '../../../src/kernel/nftables/constants';
import type { CapPlan } from '../../../src/kernel/types';

const KEY = Buffer.alloc(32, 7).toString('base64');
const PLAN: CapPlan = {
  period: 'month',
  periodStart: { at: Date.parse('2026-01-31T00:00:00+01:00'), offsetMinutes: 60 },
  periodFrom: Date.parse('2026-02-28T00:00:00+01:00'),
  previousUsedBytes: 123_456_789_012,
};

describe('quota userdata codec (src/kernel/quota/cap-userdata.ts)', () => {
  it('writes a cap without a plan exactly as the owner comment nft would write', () => {
    const written = encodeCapUserdata({
      owner: KEY,
      plan: null,
      throttleBytesPerSecond: null,
      others: [],
    });
    expect(written).to.deep.equal(commentUserdata(`wg-peerd peer ${KEY}`));
  });

  it('keeps the owner comment first, so nft list still prints it, then the plan TLVs', () => {
    const written = encodeCapUserdata({
      owner: KEY,
      plan: PLAN,
      throttleBytesPerSecond: null,
      others: [],
    });
    const tlvs = decodeUserdata(written);
    expect(tlvs.map((t) => t.type)).to.deep.equal([
      0,
      UDATA_PERIOD,
      UDATA_PERIOD_START,
      UDATA_PERIOD_FROM,
      UDATA_PREVIOUS_USED,
    ]);
    expect(tlvs[0]!.value.toString()).to.equal(`wg-peerd peer ${KEY}\0`);
    // period u8 (3 = month), start s64 ms + s16 minutes, from s64 ms, previous u64, big-endian
    expect(tlvs[1]!.value).to.deep.equal(Buffer.from([3]));
    expect(tlvs[2]!.value.readBigInt64BE(0)).to.equal(BigInt(PLAN.periodStart.at));
    expect(tlvs[2]!.value.readInt16BE(8)).to.equal(60);
    expect(tlvs[3]!.value.readBigInt64BE(0)).to.equal(BigInt(PLAN.periodFrom));
    expect(tlvs[4]!.value.readBigUInt64BE(0)).to.equal(123_456_789_012n);
    expect(written.length).to.be.at.most(256); // NFT_USERDATA_MAXLEN
  });

  it('reads back what it writes: owner, plan, negative offsets, no previous period yet', () => {
    for (const plan of [
      PLAN,
      { ...PLAN, periodStart: { at: 0, offsetMinutes: -570 }, previousUsedBytes: null },
      { ...PLAN, period: 'day' as const },
      { ...PLAN, period: 'week' as const },
    ]) {
      const read = decodeCapUserdata(
        encodeCapUserdata({ owner: KEY, plan, throttleBytesPerSecond: null, others: [] }),
      );
      expect(read).to.deep.equal({ owner: KEY, plan, throttleBytesPerSecond: null, others: [] });
    }
  });

  it('keeps TLVs of other types (a later version) across a rewrite', () => {
    const other = { type: 0x41, value: Buffer.alloc(8, 1) };
    const read = decodeCapUserdata(
      encodeCapUserdata({ owner: KEY, plan: PLAN, throttleBytesPerSecond: null, others: [other] }),
    );
    expect(read.others).to.deep.equal([other]);
    const rewritten = decodeCapUserdata(encodeCapUserdata({ ...read, plan: null }));
    expect(rewritten).to.deep.equal({
      owner: KEY,
      plan: null,
      throttleBytesPerSecond: null,
      others: [other],
    });
  });

  it('reads a plan with a field missing or of the wrong size as no plan', () => {
    const whole = decodeUserdata(
      encodeCapUserdata({ owner: KEY, plan: PLAN, throttleBytesPerSecond: null, others: [] }),
    );
    for (const drop of [UDATA_PERIOD, UDATA_PERIOD_START, UDATA_PERIOD_FROM]) {
      const data = Buffer.concat(
        whole
          .filter((t) => t.type !== drop)
          .map((t) => Buffer.concat([Buffer.from([t.type, t.value.length]), t.value])),
      );
      expect(decodeCapUserdata(data).plan, `without ${drop}`).to.equal(null);
      expect(decodeCapUserdata(data).owner).to.equal(KEY);
    }
    const badPeriod = Buffer.from([UDATA_PERIOD, 1, 9]);
    expect(decodeCapUserdata(badPeriod).plan).to.equal(null);
  });

  it('reads no owner from a comment that is not ours, and keeps that comment', () => {
    const read = decodeCapUserdata(commentUserdata('set by hand'));
    expect(read.owner).to.equal(null);
    expect(read.others).to.have.length(1);
    expect(decodeCapUserdata(undefined)).to.deep.equal({
      owner: null,
      plan: null,
      throttleBytesPerSecond: null,
      others: [],
    });
  });

  it('adds the throttle rate as a u64 TLV 0x40 after the comment, big-endian', () => {
    const data = encodeCapUserdata({
      owner: KEY,
      plan: null,
      throttleBytesPerSecond: 125_000,
      others: [],
    });
    const comment = commentUserdata(`wg-peerd peer ${KEY}`);
    expect(data.subarray(0, comment.length)).to.deep.equal(comment);
    expect([...data.subarray(comment.length)]).to.deep.equal([
      UDATA_THROTTLE_RATE,
      8,
      ...[0, 0, 0, 0, 0, 0x01, 0xe8, 0x48], // 125000, big-endian
    ]);
    expect(decodeCapUserdata(data)).to.deep.equal({
      owner: KEY,
      plan: null,
      throttleBytesPerSecond: 125_000,
      others: [],
    });
  });

  it('keeps a billing period and a throttle rate side by side', () => {
    const both = { owner: KEY, plan: PLAN, throttleBytesPerSecond: 5000, others: [] };
    expect(decodeCapUserdata(encodeCapUserdata(both))).to.deep.equal(both);
  });

  it('reads a cap without the rate (written before throttling existed) as one that blocks', () => {
    expect(
      decodeCapUserdata(commentUserdata(`wg-peerd peer ${KEY}`)).throttleBytesPerSecond,
    ).to.equal(null);
  });

  it('reads a rate of the wrong length as none (a cap that blocks)', () => {
    const data = encodeUserdata([
      { type: NFTNL_UDATA_COMMENT, value: Buffer.from(`wg-peerd peer ${KEY}\0`) },
      { type: UDATA_THROTTLE_RATE, value: Buffer.from([1, 2, 3, 4]) },
    ]);
    expect(decodeCapUserdata(data).throttleBytesPerSecond).to.equal(null);
  });
});
