/**
 * The freshness window of DESIGN §5. Callers share the read in flight; for `maxAgeMs` after a
 * read completed, callers get that completed value instead of a new read. `invalidate()` (called
 * after every change, successful or not) ends the window at once, and a caller arriving after it
 * never gets a read that started before it (a generation counter: a read belongs to the
 * generation it started in, and only a read of the current generation is shared or served).
 * With maxAgeMs 0 only reads in flight are shared. A failed read is never kept.
 *
 * Read ahead: a caller served in the last stretch of the window, as long as the last read took
 * (at most half the window), starts the next read without waiting for it. Under steady polling
 * the next value is then ready about when the current one expires, so polls do not all stop
 * at the end of every window to wait for a read, every connection at once. Nothing served is
 * older than maxAgeMs, and reads still come about once a window.
 *
 * Riders: a caller that must never cost a read of its own (usage checkpoints) takes what is
 * `atHand()` (the value inside its window, or the read in flight of this generation), or waits
 * for the `next()` read that someone else starts; `sinceLastRead()` says whether anyone reads.
 */
export class FreshRead<T> {
  private generation = 0;
  private inFlight: { generation: number; promise: Promise<T> } | null = null;
  private completed: { generation: number; at: number; value: T } | null = null;
  /** How long the last kept read took, on the `now` clock: the read-ahead lead. */
  private lastReadMs = 0;
  /** When the last successful read of any generation completed, on the `now` clock. */
  private lastDoneAt: number | null = null;
  /** Callers of next(), handed the next read that starts. */
  private waiting: Array<(read: Promise<T>) => void> = [];

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

  /**
   * What a caller that must not cost a read of its own can have: the completed value while its
   * window lasts, else the read in flight of this generation, else null. Never starts a read.
   */
  atHand(): Promise<T> | null {
    const done = this.completed;
    if (done !== null && this.windowAge(done) !== null) return Promise.resolve(done.value);
    const current = this.inFlight;
    return current !== null && current.generation === this.generation ? current.promise : null;
  }

  /** The next read to start (whoever starts it), never one of its own. */
  next(): Promise<T> {
    return new Promise<T>((resolve) => this.waiting.push(resolve));
  }

  /** Milliseconds since a read last succeeded (of any generation); null before the first. */
  sinceLastRead(): number | null {
    return this.lastDoneAt === null ? null : this.now() - this.lastDoneAt;
  }

  get(): Promise<T> {
    const done = this.fresh();
    return done === null ? this.join() : Promise.resolve(done.value);
  }

  /** Call after every change to what `read` reads: ends the window and the sharing at once. */
  invalidate(): void {
    this.generation += 1;
    this.completed = null;
  }

  /** The read in flight of this generation, or a new one. */
  private join(): Promise<T> {
    const current = this.inFlight;
    if (current !== null && current.generation === this.generation) return current.promise;
    const started = this.now();
    const entry = { generation: this.generation, promise: this.read() };
    this.inFlight = entry;
    const waiting = this.waiting;
    this.waiting = [];
    for (const resolve of waiting) resolve(entry.promise);
    // This handler is also what handles a failed read ahead, which nobody awaits.
    entry.promise.then(
      (value) => {
        if (this.inFlight === entry) this.inFlight = null;
        this.lastDoneAt = this.now();
        // Kept only if no change completed meanwhile. Reads of one generation run one at a
        // time, so a kept value is never replaced by an older one.
        if (entry.generation === this.generation && this.maxAgeMs > 0) {
          const at = this.now();
          this.lastReadMs = at - started;
          this.completed = { generation: entry.generation, at, value };
        }
      },
      () => {
        if (this.inFlight === entry) this.inFlight = null;
      },
    );
    return entry.promise;
  }

  /**
   * The completed read while its window lasts, else null (an expired one is let go); near the
   * window's end it also starts the read ahead.
   */
  private fresh(): { value: T } | null {
    const done = this.completed;
    if (done === null) return null;
    const age = this.windowAge(done);
    if (age !== null) {
      if (age >= this.maxAgeMs - Math.min(this.lastReadMs, this.maxAgeMs / 2)) void this.join();
      return done;
    }
    // Expired: let it (and the bodies memoized on it) go before the next read is held too.
    this.completed = null;
    return null;
  }

  /** How old a completed read is while its window lasts (this generation's); null once not. */
  private windowAge(done: { generation: number; at: number }): number | null {
    const age = this.now() - done.at;
    return done.generation === this.generation && age < this.maxAgeMs ? age : null;
  }
}
