import { expect } from 'chai';
import { ALIVE_THRESHOLD_MS, livenessOf } from '../../../src/peers/status';

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
