import { expect } from 'chai';
import { randomBytes } from 'node:crypto';
import { Links } from '../../src/kernel/link';
import { WireGuard } from '../../src/kernel/wireguard';
import { randomPublicKey } from '../support/keys';
import { diffDeviceAgainstDump } from '../support/wg-dump';
import {
  CLIENT_NS,
  SERVER_UNDERLAY_IP,
  type WgInterface,
  addWgPeer,
  assertInTestVm,
  createWgInterface,
  deleteLink,
  ping,
  setupClientNamespace,
  sh,
  teardownClientNamespace,
  wgShowDump,
} from './support/topology';

const SERVER_IF = 'wgk0';
const CLIENT_IF = 'wgk1';

// The netlink client against a real kernel, with `wg show <if> dump` as the independent oracle.
describe('WireGuard netlink client (real kernel)', function () {
  let wireguard: WireGuard;
  let server: WgInterface;
  let client: WgInterface;

  before(function () {
    assertInTestVm();
    setupClientNamespace();
    server = createWgInterface({ name: SERVER_IF, address: '10.8.0.1/24', listenPort: 51820 });
    client = createWgInterface({ name: CLIENT_IF, netns: CLIENT_NS, address: '10.8.0.2/24' });
    addWgPeer(SERVER_IF, undefined, {
      publicKey: client.key.publicKey,
      allowedIps: ['10.8.0.2/32'],
    });
    addWgPeer(CLIENT_IF, CLIENT_NS, {
      publicKey: server.key.publicKey,
      allowedIps: ['10.8.0.1/32'],
      endpoint: `${SERVER_UNDERLAY_IP}:51820`,
    });
    ping(CLIENT_NS, '10.8.0.1');
    wireguard = new WireGuard();
  });

  after(function () {
    wireguard?.close();
    deleteLink(SERVER_IF);
    teardownClientNamespace();
  });

  it('reads a device with one peer after a real handshake exactly as wg show dump reports it', async () => {
    const device = await wireguard.getDevice(SERVER_IF);
    const dump = wgShowDump(SERVER_IF);
    expect(diffDeviceAgainstDump(device, dump)).to.deep.equal([]);
    expect(device.peers).to.have.length(1);
    const [peer] = device.peers;
    expect(peer.lastHandshake).to.be.instanceOf(Date);
    expect(peer.rxBytes).to.be.greaterThan(0);
    expect(peer.txBytes).to.be.greaterThan(0);
    expect(peer.endpoint).to.match(/^10\.99\.0\.2:\d+$/);
  });

  it('adds 1,000 peers in one call and reads the device as wg does', async () => {
    const peers = Array.from({ length: 1000 }, (_, i) => ({
      publicKey: randomPublicKey(),
      allowedIps: [{ family: 4 as const, address: `10.9.${i >> 8}.${i & 255}`, cidr: 32 }],
    }));
    await wireguard.addPeers(SERVER_IF, peers);
    const dump = wgShowDump(SERVER_IF);
    expect(dump.peers).to.have.length(1001);
    const device = await wireguard.getDevice(SERVER_IF);
    expect(device.peers).to.have.length(1001);
    expect(diffDeviceAgainstDump(device, dump)).to.deep.equal([]);

    await wireguard.removePeers(
      SERVER_IF,
      peers.map((p) => p.publicKey),
    );
    expect(wgShowDump(SERVER_IF).peers.map((p) => p.publicKey)).to.deep.equal([
      client.key.publicKey,
    ]);
  });

  it('round-trips adding and removing a peer with keepalive and mixed-family allowed IPs', async () => {
    const key = randomPublicKey();
    await wireguard.addPeers(SERVER_IF, [
      {
        publicKey: key,
        persistentKeepalive: 25,
        allowedIps: [
          { family: 4, address: '10.8.0.77', cidr: 32 },
          { family: 6, address: 'fd00:8::77', cidr: 128 },
        ],
      },
    ]);
    const added = wgShowDump(SERVER_IF).peers.find((p) => p.publicKey === key);
    expect(added?.allowedIps.sort()).to.deep.equal(['10.8.0.77/32', 'fd00:8::77/128']);
    expect(added?.persistentKeepalive).to.equal(25);
    expect(
      diffDeviceAgainstDump(await wireguard.getDevice(SERVER_IF), wgShowDump(SERVER_IF)),
    ).to.deep.equal([]);

    await wireguard.removePeers(SERVER_IF, [key]);
    expect(wgShowDump(SERVER_IF).peers.some((p) => p.publicKey === key)).to.equal(false);
  });

  it('fails to read a missing interface with InterfaceMissing (from ENODEV) naming it', async () => {
    const error = (await wireguard.getDevice('wgmissing0').catch((e: unknown) => e)) as Error & {
      cause?: { code?: string };
    };
    expect(error.name).to.equal('InterfaceMissingError');
    expect(error.cause?.code).to.equal('ENODEV');
    expect(error.message).to.contain('wgmissing0');
  });

  it('creates, addresses and raises a WireGuard link over rtnetlink as ip reports it', async () => {
    const links = new Links();
    try {
      const index = await links.createWireGuard('wgk9');
      await links.addIpv4Address(index, { address: '10.88.0.1', prefixLength: 24 });
      await links.setUp(index);
      await wireguard.configureDevice('wgk9', { privateKey: randomBytes(32), listenPort: 51888 });
      const [ipLink] = JSON.parse(sh('ip -j -d link show wgk9')) as Array<{
        ifindex: number;
        flags: string[];
        mtu: number;
        linkinfo: { info_kind: string };
      }>;
      expect(ipLink.ifindex).to.equal(index);
      expect(ipLink.linkinfo.info_kind).to.equal('wireguard');
      expect(ipLink.flags).to.include('UP');
      expect(await links.getIpv4Addresses(index)).to.deep.equal([
        { address: '10.88.0.1', prefixLength: 24 },
      ]);
      expect(wgShowDump('wgk9').device.listenPort).to.equal(51888);
      await links.deleteLink(index);
      expect(sh('ip link show wgk9 2>&1 || true')).to.match(/does not exist/);
    } finally {
      deleteLink('wgk9');
      links.close();
    }
  });
});
