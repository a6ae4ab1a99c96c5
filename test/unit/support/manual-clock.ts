/** A clock for the billing-period scheduler (src/peers/period-scheduler.ts) whose timers run when the test says. */
import type { SchedulerClock } from '../../../src/peers/period-scheduler';

export class ManualClock implements SchedulerClock {
  time: number;
  private timers: Array<() => void> = [];
  constructor(time: number) {
    this.time = time;
  }
  now(): number {
    return this.time;
  }
  setTimer(callback: () => void): unknown {
    this.timers.push(callback);
    return callback;
  }
  clearTimer(timer: unknown): void {
    this.timers = this.timers.filter((t) => t !== timer);
  }
  /** Sets the time and runs the timers armed by then, letting their work finish. */
  async runAt(time: number): Promise<void> {
    this.time = time;
    for (let round = 0; round < 5; round++) {
      const due = this.timers;
      this.timers = [];
      for (const callback of due) callback();
      for (let i = 0; i < 20; i++) await new Promise((resolve) => setImmediate(resolve));
    }
  }
}
