/**
 * Period arithmetic (issue 19): every expected instant below is written out from the calendar
 * (month lengths, leap years, the offset's wall clock), not computed by the code under test.
 */
import { expect } from 'chai';
import {
  type Period,
  boundary,
  daysInMonth,
  lastReset,
  nextReset,
  parsePeriodStart,
} from '../../../src/peers/periods';

function start(text: string) {
  const parsed = parsePeriodStart(text);
  if (parsed === null) throw new Error(`not a period start: ${text}`);
  return parsed;
}
const iso = (ms: number): string => new Date(ms).toISOString();
const at = (text: string): number => Date.parse(text);
const boundaries = (text: string, period: Period, ks: number[]): string[] =>
  ks.map((k) => iso(boundary(start(text), period, k)));

describe('peers/periods: billing period arithmetic (pure, clock passed in)', () => {
  describe('parsePeriodStart', () => {
    it('takes ISO 8601 times with Z or a ±hh:mm offset, seconds and fractions optional', () => {
      expect(parsePeriodStart('2026-03-01T00:00Z')).to.deep.equal({
        at: at('2026-03-01T00:00:00Z'),
        offsetMinutes: 0,
      });
      expect(parsePeriodStart('2026-03-01T00:00:00+02:00')).to.deep.equal({
        at: at('2026-02-28T22:00:00Z'),
        offsetMinutes: 120,
      });
      expect(parsePeriodStart('2026-03-01T09:30:15.250-05:30')).to.deep.equal({
        at: at('2026-03-01T15:00:15.250Z'),
        offsetMinutes: -330,
      });
    });

    it('refuses a time without an offset, a date alone, and impossible dates or times', () => {
      for (const text of [
        '2026-03-01T00:00:00',
        '2026-03-01',
        '2026-02-29T00:00Z', // 2026 is no leap year
        '2026-04-31T00:00Z',
        '2026-13-01T00:00Z',
        '2026-03-01T24:00Z',
        '2026-03-01T00:00+24:00',
        'tomorrow',
      ]) {
        expect(parsePeriodStart(text), text).to.equal(null);
      }
      expect(parsePeriodStart('2024-02-29T00:00Z')).to.not.equal(null); // 2024 is
    });
  });

  it('knows the month lengths of leap and common years, century rules included', () => {
    expect(daysInMonth(2024, 1)).to.equal(29);
    expect(daysInMonth(2026, 1)).to.equal(28);
    expect(daysInMonth(1900, 1)).to.equal(28);
    expect(daysInMonth(2000, 1)).to.equal(29);
    expect(daysInMonth(2026, 3)).to.equal(30);
    expect(daysInMonth(2026, 11)).to.equal(31);
  });

  describe('monthly periods: calendar months on the offset wall clock, clamped to month ends', () => {
    it('a start on the 31st resets on each month’s last day when shorter, on the 31st when not', () => {
      expect(boundaries('2026-01-31T00:00Z', 'month', [1, 2, 3, 4, 5])).to.deep.equal([
        '2026-02-28T00:00:00.000Z',
        '2026-03-31T00:00:00.000Z',
        '2026-04-30T00:00:00.000Z',
        '2026-05-31T00:00:00.000Z',
        '2026-06-30T00:00:00.000Z',
      ]);
    });

    it('gives February its 29th in a leap year', () => {
      expect(boundaries('2024-01-30T12:00Z', 'month', [1, 2])).to.deep.equal([
        '2024-02-29T12:00:00.000Z',
        '2024-03-30T12:00:00.000Z',
      ]);
      expect(boundaries('2024-02-29T00:00Z', 'month', [1, 12])).to.deep.equal([
        '2024-03-29T00:00:00.000Z',
        '2025-02-28T00:00:00.000Z',
      ]);
    });

    it('crosses years, and counts on the offset’s wall clock (the 1st at midnight in -05:00)', () => {
      expect(boundaries('2026-11-15T08:00Z', 'month', [1, 2, 14])).to.deep.equal([
        '2026-12-15T08:00:00.000Z',
        '2027-01-15T08:00:00.000Z',
        '2028-01-15T08:00:00.000Z',
      ]);
      // Midnight of the 1st in New York winter time is 05:00 UTC, every month.
      expect(boundaries('2026-01-01T00:00-05:00', 'month', [1, 2])).to.deep.equal([
        '2026-02-01T05:00:00.000Z',
        '2026-03-01T05:00:00.000Z',
      ]);
      // The 31st at 00:30 in +02:00 is the 30th at 22:30 UTC; clamping is on the +02:00 calendar.
      expect(boundaries('2026-01-31T00:30+02:00', 'month', [1, 3])).to.deep.equal([
        '2026-02-27T22:30:00.000Z',
        '2026-04-29T22:30:00.000Z',
      ]);
    });
  });

  it('days are 24 hours and weeks 7 days from the start', () => {
    expect(boundaries('2026-03-28T23:00+01:00', 'day', [1, 2])).to.deep.equal([
      '2026-03-29T22:00:00.000Z',
      '2026-03-30T22:00:00.000Z',
    ]);
    expect(boundaries('2026-02-26T06:00Z', 'week', [1, 2])).to.deep.equal([
      '2026-03-05T06:00:00.000Z',
      '2026-03-12T06:00:00.000Z',
    ]);
  });

  describe('nextReset and lastReset at a given now', () => {
    const s = start('2026-01-31T00:00Z');

    it('before the first reset: next is the first boundary, none is due', () => {
      expect(iso(nextReset(s, 'month', at('2026-02-10T00:00Z')))).to.equal(
        '2026-02-28T00:00:00.000Z',
      );
      expect(lastReset(s, 'month', at('2026-02-10T00:00Z'))).to.equal(null);
      // A start in the future: the first reset is one period after it.
      expect(iso(nextReset(s, 'month', at('2026-01-01T00:00Z')))).to.equal(
        '2026-02-28T00:00:00.000Z',
      );
    });

    it('exactly at a boundary: that reset is due, the next is one period on', () => {
      const now = at('2026-02-28T00:00Z');
      expect(iso(lastReset(s, 'month', now)!)).to.equal('2026-02-28T00:00:00.000Z');
      expect(iso(nextReset(s, 'month', now))).to.equal('2026-03-31T00:00:00.000Z');
    });

    it('after downtime over several boundaries: the latest one due, the next after now', () => {
      const now = at('2026-05-15T12:00Z');
      expect(iso(lastReset(s, 'month', now)!)).to.equal('2026-04-30T00:00:00.000Z');
      expect(iso(nextReset(s, 'month', now))).to.equal('2026-05-31T00:00:00.000Z');
      const daily = start('2026-03-01T06:00Z');
      expect(iso(lastReset(daily, 'day', at('2026-03-05T05:59:59.999Z'))!)).to.equal(
        '2026-03-04T06:00:00.000Z',
      );
      expect(iso(nextReset(daily, 'day', at('2026-03-05T06:00Z')))).to.equal(
        '2026-03-06T06:00:00.000Z',
      );
    });
  });
});
