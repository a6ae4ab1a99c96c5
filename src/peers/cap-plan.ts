/**
 * What a `PATCH /api/peer/<key>/data-cap` asks for, resolved against the cap the kernel holds
 * (DESIGN §3 "Plans on a data cap"): a field left out keeps its current value (on a new cap, the
 * defaults: no period, a cap that blocks; a period's start defaults to the time of the
 * request), `"period": null` ends the period, usage is always kept (the kernel keeps it). Pure:
 * the clock is passed in. And a cap as the daemon keeps it (journal, last seen).
 */
import type { AfterCap, CapPlan, DataCap } from '../kernel/types';
import { ValidationError } from './errors';
import { PERIODS, type Period, parsePeriodStart } from './periods';

/** throttleBytesPerSecond: 1,000 to 10^12 (DESIGN §3), the range of a speed limit. */
export const THROTTLE_MIN = 1_000;
export const THROTTLE_MAX = 1_000_000_000_000;

export interface DataCapChange {
  quotaBytes?: number;
  period?: Period | null;
  periodStart?: string;
  afterCap?: 'block' | 'throttle';
  throttleBytesPerSecond?: number;
}

export interface ResolvedCap {
  quotaBytes: number;
  /** undefined: the plan stays as the kernel holds it. */
  plan: CapPlan | null | undefined;
  /** undefined: what the cap does over it stays as the kernel holds it. */
  afterCap: AfterCap | undefined;
}

function invalid(field: string, message: string, sentence: string): ValidationError {
  return new ValidationError(sentence, [{ field: `/${field}`, message }]);
}

export function checkInteger(value: number, min: number, max: number, field: string): void {
  if (!Number.isSafeInteger(value) || value < min || value > max) {
    throw invalid(
      field,
      `must be an integer from ${min} to ${max}`,
      `${field} must be an integer from ${min} to ${max}`,
    );
  }
}

/**
 * Checks what needs no kernel read: the period's name, the start's form, the rate's range, and
 * a rate with afterCap "block".
 */
export function checkCapChange(change: DataCapChange): void {
  if (change.period != null && !(PERIODS as readonly string[]).includes(change.period)) {
    throw invalid('period', `must be one of ${PERIODS.join(', ')} or null`, 'unknown period');
  }
  if (change.periodStart !== undefined && parsePeriodStart(change.periodStart) === null) {
    throw invalid(
      'periodStart',
      'must be an ISO 8601 date and time with an offset (Z or ±hh:mm)',
      'periodStart must be an ISO 8601 time with an offset, e.g. 2026-03-01T00:00:00+01:00',
    );
  }
  if (change.afterCap !== undefined && !['block', 'throttle'].includes(change.afterCap)) {
    throw invalid('afterCap', 'must be block or throttle', 'afterCap must be block or throttle');
  }
  if (change.throttleBytesPerSecond !== undefined) {
    checkInteger(
      change.throttleBytesPerSecond,
      THROTTLE_MIN,
      THROTTLE_MAX,
      'throttleBytesPerSecond',
    );
    if (change.afterCap === 'block') throw rateWithoutThrottle();
  }
}

function rateWithoutThrottle(): ValidationError {
  return invalid(
    'throttleBytesPerSecond',
    'goes only with afterCap "throttle"',
    'throttleBytesPerSecond goes only with afterCap "throttle"',
  );
}

/** The cap, plan and afterCap to set, from the change and the cap held now (null: none). */
export function resolveCapChange(
  existing: DataCap | null,
  change: DataCapChange,
  now: number,
): ResolvedCap {
  checkCapChange(change);
  const quotaBytes = change.quotaBytes ?? existing?.quotaBytes;
  if (quotaBytes === undefined) {
    const field =
      change.period != null || change.periodStart !== undefined
        ? 'period'
        : change.afterCap !== undefined || change.throttleBytesPerSecond !== undefined
          ? 'afterCap'
          : 'quotaBytes';
    throw invalid(
      field,
      'the peer has no data cap: quotaBytes is required',
      'the peer has no data cap; set quotaBytes to give it one (a period or afterCap needs a cap)',
    );
  }
  return {
    quotaBytes,
    afterCap: resolveAfterCap(existing, change),
    plan: resolvePlan(existing, change, now),
  };
}

/**
 * What the cap does over it: a field left out keeps its value (a rate alone changes the rate of
 * a cap that throttles); a throttle needs a rate, and a rate goes only with a throttle.
 */
function resolveAfterCap(existing: DataCap | null, change: DataCapChange): AfterCap | undefined {
  const { afterCap, throttleBytesPerSecond: rate } = change;
  if (afterCap === undefined && rate === undefined) return undefined;
  if (afterCap === 'block') return { throttleBytesPerSecond: null };
  const current = existing?.throttleBytesPerSecond ?? null;
  if (afterCap === undefined && current === null) throw rateWithoutThrottle();
  const wanted = rate ?? current;
  if (wanted === null) {
    throw invalid(
      'throttleBytesPerSecond',
      'is required with afterCap "throttle"',
      'afterCap "throttle" needs throttleBytesPerSecond',
    );
  }
  return { throttleBytesPerSecond: wanted };
}

function resolvePlan(
  existing: DataCap | null,
  change: DataCapChange,
  now: number,
): CapPlan | null | undefined {
  if (change.period === undefined && change.periodStart === undefined) return undefined;
  const current = existing?.plan ?? null;
  const period = change.period === undefined ? (current?.period ?? null) : change.period;
  if (period === null) {
    if (change.periodStart !== undefined) {
      throw invalid(
        'periodStart',
        'needs a period',
        'periodStart needs a period (day, week or month)',
      );
    }
    return null;
  }
  const periodStart =
    change.periodStart !== undefined
      ? parsePeriodStart(change.periodStart)!
      : (current?.periodStart ?? { at: now, offsetMinutes: 0 });
  const same =
    current !== null &&
    current.period === period &&
    current.periodStart.at === periodStart.at &&
    current.periodStart.offsetMinutes === periodStart.offsetMinutes;
  if (same) return current;
  // A new plan counts from now: resets up to now are not owed; the next is periodStart + k.
  return {
    period,
    periodStart,
    periodFrom: now,
    previousUsedBytes: current?.previousUsedBytes ?? null,
  };
}

/**
 * A cap as the daemon keeps it (journal, last seen): the plan only where there is one, the
 * rate only where it throttles, so caps without either look as they always did.
 */
export function capToKeep(cap: DataCap): DataCap & { throttleBytesPerSecond?: number } {
  const { quotaBytes, usedBytes } = cap;
  const rate = cap.throttleBytesPerSecond ?? null;
  return {
    quotaBytes,
    usedBytes,
    ...(cap.plan ? { plan: cap.plan } : {}),
    ...(rate === null ? {} : { throttleBytesPerSecond: rate }),
  };
}
