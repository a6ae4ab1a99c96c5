/**
 * Shares one read in flight between concurrent callers, without ever serving data older than
 * the caller: a caller joins the read in flight only when no change has completed since that
 * read started (`invalidate()` marks a completed change). Nothing is kept once a read settles.
 */
export class SingleFlight<T> {
  private generation = 0;
  private inFlight: { generation: number; promise: Promise<T> } | null = null;

  constructor(private readonly read: () => Promise<T>) {}

  get(): Promise<T> {
    const current = this.inFlight;
    if (current !== null && current.generation === this.generation) return current.promise;
    const entry = { generation: this.generation, promise: this.read() };
    this.inFlight = entry;
    const clear = (): void => {
      if (this.inFlight === entry) this.inFlight = null;
    };
    entry.promise.then(clear, clear);
    return entry.promise;
  }

  /** Call after every change to what `read` reads. */
  invalidate(): void {
    this.generation += 1;
  }
}
