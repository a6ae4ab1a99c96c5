/**
 * nf_tables data-cap scenarios: set-up and self-repair of the daemon's table, and the life of a
 * cap (set, count, change, run out, raise, hand the address to another peer, remove, re-read
 * after a restart). Traffic is real: ICMP from a network namespace over a veth pair whose root end
 * plays the tunnel interface (the nf_tables rules match it by name, whatever its kind), so the
 * kernel's counters move and `nft -j` reports them in the oracle at the same moments.
 */
import { Quota } from '../../src/kernel/quota';
import type { KernelDataCap } from '../../src/kernel/types';
import type { Transport } from '../../src/netlink';
import type { Scenario, ScenarioContext } from './scenario';

/** Interface names of the two scenarios (veth ends in the root namespace of the VM). */
export const SETUP_IF = 'wgrq0';
export const CAPS_IF = 'wgrq1';
/** The client side of CAPS_IF: a namespace holding the peers' addresses. */
export const CAPS_NS = 'qrec';
export const SERVER_ADDRESS = '10.77.1.1';
export const PEER_A = '10.77.1.2';
export const PEER_B = '10.77.1.3';
/** Fixed keys: requests must be the same bytes when replayed. */
export const KEY_A = Buffer.alloc(32, 0xa1).toString('base64');
export const KEY_B = Buffer.alloc(32, 0xb2).toString('base64');
export const KEY_C = Buffer.alloc(32, 0xc3).toString('base64');
/** ICMP payload size giving 1,000-byte IPv4 packets (20 IP + 8 ICMP + 972). */
export const PING_PACKET_BYTES = 1000;

export const nftTable = (ifname: string): string => `nft -j list table ip wg_peerd_${ifname}`;

/**
 * Counts the datagrams sent whose first message has `type` (by default NFNL_MSG_BATCH_BEGIN:
 * the nf_tables transactions).
 */
class BatchCounter {
  count = 0;

  constructor(private readonly type = 0x10) {}

  wrap(context: ScenarioContext): ScenarioContext['open'] {
    return (protocol: number): Transport => {
      const inner = context.open(protocol);
      return {
        protocol: inner.protocol,
        portId: inner.portId,
        send: (datagram: Buffer) => {
          if (datagram.length >= 16 && datagram.readUInt16LE(4) === this.type) this.count++;
          inner.send(datagram);
        },
        receive: (handler) => inner.receive(handler),
        setBusy: (busy) => inner.setBusy(busy),
        close: () => inner.close(),
      };
    };
  }

  /** Runs `step` and returns how many transactions it sent. */
  async during(step: () => Promise<unknown>): Promise<number> {
    const before = this.count;
    await step();
    return this.count - before;
  }
}

export function snapshot(context: ScenarioContext, key: string, command: string): void {
  if (context.recording) context.oracle[key] = JSON.parse(context.sh(command));
}

export interface QuotaSetUpResult {
  /** Transactions sent by each ensure(): first set-up, again on an intact table, repairs. */
  batches: Record<string, number>;
  /** What a cap read back after the map was rebuilt. */
  capsAfterMapRepair: Record<string, KernelDataCap>;
}

const OPERATOR_TABLE = [
  'nft add table inet operator',
  "nft add chain inet operator input '{ type filter hook input priority 0; policy accept; }'",
  'nft add rule inet operator input tcp dport 22 counter accept',
  'nft add set inet operator blocked { type ipv4_addr\\; }',
  'nft add element inet operator blocked { 10.77.0.2 }',
];

export const quotaSetUp: Scenario<QuotaSetUpResult> = {
  name: 'quota-setup',
  description:
    'Data-cap table set-up over nf_tables: NEWTABLE/NEWSET/NEWCHAIN/NEWRULE in one batch, nothing ' +
    'sent on an intact table, repair after chains, rules, policy, map, element and table flags ' +
    'were changed by hand; an operator table beside it',
  setup(sh) {
    sh(`nft delete table ip wg_peerd_${SETUP_IF} 2>/dev/null || true`);
    sh('nft delete table inet operator 2>/dev/null || true');
    for (const command of OPERATOR_TABLE) sh(command);
  },
  async run(context) {
    const { recording, sh } = context;
    const counter = new BatchCounter();
    const quota = new Quota(counter.wrap(context));
    const table = `ip wg_peerd_${SETUP_IF}`;
    const batches: Record<string, number> = {};
    try {
      snapshot(context, 'operatorBefore', 'nft -j list table inet operator');
      batches.setUp = await counter.during(() =>
        quota.ensure(SETUP_IF, [{ address: '10.77.0.2', publicKey: KEY_A }]),
      );
      snapshot(context, 'afterSetUp', nftTable(SETUP_IF));
      batches.intact = await counter.during(() =>
        quota.ensure(SETUP_IF, [{ address: '10.77.0.2', publicKey: KEY_A }]),
      );

      if (recording) {
        sh(`nft delete chain ${table} to_peers`);
        sh(`nft flush chain ${table} from_peers`);
        sh(`nft add rule ${table} from_peers counter`);
        sh(`nft add chain ${table} from_peers '{ policy drop; }'`);
      }
      batches.chainsRepaired = await counter.during(() =>
        quota.ensure(SETUP_IF, [{ address: '10.77.0.2', publicKey: KEY_A }]),
      );
      snapshot(context, 'afterChainRepair', nftTable(SETUP_IF));

      await quota.setCap(SETUP_IF, { address: '10.77.0.2', publicKey: KEY_A }, 123456);
      if (recording) {
        sh(`nft flush chain ${table} from_peers && nft flush chain ${table} to_peers`);
        sh(`nft delete map ${table} caps`);
      }
      batches.mapRepaired = await counter.during(() =>
        quota.ensure(SETUP_IF, [{ address: '10.77.0.2', publicKey: KEY_A }]),
      );
      snapshot(context, 'afterMapRepair', nftTable(SETUP_IF));
      const capsAfterMapRepair = Object.fromEntries(await quota.listCaps(SETUP_IF));

      if (recording) sh(`nft delete element ${table} caps '{ 10.77.0.2 }'`);
      batches.elementRepaired = await counter.during(() =>
        quota.ensure(SETUP_IF, [{ address: '10.77.0.2', publicKey: KEY_A }]),
      );
      snapshot(context, 'afterElementRepair', nftTable(SETUP_IF));

      if (recording) {
        sh(`nft delete chain ${table} to_peers`);
        sh(`nft add chain ${table} to_peers '{ type filter hook output priority 10; }'`);
        sh(`nft add table ${table} '{ flags dormant; }'`);
      }
      batches.hookAndFlagsRepaired = await counter.during(() =>
        quota.ensure(SETUP_IF, [{ address: '10.77.0.2', publicKey: KEY_A }]),
      );
      snapshot(context, 'afterHookRepair', nftTable(SETUP_IF));
      batches.intactAgain = await counter.during(() =>
        quota.ensure(SETUP_IF, [{ address: '10.77.0.2', publicKey: KEY_A }]),
      );

      snapshot(context, 'operatorAfter', 'nft -j list table inet operator');
      return { batches, capsAfterMapRepair };
    } finally {
      quota.close();
    }
  },
  teardown(sh) {
    sh(`nft delete table ip wg_peerd_${SETUP_IF} 2>/dev/null || true`);
    sh('nft delete table inet operator 2>/dev/null || true');
  },
};

/** (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETSETELEM: a read of a map's elements. */
const GETSETELEM = (10 << 8) | 13;

export interface QuotaCapsResult {
  batches: Record<string, number>;
  /** How many map reads (GETSETELEM) each step's listCaps sent. */
  mapReads: Record<string, number>;
  /** listCaps after each step, as plain objects. */
  caps: Record<string, Record<string, KernelDataCap>>;
}

export function ping(context: ScenarioContext, count: number, source = PEER_A): void {
  if (!context.recording) return;
  context.sh(
    `ip netns exec ${CAPS_NS} busybox ping -q -c ${count} -i 0.1 -W 1 -s ` +
      `${PING_PACKET_BYTES - 28} -I ${source} ${SERVER_ADDRESS} >/dev/null 2>&1 || true`,
  );
}

export const quotaCaps: Scenario<QuotaCapsResult> = {
  name: 'quota-caps',
  description:
    'Data caps over nf_tables: NEWOBJ quota + NEWSETELEM, GETOBJ dump while ICMP is counted in ' +
    'both directions, NEWOBJ update in place, a depleted quota raised by replacing it with its ' +
    'consumed bytes, an address handed to another key, DELSETELEM + DELOBJ, re-read by a new ' +
    'socket as after a restart',
  setup(sh) {
    sh(`ip netns del ${CAPS_NS} 2>/dev/null || true; ip link del ${CAPS_IF} 2>/dev/null || true`);
    sh(`nft delete table ip wg_peerd_${CAPS_IF} 2>/dev/null || true`);
    sh(`ip netns add ${CAPS_NS}`);
    sh(`ip link add ${CAPS_IF} type veth peer name ${CAPS_IF}p netns ${CAPS_NS}`);
    sh(`ip addr add ${SERVER_ADDRESS}/24 dev ${CAPS_IF} && ip link set ${CAPS_IF} up`);
    sh(`ip -n ${CAPS_NS} addr add ${PEER_A}/24 dev ${CAPS_IF}p`);
    sh(`ip -n ${CAPS_NS} addr add ${PEER_B}/24 dev ${CAPS_IF}p`);
    sh(`ip -n ${CAPS_NS} link set ${CAPS_IF}p up && ip -n ${CAPS_NS} link set lo up`);
    // Neighbour discovery before any cap, so ARP never competes with the counted ICMP.
    sh(`ip netns exec ${CAPS_NS} busybox ping -q -c 1 -W 5 ${SERVER_ADDRESS} >/dev/null`);
    sh(
      `ip netns exec ${CAPS_NS} busybox ping -q -c 1 -W 5 -I ${PEER_B} ${SERVER_ADDRESS} >/dev/null`,
    );
  },
  async run(context) {
    const counter = new BatchCounter();
    const mapCounter = new BatchCounter(GETSETELEM);
    const open = mapCounter.wrap({ ...context, open: counter.wrap(context) });
    let quota = new Quota(open);
    const batches: Record<string, number> = {};
    const mapReads: Record<string, number> = {};
    const caps: Record<string, Record<string, KernelDataCap>> = {};
    const read = async (step: string): Promise<void> => {
      mapReads[step] = await mapCounter.during(async () => {
        caps[step] = Object.fromEntries(await quota.listCaps(CAPS_IF));
      });
      snapshot(context, step, nftTable(CAPS_IF));
    };
    try {
      await quota.ensure(CAPS_IF, []);
      await read('empty');

      batches.set = await counter.during(() =>
        quota.setCap(CAPS_IF, { address: PEER_A, publicKey: KEY_A }, 20_000),
      );
      await read('set');

      ping(context, 5); // 5 requests + 5 replies of 1,000 bytes
      await read('counted');

      batches.lowered = await counter.during(() =>
        quota.setCap(CAPS_IF, { address: PEER_A, publicKey: KEY_A }, 15_000),
      );
      await read('lowered');

      ping(context, 10); // only the first few fit under the cap
      await read('depleted');

      batches.raised = await counter.during(() =>
        quota.setCap(CAPS_IF, { address: PEER_A, publicKey: KEY_A }, 25_000),
      );
      await read('raised');

      ping(context, 3);
      await read('countedAgain');

      await quota.setCap(CAPS_IF, { address: PEER_B, publicKey: KEY_B }, 50_000);
      ping(context, 2, PEER_B);
      await read('secondPeer');
      batches.otherKey = await counter.during(() =>
        quota.setCap(CAPS_IF, { address: PEER_B, publicKey: KEY_C }, 60_000),
      );
      await read('otherKey');

      batches.removed = await counter.during(() => quota.removeCap(CAPS_IF, PEER_A));
      await read('removed');
      batches.removedAgain = await counter.during(() => quota.removeCap(CAPS_IF, PEER_A));

      // A restart: a new client, a new socket, nothing remembered.
      quota.close();
      quota = new Quota(open);
      caps.restarted = Object.fromEntries(await quota.listCaps(CAPS_IF));
      batches.ensureAfterRestart = await counter.during(() =>
        quota.ensure(CAPS_IF, [{ address: PEER_B, publicKey: KEY_C }]),
      );
      return { batches, mapReads, caps };
    } finally {
      quota.close();
    }
  },
  teardown(sh) {
    sh(`ip netns del ${CAPS_NS} 2>/dev/null || true; ip link del ${CAPS_IF} 2>/dev/null || true`);
    sh(`nft delete table ip wg_peerd_${CAPS_IF} 2>/dev/null || true`);
  },
};

export interface QuotaResetResult {
  /** listCaps after each step, as plain objects. */
  caps: Record<string, Record<string, KernelDataCap>>;
  /** What each resetCap answered. */
  resets: Record<string, { quotaBytes: number; usedBytes: number } | null>;
}

/** Issue 19: a cap's usage read and zeroed in one step (NFT_MSG_GETOBJ_RESET). */
export const quotaReset: Scenario<QuotaResetResult> = {
  name: 'quota-reset',
  description:
    'Data cap reset over nf_tables: a quota counted to depletion by ICMP, NFT_MSG_GETOBJ_RESET of ' +
    'its object (closing usage answered, usage zeroed, traffic counted again), a reset of an ' +
    'address without a cap and of a cap another key owns (nothing reset)',
  setup: quotaCaps.setup,
  async run(context) {
    const quota = new Quota(context.open);
    const caps: Record<string, Record<string, KernelDataCap>> = {};
    const resets: QuotaResetResult['resets'] = {};
    const read = async (step: string): Promise<void> => {
      caps[step] = Object.fromEntries(await quota.listCaps(CAPS_IF));
      snapshot(context, step, nftTable(CAPS_IF));
    };
    try {
      await quota.ensure(CAPS_IF, []);
      await quota.setCap(CAPS_IF, { address: PEER_A, publicKey: KEY_A }, 15_000);
      ping(context, 10); // only the first few fit under the cap
      await read('depleted');
      resets.depleted = await quota.resetCap(CAPS_IF, { address: PEER_A, publicKey: KEY_A });
      await read('reset');
      ping(context, 3);
      await read('countedAgain');
      resets.noCap = await quota.resetCap(CAPS_IF, { address: PEER_B, publicKey: KEY_B });
      resets.otherKey = await quota.resetCap(CAPS_IF, { address: PEER_A, publicKey: KEY_C });
      await read('untouched');
      return { caps, resets };
    } finally {
      quota.close();
    }
  },
  teardown: quotaCaps.teardown,
};

export const quotaScenarios: Scenario[] = [quotaSetUp, quotaCaps, quotaReset];
