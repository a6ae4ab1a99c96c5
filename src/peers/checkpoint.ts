/**
 * Usage checkpoints: the bytes each data cap has counted, saved in the state directory every
 * `--usage-save-interval` seconds and once more at shutdown, so a reboot loses at most one
 * interval of counting (none after a clean shutdown: systemd stops the daemon with SIGTERM).
 *
 * Invariants:
 * - A checkpoint saves the caps of the shared kernel read (the list's and /metrics') when one was
 *   taken less than SHARED_READ_MAX_AGE_MS ago: with monitoring polling, a checkpoint costs no
 *   kernel read at all (at 50,000 caps a dump of them all takes seconds of the event loop, which
 *   the polls then waited behind). Otherwise it reads the caps alone (one nf_tables dump), never
 *   the WireGuard dump. Never on a request's path: polls never wait for the disk. A power cut
 *   thus loses at most one interval and that second of counting.
 * - Only counters that changed since the last save are written (StateStore.checkpointUsage), so
 *   an idle host writes nothing at all.
 * - Checkpoints never overlap: one that is due while the last still runs is skipped.
 * - A failed checkpoint is counted and logged at warn; the next one tries again.
 * The clock and timer are injected for tests.
 */
import type { QuotaApi } from '../kernel/types';
import type { StateStore } from '../state';
import { tunnelAddressOfCidrs } from './restore-plan';
import type { CapsRead } from './exhaustion-times';
import type { EventLogger } from './service';

/** How old a shared read may be for a checkpoint to save its caps instead of reading its own. */
export const SHARED_READ_MAX_AGE_MS = 1_000;

export interface CheckpointStats {
  /** Milliseconds since the epoch of the last successful checkpoint; null before the first. */
  lastAt: number | null;
  lastDurationMs: number | null;
  /** Counters written by the last successful checkpoint. */
  lastWritten: number;
  /** Checkpoints that saved a shared read's caps rather than reading their own. */
  sharedReads: number;
  failures: number;
  total: number;
}

export interface CheckpointOptions {
  quota: Pick<QuotaApi, 'listCaps'>;
  /** The kernel's caps as the last shared read took them (PeerService.lastCapsRead), or null. */
  sharedRead?: () => Pick<CapsRead, 'caps' | 'takenAt'> | null;
  store: Pick<StateStore, 'state' | 'checkpointUsage'>;
  interfaceName: string;
  intervalMs: number;
  logger: EventLogger;
  now?: () => number;
  setInterval?: (callback: () => void, ms: number) => { unref?: () => unknown };
  clearInterval?: (timer: unknown) => void;
}

export class UsageCheckpoints {
  private timer: unknown = null;
  private running: Promise<void> | null = null;
  private readonly now: () => number;
  readonly stats: CheckpointStats = {
    lastAt: null,
    lastDurationMs: null,
    lastWritten: 0,
    sharedReads: 0,
    failures: 0,
    total: 0,
  };

  constructor(private readonly options: CheckpointOptions) {
    this.now = options.now ?? Date.now;
  }

  start(): void {
    const every = this.options.setInterval ?? setInterval;
    const timer = every(() => void this.checkpoint(), this.options.intervalMs);
    timer.unref?.();
    this.timer = timer;
  }

  /** One checkpoint now (or the one already running). */
  checkpoint(): Promise<void> {
    this.running ??= this.run().finally(() => {
      this.running = null;
    });
    return this.running;
  }

  /** Stops the timer and makes a last checkpoint (shutdown). */
  async stop(): Promise<void> {
    if (this.timer !== null) (this.options.clearInterval ?? clearInterval)(this.timer as never);
    this.timer = null;
    if (this.running) await this.running;
    await this.checkpoint();
  }

  private async run(): Promise<void> {
    const { quota, store, interfaceName, logger } = this.options;
    const started = this.now();
    const startedHr = performance.now();
    try {
      const shared = this.options.sharedRead?.() ?? null;
      const fresh = shared !== null && started - shared.takenAt < SHARED_READ_MAX_AGE_MS;
      const caps = fresh ? shared.caps : await quota.listCaps(interfaceName);
      if (fresh) this.stats.sharedReads++;
      const usage = new Map<string, number>();
      for (const peer of store.state.peers.values()) {
        if (peer.cap === null) continue;
        const address = tunnelAddressOfCidrs(peer.allowedIps);
        const cap = address === null ? undefined : caps.get(address);
        if (cap !== undefined) usage.set(peer.publicKey, cap.usedBytes);
      }
      const written = await store.checkpointUsage(usage);
      this.stats.lastAt = started;
      this.stats.lastDurationMs = performance.now() - startedHr;
      this.stats.lastWritten = written;
      this.stats.total++;
    } catch (error) {
      this.stats.failures++;
      logger.warn(
        {
          event: 'usage_checkpoint_failed',
          interface: interfaceName,
          error: error instanceof Error ? error.message : String(error),
        },
        'saving the data caps’ usage in the state directory failed; the next checkpoint tries again',
      );
    }
  }
}
