/**
 * The one serialization primitive of the daemon: a FIFO queue that runs its tasks one at a
 * time, in the order they were queued, whether earlier ones succeeded or failed.
 *
 * It is used twice, for two different things:
 * - each NetlinkSocket owns one as its lock (mdlayher/netlink's Conn has one mutex per socket):
 *   the kernel allows one dump per socket and a dump advances only as it is read;
 * - the kernel layer owns one change queue (`Kernel.changes`, src/kernel/index.ts) through which
 *   every change to the kernel runs, the service's included: two ensure()s must not both build a
 *   u32 table, and two creates must not pick one address.
 *
 * Re-entrant: a task that queues more work on the same queue (a service change calling the
 * shaper, whose methods also run on the change queue so that it is safe on its own) runs it
 * at once instead of waiting for itself. The running task is tracked with AsyncLocalStorage,
 * so only work started from inside a task counts as re-entrant.
 */
import { AsyncLocalStorage } from 'node:async_hooks';

/**
 * The queues whose task the current async context runs inside. One storage for every queue:
 * Node never frees an AsyncLocalStorage that was used, and each live one adds work to every
 * async operation, so one per queue (per socket) made a process that opens many sockets slower
 * with each (the decoder fuzzer, opening sockets per case, ran quadratically).
 */
const held = new AsyncLocalStorage<ReadonlySet<SerialQueue>>();

/**
 * Tasks running now, on every queue. When none is, the storage is disabled: a used
 * AsyncLocalStorage keeps Node's async hooks on, and then every async resource of the process
 * (each HTTP request's ticks and socket writes, every promise) runs an init hook to carry the
 * store. A poll answered from the freshness window runs no task, and with the hooks on it paid
 * for them (about 2% of the daemon's CPU per 1,000-peer poll in a VM profile). The next task's
 * run() turns the storage on again.
 */
let running = 0;

function finished(): void {
  running -= 1;
  if (running === 0) held.disable();
}

export class SerialQueue {
  private tail: Promise<unknown> = Promise.resolve();

  run<T>(task: () => Promise<T>): Promise<T> {
    const outer = held.getStore();
    if (outer?.has(this)) return task();
    const inside = new Set(outer ?? []).add(this);
    const result = this.tail.then(() => {
      running += 1;
      let done: Promise<T>;
      try {
        done = held.run(inside, task);
      } catch (error) {
        finished();
        throw error;
      }
      return done.finally(finished);
    });
    this.tail = result.then(
      () => undefined,
      () => undefined,
    );
    return result;
  }
}
