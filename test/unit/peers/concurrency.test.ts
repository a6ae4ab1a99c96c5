import { expect } from 'chai';
import { SingleFlight } from '../../../src/peers/single-flight';

const tick = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

describe('peers/single-flight', () => {
  function counter() {
    let reads = 0;
    const waiting: Array<() => void> = [];
    const flight = new SingleFlight(async () => {
      reads += 1;
      const n = reads;
      await new Promise<void>((resolve) => waiting.push(resolve));
      return n;
    });
    /** Lets the oldest read in flight finish. */
    const release = (): void => waiting.shift()?.();
    return { flight, reads: () => reads, release };
  }

  it('shares the read in flight between callers', async () => {
    const c = counter();
    const a = c.flight.get();
    const b = c.flight.get();
    await tick();
    c.release();
    expect(await a).to.equal(1);
    expect(await b).to.equal(1);
    expect(c.reads()).to.equal(1);
  });

  it('starts a new read after one settled (no cache)', async () => {
    const c = counter();
    const a = c.flight.get();
    await tick();
    c.release();
    await a;
    const b = c.flight.get();
    await tick();
    c.release();
    expect(await b).to.equal(2);
  });

  it('does not let a caller after a change join a read started before it', async () => {
    const c = counter();
    const before = c.flight.get();
    await tick();
    c.flight.invalidate();
    const after = c.flight.get();
    await tick();
    expect(c.reads()).to.equal(2);
    c.release();
    c.release();
    expect(await before).to.equal(1);
    expect(await after).to.equal(2);
  });

  it('passes a failed read to every waiting caller and then reads afresh', async () => {
    let reads = 0;
    const flight = new SingleFlight(async () => {
      reads += 1;
      await tick();
      if (reads === 1) throw new Error('dump failed');
      return reads;
    });
    const results = await Promise.allSettled([flight.get(), flight.get()]);
    expect(results.map((r) => r.status)).to.deep.equal(['rejected', 'rejected']);
    expect(await flight.get()).to.equal(2);
  });
});
