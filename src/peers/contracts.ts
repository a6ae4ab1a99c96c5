/**
 * The domain's small shared shapes: the logger it writes to, and what a change answers. Types
 * only, so every file of the domain can name them without importing the service (no import
 * circle in src/peers).
 */
import type { Ipv6Address } from '../kernel/types';
import type { DataCapChange } from './cap-plan';
import type { PeerChangeSink } from './event-sink';
import type { ExhaustionTimes } from './exhaustion-times';
import type { PeerKernel } from './kernel-calls';
import type { RandomSource } from './keys';
import type { ClientDefaults, CreateOptions } from './client-options';
import type { SchedulerClock } from './period-scheduler';
import type { StateStore } from '../state';
import type { KernelObserver, PeerSnapshot } from './snapshot';
import type { UsageFence } from './usage-fence';

/**
 * The state directory as the domain writes it (src/state/store.ts): every record resolves once
 * it is on disk.
 */
export type PeerJournal = Pick<
  StateStore,
  | 'state'
  | 'intendCreates'
  | 'commitCreates'
  | 'abortCreates'
  | 'recordDelete'
  | 'recordGone'
  | 'settleDelete'
  | 'recordLimit'
  | 'recordCap'
  | 'recordSuspension'
  | 'recordName'
  | 'recordExpiry'
  | 'recordPeers'
  | 'amendPeer'
>;

/** The slice of a logger the domain writes kernel changes to (pino's Logger fits). */
export interface EventLogger {
  info(object: Record<string, unknown>, message: string): void;
  warn(object: Record<string, unknown>, message: string): void;
  error(object: Record<string, unknown>, message: string): void;
}

export interface CreatedPeer {
  ip: string;
  /** The peer's IPv6 address on a dual-stack interface; null on an IPv4-only one. */
  ipv6: string | null;
  privateKey: string;
  publicKey: string;
  serverPublicKey: string;
  endpoint: string;
  /** What the client config routes through the tunnel: the subnet, or everything (dual-stack). */
  clientAllowedIps: string;
  /** Ready wg-quick configuration for the client. */
  clientConfig: string;
  /** The peer's preshared key, base64, when the create made one (issue 31); null: none. */
  presharedKey: string | null;
}

/** A peer as the result of a change names it. */
export interface ChangedPeer {
  publicKey: string;
  ip: string | null;
}

/** A cap reset: the peer and the usage the reset closed (bytes let through, at most the cap). */
export interface ResetCap extends ChangedPeer {
  usedBytes: number;
}

/** What the HTTP layer needs from the domain. */
export interface PeerServiceApi {
  /** The shared kernel read behind the list and the metrics (DESIGN §5). */
  snapshot(): Promise<PeerSnapshot>;
  /** The snapshot snapshot() would answer at once (inside the window), or null. */
  freshSnapshot(): PeerSnapshot | null;
  /** `options`: the create body (issue 31); absent or `{}`: today's peer. */
  createPeer(options?: CreateOptions): Promise<CreatedPeer>;
  deletePeer(publicKey: string): Promise<ChangedPeer>;
  setSpeedLimit(publicKey: string, bytesPerSecond: number): Promise<ChangedPeer>;
  removeSpeedLimit(publicKey: string): Promise<ChangedPeer>;
  /** A number: `{ quotaBytes }`. Fields left out keep their value (./cap-plan.ts). */
  setDataCap(publicKey: string, change: number | DataCapChange): Promise<ChangedPeer>;
  removeDataCap(publicKey: string): Promise<ChangedPeer>;
  setSuspension(publicKey: string, suspended: boolean): Promise<ChangedPeer>;
  /** Names, renames or (null) unnames the peer (issue 31). */
  setName(publicKey: string, name: string | null): Promise<ChangedPeer>;
  /**
   * Sets, renews or (null) clears the peer's expiry (issue 31): ISO 8601 text with an offset, in
   * the future; enforced by the kernel from that instant on.
   */
  setExpiry(publicKey: string, expiresAt: string | null): Promise<ChangedPeer>;
  resetDataCap(publicKey: string): Promise<ResetCap>;
}

export interface PeerServiceOptions {
  kernel: PeerKernel;
  interfaceName: string;
  /** Host part of `server.endpoint`; null: the host's primary IPv4 address, asked per create. */
  endpointHost?: string | null;
  logger: EventLogger;
  /** Milliseconds since the epoch; injectable for tests. */
  now?: () => number;
  random?: RandomSource;
  /** Told of every snapshot read and kernel failure (the daemon's metrics). */
  observer?: KernelObserver;
  /**
   * DESIGN §5 freshness window: for this many milliseconds after a snapshot read completed,
   * snapshot() answers from it; every change ends the window. 0 (the default here; the daemon's
   * own default is config's 1000) shares only reads in flight.
   */
  listMaxAgeMs?: number;
  /** Monotonic millisecond clock of the window; injectable for tests. */
  monotonicNow?: () => number;
  /** Told of each change as it is made, beside its log line (src/events). */
  events?: PeerChangeSink;
  /** The state directory (`--state-dir`); null or absent: nothing is kept (SPEC.md). */
  journal?: PeerJournal | null;
  /**
   * Settles once the saved state is back in the kernel (a start with --state-dir): lists and
   * changes wait for it, so nobody sees a half-restored list.
   */
  ready?: Promise<unknown>;
  /**
   * The interface's global or unique-local IPv6 addresses as found or made at start (DESIGN §3,
   * issue 18): the first one's prefix is the pool each new peer also gets a /128 from, and none
   * of them is given out. Empty or absent: IPv4 only, as before.
   */
  addresses6?: readonly Ipv6Address[];
  /** The billing periods' clock (src/peers/period-scheduler.ts); injectable for tests. */
  periodClock?: SchedulerClock;
  /** Told of each billing-period reset made (the daemon's metrics). */
  onPeriodReset?: () => void;
  /** When caps ran out (the list's exhausted_at), told of every fresh read; none: unknown. */
  exhaustion?: ExhaustionTimes;
  /**
   * Shared with the usage checkpoints (./checkpoint.ts): every read of the caps takes its token,
   * every change to a cap runs inside it. Absent: one of the service's own.
   */
  usageFence?: UsageFence;
  /**
   * What a create's client config gets when its body leaves a field out (--client-dns,
   * --client-allowed-ips, --client-mtu, --client-keepalive, --preshared-keys); absent: none of
   * them, keepalive 25 (today's config).
   */
  clientDefaults?: ClientDefaults;
}
