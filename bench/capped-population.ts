/**
 * The benchmarks' peer populations, made in one place (issue 29): the tunnel address of peer i,
 * the capped host's mix of caps, periods, limits, suspensions and throttles (what an operator
 * selling capped plans runs), that mix as the kernel would list it (for the host-side benches
 * over a fake kernel), and a state dir holding any population, written with the daemon's own
 * store as a daemon of an earlier boot would have left it (for the VM benches, where the daemon's
 * own restore then puts it into the kernel). Deterministic: peer i is the same in every bench
 * except for its generated key.
 */
import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import type { KernelDataCap, LimitState } from '../src/kernel/types';
import { generatePrivateKey, publicKeyOf } from '../src/peers/keys';
import { type SavedCap, type SavedPeer, StateStore } from '../src/state';

/** Host numbers 2.. of 10.77.0.0/16 (10.77.0.1 is the server): at most 65,532 peers. */
export function peerAddress(i: number): string {
  const host = i + 2;
  return `10.77.${host >> 8}.${host & 255}`;
}

/** Peer i of a population: its cap, speed limit (bytes per second each way) and suspension. */
export interface BenchPeerPlan {
  cap: SavedCap | null;
  limit: number | null;
  suspended: boolean;
}

/**
 * Peer i of the capped host (issue 29's Done-when 1): every peer has a cap that has counted
 * bytes; a tenth (i % 10 = 1) has a monthly period, counted since the first of this month, UTC;
 * a tenth (i % 10 = 2) has a speed limit; 1% (i % 100 = 3) is suspended; 1% (i % 100 = 4)
 * throttles over its cap and has used it up, so it is being throttled now.
 */
export function cappedHostPeer(i: number, now = Date.now()): BenchPeerPlan {
  const cap: SavedCap = { quotaBytes: 10_000_000_000 + i, usedBytes: i * 4_099 };
  if (i % 10 === 1) {
    const today = new Date(now);
    cap.plan = {
      period: 'month',
      periodStart: { at: Date.UTC(2026, 0, 1), offsetMinutes: 0 },
      periodFrom: Date.UTC(today.getUTCFullYear(), today.getUTCMonth(), 1),
      previousUsedBytes: 123_456_789,
    };
  }
  if (i % 100 === 4) {
    cap.throttleBytesPerSecond = 100_000;
    cap.usedBytes = cap.quotaBytes;
  }
  return {
    cap,
    // Whole kbit/s, so tc's text shows them exactly.
    limit: i % 10 === 2 ? (1000 + (i % 1000)) * 125 : null,
    suspended: i % 100 === 3,
  };
}

/** A peer plan's cap as the kernel lists it (enforced; throttled once used up with a throttle). */
export function asKernelCap(cap: SavedCap): KernelDataCap {
  const listed: KernelDataCap = {
    quotaBytes: cap.quotaBytes,
    usedBytes: cap.usedBytes,
    enforced: true,
  };
  if (cap.plan) listed.plan = cap.plan;
  if (cap.throttleBytesPerSecond !== undefined) {
    listed.throttleBytesPerSecond = cap.throttleBytesPerSecond;
    listed.throttled = cap.usedBytes >= cap.quotaBytes;
  }
  return listed;
}

/** A peer plan's limit as the shaper lists it: the same rate both ways, or null. */
export function asLimitState(limit: number | null): LimitState | null {
  return limit === null ? null : { download: limit, upload: limit };
}

/** The interface a state dir describes. */
export interface BenchInterface {
  interfaceName: string;
  /** CIDR text of the server's address ("10.77.0.1/16"). */
  address: string;
  listenPort: number;
}

/**
 * A state dir at `dir` (emptied first) as a daemon of another boot left it: the interface with a
 * fresh key and `count` peers, peer i at peerAddress(i)/32 with a random key and `plan(i)`.
 */
export async function writeStateDir(
  dir: string,
  iface: BenchInterface,
  count: number,
  plan: (i: number) => BenchPeerPlan,
): Promise<void> {
  rmSync(dir, { recursive: true, force: true });
  const store = await StateStore.open({ dir, interfaceName: iface.interfaceName });
  const privateKey = generatePrivateKey();
  const publicKey = Buffer.from(publicKeyOf(privateKey)).toString('base64');
  await store.saveInterface(privateKey, {
    listenPort: iface.listenPort,
    addresses: [iface.address],
    publicKey,
  });
  const peers = new Map<string, SavedPeer>();
  for (let i = 0; i < count; i++) {
    const key = randomBytes(32).toString('base64');
    const { cap, limit, suspended } = plan(i);
    peers.set(key, {
      publicKey: key,
      allowedIps: [`${peerAddress(i)}/32`],
      limit,
      cap,
      ...(suspended ? { suspended: true } : {}),
    });
  }
  await store.replaceState({
    boot: { bootId: 'an-earlier-boot', ifindex: 1, interfaceName: iface.interfaceName },
    iface: store.state.iface,
    peers,
    intents: new Map(),
  });
  await store.close();
}

/**
 * tc -batch commands for the daemon's shaper layout (src/kernel/shaper/index.ts) holding the
 * speed limits of `limited` (population index, bytes per second each way): per device an HTB
 * root 1: (default 0, direct_qlen 1000), parent class 1:ffff at 8 Tbit, one class 1:<low 16 bits>
 * per peer, then u32 at prio 10: table 100: hashing the third octet, tables 2XX: hashing the
 * last, a link from the root table, one link per third octet of the /16 (the daemon builds the
 * skeleton for the whole subnet), one key node per peer; on the interface an ingress qdisc
 * redirecting everything to the IFB. Classes before filters: binding filters to classes that
 * exist is the cheap order for tc as for the daemon. The kernel's bulk tool beside the daemon's
 * restore (bench/restore.ts, bench/restore-encode.ts).
 */
export function shaperTcBatch(
  ifname: string,
  ifb: string,
  limited: ReadonlyArray<readonly [index: number, bytesPerSecond: number]>,
): string {
  const lines: string[] = [];
  const octets = Array.from({ length: 256 }, (_, x) => x);
  for (const [dev, at, dir] of [
    [ifname, 16, 'dst'],
    [ifb, 12, 'src'],
  ] as const) {
    lines.push(`qdisc add dev ${dev} root handle 1: htb default 0 direct_qlen 1000`);
    lines.push(`class add dev ${dev} parent 1: classid 1:ffff htb rate 8Tbit ceil 8Tbit`);
    for (const [i, bytesPerSecond] of limited) {
      const rate = `${(bytesPerSecond * 8) / 1000}kbit`;
      lines.push(
        `class add dev ${dev} parent 1:ffff classid 1:${(i + 2).toString(16)} htb rate ${rate} ceil ${rate}`,
      );
    }
    lines.push(`filter add dev ${dev} parent 1: prio 10 handle 100: protocol ip u32 divisor 256`);
    for (const x of octets) {
      lines.push(
        `filter add dev ${dev} parent 1: prio 10 handle ${(0x200 + x).toString(16)}: protocol ip u32 divisor 256`,
      );
    }
    lines.push(
      `filter add dev ${dev} parent 1: prio 10 protocol ip u32 link 100: hashkey mask 0x0000ff00 at ${at} match ip ${dir} 10.77.0.0/16`,
    );
    for (const x of octets) {
      lines.push(
        `filter add dev ${dev} parent 1: prio 10 protocol ip u32 ht 100:${x.toString(16)}: link ${(0x200 + x).toString(16)}: hashkey mask 0x000000ff at ${at} match ip ${dir} 10.77.${x}.0/24`,
      );
    }
    for (const [i] of limited) {
      const host = i + 2;
      const table = (0x200 + (host >> 8)).toString(16);
      lines.push(
        `filter add dev ${dev} parent 1: prio 10 handle ${table}:${(host & 255).toString(16)}:1 protocol ip u32 ht ${table}:${(host & 255).toString(16)}: match ip ${dir} ${peerAddress(i)}/32 classid 1:${host.toString(16)}`,
      );
    }
  }
  lines.push(`qdisc add dev ${ifname} handle ffff: ingress`);
  lines.push(
    `filter add dev ${ifname} parent ffff: prio 10 protocol ip u32 match u32 0 0 action mirred egress redirect dev ${ifb}`,
  );
  return `${lines.join('\n')}\n`;
}
