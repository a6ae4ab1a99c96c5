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

// The list's data_cap.exhausted_at: when the daemon learned of the exhaustion, from whichever
// source told first; cleared when the daemon gives the cap room again. Times are ms.
describe('cap exhaustion: when it ran out (exhausted_at)', () => {
  const used = caps({ [A]: [1000, 1000] });
  const room = caps({ [A]: [1000, 10] });

  it("is the notice's arrival when the kernel's notice comes first; the next read keeps it", () => {
    const latch = new ExhaustionLatch();
    latch.read(room, owned(), 0, 5);
    latch.notice(A, ALICE, 1000, 100);
    latch.read(used, owned(), 3000, 3010);
    expect(latch.times(used)).to.deep.equal(new Map([[A, 100]]));
  });

  it("is the read's completion when a read finds the cap used up first; a late notice (6.12) does not move it", () => {
    const latch = new ExhaustionLatch();
    latch.read(room, owned(), 0, 5);
    latch.read(used, owned(), 1000, 1010);
    expect(latch.notice(A, ALICE, 1000, 60_000)).to.equal(false);
    latch.read(used, owned(), 61_000, 61_010);
    expect(latch.times(used)).to.deep.equal(new Map([[A, 1010]]));
  });

  it('is unknown (absent) for a cap the first read of the run found used up', () => {
    const latch = new ExhaustionLatch();
    latch.read(used, owned(), 0, 5);
    latch.notice(A, ALICE, 1000, 50);
    latch.read(used, owned(), 100, 105);
    expect(latch.times(used)).to.deep.equal(new Map());
  });

  it('is the seeded time (kept by the journal) when the first read finds that same exhaustion', () => {
    const latch = new ExhaustionLatch();
    latch.seed(A, ALICE, { quotaBytes: 1000, at: -5000 });
    latch.notice(A, ALICE, 1000, 50); // a restored quota object announces itself again
    latch.read(used, owned(), 100, 105);
    expect(latch.times(used)).to.deep.equal(new Map([[A, -5000]]));
  });

  it('drops a seeded time that the first read shows with room, or with other quota bytes or owner', () => {
    for (const [read, owner] of [
      [room, ALICE],
      [caps({ [A]: [2000, 2000] }), ALICE],
      [used, BOB],
    ] as const) {
      const latch = new ExhaustionLatch();
      latch.seed(A, ALICE, { quotaBytes: 1000, at: -5000 });
      latch.read(read, owned(owner), 100, 105);
      expect(latch.times(read)).to.deep.equal(new Map());
    }
  });

  it('is null for a cap with room, whatever was announced', () => {
    const latch = new ExhaustionLatch();
    latch.read(room, owned(), 0, 5);
    latch.notice(A, ALICE, 1000, 100);
    expect(latch.exhaustedAt(A, { quotaBytes: 1000, usedBytes: 999 })).to.equal(null);
    expect(latch.exhaustedAt(A, { quotaBytes: 1000, usedBytes: 1000 })).to.equal(100);
  });

  it('is cleared at once by a reset the daemon made, and a new exhaustion gets a new time without a read in between', () => {
    const latch = new ExhaustionLatch();
    latch.read(room, owned(), 0, 5);
    latch.notice(A, ALICE, 1000, 100);
    latch.clear(A, 200);
    expect(latch.times(used)).to.deep.equal(new Map());
    expect(latch.notice(A, ALICE, 1000, 300)).to.equal(true);
    expect(latch.times(used)).to.deep.equal(new Map([[A, 300]]));
  });

  it('ignores a read that started before the clear: it shows the cap as it was before the reset', () => {
    const latch = new ExhaustionLatch();
    latch.read(room, owned(), 0, 5);
    latch.notice(A, ALICE, 1000, 100);
    latch.clear(A, 200);
    expect(latch.read(used, owned(), 150, 250)).to.deep.equal([]);
    expect(latch.times(used)).to.deep.equal(new Map());
    // A read that started after it and finds the cap used up again: a new exhaustion.
    expect(latch.read(used, owned(), 300, 310)).to.deep.equal([A]);
    expect(latch.times(used)).to.deep.equal(new Map([[A, 310]]));
  });

  it('is cleared by a cap changed to other quota bytes (a raise), kept by one changed to as many', () => {
    const latch = new ExhaustionLatch();
    latch.read(room, owned(), 0, 5);
    latch.notice(A, ALICE, 1000, 100);
    latch.clear(A, 200, 1000); // a PATCH of the period or afterCap only
    expect(latch.times(used)).to.deep.equal(new Map([[A, 100]]));
    latch.clear(A, 300, 5000);
    expect(latch.times(used)).to.deep.equal(new Map());
    expect(latch.exhaustedAt(A, { quotaBytes: 5000, usedBytes: 5000 })).to.equal(null);
  });

  it('is cleared when a read shows the cap with room behind the daemon (a reset with nft)', () => {
    const latch = new ExhaustionLatch();
    latch.read(room, owned(), 0, 5);
    latch.notice(A, ALICE, 1000, 100);
    latch.read(room, owned(), 200, 210);
    latch.read(used, owned(), 400, 410);
    expect(latch.times(used)).to.deep.equal(new Map([[A, 410]]));
  });

  it('tells each known time set or forgotten, with the owner (what the journal keeps)', () => {
    const told: unknown[] = [];
    const latch = new ExhaustionLatch((address, owner, time) => told.push([address, owner, time]));
    latch.read(used, owned(), 0, 5); // learned, time unknown: nothing to keep
    latch.read(room, owned(), 10, 15);
    latch.notice(A, ALICE, 1000, 100);
    latch.notice(A, ALICE, 1000, 150); // the same exhaustion: nothing new
    latch.clear(A, 200);
    expect(told).to.deep.equal([
      [A, ALICE, { quotaBytes: 1000, at: 100 }],
      [A, ALICE, null],
    ]);
  });
});
