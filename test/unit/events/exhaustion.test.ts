import { expect } from 'chai';
import { ExhaustionLatch, type CapReading } from '../../../src/events/exhaustion';

const A = '10.8.0.2';
const ALICE = 'alice-public-key';
const BOB = 'bob-public-key';

const caps = (entries: Record<string, [quota: number, used: number]>) =>
  new Map<string, CapReading>(
    Object.entries(entries).map(([address, [quotaBytes, usedBytes]]) => [
      address,
      { quotaBytes, usedBytes },
    ]),
  );
const owned = (owner = ALICE) => new Map([[A, owner]]);

// peer.cap_exhausted once per exhaustion, whether the kernel's notice (6.1: at the cut) or the
// shared read (6.12 holds the notice until the next nf_tables commit) tells first. Times are ms.
describe('cap exhaustion: one announcement from two sources', () => {
  it('announces a cap the notice reports used up, once', () => {
    const latch = new ExhaustionLatch();
    expect(latch.notice(A, ALICE, 1000, 10)).to.equal(true);
    expect(latch.notice(A, ALICE, 1000, 20)).to.equal(false);
  });

  it('learns at the first read what was used up before anyone listened, and announces nothing', () => {
    const latch = new ExhaustionLatch();
    expect(latch.read(caps({ [A]: [1000, 1000] }), owned(), 0)).to.deep.equal([]);
    expect(latch.read(caps({ [A]: [1000, 1000] }), owned(), 10)).to.deep.equal([]);
  });

  it('announces at a later read a cap that became used up, once while it stays so', () => {
    const latch = new ExhaustionLatch();
    latch.read(caps({ [A]: [1000, 10] }), owned(), 0);
    expect(latch.read(caps({ [A]: [1000, 1000] }), owned(), 10)).to.deep.equal([A]);
    expect(latch.read(caps({ [A]: [1000, 1000] }), owned(), 20)).to.deep.equal([]);
  });

  it('drops the late notice 6.12 sends at the next commit when a read announced it first', () => {
    const latch = new ExhaustionLatch();
    latch.read(caps({ [A]: [1000, 10] }), owned(), 0);
    expect(latch.read(caps({ [A]: [1000, 1000] }), owned(), 10)).to.deep.equal([A]);
    expect(latch.notice(A, ALICE, 1000, 5000)).to.equal(false);
  });

  it('does not announce again at a read what the notice announced', () => {
    const latch = new ExhaustionLatch();
    latch.read(caps({ [A]: [1000, 10] }), owned(), 0);
    expect(latch.notice(A, ALICE, 1000, 10)).to.equal(true);
    expect(latch.read(caps({ [A]: [1000, 1000] }), owned(), 20)).to.deep.equal([]);
  });

  it('is not re-armed by a read that started before the notice and still shows room (seen on 6.1)', () => {
    const latch = new ExhaustionLatch();
    latch.read(caps({ [A]: [1000, 10] }), owned(), 0);
    expect(latch.notice(A, ALICE, 1000, 100)).to.equal(true);
    // A read taken at 90, before the cut, completes after the notice.
    expect(latch.read(caps({ [A]: [1000, 900] }), owned(), 90)).to.deep.equal([]);
    expect(latch.read(caps({ [A]: [1000, 1000] }), owned(), 200)).to.deep.equal([]);
  });

  it('re-arms once a later read shows room again (a raised cap), and announces the next exhaustion', () => {
    const latch = new ExhaustionLatch();
    latch.read(caps({ [A]: [1000, 10] }), owned(), 0);
    expect(latch.notice(A, ALICE, 1000, 10)).to.equal(true);
    latch.read(caps({ [A]: [5000, 1000] }), owned(), 20);
    expect(latch.read(caps({ [A]: [5000, 5000] }), owned(), 30)).to.deep.equal([A]);
  });

  it('drops a notice for quota bytes that the latest read no longer shows (the cap changed since the packet)', () => {
    const latch = new ExhaustionLatch();
    latch.read(caps({ [A]: [5000, 1200] }), owned(), 0);
    expect(latch.notice(A, ALICE, 1000, 10)).to.equal(false);
    expect(latch.notice(A, ALICE, 5000, 20)).to.equal(true);
  });

  it('does not announce again a cap of the same owner that vanished and came back used up (a repair)', () => {
    const latch = new ExhaustionLatch();
    latch.read(caps({ [A]: [1000, 10] }), owned(), 0);
    expect(latch.notice(A, ALICE, 1000, 10)).to.equal(true);
    latch.read(caps({}), new Map(), 20);
    expect(latch.read(caps({ [A]: [1000, 1000] }), owned(), 30)).to.deep.equal([]);
  });

  it('announces the exhaustion of a new owner on the same address', () => {
    const latch = new ExhaustionLatch();
    latch.read(caps({ [A]: [1000, 10] }), owned(), 0);
    expect(latch.notice(A, ALICE, 1000, 10)).to.equal(true);
    latch.read(caps({}), new Map(), 20);
    expect(latch.notice(A, BOB, 1000, 30)).to.equal(true);
  });
});
