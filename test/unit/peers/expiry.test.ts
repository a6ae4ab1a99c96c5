/**
 * Issue 31, expiry: the value an operator gives (ISO 8601 with an offset, in the future, within
 * the kernel's bound on a timeout), the one way it changes a peer (the pipeline's `expiry` row:
 * kernel, journal, undo), what a list shows (`expires_at`, and `expired` as the kernel's `valid`
 * set says), the events (`peer.expired` once per expiry, learned by a read; `peer.renewed`
 * when an expired peer passes again), and a reboot with a state directory putting every expiry
 * back. The kernel is the in-memory FakeKernel (its `valid` set ends an element at its clock);
 * the netlink side is test/unit/kernel/expiry.replay.test.ts.
 */
import { expect } from 'chai';
import { startDaemon, type Daemon } from '../../../src/main';
import { PeerService, type PeerChange, parseExpiresAt } from '../../../src/peers';
import { PeerNotFoundError, ValidationError } from '../../../src/peers/errors';
import { TIMEOUT_MAX_MS } from '../../../src/kernel/expiry';
import { applyRecord, emptyState, peerRecord } from '../../../src/state/records';
import { FakeKernel } from '../support/fake-kernel';
import { testConfig } from '../support/config';
import { captureLog } from '../support/log-capture';
import { httpCall } from '../../support/http-call';
import { MemoryFs } from '../../support/memory-fs';

const NOW = Date.parse('2026-11-28T12:00:00.000Z');
const HOUR = 3_600_000;
const iso = (ms: number): string => new Date(ms).toISOString();

function detailsOf(run: () => unknown): unknown {
  try {
    run();
  } catch (error) {
    expect(error).to.be.instanceOf(ValidationError);
    return (error as ValidationError).details;
  }
  throw new Error('no ValidationError');
}

describe('peers/expiry: the expiresAt an operator gives (issue 31)', () => {
  it('takes ISO 8601 with Z or an offset, in the future, as the instant it names', () => {
    expect(parseExpiresAt('2026-11-28T13:00:00Z', NOW)).to.equal(NOW + HOUR);
    expect(parseExpiresAt('2026-11-28T14:00:00+01:00', NOW)).to.equal(NOW + HOUR);
    expect(parseExpiresAt('2026-11-28T12:00:00.5-00:30', NOW)).to.equal(NOW + HOUR / 2 + 500);
    expect(parseExpiresAt(null, NOW)).to.equal(null);
  });

  it('refuses a time without an offset, a day that does not exist, the past and now, with details naming the field', () => {
    const format = [
      {
        field: '/expiresAt',
        message:
          'must be an ISO 8601 date and time with a UTC offset (e.g. 2026-12-31T23:59:59Z or 2026-12-31T23:59:59+01:00), or null',
      },
    ];
    expect(detailsOf(() => parseExpiresAt('2026-12-01T00:00:00', NOW))).to.deep.equal(format);
    expect(detailsOf(() => parseExpiresAt('2027-02-30T00:00:00Z', NOW))).to.deep.equal(format);
    expect(detailsOf(() => parseExpiresAt(1_800_000_000_000, NOW))).to.deep.equal(format);
    const past = [{ field: '/expiresAt', message: 'must be in the future' }];
    expect(detailsOf(() => parseExpiresAt('2026-11-28T11:59:59Z', NOW))).to.deep.equal(past);
    expect(detailsOf(() => parseExpiresAt(iso(NOW), NOW))).to.deep.equal(past);
  });

  it("refuses an instant beyond the kernel's bound on a timeout (18,446,744,073,708 ms ahead)", () => {
    expect(parseExpiresAt(iso(NOW + TIMEOUT_MAX_MS), NOW)).to.equal(NOW + TIMEOUT_MAX_MS);
    const details = detailsOf(() => parseExpiresAt(iso(NOW + TIMEOUT_MAX_MS + 1), NOW)) as Array<{
      message: string;
    }>;
    expect(details[0]!.message).to.contain("the kernel's bound on a timeout");
  });
});

describe('peers/expiry: the service over the kernel (issue 31)', () => {
  let clock = NOW;
  let kernel: FakeKernel;
  let published: PeerChange[];
  let svc: PeerService;

  beforeEach(() => {
    clock = NOW;
    kernel = FakeKernel.withInterface();
    kernel.expiryClock = () => clock;
    published = [];
    svc = new PeerService({
      kernel,
      interfaceName: 'wg0',
      logger: captureLog().logger,
      now: () => clock,
      events: { publish: (change) => published.push(change) },
    });
  });

  const expiriesInKernel = () => [...(kernel.expiries.get('wg0') ?? new Map()).entries()];
  const of = (type: string) => published.filter((p) => p.type === type);

  it('puts a create’s expiresAt into the kernel with its owner, and a list shows it, not expired', async () => {
    const created = await svc.createPeer({ expiresAt: iso(NOW + HOUR) });
    expect(expiriesInKernel()).to.deep.equal([
      [created.ip, { publicKey: created.publicKey, expiresAt: NOW + HOUR }],
    ]);
    const snapshot = await svc.snapshot();
    expect(snapshot.expiries?.get(created.publicKey)).to.equal(NOW + HOUR);
    expect(snapshot.expired?.has(created.publicKey)).to.equal(false);
  });

  it('refuses a create whose expiresAt has passed, and makes no peer', async () => {
    let error: unknown;
    try {
      await svc.createPeer({ expiresAt: iso(NOW - 1) });
    } catch (e) {
      error = e;
    }
    expect(error).to.be.instanceOf(ValidationError);
    expect(kernel.devices.get('wg0')!.peers).to.have.length(0);
  });

  it('shows a peer expired once the kernel ended its element, and tells peer.expired once, learned by the next read', async () => {
    const peer = await svc.createPeer({ expiresAt: iso(NOW + HOUR) });
    await svc.snapshot();
    expect(of('peer.expired')).to.deep.equal([]);
    clock = NOW + HOUR; // the kernel's timeout ends at expiresAt
    const read = await svc.snapshot();
    expect(read.expired?.has(peer.publicKey)).to.equal(true);
    expect(of('peer.expired')).to.deep.equal([
      {
        type: 'peer.expired',
        publicKey: peer.publicKey,
        ipAddress: peer.ip,
        details: { origin: 'kernel', expires_at: iso(NOW + HOUR) },
      },
    ]);
    clock += 1_000;
    await svc.snapshot();
    expect(of('peer.expired')).to.have.length(1);
  });

  it('renews an expired peer (a later expiresAt): the kernel lets it pass again, the list says so, peer.renewed is told', async () => {
    const peer = await svc.createPeer({ expiresAt: iso(NOW + HOUR) });
    clock = NOW + 2 * HOUR;
    await svc.snapshot();
    await svc.setExpiry(peer.publicKey, iso(NOW + 3 * HOUR));
    expect(expiriesInKernel()[0]![1].expiresAt).to.equal(NOW + 3 * HOUR);
    const read = await svc.snapshot();
    expect(read.expired?.has(peer.publicKey)).to.equal(false);
    expect(of('peer.renewed')).to.deep.equal([
      {
        type: 'peer.renewed',
        publicKey: peer.publicKey,
        ipAddress: peer.ip,
        details: { expires_at: iso(NOW + 3 * HOUR) },
      },
    ]);
    // A later expiry of a peer that has not expired is no renewal event.
    await svc.setExpiry(peer.publicKey, iso(NOW + 4 * HOUR));
    expect(of('peer.renewed')).to.have.length(1);
  });

  it('clears an expiry (null): the kernel holds none and the list shows none', async () => {
    const peer = await svc.createPeer({ expiresAt: iso(NOW + HOUR) });
    await svc.setExpiry(peer.publicKey, null);
    expect(expiriesInKernel()).to.deep.equal([]);
    expect((await svc.snapshot()).expiries?.has(peer.publicKey)).to.equal(false);
  });

  it('takes a peer’s expiry out of the kernel when the peer is deleted', async () => {
    const peer = await svc.createPeer({ expiresAt: iso(NOW + HOUR) });
    await svc.deletePeer(peer.publicKey);
    expect(expiriesInKernel()).to.deep.equal([]);
  });

  it('answers PEER_NOT_FOUND (404) for a peer the kernel does not have, and writes nothing', async () => {
    let error: unknown;
    try {
      await svc.setExpiry(Buffer.alloc(32, 9).toString('base64'), iso(NOW + HOUR));
    } catch (e) {
      error = e;
    }
    expect(error).to.be.instanceOf(PeerNotFoundError);
    expect(expiriesInKernel()).to.deep.equal([]);
  });

  it('reads the kernel’s expiries at start without a state directory (a daemon restart keeps them)', async () => {
    const peer = await svc.createPeer({ expiresAt: iso(NOW + HOUR) });
    const restarted = new PeerService({
      kernel,
      interfaceName: 'wg0',
      logger: captureLog().logger,
      now: () => clock,
    });
    expect((await restarted.snapshot()).expiries?.get(peer.publicKey)).to.equal(NOW + HOUR);
  });
});

const STATE = '/var/lib/wg-peerd';

async function call(daemon: Daemon, method: string, urlPath: string, body?: unknown) {
  const reply = await httpCall(daemon.address.port, method, urlPath, { body });
  return { status: reply.status, body: reply.json() };
}

async function start(kernel: FakeKernel, fs: MemoryFs, bootId = 'boot-1') {
  return startDaemon(testConfig({ stateDir: STATE }), {
    openKernel: async () => kernel,
    logger: captureLog().logger,
    readBootId: async () => bootId,
    stateFs: fs,
  });
}

async function listed(daemon: Daemon): Promise<Array<Record<string, unknown>>> {
  const peers = (await call(daemon, 'GET', '/api/peers')).body['peers'] as Array<
    Record<string, unknown>
  >;
  return peers.map((p) => ({ expires_at: p['expires_at'], expired: p['expired'] }));
}

describe('state: expiries kept with --state-dir, over HTTP (issue 31)', () => {
  it('answers PATCH .../expiry, 400 with details for a bad value, and a reboot puts every expiry back: one still ahead valid, one passed while down expired at once', async () => {
    const fs = new MemoryFs();
    const kernel = new FakeKernel();
    const first = await start(kernel, fs);
    const soon = iso(Date.now() + HOUR);
    const later = iso(Date.now() + 3 * HOUR);
    try {
      const a = await call(first, 'POST', '/api/peer', { expiresAt: soon });
      expect(a.status).to.equal(201);
      const b = await call(first, 'POST', '/api/peer');
      const keyB = encodeURIComponent((b.body['peer'] as { publicKey: string }).publicKey);
      const patched = await call(first, 'PATCH', `/api/peer/${keyB}/expiry`, { expiresAt: later });
      expect(patched.status).to.equal(200);
      expect(patched.body['message']).to.contain(`set to ${later}`);
      const bad = await call(first, 'PATCH', `/api/peer/${keyB}/expiry`, { expiresAt: 'soon' });
      expect(bad.status).to.equal(400);
      expect(bad.body['details']).to.have.length.above(0);
      const missing = await call(first, 'PATCH', `/api/peer/${keyB}/expiry`, {});
      expect(missing.status).to.equal(400);
      expect(await listed(first)).to.deep.equal([
        { expires_at: soon, expired: false },
        { expires_at: later, expired: false },
      ]);
    } finally {
      await first.shutdown();
    }
    // The host was down two hours: the first expiry passed meanwhile, the second did not.
    const afterReboot = new FakeKernel();
    afterReboot.expiryClock = () => Date.now() + 2 * HOUR;
    const rebooted = await start(afterReboot, fs.crashed(), 'boot-2');
    try {
      expect(await listed(rebooted)).to.deep.equal([
        { expires_at: soon, expired: true },
        { expires_at: later, expired: false },
      ]);
      expect(
        [...afterReboot.expiries.get('wg0')!.values()].map((e) => iso(e.expiresAt)),
      ).to.deep.equal([soon, later]);
    } finally {
      await rebooted.shutdown();
    }
  });

  it('replays expiry records: set, changed, cleared, and a whole peer record keeps it', () => {
    const k = Buffer.alloc(32, 3).toString('base64');
    const state = emptyState();
    applyRecord(state, { t: 'peer', k, ips: ['10.8.0.2/32'], limit: null, cap: null });
    applyRecord(state, { t: 'exp', k, x: NOW + HOUR });
    expect(state.peers.get(k)?.expiresAt).to.equal(NOW + HOUR);
    expect(peerRecord(state.peers.get(k)!)).to.include({ x: NOW + HOUR });
    applyRecord(state, { t: 'exp', k, x: null });
    expect(state.peers.get(k)).to.not.have.property('expiresAt');
  });
});
