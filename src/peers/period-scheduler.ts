/**
 * The one scheduler of billing-period resets (issue 19). Contract:
 * - It holds, per peer (public key), the plan the kernel holds for its cap (period, start, and
 *   when the current period's count began), and calls `reset(publicKey, due)` for each reset
 *   that has fallen due: `due` is the latest boundary periodStart + k periods at or before now
 *   that is later than the period's own start. A reset missed while the daemon was down is due
 *   at once when the plan is first handed over (at start), once, for the latest boundary only.
 * - It never touches the kernel or the disk itself: `reset` does (PeerService, through the
 *   change queue), and hands the new plan back with `set`. A reset that fails is retried
 *   RETRY_MS later; one that ran but did not advance the plan is not called again for that boundary.
 * - One timer, armed for the earliest next reset but never longer than `maxSleepMs`, so that a
 *   wall clock stepped forward or back (NTP, a VM resumed) is noticed within that bound.
 * - Each wake makes one pass over the plans (`scanPlans`: what is due and when the next
 *   boundary comes), and a second only after it tried a reset. Handed the very plans it holds
 *   (the same plan objects, which a read of caps that did not change gives), it keeps its timer.
 * - The clock is injected (`now`, `setTimer`, `clearTimer`); `dueResets`, `nextWake` and
 *   `scanPlans` are the pure part, checked on literal inputs.
 */
import type { CapPlan } from '../kernel/types';
import { lastReset, nextReset, resetsAround } from './periods';

/** How soon a reset that failed is tried again. */
export const RETRY_MS = 10_000;

/** The default bound on one sleep: a stepped clock is noticed within a minute. */
export const MAX_SLEEP_MS = 60_000;

/** The resets due at `now`: per key, the latest boundary after its period's start. */
export function dueResets(
  plans: ReadonlyMap<string, CapPlan>,
  now: number,
): Array<{ key: string; due: number }> {
  const due: Array<{ key: string; due: number }> = [];
  for (const [key, plan] of plans) {
    const last = lastReset(plan.periodStart, plan.period, now);
    if (last !== null && last > plan.periodFrom) due.push({ key, due: last });
  }
  return due;
}

/** When the next reset of any plan falls (ms), or null with no plans. */
export function nextWake(plans: ReadonlyMap<string, CapPlan>, now: number): number | null {
  let next: number | null = null;
  for (const plan of plans.values()) {
    const at = nextReset(plan.periodStart, plan.period, now);
    if (next === null || at < next) next = at;
  }
  return next;
}

/** dueResets and nextWake of the same plans at the same `now`, in one pass over them. */
export function scanPlans(
  plans: ReadonlyMap<string, CapPlan>,
  now: number,
): { due: Array<{ key: string; due: number }>; next: number | null } {
  const due: Array<{ key: string; due: number }> = [];
  let next: number | null = null;
  for (const [key, plan] of plans) {
    const around = resetsAround(plan.periodStart, plan.period, now);
    if (around.last !== null && around.last > plan.periodFrom) due.push({ key, due: around.last });
    if (next === null || around.next < next) next = around.next;
  }
  return { due, next };
}

export interface SchedulerClock {
  now(): number;
  setTimer(callback: () => void, ms: number): unknown;
  clearTimer(timer: unknown): void;
}

export const systemClock: SchedulerClock = {
  now: () => Date.now(),
  setTimer: (callback, ms) => setTimeout(callback, ms).unref(),
  clearTimer: (timer) => clearTimeout(timer as NodeJS.Timeout),
};

export interface PeriodSchedulerOptions {
  /** Makes the reset due at `due` for the peer; rejects when it could not be made. */
  reset(publicKey: string, due: number): Promise<void>;
  /** Told of a reset that failed (it is tried again RETRY_MS later). */
  failed(publicKey: string, due: number, error: unknown): void;
  clock?: SchedulerClock;
  maxSleepMs?: number;
}

export class PeriodScheduler {
  private readonly plans = new Map<string, CapPlan>();
  private readonly clock: SchedulerClock;
  private readonly maxSleepMs: number;
  private timer: unknown = null;
  private running = false;
  private stopped = false;
  /** Boundaries already handed to `reset`, per key: never the same one twice. */
  private readonly tried = new Map<string, number>();

  constructor(private readonly options: PeriodSchedulerOptions) {
    this.clock = options.clock ?? systemClock;
    this.maxSleepMs = options.maxSleepMs ?? MAX_SLEEP_MS;
  }

  /** The peer's plan as the kernel now holds it; null: no plan (or no cap, or no peer). */
  set(publicKey: string, plan: CapPlan | null): void {
    if (plan === null) {
      this.plans.delete(publicKey);
      this.tried.delete(publicKey);
    } else {
      this.plans.set(publicKey, plan);
    }
    this.arm(0);
  }

  /** Every peer's plan at once (a start, or a fresh read): plans of other keys are dropped. */
  replaceAll(plans: ReadonlyMap<string, CapPlan>): void {
    // The very plans held (a read of caps that did not change hands out the same plan objects):
    // the wake already armed is the one they need, and a failed reset keeps its RETRY_MS.
    if (this.holds(plans)) return;
    this.plans.clear();
    for (const [key, plan] of plans) this.plans.set(key, plan);
    for (const key of [...this.tried.keys()]) if (!plans.has(key)) this.tried.delete(key);
    this.arm(0);
  }

  /** Whether the scheduler holds exactly `plans`: the same keys, each with the same object. */
  private holds(plans: ReadonlyMap<string, CapPlan>): boolean {
    if (plans.size !== this.plans.size || this.timer === null || this.running) return false;
    for (const [key, plan] of plans) if (this.plans.get(key) !== plan) return false;
    return true;
  }

  /** The plans held (a copy). */
  snapshot(): Map<string, CapPlan> {
    return new Map(this.plans);
  }

  stop(): void {
    this.stopped = true;
    if (this.timer !== null) this.clock.clearTimer(this.timer);
    this.timer = null;
  }

  /** Resolves once no reset is in flight (tests, shutdown). */
  async idle(): Promise<void> {
    while (this.running) await new Promise((resolve) => setImmediate(resolve));
  }

  private arm(delay: number): void {
    if (this.stopped) return;
    if (this.timer !== null) this.clock.clearTimer(this.timer);
    this.timer = this.clock.setTimer(() => {
      this.timer = null;
      void this.wake();
    }, delay);
  }

  private async wake(): Promise<void> {
    if (this.running || this.stopped) return;
    this.running = true;
    // One pass for what is due and when the next boundary comes; a second only after a reset
    // was tried (a reset changes its plan, and other plans may change meanwhile).
    let now = this.clock.now();
    let scan = scanPlans(this.plans, now);
    let tried = 0;
    try {
      for (const { key, due } of scan.due) {
        if ((this.tried.get(key) ?? -Infinity) >= due) continue;
        tried += 1;
        try {
          await this.options.reset(key, due);
          this.tried.set(key, due);
        } catch (error) {
          this.options.failed(key, due, error);
        }
      }
    } finally {
      this.running = false;
    }
    if (this.stopped) return;
    if (tried > 0) {
      now = this.clock.now();
      scan = scanPlans(this.plans, now);
    }
    const failedSome = scan.due.some(({ key, due }) => (this.tried.get(key) ?? -Infinity) < due);
    const until = scan.next === null ? this.maxSleepMs : Math.max(0, scan.next - now);
    this.arm(Math.min(until, this.maxSleepMs, failedSome ? RETRY_MS : Infinity));
  }
}
