/**
 * The IPv6 key nodes of dual-stack peers as a plan (issue 18), beside ./plan.ts: a pure
 * function of what a dump of the IPv6 host tables held on both devices, the IPv4 classes, and
 * the live peers, giving the nodes to delete and the messages to send. One limit covers both
 * families, so the IPv4 classes decide: a live peer whose class holds (on either device: the
 * IPv4 plan restores the other) gets, on each device, its IPv6 key node pointing at that
 * class; every other IPv6 key node goes. Deletes come first: HTB refuses to delete a class a
 * filter still points at (sch_htb.c htb_delete: EBUSY), so a class's IPv6 node must be gone
 * before the IPv4 removal deletes the class.
 */
import type { BatchMessage } from '../../netlink';
import { bigIntToIpv6, ipv6ToBigInt } from '../ipv6';
import { ipv4ToNumber } from '../ipv4';
import { formatHandle } from '../tc/tc';
import type { PeerRef, Repair } from '../types';
import { type Side, peerClassId } from './addressing';
import { type Prefix6, addressOfNode6, isPeerHost6, peerFilterHandle6 } from './addressing6';
import { peerFilterCreate6 } from './limits';

/** What the IPv6 reconciliation reads, per direction: key node handle → its classid. */
export interface Shaped6State {
  /** The classes under 1:ffff per direction (minor → rate), as ShapedState holds them. */
  classes: { download: ReadonlyMap<number, number>; upload: ReadonlyMap<number, number> };
  /** The key nodes of the host tables 4XX: per direction: handle → classid (undefined: none). */
  nodes: {
    download: ReadonlyMap<number, number | undefined>;
    upload: ReadonlyMap<number, number | undefined>;
  };
}

export interface Limit6Plan {
  /** Key nodes to delete, before anything else of the limits is removed or sent. */
  deletes: Array<{ side: Side; handle: number }>;
  /** IPv6 key nodes to create, sent after the IPv4 classes they point at. */
  messages: BatchMessage[];
  repairs: Repair[];
}

/** A live peer's IPv6 key node: where it is and which class it must reach. */
interface Wanted {
  address: number;
  address6: bigint;
  classid: number;
  peer: PeerRef;
}

/** The IPv6 key nodes both devices should hold, by handle, from the live limited peers. */
export function wantedNodes6(
  prefix: Prefix6,
  classes: Shaped6State['classes'],
  live: readonly PeerRef[],
): Map<number, Wanted> {
  const wanted = new Map<number, Wanted>();
  for (const peer of live) {
    if (peer.address6 == null) continue;
    const address6 = ipv6ToBigInt(peer.address6);
    if (!isPeerHost6(prefix, address6)) continue; // shaped on IPv4 only (./addressing6.ts)
    const address = ipv4ToNumber(peer.address);
    const minor = address & 0xffff;
    if (!classes.download.has(minor) && !classes.upload.has(minor)) continue;
    wanted.set(peerFilterHandle6(address6), {
      address,
      address6,
      classid: peerClassId(address),
      peer,
    });
  }
  return wanted;
}

export function planLimits6(
  sides: { download: Side; upload: Side },
  prefix: Prefix6,
  state: Shaped6State,
  live: readonly PeerRef[],
): Limit6Plan {
  const plan: Limit6Plan = { deletes: [], messages: [], repairs: [] };
  const wanted = wantedNodes6(prefix, state.classes, live);
  for (const side of [sides.download, sides.upload]) {
    const nodes = state.nodes[side.direction];
    for (const [handle, classid] of [...nodes].sort(([a], [b]) => a - b)) {
      const want = wanted.get(handle);
      if (want?.classid === classid) continue;
      plan.deletes.push({ side, handle });
      if (want === undefined) {
        plan.repairs.push({
          address: bigIntToIpv6(addressOfNode6(prefix, handle)),
          found: `IPv6 key node to class ${classid === undefined ? 'none' : formatHandle(classid)} on ${side.ifname} for an address no limited peer has`,
          done: 'removed',
        });
      }
    }
    for (const [handle, want] of wanted) {
      if (nodes.get(handle) === want.classid) continue;
      plan.messages.push(peerFilterCreate6(side, want.address6, want.address));
      plan.repairs.push({
        address: want.peer.address,
        found: `no IPv6 key node for ${bigIntToIpv6(want.address6)} to class ${formatHandle(want.classid)} on ${side.ifname}`,
        done: `restored ${side.direction} for IPv6`,
      });
    }
  }
  return plan;
}
