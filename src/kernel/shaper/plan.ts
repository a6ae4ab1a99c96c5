/**
 * Reconciliation of the tc layout as plans: pure functions of what was read (a u32 dump, the
 * peer classes of both devices) and the live peers, giving the messages to send and the repairs
 * they make. Nothing here sends or reads anything, so each rule can be checked on literal inputs
 * (test/unit/kernel/shaper-plan.test.ts) as well as on the recorded transcripts.
 */
import {
  type BatchMessage,
  NLM_F_ACK,
  NLM_F_CREATE,
  NLM_F_EXCL,
  NLM_F_REQUEST,
} from '../../netlink';
import { SetupConflictError } from '../errors';
import { numberToIpv4, ipv4ToNumber } from '../ipv4';
import { RTM_NEWTFILTER } from '../rtnetlink';
import { encodeTc, formatHandle } from '../tc/tc';
import {
  U32_MAX_DIVISOR,
  type U32Entry,
  type U32Selector,
  bucketOf,
  formatU32Handle,
  isKernelChosenTable,
  sameSelector,
  tableOf,
  u32Handle,
} from '../tc/u32';
import type { PeerRef, Repair } from '../types';
import {
  FILTER_INFO,
  FILTER_PRIORITY,
  HOST_TABLE_BASE,
  NODE,
  OCTET_TABLE,
  QDISC,
  type Side,
  type Subnet,
  isPeerHost,
  octetLinkSelector,
  peerFilterHandle,
  rootLinkSelector,
  thirdOctets,
} from './addressing';
import {
  FILTER_INFO6,
  FILTER_PRIORITY6,
  HOST_TABLE6_BASE,
  OCTET_TABLE6,
  type Prefix6,
  octetLinkSelector6,
  octets6,
  rootLinkSelector6,
} from './addressing6';
import { describeRate, encodeU32 } from './dump';
import { peerClassMessage, peerFilterCreate } from './limits';

/** RTM_NEWTFILTER of a u32 table or key node that must not exist yet (CREATE|EXCL). */
export function filterCreate(
  side: Side,
  parent: number,
  filterHandle: number,
  options: Parameters<typeof encodeU32>[0],
  info = FILTER_INFO,
): BatchMessage {
  return {
    type: RTM_NEWTFILTER,
    flags: NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
    payload: encodeTc(
      { ifindex: side.ifindex, handle: filterHandle, parent, info },
      encodeU32(options),
    ),
    ack: true,
    operation: `RTM_NEWTFILTER u32 ${formatU32Handle(filterHandle)} parent ${formatHandle(parent)} dev ${side.ifname}`,
  };
}

/** What one side's u32 tree needs, in the order it is to be sent. */
export interface HashTablePlan {
  /** Octet link nodes of the wrong shape: deleted first (u32 keeps a node's selector on change). */
  deletes: number[];
  /** Missing tables and octet link nodes, created in one go after the deletes. */
  creates: BatchMessage[];
  /** The root table's link node to table 100: that stays, if one is right. */
  root: number | undefined;
  /** Other links from the root table to 100: (duplicates, wrong subnet): deleted after creates. */
  strayRoots: number[];
  /** Handles of the peers' key nodes found (tables 200: to 2ff:). */
  peerNodes: Set<number>;
}

/**
 * One family's u32 tree on one side (the layout of ./index.ts for IPv4, ./addressing6.ts for
 * IPv6): its priority, its tables, and the selectors of the links between them.
 */
export interface TreeLayout {
  /** tcm_info of every filter of the tree: its priority and protocol. */
  info: number;
  priority: number;
  /** The table the root link leads to, hashed on the next-to-last byte of the address. */
  octetTable: number;
  /** The host tables, hostTableBase + that byte, hashed on the last byte. */
  hostTableBase: number;
  /** The values of that byte the addresses span: one host table and octet link each. */
  octets: number[];
  rootLink: U32Selector;
  octetLink(octet: number): U32Selector;
}

/** The IPv4 tree: priority 10, tables 100: and 2XX:, keyed on the subnet. */
export function ipv4Layout(side: Side, subnet: Subnet): TreeLayout {
  return {
    info: FILTER_INFO,
    priority: FILTER_PRIORITY,
    octetTable: OCTET_TABLE,
    hostTableBase: HOST_TABLE_BASE,
    octets: thirdOctets(subnet),
    rootLink: rootLinkSelector(side.keyOffset, subnet),
    octetLink: (octet) => octetLinkSelector(side.keyOffset, subnet, octet),
  };
}

/** The IPv6 tree: priority 11, tables 300: and 4XX:, keyed on the shaped prefix. */
export function ipv6Layout(side: Side, prefix: Prefix6): TreeLayout {
  return {
    info: FILTER_INFO6,
    priority: FILTER_PRIORITY6,
    octetTable: OCTET_TABLE6,
    hostTableBase: HOST_TABLE6_BASE,
    octets: octets6(prefix),
    rootLink: rootLinkSelector6(side.keyOffset, prefix),
    octetLink: (octet) => octetLinkSelector6(side.keyOffset, prefix, octet),
  };
}

/**
 * The u32 tables and links of one side from a dump of our priority under 1: (empty for a qdisc
 * created just now). A table of another size cannot be ours and is the operator's to remove.
 */
export function planHashTables(side: Side, subnet: Subnet, entries: U32Entry[]): HashTablePlan {
  return planTree(side, ipv4Layout(side, subnet), entries);
}

/** planHashTables for any family's layout. */
export function planTree(side: Side, layout: TreeLayout, entries: U32Entry[]): HashTablePlan {
  const tables = new Map<number, U32Entry>();
  const nodes = new Map<number, U32Entry>();
  for (const entry of entries) {
    if (entry.divisor !== undefined) tables.set(tableOf(entry.handle), entry);
    else nodes.set(entry.handle, entry);
  }
  const creates: BatchMessage[] = [];
  const { octets, octetTable, hostTableBase, info } = layout;
  for (const id of [octetTable, ...octets.map((octet) => hostTableBase + octet)]) {
    const existing = tables.get(id);
    if (existing?.divisor === U32_MAX_DIVISOR) continue;
    if (existing) {
      throw new SetupConflictError(
        `u32 table ${id.toString(16)}: at priority ${layout.priority} on ${side.ifname} has ` +
          `${existing.divisor} buckets instead of ${U32_MAX_DIVISOR}; remove the filters at ` +
          `that priority (tc filter del dev ${side.ifname} parent 1: prio ${layout.priority})`,
      );
    }
    creates.push(
      filterCreate(side, QDISC, u32Handle(id, 0, 0), { divisor: U32_MAX_DIVISOR }, info),
    );
  }
  const deletes: number[] = [];
  for (const octet of octets) {
    const id = u32Handle(octetTable, octet, NODE);
    const wanted = {
      hash: u32Handle(octetTable, octet, 0),
      link: u32Handle(hostTableBase + octet, 0, 0),
      selector: layout.octetLink(octet),
    };
    const existing = nodes.get(id);
    if (
      existing &&
      existing.link === wanted.link &&
      sameSelector(existing.selector, wanted.selector)
    ) {
      continue;
    }
    if (existing) deletes.push(id);
    creates.push(filterCreate(side, QDISC, id, wanted, info));
  }
  const { root, strayRoots } = findRootLink(layout, nodes);
  const peerNodes = new Set(
    [...nodes.keys()].filter(
      (h) => tableOf(h) >= hostTableBase && tableOf(h) <= hostTableBase + 0xff,
    ),
  );
  return { deletes, creates, root, strayRoots, peerNodes };
}

/** The first right link from the root table (kernel-chosen id) to the octet table, and the others. */
function findRootLink(
  layout: TreeLayout,
  nodes: Map<number, U32Entry>,
): { root: number | undefined; strayRoots: number[] } {
  let root: number | undefined;
  const strayRoots: number[] = [];
  for (const node of nodes.values()) {
    if (!isKernelChosenTable(tableOf(node.handle))) continue;
    if (node.link !== u32Handle(layout.octetTable, 0, 0)) continue;
    if (root === undefined && sameSelector(node.selector, layout.rootLink)) root = node.handle;
    else strayRoots.push(node.handle);
  }
  return { root, strayRoots };
}

/** What the limits reconciliation reads: the peer classes and key nodes of both devices. */
export interface ShapedState {
  /** Per direction: class minor → rate (B/s) of the classes under 1:ffff. */
  classes: { download: Map<number, number>; upload: Map<number, number> };
  /** Per direction: the peers' key nodes; null when the skeleton check did not dump them. */
  peerNodes: { download: Set<number>; upload: Set<number> } | null;
}

/** The limits reconciliation: removals first (each address on both sides), then one batch. */
export interface LimitPlan {
  /** Addresses whose key node and class go, on the download side and then the upload side. */
  removals: number[];
  /** Classes and key nodes created or changed in place, sent after the removals. */
  messages: BatchMessage[];
  repairs: Repair[];
}

/**
 * The peers' classes and key nodes on both devices against the live peers. The desired state:
 * for a live address, the rate that holds on either device (the download rate when the two
 * differ) on both; for any other address, nothing. Nothing is ever copied to an address no
 * peer has; key nodes without a class (their class was deleted by hand) count as state too.
 */
export function planLimits(
  sides: { download: Side; upload: Side },
  subnet: Subnet,
  state: ShapedState,
  live: readonly PeerRef[],
  ticksPerUs: number,
): LimitPlan {
  const plan: LimitPlan = { removals: [], messages: [], repairs: [] };
  const upper = subnet.network & 0xffff0000;
  const liveAddresses = new Set(live.map((peer) => ipv4ToNumber(peer.address)));
  for (const minor of minorsOf(state)) {
    const address = (upper | minor) >>> 0;
    const down = state.classes.download.get(minor);
    const up = state.classes.upload.get(minor);
    const held = `download ${describeRate(down)} on ${sides.download.ifname}, upload ${describeRate(up)} on ${sides.upload.ifname}`;
    const text = numberToIpv4(address);
    if (!liveAddresses.has(address) || !isPeerHost(subnet, address)) {
      plan.removals.push(address);
      plan.repairs.push({
        address: text,
        found: `${held} for an address no peer has`,
        done: 'removed',
      });
      continue;
    }
    const rate = down ?? up;
    if (rate === undefined) {
      // Key nodes only: no limit holds; the leftovers go.
      plan.removals.push(address);
      plan.repairs.push({
        address: text,
        found: `key nodes without classes (${held})`,
        done: 'removed them',
      });
      continue;
    }
    const fix: string[] = [];
    for (const side of [sides.download, sides.upload]) {
      const nodes = state.peerNodes?.[side.direction];
      const hasClass = state.classes[side.direction].get(minor) === rate;
      const hasNode = nodes === undefined || nodes.has(peerFilterHandle(address));
      if (hasClass && hasNode) continue;
      plan.messages.push(
        peerClassMessage(side, address, rate, ticksPerUs),
        peerFilterCreate(side, address),
      );
      fix.push(`${side.direction} on ${side.ifname}`);
    }
    if (fix.length > 0) {
      plan.repairs.push({
        address: text,
        found: held,
        done: `restored ${fix.join(' and ')} at ${rate} B/s`,
      });
    }
  }
  return plan;
}

/** The class minors (low 16 bits of the address) anything of a peer is found under, in order. */
function minorsOf(state: ShapedState): number[] {
  const minors = new Set([...state.classes.download.keys(), ...state.classes.upload.keys()]);
  for (const direction of ['download', 'upload'] as const) {
    for (const node of state.peerNodes?.[direction] ?? []) {
      minors.add(((tableOf(node) - HOST_TABLE_BASE) << 8) | bucketOf(node));
    }
  }
  return [...minors].sort((a, b) => a - b);
}
