/**
 * Throttling after the cap (issue 19) as a transcript: the throttle part of the caps table made
 * with the first cap that throttles, a quota used up by ICMP that still lets the pings through
 * (slowed, not cut off), a new rate (limit objects replaced), a restart that reads the record
 * back from the quota's userdata, and the way back to a cap that blocks.
 */
import { Quota } from '../../src/kernel/quota';
import type { KernelDataCap } from '../../src/kernel/types';
import { CAPS_IF, KEY_A, PEER_A, nftTable, ping, quotaCaps, snapshot } from './quota';
import type { Scenario } from './scenario';

export interface QuotaThrottleResult {
  /** listCaps after each step, as plain objects. */
  caps: Record<string, Record<string, KernelDataCap>>;
}

export const THROTTLE_CAP = 15_000;
export const THROTTLE_RATE = 5_000;
export const THROTTLE_NEW_RATE = 8_000;

export const quotaThrottle: Scenario<QuotaThrottleResult> = {
  name: 'quota-throttle',
  description:
    'Throttling after the cap over nf_tables: the throttle maps, chains and rules, limit objects ' +
    '(NFT_OBJECT_LIMIT, bytes, inverted) and elements made with a cap that throttles, a quota ' +
    'used up by ICMP, a new rate (elements and limits replaced in one transaction), a re-read by ' +
    'a new socket, and back to a cap that blocks',
  setup: quotaCaps.setup,
  async run(context) {
    let quota = new Quota(context.open);
    const peer = { address: PEER_A, publicKey: KEY_A };
    const caps: QuotaThrottleResult['caps'] = {};
    const read = async (step: string): Promise<void> => {
      caps[step] = Object.fromEntries(await quota.listCaps(CAPS_IF));
      snapshot(context, step, nftTable(CAPS_IF));
    };
    try {
      await quota.ensure(CAPS_IF, []);
      await quota.setCap(CAPS_IF, peer, THROTTLE_CAP, undefined, {
        throttleBytesPerSecond: THROTTLE_RATE,
      });
      await read('set');
      ping(context, 12); // 24,000 bytes both ways: over the cap, slowed, not dropped
      await read('throttled');
      await quota.setCap(CAPS_IF, peer, THROTTLE_CAP, undefined, {
        throttleBytesPerSecond: THROTTLE_NEW_RATE,
      });
      await read('newRate');
      quota.close();
      quota = new Quota(context.open);
      caps.restarted = Object.fromEntries(await quota.listCaps(CAPS_IF));
      await quota.ensure(CAPS_IF, [peer]); // intact: reads only
      await quota.setCap(CAPS_IF, peer, THROTTLE_CAP, undefined, { throttleBytesPerSecond: null });
      await read('blocks');
      await quota.removeCap(CAPS_IF, PEER_A);
      await read('removed');
      return { caps };
    } finally {
      quota.close();
    }
  },
  teardown: quotaCaps.teardown,
};
