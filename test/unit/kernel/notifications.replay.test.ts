/**
 * peer.cap_exhausted's source replayed from a transcript recorded in the VM: what the
 * NFNLGRP_NFTABLES subscription received while ICMP exhausted caps, checked against what
 * `nft -j list table ...` reported at the same moments (the oracle).
 */
import { expect } from 'chai';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { dataPathObjectOf } from '../../../src/kernel/nftables/notifications';
import { parseMessages, type NetlinkMessage } from '../../../src/netlink';
import type { Transcript } from '../../../src/netlink/transcript';
import { FIXTURES, replay } from '../../support/transcripts';
import {
  NOTIFY_KEY_A,
  NOTIFY_PEER_A,
  OTHER_TABLE,
  nftablesNotifications,
} from '../../transcripts/notifications';

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
function receivedMessages(): NetlinkMessage[] {
  const transcript = JSON.parse(
    readFileSync(path.join(FIXTURES, `${nftablesNotifications.name}.json`), 'utf8'),
  ) as Transcript;
  const socket = transcript.sockets[0]!;
  return socket.exchanges.flatMap((exchange) =>
    exchange.received.flatMap((datagram) =>
      typeof datagram === 'string' ? parseMessages(Buffer.from(datagram, 'hex')) : [],
    ),
  );
}

describe('kernel/nftables notifications: exhausted caps (replayed from a real kernel)', () => {
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
