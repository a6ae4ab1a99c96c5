import { expect } from 'chai';
import { ExhaustionLatch, type CapReading } from '../../../src/events/exhaustion';

const caps = (entries: Record<string, [quota: number, used: number]>) =>
  new Map<string, CapReading>(
    Object.entries(entries).map(([address, [quotaBytes, usedBytes]]) => [
      address,
      { quotaBytes, usedBytes },
    ]),
  );

// peer.cap_exhausted once per exhaustion, whether the kernel's notice (6.1: at the cut) or the
// shared read (6.12 holds the notice until the next nf_tables commit) tells first.
describe('cap exhaustion: one announcement from two sources', () => {
  it('announces a cap the notice reports used up, once', () => {
    const latch = new ExhaustionLatch();
    expect(latch.notice('10.8.0.2', 1000)).to.equal(true);
    expect(latch.notice('10.8.0.2', 1000)).to.equal(false);
  });

  it('learns at the first read what was used up before anyone listened, and announces nothing', () => {
    const latch = new ExhaustionLatch();
    expect(latch.read(caps({ '10.8.0.2': [1000, 1000], '10.8.0.3': [1000, 10] }))).to.deep.equal(
      [],
    );
    expect(latch.read(caps({ '10.8.0.2': [1000, 1000], '10.8.0.3': [1000, 10] }))).to.deep.equal(
      [],
    );
  });

  it('announces at a later read a cap that became used up, once while it stays so', () => {
    const latch = new ExhaustionLatch();
    latch.read(caps({ '10.8.0.2': [1000, 10] }));
    expect(latch.read(caps({ '10.8.0.2': [1000, 1000] }))).to.deep.equal(['10.8.0.2']);
    expect(latch.read(caps({ '10.8.0.2': [1000, 1000] }))).to.deep.equal([]);
  });

  it('drops the late notice 6.12 sends at the next commit when a read announced it first', () => {
    const latch = new ExhaustionLatch();
    latch.read(caps({ '10.8.0.2': [1000, 10] }));
    expect(latch.read(caps({ '10.8.0.2': [1000, 1000] }))).to.deep.equal(['10.8.0.2']);
    expect(latch.notice('10.8.0.2', 1000)).to.equal(false);
  });

  it('does not announce again at a read what the notice announced', () => {
    const latch = new ExhaustionLatch();
    latch.read(caps({ '10.8.0.2': [1000, 10] }));
    expect(latch.notice('10.8.0.2', 1000)).to.equal(true);
    expect(latch.read(caps({ '10.8.0.2': [1000, 1000] }))).to.deep.equal([]);
  });

  it('re-arms once a read shows room again (a raised cap), and announces the next exhaustion', () => {
    const latch = new ExhaustionLatch();
    latch.read(caps({ '10.8.0.2': [1000, 10] }));
    expect(latch.notice('10.8.0.2', 1000)).to.equal(true);
    latch.read(caps({ '10.8.0.2': [5000, 1000] }));
    expect(latch.read(caps({ '10.8.0.2': [5000, 5000] }))).to.deep.equal(['10.8.0.2']);
  });

  it('drops a notice for quota bytes that the latest read no longer shows (the cap changed since the packet)', () => {
    const latch = new ExhaustionLatch();
    latch.read(caps({ '10.8.0.2': [5000, 1200] }));
    expect(latch.notice('10.8.0.2', 1000)).to.equal(false);
    expect(latch.notice('10.8.0.2', 5000)).to.equal(true);
  });

  it('re-arms an address whose cap is gone (a new peer on it starts afresh)', () => {
    const latch = new ExhaustionLatch();
    latch.read(caps({ '10.8.0.2': [1000, 10] }));
    expect(latch.notice('10.8.0.2', 1000)).to.equal(true);
    latch.read(caps({}));
    latch.read(caps({ '10.8.0.2': [1000, 10] }));
    expect(latch.notice('10.8.0.2', 1000)).to.equal(true);
  });
});
