/**
 * The benchmarks' shared arithmetic: one median and one way to time a piece of work, so that
 * every bench's "median of N" means the same thing.
 */

/** The middle value of `values` (the mean of the two middle ones for an even count); NaN for none. */
export function median(values: readonly number[]): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
}

/** Milliseconds from calling `work` to its settling (performance.now()). */
export async function time(work: () => unknown): Promise<number> {
  const start = performance.now();
  await work();
  return performance.now() - start;
}

/** The median of `runs` timings of `work`, one run after the other. */
export async function timed(runs: number, work: () => unknown): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < runs; i++) times.push(await time(work));
  return median(times);
}
