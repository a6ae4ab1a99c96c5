/**
 * The freshness window of DESIGN §5. Callers share the read in flight; for `maxAgeMs` after a
 * read completed, callers get that completed value instead of a new read. `invalidate()` (called
 * after every change, successful or not) ends the window at once, and a caller arriving after it
 * never gets a read that started before it (a generation counter: a read belongs to the
 * generation it started in, and only a read of the current generation is shared or served).
 * With maxAgeMs 0 only reads in flight are shared. A failed read is never kept.
 */
export class FreshRead<T> {
  private generation = 0;
  private inFlight: { generation: number; promise: Promise<T> } | null = null;
  private completed: { generation: number; at: number; value: T } | null = null;

  /** `now` is a millisecond clock, injectable for tests. */
  constructor(
    private readonly read: () => Promise<T>,
    private readonly maxAgeMs: number,
    private readonly now: () => number,
  ) {}

  /**
   * What get() would answer at once, without a promise: the completed value while its window
   * lasts, else null (then get() reads or joins the read in flight). For a caller that can
   * answer synchronously when the value is at hand.
   */
  peek(): T | null {
    const done = this.fresh();
    return done === null ? null : done.value;
  }

  get(): Promise<T> {
    const done = this.fresh();
    if (done !== null) return Promise.resolve(done.value);
    const current = this.inFlight;
    if (current !== null && current.generation === this.generation) return current.promise;
    const entry = { generation: this.generation, promise: this.read() };
    this.inFlight = entry;
    entry.promise.then(
      (value) => {
        if (this.inFlight === entry) this.inFlight = null;
        // Kept only if no change completed meanwhile; a newer kept value is not replaced.
        if (entry.generation === this.generation && this.maxAgeMs > 0) {
          this.completed = { generation: entry.generation, at: this.now(), value };
        }
      },
      () => {
        if (this.inFlight === entry) this.inFlight = null;
      },
    );
    return entry.promise;
  }

  /** The completed read while its window lasts, else null (an expired one is let go). */
  private fresh(): { value: T } | null {
    const done = this.completed;
    if (done === null) return null;
    if (done.generation === this.generation && this.now() - done.at < this.maxAgeMs) return done;
    // Expired: let it (and the bodies memoized on it) go before the next read is held too.
    this.completed = null;
    return null;
  }

  /** Call after every change to what `read` reads: ends the window and the sharing at once. */
  invalidate(): void {
    this.generation += 1;
    this.completed = null;
  }
}
