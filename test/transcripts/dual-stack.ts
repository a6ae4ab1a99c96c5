/**
 * A dual-stack peer's limit and cap (issue 18): on an interface with 10.78.0.1/24 and
 * fd78::1/64, the shaper builds its IPv6 tree beside the IPv4 one, sets a limit whose IPv6 key
 * nodes reach the class of the peer's IPv4 address and removes it; the quota sets up its inet
 * table, sets a cap that both maps lead to, lists it and removes it. While recording, `tc` and
 * `nft` report what the kernel holds after each step (the oracle).
 */
import { Quota } from '../../src/kernel/quota';
import { Shaper } from '../../src/kernel/shaper';
import { Suspension } from '../../src/kernel/suspension';
import { DEFAULT_TICKS_PER_MICROSECOND, ticksPerMicrosecond } from '../../src/kernel/tc/htb';
import type { KernelDataCap, LimitState, PeerRef, Repair } from '../../src/kernel/types';
import type { Scenario, ScenarioContext } from './scenario';

export const DUAL_IF = 'wgds0';
export const DUAL_IFB = 'ifb-wgds0';
export const DUAL_TABLE = 'wg_peerd_wgds0';
export const DUAL_PEER = {
  address: '10.78.0.2',
  address6: 'fd78::2',
  publicKey: 'AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=',
};

export interface DualStackResult {
  limits: Array<[string, LimitState]>;
  caps: Array<[string, KernelDataCap]>;
  capsAfterRemoval: Array<[string, KernelDataCap]>;
}

function json(sh: (command: string) => string, command: string): unknown {
  const out = sh(`${command} 2>/dev/null || true`).trim();
  return out === '' ? null : (JSON.parse(out) as unknown);
}

/** tc's view of both IPv6 trees and the ingress redirects (recording only). */
function tcSnapshot(sh: (command: string) => string) {
  return {
    wgFilters6: json(sh, `tc -j filter show dev ${DUAL_IF} parent 1: prio 11`),
    ifbFilters6: json(sh, `tc -j filter show dev ${DUAL_IFB} parent 1: prio 11`),
    ingressFilters: json(sh, `tc -j filter show dev ${DUAL_IF} parent ffff:`),
    wgClasses: sh(`tc class show dev ${DUAL_IF} 2>/dev/null || true`),
  };
}

function ticks(context: ScenarioContext): number {
  if (context.recording) context.oracle.psched = context.sh('cat /proc/net/psched');
  const psched = context.oracle.psched;
  return typeof psched === 'string' ? ticksPerMicrosecond(psched) : DEFAULT_TICKS_PER_MICROSECOND;
}

function removeAll(sh: (command: string) => string): void {
  sh(`ip link del ${DUAL_IF} 2>/dev/null || true`);
  sh(`ip link del ${DUAL_IFB} 2>/dev/null || true`);
  sh(`nft delete table inet ${DUAL_TABLE} 2>/dev/null || true`);
}

/** The dual-stack interface both scenarios run on: 10.78.0.1/24 and fd78::1/64. */
function addDualInterface(sh: (command: string) => string): void {
  sh(`ip link add ${DUAL_IF} type wireguard`);
  sh(`ip addr add 10.78.0.1/24 dev ${DUAL_IF}`);
  sh(`ip -6 addr add fd78::1/64 dev ${DUAL_IF} nodad`);
  sh(`ip link set ${DUAL_IF} up`);
}

export const dualStack: Scenario<DualStackResult> = {
  name: 'dual-stack',
  description:
    'a dual-stack peer (10.78.0.2, fd78::2) on an interface with 10.78.0.1/24 and fd78::1/64: the shaper sets its limit with IPv6 key nodes into the IPv4 class and removes it; the quota sets up an inet table, sets its cap through caps and caps6, lists and removes it',
  setup(sh) {
    removeAll(sh);
    addDualInterface(sh);
  },
  async run(context) {
    const { recording, sh, oracle } = context;
    const shaper = new Shaper(context.open, { ticksPerUs: ticks(context) });
    const quota = new Quota(context.open);
    const sorted = <V>(map: Map<string, V>): Array<[string, V]> =>
      [...map.entries()].sort(([a], [b]) => a.localeCompare(b));
    try {
      await shaper.ensure(DUAL_IF, [DUAL_PEER]);
      await shaper.setLimit(DUAL_IF, DUAL_PEER, 200_000);
      if (recording) oracle.limited = tcSnapshot(sh);
      const limits = sorted(await shaper.listLimits(DUAL_IF));
      await shaper.removeLimit(DUAL_IF, DUAL_PEER.address, DUAL_PEER.address6);
      if (recording) oracle.unlimited = tcSnapshot(sh);

      quota.setDualStack(DUAL_IF, true);
      await quota.ensure(DUAL_IF, [DUAL_PEER]);
      await quota.setCap(DUAL_IF, DUAL_PEER, 5_000_000);
      if (recording) oracle.capped = json(sh, `nft -j list table inet ${DUAL_TABLE}`);
      const caps = sorted(await quota.listCaps(DUAL_IF));
      await quota.removeCap(DUAL_IF, DUAL_PEER.address, DUAL_PEER.address6);
      if (recording) oracle.uncapped = json(sh, `nft -j list table inet ${DUAL_TABLE}`);
      const capsAfterRemoval = sorted(await quota.listCaps(DUAL_IF));
      return { limits, caps, capsAfterRemoval };
    } finally {
      shaper.close();
      quota.close();
    }
  },
  teardown: removeAll,
};

export const DUAL_SUSPENSION_TABLE = 'wg_peerd_suspend_wgds0';
/** An IPv4-only peer on the same interface (allowed IPs of another tool), suspended beside. */
export const IPV4_ONLY_PEER = {
  address: '10.78.0.4',
  publicKey: 'BAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQ=',
};
/** The dual-stack peer with another IPv6 address (as after a change behind the daemon's back). */
export const MOVED_PEER: PeerRef = { ...DUAL_PEER, address6: 'fd78::3' };

export interface DualStackSuspensionResult {
  listed: Array<[string, string | null]>;
  repairs: Repair[];
  listedAfterResume: Array<[string, string | null]>;
}

/** Both suspension tables as `nft -j list` prints them (recording only); null for none. */
function suspensionTables(sh: (command: string) => string) {
  return {
    ip: json(sh, `nft -j list table ip ${DUAL_SUSPENSION_TABLE}`),
    ip6: json(sh, `nft -j list table ip6 ${DUAL_SUSPENSION_TABLE}`),
  };
}

function removeSuspensionTables(sh: (command: string) => string): void {
  removeAll(sh);
  sh(`nft delete table ip ${DUAL_SUSPENSION_TABLE} 2>/dev/null || true`);
  sh(`nft delete table ip6 ${DUAL_SUSPENSION_TABLE} 2>/dev/null || true`);
}

export const dualStackSuspension: Scenario<DualStackSuspensionResult> = {
  name: 'suspension-dual-stack',
  description:
    'suspension on a dual-stack interface (10.78.0.1/24, fd78::1/64): suspending the dual-stack peer (10.78.0.2, fd78::2) makes the ip and the ip6 table in one transaction, an IPv4-only peer (10.78.0.4) gets no IPv6 element, a repair whose live peer now has fd78::3 moves the IPv6 element, a resume removes both addresses in one transaction',
  setup(sh) {
    removeSuspensionTables(sh);
    addDualInterface(sh);
  },
  async run(context) {
    const { recording, sh, oracle } = context;
    const suspension = new Suspension(context.open);
    const sorted = <V>(map: Map<string, V>): Array<[string, V]> =>
      [...map.entries()].sort(([a], [b]) => a.localeCompare(b));
    try {
      await suspension.suspend(DUAL_IF, DUAL_PEER);
      if (recording) oracle.suspended = suspensionTables(sh);
      await suspension.suspend(DUAL_IF, IPV4_ONLY_PEER);
      if (recording) oracle.bothSuspended = suspensionTables(sh);
      const listed = sorted(await suspension.listSuspended(DUAL_IF));
      const repairs = await suspension.ensure(DUAL_IF, [MOVED_PEER, IPV4_ONLY_PEER]);
      if (recording) oracle.repaired = suspensionTables(sh);
      await suspension.resume(DUAL_IF, MOVED_PEER.address, MOVED_PEER.address6);
      if (recording) oracle.resumed = suspensionTables(sh);
      const listedAfterResume = sorted(await suspension.listSuspended(DUAL_IF));
      return { listed, repairs, listedAfterResume };
    } finally {
      suspension.close();
    }
  },
  teardown: removeSuspensionTables,
};
