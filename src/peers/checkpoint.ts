/**
 * Usage checkpoints: the bytes each data cap has counted, saved in the state directory every
 * `--usage-save-interval` seconds and once more at shutdown, so a reboot loses at most one
 * interval of counting (none after a clean shutdown: systemd stops the daemon with SIGTERM).
 *
 * Invariants:
 * - A checkpoint costs the kernel no read while anyone polls the list: it saves the caps of the
 *   list's shared read (`listReads`), the one in flight or one completed within the list's
 *   freshness window; between two list reads it waits for the next one, at most one interval.
 *   Only when the list was not read within the last POLLED_WITHIN intervals (nobody polls) does
 *   it dump the caps itself, and then never the WireGuard dump. A dump of the caps grows faster
 *   than their number (on the build host, `Quota.listCaps`: 10,000 caps in 0.1 s, 50,000 in
 *   1.0 s; in the VM a fifth of a list read at 50,000), so under polling a dump of its own every
 *   interval takes that from the polls.
 * - What it saves was read no earlier than the start of the list read in flight when it was due
 *   (or within the freshness window), and no later than one interval after it was due. So a
 *   crash loses what was counted since the start of the last saved read: without polling at
 *   most one interval plus one read; under polling at most two intervals plus the window and one
 *   read (a checkpoint that waited the whole interval saves counts read one interval late, and a
 *   crash just before the next one saves loses both). The last checkpoint, at shutdown, never
 *   waits. Its time (`lastAt`) is when the counts were read (the read's start), so a count that
 *   had settled before that time is in it.
 * - It never saves a read that started before the last one it saved (usage never goes back).
 * - A count read before a change to its cap ended is not saved (./usage-fence.ts): a reset's
 *   zero is never overwritten by the count before it.
 * - Only counters that changed since the last save are written (StateStore.checkpointUsage), so
 *   an idle host writes nothing at all. Polls never wait for a checkpoint or for the disk.
 * - Checkpoints never overlap: one that is due while the last still runs is skipped.
 * - A failed checkpoint is counted and logged at warn; the next one tries again.
 * The clock and timer are injected for tests.
 */
import type { QuotaApi } from '../kernel/types';
import type { StateStore } from '../state';
import { tunnelAddressOfCidrs } from './restore-plan';
import type { EventLogger } from './contracts';
import type { UsageRead } from './snapshot';
import type { UsageFence } from './usage-fence';

export interface CheckpointStats {
  /** When the counts the last successful checkpoint saved were read (ms since the epoch). */
  lastAt: number | null;
  lastDurationMs: number | null;
  /** Counters written by the last successful checkpoint. */
  lastWritten: number;
  failures: number;
  total: number;
  /** Successful checkpoints that saved the list's shared read, and those that read the caps. */
  sharedReads: number;
  ownReads: number;
}

export interface CheckpointOptions {
  quota: Pick<QuotaApi, 'listCaps'>;
  store: Pick<StateStore, 'state' | 'checkpointUsage'>;
  fence: UsageFence;
  /** The list's kernel reads (PeerService); absent: every checkpoint reads the caps itself. */
  listReads?: ListReads;
  interfaceName: string;
  intervalMs: number;
  logger: EventLogger;
  now?: () => number;
  setInterval?: (callback: () => void, ms: number) => { unref?: () => unknown };
  clearInterval?: (timer: unknown) => void;
  /** Resolves after `ms` (the bound on a wait for the list's next read); injectable for tests. */
  sleep?: (ms: number) => Promise<void>;
}

/** What a checkpoint may take from the list's reads, never starting one (FreshRead's riders). */
export interface ListReads {
  /** The read at hand: in flight, or completed within the freshness window; null when none is. */
  atHand(): Promise<UsageRead> | null;
  /** The next list read to start, whoever starts it. */
  next(): Promise<UsageRead>;
  /** Milliseconds since the list last read the kernel; null before the first read. */
  sinceLastRead(): number | null;
}

/**
 * The list counts as polled when it was read within this many intervals. Not one: between two
 * polls of a big list its answers go out, and at 50,000 peers in the VM that gap outlasted a
 * 10 s interval (bench:restore: 5 of 22 checkpoints then dumped the caps on their own).
 */
export const POLLED_WITHIN = 3;

function unrefSleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}

export class UsageCheckpoints {
  private timer: unknown = null;
  private running: Promise<void> | null = null;
  /** Ends a wait for the list's next read at once (shutdown). */
  private endWait: (() => void) | null = null;
  private readonly now: () => number;
  /** The fence token of the last read saved: an older read is never saved after it. */
  private lastToken = 0;
  readonly stats: CheckpointStats = {
    lastAt: null,
    lastDurationMs: null,
    lastWritten: 0,
    failures: 0,
    total: 0,
    sharedReads: 0,
    ownReads: 0,
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

  /**
   * One checkpoint now (or the one already running). `waitForList` false: never wait for the
   * list's next read (the last checkpoint, at shutdown, when no poll comes any more).
   */
  checkpoint(waitForList = true): Promise<void> {
    this.running ??= this.run(waitForList).finally(() => {
      this.running = null;
    });
    return this.running;
  }

  /** Stops the timer and makes a last checkpoint (shutdown), ending a wait for the list. */
  async stop(): Promise<void> {
    if (this.timer !== null) (this.options.clearInterval ?? clearInterval)(this.timer as never);
    this.timer = null;
    this.endWait?.();
    if (this.running) await this.running;
    await this.checkpoint(false);
  }

  private async run(waitForList: boolean): Promise<void> {
    const { store, fence } = this.options;
    const startedHr = performance.now();
    try {
      const read = await this.read(waitForList);
      if (read === null) return; // stopped while waiting: the last checkpoint follows at once
      // A read that started before the last one saved would put older counts back.
      if (read.token < this.lastToken) return;
      const usage = new Map<string, number>();
      for (const peer of store.state.peers.values()) {
        if (peer.cap === null || fence.stale(peer.publicKey, read.token)) continue;
        const address = tunnelAddressOfCidrs(peer.allowedIps);
        const cap = address === null ? undefined : read.caps.get(address);
        if (cap !== undefined) usage.set(peer.publicKey, cap.usedBytes);
      }
      // No await between the fence's check and the append it guards (checkpointUsage appends
      // before its first await).
      const written = await store.checkpointUsage(usage);
      fence.forget(read.token);
      this.lastToken = read.token;
      this.stats.lastAt = read.startedAt;
      this.stats.lastDurationMs = performance.now() - startedHr;
      this.stats.lastWritten = written;
      this.stats.total++;
      if (read.shared) this.stats.sharedReads++;
      else this.stats.ownReads++;
    } catch (error) {
      this.stats.failures++;
      this.options.logger.warn(
        {
          event: 'usage_checkpoint_failed',
          interface: this.options.interfaceName,
          error: error instanceof Error ? error.message : String(error),
        },
        'saving the data caps’ usage in the state directory failed; the next checkpoint tries again',
      );
    }
  }

  /**
   * The counts to save: the list's read at hand; else, while the list is polled (read within the
   * last POLLED_WITHIN intervals), the next list read, waited for at most one interval; else (or
   * when the list's read fails) a dump of the caps of its own.
   */
  private async read(waitForList: boolean): Promise<(UsageRead & { shared: boolean }) | null> {
    const list = this.options.listReads;
    if (list !== undefined) {
      const shared = await this.fromList(list, waitForList);
      if (shared === 'stopped') return null;
      if (shared !== null) return { ...shared, shared: true };
    }
    const token = this.options.fence.token();
    const startedAt = this.now();
    const caps = await this.options.quota.listCaps(this.options.interfaceName);
    return { caps, token, startedAt, shared: false };
  }

  private async fromList(
    list: ListReads,
    waitForList: boolean,
  ): Promise<UsageRead | null | 'stopped'> {
    const { intervalMs } = this.options;
    let pending: Promise<UsageRead | null | 'stopped'> | null = list.atHand();
    const since = list.sinceLastRead();
    if (pending === null && waitForList && since !== null && since < POLLED_WITHIN * intervalMs) {
      // Someone polls: between two of their reads, the next one is near.
      const ended = new Promise<'stopped'>((resolve) => (this.endWait = () => resolve('stopped')));
      const sleep = this.options.sleep ?? unrefSleep;
      pending = Promise.race([list.next(), sleep(intervalMs).then(() => null), ended]);
    }
    try {
      return pending === null ? null : await pending;
    } catch {
      return null; // the list's read failed (and its callers were told): read the caps alone
    } finally {
      this.endWait = null;
    }
  }
}
