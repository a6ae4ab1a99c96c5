/**
 * Reading tc back: u32 nodes (marshalled and unmarshalled side by side), the qdiscs of a device,
 * and what a dump says about the skeleton.
 */
import {
  type NetlinkMessage,
  decodeAttributes,
  encodeAttributes,
  isNetlinkError,
} from '../../netlink';
import { egressRedirect, mirredActions, TC_ACT_STOLEN, TCA_EGRESS_REDIR } from '../tc/mirred';
import { TC_H_INGRESS, TC_H_ROOT, type TcObject, decodeTc } from '../tc/tc';
import {
  type U32Entry,
  type U32Selector,
  formatU32Handle,
  sameSelector,
  u32Filter,
  u32Options,
} from '../tc/u32';
import { FILTER_INFO, MATCH_ALL, QDISC } from './addressing';

export function encodeU32(options: {
  hash?: number;
  link?: number;
  divisor?: number;
  classid?: number;
  selector?: U32Selector;
  actions?: ReturnType<typeof egressRedirect>[];
}): Buffer {
  return encodeAttributes(u32Filter, { kind: 'u32', options });
}

/** A u32 table or node of ours: of the IPv4 tree (FILTER_INFO) or the IPv6 one (FILTER_INFO6). */
export function parseU32(message: NetlinkMessage, info = FILTER_INFO): U32Entry | undefined {
  const tc = decodeTc(message);
  // The first message of each classifier instance carries no options: it is not a node.
  if (tc.kind !== 'u32' || tc.info !== info || !tc.options) return undefined;
  const options = decodeAttributes(u32Options, tc.options, `u32 ${formatU32Handle(tc.handle)}`);
  return {
    handle: tc.handle,
    divisor: options.divisor,
    link: options.link,
    classid: options.classid,
    selector: options.selector,
    mirred: mirredActions(options.actions ?? []),
  };
}

export function describeRate(rate: number | undefined): string {
  return rate === undefined ? 'none' : `${rate} B/s`;
}

export function redirectsTo(node: U32Entry, ifindex: number): boolean {
  const [mirred, ...more] = node.mirred;
  return (
    more.length === 0 &&
    mirred !== undefined &&
    mirred.eaction === TCA_EGRESS_REDIR &&
    mirred.action === TC_ACT_STOLEN &&
    mirred.ifindex === ifindex &&
    sameSelector(node.selector, MATCH_ALL)
  );
}

export function rootQdiscOf(qdiscs: TcObject[], ifindex: number): TcObject | undefined {
  return qdiscs.find((q) => q.ifindex === ifindex && q.parent === TC_H_ROOT);
}

export function ingressQdiscOf(qdiscs: TcObject[], ifindex: number): TcObject | undefined {
  return qdiscs.find((q) => q.ifindex === ifindex && q.parent === TC_H_INGRESS);
}

export function isOurHtb(root: TcObject | undefined): boolean {
  return root?.kind === 'htb' && root.handle === QDISC;
}

/** ENOENT: the filter, class, classifier instance or chain is not there; nothing to remove. */
export async function ignoringMissing(work: () => Promise<unknown>): Promise<void> {
  try {
    await work();
  } catch (error) {
    if (!isNetlinkError(error, 'ENOENT')) throw error;
  }
}
