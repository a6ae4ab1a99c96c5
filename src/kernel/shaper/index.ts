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
  NLM_F_ACK,
  NLM_F_CREATE,
  NLM_F_ECHO,
  NLM_F_EXCL,
  NLM_F_REQUEST,
  NetlinkSocket,
  SerialQueue,
  type TransportFactory,
  encodeAttributes,
  isNetlinkError,
  openNativeTransport,
} from '../../netlink';
import { InterfaceMissingError, SetupConflictError, atBoundary } from '../errors';
import { Links } from '../link';
import {
  RTM_DELQDISC,
  RTM_DELTCLASS,
  RTM_DELTFILTER,
  RTM_GETQDISC,
  RTM_GETTCLASS,
  RTM_GETTFILTER,
  RTM_NEWQDISC,
  RTM_NEWTCLASS,
  RTM_NEWTFILTER,
} from '../rtnetlink';
import { ipv4ToNumber, numberToIpv4, prefixMask } from '../ipv4';
import {
  DEFAULT_TICKS_PER_MICROSECOND,
  TC_HTB_PROTOVER,
  htbClass,
  htbClassOptionsFor,
  htbQdisc,
  ticksPerMicrosecond,
} from '../tc/htb';
import { egressRedirect } from '../tc/mirred';
import {
  TC_H_INGRESS,
  TC_H_ROOT,
  type TcObject,
  decodeTc,
  tcAttributes,
  encodeTc,
  formatHandle,
} from '../tc/tc';
import {
  U32_MAX_DIVISOR,
  type U32Entry,
  formatU32Handle,
  isKernelChosenTable,
  sameSelector,
  bucketOf,
  tableOf,
  u32Filter,
  u32Handle,
} from '../tc/u32';
import type { ChangeQueue, LimitState, LinkInfo, PeerRef, Repair, ShaperApi } from '../types';
import {
  BATCH_MESSAGES,
  DIRECT_QLEN,
  FILTER_INFO,
  FILTER_PRIORITY,
  HOST_TABLE_BASE,
  INGRESS,
  IPV4_DST_OFFSET,
  IPV4_SRC_OFFSET,
  MATCH_ALL,
  NODE,
  OCTET_TABLE,
  PARENT_CLASS,
  PARENT_RATE,
  QDISC,
  R2Q,
  Side,
  Subnet,
  WIDEST_PREFIX,
  formatSubnet,
  ifbNameFor,
  octetLinkSelector,
  peerClassId,
  peerFilterHandle,
  rootLinkSelector,
  subnetOf,
  thirdOctets,
} from './addressing';
import { needing } from './modules';
import {
  describeRate,
  encodeU32,
  ignoringMissing,
  ingressQdiscOf,
  isOurHtb,
  parseU32,
  redirectsTo,
  rootQdiscOf,
} from './dump';
import {
  parsePeerClasses,
  peerClassMessage,
  peerClassesQuery,
  peerFilterCreate,
  peerFilterMessage,
} from './limits';

export * from './addressing';

/** What ensure() verified, so the next ensure() can check the skeleton with a few GETs. */
interface Skeleton {
  wg: { name: string; index: number };
  ifb: { name: string; index: number };
  subnet: Subnet;
  /** Handle of the root-table key node linking to 100: on the WireGuard interface and the IFB. */
  rootLinks: { download: number; upload: number };
  /** Handle of the redirecting filter on the WireGuard interface's ingress. */
  redirect: number;
}

/** What one ensureSkeleton() found: the skeleton, and peers' key nodes when it dumped them. */
interface Checked {
  skeleton: Skeleton;
  /** Handles of the peers' key nodes per side; null when the quick check found all intact. */
  peerNodes: { download: Set<number>; upload: Set<number> } | null;
}

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
  /** Per WireGuard interface: the skeleton the last full ensure() built or found. */
  private readonly verified = new Map<string, Skeleton>();
  /** Changes run one at a time: two ensure()s must not both create the same table. */
  private readonly changes: ChangeQueue;

  constructor(open: TransportFactory = openNativeTransport, options: ShaperOptions = {}) {
    this.links = new Links(open);
    this.socket = new NetlinkSocket(open(NETLINK_ROUTE));
    this.ticksPerUs = options.ticksPerUs ?? readTicksPerMicrosecond();
    this.changes = options.changes ?? new SerialQueue();
  }

  ensure(ifname: string, live: readonly PeerRef[]): Promise<Repair[]> {
    return this.serialized(async () => {
      const repairs: Repair[] = [];
      const checked = await this.ensureSkeleton(ifname, repairs);
      await this.reconcile(checked, live, repairs);
      return repairs;
    });
  }

  setLimit(ifname: string, peer: PeerRef, bytesPerSecond: number): Promise<void> {
    return this.serialized(async () => {
      // Validates before anything is sent.
      htbClassOptionsFor({ rate: bytesPerSecond, ticksPerUs: this.ticksPerUs });
      let skeleton = this.verified.get(ifname) ?? (await this.ensureSkeleton(ifname, [])).skeleton;
      const address = this.peerAddress(skeleton, peer.address);
      try {
        await this.applyLimit(skeleton, address, bytesPerSecond);
      } catch (error) {
        if (!isNetlinkError(error)) throw error;
        // The skeleton changed under us (an operator removed the IFB, a qdisc, a table...):
        // check and repair it, then try once more.
        this.verified.delete(ifname);
        skeleton = (await this.ensureSkeleton(ifname, [])).skeleton;
        await this.applyLimit(skeleton, this.peerAddress(skeleton, peer.address), bytesPerSecond);
      }
    });
  }

  removeLimit(ifname: string, address: string): Promise<void> {
    return this.serialized(async () => {
      const value = ipv4ToNumber(address);
      const wg = await this.links.getLink(ifname);
      const ifb = await this.findLink(ifbNameFor(ifname));
      const qdiscs = await this.dumpQdiscs();
      const sides = [this.download(wg), ...(ifb ? [this.upload(ifb)] : [])];
      for (const side of sides) {
        // No HTB of ours there, nothing of ours under it (and a filter request would fail
        // with EINVAL "Parent Qdisc doesn't exists").
        if (!isOurHtb(rootQdiscOf(qdiscs, side.ifindex))) continue;
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
    const download = await this.peerClasses(this.download(wg));
    const ifb = await this.findLink(ifbNameFor(ifname));
    const upload = ifb ? await this.peerClasses(this.upload(ifb)) : new Map<number, number>();
    for (const minor of new Set([...download.keys(), ...upload.keys()])) {
      limits.set(numberToIpv4((upper | minor) >>> 0), {
        download: download.get(minor) ?? null,
        upload: upload.get(minor) ?? null,
      });
    }
    return limits;
  }

  /**
   * Reconciles the peers' classes and key nodes on both devices with the live peers. The
   * desired state is: for a live address, the rate that holds on either device (the download
   * rate when the two differ) on both; for any other address, nothing. Nothing is ever copied
   * to an address no peer has.
   */
  private async reconcile(checked: Checked, live: readonly PeerRef[], repairs: Repair[]) {
    const { skeleton } = checked;
    const sides = { download: this.download(skeleton.wg), upload: this.upload(skeleton.ifb) };
    const classes = {
      download: await this.peerClasses(sides.download),
      upload: await this.peerClasses(sides.upload),
    };
    const upper = skeleton.subnet.network & 0xffff0000;
    const liveAddresses = new Set(live.map((peer) => ipv4ToNumber(peer.address)));
    const minors = new Set([...classes.download.keys(), ...classes.upload.keys()]);
    // Key nodes without a class (their class was deleted by hand) count as state too.
    for (const direction of ['download', 'upload'] as const) {
      for (const node of checked.peerNodes?.[direction] ?? []) {
        minors.add(((tableOf(node) - HOST_TABLE_BASE) << 8) | bucketOf(node));
      }
    }
    const messages: BatchMessage[] = [];
    for (const minor of [...minors].sort((a, b) => a - b)) {
      const address = (upper | minor) >>> 0;
      const text = numberToIpv4(address);
      const down = classes.download.get(minor);
      const up = classes.upload.get(minor);
      const held = `download ${describeRate(down)} on ${sides.download.ifname}, upload ${describeRate(up)} on ${sides.upload.ifname}`;
      if (!liveAddresses.has(address) || !this.inSubnet(skeleton, address)) {
        for (const side of [sides.download, sides.upload]) await this.removeOn(side, address);
        repairs.push({
          address: text,
          found: `${held} for an address no peer has`,
          done: 'removed',
        });
        continue;
      }
      const rate = down ?? up;
      if (rate === undefined) {
        // Key nodes only: no limit holds; remove the leftovers.
        for (const side of [sides.download, sides.upload]) await this.removeOn(side, address);
        repairs.push({
          address: text,
          found: `key nodes without classes (${held})`,
          done: 'removed them',
        });
        continue;
      }
      const fix: string[] = [];
      for (const side of [sides.download, sides.upload]) {
        const nodes = checked.peerNodes?.[side.direction];
        const hasClass = classes[side.direction].get(minor) === rate;
        const hasNode = nodes === undefined || nodes.has(peerFilterHandle(address));
        if (hasClass && hasNode) continue;
        messages.push(
          peerClassMessage(side, address, rate, this.ticksPerUs),
          peerFilterCreate(side, address),
        );
        fix.push(`${side.direction} on ${side.ifname}`);
      }
      if (fix.length > 0) {
        repairs.push({
          address: text,
          found: held,
          done: `restored ${fix.join(' and ')} at ${rate} B/s`,
        });
      }
    }
    if (messages.length > 0) {
      await this.batch(messages, `restore speed limits on ${skeleton.wg.name}`);
    }
  }

  private inSubnet(skeleton: Skeleton, address: number): boolean {
    const { subnet } = skeleton;
    const host = address & 0xffff;
    return (
      (address & prefixMask(subnet.prefixLength)) >>> 0 === subnet.network &&
      host !== 0 &&
      host !== 0xffff
    );
  }

  /** The peer's key node, then its class (HTB refuses to delete a class a filter points at). */
  private async removeOn(side: Side, address: number): Promise<void> {
    await ignoringMissing(() =>
      this.socket.request(RTM_DELTFILTER, peerFilterMessage(side, address), {
        operation: `RTM_DELTFILTER u32 ${formatU32Handle(peerFilterHandle(address))} dev ${side.ifname}`,
      }),
    );
    await ignoringMissing(() =>
      this.socket.request(
        RTM_DELTCLASS,
        encodeTc({ ifindex: side.ifindex, handle: peerClassId(address), parent: 0 }),
        { operation: `RTM_DELTCLASS ${formatHandle(peerClassId(address))} dev ${side.ifname}` },
      ),
    );
  }

  close(): void {
    this.socket.close();
    this.links.close();
  }

  /** One change at a time (on the kernel layer's change queue), its errors typed here. */
  private serialized<T>(work: () => Promise<T>): Promise<T> {
    return this.changes.run(() => atBoundary(work));
  }

  private download(wg: { name: string; index: number }): Side {
    return {
      direction: 'download',
      ifname: wg.name,
      ifindex: wg.index,
      keyOffset: IPV4_DST_OFFSET,
    };
  }

  private upload(ifb: { name: string; index: number }): Side {
    return {
      direction: 'upload',
      ifname: ifb.name,
      ifindex: ifb.index,
      keyOffset: IPV4_SRC_OFFSET,
    };
  }

  private peerAddress(skeleton: Skeleton, address: string): number {
    const value = ipv4ToNumber(address);
    const { subnet } = skeleton;
    const inside = (value & prefixMask(subnet.prefixLength)) >>> 0 === subnet.network;
    const host = value & 0xffff;
    if (!inside || host === 0 || host === 0xffff) {
      throw new SetupConflictError(
        `${address} is not a host address of ${skeleton.wg.name}'s subnet ${formatSubnet(subnet)}; ` +
          'speed limits are keyed on peers’ tunnel addresses inside it',
      );
    }
    return value;
  }

  /** Class and filter on both devices, in one datagram; each is created or changed in place. */
  private async applyLimit(skeleton: Skeleton, address: number, rate: number): Promise<void> {
    const messages: BatchMessage[] = [];
    for (const side of [this.download(skeleton.wg), this.upload(skeleton.ifb)]) {
      messages.push(
        peerClassMessage(side, address, rate, this.ticksPerUs),
        peerFilterCreate(side, address),
      );
    }
    await this.socket.batch(messages, {
      operation: `set speed limit of ${numberToIpv4(address)} on ${skeleton.wg.name}`,
    });
  }

  /**
   * Checks the skeleton and builds or repairs what is missing. When an earlier call verified it,
   * a few cheap reads (links, qdiscs, three GETs of the filters that hold the layout together)
   * confirm it is intact; otherwise the filters are dumped and compared piece by piece. A piece
   * rebuilt while the rest of the skeleton stood is a repair and is reported; building it all
   * the first time is not.
   */
  private async ensureSkeleton(ifname: string, repairs: Repair[]): Promise<Checked> {
    const wg = await this.links.getLink(ifname);
    const subnet = subnetOf(ifname, await this.links.getIpv4Addresses(wg.index));
    const ifb = await this.ensureIfb(ifname);
    const qdiscs = await this.dumpQdiscs();
    const download = this.download(wg);
    const upload = this.upload(ifb);
    const known = this.verified.get(ifname);
    const had = {
      download: isOurHtb(rootQdiscOf(qdiscs, wg.index)),
      upload: !ifb.created && isOurHtb(rootQdiscOf(qdiscs, ifb.index)),
    };
    if (
      known &&
      known.wg.index === wg.index &&
      known.ifb.index === ifb.index &&
      known.subnet.network === subnet.network &&
      known.subnet.prefixLength === subnet.prefixLength &&
      had.download &&
      had.upload &&
      ingressQdiscOf(qdiscs, wg.index)?.kind === 'ingress' &&
      (await this.intact(known, download, upload))
    ) {
      return { skeleton: known, peerNodes: null };
    }
    this.verified.delete(ifname);
    if (ifb.created && had.download) {
      repairs.push({ address: null, found: `${ifb.name} missing`, done: `created it` });
    }
    const rootLinks = { download: 0, upload: 0 };
    const peerNodes = { download: new Set<number>(), upload: new Set<number>() };
    for (const side of [download, upload]) {
      const fresh = await this.ensureHtb(side, rootQdiscOf(qdiscs, side.ifindex));
      const other = side.direction === 'download' ? had.upload : had.download;
      if (fresh && other && !(side.direction === 'upload' && ifb.created)) {
        repairs.push({
          address: null,
          found: `no HTB root qdisc 1: on ${side.ifname} (deleted, or the device was recreated)`,
          done: 'created it',
        });
      }
      await this.ensureParentClass(side);
      const tables = await this.ensureHashTables(side, subnet, fresh);
      rootLinks[side.direction] = tables.root;
      peerNodes[side.direction] = tables.peerNodes;
    }
    const redirect = await this.ensureRedirect(download, ifb, ingressQdiscOf(qdiscs, wg.index));
    const skeleton: Skeleton = {
      wg: { name: wg.name, index: wg.index },
      ifb: { name: ifb.name, index: ifb.index },
      subnet,
      rootLinks,
      redirect,
    };
    this.verified.set(ifname, skeleton);
    return { skeleton, peerNodes };
  }

  private async intact(known: Skeleton, download: Side, upload: Side): Promise<boolean> {
    try {
      for (const side of [download, upload]) {
        const root = await this.getFilter(side, QDISC, known.rootLinks[side.direction]);
        if (
          root?.link !== u32Handle(OCTET_TABLE, 0, 0) ||
          !sameSelector(root.selector, rootLinkSelector(side.keyOffset, known.subnet))
        ) {
          return false;
        }
      }
      const redirect = await this.getFilter(download, INGRESS, known.redirect);
      return redirect !== undefined && redirectsTo(redirect, known.ifb.index);
    } catch (error) {
      if (isNetlinkError(error)) return false;
      throw error;
    }
  }

  private async ensureIfb(
    ifname: string,
  ): Promise<{ name: string; index: number; created: boolean }> {
    const name = ifbNameFor(ifname);
    const existing = await this.findLink(name);
    if (existing && existing.kind !== 'ifb') {
      throw new SetupConflictError(
        `${name} exists but is ${existing.kind ? `a ${existing.kind}` : 'not an IFB'} link; ` +
          `speed limits need it as ${ifname}'s IFB device for uploads: delete or rename it`,
      );
    }
    const index =
      existing?.index ?? (await needing('ifb', () => this.links.createLink(name, 'ifb')));
    // A redirect to a device that is down drops the packet (act_mirred.c).
    if (!existing?.up) await this.links.setUp(index);
    return { name, index, created: existing === undefined };
  }

  /** Returns true when the qdisc was created now (so it holds nothing yet). */
  private async ensureHtb(side: Side, root: TcObject | undefined): Promise<boolean> {
    if (isOurHtb(root)) return false;
    if (root && root.handle !== 0) {
      // Somebody else's root qdisc (handle 0 is a default one, which a create replaces).
      await this.socket.request(
        RTM_DELQDISC,
        encodeTc({ ifindex: side.ifindex, handle: root.handle, parent: TC_H_ROOT }),
        {
          operation: `RTM_DELQDISC ${root.kind} ${formatHandle(root.handle)} root dev ${side.ifname}`,
        },
      );
    }
    await needing('htb', () =>
      this.socket.request(
        RTM_NEWQDISC,
        encodeTc(
          { ifindex: side.ifindex, handle: QDISC, parent: TC_H_ROOT },
          encodeAttributes(htbQdisc, {
            kind: 'htb',
            options: {
              // defcls 0 names no class: unclassified packets go to the direct queue, unshaped.
              init: { version: TC_HTB_PROTOVER, rate2quantum: R2Q, defcls: 0 },
              directQlen: DIRECT_QLEN,
            },
          }),
        ),
        {
          operation: `RTM_NEWQDISC htb ${formatHandle(QDISC)} root dev ${side.ifname}`,
          flags: NLM_F_CREATE | NLM_F_EXCL,
        },
      ),
    );
    return true;
  }

  /** Create or change 1:ffff (NLM_F_CREATE without EXCL does either). */
  private async ensureParentClass(side: Side): Promise<void> {
    await this.socket.request(
      RTM_NEWTCLASS,
      encodeTc(
        { ifindex: side.ifindex, handle: PARENT_CLASS, parent: QDISC },
        encodeAttributes(htbClass, {
          kind: 'htb',
          options: htbClassOptionsFor({ rate: PARENT_RATE, ticksPerUs: this.ticksPerUs }),
        }),
      ),
      {
        operation: `RTM_NEWTCLASS htb ${formatHandle(PARENT_CLASS)} dev ${side.ifname}`,
        flags: NLM_F_CREATE,
      },
    );
  }

  /**
   * The u32 tables and links of one side. Wrong key nodes are deleted and made again (u32 keeps
   * a node's selector when it is changed in place). Returns the root link's handle and the
   * peers' key nodes found.
   */
  private async ensureHashTables(
    side: Side,
    subnet: Subnet,
    fresh: boolean,
  ): Promise<{ root: number; peerNodes: Set<number> }> {
    const entries = fresh ? [] : await this.dumpU32(side, QDISC);
    const tables = new Map<number, U32Entry>();
    const nodes = new Map<number, U32Entry>();
    for (const entry of entries) {
      if (entry.divisor !== undefined) tables.set(tableOf(entry.handle), entry);
      else nodes.set(entry.handle, entry);
    }
    const creates: BatchMessage[] = [];
    const table = (id: number): void => {
      const existing = tables.get(id);
      if (existing?.divisor === U32_MAX_DIVISOR) return;
      if (existing) {
        throw new SetupConflictError(
          `u32 table ${id.toString(16)}: at priority ${FILTER_PRIORITY} on ${side.ifname} has ` +
            `${existing.divisor} buckets instead of ${U32_MAX_DIVISOR}; remove the filters at ` +
            `that priority (tc filter del dev ${side.ifname} parent 1: prio ${FILTER_PRIORITY})`,
        );
      }
      creates.push(
        this.filterCreate(side, QDISC, u32Handle(id, 0, 0), { divisor: U32_MAX_DIVISOR }),
      );
    };
    table(OCTET_TABLE);
    const octets = thirdOctets(subnet);
    for (const octet of octets) table(HOST_TABLE_BASE + octet);
    for (const octet of octets) {
      const id = u32Handle(OCTET_TABLE, octet, NODE);
      const wanted = {
        hash: u32Handle(OCTET_TABLE, octet, 0),
        link: u32Handle(HOST_TABLE_BASE + octet, 0, 0),
        selector: octetLinkSelector(side.keyOffset, subnet, octet),
      };
      const existing = nodes.get(id);
      if (
        existing &&
        existing.link === wanted.link &&
        sameSelector(existing.selector, wanted.selector)
      ) {
        continue;
      }
      if (existing) await this.deleteFilter(side, QDISC, id);
      creates.push(this.filterCreate(side, QDISC, id, wanted));
    }
    if (creates.length > 0) {
      await needing('u32', () => this.batch(creates, `create u32 hash tables on ${side.ifname}`));
    }
    const peerNodes = new Set(
      [...nodes.keys()].filter((h) => tableOf(h) >= HOST_TABLE_BASE && tableOf(h) <= 0x2ff),
    );
    // The entry point last, so no packet is steered into a half-built tree.
    const wanted = rootLinkSelector(side.keyOffset, subnet);
    let root: number | undefined;
    for (const node of nodes.values()) {
      if (!isKernelChosenTable(tableOf(node.handle))) continue;
      if (node.link !== u32Handle(OCTET_TABLE, 0, 0)) continue;
      if (root === undefined && sameSelector(node.selector, wanted)) root = node.handle;
      else await this.deleteFilter(side, QDISC, node.handle);
    }
    if (root === undefined) {
      root = await this.createEchoed(
        side,
        QDISC,
        // No TCA_U32_HASH: the root table of our priority, whatever id the kernel gave it; a
        // handle with only a node id (0:0:1) means "node 1 in that table" (cls_u32.c u32_change).
        u32Handle(0, 0, NODE),
        { link: u32Handle(OCTET_TABLE, 0, 0), selector: wanted },
        'u32',
      );
    }
    return { root, peerNodes };
  }

  /** Class minor → rate of the peer classes (children of 1:ffff) on one device. */
  private async peerClasses(side: Side): Promise<Map<number, number>> {
    const classes = await this.socket.dump(RTM_GETTCLASS, peerClassesQuery(side), {
      operation: `RTM_GETTCLASS dev ${side.ifname}`,
    });
    return parsePeerClasses(side, classes);
  }

  /** Sends messages in datagrams of at most BATCH_MESSAGES, each acknowledged. */
  private async batch(messages: BatchMessage[], operation: string): Promise<void> {
    for (let start = 0; start < messages.length; start += BATCH_MESSAGES) {
      await this.socket.batch(messages.slice(start, start + BATCH_MESSAGES), { operation });
    }
  }

  /** The ingress qdisc and the one filter redirecting everything to the IFB's egress. */
  private async ensureRedirect(
    wg: Side,
    ifb: { name: string; index: number },
    ingress: TcObject | undefined,
  ): Promise<number> {
    let fresh = false;
    if (ingress?.kind !== 'ingress') {
      if (ingress) {
        // A clsact in the ingress slot: ours is a plain ingress qdisc.
        await this.socket.request(
          RTM_DELQDISC,
          encodeTc({ ifindex: wg.ifindex, handle: ingress.handle, parent: TC_H_INGRESS }),
          { operation: `RTM_DELQDISC ${ingress.kind} ingress dev ${wg.ifname}` },
        );
      }
      await needing('ingress', () =>
        this.socket.request(
          RTM_NEWQDISC,
          encodeTc(
            { ifindex: wg.ifindex, handle: INGRESS, parent: TC_H_INGRESS },
            encodeAttributes(tcAttributes, { kind: 'ingress' }),
          ),
          {
            operation: `RTM_NEWQDISC ingress dev ${wg.ifname}`,
            flags: NLM_F_CREATE | NLM_F_EXCL,
          },
        ),
      );
      fresh = true;
    }
    const nodes = fresh
      ? []
      : (await this.dumpU32(wg, INGRESS)).filter((e) => e.divisor === undefined);
    let kept: number | undefined;
    for (const node of nodes) {
      if (node.mirred.length === 0) continue;
      if (kept === undefined && redirectsTo(node, ifb.index)) kept = node.handle;
      // A redirect to a deleted IFB (ifindex 0) or a duplicate.
      else await this.deleteFilter(wg, INGRESS, node.handle);
    }
    if (kept !== undefined) return kept;
    return needing('mirred', () =>
      this.createEchoed(
        wg,
        INGRESS,
        u32Handle(0, 0, NODE),
        { selector: MATCH_ALL, actions: [egressRedirect(ifb.index)] },
        'mirred',
      ),
    );
  }

  private filterCreate(
    side: Side,
    parent: number,
    filterHandle: number,
    options: Parameters<typeof encodeU32>[0],
  ): BatchMessage {
    return {
      type: RTM_NEWTFILTER,
      flags: NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
      payload: encodeTc(
        { ifindex: side.ifindex, handle: filterHandle, parent, info: FILTER_INFO },
        encodeU32(options),
      ),
      ack: true,
      operation: `RTM_NEWTFILTER u32 ${formatU32Handle(filterHandle)} parent ${formatHandle(parent)} dev ${side.ifname}`,
    };
  }

  /** Creates a key node and returns the handle the kernel gave it (NLM_F_ECHO sends it back). */
  private async createEchoed(
    side: Side,
    parent: number,
    filterHandle: number,
    options: Parameters<typeof encodeU32>[0],
    what: string,
  ): Promise<number> {
    const message = this.filterCreate(side, parent, filterHandle, options);
    const replies = await this.socket.request(message.type, message.payload, {
      operation: `${message.operation} (${what})`,
      flags: NLM_F_CREATE | NLM_F_EXCL | NLM_F_ECHO,
    });
    const echoed = replies.find((reply) => reply.type === RTM_NEWTFILTER);
    if (!echoed) throw new Error(`${message.operation}: the kernel echoed no filter`);
    return decodeTc(echoed).handle;
  }

  private async deleteFilter(side: Side, parent: number, filterHandle: number): Promise<void> {
    await this.socket.request(
      RTM_DELTFILTER,
      encodeTc(
        { ifindex: side.ifindex, handle: filterHandle, parent, info: FILTER_INFO },
        encodeAttributes(u32Filter, { kind: 'u32' }),
      ),
      {
        operation: `RTM_DELTFILTER u32 ${formatU32Handle(filterHandle)} parent ${formatHandle(parent)} dev ${side.ifname}`,
      },
    );
  }

  /** RTM_GETTFILTER of one u32 node; undefined if the kernel sent nothing. */
  private async getFilter(side: Side, parent: number, filterHandle: number) {
    const replies = await this.socket.request(
      RTM_GETTFILTER,
      encodeTc(
        { ifindex: side.ifindex, handle: filterHandle, parent, info: FILTER_INFO },
        encodeAttributes(u32Filter, { kind: 'u32' }),
      ),
      {
        operation: `RTM_GETTFILTER u32 ${formatU32Handle(filterHandle)} parent ${formatHandle(parent)} dev ${side.ifname}`,
      },
    );
    return replies.map(parseU32).find((entry) => entry?.handle === filterHandle);
  }

  /** Every u32 table and node of our priority under `parent`. */
  private async dumpU32(side: Side, parent: number): Promise<U32Entry[]> {
    const replies = await this.socket.dump(
      RTM_GETTFILTER,
      encodeTc({ ifindex: side.ifindex, handle: 0, parent, info: FILTER_INFO }),
      { operation: `RTM_GETTFILTER dump parent ${formatHandle(parent)} dev ${side.ifname}` },
    );
    return replies.map(parseU32).filter((entry): entry is U32Entry => entry !== undefined);
  }

  private async dumpQdiscs(): Promise<TcObject[]> {
    // The kernel dumps the qdiscs of every device (tc_dump_qdisc has no ifindex filter).
    const replies = await this.socket.dump(
      RTM_GETQDISC,
      encodeTc({ ifindex: 0, handle: 0, parent: 0 }),
      { operation: 'RTM_GETQDISC dump' },
    );
    return replies.map(decodeTc);
  }

  private async findLink(name: string): Promise<LinkInfo | undefined> {
    try {
      return await this.links.getLink(name);
    } catch (error) {
      if (error instanceof InterfaceMissingError) return undefined;
      throw error;
    }
  }
}
