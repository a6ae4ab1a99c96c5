import { expect } from 'chai';
import path from 'node:path';
import { decodeNftMessage } from '../../../src/kernel/nftables/client';
import {
  NFNL_SUBSYS_NFTABLES,
  NFT_MSG_DELSETELEM,
  NFT_MSG_DELTABLE,
  NFT_MSG_NEWSETELEM,
} from '../../../src/kernel/nftables/constants';
import { setElementListAttributes } from '../../../src/kernel/nftables/schema';
import { parseMessages, type NetlinkMessage } from '../../../src/netlink';
import { TranscriptPlayer } from '../../../src/netlink/transcript';
import { FIXTURES, replay } from '../../support/transcripts';
import { ANA, HOUR, SHOP, T0, type ExpiryResult, peerExpiry } from '../../transcripts/expiry';

// Peer expiry enforced by the kernel (issue 31), replayed from a transcript recorded as root on
// a host with nf_tables (kernel 6.18, in a network namespace of its own): every expectation is
// checked against what `nft -j list table ip|ip6 wg_peerd_expiry_wgex31` printed at that moment.

type NftEntry = Record<string, Record<string, unknown>>;

interface Listing {
  ip: { nftables: NftEntry[] } | null;
  ip6: { nftables: NftEntry[] } | null;
}

/** The elements of one set as nft printed them. */
function elements(
  listing: unknown,
  family: 'ip' | 'ip6',
  set: 'expiring' | 'valid',
): Array<Record<string, unknown>> {
  const all = (listing as Listing)[family]?.nftables ?? [];
  const found = all.find((e) => e['set']?.['name'] === set)?.['set'];
  return ((found?.['elem'] ?? []) as Array<{ elem: Record<string, unknown> }>).map((e) => e.elem);
}

const NETLINK_NETFILTER = 12;

/** The recorded transactions: each as its nf_tables messages (BEGIN and END left out). */
function recordedBatches(): NetlinkMessage[][] {
  const { transcript } = TranscriptPlayer.load(path.join(FIXTURES, `${peerExpiry.name}.json`));
  const batches: NetlinkMessage[][] = [];
  for (const socket of transcript.sockets) {
    if (socket.protocol !== NETLINK_NETFILTER) continue;
    for (const exchange of socket.exchanges) {
      const messages = parseMessages(Buffer.from(exchange.sent, 'hex'));
      if (messages.length < 3) continue;
      batches.push(messages.filter((m) => m.type >> 8 === NFNL_SUBSYS_NFTABLES));
    }
  }
  return batches;
}

const typeOf = (m: NetlinkMessage): number => m.type & 0xff;

describe('peer expiry in nf_tables, over recorded kernel exchanges (issue 31)', () => {
  let result: ExpiryResult;
  let oracle: Record<string, unknown>;

  before(async () => {
    ({ result, oracle } = await replay(peerExpiry));
  });

  it('makes both tables with the first expiry: the drop rule matches a peer in expiring and not in valid, in both directions', () => {
    const ip = (oracle.set as Listing).ip!.nftables;
    const rules = ip.filter((e) => e['rule']).map((e) => e['rule']!);
    expect(rules.map((r) => [r['chain'], r['expr']])).to.deep.equal([
      [
        'from_peers',
        [
          { match: { op: '==', left: { meta: { key: 'iifname' } }, right: 'wgex31' } },
          {
            match: {
              op: '==',
              left: { payload: { protocol: 'ip', field: 'saddr' } },
              right: '@expiring',
            },
          },
          {
            match: {
              op: '!=',
              left: { payload: { protocol: 'ip', field: 'saddr' } },
              right: '@valid',
            },
          },
          { drop: null },
        ],
      ],
      [
        'to_peers',
        [
          { match: { op: '==', left: { meta: { key: 'oifname' } }, right: 'wgex31' } },
          {
            match: {
              op: '==',
              left: { payload: { protocol: 'ip', field: 'daddr' } },
              right: '@expiring',
            },
          },
          {
            match: {
              op: '!=',
              left: { payload: { protocol: 'ip', field: 'daddr' } },
              right: '@valid',
            },
          },
          { drop: null },
        ],
      ],
    ]);
    const chains = ip.filter((e) => e['chain']).map((e) => e['chain']!);
    expect(chains.map((c) => [c['name'], c['hook'], c['prio'], c['policy']])).to.deep.equal([
      ['from_peers', 'prerouting', -10, 'accept'],
      ['to_peers', 'postrouting', -10, 'accept'],
    ]);
    const valid = ip.find((e) => e['set']?.['name'] === 'valid')!['set']!;
    expect(valid['flags']).to.deep.equal(['timeout']);
  });

  it("keeps each peer's owner and instant in its expiring element, and gives its valid element the time left as a timeout", () => {
    expect(elements(oracle.set, 'ip', 'expiring')).to.deep.equal([
      { val: ANA.address, comment: 'expires 2027-01-15T09:00:00.000Z' },
      { val: SHOP.address, comment: 'expires 2027-01-15T08:00:01.000Z' },
    ]);
    expect(elements(oracle.set, 'ip', 'valid').map((e) => [e['val'], e['timeout']])).to.deep.equal([
      [ANA.address, 3600],
      [SHOP.address, 1],
    ]);
    // The dual-stack peer's /128 in the ip6 table, in the same transaction.
    expect(elements(oracle.set, 'ip6', 'expiring').map((e) => e['val'])).to.deep.equal(['fd81::2']);
    expect(elements(oracle.set, 'ip6', 'valid').map((e) => e['timeout'])).to.deep.equal([3600]);
    expect(result.afterSet).to.deep.equal([
      { address: ANA.address, publicKey: ANA.publicKey, expiresAt: T0 + HOUR },
      { address: SHOP.address, publicKey: SHOP.publicKey, expiresAt: T0 + 1_000 },
    ]);
    expect(result.validBefore).to.deep.equal([ANA.address, SHOP.address]);
  });

  it('sends the timeout in ms as NFTA_SET_ELEM_TIMEOUT', () => {
    const first = recordedBatches()[0]!;
    const timeouts = first
      .filter((m) => typeOf(m) === NFT_MSG_NEWSETELEM)
      .flatMap((m) => decodeNftMessage(setElementListAttributes, m, 'elements').elements ?? [])
      .flatMap((e) => (e.timeout === undefined ? [] : [e.timeout]));
    expect(timeouts).to.deep.equal([BigInt(HOUR), BigInt(HOUR)]);
  });

  it('drops a peer from valid once its timeout ended, with no process taking part; expiring keeps it', () => {
    expect(result.validAfterTimeout).to.deep.equal([ANA.address]);
    expect(elements(oracle.timedOut, 'ip', 'valid').map((e) => e['val'])).to.deep.equal([
      ANA.address,
    ]);
    expect(elements(oracle.timedOut, 'ip', 'expiring')).to.have.length(2);
  });

  it('renews an expired peer by adding its valid element again (the ended one is not there to delete), with the new time left', () => {
    expect(result.validAfterRenewal).to.deep.equal([ANA.address, SHOP.address]);
    const shop = elements(oracle.renewed, 'ip', 'valid').find((e) => e['val'] === SHOP.address);
    expect(shop?.['timeout']).to.equal(7200);
    const renewal = recordedBatches()[2]!;
    // expiring: the old element deleted and the new added; valid: only added.
    expect(renewal.map(typeOf)).to.deep.equal([
      NFT_MSG_DELSETELEM,
      NFT_MSG_NEWSETELEM,
      NFT_MSG_NEWSETELEM,
    ]);
  });

  it('clears an expiry by deleting both elements, of both families', () => {
    expect(result.afterClear.map((e) => e.address)).to.deep.equal([SHOP.address]);
    expect(elements(oracle.cleared, 'ip6', 'expiring')).to.deep.equal([]);
    expect(elements(oracle.cleared, 'ip6', 'valid')).to.deep.equal([]);
    expect(recordedBatches()[3]!.map(typeOf)).to.deep.equal([
      NFT_MSG_DELSETELEM,
      NFT_MSG_DELSETELEM,
      NFT_MSG_DELSETELEM,
      NFT_MSG_DELSETELEM,
    ]);
    expect(result.afterRemove).to.deep.equal([]);
  });

  it('puts back what a state directory wants with the time left from now; an expiry that passed gets no valid element: expired at once', () => {
    expect(result.ensured.map((e) => [e.address, e.expiresAt])).to.deep.equal([
      [ANA.address, T0 - 5_000],
      [SHOP.address, T0 + 60_000],
    ]);
    expect(result.validEnsured).to.deep.equal([SHOP.address]);
    expect(
      elements(oracle.ensured, 'ip', 'valid').map((e) => [e['val'], e['timeout']]),
    ).to.deep.equal([[SHOP.address, 60]]);
    expect(elements(oracle.ensured, 'ip6', 'valid')).to.deep.equal([]);
    // The rebuild deletes each table and writes it in the same transaction.
    const restore = recordedBatches()[5]!;
    expect(restore.map(typeOf).filter((t) => t === NFT_MSG_DELTABLE)).to.have.length(2);
  });

  it('the kernel takes a timeout of 18,446,744,073,708 ms (about 584 years) and refuses one ms more with ERANGE', () => {
    expect(result.atBound).to.equal('ok');
    expect(result.beyondBound).to.equal('ERANGE');
  });
});
