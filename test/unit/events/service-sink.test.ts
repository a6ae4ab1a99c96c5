import { expect } from 'chai';
import { Events, type StoredEvent } from '../../../src/events';
import { PeerService, type PeerChange, type PeerSnapshot } from '../../../src/peers';
import { FakeKernel } from '../support/fake-kernel';
import { captureLog } from '../support/log-capture';

/** The room wired to a PeerService over the fake kernel, as the daemon wires them. */
function wired() {
  const kernel = FakeKernel.withInterface();
  const log = captureLog();
  const events: Events = new Events({
    interfaceName: 'wg0',
    historySize: 100,
    snapshot: (): Promise<PeerSnapshot> => service.snapshot(),
    listMaxAgeMs: 1000,
    logger: log.logger,
  });
  const service: PeerService = new PeerService({
    kernel,
    interfaceName: 'wg0',
    endpointHost: 'vpn.example.net',
    logger: log.logger,
    events: events.sink,
  });
  return { kernel, events, service };
}

describe('events: changes made through the daemon are published when made', () => {
  it("PeerService tells its sink of each change, beside the change's log line, in order", async () => {
    const kernel = FakeKernel.withInterface();
    const log = captureLog();
    const changes: PeerChange[] = [];
    const service: PeerService = new PeerService({
      kernel,
      interfaceName: 'wg0',
      endpointHost: 'vpn.example.net',
      logger: log.logger,
      events: { publish: (c) => changes.push(c) },
    });
    const created = await service.createPeer();
    const key = created.publicKey;
    const ip = created.ip;
    await service.setSpeedLimit(key, 125_000);
    await service.removeSpeedLimit(key);
    await service.setDataCap(key, 1_000_000);
    await service.removeDataCap(key);
    await service.deletePeer(key);
    expect(changes).to.deep.equal([
      { type: 'peer.created', publicKey: key, ipAddress: ip },
      {
        type: 'peer.limit_changed',
        publicKey: key,
        ipAddress: ip,
        details: { bytes_per_second: 125_000 },
      },
      {
        type: 'peer.limit_changed',
        publicKey: key,
        ipAddress: ip,
        details: { bytes_per_second: null },
      },
      {
        type: 'peer.cap_changed',
        publicKey: key,
        ipAddress: ip,
        details: { quota_bytes: 1_000_000, throttle_bytes_per_second: null },
      },
      { type: 'peer.cap_changed', publicKey: key, ipAddress: ip, details: { quota_bytes: null } },
      { type: 'peer.deleted', publicKey: key, ipAddress: ip },
    ]);
    // Each one beside a log line of the same change.
    const logged = log
      .lines()
      .map((l) => l.event)
      .filter((e) => e !== undefined);
    expect(logged).to.include.members([
      'peer_created',
      'speed_limit_set',
      'speed_limit_removed',
      'data_cap_set',
      'data_cap_removed',
      'peer_deleted',
    ]);
  });

  it('publishes peer.suspended and peer.resumed through the room, with origin api', async () => {
    const { events, service } = wired();
    const created = await service.createPeer();
    const seen: StoredEvent[] = [];
    events.hub.subscribe((e) => seen.push(e));
    await service.setSuspension(created.publicKey, true);
    await service.setSuspension(created.publicKey, false);
    expect(
      seen.map((e) => {
        const data = JSON.parse(e.json) as Record<string, unknown>;
        return [e.type, data.public_key, data.ip_address, data.origin];
      }),
    ).to.deep.equal([
      ['peer.suspended', created.publicKey, created.ip, 'api'],
      ['peer.resumed', created.publicKey, created.ip, 'api'],
    ]);
    events.close();
  });

  it('a failed change publishes nothing', async () => {
    const kernel = FakeKernel.withInterface();
    const changes: PeerChange[] = [];
    const service: PeerService = new PeerService({
      kernel,
      interfaceName: 'wg0',
      logger: captureLog().logger,
      events: { publish: (c) => changes.push(c) },
    });
    await service.deletePeer(Buffer.alloc(32, 1).toString('base64')).catch(() => {});
    expect(changes).to.deep.equal([]);
  });

  it('through the room: a stream-level event with origin api, and the watcher does not report it again', async () => {
    const { events, service } = wired();
    const seen: StoredEvent[] = [];
    events.hub.subscribe((e) => seen.push(e));
    await events.watcher.poll(); // baseline: no peer
    const created = await service.createPeer();
    await events.watcher.poll();
    await service.deletePeer(created.publicKey);
    await events.watcher.poll();
    expect(seen.map((e) => [e.type, JSON.parse(e.json).origin])).to.deep.equal([
      ['peer.created', 'api'],
      ['peer.deleted', 'api'],
    ]);
    events.close();
  });

  it("through the room: a cap the shared read finds used up is peer.cap_exhausted once, and the kernel's late notice adds nothing", async () => {
    const { kernel, events, service } = wired();
    const created = await service.createPeer();
    await service.setDataCap(created.publicKey, 1_000_000);
    const seen: StoredEvent[] = [];
    events.hub.subscribe((e) => seen.push(e));
    await events.watcher.poll(); // baseline
    kernel.setUsed(created.ip, 1_000_000);
    await events.watcher.poll();
    await events.watcher.poll();
    // 6.12 sends the quota's notice only with the next nf_tables commit.
    events.capExhausted({
      address: created.ip,
      publicKey: created.publicKey,
      quotaBytes: 1_000_000,
      usedBytes: 1_000_000,
    });
    const exhausted = seen.filter((e) => e.type === 'peer.cap_exhausted');
    expect(exhausted).to.have.length(1);
    expect(JSON.parse(exhausted[0]!.json)).to.include({
      public_key: created.publicKey,
      ip_address: created.ip,
      quota_bytes: 1_000_000,
      used_bytes: 1_000_000,
    });
    events.close();
  });

  it('a cap that throttles: its exhaustion is peer.cap_exhausted, then peer.throttled with the rate, once', async () => {
    const { kernel, events, service } = wired();
    const created = await service.createPeer();
    await service.setDataCap(created.publicKey, {
      quotaBytes: 1_000_000,
      afterCap: 'throttle',
      throttleBytesPerSecond: 20_000,
    });
    const seen: StoredEvent[] = [];
    events.hub.subscribe((e) => seen.push(e));
    await events.watcher.poll(); // baseline
    // The kernel's notice (6.1: with the packet that used the cap up), from the object's record.
    events.capExhausted({
      address: created.ip,
      publicKey: created.publicKey,
      quotaBytes: 1_000_000,
      usedBytes: 1_000_000,
      throttleBytesPerSecond: 20_000,
    });
    kernel.setUsed(created.ip, 1_000_000);
    await events.watcher.poll(); // the shared read sees it too: nothing more
    const types = seen.map((e) => e.type).filter((t) => t !== 'peer.cap_changed');
    expect(types).to.deep.equal(['peer.cap_exhausted', 'peer.throttled']);
    expect(JSON.parse(seen.find((e) => e.type === 'peer.throttled')!.json)).to.include({
      public_key: created.publicKey,
      ip_address: created.ip,
      quota_bytes: 1_000_000,
      throttle_bytes_per_second: 20_000,
    });
    events.close();
  });

  it('a cap that throttles, found used up by the shared read (6.12 holds the notice back): peer.throttled too', async () => {
    const { kernel, events, service } = wired();
    const created = await service.createPeer();
    await service.setDataCap(created.publicKey, {
      quotaBytes: 1_000_000,
      afterCap: 'throttle',
      throttleBytesPerSecond: 20_000,
    });
    const seen: StoredEvent[] = [];
    events.hub.subscribe((e) => seen.push(e));
    await events.watcher.poll(); // baseline
    kernel.setUsed(created.ip, 1_000_000);
    await events.watcher.poll();
    expect(seen.map((e) => e.type)).to.deep.equal(['peer.cap_exhausted', 'peer.throttled']);
    events.close();
  });
});
