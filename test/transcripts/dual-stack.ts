/**
 * A dual-stack peer's limit and cap (issue 18): on an interface with 10.78.0.1/24 and
 * fd78::1/64, the shaper builds its IPv6 tree beside the IPv4 one, sets a limit whose IPv6 key
 * nodes reach the class of the peer's IPv4 address and removes it; the quota sets up its inet
 * table, sets a cap that both maps lead to, lists it and removes it. While recording, `tc` and
 * `nft` report what the kernel holds after each step (the oracle).
 */
import { Quota } from '../../src/kernel/quota';
import { Shaper } from '../../src/kernel/shaper';
import { DEFAULT_TICKS_PER_MICROSECOND, ticksPerMicrosecond } from '../../src/kernel/tc/htb';
import type { KernelDataCap, LimitState } from '../../src/kernel/types';
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

export const dualStack: Scenario<DualStackResult> = {
  name: 'dual-stack',
  description:
    'a dual-stack peer (10.78.0.2, fd78::2) on an interface with 10.78.0.1/24 and fd78::1/64: the shaper sets its limit with IPv6 key nodes into the IPv4 class and removes it; the quota sets up an inet table, sets its cap through caps and caps6, lists and removes it',
  setup(sh) {
    removeAll(sh);
    sh(`ip link add ${DUAL_IF} type wireguard`);
    sh(`ip addr add 10.78.0.1/24 dev ${DUAL_IF}`);
    sh(`ip -6 addr add fd78::1/64 dev ${DUAL_IF} nodad`);
    sh(`ip link set ${DUAL_IF} up`);
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
