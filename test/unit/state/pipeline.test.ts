/**
 * The one way to change a peer (issue 28, src/peers/pipeline.ts): what the journal holds when
 * two changes of one peer overlap, when a peer is removed behind the daemon's back, when a
 * create is announced, and when a billing period is reset. Each case was a defect of the
 * service before the pipeline (records built from flushed state at call time; a deletion behind
 * the back never recorded; the allocator looking at the device only; `peer.created` before the
 * commit; a period reset recorded after the kernel change). What a reboot would find is read by
 * reopening the state directory on what the in-memory file system made durable.
 */
import { expect } from 'chai';
import { PeerService, type PeerChange } from '../../../src/peers';
import type { SchedulerClock } from '../../../src/peers/period-scheduler';
import { StateStore } from '../../../src/state';
import { MemoryFs } from '../../support/memory-fs';
import { FakeKernel } from '../support/fake-kernel';
import { captureLog } from '../support/log-capture';
import { rejected } from '../support/rejected';
import { ManualClock } from '../support/manual-clock';

const DIR = '/var/lib/wg-peerd';

async function setUp(options: { clock?: SchedulerClock; now?: () => number } = {}) {
  const fs = new MemoryFs();
  const kernel = FakeKernel.withInterface();
  const store = await StateStore.open({ dir: DIR, interfaceName: 'wg0', fs });
  const log = captureLog();
  const published: Array<PeerChange & { durable: boolean }> = [];
  const service = new PeerService({
    kernel,
    interfaceName: 'wg0',
    endpointHost: 'vpn.example.net',
    logger: log.logger,
    journal: store,
    // Whether the peer an event names is on disk when the event goes out.
    events: {
      publish: (change) =>
        published.push({ ...change, durable: store.state.peers.has(change.publicKey) }),
    },
    ...(options.clock ? { periodClock: options.clock } : {}),
    ...(options.now ? { now: options.now } : {}),
  });
  return { fs, kernel, store, service, log, published };
}

/** What a reboot would find on disk. */
async function afterCrash(fs: MemoryFs) {
  return (await StateStore.open({ dir: DIR, interfaceName: 'wg0', fs: fs.crashed() })).state;
}

async function settle(rounds = 50): Promise<void> {
  for (let i = 0; i < rounds; i++) await new Promise((resolve) => setImmediate(resolve));
}

describe('peers/pipeline: every answered change survives, whatever the order (issue 28)', () => {
  it('keeps a raised cap when a reset of the same peer runs at once: both answered, the journal holds what the kernel holds', async () => {
    const { fs, kernel, service } = await setUp();
    const { publicKey, ip } = await service.createPeer();
    await service.setDataCap(publicKey, 1_000_000_000);
    kernel.setUsed(ip, 123_456);
    const [raised, reset] = await Promise.all([
      service.setDataCap(publicKey, 2_000_000_000),
      service.resetDataCap(publicKey),
    ]);
    expect(raised.publicKey).to.equal(publicKey);
    expect(reset.usedBytes).to.equal(123_456);
    const kernelCap = await kernel.quota.getCap('wg0', { address: ip, publicKey });
    expect(kernelCap?.quotaBytes).to.equal(2_000_000_000);
    const saved = (await afterCrash(fs)).peers.get(publicKey)?.cap;
    expect(saved).to.deep.include({ quotaBytes: 2_000_000_000, usedBytes: 0 });
  });

  it('never writes a removed cap back when a reset of the same peer then fails (409)', async () => {
    const { fs, service } = await setUp();
    const { publicKey } = await service.createPeer();
    await service.setDataCap(publicKey, 1_000_000_000);
    const [removed, reset] = await Promise.allSettled([
      service.removeDataCap(publicKey),
      service.resetDataCap(publicKey),
    ]);
    expect(removed.status).to.equal('fulfilled');
    expect(reset.status).to.equal('rejected');
    expect((reset as PromiseRejectedResult).reason).to.have.property(
      'code',
      'PEER_HAS_NO_DATA_CAP',
    );
    expect((await afterCrash(fs)).peers.get(publicKey)?.cap).to.equal(null);
  });

  it('keeps the last of two limits set at once on one peer, in the kernel and on disk alike', async () => {
    const { fs, kernel, service } = await setUp();
    const { publicKey, ip } = await service.createPeer();
    await Promise.all([
      service.setSpeedLimit(publicKey, 125_000),
      service.setSpeedLimit(publicKey, 250_000),
    ]);
    const limit = (await kernel.shaper.listLimits('wg0')).get(ip);
    expect(limit?.download).to.equal(250_000);
    expect((await afterCrash(fs)).peers.get(publicKey)?.limit).to.equal(250_000);
  });

  it('records a peer removed behind the daemon’s back as deleted once a read no longer shows it, and publishes peer.deleted once', async () => {
    const { fs, kernel, service, published, log } = await setUp();
    const { publicKey, ip } = await service.createPeer();
    await service.setDataCap(publicKey, 5_000_000);
    await kernel.wireguard.removePeers('wg0', [publicKey]); // `wg set wg0 peer K remove`
    await service.snapshot();
    await settle();
    await service.snapshot();
    await settle();
    expect((await afterCrash(fs)).peers.has(publicKey)).to.equal(false);
    const deleted = published.filter((c) => c.type === 'peer.deleted');
    expect(deleted).to.have.length(1);
    expect(deleted[0]).to.include({ publicKey, ipAddress: ip });
    // Its cap does not outlive it: no kernel object for an address no peer has.
    expect((await kernel.quota.listCaps('wg0')).has(ip)).to.equal(false);
    expect(log.lines().filter((l) => l['event'] === 'peer_deleted_behind_back')).to.have.length(1);
  });

  it('never gives a new peer the address of a peer removed behind its back before the removal is recorded', async () => {
    const { fs, kernel, service } = await setUp();
    const old = await service.createPeer();
    await kernel.wireguard.removePeers('wg0', [old.publicKey]);
    const next = await service.createPeer(); // no list read in between
    expect(next.ip).to.not.equal(old.ip);
    const state = await afterCrash(fs);
    const addresses = [...state.peers.values()].flatMap((p) => p.allowedIps);
    expect(new Set(addresses).size).to.equal(addresses.length);
  });

  it('does not record a deletion for a peer whose create reached the kernel while a list read was in flight', async () => {
    const { fs, kernel, service } = await setUp();
    await service.createPeer();
    // The list's dump is taken, then held: it shows the device as it was before the create.
    const release = kernel.hold('wireguard.getDevice');
    const list = service.snapshot();
    await settle();
    const created = await service.createPeer();
    release();
    const snapshot = await list;
    expect(snapshot.device.peers.map((p) => p.publicKey)).to.not.include(created.publicKey);
    await settle();
    expect((await afterCrash(fs)).peers.has(created.publicKey)).to.equal(true);
  });

  it('does not record the peers of an interface recreated under the daemon as deleted: a restart puts them back', async () => {
    const { fs, kernel, service } = await setUp();
    const { publicKey } = await service.createPeer();
    const link = await kernel.link.getLink('wg0');
    await kernel.link.deleteLink(link.index);
    kernel.addInterface();
    await service.snapshot();
    await settle();
    expect((await afterCrash(fs)).peers.has(publicKey)).to.equal(true);
  });

  it('keeps the plan the journal holds when a cap alone is set on a peer whose cap nft lost (a flushed ruleset)', async () => {
    const { fs, kernel, service } = await setUp();
    const { publicKey, ip } = await service.createPeer();
    await service.setDataCap(publicKey, {
      quotaBytes: 1_000_000,
      period: 'day',
      periodStart: '2026-03-01T00:00:00Z',
    });
    kernel.loseAllCaps(); // `nft flush ruleset` (systemctl reload nftables)
    await service.setDataCap(publicKey, 2_000_000); // a field left out keeps its value
    const cap = await kernel.quota.getCap('wg0', { address: ip, publicKey });
    expect(cap?.quotaBytes).to.equal(2_000_000);
    expect(cap?.plan?.period).to.equal('day');
    expect((await afterCrash(fs)).peers.get(publicKey)?.cap?.plan?.period).to.equal('day');
  });

  it('restores a cap nft lost with the plan the journal holds, though the daemon has not read it since it started (a reset, then a flush, then a reset)', async () => {
    const { store, kernel, service, log } = await setUp();
    const { publicKey, ip } = await service.createPeer();
    await service.setDataCap(publicKey, {
      quotaBytes: 1_000_000,
      period: 'day',
      periodStart: '2026-03-01T00:00:00Z',
    });
    // A restarted daemon: the journal holds the plan, the new service has seen no cap yet.
    const restarted = new PeerService({
      kernel,
      interfaceName: 'wg0',
      endpointHost: 'vpn.example.net',
      logger: log.logger,
      journal: store,
    });
    await restarted.resetDataCap(publicKey);
    kernel.loseAllCaps(); // `nft flush ruleset`
    await restarted.resetDataCap(publicKey); // repairs the cap first
    const cap = await kernel.quota.getCap('wg0', { address: ip, publicKey });
    expect(cap?.plan?.period).to.equal('day');
    expect(store.state.peers.get(publicKey)?.cap?.plan?.period).to.equal('day');
  });

  it('keeps a delete on disk as a tombstone until its kernel change has ended, so a restart after a crash in between finishes it', async () => {
    const { fs, kernel, store, service } = await setUp();
    const { publicKey } = await service.createPeer();
    const release = kernel.hold('removePeers');
    const deleted = service.deletePeer(publicKey);
    await settle();
    const during = await afterCrash(fs);
    expect(during.peers.has(publicKey)).to.equal(false);
    expect([...(during.tombstones ?? [])]).to.deep.equal([publicKey]);
    expect(store.state.tombstones?.has(publicKey)).to.equal(true); // the kernel has not answered
    release();
    await deleted;
    expect(store.state.tombstones?.has(publicKey) ?? false).to.equal(false);
  });

  it('publishes peer.created only once the create is on disk', async () => {
    const { service, published } = await setUp();
    await Promise.all([service.createPeer(), service.createPeer(), service.createPeer()]);
    const created = published.filter((c) => c.type === 'peer.created');
    expect(created).to.have.length(3);
    expect(created.every((c) => c.durable)).to.equal(true);
  });

  it('answers a change of a peer whose record cannot be written with 507, and changes nothing in the kernel', async () => {
    const { fs, kernel, service } = await setUp();
    const { publicKey, ip } = await service.createPeer();
    fs.capacity = 0;
    const error = await rejected(service.setSpeedLimit(publicKey, 125_000));
    expect(error).to.have.property('code', 'STATE_WRITE_FAILED');
    expect((await kernel.shaper.listLimits('wg0')).has(ip)).to.equal(false);
  });

  it('answers 507 STATE_WRITE_UNCERTAIN, not "nothing was changed", when a record written but not flushed can be neither cut back nor rewritten away (a restart could read it)', async () => {
    const { fs, kernel, service } = await setUp();
    const { publicKey, ip } = await service.createPeer();
    fs.fail('sync', 'EIO');
    fs.fail('truncate', 'EIO');
    fs.fail('create', 'EIO', { path: 'journal.new' });
    const error = await rejected(service.setSpeedLimit(publicKey, 125_000));
    expect(error).to.have.property('code', 'STATE_WRITE_UNCERTAIN');
    expect((await kernel.shaper.listLimits('wg0')).has(ip)).to.equal(false);
  });

  it('answers 507 STATE_WRITE_FAILED when the cut-back fails but a rewrite from memory takes the record away at once', async () => {
    const { fs, kernel, service } = await setUp();
    const { publicKey, ip } = await service.createPeer();
    fs.fail('sync', 'EIO');
    fs.fail('truncate', 'EIO');
    const error = await rejected(service.setSpeedLimit(publicKey, 125_000));
    expect(error).to.have.property('code', 'STATE_WRITE_FAILED');
    expect((await kernel.shaper.listLimits('wg0')).has(ip)).to.equal(false);
    const killed = await StateStore.open({ dir: DIR, interfaceName: 'wg0', fs: fs.killed() });
    expect(killed.state.peers.get(publicKey)?.limit).to.equal(null);
  });
});

describe('peers/pipeline: a billing-period reset is recorded before the kernel makes it (issue 28)', () => {
  it('has the reset on disk while the kernel is still zeroing the quota, so a crash then never closes the period twice', async () => {
    const clock = new ManualClock(Date.parse('2026-03-01T23:59:00Z'));
    const { fs, kernel, service, published } = await setUp({ clock, now: () => clock.time });
    const { publicKey, ip } = await service.createPeer();
    await service.setDataCap(publicKey, {
      quotaBytes: 10_000,
      period: 'day',
      periodStart: '2026-03-01T00:00:00Z',
    });
    kernel.setUsed(ip, 4_000);
    await service.snapshot(); // hands the plan to the scheduler
    const release = kernel.hold('quota.resetPeriod');
    const due = Date.parse('2026-03-02T00:00:00Z');
    await clock.runAt(due);
    // The kernel change is held: a crash now finds the new period on disk already.
    const during = (await afterCrash(fs)).peers.get(publicKey)?.cap;
    expect(during?.usedBytes).to.equal(0);
    expect(during?.plan?.periodFrom).to.equal(due);
    expect(published.filter((c) => c.type === 'peer.cap_reset')).to.have.length(0);
    release();
    await settle();
    const after = (await afterCrash(fs)).peers.get(publicKey)?.cap;
    expect(after?.plan).to.deep.include({ periodFrom: due, previousUsedBytes: 4_000 });
    const resets = published.filter((c) => c.type === 'peer.cap_reset');
    expect(resets).to.have.length(1);
    expect(resets[0]?.details).to.deep.include({ used_bytes: 4_000, origin: 'period' });
  });
});
