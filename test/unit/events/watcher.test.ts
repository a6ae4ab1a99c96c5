import { expect } from 'chai';
import sinon from 'sinon';
import { KernelWatcher, type EventInput } from '../../../src/events';
import { ALIVE_THRESHOLD_MS, InterfaceMissingError, type PeerSnapshot } from '../../../src/peers';
import type { WireGuardPeer } from '../../../src/kernel/types';

const T0 = Date.parse('2026-03-01T12:00:00.000Z');
const key = (n: number) => Buffer.alloc(32, n).toString('base64');

function peer(n: number, handshake: number | null): WireGuardPeer {
  return {
    publicKey: key(n),
    endpoint: handshake === null ? null : `198.51.100.${n}:51820`,
    lastHandshake: handshake === null ? null : new Date(handshake),
    rxBytes: 0,
    txBytes: 0,
    persistentKeepalive: 0,
    allowedIps: [{ family: 4, address: `10.8.0.${n}`, cidr: 32 }],
  };
}

function snapshotOf(takenAt: number, peers: WireGuardPeer[]): PeerSnapshot {
  return {
    takenAt,
    readMs: 1,
    device: { name: 'wg0', ifindex: 3, publicKey: null, listenPort: 51820, fwmark: 0, peers },
    limits: new Map(),
    caps: new Map(),
  };
}

/** A kernel whose read the test sets, and a watcher over it. */
function setup(intervalMs = 1000) {
  let peers: WireGuardPeer[] = [];
  let failWith: Error | null = null;
  let reads = 0;
  let gate: Promise<void> | null = null;
  const events: EventInput[] = [];
  const warnings: Array<Record<string, unknown>> = [];
  const watcher = new KernelWatcher({
    snapshot: async () => {
      reads += 1;
      const takenAt = Date.now();
      const seen = peers; // as the kernel was when the read started
      if (gate) await gate;
      if (failWith) throw failWith;
      return snapshotOf(takenAt, seen);
    },
    publish: (e) => events.push(e),
    intervalMs,
    logger: { warn: (o) => warnings.push(o) },
  });
  return {
    watcher,
    events,
    warnings,
    reads: () => reads,
    set: (p: WireGuardPeer[]) => (peers = p),
    fail: (e: Error | null) => (failWith = e),
    hold: () => {
      let release!: () => void;
      gate = new Promise((r) => (release = r));
      return () => {
        gate = null;
        release();
      };
    },
    types: () => events.map((e) => e.type),
  };
}

describe('events: the kernel watcher (connect, disconnect, behind-the-back changes)', () => {
  let clock: sinon.SinonFakeTimers;
  beforeEach(() => {
    clock = sinon.useFakeTimers({
      now: T0,
      toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'Date', 'performance'],
    });
  });
  afterEach(() => clock.restore());

  it('the first read is the baseline: it reports nothing', async () => {
    const w = setup();
    w.set([peer(2, T0 - 1000), peer(3, null)]);
    await w.watcher.poll();
    expect(w.events).to.deep.equal([]);
  });

  it('peer.connected when a status becomes ALIVE, at the handshake, with last_handshake and endpoint', async () => {
    const w = setup();
    w.set([peer(2, null)]);
    await w.watcher.poll();
    clock.tick(5000);
    const handshake = Date.now() - 700;
    w.set([peer(2, handshake)]);
    await w.watcher.poll();
    expect(w.events).to.deep.equal([
      {
        type: 'peer.connected',
        at: handshake,
        publicKey: key(2),
        ipAddress: '10.8.0.2',
        details: {
          lastHandshake: new Date(handshake).toISOString(),
          endpoint: '198.51.100.2:51820',
        },
      },
    ]);
  });

  it('peer.disconnected at handshake + 150 s exactly, found by the first read past it', async () => {
    const w = setup();
    const handshake = T0;
    w.set([peer(2, handshake)]);
    await w.watcher.poll();
    clock.tick(ALIVE_THRESHOLD_MS); // exactly 150 s: still ALIVE (SPEC: within 150 s)
    await w.watcher.poll();
    expect(w.events).to.deep.equal([]);
    clock.tick(1000); // the next read interval
    await w.watcher.poll();
    expect(w.types()).to.deep.equal(['peer.disconnected']);
    expect(w.events[0]!.at).to.equal(handshake + ALIVE_THRESHOLD_MS);
    expect(w.events[0]!.details).to.deep.equal({
      lastHandshake: new Date(handshake).toISOString(),
    });
  });

  it('a DEAD peer that handshakes again is connected again', async () => {
    const w = setup();
    w.set([peer(2, T0 - 200_000)]);
    await w.watcher.poll();
    clock.tick(1000);
    w.set([peer(2, Date.now())]);
    await w.watcher.poll();
    expect(w.types()).to.deep.equal(['peer.connected']);
  });

  it('a peer added or removed behind the daemon is peer.created / peer.deleted with origin kernel', async () => {
    const w = setup();
    w.set([peer(2, null)]);
    await w.watcher.poll();
    w.set([peer(3, null)]);
    clock.tick(1000);
    await w.watcher.poll();
    expect(w.events.map((e) => [e.type, e.publicKey, e.ipAddress, e.details])).to.deep.equal([
      ['peer.created', key(3), '10.8.0.3', { origin: 'kernel' }],
      ['peer.deleted', key(2), '10.8.0.2', { origin: 'kernel' }],
    ]);
  });

  it('a peer added behind the back that already handshook is created, then connected', async () => {
    const w = setup();
    await w.watcher.poll();
    w.set([peer(4, Date.now())]);
    await w.watcher.poll();
    expect(w.types()).to.deep.equal(['peer.created', 'peer.connected']);
  });

  it('changes the daemon made are not reported again, even by a read that started before them', async () => {
    const w = setup();
    w.set([peer(2, null)]);
    await w.watcher.poll();
    // A read starts, sees peer 2 and not yet peer 5...
    const release = w.hold();
    const reading = w.watcher.poll();
    // ...meanwhile the daemon deletes 2 and creates 5 (and publishes those events itself).
    w.set([peer(5, null)]);
    w.watcher.note({ type: 'peer.deleted', publicKey: key(2), ipAddress: '10.8.0.2' });
    w.watcher.note({ type: 'peer.created', publicKey: key(5), ipAddress: '10.8.0.5' });
    release();
    await reading;
    expect(w.events).to.deep.equal([]);
    // The next read agrees with what the daemon did: still nothing to report.
    await w.watcher.poll();
    expect(w.events).to.deep.equal([]);
    // And a later behind-the-back removal of 5 is reported.
    w.set([]);
    await w.watcher.poll();
    expect(w.types()).to.deep.equal(['peer.deleted']);
  });

  it('interface.lost once while reads find the interface gone, interface.restored on the first that finds it', async () => {
    const w = setup();
    await w.watcher.poll();
    w.fail(new InterfaceMissingError('wg0'));
    await w.watcher.poll();
    await w.watcher.poll();
    w.fail(null);
    await w.watcher.poll();
    expect(w.types()).to.deep.equal(['interface.lost', 'interface.restored']);
  });

  it('another read failure is logged, not an event', async () => {
    const w = setup();
    w.fail(new Error('EIO'));
    await w.watcher.poll();
    expect(w.events).to.deep.equal([]);
    expect(w.warnings[0]).to.include({ event: 'event_read_failed' });
  });

  it('reads only while someone listens, at most once per interval', async () => {
    const w = setup(1000);
    clock.tick(10_000);
    expect(w.reads()).to.equal(0);
    w.watcher.setListening(true);
    await clock.tickAsync(10_000);
    // One at once, then one a second.
    expect(w.reads()).to.be.within(10, 11);
    w.watcher.setListening(false);
    const before = w.reads();
    await clock.tickAsync(10_000);
    expect(w.reads()).to.equal(before);
  });
});
