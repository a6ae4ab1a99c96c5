/**
 * One kernel read of everything the list and the metrics show (DESIGN §5): the WireGuard device,
 * the speed limits and the data caps, taken together. Every poll that shares a read is answered
 * from the same snapshot, so `GET /api/peers` and `GET /metrics` agree with each other.
 */
import type { KernelDataCap, LimitState, WireGuardDevice } from '../kernel/types';
import type { Facility } from './errors';
import type { CapsRead } from './exhaustion-times';

export interface PeerSnapshot {
  /** Milliseconds since the epoch when the kernel read completed; statuses are computed at it. */
  readonly takenAt: number;
  /** How long the kernel read took, in milliseconds. */
  readonly readMs: number;
  readonly device: WireGuardDevice;
  /** Tunnel address → bytes per second that hold per direction. */
  readonly limits: ReadonlyMap<string, LimitState>;
  /** Tunnel address → cap, bytes used and whether the map still leads packets to it. */
  readonly caps: ReadonlyMap<string, KernelDataCap>;
  /**
   * When the read that read `caps` completed, ms since the epoch: the list's
   * `data_cap.read_at` (issue 29: the caps are read on a cadence of their own,
   * ./usage-cadence.ts). Absent: this very read read them (`takenAt`).
   */
  readonly capsReadAt?: number;
  /** Suspended tunnel address → the public key that owns the suspension; absent: none. */
  readonly suspended?: ReadonlyMap<string, string | null>;
  /** Tunnel address → when its used-up cap ran out, ms since the epoch (./exhaustion-times.ts). */
  readonly exhausted?: ReadonlyMap<string, number>;
  /** Peer names by public key (issue 31); absent: none. Never changed in place. */
  readonly names?: ReadonlyMap<string, string>;
  /** Expiries by public key, ms since the epoch (issue 31); absent: none. */
  readonly expiries?: ReadonlyMap<string, number>;
  /** Public keys whose expiry the kernel has ended (issue 31); absent: none. */
  readonly expired?: ReadonlySet<string>;
  /** The kernel's caps as read, for usage checkpoints (./checkpoint.ts); absent in test doubles. */
  readonly usage?: UsageRead;
}

/**
 * The caps of one kernel read as a usage checkpoint saves them: the exhaustion times' CapsRead
 * (its caps and start), with the usage fence's token taken as it started (./usage-fence.ts).
 */
export type UsageRead = Pick<CapsRead, 'caps' | 'startedAt'> & { readonly token: number };

/** What the service reports about its kernel calls, for the daemon's own metrics. */
export interface KernelObserver {
  /** A snapshot read finished (successfully or not) after `ms` milliseconds. */
  kernelRead(ms: number, ok: boolean): void;
  /** A kernel call of `facility` failed with the domain error `code` (e.g. KERNEL_ERROR). */
  kernelError(facility: Facility, code: string): void;
}
