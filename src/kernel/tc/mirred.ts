/**
 * tc actions as a u32 filter carries them, and the one action the shaper uses: mirred, which
 * redirects a packet to another device's egress (here: WireGuard ingress → the IFB).
 *
 * Sources: /usr/include/linux/pkt_cls.h (TCA_ACT_*, tc_gen, TC_ACT_*),
 * /usr/include/linux/tc_act/tc_mirred.h (struct tc_mirred, TCA_MIRRED_*, TCA_EGRESS_REDIR).
 */
import {
  type Attributes,
  decodeAttributes,
  encodeAttributes,
  schema,
  string,
  struct,
} from '../../netlink';
import { opaqueNest } from './tc';

// enum TCA_ACT_* (pkt_cls.h)
export const TCA_ACT_KIND = 1;
export const TCA_ACT_OPTIONS = 2;

/** TC_ACT_STOLEN (pkt_cls.h): the action consumed the packet (what a redirect returns). */
export const TC_ACT_STOLEN = 4;

// tc_mirred.h
export const TCA_MIRRED_PARMS = 2;
export const TCA_EGRESS_REDIR = 1;

/** struct tc_mirred (28 bytes): the tc_gen header, then the mirred action and target ifindex. */
export const tcMirred = struct('tc_mirred', {
  index: 'u32',
  capab: 'u32',
  action: 's32',
  refcnt: 's32',
  bindcnt: 's32',
  eaction: 's32',
  ifindex: 'u32',
});

export const mirredOptions = schema({
  parms: { type: TCA_MIRRED_PARMS, codec: tcMirred },
});

/** One entry of a filter's action list; TCA_ACT_OPTIONS is decoded per kind. */
export const actionEntry = schema({
  kind: { type: TCA_ACT_KIND, codec: string },
  options: { type: TCA_ACT_OPTIONS, codec: opaqueNest },
});

export interface MirredAction {
  /** TCA_EGRESS_REDIR etc. */
  eaction: number;
  /** What the filter returns after the action: TC_ACT_STOLEN for a redirect. */
  action: number;
  ifindex: number;
}

/** The action entry "mirred egress redirect dev <ifindex>" (index 0: the kernel numbers it). */
export function egressRedirect(ifindex: number): Attributes<typeof actionEntry> {
  return {
    kind: 'mirred',
    options: encodeAttributes(mirredOptions, {
      parms: { action: TC_ACT_STOLEN, eaction: TCA_EGRESS_REDIR, ifindex },
    }),
  };
}

/** The mirred actions among a filter's actions; other kinds are skipped. */
export function mirredActions(entries: Array<Attributes<typeof actionEntry>>): MirredAction[] {
  const found: MirredAction[] = [];
  entries.forEach((entry, i) => {
    if (entry.kind !== 'mirred' || !entry.options) return;
    const parms = decodeAttributes(mirredOptions, entry.options, `action ${i + 1} mirred`).parms;
    if (!parms) return;
    found.push({
      eaction: parms.eaction ?? 0,
      action: parms.action ?? 0,
      ifindex: parms.ifindex ?? 0,
    });
  });
  return found;
}
