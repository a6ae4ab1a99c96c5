/**
 * What a `PATCH /api/peer/<key>/data-cap` asks for, resolved against the cap the kernel holds
 * (DESIGN §3 "Plans on a data cap"): a field left out keeps its current value (on a new cap, the
 * defaults: no period; a period's start defaults to the time of the request), `"period": null`
 * ends the period, usage is always kept (the kernel keeps it). Pure: the clock is passed in.
 */
import type { CapPlan, DataCap } from '../kernel/types';
import { ValidationError } from './errors';
import { PERIODS, type Period, parsePeriodStart } from './periods';

export interface DataCapChange {
  quotaBytes?: number;
  period?: Period | null;
  periodStart?: string;
}

export interface ResolvedCap {
  quotaBytes: number;
  /** undefined: the plan stays as the kernel holds it. */
  plan: CapPlan | null | undefined;
}

function invalid(field: string, message: string, sentence: string): ValidationError {
  return new ValidationError(sentence, [{ field: `/${field}`, message }]);
}

/** Checks what needs no kernel read: the period's name and the start's form. */
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
}

/** The cap and plan to set, from the change and the cap held now (null: none). */
export function resolveCapChange(
  existing: DataCap | null,
  change: DataCapChange,
  now: number,
): ResolvedCap {
  checkCapChange(change);
  const quotaBytes = change.quotaBytes ?? existing?.quotaBytes;
  if (quotaBytes === undefined) {
    const field =
      change.period != null || change.periodStart !== undefined ? 'period' : 'quotaBytes';
    throw invalid(
      field,
      'the peer has no data cap: quotaBytes is required',
      'the peer has no data cap; set quotaBytes to give it one (a period needs a cap)',
    );
  }
  if (change.period === undefined && change.periodStart === undefined) {
    return { quotaBytes, plan: undefined };
  }
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
    return { quotaBytes, plan: null };
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
  if (same) return { quotaBytes, plan: current };
  // A new plan counts from now: resets up to now are not owed; the next is periodStart + k.
  return {
    quotaBytes,
    plan: {
      period,
      periodStart,
      periodFrom: now,
      previousUsedBytes: current?.previousUsedBytes ?? null,
    },
  };
}
