/**
 * The nf_tables multicast group (NFNLGRP_NFTABLES): the kernel announces every committed change
 * of the ruleset there, and a stateful object's news from the data path, such as a quota that a
 * packet just exhausted (net/netfilter/nft_quota.c: nft_quota_obj_eval sends NFT_MSG_NEWOBJ
 * once, when it sets NFT_QUOTA_DEPLETED_BIT). This is a socket of its own, never the one the
 * requests use: a notification can arrive at any time, and a request socket ignores what it did
 * not ask for.
 *
 * The data path's messages carry nlmsg_pid 0 and nlmsg_seq 0 (nft_obj_notify(..., portid 0,
 * seq 0, ...)); a transaction's carry the committing socket's port id and sequence number, so the
 * two are told apart without guessing from the content. A transaction's messages (every table,
 * chain, rule, set, element or object added or deleted, by any program, this daemon too) are
 * handed to `commit` with the table they name (issue 29: the list reads the caps and the
 * suspended set again after one, src/peers/usage-cadence.ts).
 */
import {
  AttributeCursor,
  NETLINK_NETFILTER,
  NLMSG_ERROR,
  NLM_F_ACK,
  NLM_F_REQUEST,
  NetlinkError,
  NetlinkProtocolError,
  encodeMessage,
  parseErrorPayload,
  parseMessages,
  type NetlinkMessage,
  type Transport,
  type TransportFactory,
} from '../../netlink';
import { type ObjectAttributes, decodeNftMessage } from './client';
import {
  NFNETLINK_V0,
  NFPROTO_UNSPEC,
  NFT_MSG_GETGEN,
  NFT_MSG_NEWGEN,
  NFT_MSG_NEWOBJ,
  NFNL_SUBSYS_NFTABLES,
  nfgenmsg,
  nftMessageType,
} from './constants';
import { objectAttributes } from './schema';

/** /usr/include/linux/netfilter/nfnetlink.h, enum nfnetlink_groups: NFNLGRP_NFTABLES. */
export const NFNLGRP_NFTABLES = 7;

/** The sequence number of the one request this socket sends (NFT_MSG_GETGEN, its probe). */
const PROBE_SEQ = 1;

/** A NEWOBJ the data path sent (not a transaction's echo), decoded; else null. */
export function dataPathObjectOf(message: NetlinkMessage): {
  family: number;
  object: ObjectAttributes;
} | null {
  if (message.type !== nftMessageType(NFT_MSG_NEWOBJ)) return null;
  if (message.pid !== 0 || message.seq !== 0) return null;
  const { family } = nfgenmsg.decode(message.payload.subarray(0, nfgenmsg.size));
  return { family, object: decodeNftMessage(objectAttributes, message, 'NFT_MSG_NEWOBJ') };
}

/**
 * The attribute every nf_tables message of a transaction names its table with: NFTA_TABLE_NAME,
 * NFTA_CHAIN_TABLE, NFTA_RULE_TABLE, NFTA_SET_TABLE, NFTA_SET_ELEM_LIST_TABLE, NFTA_OBJ_TABLE
 * and NFTA_FLOWTABLE_TABLE are all 1 (/usr/include/linux/netfilter/nf_tables.h).
 */
const NFTA_ANY_TABLE = 1;

const TABLE = new AttributeCursor();

/**
 * The table a transaction's nf_tables message names; null for NFT_MSG_NEWGEN (which ends every
 * transaction and names none), for another subsystem's message, or without the attribute.
 */
export function committedTableOf(message: NetlinkMessage): string | null {
  if (message.type >> 8 !== NFNL_SUBSYS_NFTABLES) return null;
  if (message.type === nftMessageType(NFT_MSG_NEWGEN)) return null;
  const payload = message.payload;
  if (payload.length < nfgenmsg.size) return null;
  const cursor = TABLE.reset(payload, nfgenmsg.size, payload.length);
  while (cursor.next()) {
    if (cursor.type !== NFTA_ANY_TABLE) continue;
    const end = payload.indexOf(0, cursor.start);
    return payload.toString('utf8', cursor.start, end < 0 || end > cursor.end ? cursor.end : end);
  }
  return null;
}

export interface MonitorHandlers {
  /** A stateful object's news from the data path (a quota exhausted). */
  object(family: number, object: ObjectAttributes): void;
  /** A transaction's message (any program's), with the table it names (committedTableOf). */
  commit?(table: string): void;
  /** Notifications lost (ENOBUFS: the socket's queue overflowed) or a message not understood. */
  error(error: Error): void;
}

/**
 * A subscription to NFNLGRP_NFTABLES. `ready` settles once nf_tables answered the probe sent
 * after joining (NFT_MSG_GETGEN): from then on nothing the data path announces is missed.
 */
export class NfTablesMonitor {
  readonly ready: Promise<void>;
  private readonly transport: Transport;
  private settle: { resolve(): void; reject(error: Error): void } | null = null;
  private closed = false;

  constructor(
    open: TransportFactory,
    private readonly handlers: MonitorHandlers,
  ) {
    this.transport = open(NETLINK_NETFILTER);
    this.ready = new Promise<void>((resolve, reject) => {
      this.settle = { resolve, reject };
    });
    try {
      if (!this.transport.joinGroup) {
        throw new Error('this netlink transport cannot join multicast groups');
      }
      this.transport.joinGroup(NFNLGRP_NFTABLES);
      this.transport.receive((error, datagram) => this.onDatagram(error, datagram));
      // The probe's answer keeps the process alive; the subscription itself never does.
      this.transport.setBusy(true);
      this.transport.send(
        encodeMessage({
          type: nftMessageType(NFT_MSG_GETGEN),
          flags: NLM_F_REQUEST | NLM_F_ACK,
          seq: PROBE_SEQ,
          pid: 0,
          payload: nfgenmsg.encode({ family: NFPROTO_UNSPEC, version: NFNETLINK_V0, resId: 0 }),
        }),
      );
    } catch (error) {
      this.transport.close();
      throw error;
    }
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.transport.close();
    // A monitor closed before its probe was answered was never ready; nobody waits any more.
    this.settle = null;
  }

  /** The probe answered (or failed): resolve or reject `ready`, and let the process go. */
  private settled(error: Error | null): void {
    if (this.settle === null) return;
    if (error === null) this.settle.resolve();
    else this.settle.reject(error);
    this.settle = null;
    this.transport.setBusy(false);
  }

  private onDatagram(error: Error | null, datagram: Buffer | undefined): void {
    if (this.closed) return;
    // The addon passes `undefined`, not null, when there is no error.
    if (error) {
      this.handlers.error(error);
      return;
    }
    if (datagram === undefined) return;
    let messages: NetlinkMessage[];
    try {
      messages = parseMessages(datagram);
    } catch (parseError) {
      this.handlers.error(parseError as Error);
      return;
    }
    for (const message of messages) {
      try {
        this.onMessage(message);
      } catch (decodeError) {
        this.handlers.error(
          decodeError instanceof Error
            ? decodeError
            : new NetlinkProtocolError(String(decodeError)),
        );
      }
    }
  }

  private onMessage(message: NetlinkMessage): void {
    if (message.type === NLMSG_ERROR && message.seq === PROBE_SEQ) {
      const report = parseErrorPayload(message);
      this.settled(
        report.errno === 0
          ? null
          : new NetlinkError({
              operation: 'NFT_MSG_GETGEN',
              errno: report.errno,
              kernelMessage: report.kernelMessage,
              sequence: report.requestSeq,
            }),
      );
      return;
    }
    const news = dataPathObjectOf(message);
    if (news !== null) {
      this.handlers.object(news.family, news.object);
      return;
    }
    if (this.handlers.commit === undefined || message.pid === 0) return;
    const table = committedTableOf(message);
    if (table !== null) this.handlers.commit(table);
  }
}
