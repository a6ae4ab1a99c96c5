/**
 * Usage checkpoints: the bytes each data cap has counted, saved in the state directory every
 * `--usage-save-interval` seconds and once more at shutdown, so a reboot loses at most one
 * interval of counting (none after a clean shutdown: systemd stops the daemon with SIGTERM).
 *
 * Invariants:
 * - A checkpoint reads the caps alone (one nf_tables dump), never the WireGuard dump, and never
 *   on a request's path: polls never wait for it or for the disk.
 * - Only counters that changed since the last save are written (StateStore.checkpointUsage), so
 *   an idle host writes nothing at all.
 * - Checkpoints never overlap: one that is due while the last still runs is skipped.
 * - A failed checkpoint is counted and logged at warn; the next one tries again.
 * The clock and timer are injected for tests.
 */
import type { QuotaApi } from '../kernel/types';
import type { StateStore } from '../state';
import { tunnelAddressOfCidrs } from './restore-plan';
import type { EventLogger } from './service';

export interface CheckpointStats {
  /** Milliseconds since the epoch of the last successful checkpoint; null before the first. */
  lastAt: number | null;
  lastDurationMs: number | null;
  /** Counters written by the last successful checkpoint. */
  lastWritten: number;
  failures: number;
  total: number;
}

export interface CheckpointOptions {
  quota: Pick<QuotaApi, 'listCaps'>;
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
      const caps = await quota.listCaps(interfaceName);
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
