/**
 * Throttling after the cap (issue 19) replayed from a transcript recorded in the VM. Every
 * expectation is checked against `nft -j list table ...` taken at the same moments (the oracle).
 */
import { expect } from 'chai';
import { replay } from '../../support/transcripts';
import { PEER_A } from '../../transcripts/quota';
import {
  THROTTLE_CAP,
  THROTTLE_NEW_RATE,
  THROTTLE_RATE,
  type QuotaThrottleResult,
  quotaThrottle,
} from '../../transcripts/throttle';

type NftEntry = Record<string, Record<string, unknown>>;

const QUOTA = `q_${PEER_A.replace(/\./g, '_')}`;
const UP = `tu_${PEER_A.replace(/\./g, '_')}`;
const DOWN = `td_${PEER_A.replace(/\./g, '_')}`;

function entries(oracle: Record<string, unknown>, step: string, kind: string): NftEntry[string][] {
  const list = (oracle[step] as { nftables: NftEntry[] }).nftables;
  return list.filter((e) => e[kind]).map((e) => e[kind]!);
}

function named(oracle: Record<string, unknown>, step: string, kind: string, name: string) {
  return entries(oracle, step, kind).find((e) => e['name'] === name);
}

/** The map's elements as [key, object name] pairs, as nft prints them. */
function elements(oracle: Record<string, unknown>, step: string, map: string): unknown[] {
  return (named(oracle, step, 'map', map)?.['elem'] as unknown[] | undefined) ?? [];
}

describe('kernel/quota: throttling after the cap (recorded transcript)', () => {
  let result: QuotaThrottleResult;
  let oracle: Record<string, unknown>;

  before(async () => {
    ({ result, oracle } = await replay(quotaThrottle));
  });

  it('makes the limit objects nft reads as `rate over <rate> bytes/second burst 64 kbytes`', () => {
    for (const name of [UP, DOWN]) {
      expect(named(oracle, 'set', 'limit', name)).to.include({
        rate: THROTTLE_RATE,
        per: 'second',
        rate_unit: 'bytes',
        burst: 64,
        burst_unit: 'kbytes',
        inv: true,
      });
    }
  });

  it('leads the address to its quota through throttle_caps, not caps, and to its limits', () => {
    expect(elements(oracle, 'set', 'throttle_caps')).to.deep.equal([[PEER_A, QUOTA]]);
    expect(elements(oracle, 'set', 'throttle_up')).to.deep.equal([[PEER_A, UP]]);
    expect(elements(oracle, 'set', 'throttle_down')).to.deep.equal([[PEER_A, DOWN]]);
    expect(elements(oracle, 'set', 'caps')).to.deep.equal([]);
    expect(result.caps.set[PEER_A]).to.deep.equal({
      quotaBytes: THROTTLE_CAP,
      usedBytes: 0,
      enforced: true,
      throttleBytesPerSecond: THROTTLE_RATE,
      throttled: false,
    });
  });

  it('lists the cap as throttled once nft shows it used up', () => {
    const quota = named(oracle, 'throttled', 'quota', QUOTA);
    expect(quota?.['used']).to.equal(THROTTLE_CAP);
    expect(result.caps.throttled[PEER_A]).to.include({
      usedBytes: THROTTLE_CAP,
      throttled: true,
    });
  });

  it('a new rate holds on both limits, and the usage is kept', () => {
    for (const name of [UP, DOWN]) {
      expect(named(oracle, 'newRate', 'limit', name)).to.include({ rate: THROTTLE_NEW_RATE });
    }
    expect(named(oracle, 'newRate', 'quota', QUOTA)?.['used']).to.equal(THROTTLE_CAP);
    expect(result.caps.newRate[PEER_A]).to.include({
      throttleBytesPerSecond: THROTTLE_NEW_RATE,
      usedBytes: THROTTLE_CAP,
      throttled: true,
    });
  });

  it('reads the rate back with a new socket, from the quota object alone', () => {
    expect(result.caps.restarted).to.deep.equal(result.caps.newRate);
  });

  it('back to block: caps leads to the quota, the limits and throttle elements are gone', () => {
    expect(elements(oracle, 'blocks', 'caps')).to.deep.equal([[PEER_A, QUOTA]]);
    expect(elements(oracle, 'blocks', 'throttle_caps')).to.deep.equal([]);
    expect(entries(oracle, 'blocks', 'limit')).to.deep.equal([]);
    expect(result.caps.blocks[PEER_A]).to.deep.equal({
      quotaBytes: THROTTLE_CAP,
      usedBytes: THROTTLE_CAP,
      enforced: true,
    });
    expect(entries(oracle, 'removed', 'quota')).to.deep.equal([]);
  });
});
