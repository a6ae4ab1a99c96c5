import { expect } from 'chai';
import { FreshRead } from '../../../src/peers/fresh-read';

const tick = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

describe('peers/fresh-read: the freshness window (DESIGN §5)', () => {
  /** Reads that finish only when released, numbered 1, 2, …; a clock the test moves. */
  function counter(maxAgeMs: number) {
    let reads = 0;
    let clock = 1_000;
    const waiting: Array<() => void> = [];
    const flight = new FreshRead(
      async () => {
        reads += 1;
        const n = reads;
        await new Promise<void>((resolve) => waiting.push(resolve));
        return n;
      },
      maxAgeMs,
      () => clock,
    );
    /** Lets the oldest read in flight finish. */
    const release = (): void => waiting.shift()?.();
    const advance = (ms: number): void => {
      clock += ms;
    };
    return { flight, reads: () => reads, release, advance };
  }

  /** Starts a read and completes it. */
  async function completed(c: ReturnType<typeof counter>): Promise<number> {
    const value = c.flight.get();
    await tick();
    c.release();
    return value;
  }

  it('shares the read in flight between callers', async () => {
    const c = counter(1000);
    const a = c.flight.get();
    const b = c.flight.get();
    await tick();
    c.release();
    expect(await a).to.equal(1);
    expect(await b).to.equal(1);
    expect(c.reads()).to.equal(1);
  });

  it('serves the completed read within the window, and reads afresh once it is over', async () => {
    const c = counter(1000);
    expect(await completed(c)).to.equal(1);
    c.advance(999);
    expect(await c.flight.get()).to.equal(1);
    expect(c.reads()).to.equal(1);
    c.advance(1); // 1000 ms after completion: the window is over
    expect(await completed(c)).to.equal(2);
    expect(c.reads()).to.equal(2);
  });

  it('with a window of 0 shares only the read in flight', async () => {
    const c = counter(0);
    expect(await completed(c)).to.equal(1);
    expect(await completed(c)).to.equal(2);
  });

  it('ends the window at once on invalidate()', async () => {
    const c = counter(60_000);
    expect(await completed(c)).to.equal(1);
    c.flight.invalidate();
    expect(await completed(c)).to.equal(2);
    expect(await c.flight.get()).to.equal(2); // the new read opens a new window
  });

  it('does not let a caller after a change join a read started before it, nor keep that read', async () => {
    const c = counter(60_000);
    const before = c.flight.get();
    await tick();
    c.flight.invalidate();
    const after = c.flight.get();
    await tick();
    expect(c.reads()).to.equal(2);
    c.release();
    expect(await before).to.equal(1);
    // The stale read completed after the change: it must not open a window.
    const third = c.flight.get();
    c.release();
    expect(await after).to.equal(2);
    expect(await third).to.equal(2);
    expect(await c.flight.get()).to.equal(2);
    expect(c.reads()).to.equal(2);
  });

  it('peeks at exactly what get() would answer at once: the value inside its window, else null', async () => {
    const c = counter(1000);
    expect(c.flight.peek()).to.equal(null); // nothing read yet
    const first = c.flight.get();
    expect(c.flight.peek()).to.equal(null); // in flight: get() would wait
    await tick();
    c.release();
    expect(await first).to.equal(1);
    expect(c.flight.peek()).to.equal(1);
    c.advance(999);
    expect(c.flight.peek()).to.equal(1);
    expect(await c.flight.get()).to.equal(1);
    c.advance(1); // the window is over: get() would read again
    expect(c.flight.peek()).to.equal(null);
    expect(await completed(c)).to.equal(2);
    expect(c.flight.peek()).to.equal(2);
    c.flight.invalidate(); // a change ends it at once
    expect(c.flight.peek()).to.equal(null);
    const off = counter(0);
    expect(await completed(off)).to.equal(1);
    expect(off.flight.peek()).to.equal(null); // no window: never at hand
  });

  /** A read that takes `ms` on the test's clock, completed. */
  async function completedIn(c: ReturnType<typeof counter>, ms: number): Promise<number> {
    const value = c.flight.get();
    await tick();
    c.advance(ms);
    c.release();
    return value;
  }

  it("reads ahead: a caller in the last stretch of the window (the last read's length) starts the next read and is answered at once", async () => {
    const c = counter(1000);
    expect(await completedIn(c, 100)).to.equal(1); // the read took 100 ms
    c.advance(899); // age 899: before the last 100 ms
    expect(c.flight.peek()).to.equal(1);
    expect(await c.flight.get()).to.equal(1);
    expect(c.reads()).to.equal(1);
    c.advance(1); // age 900: in the last 100 ms
    expect(c.flight.peek()).to.equal(1); // answered from the window...
    expect(c.reads()).to.equal(2); // ...and the next read has started
    expect(await c.flight.get()).to.equal(1); // joins nothing: still the window's value
    expect(c.reads()).to.equal(2); // one read ahead, not one per caller
    await tick();
    c.advance(50);
    c.release(); // the read ahead completes at age 950
    await tick();
    expect(c.flight.peek()).to.equal(2); // before the old window would have ended
    c.advance(949); // the new window is counted from its read's completion
    expect(await c.flight.get()).to.equal(2);
    expect(c.reads()).to.equal(2);
  });

  it('never serves past the window: a read ahead slower than the lead is waited for', async () => {
    const c = counter(1000);
    expect(await completedIn(c, 100)).to.equal(1);
    c.advance(950);
    expect(c.flight.peek()).to.equal(1); // starts read 2
    c.advance(50); // age 1000: expired, read 2 still in flight
    expect(c.flight.peek()).to.equal(null);
    const waiting = c.flight.get(); // joins read 2, no third read
    expect(c.reads()).to.equal(2);
    c.release();
    expect(await waiting).to.equal(2);
  });

  it('reads ahead at most half a window early, however long reads take', async () => {
    const c = counter(1000);
    expect(await completedIn(c, 5000)).to.equal(1);
    c.advance(499);
    expect(c.flight.peek()).to.equal(1);
    expect(c.reads()).to.equal(1);
    c.advance(1);
    expect(c.flight.peek()).to.equal(1);
    expect(c.reads()).to.equal(2);
  });

  it('does not keep a read ahead that a change overtook, and a failed one keeps the window as it was', async () => {
    const c = counter(60_000);
    expect(await completedIn(c, 1000)).to.equal(1);
    c.advance(59_500);
    expect(c.flight.peek()).to.equal(1); // read 2 ahead
    c.flight.invalidate();
    const after = c.flight.get(); // read 3: after the change
    await tick();
    expect(c.reads()).to.equal(3);
    c.release(); // read 2 completes: from before the change, not kept
    await tick();
    expect(c.flight.peek()).to.equal(null);
    c.release();
    expect(await after).to.equal(3);
    expect(c.flight.peek()).to.equal(3);

    let reads = 0;
    let clock = 0;
    const failing = new FreshRead(
      async () => {
        reads += 1;
        if (reads === 1) clock += 10; // the first read takes 10 ms: the lead
        if (reads === 2) throw new Error('dump failed');
        return reads;
      },
      1000,
      () => clock,
    );
    expect(await failing.get()).to.equal(1);
    clock = 1000; // age 990: the last 10 ms
    expect(failing.peek()).to.equal(1); // read 2 ahead, which fails
    await tick();
    expect(reads).to.equal(2);
    expect(failing.peek()).to.equal(1); // the window still holds read 1, and reads ahead again
    await tick();
    expect(reads).to.equal(3);
    expect(failing.peek()).to.equal(3);
  });

  it('has at hand, without ever starting a read, the value inside its window or the read in flight of this generation', async () => {
    const c = counter(1000);
    expect(c.flight.atHand()).to.equal(null);
    expect(c.reads()).to.equal(0);
    const pending = c.flight.get();
    const inFlight = c.flight.atHand();
    expect(inFlight).to.not.equal(null);
    await tick();
    c.release();
    expect(await pending).to.equal(1);
    expect(await inFlight).to.equal(1);
    c.advance(999);
    expect(await c.flight.atHand()).to.equal(1);
    c.advance(1); // the window is over: nothing at hand, and no read started for it
    expect(c.flight.atHand()).to.equal(null);
    expect(c.reads()).to.equal(1);
    const older = c.flight.get();
    c.flight.invalidate(); // a read of the last generation is not at hand
    expect(c.flight.atHand()).to.equal(null);
    await tick();
    c.release();
    expect(await older).to.equal(2);
    expect(c.flight.atHand()).to.equal(null);
  });

  it('hands next() the next read that someone starts, and never starts one for it', async () => {
    const c = counter(1000);
    expect(c.flight.sinceLastRead()).to.equal(null);
    const next = c.flight.next();
    await tick();
    expect(c.reads(), 'next() started no read').to.equal(0);
    const polled = c.flight.get();
    await tick();
    c.release();
    expect(await polled).to.equal(1);
    expect(await next).to.equal(1);
    c.advance(250);
    expect(c.flight.sinceLastRead()).to.equal(250);
    c.flight.invalidate(); // a change does not make the last read unread
    expect(c.flight.sinceLastRead()).to.equal(250);
  });

  it('passes a failed read to every waiting caller, keeps nothing and then reads afresh', async () => {
    let reads = 0;
    const flight = new FreshRead(
      async () => {
        reads += 1;
        await tick();
        if (reads === 1) throw new Error('dump failed');
        return reads;
      },
      60_000,
      () => 0,
    );
    const results = await Promise.allSettled([flight.get(), flight.get()]);
    expect(results.map((r) => r.status)).to.deep.equal(['rejected', 'rejected']);
    expect(await flight.get()).to.equal(2);
    expect(await flight.get()).to.equal(2);
  });
});
