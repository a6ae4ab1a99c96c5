/**
 * Cheap kernel questions for the readiness probe (GET /readyz): is a generic netlink family
 * registered, does the tc part of rtnetlink answer for a device, does nf_tables answer. None
 * reads peers, so a probe costs the same at 50,000 peers as at none. The sockets are the
 * probe's own (a probe never queues behind a WireGuard dump) and opened on first use.
 */
import {
  GenericNetlink,
  NETLINK_GENERIC,
  NETLINK_ROUTE,
  NetlinkSocket,
  be32,
  schema,
  type TransportFactory,
} from '../netlink';
import { NFPROTO_UNSPEC, NFT_MSG_GETGEN } from './nftables/constants';
import { NfTables, decodeNftMessage } from './nftables/client';
import { RTM_GETQDISC } from './rtnetlink';
import { decodeTc, encodeTc } from './tc/tc';
import type { ProbeApi } from './types';

// linux/netfilter/nf_tables.h, enum nft_gen_attributes.
const NFTA_GEN_ID = 1;
const genAttributes = schema({ id: { type: NFTA_GEN_ID, codec: be32 } });

export class Probe implements ProbeApi {
  private genlSocket: NetlinkSocket | undefined;
  private routeSocket: NetlinkSocket | undefined;
  private readonly nftables: NfTables;

  constructor(private readonly open: TransportFactory) {
    this.nftables = new NfTables(open);
  }

  async genlFamily(name: string): Promise<void> {
    this.genlSocket ??= new NetlinkSocket(this.open(NETLINK_GENERIC));
    // A fresh lookup each time: the wireguard module may have been unloaded since the last.
    await new GenericNetlink(this.genlSocket).family(name);
  }

  async qdiscCount(ifindex: number): Promise<number> {
    this.routeSocket ??= new NetlinkSocket(this.open(NETLINK_ROUTE));
    // tc_dump_qdisc has no ifindex filter: all devices' qdiscs come, a few per device.
    const replies = await this.routeSocket.dump(
      RTM_GETQDISC,
      encodeTc({ ifindex: 0, handle: 0, parent: 0 }),
      { operation: 'RTM_GETQDISC dump' },
    );
    return replies.map(decodeTc).filter((q) => q.ifindex === ifindex).length;
  }

  async nftGeneration(): Promise<number> {
    const reply = await this.nftables.get(
      NFT_MSG_GETGEN,
      NFPROTO_UNSPEC,
      Buffer.alloc(0),
      'NFT_MSG_GETGEN',
    );
    if (reply === null) throw new Error('NFT_MSG_GETGEN: no reply');
    return decodeNftMessage(genAttributes, reply, 'NFT_MSG_NEWGEN').id ?? 0;
  }

  close(): void {
    this.genlSocket?.close();
    this.routeSocket?.close();
    this.nftables.close();
  }
}
