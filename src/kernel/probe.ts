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
import { FacilityUnavailableError, WIREGUARD_REMEDY, atBoundary } from './errors';
import { missingNfTables } from './quota/facility';
import type { ProbeApi } from './types';

/** errno answers meaning "this kernel has no such facility" (a module not loaded or built). */
const ABSENT = new Set(['ENOENT', 'EOPNOTSUPP', 'ENOTSUP', 'EPROTONOSUPPORT', 'EAFNOSUPPORT']);

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
    const socket = this.genlSocket;
    // A fresh lookup each time: the wireguard module may have been unloaded since the last.
    // nlctrl answers ENOENT for a family nobody registered (and none could be autoloaded).
    await atBoundary(
      () => new GenericNetlink(socket).family(name),
      (error) =>
        error.code === 'ENOENT'
          ? new FacilityUnavailableError(
              `WireGuard (generic netlink family "${name}")`,
              WIREGUARD_REMEDY,
              { cause: error },
            )
          : undefined,
    );
  }

  async qdiscCount(ifindex: number): Promise<number> {
    this.routeSocket ??= new NetlinkSocket(this.open(NETLINK_ROUTE));
    const socket = this.routeSocket;
    // tc_dump_qdisc has no ifindex filter: all devices' qdiscs come, a few per device.
    const replies = await atBoundary(
      () =>
        socket.dump(RTM_GETQDISC, encodeTc({ ifindex: 0, handle: 0, parent: 0 }), {
          operation: 'RTM_GETQDISC dump',
        }),
      (error) =>
        ABSENT.has(error.code)
          ? new FacilityUnavailableError(
              `traffic control (rtnetlink tc: ${error.code})`,
              'load the kernel modules: modprobe sch_htb cls_u32 act_mirred ifb',
              { cause: error },
            )
          : undefined,
    );
    return replies.map(decodeTc).filter((q) => q.ifindex === ifindex).length;
  }

  async nftGeneration(): Promise<number> {
    const reply = await atBoundary(
      () => this.nftables.get(NFT_MSG_GETGEN, NFPROTO_UNSPEC, Buffer.alloc(0), 'NFT_MSG_GETGEN'),
      (error) => (ABSENT.has(error.code) ? missingNfTables(error) : undefined),
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
