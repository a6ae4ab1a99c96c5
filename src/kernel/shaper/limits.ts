/**
 * One peer's limit on one device: its HTB class under 1:ffff and its u32 key node, as they are
 * written (created or changed in place) and deleted, and the peer classes read back from a class
 * dump: marshal and unmarshal side by side.
 */
import {
  AttributeCursor,
  type BatchMessage,
  NLM_F_ACK,
  NLM_F_CREATE,
  NLM_F_REQUEST,
  NetlinkProtocolError,
  type NetlinkMessage,
  encodeAttributes,
  located,
} from '../../netlink';
import { RTM_NEWTCLASS, RTM_NEWTFILTER, tcmsg } from '../rtnetlink';
import {
  TCA_HTB_CEIL64,
  TCA_HTB_PARMS,
  TCA_HTB_RATE64,
  htbClass,
  htbClassOptionsFor,
  tcHtbOpt,
} from '../tc/htb';
import {
  TCA_CHAIN,
  TCA_KIND,
  TCA_OPTIONS,
  encodeTc,
  formatHandle,
  majorOf,
  minorOf,
} from '../tc/tc';
import { type U32Selector, formatU32Handle, u32Filter, u32Handle } from '../tc/u32';
import {
  FILTER_INFO,
  PARENT_CLASS,
  QDISC,
  type Side,
  hostTableOf,
  peerClassId,
  peerFilterHandle,
  peerSelector,
} from './addressing';
import {
  FILTER_INFO6,
  FILTER_PRIORITY6,
  hostTable6Of,
  peerFilterHandle6,
  peerSelector6,
} from './addressing6';

/** RTM_NEWTCLASS 1:<minor> under 1:ffff: created, or changed in place when it exists. */
export function peerClassMessage(
  side: Side,
  address: number,
  rate: number,
  ticksPerUs: number,
): BatchMessage {
  return {
    type: RTM_NEWTCLASS,
    flags: NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE,
    payload: encodeTc(
      { ifindex: side.ifindex, handle: peerClassId(address), parent: PARENT_CLASS },
      encodeAttributes(htbClass, {
        kind: 'htb',
        options: htbClassOptionsFor({ rate, ticksPerUs }),
      }),
    ),
    ack: true,
    operation: `RTM_NEWTCLASS htb ${formatHandle(peerClassId(address))} rate ${rate} dev ${side.ifname}`,
  };
}

/** RTM_GETTCLASS dump request for one device. */
export function peerClassesQuery(side: Side): Buffer {
  return encodeTc({ ifindex: side.ifindex, handle: 0, parent: 0 });
}

const TOP = new AttributeCursor();
const OPTIONS = new AttributeCursor();

/**
 * Class minor → rate of the peer classes (children of 1:ffff) in a class dump of one device,
 * read in one cursor walk of each message (every list read reads both devices' classes, and a
 * start meets all of them cold). What decodeTc and decodeAttributes(htbClassOptions) read, with
 * their checks: a tcmsg shorter than its 20 bytes, a malformed attribute, a TCA_CHAIN, RATE64
 * or CEIL64 of another width, or a TCA_HTB_PARMS shorter than tc_htb_opt throws
 * NetlinkProtocolError; TCA_KIND is compared up to its NUL; a repeated attribute keeps its last
 * value; the rate is RATE64 when present, else tc_htb_opt's rate (rateOf). The tests hold the two
 * equal on recorded dumps.
 */
export function parsePeerClasses(side: Side, messages: NetlinkMessage[]): Map<number, number> {
  const found = new Map<number, number>();
  for (const message of messages) {
    const payload = message.payload;
    if (payload.length < tcmsg.size) {
      throw new NetlinkProtocolError(
        `tcmsg: tcmsg needs ${tcmsg.size} bytes, got ${payload.length}`,
      );
    }
    const top = TOP.reset(payload, tcmsg.size, payload.length);
    let htb = false;
    let optionsStart = -1;
    let optionsEnd = -1;
    try {
      while (top.next()) {
        if (top.type === TCA_KIND) htb = isHtb(payload, top.start, top.end);
        else if (top.type === TCA_OPTIONS) {
          optionsStart = top.start;
          optionsEnd = top.end;
        } else if (top.type === TCA_CHAIN) top.at(4, 'chain');
      }
    } catch (error) {
      throw located(error, 'tcmsg');
    }
    const ifindex = payload.readInt32LE(4);
    const handle = payload.readUInt32LE(8);
    const parent = payload.readUInt32LE(12);
    if (ifindex !== side.ifindex || !htb || parent !== PARENT_CLASS) continue;
    if (majorOf(handle) !== majorOf(QDISC) || optionsStart < 0) continue;
    found.set(minorOf(handle), classRate(payload, optionsStart, optionsEnd, handle));
  }
  return found;
}

/** Whether a TCA_KIND payload reads "htb" up to its NUL (the string codec's reading). */
function isHtb(buffer: Buffer, start: number, end: number): boolean {
  const nul = buffer.indexOf(0, start);
  const stop = nul === -1 || nul > end ? end : nul;
  return (
    stop - start === 3 &&
    buffer[start] === 0x68 &&
    buffer[start + 1] === 0x74 &&
    buffer[start + 2] === 0x62
  );
}

/** An HTB class's rate from its TCA_OPTIONS payload, as rateOf(htbClassOptions) reads it. */
function classRate(buffer: Buffer, start: number, end: number, handle: number): number {
  const options = OPTIONS.reset(buffer, start, end);
  let rate: number | null = null;
  let rate64: number | null = null;
  try {
    while (options.next()) {
      if (options.type === TCA_HTB_PARMS) {
        if (options.length < tcHtbOpt.size) {
          throw new NetlinkProtocolError(
            `parms: tc_htb_opt needs ${tcHtbOpt.size} bytes, got ${options.length}`,
          );
        }
        // tc_htb_opt begins with the rate's tc_ratespec, whose u32 rate is at offset 8.
        rate = buffer.readUInt32LE(options.start + 8);
      } else if (options.type === TCA_HTB_RATE64) {
        rate64 = Number(buffer.readBigUInt64LE(options.at(8, 'rate64')));
      } else if (options.type === TCA_HTB_CEIL64) {
        options.at(8, 'ceil64');
      }
    }
  } catch (error) {
    throw located(error, `class ${formatHandle(handle)}`);
  }
  return rate64 ?? rate ?? 0;
}

/** RTM_NEWTFILTER of the peer's key node: created, or changed in place when it exists. */
export function peerFilterCreate(side: Side, address: number): BatchMessage {
  return {
    type: RTM_NEWTFILTER,
    flags: NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE,
    payload: peerFilterMessage(side, address, {
      hash: u32Handle(hostTableOf(address), address & 0xff, 0),
      classid: peerClassId(address),
      selector: peerSelector(side.keyOffset, address),
    }),
    ack: true,
    operation: `RTM_NEWTFILTER u32 ${formatU32Handle(peerFilterHandle(address))} dev ${side.ifname}`,
  };
}

/** The peer's key node: with options to create it, without to delete it. */
export function peerFilterMessage(
  side: Side,
  address: number,
  options?: { hash: number; classid: number; selector: U32Selector },
): Buffer {
  return keyNodeMessage(side, peerFilterHandle(address), FILTER_INFO, options);
}

/** A key node of our qdisc 1: by handle and tcm_info: with options to create it, without to delete it. */
function keyNodeMessage(
  side: Side,
  filterHandle: number,
  info: number,
  options?: { hash: number; classid: number; selector: U32Selector },
): Buffer {
  return encodeTc(
    { ifindex: side.ifindex, handle: filterHandle, parent: QDISC, info },
    encodeAttributes(u32Filter, { kind: 'u32', options }),
  );
}

/**
 * RTM_NEWTFILTER of a dual-stack peer's IPv6 key node (./addressing6.ts), classifying into the
 * class of its IPv4 address: one limit for both families. Created, or changed in place.
 */
export function peerFilterCreate6(side: Side, address6: bigint, address: number): BatchMessage {
  const filterHandle = peerFilterHandle6(address6);
  return {
    type: RTM_NEWTFILTER,
    flags: NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE,
    payload: keyNodeMessage(side, filterHandle, FILTER_INFO6, {
      hash: u32Handle(hostTable6Of(address6), Number(address6 & 0xffn), 0),
      classid: peerClassId(address),
      selector: peerSelector6(side.keyOffset, address6),
    }),
    ack: true,
    operation: `RTM_NEWTFILTER u32 ${formatU32Handle(filterHandle)} prio ${FILTER_PRIORITY6} classid ${formatHandle(peerClassId(address))} dev ${side.ifname}`,
  };
}

/** RTM_DELTFILTER payload of an IPv6 key node (table 4XX:, priority 11). */
export function peerFilterDelete6(side: Side, filterHandle: number): Buffer {
  return keyNodeMessage(side, filterHandle, FILTER_INFO6);
}
