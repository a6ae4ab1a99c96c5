import { expect } from 'chai';
import { EventHub, sseFrame } from '../../../src/events';

const T0 = Date.parse('2026-03-01T12:00:00.000Z');

function hub(historySize = 5, run = 'runa') {
  let now = T0;
  const h = new EventHub({ interfaceName: 'wg0', historySize, run, now: () => now });
  return { h, tick: (ms: number) => (now += ms) };
}

const KEY = Buffer.alloc(32, 7).toString('base64');

describe('events: the hub (ids, history, resume, reset)', () => {
  it('gives ids <run>.<seq> that increase in the order events are published', () => {
    const { h } = hub();
    const ids = [1, 2, 3].map(
      () => h.publish({ type: 'interface.lost', details: { reason: 'gone' } }).id,
    );
    expect(ids).to.deep.equal(['runa.1', 'runa.2', 'runa.3']);
    expect(h.lastId).to.equal('runa.3');
  });

  it('serializes an event once: data JSON with type, at, interface, public_key, ip_address and the details, in one SSE frame', () => {
    const { h } = hub();
    const e = h.publish({
      type: 'peer.limit_changed',
      publicKey: KEY,
      ipAddress: '10.8.0.2',
      details: { origin: 'api', bytesPerSecond: 1000 },
    });
    expect(JSON.parse(e.json)).to.deep.equal({
      type: 'peer.limit_changed',
      at: '2026-03-01T12:00:00.000Z',
      interface: 'wg0',
      public_key: KEY,
      ip_address: '10.8.0.2',
      name: null,
      origin: 'api',
      bytes_per_second: 1000,
    });
    expect(e.frame.toString()).to.equal(
      `id: runa.1\nevent: peer.limit_changed\ndata: ${e.json}\n\n`,
    );
    expect(e.json).to.not.include('\n');
  });

  it('takes `at` from the source when it knows when the change happened', () => {
    const { h } = hub();
    const e = h.publish({
      type: 'peer.disconnected',
      at: T0 - 5000,
      publicKey: KEY,
      ipAddress: null,
      details: { lastHandshake: null },
    });
    expect(JSON.parse(e.json).at).to.equal('2026-03-01T11:59:55.000Z');
    expect(JSON.parse(e.json).ip_address).to.equal(null);
  });

  it('interface events carry no public_key or ip_address', () => {
    const { h } = hub();
    const data = JSON.parse(h.publish({ type: 'interface.restored' }).json) as object;
    expect(Object.keys(data)).to.deep.equal(['type', 'at', 'interface']);
  });

  it('hands every event to each listener in order, and stops when told', () => {
    const { h } = hub();
    const seen: string[] = [];
    const stop = h.subscribe((e) => seen.push(e.id));
    h.publish({ type: 'interface.lost', details: { reason: 'gone' } });
    h.publish({ type: 'interface.restored' });
    stop();
    h.publish({ type: 'interface.lost', details: { reason: 'gone' } });
    expect(seen).to.deep.equal(['runa.1', 'runa.2']);
  });

  it('a listener that throws does not keep the event from the others', () => {
    const errors: unknown[] = [];
    const h = new EventHub({
      interfaceName: 'wg0',
      historySize: 3,
      onListenerError: (e) => errors.push(e),
    });
    const seen: number[] = [];
    h.subscribe(() => {
      throw new Error('broken');
    });
    h.subscribe((e) => seen.push(e.seq));
    h.publish({ type: 'interface.lost', details: { reason: 'gone' } });
    expect(seen).to.deep.equal([1]);
    expect(errors).to.have.length(1);
  });

  it('tells the listener count as it changes (the watcher reads only while it is > 0)', () => {
    const { h } = hub();
    const counts: number[] = [];
    h.onListenerCount((n) => counts.push(n));
    const a = h.subscribe(() => {});
    const b = h.subscribe(() => {});
    a();
    a();
    b();
    expect(counts).to.deep.equal([1, 2, 1, 0]);
  });

  describe('resume with Last-Event-ID', () => {
    it('without an id: live events only', () => {
      const { h } = hub();
      h.publish({ type: 'interface.lost', details: { reason: 'gone' } });
      expect(h.resume(undefined)).to.deep.equal({ kind: 'live' });
      expect(h.resume('')).to.deep.equal({ kind: 'live' });
    });

    it('replays every event after the id, in order, while the history holds them', () => {
      const { h } = hub(5);
      const events = [1, 2, 3, 4].map(() =>
        h.publish({ type: 'interface.lost', details: { reason: 'gone' } }),
      );
      const resumed = h.resume('runa.1');
      expect(resumed.kind).to.equal('replay');
      expect(resumed.kind === 'replay' && resumed.events).to.deep.equal(events.slice(1));
      const none = h.resume('runa.4');
      expect(none.kind === 'replay' && none.events).to.deep.equal([]);
    });

    it('replays from the start of the run for <run>.0 (connected before the first event)', () => {
      const { h } = hub(5);
      const id0 = h.lastId;
      h.publish({ type: 'interface.lost', details: { reason: 'gone' } });
      const resumed = h.resume(id0);
      expect(resumed.kind === 'replay' && resumed.events.map((e) => e.id)).to.deep.equal([
        'runa.1',
      ]);
    });

    it('keeps only the last historySize events: the oldest id still resumable is the one just before them', () => {
      const { h } = hub(3);
      for (let i = 0; i < 10; i++)
        h.publish({ type: 'interface.lost', details: { reason: 'gone' } });
      // History: 8, 9, 10. After 7 → 8, 9, 10 all there.
      const ok = h.resume('runa.7');
      expect(ok.kind === 'replay' && ok.events.map((e) => e.seq)).to.deep.equal([8, 9, 10]);
      const lost = h.resume('runa.6');
      expect(lost.kind).to.equal('reset');
      expect(lost.kind === 'reset' && lost.reason).to.match(
        /no longer in the history \(it keeps 3 events, at most \d+ bytes\)/,
      );
    });

    it('an id of another daemon run, one not issued yet, or not an id at all gets a reset', () => {
      const { h } = hub();
      h.publish({ type: 'interface.lost', details: { reason: 'gone' } });
      for (const id of ['runb.1', 'runa.2', 'garbage', 'runa.-1', 'runa.1.2']) {
        expect(h.resume(id).kind, id).to.equal('reset');
      }
    });

    it('the reset frame carries the last id, so a client that re-listed resumes after it', () => {
      const { h } = hub();
      h.publish({ type: 'interface.lost', details: { reason: 'gone' } });
      h.publish({ type: 'interface.restored' });
      const frame = h.resetFrame('why').toString();
      expect(frame).to.match(/^id: runa\.2\nevent: reset\ndata: \{.*\}\n\n$/);
      const data = JSON.parse(frame.split('data: ')[1]!) as Record<string, unknown>;
      expect(data).to.deep.equal({
        type: 'reset',
        at: '2026-03-01T12:00:00.000Z',
        interface: 'wg0',
        reason: 'why',
      });
    });
  });

  it('a random run id by default, different per hub (ids of one run never resume another)', () => {
    const a = new EventHub({ interfaceName: 'wg0', historySize: 2 });
    const b = new EventHub({ interfaceName: 'wg0', historySize: 2 });
    expect(a.run).to.match(/^[a-z0-9]+$/);
    expect(a.run).to.not.equal(b.run);
    a.publish({ type: 'interface.lost', details: { reason: 'gone' } });
    expect(b.resume(`${a.run}.1`).kind).to.equal('reset');
  });

  it('refuses a history of less than one event', () => {
    expect(() => new EventHub({ interfaceName: 'wg0', historySize: 0 })).to.throw(RangeError);
  });

  it('writes the SSE frame of the spec: id, event, one data line, blank line', () => {
    expect(sseFrame('a.1', 'peer.created', '{}').toString()).to.equal(
      'id: a.1\nevent: peer.created\ndata: {}\n\n',
    );
  });
});
