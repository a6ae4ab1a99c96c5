import { expect } from 'chai';
import type { CapPlan } from '../../../src/kernel/types';
import {
  PeriodScheduler,
  type SchedulerClock,
  dueResets,
  nextWake,
  scanPlans,
} from '../../../src/peers/period-scheduler';

const DAY = 86_400_000;
const T0 = Date.parse('2026-03-01T00:00:00Z');

function plan(period: CapPlan['period'], periodFrom: number): CapPlan {
  return { period, periodStart: { at: T0, offsetMinutes: 0 }, periodFrom, previousUsedBytes: null };
}

/** A clock whose time moves only when told, and whose one timer fires when its time comes. */
class FakeClock implements SchedulerClock {
  time: number;
  timers: Array<{ at: number; callback: () => void; id: number }> = [];
  private ids = 0;
  constructor(time: number) {
    this.time = time;
  }
  now(): number {
    return this.time;
  }
  setTimer(callback: () => void, ms: number): unknown {
    const id = ++this.ids;
    this.timers.push({ at: this.time + ms, callback, id });
    return id;
  }
  clearTimer(timer: unknown): void {
    this.timers = this.timers.filter((t) => t.id !== timer);
  }
  /** Moves time to `to`, firing every timer due on the way (and letting its work run). */
  async advance(to: number): Promise<void> {
    for (;;) {
      this.timers.sort((a, b) => a.at - b.at);
      const next = this.timers[0];
      if (next === undefined || next.at > to) break;
      this.timers.shift();
      this.time = Math.max(this.time, next.at);
      next.callback();
      for (let i = 0; i < 10; i++) await new Promise((resolve) => setImmediate(resolve));
    }
    this.time = to;
  }
  nextTimerIn(): number | null {
    const next = [...this.timers].sort((a, b) => a.at - b.at)[0];
    return next === undefined ? null : next.at - this.time;
  }
}

function scheduler(clock: FakeClock, options: { fail?: boolean } = {}) {
  const made: Array<{ key: string; due: number }> = [];
  const failed: Array<{ key: string; due: number }> = [];
  const s: PeriodScheduler = new PeriodScheduler({
    clock,
    maxSleepMs: 60_000,
    reset: async (key, due) => {
      if (options.fail) throw new Error('nf_tables refused');
      made.push({ key, due });
      // As PeerService does: the kernel's new plan comes back.
      s.set(key, { ...plan('day', due) });
    },
    failed: (key, due) => failed.push({ key, due }),
  });
  return { s, made, failed };
}

describe('period scheduler (src/peers/period-scheduler.ts)', () => {
  describe('dueResets and nextWake (pure)', () => {
    it('owes nothing before the first boundary after the period began', () => {
      const plans = new Map([['a', plan('day', T0)]]);
      expect(dueResets(plans, T0 + DAY - 1)).to.deep.equal([]);
      expect(nextWake(plans, T0 + DAY - 1)).to.equal(T0 + DAY);
    });

    it('owes the boundary once it is reached', () => {
      const plans = new Map([['a', plan('day', T0)]]);
      expect(dueResets(plans, T0 + DAY)).to.deep.equal([{ key: 'a', due: T0 + DAY }]);
    });

    it('owes only the latest boundary when several passed (a daemon down for days)', () => {
      const plans = new Map([['a', plan('day', T0)]]);
      expect(dueResets(plans, T0 + 3 * DAY + 5)).to.deep.equal([{ key: 'a', due: T0 + 3 * DAY }]);
    });

    it('owes nothing for a boundary the plan already counts from', () => {
      const plans = new Map([['a', plan('week', T0 + 7 * DAY)]]);
      expect(dueResets(plans, T0 + 7 * DAY + 1000)).to.deep.equal([]);
      expect(nextWake(plans, T0 + 7 * DAY + 1000)).to.equal(T0 + 14 * DAY);
    });

    it('wakes for the earliest plan of several, and not at all without plans', () => {
      const plans = new Map([
        ['m', plan('month', T0)],
        ['d', plan('day', T0)],
      ]);
      expect(nextWake(plans, T0 + 1)).to.equal(T0 + DAY);
      expect(nextWake(new Map(), T0)).to.equal(null);
    });
  });

  describe('scanPlans: what is due and the next wake in one pass', () => {
    it('answers what dueResets and nextWake answer, for days, weeks and months, before, at and after boundaries', () => {
      const plans = new Map<string, CapPlan>([
        ['d', plan('day', T0)],
        ['w', plan('week', T0 + 7 * DAY)],
        ['m', plan('month', T0)],
        [
          'o',
          { ...plan('month', T0), periodStart: { at: T0 + 30 * DAY + 5, offsetMinutes: -300 } },
        ],
      ]);
      const nows = [
        T0 - 1,
        T0,
        T0 + DAY - 1,
        T0 + DAY,
        T0 + 7 * DAY + 1000,
        T0 + 31 * DAY,
        T0 + 400 * DAY,
      ];
      for (const now of nows) {
        expect(scanPlans(plans, now)).to.deep.equal({
          due: dueResets(plans, now),
          next: nextWake(plans, now),
        });
      }
      expect(scanPlans(new Map(), T0)).to.deep.equal({ due: [], next: null });
    });
  });

  describe('the timer', () => {
    it('makes a reset when its boundary comes, and then sleeps until the next one', async () => {
      const clock = new FakeClock(T0 + DAY - 10_000);
      const { s, made } = scheduler(clock);
      s.set('a', plan('day', T0));
      await clock.advance(T0 + DAY - 1);
      expect(made).to.deep.equal([]);
      await clock.advance(T0 + DAY);
      expect(made).to.deep.equal([{ key: 'a', due: T0 + DAY }]);
      await clock.advance(T0 + DAY + 30 * 60_000);
      expect(made).to.have.length(1);
      s.stop();
    });

    it('makes a reset that fell due before it was handed the plan at once (a start)', async () => {
      const clock = new FakeClock(T0 + 2 * DAY + 3_600_000);
      const { s, made } = scheduler(clock);
      s.replaceAll(new Map([['a', plan('day', T0)]]));
      await clock.advance(clock.time);
      expect(made).to.deep.equal([{ key: 'a', due: T0 + 2 * DAY }]);
      s.stop();
    });

    it('never sleeps longer than maxSleepMs, so a clock stepped forward is noticed', async () => {
      const clock = new FakeClock(T0 + 1000);
      const { s, made } = scheduler(clock);
      s.set('a', { ...plan('month', T0) });
      await clock.advance(T0 + 1000);
      expect(clock.nextTimerIn()).to.equal(60_000);
      // The wall clock jumps past the month's end between two wakes.
      clock.time = Date.parse('2026-04-01T00:00:30Z');
      await clock.advance(clock.time + 60_000);
      expect(made.map((m) => new Date(m.due).toISOString())).to.deep.equal([
        '2026-04-01T00:00:00.000Z',
      ]);
      s.stop();
    });

    it('reports a reset that failed and retries it, never the same boundary twice once made', async () => {
      const clock = new FakeClock(T0 + DAY);
      const failing = scheduler(clock, { fail: true });
      failing.s.set('a', plan('day', T0));
      await clock.advance(T0 + DAY + 9_999);
      expect(failing.failed).to.have.length(1);
      await clock.advance(T0 + DAY + 10_000);
      expect(failing.failed).to.have.length(2);
      expect(failing.failed[0]).to.deep.equal({ key: 'a', due: T0 + DAY });
      failing.s.stop();
    });

    it('keeps its timer when a read hands it the very plans it holds, and wakes at once for changed ones', async () => {
      const clock = new FakeClock(T0 + 1000);
      const { s } = scheduler(clock);
      const plans = new Map([['a', plan('day', T0)]]);
      s.replaceAll(plans);
      await clock.advance(clock.time);
      expect(clock.nextTimerIn()).to.equal(60_000);
      await clock.advance(clock.time + 20_000);
      // A read of caps that did not move: the same plan objects, the wake stays 40 s away.
      s.replaceAll(new Map(plans));
      expect(clock.nextTimerIn()).to.equal(40_000);
      // A plan that is another object (a replaced cap) wakes the scheduler at once.
      s.replaceAll(new Map([['a', { ...plan('day', T0) }]]));
      expect(clock.nextTimerIn()).to.equal(0);
      s.stop();
    });

    it('forgets a plan set to null: no reset for it', async () => {
      const clock = new FakeClock(T0 + DAY - 1);
      const { s, made } = scheduler(clock);
      s.set('a', plan('day', T0));
      s.set('a', null);
      await clock.advance(T0 + 2 * DAY);
      expect(made).to.deep.equal([]);
      s.stop();
    });
  });
});
