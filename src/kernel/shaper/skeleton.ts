/**
 * The shared part of the tc layout on both devices (./index.ts describes it): the IFB, the HTB
 * root qdiscs with 1:ffff, the u32 hash tables and their links, the ingress qdisc and the
 * redirect. Built once, confirmed by a few reads afterwards, repaired piece by piece; a piece
 * rebuilt while the rest stood is reported as a repair.
 */
import {
  type BatchMessage,
  NLM_F_CREATE,
  NLM_F_ECHO,
  NLM_F_EXCL,
  NetlinkSocket,
  encodeAttributes,
  isNetlinkError,
} from '../../netlink';
import { InterfaceMissingError, SetupConflictError } from '../errors';
import { Links } from '../link';
import {
  RTM_DELQDISC,
  RTM_DELTFILTER,
  RTM_GETQDISC,
  RTM_GETTFILTER,
  RTM_NEWQDISC,
  RTM_NEWTCLASS,
  RTM_NEWTFILTER,
} from '../rtnetlink';
import { TC_HTB_PROTOVER, htbClass, htbClassOptionsFor, htbQdisc } from '../tc/htb';
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
import { type U32Entry, formatU32Handle, sameSelector, u32Filter, u32Handle } from '../tc/u32';
import type { LinkInfo, Repair } from '../types';
import {
  BATCH_MESSAGES,
  DIRECT_QLEN,
  FILTER_INFO,
  INGRESS,
  MATCH_ALL,
  NODE,
  OCTET_TABLE,
  PARENT_CLASS,
  PARENT_RATE,
  QDISC,
  R2Q,
  Side,
  Subnet,
  ifbNameFor,
  rootLinkSelector,
  subnetOf,
  downloadSide,
  uploadSide,
} from './addressing';
import {
  FILTER_INFO6,
  type Prefix6,
  downloadSide6,
  shapedPrefix6,
  uploadSide6,
} from './addressing6';
import { needing } from './modules';
import { type TreeLayout, filterCreate, ipv4Layout, ipv6Layout, planTree } from './plan';
import { encodeU32, ingressQdiscOf, isOurHtb, parseU32, redirectsTo, rootQdiscOf } from './dump';

/** What ensure() verified, so the next ensure() can check the skeleton with a few GETs. */
export interface Skeleton {
  wg: { name: string; index: number };
  ifb: { name: string; index: number };
  subnet: Subnet;
  /** Handle of the root-table key node linking to 100: on the WireGuard interface and the IFB. */
  rootLinks: { download: number; upload: number };
  /** Handle of the redirecting filter on the WireGuard interface's ingress. */
  redirect: number;
  /**
   * The IPv6 tree of dual-stack peers (issue 18, ./addressing6.ts): the shaped prefix and the
   * root links of priority 11; null while no dual-stack peer was shaped (IPv4 only, as before).
   */
  ipv6: {
    prefix: Prefix6;
    rootLinks: { download: number; upload: number };
    /** The ingress filter redirecting IPv6 (priority 11: the IPv4 one matches protocol ip). */
    redirect: number;
  } | null;
}

/** What one ensureSkeleton() found: the skeleton, and peers' key nodes when it dumped them. */
export interface Checked {
  skeleton: Skeleton;
  /** Handles of the peers' key nodes per side; null when the quick check found all intact. */
  peerNodes: { download: Set<number>; upload: Set<number> } | null;
}

/** Whether two shaped IPv6 prefixes are the same (both absent counts as the same). */
function samePrefix6(a: Prefix6 | null | undefined, b: Prefix6 | null | undefined): boolean {
  return (a ?? null) === null
    ? (b ?? null) === null
    : b != null && a!.network === b.network && a!.prefixLength === b.prefixLength;
}

export class SkeletonBuilder {
  /** Per WireGuard interface: the skeleton the last full ensure() built or found. */
  readonly verified = new Map<string, Skeleton>();

  constructor(
    private readonly socket: NetlinkSocket,
    private readonly links: Links,
    private readonly ticksPerUs: number,
  ) {}

  /**
   * Checks the skeleton and builds or repairs what is missing. When an earlier call verified it,
   * a few cheap reads (links, qdiscs, three GETs of the filters that hold the layout together)
   * confirm it is intact; otherwise the filters are dumped and compared piece by piece. A piece
   * rebuilt while the rest of the skeleton stood is a repair and is reported; building it all
   * the first time is not.
   */
  async ensureSkeleton(ifname: string, repairs: Repair[], dualStack = false): Promise<Checked> {
    const wg = await this.links.getLink(ifname);
    const subnet = subnetOf(ifname, await this.links.getIpv4Addresses(wg.index));
    // Only for dual-stack peers: an IPv4-only interface reads and sends exactly what it did.
    const [address6] = dualStack ? await this.links.getIpv6Addresses(wg.index) : [];
    const prefix6 =
      address6 === undefined ? null : shapedPrefix6(address6.address, address6.prefixLength);
    const ifb = await this.ensureIfb(ifname);
    const qdiscs = await this.dumpQdiscs();
    const download = downloadSide(wg);
    const upload = uploadSide(ifb);
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
      (!dualStack || samePrefix6(known.ipv6?.prefix, prefix6)) &&
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
    const rootLinks6 = { download: 0, upload: 0 };
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
      const tables = await this.ensureHashTables(side, ipv4Layout(side, subnet), fresh);
      rootLinks[side.direction] = tables.root;
      peerNodes[side.direction] = tables.peerNodes;
      if (prefix6 !== null) {
        const side6 = side.direction === 'download' ? downloadSide6(wg) : uploadSide6(ifb);
        const tree6 = await this.ensureHashTables(side6, ipv6Layout(side6, prefix6), fresh);
        rootLinks6[side.direction] = tree6.root;
      }
    }
    const redirect = await this.ensureRedirect(download, ifb, ingressQdiscOf(qdiscs, wg.index));
    // Uploads of IPv6 need their own redirect: a filter matches one protocol.
    const redirect6 =
      prefix6 === null ? 0 : await this.ensureRedirect(download, ifb, undefined, FILTER_INFO6);
    const skeleton: Skeleton = {
      wg: { name: wg.name, index: wg.index },
      ifb: { name: ifb.name, index: ifb.index },
      subnet,
      rootLinks,
      redirect,
      ipv6:
        prefix6 === null ? null : { prefix: prefix6, rootLinks: rootLinks6, redirect: redirect6 },
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
      if (known.ipv6 !== null) {
        for (const side of [downloadSide6(known.wg), uploadSide6(known.ifb)]) {
          const layout = ipv6Layout(side, known.ipv6.prefix);
          const handle = known.ipv6.rootLinks[side.direction];
          const root = await this.getFilter(side, QDISC, handle, layout.info);
          if (
            root?.link !== u32Handle(layout.octetTable, 0, 0) ||
            !sameSelector(root.selector, layout.rootLink)
          ) {
            return false;
          }
        }
      }
      const redirect = await this.getFilter(download, INGRESS, known.redirect);
      if (known.ipv6 !== null) {
        const redirect6 = await this.getFilter(
          download,
          INGRESS,
          known.ipv6.redirect,
          FILTER_INFO6,
        );
        if (redirect6 === undefined || !redirectsTo(redirect6, known.ifb.index)) return false;
      }
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
   * The u32 tables and links of one side, as planHashTables plans them from a dump: wrong octet
   * links deleted, missing tables and links created, stray root links deleted, and the root
   * link (the entry point) made last, so no packet is steered into a half-built tree. Returns
   * the root link's handle and the peers' key nodes found.
   */
  private async ensureHashTables(
    side: Side,
    layout: TreeLayout,
    fresh: boolean,
  ): Promise<{ root: number; peerNodes: Set<number> }> {
    const { info } = layout;
    const plan = planTree(side, layout, fresh ? [] : await this.dumpU32(side, QDISC, info));
    for (const handle of plan.deletes) await this.deleteFilter(side, QDISC, handle, info);
    if (plan.creates.length > 0) {
      await needing('u32', () =>
        this.batch(plan.creates, `create u32 hash tables on ${side.ifname}`),
      );
    }
    for (const handle of plan.strayRoots) await this.deleteFilter(side, QDISC, handle, info);
    const root =
      plan.root ??
      (await this.createEchoed(
        side,
        QDISC,
        // No TCA_U32_HASH: the root table of our priority, whatever id the kernel gave it; a
        // handle with only a node id (0:0:1) means "node 1 in that table" (cls_u32.c u32_change).
        u32Handle(0, 0, NODE),
        { link: u32Handle(layout.octetTable, 0, 0), selector: layout.rootLink },
        'u32',
        info,
      ));
    return { root, peerNodes: plan.peerNodes };
  }

  /** Sends messages in datagrams of at most BATCH_MESSAGES, each acknowledged. */
  async batch(messages: BatchMessage[], operation: string): Promise<void> {
    for (let start = 0; start < messages.length; start += BATCH_MESSAGES) {
      await this.socket.batch(messages.slice(start, start + BATCH_MESSAGES), { operation });
    }
  }

  /**
   * The ingress qdisc and the one filter redirecting everything of a protocol to the IFB's
   * egress: IPv4 (FILTER_INFO), or IPv6 (FILTER_INFO6, `ingress` undefined: the IPv4 call made
   * the qdisc just before).
   */
  private async ensureRedirect(
    wg: Side,
    ifb: { name: string; index: number },
    ingress: TcObject | undefined,
    info = FILTER_INFO,
  ): Promise<number> {
    let fresh = false;
    if (info === FILTER_INFO && ingress?.kind !== 'ingress') {
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
      : (await this.dumpU32(wg, INGRESS, info)).filter((e) => e.divisor === undefined);
    let kept: number | undefined;
    for (const node of nodes) {
      if (node.mirred.length === 0) continue;
      if (kept === undefined && redirectsTo(node, ifb.index)) kept = node.handle;
      // A redirect to a deleted IFB (ifindex 0) or a duplicate.
      else await this.deleteFilter(wg, INGRESS, node.handle, info);
    }
    if (kept !== undefined) return kept;
    return needing('mirred', () =>
      this.createEchoed(
        wg,
        INGRESS,
        u32Handle(0, 0, NODE),
        { selector: MATCH_ALL, actions: [egressRedirect(ifb.index)] },
        'mirred',
        info,
      ),
    );
  }

  /** Creates a key node and returns the handle the kernel gave it (NLM_F_ECHO sends it back). */
  private async createEchoed(
    side: Side,
    parent: number,
    filterHandle: number,
    options: Parameters<typeof encodeU32>[0],
    what: string,
    info = FILTER_INFO,
  ): Promise<number> {
    const message = filterCreate(side, parent, filterHandle, options, info);
    const replies = await this.socket.request(message.type, message.payload, {
      operation: `${message.operation} (${what})`,
      flags: NLM_F_CREATE | NLM_F_EXCL | NLM_F_ECHO,
    });
    const echoed = replies.find((reply) => reply.type === RTM_NEWTFILTER);
    if (!echoed) throw new Error(`${message.operation}: the kernel echoed no filter`);
    return decodeTc(echoed).handle;
  }

  private async deleteFilter(
    side: Side,
    parent: number,
    filterHandle: number,
    info = FILTER_INFO,
  ): Promise<void> {
    await this.socket.request(
      RTM_DELTFILTER,
      encodeTc(
        { ifindex: side.ifindex, handle: filterHandle, parent, info },
        encodeAttributes(u32Filter, { kind: 'u32' }),
      ),
      {
        operation: `RTM_DELTFILTER u32 ${formatU32Handle(filterHandle)} parent ${formatHandle(parent)} dev ${side.ifname}`,
      },
    );
  }

  /** RTM_GETTFILTER of one u32 node; undefined if the kernel sent nothing. */
  private async getFilter(side: Side, parent: number, filterHandle: number, info = FILTER_INFO) {
    const replies = await this.socket.request(
      RTM_GETTFILTER,
      encodeTc(
        { ifindex: side.ifindex, handle: filterHandle, parent, info },
        encodeAttributes(u32Filter, { kind: 'u32' }),
      ),
      {
        operation: `RTM_GETTFILTER u32 ${formatU32Handle(filterHandle)} parent ${formatHandle(parent)} dev ${side.ifname}`,
      },
    );
    return replies
      .map((reply) => parseU32(reply, info))
      .find((entry) => entry?.handle === filterHandle);
  }

  /** Every u32 table and node of our priority (of one tree: `info`) under `parent`. */
  async dumpU32(side: Side, parent: number, info = FILTER_INFO): Promise<U32Entry[]> {
    const replies = await this.socket.dump(
      RTM_GETTFILTER,
      encodeTc({ ifindex: side.ifindex, handle: 0, parent, info }),
      { operation: `RTM_GETTFILTER dump parent ${formatHandle(parent)} dev ${side.ifname}` },
    );
    return replies
      .map((reply) => parseU32(reply, info))
      .filter((entry): entry is U32Entry => entry !== undefined);
  }

  async dumpQdiscs(): Promise<TcObject[]> {
    // The kernel dumps the qdiscs of every device (tc_dump_qdisc has no ifindex filter).
    const replies = await this.socket.dump(
      RTM_GETQDISC,
      encodeTc({ ifindex: 0, handle: 0, parent: 0 }),
      { operation: 'RTM_GETQDISC dump' },
    );
    return replies.map(decodeTc);
  }

  async findLink(name: string): Promise<LinkInfo | undefined> {
    try {
      return await this.links.getLink(name);
    } catch (error) {
      if (error instanceof InterfaceMissingError) return undefined;
      throw error;
    }
  }
}
