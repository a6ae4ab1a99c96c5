/**
 * The oracle of one fuzz case. The input is placed inside a larger buffer between canary bytes
 * and decoded twice, once with canaries of 0x00 and once of 0xA5:
 * - only the decoder's typed errors may come out, never another exception;
 * - the outcome (value, or error class and message) must be the same both times: a decoder that
 *   reads past its input sees different canaries and answers differently (a string running into
 *   the canary, a length check passing on one, a number taking a canary byte...);
 * - a decoded Buffer that is a view of the input must lie within the input's range;
 * - a case must end within CASE_LIMIT_MS (async decoders are raced against it; a synchronous
 *   loop that never ends is caught by mocha's timeout).
 */
import { isDeepStrictEqual } from 'node:util';
import type { DecoderEntry } from './decoders';

export const CASE_LIMIT_MS = 2000;
const CANARY_SIZE = 64;
const CANARIES = [0x00, 0xa5];

export type Verdict =
  { kind: 'success' } | { kind: 'typed'; error: Error } | { kind: 'unexpected'; reason: string };

type Outcome = { ok: true; value: unknown } | { ok: false; error: unknown };

class TimedOut extends Error {}

function withLimit<T>(work: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const limit = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new TimedOut()), CASE_LIMIT_MS);
  });
  return Promise.race([work, limit]).finally(() => clearTimeout(timer));
}

/**
 * What is wrong in a decoded value: Buffers that are views of `arena` outside [from, to) (a read
 * past the input), and values no caller can use (an Invalid Date).
 */
function problemsIn(value: unknown, arena: ArrayBufferLike, from: number, to: number): string[] {
  const problems: string[] = [];
  const seen = new Set<unknown>();
  const visit = (v: unknown, path: string): void => {
    if (v === null || typeof v !== 'object' || seen.has(v)) return;
    seen.add(v);
    if (v instanceof Date) {
      // An Invalid Date is no value: toISOString() throws on it wherever it is shown.
      if (Number.isNaN(v.getTime())) problems.push(`${path}: Invalid Date`);
      return;
    }
    if (Buffer.isBuffer(v)) {
      if (v.buffer === arena && (v.byteOffset < from || v.byteOffset + v.length > to)) {
        problems.push(
          `${path}: view [${v.byteOffset}, ${v.byteOffset + v.length}) of [${from}, ${to})`,
        );
      }
      return;
    }
    if (v instanceof Map) {
      for (const [k, item] of v) visit(item, `${path}.${String(k)}`);
      return;
    }
    for (const [k, item] of Object.entries(v)) visit(item, `${path}.${k}`);
  };
  visit(value, 'value');
  return problems;
}

async function decodeIn(
  entry: DecoderEntry,
  input: Buffer,
  canary: number,
): Promise<{ outcome: Outcome; ms: number; outside: string[] }> {
  const arena = Buffer.alloc(input.length + 2 * CANARY_SIZE, canary);
  input.copy(arena, CANARY_SIZE);
  const view = arena.subarray(CANARY_SIZE, CANARY_SIZE + input.length);
  const started = performance.now();
  let outcome: Outcome;
  try {
    outcome = {
      ok: true,
      value: await withLimit(Promise.resolve().then(() => entry.decode(view))),
    };
  } catch (error) {
    outcome = { ok: false, error };
  }
  const ms = performance.now() - started;
  const outside = outcome.ok
    ? problemsIn(outcome.value, arena.buffer, view.byteOffset, view.byteOffset + view.length)
    : [];
  return { outcome, ms, outside };
}

function describe(outcome: Outcome): string {
  if (outcome.ok) return 'a value';
  const error = outcome.error;
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}

export async function judge(entry: DecoderEntry, input: Buffer): Promise<Verdict> {
  const runs = [];
  for (const canary of CANARIES) runs.push(await decodeIn(entry, input, canary));
  const [first, second] = runs;
  for (const run of runs) {
    if (run.ms > CASE_LIMIT_MS || (!run.outcome.ok && run.outcome.error instanceof TimedOut)) {
      return {
        kind: 'unexpected',
        reason: `took ${Math.round(run.ms)} ms (limit ${CASE_LIMIT_MS})`,
      };
    }
    if (run.outside.length > 0) {
      return { kind: 'unexpected', reason: `bad value: ${run.outside.join('; ')}` };
    }
  }
  const a = first.outcome;
  const b = second.outcome;
  if (a.ok !== b.ok || (a.ok && b.ok && !isDeepStrictEqual(a.value, b.value))) {
    return {
      kind: 'unexpected',
      reason: `result depends on the bytes around the input (read past it): ${describe(a)} / ${describe(b)}`,
    };
  }
  if (!a.ok && !b.ok && describe(a) !== describe(b)) {
    return {
      kind: 'unexpected',
      reason: `error depends on the bytes around the input: ${describe(a)} / ${describe(b)}`,
    };
  }
  if (a.ok) return { kind: 'success' };
  const error = a.error;
  if (error instanceof Error && entry.typedErrors.some((type) => error instanceof type)) {
    return { kind: 'typed', error };
  }
  return {
    kind: 'unexpected',
    reason: `threw ${describe(a)}${error instanceof Error && error.stack ? `\n${error.stack}` : ''}`,
  };
}
