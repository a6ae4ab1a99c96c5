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
