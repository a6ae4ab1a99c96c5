import { expect } from 'chai';
import fc from 'fast-check';
import {
  ALIVE_THRESHOLD_MS,
  livenessOf,
  statusAt,
  statusChangesAt,
} from '../../../src/peers/status';

// SPEC §3 and §8: ALIVE within 150 s, DEAD more than 150 s; DESIGN §3: whole minutes rounded
// down, null handshake fields without a handshake.
describe('peers/status: liveness from handshake age', () => {
  const now = Date.parse('2026-03-01T12:00:00.000Z');
  const ago = (ms: number): Date => new Date(now - ms);

  it('uses the 150 second threshold of SPEC §8', () => {
    expect(ALIVE_THRESHOLD_MS).to.equal(150 * 1000);
  });

  it('is ALIVE at exactly 150 s', () => {
    expect(livenessOf(ago(150_000), now).status).to.equal('ALIVE');
  });

  it('is DEAD at 151 s', () => {
    expect(livenessOf(ago(151_000), now).status).to.equal('DEAD');
  });

  it('is DEAD one millisecond past 150 s ("more than 150 seconds")', () => {
    expect(livenessOf(ago(150_001), now).status).to.equal('DEAD');
  });

  it('is ALIVE for a handshake just now', () => {
    expect(livenessOf(ago(0), now)).to.deep.equal({
      status: 'ALIVE',
      lastHandshake: '2026-03-01T12:00:00.000Z',
      minutesSinceHandshake: 0,
    });
  });

  it('reports "No handshake yet" with null time fields when there never was one', () => {
    expect(livenessOf(null, now)).to.deep.equal({
      status: 'No handshake yet',
      lastHandshake: null,
      minutesSinceHandshake: null,
    });
  });

  it('counts whole minutes, rounded down', () => {
    expect(livenessOf(ago(59_999), now).minutesSinceHandshake).to.equal(0);
    expect(livenessOf(ago(60_000), now).minutesSinceHandshake).to.equal(1);
    expect(livenessOf(ago(119_999), now).minutesSinceHandshake).to.equal(1);
    expect(livenessOf(ago(150_000), now).minutesSinceHandshake).to.equal(2);
    expect(livenessOf(ago(3 * 3600_000 + 59_000), now).minutesSinceHandshake).to.equal(180);
  });

  it('gives last_handshake as an ISO 8601 UTC timestamp', () => {
    const { lastHandshake } = livenessOf(new Date('2026-03-01T11:58:30.250Z'), now);
    expect(lastHandshake).to.equal('2026-03-01T11:58:30.250Z');
    expect(lastHandshake).to.match(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/);
  });

  it('treats a handshake stamped in the future (clock step) as age 0', () => {
    expect(livenessOf(new Date(now + 5_000), now)).to.include({
      status: 'ALIVE',
      minutesSinceHandshake: 0,
    });
  });
});

// Issue 29: a list body is answered again until the first instant a peer's status or minute
// moves (src/http/list-body.ts), so that instant must be exact: not one millisecond late.
describe('peers/status: the instant the status or the minutes next move (statusChangesAt)', () => {
  const now = Date.parse('2026-03-01T12:00:00.000Z');

  it('is never without a handshake', () => {
    expect(statusChangesAt(null, now)).to.equal(Infinity);
  });

  it('is one millisecond past 150 s for an ALIVE peer whose minute does not move first', () => {
    const handshake = new Date(now - 140_000); // minute 2 until 180 s, ALIVE until 150 s
    expect(statusChangesAt(handshake, now)).to.equal(handshake.getTime() + 150_001);
    expect(statusAt(handshake, handshake.getTime() + 150_000).status).to.equal('ALIVE');
    expect(statusAt(handshake, handshake.getTime() + 150_001).status).to.equal('DEAD');
  });

  it("is the next whole minute of a DEAD peer's age", () => {
    const handshake = new Date(now - 3_600_000 - 1);
    expect(statusChangesAt(handshake, now)).to.equal(handshake.getTime() + 61 * 60_000);
  });

  it('is a minute after a handshake stamped in the future (age 0 until then)', () => {
    const handshake = new Date(now + 5_000);
    expect(statusChangesAt(handshake, now)).to.equal(handshake.getTime() + 60_000);
  });

  it('gives the same status and minutes from now up to it, and others at it (property)', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: -200_000, max: 10_000_000 }),
        fc.integer({ min: 0, max: 1_000_000 }),
        (age, later) => {
          const handshake = new Date(now - age);
          const at = statusChangesAt(handshake, now);
          const before = statusAt(handshake, now);
          const last = Math.min(at - 1, now + later);
          expect(statusAt(handshake, last)).to.deep.equal(before);
          expect(statusAt(handshake, at - 1)).to.deep.equal(before);
          expect(statusAt(handshake, at)).to.not.deep.equal(before);
        },
      ),
    );
  });
});
