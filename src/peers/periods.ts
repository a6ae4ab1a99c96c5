/**
 * Billing periods of a capped plan (issue 19, DESIGN §3 "Plans on a data cap"), as pure
 * arithmetic with the clock passed in (as src/peers/fresh-read.ts takes its clock): usage resets
 * at periodStart + k periods, k = 1, 2, ... A period start is a time with a UTC offset, and the
 * periods are counted on the wall clock of that offset: a day is 24 hours, a week 7 days, a month
 * a calendar month of that wall clock whose day is the start's, clamped to the month's last day
 * (a start on the 31st resets on the 30th of April and the 28th or 29th of February, and on the
 * 31st again in May). The offset is fixed as given (no time-zone rules): `2026-03-01T00:00-05:00`
 * resets at 05:00 UTC on the 1st of every month. Nothing here reads a clock or keeps state.
 */

export const PERIODS = ['day', 'week', 'month'] as const;
export type Period = (typeof PERIODS)[number];

/** A period start: the instant, and the offset of the wall clock periods are counted on. */
export interface PeriodStart {
  /** Milliseconds since the epoch. */
  readonly at: number;
  /** Minutes east of UTC (+02:00 is 120, Z is 0). */
  readonly offsetMinutes: number;
}

const MINUTE = 60_000;
const DAY = 86_400_000;

/** ISO 8601 date and time with seconds and fractions optional and an offset required. */
const ISO_WITH_OFFSET =
  /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?(Z|[+-]\d{2}:\d{2})$/;

/**
 * Parses an ISO 8601 time with an offset (`Z` or `±hh:mm`); null for anything else, including a
 * time without an offset (which would mean the host's zone) and impossible dates (2026-02-30).
 */
export function parsePeriodStart(text: string): PeriodStart | null {
  const match = ISO_WITH_OFFSET.exec(text);
  if (!match) return null;
  const [, y, mo, d, h, mi, s = '0', fraction = '', zone] = match;
  const year = Number(y);
  const month = Number(mo) - 1;
  const day = Number(d);
  if (month > 11 || day < 1 || day > daysInMonth(year, month)) return null;
  if (Number(h) > 23 || Number(mi) > 59 || Number(s) > 59) return null;
  let offsetMinutes = 0;
  if (zone !== 'Z') {
    const hours = Number(zone!.slice(1, 3));
    const minutes = Number(zone!.slice(4, 6));
    if (hours > 23 || minutes > 59) return null;
    offsetMinutes = (zone![0] === '-' ? -1 : 1) * (hours * 60 + minutes);
  }
  const ms = Number(fraction.padEnd(3, '0').slice(0, 3));
  const wall = Date.UTC(year, month, day, Number(h), Number(mi), Number(s), ms);
  return { at: wall - offsetMinutes * MINUTE, offsetMinutes };
}

/** Days in a month of a (proleptic Gregorian) year; `month` 0-11. */
export function daysInMonth(year: number, month: number): number {
  return new Date(Date.UTC(year, month + 1, 0)).getUTCDate();
}

/** The instant of periodStart + k periods (k may be 0 or negative). */
export function boundary(start: PeriodStart, period: Period, k: number): number {
  if (period === 'day') return start.at + k * DAY;
  if (period === 'week') return start.at + k * 7 * DAY;
  const offset = start.offsetMinutes * MINUTE;
  const wall = new Date(start.at + offset); // the start on its own wall clock, read as UTC
  const months = wall.getUTCMonth() + k;
  const year = wall.getUTCFullYear() + Math.floor(months / 12);
  const month = ((months % 12) + 12) % 12;
  const day = Math.min(wall.getUTCDate(), daysInMonth(year, month));
  const at = Date.UTC(
    year,
    month,
    day,
    wall.getUTCHours(),
    wall.getUTCMinutes(),
    wall.getUTCSeconds(),
    wall.getUTCMilliseconds(),
  );
  return at - offset;
}

/** The largest k with boundary(k) <= now (negative before the start). */
function periodsElapsed(start: PeriodStart, period: Period, now: number): number {
  let k: number;
  if (period === 'day' || period === 'week') {
    k = Math.floor((now - start.at) / (period === 'day' ? DAY : 7 * DAY));
  } else {
    const offset = start.offsetMinutes * MINUTE;
    const from = new Date(start.at + offset);
    const to = new Date(now + offset);
    k =
      (to.getUTCFullYear() - from.getUTCFullYear()) * 12 + (to.getUTCMonth() - from.getUTCMonth());
  }
  // The estimate is off by at most one either way (a clamped day, a time of day later than now).
  while (boundary(start, period, k) > now) k--;
  while (boundary(start, period, k + 1) <= now) k++;
  return k;
}

/** When usage next resets: the first periodStart + k periods (k >= 1) after `now`. */
export function nextReset(start: PeriodStart, period: Period, now: number): number {
  return boundary(start, period, Math.max(1, periodsElapsed(start, period, now) + 1));
}

/**
 * The last reset that fell due at or before `now` (periodStart + k periods, k >= 1), or null
 * when none has yet: what a start must make if it was not made (the daemon was down then).
 */
export function lastReset(start: PeriodStart, period: Period, now: number): number | null {
  const k = periodsElapsed(start, period, now);
  return k >= 1 ? boundary(start, period, k) : null;
}

/**
 * lastReset and nextReset at one `now` from one count of the periods elapsed: what the period
 * scheduler needs of every plan on each wake, in one pass.
 */
export function resetsAround(
  start: PeriodStart,
  period: Period,
  now: number,
): { last: number | null; next: number } {
  const k = periodsElapsed(start, period, now);
  return {
    last: k >= 1 ? boundary(start, period, k) : null,
    next: boundary(start, period, Math.max(1, k + 1)),
  };
}

/** The start as ISO 8601 on its own wall clock with its offset (`2026-03-01T00:00:00.000-05:00`). */
export function formatPeriodStart(start: PeriodStart): string {
  const wall = new Date(start.at + start.offsetMinutes * MINUTE).toISOString().slice(0, -1);
  if (start.offsetMinutes === 0) return `${wall}Z`;
  const sign = start.offsetMinutes < 0 ? '-' : '+';
  const minutes = Math.abs(start.offsetMinutes);
  const hh = String(Math.floor(minutes / 60)).padStart(2, '0');
  const mm = String(minutes % 60).padStart(2, '0');
  return `${wall}${sign}${hh}:${mm}`;
}

/** The JSON Schema pattern of a period start: parsePeriodStart's grammar. */
export const PERIOD_START_PATTERN = ISO_WITH_OFFSET.source;
