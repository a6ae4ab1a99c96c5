/**
 * Per-peer speed limits over rtnetlink tc (no `tc` process).
 *
 * Layout, the same on two devices:
 * - download (traffic to the peer): egress of the WireGuard interface, keyed on the IPv4
 *   destination (offset 16 of the IP header);
 * - upload (traffic from the peer): an ingress qdisc on the WireGuard interface whose one u32
 *   filter matches everything and redirects it (act_mirred) to the egress of an IFB device
 *   "ifb-<wg name>" (cut to 15 characters), keyed there on the IPv4 source (offset 12).
 *
 * On each device: HTB root qdisc 1: with default class 0, which is no class, so unclassified
 * packets (peers without a limit, non-IPv4) take HTB's direct queue and are never slowed; one
 * parent class 1:ffff; one class 1:<low 16 bits of the peer's address> per limited peer, rate =
 * ceil = the limit. Classification is u32 at priority 10, protocol ip, in two hashing steps:
 *
 *   root table (kernel-chosen id, normally 800:)
 *     one key node: "dst in <subnet>", hash on the third octet  ─► table 100: (256 buckets)
 *   table 100:, bucket X (one per third octet X of the subnet)
 *     one key node: "dst in a.b.X.0/24", hash on the last octet ─► table 2XX: (256 buckets)
 *   table 2XX:, bucket Y
 *     the peer a.b.X.Y's key node 2XX:Y:1, "dst = a.b.X.Y", classid 1:<XY>, terminal
 *
 * so a packet visits at most three key nodes whatever the number of peers (10,000 peers of a
 * /16 spread over 256 tables × 256 buckets, one node per bucket).
 *
 * Everything about a peer is derived from its tunnel address: class 1:(addr & 0xffff), filter
 * handle (0x200 + third octet):(last octet):1. After a restart the limits are found in the kernel
 * and a removal needs no dump; nothing is stored anywhere else. 1:ffff can never be a peer's
 * class: for subnets of /16 or narrower (required) an address whose low 16 bits are all ones is
 * the broadcast address. The peer's public key is not kept: tc classes carry no user data (u32
 * actions have a 16-byte cookie, too short for a 32-byte key); the domain maps address to peer
 * through WireGuard's allowed IPs. listLimits maps class ids back to addresses with the upper 16
 * bits of the interface's first IPv4 address, read over rtnetlink on each call.
 *
 * The shaper owns the WireGuard interface's root qdisc and ingress hook and the IFB: ensure()
 * replaces another root qdisc, removes a clsact and redirects to other devices, and repairs
 * whatever part of the skeleton is missing. The first ensure() of a process (and any after a
 * failed change) checks everything against dumps and restores limits that one device lost from
 * the classes of the other (the IFB's are gone when the IFB was deleted); later ones confirm the
 * skeleton with a handful of reads: the links, the qdisc list, and a GET of each entry-point
 * filter and of the redirect. Only IPv4 is classified (filters are protocol ip, peers have IPv4
 * /32s); anything else takes the direct queues unshaped. See net/sched/cls_u32.c, sch_htb.c,
 * act_mirred.c, sch_api.c.
 */
import { readFileSync } from 'node:fs';
import {
  type BatchMessage,
  NETLINK_ROUTE,
  NetlinkSocket,
  SerialQueue,
  type TransportFactory,
  isNetlinkError,
  openNativeTransport,
} from '../../netlink';
import { SetupConflictError, atBoundary } from '../errors';
import { Links } from '../link';
import { RTM_DELTCLASS, RTM_DELTFILTER, RTM_GETTCLASS } from '../rtnetlink';
import { ipv4ToNumber, numberToIpv4 } from '../ipv4';
import { DEFAULT_TICKS_PER_MICROSECOND, htbClassOptionsFor, ticksPerMicrosecond } from '../tc/htb';
import { encodeTc, formatHandle } from '../tc/tc';
import { formatU32Handle } from '../tc/u32';
import type { ChangeQueue, LimitState, PeerLimit, PeerRef, Repair, ShaperApi } from '../types';
import {
  QDISC,
  Side,
  WIDEST_PREFIX,
  formatSubnet,
  ifbNameFor,
  isPeerHost,
  peerClassId,
  peerFilterHandle,
  downloadSide,
  uploadSide,
} from './addressing';
import {
  FILTER_INFO6,
  HOST_TABLE6_BASE,
  downloadSide6,
  isPeerHost6,
  peerFilterHandle6,
  uploadSide6,
} from './addressing6';
import { ignoringMissing, isOurHtb, rootQdiscOf } from './dump';
import {
  parsePeerClasses,
  peerClassMessage,
  peerClassesQuery,
  peerFilterCreate,
  peerFilterCreate6,
  peerFilterDelete6,
  peerFilterMessage,
} from './limits';
import { planLimits } from './plan';
import { planLimits6 } from './plan6';
import { ipv6ToBigInt } from '../ipv6';
import { tableOf } from '../tc/u32';
import { type Checked, type Skeleton, SkeletonBuilder } from './skeleton';

export * from './addressing';
export * from './addressing6';

function readTicksPerMicrosecond(): number {
  try {
    return ticksPerMicrosecond(readFileSync('/proc/net/psched', 'utf8'));
  } catch {
    return DEFAULT_TICKS_PER_MICROSECOND;
  }
}

export interface ShaperOptions {
  /** The kernel layer's change queue; a queue of its own when used alone. */
  changes?: ChangeQueue;
  /** Psched ticks per microsecond; default: from /proc/net/psched (15.625 on every kernel). */
  ticksPerUs?: number;
}

export class Shaper implements ShaperApi {
  private readonly socket: NetlinkSocket;
  private readonly links: Links;
  private readonly ticksPerUs: number;
  /** The shared qdiscs, IFB and u32 tables; limits hang in them. */
  private readonly tree: SkeletonBuilder;
  /** Changes run one at a time: two ensure()s must not both create the same table. */
  private readonly changes: ChangeQueue;

  constructor(open: TransportFactory = openNativeTransport, options: ShaperOptions = {}) {
    this.links = new Links(open);
    this.socket = new NetlinkSocket(open(NETLINK_ROUTE));
    this.ticksPerUs = options.ticksPerUs ?? readTicksPerMicrosecond();
    this.changes = options.changes ?? new SerialQueue();
    this.tree = new SkeletonBuilder(this.socket, this.links, this.ticksPerUs);
  }

  ensure(ifname: string, live: readonly PeerRef[]): Promise<Repair[]> {
    return this.serialized(async () => {
      const repairs: Repair[] = [];
      const checked = await this.tree.ensureSkeleton(
        ifname,
        repairs,
        this.dualStack(
          ifname,
          live.map((peer) => peer),
        ),
      );
      await this.reconcile(checked, live, repairs);
      return repairs;
    });
  }

  setLimit(ifname: string, peer: PeerRef, bytesPerSecond: number): Promise<void> {
    return this.serialized(async () => {
      // Validates before anything is sent.
      htbClassOptionsFor({ rate: bytesPerSecond, ticksPerUs: this.ticksPerUs });
      let skeleton = await this.skeletonFor(ifname, [peer]);
      const address = this.peerAddress(skeleton, peer.address);
      try {
        await this.applyLimit(skeleton, address, bytesPerSecond, peer.address6);
      } catch (error) {
        if (!isNetlinkError(error)) throw error;
        // The skeleton changed under us (an operator removed the IFB, a qdisc, a table...):
        // check and repair it, then try once more.
        this.tree.verified.delete(ifname);
        skeleton = (await this.tree.ensureSkeleton(ifname, [], this.dualStack(ifname, [peer])))
          .skeleton;
        await this.applyLimit(
          skeleton,
          this.peerAddress(skeleton, peer.address),
          bytesPerSecond,
          peer.address6,
        );
      }
    });
  }

  /**
   * Many limits at once (a restore at start): every class and key node in datagrams of
   * BATCH_MESSAGES, each acknowledged, instead of one exchange per peer. Validates every rate
   * and address before anything is sent.
   */
  setLimits(ifname: string, limits: readonly PeerLimit[]): Promise<void> {
    return this.serialized(async () => {
      if (limits.length === 0) return;
      for (const { bytesPerSecond } of limits) {
        htbClassOptionsFor({ rate: bytesPerSecond, ticksPerUs: this.ticksPerUs });
      }
      const skeleton = await this.skeletonFor(
        ifname,
        limits.map((limit) => limit.peer),
      );
      const messages: BatchMessage[] = [];
      for (const { peer, bytesPerSecond } of limits) {
        const address = this.peerAddress(skeleton, peer.address);
        messages.push(...this.limitMessages(skeleton, address, bytesPerSecond, peer.address6));
      }
      await this.tree.batch(messages, `set ${limits.length} speed limits on ${skeleton.wg.name}`);
    });
  }

  removeLimit(ifname: string, address: string, address6?: string): Promise<void> {
    return this.serialized(async () => {
      const value = ipv4ToNumber(address);
      const value6 = address6 === undefined ? null : ipv6ToBigInt(address6);
      const wg = await this.links.getLink(ifname);
      const ifb = await this.tree.findLink(ifbNameFor(ifname));
      const qdiscs = await this.tree.dumpQdiscs();
      const sides = [downloadSide(wg), ...(ifb ? [uploadSide(ifb)] : [])];
      for (const side of sides) {
        // No HTB of ours there, nothing of ours under it (and a filter request would fail
        // with EINVAL "Parent Qdisc doesn't exists").
        if (!isOurHtb(rootQdiscOf(qdiscs, side.ifindex))) continue;
        // The IPv6 key node first: HTB refuses to delete a class a filter points at.
        if (value6 !== null) await this.removeNode6(side, peerFilterHandle6(value6));
        await this.removeOn(side, value);
      }
    });
  }

  /**
   * Reads what holds in each direction: the peer classes on the WireGuard interface's egress
   * (download) and on the IFB's (upload). A direction whose device or qdisc is gone has none.
   */
  listLimits(ifname: string): Promise<Map<string, LimitState>> {
    return atBoundary(() => this.readLimits(ifname));
  }

  private async readLimits(ifname: string): Promise<Map<string, LimitState>> {
    const wg = await this.links.getLink(ifname);
    const [first] = await this.links.getIpv4Addresses(wg.index);
    const limits = new Map<string, LimitState>();
    if (!first || first.prefixLength < WIDEST_PREFIX) return limits;
    const upper = ipv4ToNumber(first.address) & 0xffff0000;
    const download = await this.peerClasses(downloadSide(wg));
    const ifb = await this.tree.findLink(ifbNameFor(ifname));
    const upload = ifb ? await this.peerClasses(uploadSide(ifb)) : new Map<number, number>();
    for (const minor of new Set([...download.keys(), ...upload.keys()])) {
      limits.set(numberToIpv4((upper | minor) >>> 0), {
        download: download.get(minor) ?? null,
        upload: upload.get(minor) ?? null,
      });
    }
    return limits;
  }

  /**
   * Reconciles the peers' classes and key nodes on both devices with the live peers: reads the
   * classes of both devices, plans (planLimits), then removes and restores what the plan says.
   */
  private async reconcile(checked: Checked, live: readonly PeerRef[], repairs: Repair[]) {
    const { skeleton } = checked;
    const sides = { download: downloadSide(skeleton.wg), upload: uploadSide(skeleton.ifb) };
    const classes = {
      download: await this.peerClasses(sides.download),
      upload: await this.peerClasses(sides.upload),
    };
    const plan = planLimits(
      sides,
      skeleton.subnet,
      { classes, peerNodes: checked.peerNodes },
      live,
      this.ticksPerUs,
    );
    const plan6 = skeleton.ipv6 === null ? null : await this.planIpv6(skeleton, classes, live);
    // IPv6 key nodes first: a class they point at cannot be deleted before them.
    for (const { side, handle } of plan6?.deletes ?? []) await this.removeNode6(side, handle);
    for (const address of plan.removals) {
      for (const side of [sides.download, sides.upload]) await this.removeOn(side, address);
    }
    const messages = [...plan.messages, ...(plan6?.messages ?? [])];
    if (messages.length > 0) {
      await this.tree.batch(messages, `restore speed limits on ${skeleton.wg.name}`);
    }
    repairs.push(...plan.repairs, ...(plan6?.repairs ?? []));
  }

  /** The IPv6 key nodes of both devices (tables 4XX:), planned against the live peers. */
  private async planIpv6(
    skeleton: Skeleton,
    classes: { download: Map<number, number>; upload: Map<number, number> },
    live: readonly PeerRef[],
  ) {
    const sides = { download: downloadSide6(skeleton.wg), upload: uploadSide6(skeleton.ifb) };
    const nodes = { download: new Map<number, number | undefined>(), upload: new Map() };
    for (const side of [sides.download, sides.upload]) {
      for (const entry of await this.tree.dumpU32(side, QDISC, FILTER_INFO6)) {
        const table = tableOf(entry.handle);
        if (entry.divisor !== undefined) continue;
        if (table < HOST_TABLE6_BASE || table > HOST_TABLE6_BASE + 0xff) continue;
        nodes[side.direction].set(entry.handle, entry.classid);
      }
    }
    return planLimits6(sides, skeleton.ipv6!.prefix, { classes, nodes }, live);
  }

  /** Deletes an IPv6 key node (priority 11); one already gone is not an error. */
  private async removeNode6(side: Side, handle: number): Promise<void> {
    await ignoringMissing(() =>
      this.socket.request(RTM_DELTFILTER, peerFilterDelete6(side, handle), {
        operation: `RTM_DELTFILTER u32 ${formatU32Handle(handle)} prio 11 dev ${side.ifname}`,
      }),
    );
  }

  /**
   * Whether the IPv6 tree is needed: a peer given is dual-stack, or the tree was built before
   * (its key nodes must then be reconciled, or they would keep classes from being deleted).
   */
  private dualStack(ifname: string, peers: readonly PeerRef[]): boolean {
    return (
      peers.some((peer) => peer.address6 != null) ||
      (this.tree.verified.get(ifname)?.ipv6 ?? null) !== null
    );
  }

  /** The verified skeleton, checked (and built) again when it lacks the IPv6 tree it needs. */
  private async skeletonFor(ifname: string, peers: readonly PeerRef[]): Promise<Skeleton> {
    const known = this.tree.verified.get(ifname);
    const needs6 = peers.some((peer) => peer.address6 != null);
    if (known !== undefined && (!needs6 || known.ipv6 !== null)) return known;
    return (await this.tree.ensureSkeleton(ifname, [], this.dualStack(ifname, peers))).skeleton;
  }

  /** The peer's key node, then its class (HTB refuses to delete a class a filter points at). */
  private async removeOn(side: Side, address: number): Promise<void> {
    await ignoringMissing(() =>
      this.socket.request(RTM_DELTFILTER, peerFilterMessage(side, address), {
        operation: `RTM_DELTFILTER u32 ${formatU32Handle(peerFilterHandle(address))} dev ${side.ifname}`,
      }),
    );
    const deleteClass = (): Promise<void> =>
      ignoringMissing(() =>
        this.socket.request(
          RTM_DELTCLASS,
          encodeTc({ ifindex: side.ifindex, handle: peerClassId(address), parent: 0 }),
          { operation: `RTM_DELTCLASS ${formatHandle(peerClassId(address))} dev ${side.ifname}` },
        ),
      );
    try {
      await deleteClass();
    } catch (error) {
      // EBUSY: a filter still points at the class. Ours can only be an IPv6 key node of a
      // dual-stack peer the shaper was not told of (deleted behind the daemon's back before a
      // restart): remove the IPv6 nodes into this class, then the class.
      if (!isNetlinkError(error, 'EBUSY')) throw error;
      const classid = peerClassId(address);
      for (const entry of await this.tree.dumpU32(side, QDISC, FILTER_INFO6)) {
        const table = tableOf(entry.handle);
        if (table < HOST_TABLE6_BASE || table > HOST_TABLE6_BASE + 0xff) continue;
        if (entry.divisor === undefined && entry.classid === classid) {
          await this.removeNode6(side, entry.handle);
        }
      }
      await deleteClass();
    }
  }

  close(): void {
    this.socket.close();
    this.links.close();
  }

  /** One change at a time (on the kernel layer's change queue), its errors typed here. */
  private serialized<T>(work: () => Promise<T>): Promise<T> {
    return this.changes.run(() => atBoundary(work));
  }

  private peerAddress(skeleton: Skeleton, address: string): number {
    const value = ipv4ToNumber(address);
    const { subnet } = skeleton;
    if (!isPeerHost(subnet, value)) {
      throw new SetupConflictError(
        `${address} is not a host address of ${skeleton.wg.name}'s subnet ${formatSubnet(subnet)}; ` +
          'speed limits are keyed on peers’ tunnel addresses inside it',
      );
    }
    return value;
  }

  /** Class and filter on both devices, in one datagram; each is created or changed in place. */
  private async applyLimit(
    skeleton: Skeleton,
    address: number,
    rate: number,
    address6: string | null | undefined,
  ): Promise<void> {
    await this.socket.batch(this.limitMessages(skeleton, address, rate, address6), {
      operation: `set speed limit of ${numberToIpv4(address)} on ${skeleton.wg.name}`,
    });
  }

  /**
   * Per device the class and the IPv4 key node, then, for a dual-stack peer inside the shaped
   * prefix, its IPv6 key node into the same class (one limit for both families).
   */
  private limitMessages(
    skeleton: Skeleton,
    address: number,
    rate: number,
    address6: string | null | undefined,
  ): BatchMessage[] {
    const messages: BatchMessage[] = [];
    for (const side of [downloadSide(skeleton.wg), uploadSide(skeleton.ifb)]) {
      messages.push(
        peerClassMessage(side, address, rate, this.ticksPerUs),
        peerFilterCreate(side, address),
      );
    }
    const value6 = address6 == null ? null : ipv6ToBigInt(address6);
    if (skeleton.ipv6 !== null && value6 !== null && isPeerHost6(skeleton.ipv6.prefix, value6)) {
      for (const side of [downloadSide6(skeleton.wg), uploadSide6(skeleton.ifb)]) {
        messages.push(peerFilterCreate6(side, value6, address));
      }
    }
    return messages;
  }

  /** Class minor → rate of the peer classes (children of 1:ffff) on one device. */
  private async peerClasses(side: Side): Promise<Map<number, number>> {
    const classes = await this.socket.dump(RTM_GETTCLASS, peerClassesQuery(side), {
      operation: `RTM_GETTCLASS dev ${side.ifname}`,
    });
    return parsePeerClasses(side, classes);
  }
}
