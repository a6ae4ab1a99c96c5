/**
 * Which counted bytes a usage checkpoint may save. A read of the caps sees the kernel at some
 * instant while it runs; a change to a peer's cap (a new or changed cap, its removal, a reset by
 * the API or by its billing period, the peer's deletion) writes its journal record and changes
 * the kernel, in one order or the other, around that instant. A count read before or during such
 * a change and saved after the change's record would put back what the change undid: a reset's
 * zero overwritten by the count before it, and the next reboot would restore the old usage.
 *
 * So every read of the caps takes a `token()` as it starts, and every change to a peer's cap runs
 * inside `around(publicKey, ...)`. A peer's count from a read is `stale` while a change of that
 * peer runs, and when one ended after the read's token: such a count is not saved (the next read
 * has it). A change that ended before the read began is in what the read saw. The check is made
 * in the same turn of the event loop as the journal append it guards, so no change starts in
 * between (one that starts later appends its own record after the checkpoint's, and wins).
 *
 * Invariants: tokens only grow; `forget(token)` drops only what no read at or after `token` can
 * be stale for, so memory stays bounded by the changes made since the oldest read still used.
 * No I/O and no clock: the order is a counter.
 */
export class UsageFence {
  private clock = 0;
  /** Public key → changes of its cap now running (a key may have more than one queued). */
  private readonly running = new Map<string, number>();
  /** Public key → the clock when its last change ended. */
  private readonly ended = new Map<string, number>();

  /** Taken when a read of the caps starts. */
  token(): number {
    this.clock += 1;
    return this.clock;
  }

  /** Runs a change of the peer's cap; counts read before it ends are stale for that peer. */
  async around<T>(publicKey: string, change: () => Promise<T>): Promise<T> {
    this.running.set(publicKey, (this.running.get(publicKey) ?? 0) + 1);
    try {
      return await change();
    } finally {
      const left = (this.running.get(publicKey) ?? 1) - 1;
      if (left === 0) this.running.delete(publicKey);
      else this.running.set(publicKey, left);
      this.clock += 1;
      this.ended.set(publicKey, this.clock);
    }
  }

  /** Whether the peer's count from the read that took `token` must not be saved. */
  stale(publicKey: string, token: number): boolean {
    return this.running.has(publicKey) || (this.ended.get(publicKey) ?? 0) > token;
  }

  /** Once no read older than `token` will be checked again: forgets changes that ended before it. */
  forget(token: number): void {
    for (const [publicKey, at] of this.ended) if (at < token) this.ended.delete(publicKey);
  }
}
