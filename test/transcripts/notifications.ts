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

/** Recording only: `count` 1,000-byte pings from `source` in `ns` to `server`, IPv4 or IPv6. */
function ping(
  context: ScenarioContext,
  count: number,
  source: string,
  server = NOTIFY_SERVER,
  ns = NOTIFY_NS,
): void {
  if (!context.recording) return;
  context.sh(
    `ip netns exec ${ns} busybox ping -q -c ${count} -i 0.1 -W 1 -s 972 ` +
      `-I ${source} ${server} >/dev/null 2>&1 || true`,
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

export const NOTIFY6_IF = 'wgrn6';
export const NOTIFY6_NS = 'nrec6';
export const NOTIFY6_SERVER = { address: '10.77.3.1', address6: 'fd77:3::1' };
export const NOTIFY6_PEER_A = {
  address: '10.77.3.2',
  address6: 'fd77:3::2',
  publicKey: Buffer.alloc(32, 0xd6).toString('base64'),
};
export const NOTIFY6_PEER_B = {
  address: '10.77.3.3',
  address6: 'fd77:3::3',
  publicKey: Buffer.alloc(32, 0xe7).toString('base64'),
};

const nftInetTable = `nft -j list table inet wg_peerd_${NOTIFY6_IF}`;

function removeInet(sh: (command: string) => string): void {
  sh(
    `ip netns del ${NOTIFY6_NS} 2>/dev/null || true; ip link del ${NOTIFY6_IF} 2>/dev/null || true`,
  );
  sh(`nft delete table inet wg_peerd_${NOTIFY6_IF} 2>/dev/null || true`);
}

/**
 * The same subscription on a dual-stack interface (issue 18), whose caps live in an `inet` table:
 * peer A's one quota object is exhausted by IPv6 pings alone, then, after a raise, by IPv4 and
 * IPv6 pings together; peer B stays under its cap. Both addresses of each peer sit on the netns
 * end of a veth pair, as above.
 */
export const nftablesNotificationsInet: Scenario<NotificationsResult> = {
  name: 'nftables-notifications-inet',
  description:
    'NFNLGRP_NFTABLES on a dual-stack interface: the multicast datagrams of a quota in the inet ' +
    'table exhausted by ICMPv6, then, after a raise, by ICMP and ICMPv6 together',
  setup(sh) {
    removeInet(sh);
    const [a, b, server] = [NOTIFY6_PEER_A, NOTIFY6_PEER_B, NOTIFY6_SERVER];
    sh(`ip netns add ${NOTIFY6_NS}`);
    sh(`ip link add ${NOTIFY6_IF} type veth peer name ${NOTIFY6_IF}p netns ${NOTIFY6_NS}`);
    sh(`ip addr add ${server.address}/24 dev ${NOTIFY6_IF}`);
    sh(`ip -6 addr add ${server.address6}/64 dev ${NOTIFY6_IF} nodad`);
    sh(`ip link set ${NOTIFY6_IF} up`);
    for (const peer of [a, b]) {
      sh(`ip -n ${NOTIFY6_NS} addr add ${peer.address}/24 dev ${NOTIFY6_IF}p`);
      sh(`ip -n ${NOTIFY6_NS} -6 addr add ${peer.address6}/64 dev ${NOTIFY6_IF}p nodad`);
    }
    sh(`ip -n ${NOTIFY6_NS} link set ${NOTIFY6_IF}p up && ip -n ${NOTIFY6_NS} link set lo up`);
    for (const peer of [a, b]) {
      for (const [source, target] of [
        [peer.address, server.address],
        [peer.address6, server.address6],
      ]) {
        sh(
          `ip netns exec ${NOTIFY6_NS} busybox ping -q -c 1 -W 5 -I ${source} ${target} >/dev/null`,
        );
      }
    }
  },
  async run(context) {
    const notices: CapExhaustedNotice[] = [];
    const errors: string[] = [];
    const watch = watchCapExhaustion(
      NOTIFY6_IF,
      (notice) => notices.push(notice),
      (error) => errors.push(error.message),
      context.open,
    );
    const quota = new Quota(context.open);
    const oracle = (step: string): void => {
      if (context.recording) context.oracle[step] = JSON.parse(context.sh(nftInetTable));
    };
    const ping6 = (count: number, peer: typeof NOTIFY6_PEER_A): void =>
      ping(context, count, peer.address6, NOTIFY6_SERVER.address6, NOTIFY6_NS);
    const ping4 = (count: number, peer: typeof NOTIFY6_PEER_A): void =>
      ping(context, count, peer.address, NOTIFY6_SERVER.address, NOTIFY6_NS);
    try {
      await watch.ready;
      await quota.setDualStack(NOTIFY6_IF, true);
      await quota.ensure(NOTIFY6_IF, []);
      await quota.setCap(NOTIFY6_IF, NOTIFY6_PEER_A, 5_000);
      await quota.setCap(NOTIFY6_IF, NOTIFY6_PEER_B, 1_000_000);
      ping6(10, NOTIFY6_PEER_A); // IPv6 alone exhausts A's cap after a few
      ping6(3, NOTIFY6_PEER_A); // already exhausted: announced once only
      ping6(2, NOTIFY6_PEER_B); // under its cap
      await settle(context);
      oracle('exhausted');
      await quota.setCap(NOTIFY6_IF, NOTIFY6_PEER_A, 20_000);
      ping4(6, NOTIFY6_PEER_A); // ~12 kB both ways: under the raised cap alone
      await settle(context);
      oracle('afterIpv4');
      ping6(10, NOTIFY6_PEER_A); // the sum of both families passes it
      await settle(context);
      oracle('exhaustedAgain');
      return { notices, errors };
    } finally {
      watch.close();
      quota.close();
    }
  },
  teardown: removeInet,
};
