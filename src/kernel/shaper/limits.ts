/**
 * One peer's limit on one device: its HTB class under 1:ffff and its u32 key node, as they are
 * written (created or changed in place) and deleted, and the peer classes read back from a class
 * dump: marshal and unmarshal side by side.
 */
import {
  type BatchMessage,
  NLM_F_ACK,
  NLM_F_CREATE,
  NLM_F_REQUEST,
  type NetlinkMessage,
  decodeAttributes,
  encodeAttributes,
} from '../../netlink';
import { RTM_NEWTCLASS, RTM_NEWTFILTER } from '../rtnetlink';
import { htbClass, htbClassOptions, htbClassOptionsFor, rateOf } from '../tc/htb';
import { decodeTc, encodeTc, formatHandle, majorOf, minorOf } from '../tc/tc';
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

/** Class minor → rate of the peer classes (children of 1:ffff) in a class dump of one device. */
export function parsePeerClasses(side: Side, messages: NetlinkMessage[]): Map<number, number> {
  const found = new Map<number, number>();
  for (const message of messages) {
    const tc = decodeTc(message);
    if (tc.ifindex !== side.ifindex || tc.kind !== 'htb' || tc.parent !== PARENT_CLASS) continue;
    if (majorOf(tc.handle) !== majorOf(QDISC) || !tc.options) continue;
    const options = decodeAttributes(
      htbClassOptions,
      tc.options,
      `class ${formatHandle(tc.handle)}`,
    );
    found.set(minorOf(tc.handle), rateOf(options));
  }
  return found;
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
