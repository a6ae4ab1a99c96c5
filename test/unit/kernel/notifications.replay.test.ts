/**
 * peer.cap_exhausted's source replayed from a transcript recorded in the VM: what the
 * NFNLGRP_NFTABLES subscription received while ICMP exhausted caps, checked against what
 * `nft -j list table ...` reported at the same moments (the oracle).
 */
import { expect } from 'chai';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { committedTableOf, dataPathObjectOf } from '../../../src/kernel/nftables/notifications';
import { quotaTableName } from '../../../src/kernel/quota/naming';
import {
  NFNL_SUBSYS_NFTABLES,
  NFT_MSG_NEWGEN,
  nftMessageType,
} from '../../../src/kernel/nftables/constants';
import { parseMessages, type NetlinkMessage } from '../../../src/netlink';
import type { Transcript } from '../../../src/netlink/transcript';
import { FIXTURES, replay } from '../../support/transcripts';
import {
  NOTIFY6_PEER_A,
  NOTIFY_IF,
  NOTIFY_KEY_A,
  NOTIFY_PEER_A,
  OTHER_TABLE,
  nftablesNotifications,
  nftablesNotificationsInet,
} from '../../transcripts/notifications';
import type { Scenario } from '../../transcripts/scenario';
import { NFPROTO_INET, NFPROTO_IPV6 } from '../../../src/kernel/nftables/constants';

interface NftQuota {
  table: string;
  name: string;
  bytes: number;
  used: number;
}

function quotasOf(listing: unknown): NftQuota[] {
  const entries = (listing as { nftables: Array<{ quota?: NftQuota }> }).nftables;
  return entries.flatMap((entry) => (entry.quota ? [entry.quota] : []));
}

/** Every message the subscription's socket received, in order, as recorded. */
function receivedMessages(scenario: Scenario = nftablesNotifications): NetlinkMessage[] {
  const transcript = JSON.parse(
    readFileSync(path.join(FIXTURES, `${scenario.name}.json`), 'utf8'),
  ) as Transcript;
  const socket = transcript.sockets[0]!;
  return socket.exchanges.flatMap((exchange) =>
    exchange.received.flatMap((datagram) =>
      typeof datagram === 'string' ? parseMessages(Buffer.from(datagram, 'hex')) : [],
    ),
  );
}

describe('kernel/nftables notifications: exhausted caps (replayed from a real kernel)', () => {
  it("names the table of every transaction's message (the daemon's tables and an operator's, issue 29), none of NEWGEN's or the data path's", () => {
    const messages = receivedMessages();
    const transactions = messages.filter((m) => m.pid !== 0);
    const tables = new Set(transactions.map(committedTableOf));
    // The recording made the daemon's caps table and, with `nft`, the operator's table.
    expect(tables).to.include(quotaTableName(NOTIFY_IF));
    expect(tables).to.include(OTHER_TABLE);
    // Each transaction ends with NFT_MSG_NEWGEN, which names no table.
    const generations = transactions.filter((m) => m.type === nftMessageType(NFT_MSG_NEWGEN));
    expect(generations).to.not.be.empty;
    expect(generations.map(committedTableOf)).to.satisfy((t: unknown[]) =>
      t.every((n) => n === null),
    );
    // Every other nf_tables message of a transaction names its table (the probe's answer,
    // NLMSG_ERROR, is no nf_tables message and names none).
    const unnamed = transactions.filter(
      (m) =>
        m.type >> 8 === NFNL_SUBSYS_NFTABLES &&
        m.type !== nftMessageType(NFT_MSG_NEWGEN) &&
        committedTableOf(m) === null,
    );
    expect(unnamed.map((m) => m.type)).to.deep.equal([]);
  });

  it("reports a peer's cap once when traffic exhausts it, and once more after a raise, with the kernel's numbers", async () => {
    const { result, oracle } = await replay(nftablesNotifications);
    expect(result.errors).to.deep.equal([]);
    const quotaOf = (step: string) => quotasOf(oracle[step]).find((q) => q.name === 'q_10_77_2_2')!;
    const first = quotaOf('exhausted');
    const second = quotaOf('exhaustedAgain');
    // nft lists the quota as used up at those moments...
    expect(first.used).to.be.at.least(first.bytes);
    expect(second.used).to.be.at.least(second.bytes);
    // ...and the notices say the same, owner from the object's comment.
    expect(result.notices).to.deep.equal([
      {
        address: NOTIFY_PEER_A,
        publicKey: NOTIFY_KEY_A,
        quotaBytes: first.bytes,
        usedBytes: first.bytes,
      },
      {
        address: NOTIFY_PEER_A,
        publicKey: NOTIFY_KEY_A,
        quotaBytes: second.bytes,
        usedBytes: second.bytes,
      },
    ]);
  });

  it("ignores a peer under its cap and an operator's quota in another table (which the kernel did announce)", async () => {
    const { result } = await replay(nftablesNotifications);
    // The kernel announced the operator's quota from the data path too (recorded bytes)...
    const fromDataPath = receivedMessages().flatMap((m) => {
      const news = dataPathObjectOf(m);
      return news === null ? [] : [news.object.table];
    });
    expect(fromDataPath).to.include(OTHER_TABLE);
    // ...and the watcher reported only peer A's cap.
    expect(result.notices.every((n) => n.address === NOTIFY_PEER_A)).to.equal(true);
  });

  it("tells the data path's announcements (pid 0, seq 0) from the echoes of transactions, which carry a port id", () => {
    const newObjects = receivedMessages().filter(
      (m) => (m.type & 0xff) === 18 && m.type >> 8 === 10,
    );
    const echoes = newObjects.filter((m) => m.pid !== 0);
    const dataPath = newObjects.filter((m) => dataPathObjectOf(m) !== null);
    // The three setCap transactions (A, B, A raised) were echoed to the group too...
    expect(echoes.length).to.be.at.least(3);
    // ...and only the two depletions of A and the operator's quota came from the data path.
    expect(dataPath).to.have.length(3);
    expect(dataPath.every((m) => m.pid === 0 && m.seq === 0)).to.equal(true);
  });
});

describe('kernel/nftables notifications: exhausted caps of a dual-stack interface, in its inet table (replayed from a real kernel)', () => {
  const quotaA = (oracle: Record<string, unknown>, step: string) =>
    quotasOf(oracle[step]).find((q) => q.name === 'q_10_77_3_2')!;

  it("reports a peer's cap exhausted by IPv6 alone once, and once more when IPv4 and IPv6 together pass the raised cap", async () => {
    const { result, oracle } = await replay(nftablesNotificationsInet);
    expect(result.errors).to.deep.equal([]);
    const first = quotaA(oracle, 'exhausted');
    const afterIpv4 = quotaA(oracle, 'afterIpv4');
    const second = quotaA(oracle, 'exhaustedAgain');
    // nft: used up by ICMPv6; after the raise, IPv4 counted into the same object without
    // reaching the cap; then IPv6 took it over.
    expect(first.used).to.be.at.least(first.bytes);
    expect(afterIpv4.used).to.be.above(first.used).and.below(afterIpv4.bytes);
    expect(second.used).to.be.at.least(second.bytes);
    expect(result.notices).to.deep.equal([
      {
        address: NOTIFY6_PEER_A.address,
        publicKey: NOTIFY6_PEER_A.publicKey,
        quotaBytes: first.bytes,
        usedBytes: first.bytes,
      },
      {
        address: NOTIFY6_PEER_A.address,
        publicKey: NOTIFY6_PEER_A.publicKey,
        quotaBytes: second.bytes,
        usedBytes: second.bytes,
      },
    ]);
  });

  it("took those notices from datagrams of the exhausting packet's family, IPv6 (NFPROTO_IPV6), not the table's (inet): a check for ip alone drops them", () => {
    const dataPath = receivedMessages(nftablesNotificationsInet).flatMap((m) => {
      const news = dataPathObjectOf(m);
      return news === null ? [] : [news];
    });
    expect(dataPath).to.have.length(2);
    expect(dataPath.map((news) => news.family)).to.deep.equal([NFPROTO_IPV6, NFPROTO_IPV6]);
    expect(dataPath.map((news) => news.family)).to.not.include(NFPROTO_INET);
  });
});
