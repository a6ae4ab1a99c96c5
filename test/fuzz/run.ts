/**
 * Runs the fuzz cases of the decoder table with fast-check: per decoder, cases drawn from its
 * seeds (mutated) and random bytes, judged by the oracle. Each decoder gets its own fast-check
 * seed derived from the run's seed and its name, so adding a decoder does not change the cases
 * of the others, and `--seed S --only NAME` replays one decoder's run exactly.
 */
import fc from 'fast-check';
import { Corpus } from './corpus';
import { type DecoderEntry, decoders } from './decoders';
import { type FuzzCase, fuzzCase, materialize } from './mutate';
import { judge } from './oracle';

export interface DecoderStats {
  name: string;
  seeds: number;
  cases: number;
  typed: number;
  success: number;
  unexpected: number;
  /** The first unexpected cases: what went wrong and the input. */
  failures: Array<{ reason: string; fuzzCase: FuzzCase; input: Buffer }>;
}

export interface RunOptions {
  /** fast-check seed of the run. */
  seed: number;
  /** Cases in total, shared evenly by the decoders. */
  cases: number;
  /** Only the decoders whose name contains this. */
  only?: string | undefined;
  /** Called after each decoder. */
  progress?: (stats: DecoderStats) => void;
}

/** A 32-bit seed per decoder: FNV-1a of its name mixed with the run's seed. */
export function decoderSeed(runSeed: number, name: string): number {
  let hash = 0x811c9dc5;
  for (const char of `${runSeed}:${name}`) {
    hash ^= char.charCodeAt(0);
    hash = Math.imul(hash, 0x01000193);
  }
  return hash | 0;
}

export function selectDecoders(only?: string): DecoderEntry[] {
  const all = decoders(Corpus.load());
  return only ? all.filter((entry) => entry.name.includes(only)) : all;
}

/** Runs `cases` cases of one decoder; never throws for a failing case, it counts it. */
export async function fuzzDecoder(
  entry: DecoderEntry,
  runSeed: number,
  cases: number,
): Promise<DecoderStats> {
  const stats: DecoderStats = {
    name: entry.name,
    seeds: entry.seeds.length,
    cases: 0,
    typed: 0,
    success: 0,
    unexpected: 0,
    failures: [],
  };
  await fc.assert(
    fc.asyncProperty(fuzzCase(entry.seeds.length), async (fuzzCaseValue) => {
      const input = materialize(fuzzCaseValue, entry.seeds, entry.layout);
      const verdict = await judge(entry, input);
      stats.cases++;
      if (verdict.kind === 'unexpected') {
        stats.unexpected++;
        if (stats.failures.length < 3) {
          stats.failures.push({ reason: verdict.reason, fuzzCase: fuzzCaseValue, input });
        }
      } else {
        stats[verdict.kind]++;
      }
      return true;
    }),
    { seed: decoderSeed(runSeed, entry.name), numRuns: cases, endOnFailure: true },
  );
  return stats;
}

export async function runFuzz(options: RunOptions): Promise<DecoderStats[]> {
  const entries = selectDecoders(options.only);
  // The cases shared out exactly; fast-check draws a decoder's cases in the same order for any
  // count, so a replay with --only repeats the first cases of the full run.
  const base = Math.floor(options.cases / Math.max(1, entries.length));
  const extra = options.cases % Math.max(1, entries.length);
  const results: DecoderStats[] = [];
  for (const [index, entry] of entries.entries()) {
    const count = base + (index < extra ? 1 : 0);
    if (count === 0) continue;
    const stats = await fuzzDecoder(entry, options.seed, count);
    results.push(stats);
    options.progress?.(stats);
  }
  return results;
}
