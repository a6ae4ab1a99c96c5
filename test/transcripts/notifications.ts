/**
 * nf_tables notifications (issue 20): a subscription to NFNLGRP_NFTABLES sees a peer's quota
 * announce its depletion once, when ICMP from a network namespace exhausts it (the root end of
 * a veth pair plays the tunnel interface, as in quota.ts), and again after a raise exhausts it
 * anew; a transaction's echoes, a peer under its cap and an operator's own quota in another
 * table announce nothing the watcher reports. Recorded as one exchange: the probe
 * (NFT_MSG_GETGEN) and, after its answer, every datagram the group sent while the scenario ran.
 */
import { Quota } from '../../src/kernel/quota';
import { watchCapExhaustion, type CapExhaustedNotice } from '../../src/kernel/quota/exhaustion';
import type { Scenario, ScenarioContext } from './scenario';

export const NOTIFY_IF = 'wgrn0';
export const NOTIFY_NS = 'nrec';
export const NOTIFY_SERVER = '10.77.2.1';
export const NOTIFY_PEER_A = '10.77.2.2';
export const NOTIFY_PEER_B = '10.77.2.3';
export const NOTIFY_KEY_A = Buffer.alloc(32, 0xd4).toString('base64');
export const NOTIFY_KEY_B = Buffer.alloc(32, 0xe5).toString('base64');
/** The operator's own table, whose quota must not be taken for a peer's. */
export const OTHER_TABLE = 'operator_quota';

export interface NotificationsResult {
  notices: CapExhaustedNotice[];
  errors: string[];
}

function ping(context: ScenarioContext, count: number, source: string): void {
  if (!context.recording) return;
  context.sh(
    `ip netns exec ${NOTIFY_NS} busybox ping -q -c ${count} -i 0.1 -W 1 -s 972 ` +
      `-I ${source} ${NOTIFY_SERVER} >/dev/null 2>&1 || true`,
  );
}

/** While recording, lets the datagrams the group sent meanwhile reach the socket's reader. */
async function settle(context: ScenarioContext): Promise<void> {
  if (context.recording) await new Promise((resolve) => setTimeout(resolve, 300));
}

const nftTable = `nft -j list table ip wg_peerd_${NOTIFY_IF}`;

export const nftablesNotifications: Scenario<NotificationsResult> = {
  name: 'nftables-notifications',
  description:
    'NFNLGRP_NFTABLES: NFT_MSG_GETGEN probe, then the multicast datagrams of a quota exhausted ' +
    'by ICMP (NEWOBJ with pid 0, seq 0), the echoes of the transactions that set and raise it, ' +
    "and an operator's quota in another table exhausted too",
  setup(sh) {
    sh(
      `ip netns del ${NOTIFY_NS} 2>/dev/null || true; ip link del ${NOTIFY_IF} 2>/dev/null || true`,
    );
    sh(`nft delete table ip wg_peerd_${NOTIFY_IF} 2>/dev/null || true`);
    sh(`nft delete table ip ${OTHER_TABLE} 2>/dev/null || true`);
    sh(`ip netns add ${NOTIFY_NS}`);
    sh(`ip link add ${NOTIFY_IF} type veth peer name ${NOTIFY_IF}p netns ${NOTIFY_NS}`);
    sh(`ip addr add ${NOTIFY_SERVER}/24 dev ${NOTIFY_IF} && ip link set ${NOTIFY_IF} up`);
    sh(`ip -n ${NOTIFY_NS} addr add ${NOTIFY_PEER_A}/24 dev ${NOTIFY_IF}p`);
    sh(`ip -n ${NOTIFY_NS} addr add ${NOTIFY_PEER_B}/24 dev ${NOTIFY_IF}p`);
    sh(`ip -n ${NOTIFY_NS} link set ${NOTIFY_IF}p up && ip -n ${NOTIFY_NS} link set lo up`);
    for (const peer of [NOTIFY_PEER_A, NOTIFY_PEER_B]) {
      sh(
        `ip netns exec ${NOTIFY_NS} busybox ping -q -c 1 -W 5 -I ${peer} ${NOTIFY_SERVER} >/dev/null`,
      );
    }
  },
  async run(context) {
    const notices: CapExhaustedNotice[] = [];
    const errors: string[] = [];
    // The watcher's socket first, in recording and replay alike (sockets replay in order).
    const watch = watchCapExhaustion(
      NOTIFY_IF,
      (notice) => notices.push(notice),
      (error) => errors.push(error.message),
      context.open,
    );
    const quota = new Quota(context.open);
    const oracle = (step: string): void => {
      if (context.recording) context.oracle[step] = JSON.parse(context.sh(nftTable));
    };
    try {
      await watch.ready;
      await quota.ensure(NOTIFY_IF, []);
      await quota.setCap(NOTIFY_IF, { address: NOTIFY_PEER_A, publicKey: NOTIFY_KEY_A }, 5_000);
      await quota.setCap(NOTIFY_IF, { address: NOTIFY_PEER_B, publicKey: NOTIFY_KEY_B }, 1_000_000);
      ping(context, 10, NOTIFY_PEER_A); // 1,000-byte packets both ways: exhausted after a few
      ping(context, 3, NOTIFY_PEER_A); // already exhausted: announced once only
      ping(context, 2, NOTIFY_PEER_B); // under its cap
      await settle(context);
      oracle('exhausted');
      await quota.setCap(NOTIFY_IF, { address: NOTIFY_PEER_A, publicKey: NOTIFY_KEY_A }, 20_000);
      ping(context, 20, NOTIFY_PEER_A); // exhausted again after the raise
      await settle(context);
      oracle('exhaustedAgain');
      if (context.recording) {
        context.sh(
          `nft add table ip ${OTHER_TABLE} && ` +
            `nft add quota ip ${OTHER_TABLE} q over 100 bytes && ` +
            `nft add chain ip ${OTHER_TABLE} c '{ type filter hook postrouting priority 0; }' && ` +
            `nft add rule ip ${OTHER_TABLE} c oifname ${NOTIFY_IF} quota name q`,
        );
      }
      ping(context, 2, NOTIFY_PEER_B); // the operator's quota runs out: not a peer's cap
      await settle(context);
      oracle('other');
      return { notices, errors };
    } finally {
      watch.close();
      quota.close();
    }
  },
  teardown(sh) {
    sh(
      `ip netns del ${NOTIFY_NS} 2>/dev/null || true; ip link del ${NOTIFY_IF} 2>/dev/null || true`,
    );
    sh(`nft delete table ip wg_peerd_${NOTIFY_IF} 2>/dev/null || true`);
    sh(`nft delete table ip ${OTHER_TABLE} 2>/dev/null || true`);
  },
};
