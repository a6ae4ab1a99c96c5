/**
 * Dual-stack peers (issue 18, DESIGN §3 "IPv6"): with an IPv6 prefix on the interface each new
 * peer also gets the lowest free /128, chosen with its IPv4 address under the same
 * serialization; the SPEC.md fields keep their meaning and the additions are peer.ipv6,
 * ipv6_address and a client config of both families. An IPv4-only interface is unchanged (the
 * rest of the unit suite holds that).
 */
import { expect } from 'chai';
import { PeerService, PoolExhaustedError } from '../../../src/peers';
import { StateStore } from '../../../src/state';
import { listPeers } from '../../support/peer-list';
import { MemoryFs } from '../../support/memory-fs';
import { FakeKernel } from '../support/fake-kernel';
import { captureLog } from '../support/log-capture';
import { rejected } from '../support/rejected';

function key(n: number): string {
  return Buffer.alloc(32, n).toString('base64');
}

/** Parses wg-quick INI text into section → key → value. */
function ini(text: string): Record<string, Record<string, string>> {
  const sections: Record<string, Record<string, string>> = {};
  let current: Record<string, string> = {};
  for (const line of text.split('\n')) {
    const header = /^\[(\w+)\]$/.exec(line);
    if (header) sections[header[1]!] = current = {};
    const pair = /^(\w+) = (.+)$/.exec(line);
    if (pair) current[pair[1]!] = pair[2]!;
  }
  return sections;
}

function dualStack(address6 = 'fd42::1/64', setup: { prefixLength?: number } = {}) {
  const kernel = FakeKernel.withInterface({ address6, ...setup });
  const [address, prefixLength] = address6.split('/');
  const log = captureLog();
  const svc = new PeerService({
    kernel,
    interfaceName: 'wg0',
    endpointHost: 'vpn.example.net',
    logger: log.logger,
    addresses6: [{ address: address!, prefixLength: Number(prefixLength) }],
  });
  return { kernel, svc, log };
}

describe('peers/service: dual-stack create (issue 18)', () => {
  it('gives a new peer the lowest free IPv4 and IPv6 addresses, allowed IPs <ip>/32 and <ip6>/128', async () => {
    const { kernel, svc } = dualStack();
    kernel.putPeer(key(1), ['10.8.0.2/32', 'fd42::2/128']);
    const created = await svc.createPeer();
    expect(created.ip).to.equal('10.8.0.3');
    expect(created.ipv6).to.equal('fd42::3');
    const inKernel = kernel.peers().find((p) => p.publicKey === created.publicKey);
    expect(inKernel?.allowedIps).to.deep.equal([
      { family: 4, address: '10.8.0.3', cidr: 32 },
      { family: 6, address: 'fd42::3', cidr: 128 },
    ]);
  });

  it('chooses each family on its own: a hole in one is filled while the other goes on', async () => {
    const { kernel, svc } = dualStack();
    kernel.putPeer(key(1), ['10.8.0.3/32', 'fd42::2/128']);
    kernel.putPeer(key(2), ['10.8.0.4/32']); // an IPv4-only peer made before IPv6 came
    const created = await svc.createPeer();
    expect([created.ip, created.ipv6]).to.deep.equal(['10.8.0.2', 'fd42::3']);
  });

  it("skips the server's own IPv6 address wherever it sits in the prefix", async () => {
    const { svc } = dualStack('fd42::2/64');
    const first = await svc.createPeer();
    const second = await svc.createPeer();
    expect([first.ipv6, second.ipv6]).to.deep.equal(['fd42::1', 'fd42::3']);
  });

  it('writes a client config with both addresses that routes both families through the tunnel', async () => {
    const { svc } = dualStack();
    const created = await svc.createPeer();
    expect(ini(created.clientConfig)).to.deep.equal({
      Interface: { PrivateKey: created.privateKey, Address: '10.8.0.2/32, fd42::2/128' },
      Peer: {
        PublicKey: created.serverPublicKey,
        Endpoint: 'vpn.example.net:51820',
        AllowedIPs: '0.0.0.0/0, ::/0',
        PersistentKeepalive: '25',
      },
    });
    expect(created.clientAllowedIps).to.equal('0.0.0.0/0, ::/0');
  });

  it('answers PoolExhausted naming the IPv6 prefix when it is full, and adds nothing', async () => {
    const { kernel, svc } = dualStack('fd42::1/120');
    for (let i = 2; i <= 0xff; i++) kernel.putPeer(key(i), [`fd42::${i.toString(16)}/128`]);
    const error = await rejected(svc.createPeer());
    expect(error).to.be.instanceOf(PoolExhaustedError);
    expect(error).to.have.property('category', 'conflict');
    expect((error as Error).message).to.contain('fd42::/120');
    expect(kernel.peers()).to.have.length(254);
  });

  it('answers PoolExhausted naming the IPv4 subnet when that one is full first', async () => {
    const { kernel, svc } = dualStack('fd42::1/64', { prefixLength: 30 });
    kernel.putPeer(key(1), ['10.8.0.2/32']);
    const error = await rejected(svc.createPeer());
    expect((error as Error).message).to.contain('10.8.0.0/30');
  });

  it('gives 100 concurrent creates 100 distinct addresses of each family, all held in the kernel', async () => {
    const { kernel, svc } = dualStack();
    const created = await Promise.all(Array.from({ length: 100 }, () => svc.createPeer()));
    const expected6 = Array.from({ length: 100 }, (_, i) => `fd42::${(i + 2).toString(16)}`);
    expect(created.map((c) => c.ipv6).sort()).to.deep.equal(expected6.sort());
    expect(new Set(created.map((c) => c.ip)).size).to.equal(100);
    for (const c of created) {
      const peer = kernel.peers().find((p) => p.publicKey === c.publicKey);
      expect(peer?.allowedIps.map((p) => p.address)).to.deep.equal([c.ip, c.ipv6]);
    }
  });

  it('with a state directory, saves both allowed IPs and keeps concurrent batches apart', async () => {
    const fs = new MemoryFs();
    const store = await StateStore.open({ dir: '/state', interfaceName: 'wg0', fs });
    const kernel = FakeKernel.withInterface({ address6: 'fd42::1/64' });
    const svc = new PeerService({
      kernel,
      interfaceName: 'wg0',
      endpointHost: 'h',
      logger: captureLog().logger,
      journal: store,
      addresses6: [{ address: 'fd42::1', prefixLength: 64 }],
    });
    const created = await Promise.all(Array.from({ length: 30 }, () => svc.createPeer()));
    expect(new Set(created.map((c) => c.ipv6)).size).to.equal(30);
    const after = await StateStore.open({ dir: '/state', interfaceName: 'wg0', fs: fs.crashed() });
    for (const c of created) {
      expect(after.state.peers.get(c.publicKey)?.allowedIps).to.deep.equal([
        `${c.ip}/32`,
        `${c.ipv6}/128`,
      ]);
    }
  });

  it('lists ipv6_address beside ip_address: the first IPv6 /128, null for a peer without one', async () => {
    const { kernel, svc } = dualStack();
    kernel.putPeer(key(1), ['10.8.0.2/32', 'fd42::2/128']);
    kernel.putPeer(key(2), ['10.8.0.3/32']);
    kernel.putPeer(key(3), ['10.8.0.4/32', 'fd42::/120']);
    const entries = await listPeers(svc, null);
    expect(entries.map((e) => [e.ipAddress, e.ipv6Address])).to.deep.equal([
      ['10.8.0.2', 'fd42::2'],
      ['10.8.0.3', null],
      ['10.8.0.4', null],
    ]);
  });
});

describe('peers/service: one limit and one cap per dual-stack peer (issue 18)', () => {
  it("hands the shaper and the quota the peer's IPv6 address with its IPv4 one", async () => {
    const { kernel, svc } = dualStack();
    const created = await svc.createPeer();
    await svc.setSpeedLimit(created.publicKey, 125_000);
    await svc.setDataCap(created.publicKey, 1_000_000);
    const ref = { address: '10.8.0.2', address6: 'fd42::2', publicKey: created.publicKey };
    const args = (method: string) => kernel.calls.find((c) => c.method === method)?.args;
    expect(args('shaper.setLimit')).to.deep.equal(['wg0', ref, 125_000]);
    expect(args('quota.setCap')).to.deep.equal(['wg0', ref, 1_000_000]);
  });

  it('removes the IPv6 part of the limit and the cap with the IPv4 one, on removal and on delete', async () => {
    const { kernel, svc } = dualStack();
    const a = await svc.createPeer();
    const b = await svc.createPeer();
    for (const peer of [a, b]) {
      await svc.setSpeedLimit(peer.publicKey, 125_000);
      await svc.setDataCap(peer.publicKey, 1_000_000);
    }
    await svc.removeSpeedLimit(a.publicKey);
    await svc.removeDataCap(a.publicKey);
    await svc.deletePeer(b.publicKey);
    const removals = kernel.calls
      .filter((c) => c.method === 'shaper.removeLimit' || c.method === 'quota.removeCap')
      .map((c) => [c.method, ...c.args]);
    expect(removals).to.deep.equal([
      ['shaper.removeLimit', 'wg0', '10.8.0.2', 'fd42::2'],
      ['quota.removeCap', 'wg0', '10.8.0.2', 'fd42::2'],
      ['shaper.removeLimit', 'wg0', '10.8.0.3', 'fd42::3'],
      ['quota.removeCap', 'wg0', '10.8.0.3', 'fd42::3'],
    ]);
  });
});

describe('peers/service: a suspended dual-stack peer passes neither family (issue 18)', () => {
  it("hands the suspension the peer's IPv6 address with its IPv4 one: suspend, resume, and delete", async () => {
    const { kernel, svc } = dualStack();
    const a = await svc.createPeer();
    const b = await svc.createPeer();
    await svc.setSuspension(a.publicKey, true);
    await svc.setSuspension(a.publicKey, false);
    await svc.setSuspension(b.publicKey, true);
    await svc.deletePeer(b.publicKey);
    const calls = kernel.calls
      .filter((c) => c.method === 'suspension.suspend' || c.method === 'suspension.resume')
      .map((c) => [c.method, ...c.args]);
    expect(calls).to.deep.equal([
      [
        'suspension.suspend',
        'wg0',
        { address: '10.8.0.2', address6: 'fd42::2', publicKey: a.publicKey },
      ],
      ['suspension.resume', 'wg0', '10.8.0.2', 'fd42::2'],
      [
        'suspension.suspend',
        'wg0',
        { address: '10.8.0.3', address6: 'fd42::3', publicKey: b.publicKey },
      ],
      ['suspension.resume', 'wg0', '10.8.0.3', 'fd42::3'],
    ]);
    // The repair before each change is handed every live peer's IPv6 address too.
    const ensure = kernel.calls.find((c) => c.method === 'suspension.ensure')?.args;
    expect(ensure?.[1]).to.deep.include({
      address: '10.8.0.2',
      address6: 'fd42::2',
      publicKey: a.publicKey,
    });
  });
});

describe('peers/service: an IPv4-only interface stays IPv4-only (issue 18)', () => {
  it('keys limits and caps on IPv4 alone, even for a peer other tools gave an IPv6 /128', async () => {
    const kernel = FakeKernel.withInterface();
    kernel.putPeer(key(1), ['10.8.0.2/32', 'fd42::2/128']);
    const svc = new PeerService({
      kernel,
      interfaceName: 'wg0',
      endpointHost: 'h',
      logger: captureLog().logger,
    });
    await svc.setSpeedLimit(key(1), 125_000);
    await svc.setDataCap(key(1), 1_000_000);
    await svc.setSuspension(key(1), true);
    await svc.deletePeer(key(1));
    const ref = { address: '10.8.0.2', publicKey: key(1) };
    const args = (method: string) => kernel.calls.find((c) => c.method === method)?.args;
    expect(args('shaper.setLimit')).to.deep.equal(['wg0', ref, 125_000]);
    expect(args('quota.setCap')).to.deep.equal(['wg0', ref, 1_000_000]);
    expect(args('shaper.removeLimit')).to.deep.equal(['wg0', '10.8.0.2']);
    expect(args('quota.removeCap')).to.deep.equal(['wg0', '10.8.0.2']);
    expect(args('suspension.suspend')).to.deep.equal(['wg0', ref]);
    expect(args('suspension.resume')).to.deep.equal(['wg0', '10.8.0.2']);
  });

  it('gives no IPv6 address and the config of before when the service has no IPv6 addresses', async () => {
    const kernel = FakeKernel.withInterface({ address6: 'fd42::1/64' });
    const svc = new PeerService({
      kernel,
      interfaceName: 'wg0',
      endpointHost: 'h',
      logger: captureLog().logger,
    });
    const created = await svc.createPeer();
    expect(created.ipv6).to.equal(null);
    expect(ini(created.clientConfig)['Interface']!['Address']).to.equal('10.8.0.2/32');
    expect(ini(created.clientConfig)['Peer']!['AllowedIPs']).to.equal('10.8.0.0/24');
    expect(kernel.peers()[0]!.allowedIps).to.have.length(1);
  });
});
