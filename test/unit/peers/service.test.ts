import { expect } from 'chai';
import sinon from 'sinon';
import nacl from 'tweetnacl';
import { FacilityUnavailableError, SetupConflictError } from '../../../src/kernel/errors';
import {
  CleanupFailedError,
  EndpointUnknownError,
  FacilityMissingError,
  HostSetupConflictError,
  InterfaceMissingError,
  InterfaceNotReadyError,
  KernelFailureError,
  PeerNotFoundError,
  PeerService,
  PeerWithoutAddressError,
  PoolExhaustedError,
  ValidationError,
} from '../../../src/peers';
import { listPeers, type PeerEntry } from '../../support/peer-list';
import { FakeKernel, kernelFailure } from '../support/fake-kernel';
import { captureLog } from '../support/log-capture';
import { rejected } from '../support/rejected';

const NOW = Date.parse('2026-03-01T12:00:00.000Z');

function key(n: number): string {
  return Buffer.alloc(32, n).toString('base64');
}

function service(
  kernel: FakeKernel,
  extra: Partial<ConstructorParameters<typeof PeerService>[0]> = {},
) {
  const log = captureLog();
  const svc = new PeerService({
    kernel,
    interfaceName: 'wg0',
    logger: log.logger,
    now: () => NOW,
    ...extra,
  });
  return { svc, log };
}

describe('peers/service: list', () => {
  it('reports the five SPEC §2.1 fields and the added ones', async () => {
    const kernel = FakeKernel.withInterface();
    kernel.putPeer(key(1), ['10.8.0.2/32'], {
      lastHandshake: new Date(NOW - 90_000),
      endpoint: '198.51.100.7:40000',
      rxBytes: 1234,
      txBytes: 5678,
      persistentKeepalive: 25,
    });
    const { svc } = service(kernel);
    const [entry] = await listPeers(svc, null);
    expect(entry).to.deep.equal({
      publicKey: key(1),
      ipAddress: '10.8.0.2',
      ipv6Address: null,
      lastHandshake: '2026-03-01T11:58:30.000Z',
      minutesSinceHandshake: 1,
      status: 'ALIVE',
      allowedIps: ['10.8.0.2/32'],
      endpoint: '198.51.100.7:40000',
      rxBytes: 1234,
      txBytes: 5678,
      persistentKeepalive: 25,
      presharedKey: false,
      speedLimitBytesPerSecond: null,
      speedLimitHolds: null,
      dataCap: null,
      suspended: false,
      exhaustedAt: null,
      capReadAt: null,
      name: null,
      expiresAt: null,
      expired: false,
    } satisfies PeerEntry);
  });

  it('gives null handshake fields and "No handshake yet" for a peer that never shook hands', async () => {
    const kernel = FakeKernel.withInterface();
    kernel.putPeer(key(1), ['10.8.0.2/32']);
    const [entry] = await listPeers(service(kernel).svc, null);
    expect(entry).to.include({
      status: 'No handshake yet',
      lastHandshake: null,
      minutesSinceHandshake: null,
    });
  });

  it('puts the ALIVE/DEAD boundary at exactly 150 s (injected clock)', async () => {
    const kernel = FakeKernel.withInterface();
    kernel.putPeer(key(1), ['10.8.0.2/32'], { lastHandshake: new Date(NOW - 150_000) });
    kernel.putPeer(key(2), ['10.8.0.3/32'], { lastHandshake: new Date(NOW - 151_000) });
    const entries = await listPeers(service(kernel).svc, null);
    expect(entries.map((e) => e.status)).to.deep.equal(['ALIVE', 'DEAD']);
  });

  it('reads the clock per request: the same peer turns DEAD once 150 s pass (sinon fake timers)', async () => {
    const clock = sinon.useFakeTimers({ now: NOW, toFake: ['Date'] });
    try {
      const kernel = FakeKernel.withInterface();
      kernel.putPeer(key(1), ['10.8.0.2/32'], { lastHandshake: new Date(NOW) });
      const log = captureLog();
      const svc = new PeerService({ kernel, interfaceName: 'wg0', logger: log.logger });
      clock.tick(150_000);
      expect((await listPeers(svc, null))[0]!.status).to.equal('ALIVE');
      clock.tick(1_000);
      expect((await listPeers(svc, null))[0]!.status).to.equal('DEAD');
      expect((await listPeers(svc, null))[0]!.minutesSinceHandshake).to.equal(2);
    } finally {
      clock.restore();
    }
  });

  it('filters by ALIVE and DEAD; "No handshake yet" peers match neither', async () => {
    const kernel = FakeKernel.withInterface();
    kernel.putPeer(key(1), ['10.8.0.2/32'], { lastHandshake: new Date(NOW - 10_000) });
    kernel.putPeer(key(2), ['10.8.0.3/32'], { lastHandshake: new Date(NOW - 600_000) });
    kernel.putPeer(key(3), ['10.8.0.4/32']);
    const { svc } = service(kernel);
    expect((await listPeers(svc, 'ALIVE')).map((e) => e.publicKey)).to.deep.equal([key(1)]);
    expect((await listPeers(svc, 'DEAD')).map((e) => e.publicKey)).to.deep.equal([key(2)]);
    expect(await listPeers(svc, null)).to.have.length(3);
  });

  it('shows the speed limit and the data cap with bytes used, read from the kernel', async () => {
    const kernel = FakeKernel.withInterface();
    kernel.putPeer(key(1), ['10.8.0.2/32']);
    kernel.putPeer(key(2), ['10.8.0.3/32']);
    const { svc } = service(kernel);
    await svc.setSpeedLimit(key(1), 200_000);
    await svc.setDataCap(key(1), 1_000_000);
    kernel.setUsed('10.8.0.2', 4096);
    const [one, two] = await listPeers(svc, null);
    expect(one).to.include({ speedLimitBytesPerSecond: 200_000 });
    expect(one!.dataCap).to.deep.equal({ quotaBytes: 1_000_000, usedBytes: 4096, enforced: true });
    expect(two).to.include({ speedLimitBytesPerSecond: null, dataCap: null });
  });

  it('gives ip_address null for a peer without an IPv4 /32 allowed IP and lists its prefixes', async () => {
    const kernel = FakeKernel.withInterface();
    kernel.putPeer(key(1), ['192.168.50.0/24', 'fd00::/64']);
    const [entry] = await listPeers(service(kernel).svc, null);
    expect(entry).to.include({ ipAddress: null });
    expect(entry!.allowedIps).to.deep.equal(['192.168.50.0/24', 'fd00::/64']);
  });

  it('still lists peers when the kernel has no tc or nf_tables support (no limits, no caps)', async () => {
    const kernel = FakeKernel.withInterface();
    kernel.putPeer(key(1), ['10.8.0.2/32']);
    kernel.fail('shaper.listLimits', new FacilityUnavailableError('HTB', 'modprobe sch_htb'));
    kernel.fail(
      'quota.listCaps',
      new FacilityUnavailableError('nfnetlink (NETLINK_NETFILTER sockets)', 'modprobe nf_tables'),
    );
    const [entry] = await listPeers(service(kernel).svc, null);
    expect(entry).to.include({ speedLimitBytesPerSecond: null, dataCap: null });
  });

  it('fails with a kernel failure carrying the kernel text when the limits dump fails otherwise', async () => {
    const kernel = FakeKernel.withInterface();
    kernel.fail('shaper.listLimits', kernelFailure('EINVAL', 'RTM_GETTCLASS wg0', 'bad handle'));
    const error = await rejected(listPeers(service(kernel).svc, null));
    expect(error).to.be.instanceOf(KernelFailureError);
    expect((error as Error).message).to.contain('bad handle');
  });

  it('answers InterfaceMissing whatever read fails first: tc refuses before WireGuard answers', async () => {
    // The interface is gone; the tc dump fails first with a refusal of its own, the WireGuard
    // read fails later with the missing interface. The answer must not depend on that order.
    const kernel = new FakeKernel();
    kernel.fail(
      'shaper.listLimits',
      kernelFailure('EINVAL', 'RTM_GETTCLASS dev wg0', 'Cannot find specified qdisc'),
    );
    const getDevice = kernel.wireguard.getDevice.bind(kernel.wireguard);
    kernel.wireguard.getDevice = async (name) => {
      await new Promise((resolve) => setImmediate(resolve));
      await new Promise((resolve) => setImmediate(resolve));
      return getDevice(name);
    };
    const error = await rejected(listPeers(service(kernel).svc, null));
    expect(error).to.be.instanceOf(InterfaceMissingError);
    expect(kernel.count('shaper.listLimits')).to.equal(1);
  });

  it('answers InterfaceMissing (503 family) when the interface is gone', async () => {
    const kernel = new FakeKernel();
    const error = await rejected(listPeers(service(kernel).svc, null));
    expect(error).to.be.instanceOf(InterfaceMissingError);
    expect(error).to.have.property('category', 'unavailable');
    expect((error as Error).message).to.contain('wg0');
  });
});

describe('peers/service: list single-flight (DESIGN §5)', () => {
  it('shares one dump between concurrent list calls', async () => {
    const kernel = FakeKernel.withInterface();
    kernel.putPeer(key(1), ['10.8.0.2/32']);
    const { svc } = service(kernel);
    const release = kernel.hold('getDevice');
    const calls = [listPeers(svc, null), listPeers(svc, 'ALIVE'), listPeers(svc, null)];
    await new Promise((resolve) => setTimeout(resolve, 5));
    release();
    const [all, alive, again] = await Promise.all(calls);
    expect(kernel.count('getDevice')).to.equal(1);
    expect(kernel.count('shaper.listLimits')).to.equal(1);
    expect(kernel.count('quota.listCaps')).to.equal(1);
    expect(all).to.have.length(1);
    expect(alive).to.have.length(0);
    expect(again).to.deep.equal(all);
  });

  it('keeps nothing once the dump is done: the next call dumps again', async () => {
    const kernel = FakeKernel.withInterface();
    const { svc } = service(kernel);
    await listPeers(svc, null);
    kernel.putPeer(key(1), ['10.8.0.2/32']);
    expect(await listPeers(svc, null)).to.have.length(1);
    expect(kernel.count('getDevice')).to.equal(2);
  });

  it('never hands a dump started before a completed change to a caller after it', async () => {
    const kernel = FakeKernel.withInterface();
    const { svc } = service(kernel, { endpointHost: 'vpn.example.net' });
    const release = kernel.hold('getDevice');
    const early = listPeers(svc, null); // dump in flight, taken before the create
    await new Promise((resolve) => setTimeout(resolve, 5));
    // The create's own reads must not wait for the held dump; hold applies to the first call only.
    const created = await svc.createPeer();
    const late = await listPeers(svc, null);
    expect(late.map((e) => e.publicKey)).to.deep.equal([created.publicKey]);
    release();
    expect(await early).to.deep.equal([]);
  });
});

describe('peers/service: the freshness window (--list-max-age, DESIGN §5)', () => {
  /** A service with a 1000 ms window on a clock the test moves, over one peer at 10.8.0.2. */
  function windowed() {
    const kernel = FakeKernel.withInterface();
    kernel.putPeer(key(1), ['10.8.0.2/32']);
    let clock = 0;
    const { svc } = service(kernel, {
      endpointHost: 'vpn.example.net',
      listMaxAgeMs: 1000,
      monotonicNow: () => clock,
    });
    const advance = (ms: number): void => {
      clock += ms;
    };
    return { kernel, svc, advance, reads: () => kernel.count('getDevice') };
  }

  it('answers from the completed read within the window and reads afresh after it', async () => {
    const { kernel, svc, advance, reads } = windowed();
    const first = await svc.snapshot();
    kernel.putPeer(key(2), ['10.8.0.3/32']); // a change the daemon did not make
    advance(999);
    expect(await svc.snapshot()).to.equal(first);
    expect(reads()).to.equal(1);
    advance(1);
    const second = await svc.snapshot();
    expect(second).to.not.equal(first);
    expect(second.device.peers).to.have.length(2);
  });

  const writes: Array<[string, (svc: PeerService) => Promise<unknown>]> = [
    ['create', (svc) => svc.createPeer()],
    ['delete', (svc) => svc.deletePeer(key(1))],
    ['set limit', (svc) => svc.setSpeedLimit(key(1), 125_000)],
    ['remove limit', (svc) => svc.removeSpeedLimit(key(1))],
    ['set cap', (svc) => svc.setDataCap(key(1), 2_000_000)],
    ['remove cap', (svc) => svc.removeDataCap(key(1))],
  ];
  for (const [name, write] of writes) {
    it(`ends the window at once on ${name}`, async () => {
      const { svc } = windowed();
      const before = await svc.snapshot();
      await write(svc);
      const after = await svc.snapshot();
      expect(after).to.not.equal(before);
      expect(after.takenAt).to.be.a('number');
    });
  }

  it('ends the window on a failed write too', async () => {
    const { svc, reads } = windowed();
    const before = await svc.snapshot();
    const error = await rejected(svc.deletePeer(key(9)));
    expect(error).to.be.instanceOf(PeerNotFoundError);
    const after = await svc.snapshot();
    expect(after).to.not.equal(before);
    expect(reads()).to.equal(3); // list, the delete's lookup, list again
  });

  it('lists what a write changed at once, inside the window', async () => {
    const { svc } = windowed();
    await listPeers(svc, null);
    const created = await svc.createPeer();
    expect((await listPeers(svc, null)).map((p) => p.publicKey)).to.include(created.publicKey);
    await svc.setSpeedLimit(created.publicKey, 125_000);
    const limited = (await listPeers(svc, null)).find((p) => p.publicKey === created.publicKey);
    expect(limited?.speedLimitBytesPerSecond).to.equal(125_000);
    await svc.deletePeer(created.publicKey);
    expect((await listPeers(svc, null)).map((p) => p.publicKey)).to.not.include(created.publicKey);
  });
});

describe('peers/service: create', () => {
  it('adds a peer with the lowest free address as its only allowed IP /32', async () => {
    const kernel = FakeKernel.withInterface();
    kernel.putPeer(key(1), ['10.8.0.2/32']);
    const { svc } = service(kernel, { endpointHost: 'vpn.example.net' });
    const created = await svc.createPeer();
    expect(created.ip).to.equal('10.8.0.3');
    const inKernel = kernel.peers().find((p) => p.publicKey === created.publicKey);
    expect(inKernel?.allowedIps).to.deep.equal([{ family: 4, address: '10.8.0.3', cidr: 32 }]);
  });

  it("returns a private key that belongs to the public key, and the server's own key and endpoint", async () => {
    const kernel = FakeKernel.withInterface({ listenPort: 51999 });
    const { svc } = service(kernel, { endpointHost: 'vpn.example.net' });
    const created = await svc.createPeer();
    const derived = nacl.scalarMult.base(Buffer.from(created.privateKey, 'base64'));
    expect(Buffer.from(derived).toString('base64')).to.equal(created.publicKey);
    expect(created.serverPublicKey).to.equal(kernel.serverPublicKey());
    expect(created.endpoint).to.equal('vpn.example.net:51999');
  });

  it("takes the endpoint host from the host's primary IPv4 address when none is configured", async () => {
    const kernel = FakeKernel.withInterface();
    kernel.primaryAddress = '192.0.2.44';
    const created = await service(kernel).svc.createPeer();
    expect(created.endpoint).to.equal('192.0.2.44:51820');
  });

  it('brackets an IPv6 endpoint host', async () => {
    const kernel = FakeKernel.withInterface();
    const created = await service(kernel, { endpointHost: '2001:db8::1' }).svc.createPeer();
    expect(created.endpoint).to.equal('[2001:db8::1]:51820');
  });

  it('fails with EndpointUnknown, adding nothing, when there is neither a host nor a default route', async () => {
    const kernel = FakeKernel.withInterface();
    kernel.primaryAddress = null;
    const error = await rejected(service(kernel).svc.createPeer());
    expect(error).to.be.instanceOf(EndpointUnknownError);
    expect((error as Error).message).to.contain('--endpoint-host');
    expect(kernel.peers()).to.have.length(0);
  });

  it('renders a wg-quick client config from the same values', async () => {
    const kernel = FakeKernel.withInterface();
    const created = await service(kernel, { endpointHost: 'vpn.example.net' }).svc.createPeer();
    expect(created.clientConfig).to.contain(`PrivateKey = ${created.privateKey}`);
    expect(created.clientConfig).to.contain('Address = 10.8.0.2/32');
    expect(created.clientConfig).to.contain(`PublicKey = ${created.serverPublicKey}`);
    expect(created.clientConfig).to.contain('Endpoint = vpn.example.net:51820');
    expect(created.clientConfig).to.contain('AllowedIPs = 10.8.0.0/24');
    expect(created.clientConfig).to.contain('PersistentKeepalive = 25');
  });

  it('answers PoolExhausted (409 family) for a full subnet and adds nothing', async () => {
    const kernel = FakeKernel.withInterface({ address: '10.8.0.1', prefixLength: 30 });
    kernel.putPeer(key(1), ['10.8.0.2/32']);
    const error = await rejected(service(kernel, { endpointHost: 'h' }).svc.createPeer());
    expect(error).to.be.instanceOf(PoolExhaustedError);
    expect(error).to.have.property('category', 'conflict');
    expect((error as Error).message).to.contain('10.8.0.0/30');
    expect(kernel.peers()).to.have.length(1);
  });

  it('answers InterfaceMissing when the interface is gone', async () => {
    const error = await rejected(service(new FakeKernel(), { endpointHost: 'h' }).svc.createPeer());
    expect(error).to.be.instanceOf(InterfaceMissingError);
  });

  it('answers InterfaceNotReady when the interface has no IPv4 address or no key', async () => {
    const noAddress = FakeKernel.withInterface({ withAddress: false });
    expect(await rejected(service(noAddress, { endpointHost: 'h' }).svc.createPeer()))
      .to.be.instanceOf(InterfaceNotReadyError)
      .with.property('code', 'INTERFACE_HAS_NO_ADDRESS');
    const noKey = FakeKernel.withInterface({ withKey: false });
    expect(await rejected(service(noKey, { endpointHost: 'h' }).svc.createPeer()))
      .to.be.instanceOf(InterfaceNotReadyError)
      .with.property('code', 'INTERFACE_HAS_NO_KEY');
  });

  it('gives 100 concurrent creates 100 distinct addresses, all held by their peers in the kernel', async () => {
    const kernel = FakeKernel.withInterface();
    const { svc } = service(kernel, { endpointHost: 'h' });
    const created = await Promise.all(Array.from({ length: 100 }, () => svc.createPeer()));
    const ips = created.map((c) => c.ip);
    expect(new Set(ips).size).to.equal(100);
    const expected = Array.from({ length: 100 }, (_, i) => `10.8.0.${i + 2}`);
    expect([...ips].sort()).to.deep.equal([...expected].sort());
    // The fake moves an allowed IP given twice, as WireGuard does: every peer must still hold its own.
    const peers = kernel.peers();
    expect(peers).to.have.length(100);
    for (const c of created) {
      const peer = peers.find((p) => p.publicKey === c.publicKey);
      expect(peer?.allowedIps).to.deep.equal([{ family: 4, address: c.ip, cidr: 32 }]);
    }
  });

  it('removes a speed limit or data cap left behind on the address before giving it out', async () => {
    const kernel = FakeKernel.withInterface();
    kernel.limits.set('wg0', new Map([['10.8.0.2', { bytesPerSecond: 5000, publicKey: key(9) }]]));
    kernel.caps.set(
      'wg0',
      new Map([['10.8.0.2', { quotaBytes: 10, usedBytes: 10, publicKey: key(9) }]]),
    );
    const created = await service(kernel, { endpointHost: 'h' }).svc.createPeer();
    expect(created.ip).to.equal('10.8.0.2');
    expect(kernel.limits.get('wg0')!.has('10.8.0.2')).to.equal(false);
    expect(kernel.caps.get('wg0')!.has('10.8.0.2')).to.equal(false);
  });

  it('still creates peers on a kernel without tc or nf_tables', async () => {
    const kernel = FakeKernel.withInterface();
    kernel.fail('shaper.listLimits', new FacilityUnavailableError('HTB', 'modprobe sch_htb'));
    kernel.fail(
      'quota.listCaps',
      new FacilityUnavailableError('nfnetlink (NETLINK_NETFILTER sockets)', 'modprobe nf_tables'),
    );
    const created = await service(kernel, { endpointHost: 'h' }).svc.createPeer();
    expect(created.ip).to.equal('10.8.0.2');
  });

  it('creates and deletes peers when removing limits or caps is not possible but none exist', async () => {
    const kernel = FakeKernel.withInterface();
    const unbuilt = new Error('speed limiting is not built yet');
    kernel.fail('shaper.removeLimit', unbuilt, false);
    kernel.fail('quota.removeCap', unbuilt, false);
    const { svc } = service(kernel, { endpointHost: 'h' });
    const created = await svc.createPeer();
    await svc.deletePeer(created.publicKey);
    expect(kernel.peers()).to.have.length(0);
  });

  it('turns a refused addPeers into a kernel failure carrying the extended-ACK text', async () => {
    const kernel = FakeKernel.withInterface();
    kernel.fail('addPeers', kernelFailure('EINVAL', 'WG_CMD_SET_DEVICE wg0', 'invalid allowed IP'));
    const error = await rejected(service(kernel, { endpointHost: 'h' }).svc.createPeer());
    expect(error).to.be.instanceOf(KernelFailureError);
    expect((error as Error).message).to.contain('invalid allowed IP');
    expect((error as Error).message).to.contain('WG_CMD_SET_DEVICE wg0');
  });

  it('lets the next create go ahead after one failed (the lock is released)', async () => {
    const kernel = FakeKernel.withInterface();
    const { svc } = service(kernel, { endpointHost: 'h' });
    kernel.fail('addPeers', kernelFailure('ENOMEM', 'WG_CMD_SET_DEVICE wg0'));
    await rejected(svc.createPeer());
    expect((await svc.createPeer()).ip).to.equal('10.8.0.2');
  });

  it('logs the change with public key and ip, never the private key', async () => {
    const kernel = FakeKernel.withInterface();
    const { svc, log } = service(kernel, { endpointHost: 'h' });
    const created = await svc.createPeer();
    const line = log.lines().find((l) => l['event'] === 'peer_created');
    expect(line).to.include({ publicKey: created.publicKey, ip: created.ip, interface: 'wg0' });
    expect(log.text()).to.not.contain(created.privateKey);
  });
});

describe('peers/service: delete', () => {
  it('removes the peer and its speed limit and data cap', async () => {
    const kernel = FakeKernel.withInterface();
    kernel.putPeer(key(1), ['10.8.0.2/32']);
    kernel.putPeer(key(2), ['10.8.0.3/32']);
    const { svc } = service(kernel);
    await svc.setSpeedLimit(key(1), 10_000);
    await svc.setDataCap(key(1), 10_000);
    await svc.setSpeedLimit(key(2), 10_000);
    expect(await svc.deletePeer(key(1))).to.deep.equal({ publicKey: key(1), ip: '10.8.0.2' });
    expect(kernel.peers().map((p) => p.publicKey)).to.deep.equal([key(2)]);
    expect([...kernel.limits.get('wg0')!.keys()]).to.deep.equal(['10.8.0.3']);
    expect(kernel.caps.get('wg0')!.size).to.equal(0);
  });

  it('answers PeerNotFound ("Peer not found in VPN") for an unknown key and for a second delete', async () => {
    const kernel = FakeKernel.withInterface();
    kernel.putPeer(key(1), ['10.8.0.2/32']);
    const { svc } = service(kernel);
    const unknown = await rejected(svc.deletePeer(key(5)));
    expect(unknown).to.be.instanceOf(PeerNotFoundError);
    expect((unknown as Error).message).to.equal('Peer not found in VPN');
    await svc.deletePeer(key(1));
    expect(await rejected(svc.deletePeer(key(1)))).to.be.instanceOf(PeerNotFoundError);
  });

  it('accepts the URL-safe form of the key', async () => {
    const kernel = FakeKernel.withInterface();
    const standard = Buffer.alloc(32, 0xff).toString('base64');
    kernel.putPeer(standard, ['10.8.0.2/32']);
    await service(kernel).svc.deletePeer(standard.replace(/\//g, '_').replace(/=$/, ''));
    expect(kernel.peers()).to.have.length(0);
  });

  it('rejects a malformed key as a validation error without touching the kernel', async () => {
    const kernel = FakeKernel.withInterface();
    const error = await rejected(service(kernel).svc.deletePeer('not-a-key'));
    expect(error).to.be.instanceOf(ValidationError);
    expect(kernel.calls).to.have.length(0);
  });

  it('reports a failed clean-up after the peer is gone as CleanupFailed', async () => {
    const kernel = FakeKernel.withInterface();
    kernel.putPeer(key(1), ['10.8.0.2/32']);
    const { svc, log } = service(kernel);
    await svc.setDataCap(key(1), 5000);
    kernel.fail('quota.removeCap', kernelFailure('EBUSY', 'NFT_MSG_DELOBJ', 'object in use'));
    const error = await rejected(svc.deletePeer(key(1)));
    expect(error).to.be.instanceOf(CleanupFailedError);
    expect((error as Error).message).to.contain('object in use');
    expect(kernel.peers()).to.have.length(0);
    expect(log.lines().some((l) => l['event'] === 'peer_cleanup_failed')).to.equal(true);
  });

  it('logs the deletion with public key and ip', async () => {
    const kernel = FakeKernel.withInterface();
    kernel.putPeer(key(1), ['10.8.0.2/32']);
    const { svc, log } = service(kernel);
    await svc.deletePeer(key(1));
    expect(log.lines().find((l) => l['event'] === 'peer_deleted')).to.include({
      publicKey: key(1),
      ip: '10.8.0.2',
    });
  });
});

describe('peers/service: speed limit and data cap', () => {
  function withPeer() {
    const kernel = FakeKernel.withInterface();
    kernel.putPeer(key(1), ['10.8.0.2/32']);
    return { kernel, ...service(kernel) };
  }

  it('sets up the shaper, then limits the peer by its tunnel address with its key as userdata', async () => {
    const { kernel, svc } = withPeer();
    await svc.setSpeedLimit(key(1), 200_000);
    const ensure = kernel.calls.findIndex((c) => c.method === 'shaper.ensure');
    const set = kernel.calls.findIndex((c) => c.method === 'shaper.setLimit');
    expect(ensure).to.be.greaterThan(-1);
    expect(ensure).to.be.lessThan(set);
    expect(kernel.calls[set]!.args).to.deep.equal([
      'wg0',
      { address: '10.8.0.2', publicKey: key(1) },
      200_000,
    ]);
  });

  it('replaces a limit when set again, and removes it', async () => {
    const { kernel, svc } = withPeer();
    await svc.setSpeedLimit(key(1), 200_000);
    await svc.setSpeedLimit(key(1), 300_000);
    expect(kernel.limits.get('wg0')!.get('10.8.0.2')!.bytesPerSecond).to.equal(300_000);
    await svc.removeSpeedLimit(key(1));
    expect(kernel.limits.get('wg0')!.has('10.8.0.2')).to.equal(false);
  });

  it('checks the range 1,000 to 10^12 bytes per second (DESIGN §3)', async () => {
    const { svc } = withPeer();
    for (const bad of [999, 1e12 + 1, 1000.5, Number.NaN, -1000]) {
      expect(await rejected(svc.setSpeedLimit(key(1), bad))).to.be.instanceOf(ValidationError);
    }
    await svc.setSpeedLimit(key(1), 1000);
    await svc.setSpeedLimit(key(1), 1e12);
  });

  it('keeps the bytes used when a cap changes (DESIGN §3)', async () => {
    const { kernel, svc } = withPeer();
    await svc.setDataCap(key(1), 1_000_000);
    kernel.setUsed('10.8.0.2', 999_999);
    await svc.setDataCap(key(1), 5_000_000);
    const [entry] = await listPeers(svc, null);
    expect(entry!.dataCap).to.deep.equal({
      quotaBytes: 5_000_000,
      usedBytes: 999_999,
      enforced: true,
    });
    await svc.removeDataCap(key(1));
    expect((await listPeers(svc, null))[0]!.dataCap).to.equal(null);
  });

  it('checks the range 1 to 2^53-1 bytes (DESIGN §3)', async () => {
    const { svc } = withPeer();
    for (const bad of [0, 2 ** 53, 1.5]) {
      expect(await rejected(svc.setDataCap(key(1), bad))).to.be.instanceOf(ValidationError);
    }
    await svc.setDataCap(key(1), 1);
    await svc.setDataCap(key(1), 2 ** 53 - 1);
  });

  it('answers PeerNotFound for limits and caps of unknown peers', async () => {
    const { svc } = withPeer();
    for (const call of [
      svc.setSpeedLimit(key(7), 1000),
      svc.removeSpeedLimit(key(7)),
      svc.setDataCap(key(7), 1000),
      svc.removeDataCap(key(7)),
    ]) {
      expect(await rejected(call)).to.be.instanceOf(PeerNotFoundError);
    }
  });

  it('refuses a limit for a peer without an IPv4 /32 tunnel address', async () => {
    const kernel = FakeKernel.withInterface();
    kernel.putPeer(key(1), ['192.168.50.0/24']);
    const error = await rejected(service(kernel).svc.setSpeedLimit(key(1), 1000));
    expect(error).to.be.instanceOf(PeerWithoutAddressError);
    expect(error).to.have.property('category', 'conflict');
  });

  it('answers FacilityMissing (503 family) naming the remedy when tc is not there', async () => {
    const { kernel, svc } = withPeer();
    kernel.fail(
      'shaper.ensure',
      new FacilityUnavailableError('the HTB qdisc (sch_htb)', 'modprobe sch_htb'),
    );
    const error = await rejected(svc.setSpeedLimit(key(1), 1000));
    expect(error).to.be.instanceOf(FacilityMissingError);
    expect((error as Error).message).to.contain('sch_htb');
  });

  it("answers a 409-class conflict, with the kernel layer's advice, when the host setup keeps tc from keying a peer", async () => {
    const { kernel, svc } = withPeer();
    kernel.fail(
      'shaper.setLimit',
      new SetupConflictError(
        "wg0's subnet 10.0.0.1/8 is wider than /16; per-peer speed limits need /16 or narrower",
      ),
    );
    const error = await rejected(svc.setSpeedLimit(key(1), 1000));
    expect(error).to.be.instanceOf(HostSetupConflictError);
    expect((error as HostSetupConflictError).category).to.equal('conflict');
    expect((error as Error).message).to.contain('/16 or narrower');
  });

  it("answers FacilityMissing for nf_tables without quota objects, in the kernel layer's words", async () => {
    const { kernel, svc } = withPeer();
    kernel.fail(
      'quota.setCap',
      new FacilityUnavailableError(
        'nft_quota (nf_tables quota objects)',
        'load the kernel module: modprobe nft_quota',
      ),
    );
    const error = await rejected(svc.setDataCap(key(1), 1000));
    expect(error).to.be.instanceOf(FacilityMissingError);
    expect((error as Error).message).to.contain('nft_quota (nf_tables quota objects)');
    expect((error as Error).message).to.contain('modprobe nft_quota');
  });

  it('logs limit and cap changes with key, ip and value', async () => {
    const { svc, log } = withPeer();
    await svc.setSpeedLimit(key(1), 2000);
    await svc.setDataCap(key(1), 3000);
    await svc.removeSpeedLimit(key(1));
    await svc.removeDataCap(key(1));
    const events = log.lines().map((l) => l['event']);
    expect(events).to.include.members([
      'speed_limit_set',
      'data_cap_set',
      'speed_limit_removed',
      'data_cap_removed',
    ]);
    expect(log.lines().find((l) => l['event'] === 'speed_limit_set')).to.include({
      publicKey: key(1),
      ip: '10.8.0.2',
      bytesPerSecond: 2000,
    });
  });
});
