/**
 * The cap reset (issue 19) replayed from a transcript recorded in the VM: NFT_MSG_GETOBJ_RESET
 * answers the closing usage and zeroes the count in one step. Every expectation is checked
 * against `nft -j list table ...` taken at the same moments (the oracle).
 */
import { expect } from 'chai';
import { replay } from '../../support/transcripts';
import {
  PEER_A,
  PING_PACKET_BYTES,
  type QuotaResetResult,
  quotaReset,
} from '../../transcripts/quota';

interface NftQuota {
  name: string;
  bytes: number;
  used: number;
}

/** The quota of PEER_A as nft printed it at `step`. */
function nftQuota(oracle: Record<string, unknown>, step: string): NftQuota {
  const list = (oracle[step] as { nftables: Array<{ quota?: NftQuota }> }).nftables;
  const quota = list.find((e) => e.quota?.name === `q_${PEER_A.replace(/\./g, '_')}`)?.quota;
  if (!quota) throw new Error(`nft lists no quota of ${PEER_A} at ${step}`);
  return quota;
}

describe('kernel/quota: a cap reset read and zeroed in one step (NFT_MSG_GETOBJ_RESET, recorded)', () => {
  let result: QuotaResetResult;
  let oracle: Record<string, unknown>;

  before(async () => {
    ({ result, oracle } = await replay(quotaReset));
  });

  it('answers the closing usage nft showed before the reset: the whole cap of a depleted quota', () => {
    const before = nftQuota(oracle, 'depleted');
    expect(before.used).to.equal(before.bytes); // the pings ran it out
    expect(result.resets.depleted).to.deep.equal({ quotaBytes: 15_000, usedBytes: before.used });
  });

  it('leaves the count at zero, as nft reads it, with the cap unchanged', () => {
    expect(nftQuota(oracle, 'reset')).to.include({ bytes: 15_000, used: 0 });
    expect(result.caps.reset[PEER_A]).to.deep.equal({
      quotaBytes: 15_000,
      usedBytes: 0,
      enforced: true,
    });
  });

  it('counts traffic again from zero after the reset: the peer is no longer cut off', () => {
    const used = nftQuota(oracle, 'countedAgain').used;
    // 3 requests and 3 replies of PING_PACKET_BYTES each passed.
    expect(used).to.equal(6 * PING_PACKET_BYTES);
    expect(result.caps.countedAgain[PEER_A]?.usedBytes).to.equal(used);
  });

  it('resets nothing for an address without a cap, nor a cap another key owns', () => {
    expect(result.resets.noCap).to.equal(null);
    expect(result.resets.otherKey).to.equal(null);
    expect(nftQuota(oracle, 'untouched').used).to.equal(nftQuota(oracle, 'countedAgain').used);
    expect(Object.keys(result.caps.untouched)).to.deep.equal([PEER_A]);
  });
});
