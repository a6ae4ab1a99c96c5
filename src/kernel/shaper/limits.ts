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
  return encodeTc(
    { ifindex: side.ifindex, handle: peerFilterHandle(address), parent: QDISC, info: FILTER_INFO },
    encodeAttributes(u32Filter, { kind: 'u32', options }),
  );
}
