import { expect } from 'chai';
import path from 'node:path';
import {
  NFPROTO_IPV4,
  NFPROTO_IPV6,
  NFT_MSG_DELSETELEM,
  NFT_MSG_NEWTABLE,
  NFNL_SUBSYS_NFTABLES,
} from '../../../src/kernel/nftables/constants';
import { parseMessages } from '../../../src/netlink';
import { TranscriptPlayer } from '../../../src/netlink/transcript';
import { FIXTURES, replay } from '../../support/transcripts';
import {
  DUAL_IF,
  DUAL_PEER,
  DUAL_SUSPENSION_TABLE,
  type DualStackSuspensionResult,
  IPV4_ONLY_PEER,
  dualStackSuspension,
} from '../../transcripts/dual-stack';

// Suspension on a dual-stack interface (issue 18), replayed from a transcript recorded in the
// VM: every expectation is checked against what `nft -j list table ip|ip6` reported at that
// moment and against the layout src/kernel/suspension/index.ts documents (the IPv6 header's
// source at 8 and destination at 24, RFC 8200 §3, which nft prints as ip6 saddr / ip6 daddr).

type NftEntry = Record<string, Record<string, unknown>>;

interface Tables {
  ip: unknown;
  ip6: unknown;
}

const entries = (listing: unknown): NftEntry[] =>
  ((listing as { nftables?: NftEntry[] } | null)?.nftables ?? []).filter((e) => !e['metainfo']);

/** The set `suspended` of a listing: its key type and elements (address, comment). */
function suspendedSet(listing: unknown): {
  type: unknown;
  elements: Array<{ address: string; comment?: string }>;
} {
  const set = entries(listing).find((e) => e['set']?.['name'] === 'suspended')?.['set'];
  const elem = (set?.['elem'] ?? []) as Array<string | { elem: { val: string; comment?: string } }>;
  return {
    type: set?.['type'],
    elements: elem.map((e) =>
      typeof e === 'string' ? { address: e } : { address: e.elem.val, comment: e.elem.comment },
    ),
  };
}

const owner = (publicKey: string): string => `wg-peerd peer ${publicKey}`;

/** NETLINK_NETFILTER (linux/netlink.h). */
const NETLINK_NETFILTER = 12;

/**
 * The recorded nf_tables transactions (datagrams with more than one message: BATCH_BEGIN, the
 * changes, BATCH_END), each as the [nf_tables message, nfgenmsg family] of its changes (the
 * delimiters are of subsystem NFNL_SUBSYS_NONE).
 */
function recordedBatches(): Array<Array<[number, number]>> {
  const { transcript } = TranscriptPlayer.load(
    path.join(FIXTURES, `${dualStackSuspension.name}.json`),
  );
  const batches: Array<Array<[number, number]>> = [];
  for (const socket of transcript.sockets) {
    if (socket.protocol !== NETLINK_NETFILTER) continue;
    for (const exchange of socket.exchanges) {
      const messages = parseMessages(Buffer.from(exchange.sent, 'hex'));
      if (messages.length < 3) continue;
      batches.push(
        messages
          .filter((m) => m.type >> 8 === NFNL_SUBSYS_NFTABLES)
          .map((m) => [m.type & 0xff, m.payload[0]!] as [number, number]),
      );
    }
  }
  return batches;
}

describe('suspension of dual-stack peers over recorded kernel exchanges (issue 18)', () => {
  let result: DualStackSuspensionResult;
  let oracle: Record<string, unknown>;

  before(async () => {
    ({ result, oracle } = await replay(dualStackSuspension));
  });

  it("suspends a dual-stack peer's IPv6 address in an ip6 table beside the ip one, both owned by its key, from the first suspension", () => {
    const { ip, ip6 } = oracle.suspended as Tables;
    expect(suspendedSet(ip)).to.deep.equal({
      type: 'ipv4_addr',
      elements: [{ address: DUAL_PEER.address, comment: owner(DUAL_PEER.publicKey) }],
    });
    expect(suspendedSet(ip6)).to.deep.equal({
      type: 'ipv6_addr',
      elements: [{ address: DUAL_PEER.address6, comment: owner(DUAL_PEER.publicKey) }],
    });
    const table = entries(ip6).find((e) => e['table'])?.['table'];
    expect(table).to.include({ family: 'ip6', name: DUAL_SUSPENSION_TABLE });
  });

  it('drops ip6 saddr @suspended arriving from the interface and ip6 daddr @suspended leaving through it, on the hooks and priority of the ip table', () => {
    const { ip, ip6 } = oracle.suspended as Tables;
    const chains = (listing: unknown) =>
      entries(listing)
        .flatMap((e) => (e['chain'] ? [e['chain']] : []))
        .map((c) => [c['name'], c['type'], c['hook'], c['prio'], c['policy']]);
    expect(chains(ip6)).to.deep.equal([
      ['from_peers', 'filter', 'prerouting', -10, 'accept'],
      ['to_peers', 'filter', 'postrouting', -10, 'accept'],
    ]);
    expect(chains(ip6)).to.deep.equal(chains(ip));
    const rules = entries(ip6).flatMap((e) => (e['rule'] ? [e['rule']] : []));
    expect(rules.map((r) => [r['chain'], r['expr']])).to.deep.equal([
      [
        'from_peers',
        [
          { match: { op: '==', left: { meta: { key: 'iifname' } }, right: DUAL_IF } },
          {
            match: {
              op: '==',
              left: { payload: { protocol: 'ip6', field: 'saddr' } },
              right: '@suspended',
            },
          },
          { drop: null },
        ],
      ],
      [
        'to_peers',
        [
          { match: { op: '==', left: { meta: { key: 'oifname' } }, right: DUAL_IF } },
          {
            match: {
              op: '==',
              left: { payload: { protocol: 'ip6', field: 'daddr' } },
              right: '@suspended',
            },
          },
          { drop: null },
        ],
      ],
    ]);
  });

  it('gives a peer without an IPv6 address no IPv6 element, and lists suspensions by IPv4 address', () => {
    const { ip, ip6 } = oracle.bothSuspended as Tables;
    expect(suspendedSet(ip).elements.map((e) => e.address)).to.deep.equal([
      DUAL_PEER.address,
      IPV4_ONLY_PEER.address,
    ]);
    expect(suspendedSet(ip6).elements.map((e) => e.address)).to.deep.equal([DUAL_PEER.address6]);
    expect(result.listed).to.deep.equal([
      [DUAL_PEER.address, DUAL_PEER.publicKey],
      [IPV4_ONLY_PEER.address, IPV4_ONLY_PEER.publicKey],
    ]);
  });

  it('moves the IPv6 suspension to the address the live peer now has, and says so as repairs', () => {
    const { ip, ip6 } = oracle.repaired as Tables;
    expect(suspendedSet(ip6).elements).to.deep.equal([
      { address: 'fd78::3', comment: owner(DUAL_PEER.publicKey) },
    ]);
    expect(suspendedSet(ip).elements.map((e) => e.address)).to.deep.equal([
      DUAL_PEER.address,
      IPV4_ONLY_PEER.address,
    ]);
    expect(result.repairs.map((r) => [r.address, r.done])).to.deep.equal([
      ['fd78::2', 'removed it'],
      ['fd78::3', 'added it'],
    ]);
  });

  it('changes both tables in one transaction: the first suspension makes both, the resume removes both elements', () => {
    const batches = recordedBatches();
    const families = (batch: Array<[number, number]>, msg: number): number[] =>
      batch.filter(([type]) => type === msg).map(([, family]) => family);
    // One batch is one transaction (nfnetlink_rcv_batch: all or nothing), each message with its
    // own nfgenmsg family.
    expect(families(batches[0]!, NFT_MSG_NEWTABLE)).to.deep.equal([NFPROTO_IPV4, NFPROTO_IPV6]);
    expect(families(batches.at(-1)!, NFT_MSG_DELSETELEM)).to.deep.equal([
      NFPROTO_IPV4,
      NFPROTO_IPV6,
    ]);
  });

  it('resumes both addresses of the dual-stack peer, and only its', () => {
    const { ip, ip6 } = oracle.resumed as Tables;
    expect(suspendedSet(ip).elements.map((e) => e.address)).to.deep.equal([IPV4_ONLY_PEER.address]);
    expect(suspendedSet(ip6).elements).to.deep.equal([]);
    expect(result.listedAfterResume).to.deep.equal([
      [IPV4_ONLY_PEER.address, IPV4_ONLY_PEER.publicKey],
    ]);
  });
});
